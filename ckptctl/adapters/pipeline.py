"""The one selection → rename → adapt pipeline, shared by ``convert``, ``remap`` and ``diff``.

select (``include``/``exclude``) → remap rules in order → module types decided on the renamed
names (rules first, then the target's shapes, then names) → adapters in order. Metadata work
happens at once; data work stays lazy in each entry (docs/formats/burn-store.md#pipeline).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ckptctl.adapters import AdapterContext, parse_adapter
from ckptctl.adapters._base import Chain, PlanItem, chain, plan, unique_names
from ckptctl.adapters.modules import (
    Decision,
    decide_module_types,
    module_rules_from_mapping,
    parse_module_rules,
)
from ckptctl.adapters.rename import Rename, unmatched_rules
from ckptctl.adapters.select import Select
from ckptctl.fix import Note, Option

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ckptctl.adapters.families import Built
    from ckptctl.adapters.gguf import ModelFacts
    from ckptctl.dtypes import DType
    from ckptctl.model import JSONValue, TensorEntry

    Specs = Mapping[str, tuple[DType, tuple[int, ...]]]

__all__ = ["PipelineOptions", "leading_renames", "rule_inputs", "run_pipeline"]


#: Adapters that need module-type decisions.
_NEEDS_DECISIONS = ("pytorch-to-burn", "burn-to-pytorch", "half")
#: Adapters whose output depends on a weight's layout (transposes, norm renames).
_LAYOUT = ("pytorch-to-burn", "burn-to-pytorch")
#: Names shown in a grouped warning before "...".
NAMES_SHOWN = 3


@dataclass(frozen=True)
class PipelineOptions:
    """What to do to tensor names and bytes between reading and writing (or comparing).

    Attributes:
        include: keep only tensors matching one of these regexes (Rust dialect).
        exclude: drop tensors matching any of these regexes.
        remap: ordered ``PATTERN=REPLACEMENT`` rules (Burn's KeyRemapper syntax).
        adapters: adapter names, applied in order after the remap rules.
        module_types: explicit ``REGEX=Type`` rules for the layout adapters.
        module_map: more such rules as a mapping (a ``--module-types`` JSON file's content).
        facts: the source's architecture and head counts (``gguf-to-hf``/``hf-to-gguf``).
    """

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    remap: tuple[str, ...] = ()
    adapters: tuple[str, ...] = ()
    module_types: tuple[str, ...] = ()
    module_map: Mapping[str, object] = field(default_factory=dict)
    facts: ModelFacts | None = None


def run_pipeline(
    entries: list[TensorEntry],
    options: PipelineOptions,
    target: Specs | None = None,
    modules: Mapping[str, tuple[str, Mapping[str, JSONValue]]] | None = None,
) -> tuple[list[PlanItem], list[str | Note]]:
    """Select and rename, split/fuse layer families, decide module types, run the adapters.

    Args:
        entries: the input entries (after any state-key selection).
        options: include/exclude, remap rules, adapters and module-type rules.
        target: names and shapes the output must fit, used as evidence for module types.
        modules: module path -> (class, attributes) of a whole-model file, when known.

    Returns:
        One plan item per output entry (an input left out is an item with no entry; a split
        input has one item per piece; a fuse is one item named by its first input), and
        warnings, one per kind, about module types the layout adapters may get wrong.

    Raises:
        SelectionError: a bad rule or adapter, or two tensors mapped to one name.
        UnsupportedError: a layer with no Burn counterpart.
    """
    select, rename = Select(options.include, options.exclude), Rename.parse(options.remap)
    # Leading GGUF name adapters rename before the rules (which are written on their names),
    # so module types are decided on their output.
    lead = leading_renames(options.adapters)
    renamers = chain(*(parse_adapter(a, AdapterContext(facts=options.facts)) for a in lead))
    stage1 = _renamed(entries, select, renamers, rename)
    renamed = [item.entry for item in stage1 if item.entry is not None]
    warnings: list[str | Note] = _rule_warnings(rule_inputs(entries, options, renamers), rename)
    rest = options.adapters[len(lead) :]
    names = [a.strip().lower() for a in rest]
    rules = parse_module_rules(options.module_types)
    if options.module_map:
        rules += module_rules_from_mapping(options.module_map)
    direction = next((a for a in names if a in _LAYOUT), None)
    placed: dict[str, list[Built]] | None = None
    decisions: dict[str, Decision] = {}
    staged = renamed
    if direction is not None:
        # Only a layout adapter restructures families; most converts never import the module.
        from ckptctl.adapters.families import fit_target_names, restructure

        family = restructure(renamed, direction, rules=rules, modules=modules, target=target)
        placed, warnings = family.placed, warnings + family.warnings
        staged = [b.entry for built in placed.values() for b in built]
        decisions = {
            b.entry.name: Decision(b.entry.name, b.module_type, "family", done=True)
            for built in placed.values()
            for b in built
            if b.module_type is not None
        }
    adapters: Chain = chain()
    if rest:
        context = AdapterContext(facts=options.facts)
        if any(a in _NEEDS_DECISIONS for a in names):
            todo = [e for e in staged if e.name not in decisions]
            found = decide_module_types(todo, target=target, rules=rules)
            context = replace(context, decisions={**found, **decisions})
            if direction is not None:
                warnings += _uncertain(todo, found)
        adapters = chain(*(
            parse_adapter(a, replace(context, before=options.adapters[: len(lead) + i],
                                     after=rest[i + 1 :]))
            for i, a in enumerate(rest)
        ))  # fmt: skip
    # Not refused here: the check below names the input tensors and blames rules or adapters.
    stage2 = {item.source: item for item in plan(staged, adapters, unique=False)}
    merged: list[PlanItem] = []
    original = {item.entry.name: item for item in stage1 if item.entry is not None}
    for item in stage1:
        if item.entry is None:
            merged.append(item)
            continue
        pieces = placed.get(item.entry.name, []) if placed is not None else None
        if pieces is None:
            second = stage2[item.entry.name]
            merged.append(PlanItem(item.source, second.entry, item.actions + second.actions))
            continue
        for built in pieces:
            second = stage2[built.entry.name]
            first = original[built.sources[0]]  # the row names the tensor it reads from
            merged.append(
                PlanItem(first.source, second.entry, first.actions + built.actions + second.actions)
            )
    if direction is not None:
        merged = fit_target_names(merged, direction, rules, target)
    hint = Note(
        "change the {fix0} rules or adapters so that names stay unique",
        (Option("remap", takes_value=True),),
    )
    return list(unique_names(merged, hint)), warnings


def leading_renames(adapters: tuple[str, ...]) -> tuple[str, ...]:
    """The GGUF name adapters (``gguf-to-hf``, ``hf-to-gguf``) at the head of ``adapters``:
    they run before the remap rules."""
    from ckptctl.adapters.gguf import GGUF_ADAPTERS

    count = 0
    for spec in adapters:
        if spec.strip().lower().partition(":")[0] not in GGUF_ADAPTERS:
            break
        count += 1
    return adapters[:count]


def rule_inputs(
    entries: list[TensorEntry], options: PipelineOptions, renamers: Chain | None = None
) -> list[str]:
    """The names the remap rules see: selected, then renamed by the leading GGUF adapters."""
    select = Select(options.include, options.exclude)
    if renamers is None:
        lead = leading_renames(options.adapters)
        renamers = chain(*(parse_adapter(a, AdapterContext(facts=options.facts)) for a in lead))
    items = _renamed(entries, select, renamers, chain(), unique=False)
    return [item.entry.name for item in items if item.entry is not None]


def _renamed(
    entries: list[TensorEntry],
    select: Select,
    renamers: Chain,
    rename: Rename | Chain,
    *,
    unique: bool = True,
) -> list[PlanItem]:
    """Select, rename by the leading GGUF adapters, then by the remap rules: one item per input
    (an input cut into experts has one per expert; stacked experts are one item, expert 0's).

    Raises:
        SelectionError: two tensors end up with one name (``unique``).
    """
    if not renamers.adapters:
        return plan(entries, chain(select, rename), unique=unique)
    from ckptctl.adapters.gguf import split_experts, stack_experts

    chosen = plan(entries, select, unique=False)
    pieces, origin = split_experts([i.entry for i in chosen if i.entry is not None], renamers)
    named = [
        PlanItem(origin[item.source][0], item.entry, (origin[item.source][1], *item.actions))
        if item.source in origin
        else item
        for item in plan(pieces, renamers, unique=False)
    ]
    by_source: dict[str, list[PlanItem]] = {}
    for item in stack_experts(named):
        by_source.setdefault(item.source, []).append(item)
    out: list[PlanItem] = []
    for first in chosen:
        if first.entry is None:
            out.append(first)
        for item in by_source.get(first.source, []) if first.entry is not None else []:
            entry, actions = rename.apply(item.entry) if item.entry else (None, ())
            out.append(PlanItem(first.source, entry, first.actions + item.actions + actions))
    if not unique:
        return out
    hint = Note(
        "change the {fix0} rules so that every tensor keeps a unique name",
        (Option("remap", takes_value=True),),
    )
    return list(unique_names(out, hint))


def _short_names(entries: list[TensorEntry]) -> str:
    """``q_proj, k_proj, v_proj, ...``: the owning modules' names, first few, each once."""
    names = list(dict.fromkeys(e.name.rsplit(".", 2)[-2] if "." in e.name else e.name
                               for e in entries))  # fmt: skip
    return ", ".join(names[:NAMES_SHOWN]) + (", ..." if len(names) > NAMES_SHOWN else "")


def _uncertain(entries: list[TensorEntry], decisions: Mapping[str, Decision]) -> list[str | Note]:
    """One warning per kind of decision the layout adapters may get wrong, with a count."""
    square, untyped, norms = [], [], []
    by_type: dict[str, list[TensorEntry]] = {}  # typed by name only, shape not square
    for entry in entries:
        decision = decisions.get(entry.name)
        if decision is None:
            continue
        last = entry.name.rsplit(".", 1)[-1]
        if decision.flagged and decision.module_type is not None:
            if len(entry.shape) == 2 and entry.shape[0] == entry.shape[1]:
                square.append(entry)
            else:  # e.g. GPT-2's Conv1D, which only its name tells from a Linear
                by_type.setdefault(decision.module_type, []).append(entry)
        elif decision.flagged or (
            decision.module_type is None and last == "weight" and len(entry.shape) == 2
        ):
            untyped.append(entry)
        elif decision.module_type is None and last == "weight" and len(entry.shape) == 1:
            norms.append(entry)
    declare = (Option("module_types", takes_value=True),)
    out: list[str | Note] = []
    if square:
        n = len(square)
        out.append(
            Note(
                f"{n} square weight{'s' if n != 1 else ''} typed by name only "
                f"({_short_names(square)}): confirm with {{fix0}}",
                declare,
            )
        )
    for module_type, typed in sorted(by_type.items()):
        n = len(typed)
        out.append(
            Note(
                f"{n} {module_type} weight{'s' if n != 1 else ''} typed by name only "
                f"({_short_names(typed)}): confirm with {{fix0}}",
                declare,
            )
        )
    if untyped:
        n = len(untyped)
        out.append(
            Note(
                f"{n} rank-2 weight{'s' if n != 1 else ''} with no module type left as is "
                f"({_short_names(untyped)}): declare with {{fix0}}",
                declare,
            )
        )
    if norms:
        n = len(norms)
        out.append(
            Note(
                f"{n} 1-D weight{'s' if n != 1 else ''} with no module type kept as weight/bias, "
                f"not renamed gamma/beta ({_short_names(norms)}): declare with {{fix0}}",
                declare,
            )
        )
    return out


def _rule_warnings(names: list[str], rename: Rename) -> list[str | Note]:
    """A warning for each remap rule that renames nothing."""
    return [
        f"remap rule #{rule.number} '{rule.pattern}' matches no tensor name"
        for rule in unmatched_rules(names, rename.rules)
    ]

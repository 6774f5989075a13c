"""The one selection → rename → adapt pipeline, shared by ``convert``, ``remap`` and ``diff``.

select (``include``/``exclude``) → remap rules in order → module types decided on the renamed
names (rules first, then the target's shapes, then names) → adapters in order. Metadata work
happens at once; data work stays lazy in each entry (burn-store spec §4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.adapters import AdapterContext, Chain, PlanItem, chain, parse_adapter, plan
from ckptctl.adapters.modules import (
    decide_module_types,
    module_rules_from_mapping,
    parse_module_rules,
)
from ckptctl.adapters.rename import Rename
from ckptctl.adapters.select import Select
from ckptctl.errors import SelectionError
from ckptctl.fix import Note, Option

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ckptctl.dtypes import DType
    from ckptctl.model import TensorEntry

    Specs = Mapping[str, tuple[DType, tuple[int, ...]]]

__all__ = ["PipelineOptions", "run_pipeline"]


#: Adapters that need module-type decisions.
_NEEDS_DECISIONS = ("pytorch-to-burn", "burn-to-pytorch", "half")


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
    """

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    remap: tuple[str, ...] = ()
    adapters: tuple[str, ...] = ()
    module_types: tuple[str, ...] = ()
    module_map: Mapping[str, object] = field(default_factory=dict)


def run_pipeline(
    entries: list[TensorEntry],
    options: PipelineOptions,
    target: Specs | None = None,
) -> tuple[list[PlanItem], list[str]]:
    """Select and rename, decide module types on the new names, then run the adapters.

    Args:
        entries: the input entries (after any state-key selection).
        options: include/exclude, remap rules, adapters and module-type rules.
        target: names and shapes the output must fit, used as evidence for module types.

    Returns:
        One plan item per input entry (output entry or None, and the actions taken), and
        warnings about module types decided on weak evidence.

    Raises:
        SelectionError: a bad rule or adapter, or two tensors mapped to one name.
    """
    first = chain(Select(options.include, options.exclude), Rename.parse(options.remap))
    stage1 = plan(entries, first)
    renamed = [item.entry for item in stage1 if item.entry is not None]
    warnings: list[str] = []
    adapters: Chain = chain()
    if options.adapters:
        context = AdapterContext()
        if any(a.strip().lower() in _NEEDS_DECISIONS for a in options.adapters):
            rules = parse_module_rules(options.module_types)
            if options.module_map:
                rules += module_rules_from_mapping(options.module_map)
            decisions = decide_module_types(renamed, target=target, rules=rules)
            context = AdapterContext(decisions=decisions)
            warnings += [
                f"{d.name}: {d.module_type or 'no module type'} decided by {d.evidence} only;"
                " check it (a square weight cannot be told from its shape)"
                for d in decisions.values()
                if d.flagged
            ]
        adapters = chain(*(parse_adapter(a, context) for a in options.adapters))
    stage2 = {item.source: item for item in plan(renamed, adapters)}
    merged: list[PlanItem] = []
    for item in stage1:
        if item.entry is None:
            merged.append(item)
            continue
        second = stage2[item.entry.name]
        merged.append(PlanItem(item.source, second.entry, item.actions + second.actions))
    _refuse_collisions(merged)
    return merged, warnings


def _refuse_collisions(items: list[PlanItem]) -> None:
    seen: dict[str, str] = {}
    for item in items:
        if item.entry is not None and seen.setdefault(item.entry.name, item.source) != item.source:
            raise SelectionError(
                f"tensors {seen[item.entry.name]!r} and {item.source!r} would both be named "
                f"{item.entry.name!r}",
                hint=Note(
                    "change the {fix0} rules or adapters so that names stay unique",
                    (Option("remap"),),
                ),
            )

"""Name matching: Burn's "Did you mean" (Jaro) and remap-rule inference.

Burn's algorithm: ``docs/formats/burn-store.md#did-you-mean``.

Used by the Tensor Loading Summary (``ops.summary``) and by ``diff``: :func:`did_you_mean`
suggests the most similar unused name for a missing one, exactly as Burn does;
:func:`suggest_fixes` infers the ``--remap`` rules and the adapter that would make more source
names fit the target, each rule verified on the real names before it is proposed.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import TYPE_CHECKING

from ckptctl.adapters.families import TO_BURN, TO_TORCH, is_enum_variant_segment
from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
from ckptctl.adapters.rename import RemapRule, parse_rules, remap_name
from ckptctl.dtypes import DType
from ckptctl.errors import CkptError
from ckptctl.fix import Option
from ckptctl.model import ComputedData, TensorEntry

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from ckptctl.adapters import PlanItem

Shape = tuple[int, ...]

#: Minimum Jaro similarity for a "Did you mean" suggestion (Burn: 0.7).
SUGGESTION_THRESHOLD = 0.7
#: How many remap rules :func:`suggest_fixes` chains at most.
MAX_FIX_RULES = 4
#: How many candidate rules are tried per round (the most frequent first).
MAX_CANDIDATES = 30

_NORM_TO_BURN = {"weight": "gamma", "bias": "beta"}
_TO_TORCH = {v: k for k, v in _NORM_TO_BURN.items()}
_NORM_PARAMS = frozenset(_NORM_TO_BURN) | frozenset(_TO_TORCH)
# what the simulated entries of _simulate hold: never read (the pipeline is metadata only)
_NO_DATA = ComputedData(lambda: b"")


def jaro(s1: str, s2: str) -> float:
    """Jaro similarity exactly as ``textdistance`` 1.1.1 ``nstr::jaro``, as Burn computes it.

    Not the textbook transposition count: a match whose position is before the previous
    match's position counts one transposition, and the count is not halved.
    """
    len1, len2 = len(s1), len(s2)
    if len1 == 0 and len2 == 0:
        return 1.0
    if len1 == 0 or len2 == 0:
        return 0.0
    if len1 == 1 and len2 == 1:
        return 1.0 if s1 == s2 else 0.0
    window = max(len1, len2) // 2 - 1
    used = [False] * len2
    matches = 0
    transpositions = 0
    previous = 0
    for i, char in enumerate(s1):
        for j in range(max(0, i - window), min(len2 - 1, i + window) + 1):
            if not used[j] and s2[j] == char:
                used[j] = True
                matches += 1
                if j < previous:
                    transpositions += 1
                previous = j
                break
    if matches == 0:
        return 0.0
    return ((matches / len1) + (matches / len2) + ((matches - transpositions) / matches)) / 3


def strip_enum_variant(name: str) -> str | None:
    """Remove the first inner segment that looks like an enum variant, or None if none does."""
    parts = name.split(".")
    for i in range(1, len(parts) - 1):
        if parts[i] and is_enum_variant_segment(parts[i]):
            return ".".join(parts[:i] + parts[i + 1 :])
    return None


def did_you_mean(missing: str, unused: Sequence[str]) -> str | None:
    """Burn's suggestion for one missing name (docs/formats/burn-store.md#did-you-mean).

    Args:
        missing: the missing target name.
        unused: the unused source names, sorted (ties keep this order).

    Returns:
        The enum-stripped name when it is unused, else the most Jaro-similar unused name with
        similarity >= 0.7, else None.
    """
    stripped = strip_enum_variant(missing)
    if stripped is not None and stripped in unused:
        return stripped
    best: str | None = None
    best_score = SUGGESTION_THRESHOLD
    for candidate in unused:
        score = jaro(missing, candidate)
        # strict '>' after an initial '>=' keeps the first of equal scores (a stable sort)
        if (best is None and score >= best_score) or score > best_score:
            best, best_score = candidate, score
    return best


def _candidates(missing: Sequence[str], unused: Sequence[str]) -> Counter[tuple[str, str]]:
    """Remap rules (pattern, replacement) that would turn some unused name into a missing one."""
    found: Counter[tuple[str, str]] = Counter()
    missing_set, unused_set = set(missing), set(unused)
    for name in unused:  # a prefix to remove (module., _orig_mod., model.)
        parts = name.split(".")
        for k in range(1, len(parts)):
            if ".".join(parts[k:]) in missing_set:
                found["^" + re.escape(".".join(parts[:k])) + r"\.", ""] += 1
    for name in missing:  # a prefix to add
        parts = name.split(".")
        for k in range(1, len(parts)):
            if ".".join(parts[k:]) in unused_set:
                found["^", ".".join(parts[:k]) + "."] += 1
    # one segment renamed (fc -> fc1, layer -> layers): index missing names by the others
    index: dict[tuple[int, tuple[str, ...]], list[str]] = {}
    for name in missing:
        parts = name.split(".")
        for i in range(len(parts)):
            index.setdefault((i, (*parts[:i], "*", *parts[i + 1 :])), []).append(parts[i])
    for name in unused:
        parts = name.split(".")
        last = len(parts) - 1
        for i, old in enumerate(parts):
            key = (i, (*parts[:i], "*", *parts[i + 1 :]))
            for new in index.get(key, ()):
                if i == last and {old, new} <= _NORM_PARAMS:
                    continue  # weight<->gamma is the layout adapter's job, not a remap
                if _moves_a_role(old, new):
                    continue  # out_proj -> key, norm1 -> norm_1: the family adapter's job
                esc = re.escape(old)
                if last == 0:
                    found["^" + esc + "$", new] += 1
                elif i == 0:
                    found["^" + esc + r"\.", new + "."] += 1
                elif i == last:
                    found[r"\." + esc + "$", "." + new] += 1
                else:
                    found[r"\." + esc + r"\.", "." + new + "."] += 1
    return found


#: Segment names that are module roles inside a layer family (``adapters.families``): a remap
#: rule must never move one onto another (``out_proj`` -> ``key`` writes the output projection
#: into the key; ``norm1`` -> ``norm_1`` is wrong for a pre-norm layer). Only these renames
#: are the same role under both names.
_ROLES = frozenset({
    "in_proj_weight", "in_proj_bias", "out_proj", "query", "key", "value", "output",
    "q_proj", "k_proj", "v_proj", "o_proj", "self_attn", "multihead_attn", "cross_attn", "mha",
    "linear1", "linear2", "linear_inner", "linear_outer", "pwff",
    "norm1", "norm2", "norm3", "norm_1", "norm_2", "norm_3",
    "input_gate", "forget_gate", "cell_gate", "output_gate", "reset_gate", "update_gate",
    "new_gate", "gate", "input_transform", "hidden_transform", "forward", "reverse",
})  # fmt: skip
_SAME_ROLE = frozenset({
    ("out_proj", "output"), ("out_proj", "o_proj"), ("o_proj", "output"), ("q_proj", "query"),
    ("k_proj", "key"), ("v_proj", "value"), ("multihead_attn", "cross_attn"),
})  # fmt: skip


def _moves_a_role(old: str, new: str) -> bool:
    if old == new or old not in _ROLES or new not in _ROLES:
        return False
    return (old, new) not in _SAME_ROLE and (new, old) not in _SAME_ROLE


def _fits(shape: Shape | None, want: Shape) -> bool:
    """Same shape, or a rank-2 transpose the layout adapter makes."""
    return shape == want or (shape is not None and len(want) == 2 and shape == want[::-1])


def _fit(names: Iterable[str], target: Mapping[str, Shape]) -> int:
    return sum(1 for n in names if n in target)


def _best_rule(
    names: list[str], target: Mapping[str, Shape], number: int, shapes: Sequence[Shape]
) -> tuple[RemapRule, list[str]] | None:
    present = set(names)
    missing = [t for t in target if t not in present]
    unused = [n for n in names if n not in target]
    base = _fit(names, target)
    best: tuple[int, RemapRule, list[str]] | None = None
    for (pattern, replacement), _ in _candidates(missing, unused).most_common(MAX_CANDIDATES):
        rule = parse_rules([f"{pattern.replace('=', chr(92) + '=')}={replacement}"])[0]
        renamed = [rule.apply(n) for n in names]
        if len(set(renamed)) < len(renamed):
            continue  # the rule would make two tensors collide
        if any(
            new != n and new in target and not _fits(shape, target[new])
            for n, new, shape in zip(names, renamed, shapes, strict=True)
        ):
            continue  # the rule renumbers or renames into a shape error
        gain = _fit(renamed, target) - base
        if gain > 0 and (best is None or gain > best[0]):
            best = (gain, RemapRule(rule.pattern, rule.replacement, number), renamed)
    return None if best is None else (best[1], best[2])


def ranked_suggestion(
    fixes: Sequence[Option], *, forward: bool = False, origins: Mapping[str, str] | None = None
) -> Callable[[str, Sequence[str]], str | None]:
    """A "Did you mean" that ranks candidates first by the inferred ``remap`` rules (they are
    verified), then by an exact suffix match (``module.bn.bias`` for ``bn.bias``), then by
    Burn's Jaro similarity (at least 0.7, :func:`did_you_mean`).

    The rules turn source names into target names: by default the name looked up is a target
    name and the candidates are source names; ``forward`` is the other way round. ``origins``
    (target name -> source name, :func:`adapter_origins`) ranks first: the tensor a proposed
    split or fuse builds the missing one from. A Jaro guess that swaps module roles
    (``key`` for ``out_proj``) is no suggestion.
    """
    rules = parse_rules([f.value for f in fixes if f.name == "remap" and f.value is not None])
    made = origins or {}

    def suggest(missing: str, unused: Sequence[str]) -> str | None:
        if made.get(missing) in unused:  # what the proposed adapter builds it from
            return made[missing]
        if rules and forward:
            renamed = remap_name(missing, rules)[0]
            if renamed in unused:
                return renamed
        elif rules:
            for name in unused:
                if remap_name(name, rules)[0] == missing:
                    return name
        dotted = "." + missing
        suffixed = [n for n in unused if n.endswith(dotted) or missing.endswith("." + n)]
        if suffixed:
            return min(suffixed, key=len)
        guess = did_you_mean(missing, unused)
        kinds = {_NORM_TO_BURN.get(p, p) for p in (missing.rpartition(".")[2],
                 (guess or "").rpartition(".")[2])}  # fmt: skip
        if guess is not None and len(kinds) == 2 and kinds <= {"gamma", "beta"}:
            return None  # a bias is no weight: 'lm_head.bias' for 'lm_head.decoder.weight'
        if guess is not None and _swaps_roles(missing, guess):
            return None  # 'attn.key.bias' is not 'attn.out_proj.bias' however alike they look
        return guess

    return suggest


def _swaps_roles(a: str, b: str) -> bool:
    """Whether two names differ in a segment that names two different module roles."""
    left, right = a.split("."), b.split(".")
    return any(_moves_a_role(x, y) for x, y in zip(left, right, strict=False)) or any(
        _moves_a_role(x, y) for x, y in zip(reversed(left), reversed(right), strict=False)
    )


def suggest_fixes(
    missing: Sequence[str],
    unused: Sequence[str],
    source: Mapping[str, Shape],
    target: Mapping[str, Shape],
    *,
    given: Sequence[str] = (),
) -> list[Option]:
    """The ``remap`` rules and ``adapters`` that would make more source tensors fit the target.

    Detects a prefix added or removed (``module.``, ``_orig_mod.``, ``model.``), a consistent
    segment rename (``fc.`` -> ``fc1.``), norm ``weight``/``bias`` versus ``gamma``/``beta``, and
    rank-2 shapes ``[a, b]`` versus ``[b, a]``. Every proposed ``--remap`` rule is verified: applied
    (with the ones before it) to all source names it must increase the number of target names
    found, must not make two names collide, must rename no tensor to a name the target lacks
    (a rule renames exactly the tensors it claims) and must agree with the structural match
    (``ops._structure``): no tensor moves into a module another source module was proven to
    fill, or one several could. An adapter in ``given`` is never suggested again.

    Args:
        missing: target names not found in the source.
        unused: source names that are no target name.
        source: source shapes by name (all source tensors).
        target: target shapes by name.

    Returns:
        Options such as ``Option("remap", "^fc\\.=fc1.")`` and
        ``Option("adapters", "pytorch-to-burn")`` (the CLI spells them ``--remap``, ``--adapter``).
    """
    given_names = {g.strip().lower() for g in given}
    family = None if given_names & {TO_BURN, TO_TORCH} else _family_adapter(source, target)
    if family is not None:  # split/fuse first: rules are then inferred on what it makes
        adapter, simulated = family
        missing = [t for t in target if t not in simulated]
        unused = [n for n in simulated if n not in target]
        fixes = _rules(list(simulated), list(simulated.values()), target, bool(missing and unused))
        rules = [f.value for f in fixes if f.value is not None]
        after = _simulate(source, adapter, target, tuple(rules))
        if after is None or _fit(after, target) <= _fit(simulated, target):
            fixes = []  # the rules do not commute with the adapter: propose the adapter alone
        return [*fixes, Option("adapters", adapter)]
    fixes = _rules(list(source), list(source.values()), target, bool(missing and unused))
    fixes = _vetted(fixes, source, target)
    names = [n for n in source]
    for fix in fixes:
        rule = parse_rules([fix.value or ""])[0]
        names = [rule.apply(n) for n in names]
    renamed = dict(zip(names, source.values(), strict=True))
    hint = _adapter_hint(renamed, target)
    if hint is not None and hint not in given_names:
        fixes.append(Option("adapters", hint))
    return fixes


def _vetted(fixes: list[Option], source: Mapping[str, Shape],
            target: Mapping[str, Shape]) -> list[Option]:  # fmt: skip
    """The leading rules that rename only into target names the structure allows."""
    from ckptctl.ops._structure import match_modules

    matches, ambiguous = match_modules(source, target)
    proven = {m.target: m.source for m in matches}
    unsure = {a.target for a in ambiguous}
    names = list(source)
    kept: list[Option] = []
    for fix in fixes:
        rule = parse_rules([fix.value or ""])[0]
        renamed = [rule.apply(n) for n in names]
        for old, new in zip(names, renamed, strict=True):
            if old == new:
                continue
            module, src_module = new.rpartition(".")[0], old.rpartition(".")[0]
            if (
                (new not in target and _norm_renamed(new) not in target)
                or module in unsure
                or proven.get(module, src_module) != src_module
            ):
                return kept  # over-broad, or moves a tensor into another module's place
        kept.append(fix)
        names = renamed
    return kept


def _rules(
    names: list[str], shapes: list[Shape], target: Mapping[str, Shape], wanted: bool
) -> list[Option]:
    fixes: list[Option] = []
    if not wanted:
        return fixes
    for number in range(1, MAX_FIX_RULES + 1):
        found = _best_rule(names, target, number, shapes)
        if found is None:
            break
        rule, names = found
        fixes.append(Option("remap", f"{rule.pattern}={rule.replacement}"))
    return fixes


def adapter_origins(fixes: Sequence[Option], source: Mapping[str, Shape],
                    target: Mapping[str, Shape]) -> dict[str, str]:  # fmt: skip
    """Output name -> source name under the proposed ``remap`` rules and layout adapter."""
    adapter = next((f.value for f in fixes if f.name == "adapters"), None)
    if adapter not in (TO_BURN, TO_TORCH):
        return {}
    remap = tuple(f.value for f in fixes if f.name == "remap" and f.value is not None)
    items = _plan(source, adapter, target, remap)
    return {} if items is None else {i.entry.name: i.source for i in items if i.entry}


def _plan(
    source: Mapping[str, Shape], adapter: str, target: Mapping[str, Shape], remap: tuple[str, ...]
) -> list[PlanItem] | None:
    entries = [
        TensorEntry(n, DType.F32, s, math.prod(s) * 4, None, _NO_DATA) for n, s in source.items()
    ]
    specs = {n: (DType.F32, s) for n, s in target.items()}
    try:
        items, _ = run_pipeline(entries, PipelineOptions(remap=remap, adapters=(adapter,)), specs)
    except CkptError:
        return None
    return items


def _simulate(
    source: Mapping[str, Shape],
    adapter: str,
    target: Mapping[str, Shape],
    remap: tuple[str, ...] = (),
) -> dict[str, Shape] | None:
    """Names and shapes ``adapter`` (after ``remap``) would make of ``source``, from metadata
    alone (nothing is read), or None when it refuses them."""
    items = _plan(source, adapter, target, remap)
    if items is None:
        return None
    return {i.entry.name: i.entry.shape for i in items if i.entry is not None}


def _family_adapter(
    source: Mapping[str, Shape], target: Mapping[str, Shape]
) -> tuple[str, dict[str, Shape]] | None:
    """The layout adapter whose splits and fuses (``adapters.families``) make more source
    tensors fit the target, and what it makes; None when no layer family is involved."""
    base = sum(_fits(s, target[n]) for n, s in source.items() if n in target)
    best: tuple[int, str, dict[str, Shape]] | None = None
    for adapter in (TO_BURN, TO_TORCH):
        simulated = _simulate(source, adapter, target)
        if simulated is None or (
            len(simulated) == len(source)
            and set(simulated) <= {*source, *(_norm_renamed(n) for n in source)}
        ):
            continue  # refused, or no split/fuse/family rename: the plain rules below apply
        score = sum(simulated[n] == target[n] for n in simulated if n in target)
        if score > base and (best is None or score > best[0]):
            best = (score, adapter, simulated)
    return None if best is None else (best[1], best[2])


def _norm_renamed(name: str) -> str:
    prefix, _, param = name.rpartition(".")
    new = _NORM_TO_BURN.get(param) or _TO_TORCH.get(param) or param
    return f"{prefix}.{new}" if prefix else new


def _adapter_hint(source: Mapping[str, Shape], target: Mapping[str, Shape]) -> str | None:
    to_burn = to_torch = 0
    for name in source:
        prefix, _, param = name.rpartition(".")
        base = f"{prefix}." if prefix else ""
        burn = _NORM_TO_BURN.get(param)
        if burn and name not in target and base + burn in target:
            to_burn += 1
        torch = _TO_TORCH.get(param)
        if torch and name not in target and base + torch in target:
            to_torch += 1
    transposed = sum(
        1
        for name, shape in source.items()
        if len(shape) == 2
        and shape[0] != shape[1]
        and target.get(name) == (shape[1], shape[0])
        and name.endswith("weight")
    )
    if to_torch > to_burn:
        return "burn-to-pytorch"
    if to_burn or transposed:
        return "pytorch-to-burn"
    return None

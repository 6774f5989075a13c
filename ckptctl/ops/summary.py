"""The Tensor Loading Summary: converted tensors checked against a target (burn-store spec §5).

:func:`summarize` classifies every name the way Burn's ``ApplyResult`` does (§5.1):

* ``applied`` -- target names found in the source with the target's shape (target order);
* ``skipped`` -- target names present in the source but excluded by the filter (sorted);
* ``missing`` -- target names not found in the source, filtered or not (sorted), each with a
  "Did you mean" suggestion computed with Burn's algorithm (§5.4, :func:`did_you_mean`);
* ``unused`` -- source names that are no target name (sorted);
* ``errors`` -- shape mismatches (target order); an errored name is neither missing nor unused.

ckptctl extras: ``dtype_notes`` (source and target dtypes differ; Burn never checks dtypes)
and ``fixes`` -- ready-to-paste CLI options from :func:`suggest_fixes`. With an ``alternative``
lookup (Burn's norm ``gamma`` -> ``weight`` fallback, §1.3) the source name found through the
alternative counts as used, unless ``burn_compat`` reproduces Burn's quirk of listing it as
unused.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from typing import TYPE_CHECKING

from ckptctl.adapters.rename import RemapRule, parse_rules
from ckptctl.report.summary import (
    DISPLAY_LIMIT,
    DTypeNote,
    LoadingSummary,
    MissingTensor,
    Shape,
    SummaryError,
    SummaryErrorKind,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from ckptctl.dtypes import DType
    from ckptctl.model import TensorEntry

#: Minimum Jaro similarity for a "Did you mean" suggestion (Burn: 0.7).
SUGGESTION_THRESHOLD = 0.7
#: How many remap rules :func:`suggest_fixes` chains at most.
MAX_FIX_RULES = 4
#: How many candidate rules are tried per round (the most frequent first).
MAX_CANDIDATES = 30

_NORM_TO_BURN = {"weight": "gamma", "bias": "beta"}
_TO_TORCH = {v: k for k, v in _NORM_TO_BURN.items()}
_NORM_PARAMS = frozenset(_NORM_TO_BURN) | frozenset(_TO_TORCH)


def specs_of(entries: Iterable[TensorEntry]) -> dict[str, tuple[DType, Shape]]:
    """``name -> (dtype, shape)`` for entries (what :func:`summarize` compares)."""
    return {e.name: (e.dtype, e.shape) for e in entries}


def jaro(s1: str, s2: str) -> float:
    """Jaro similarity exactly as ``textdistance`` 1.1.1 ``nstr::jaro`` (Burn, spec §5.4).

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


def is_enum_variant_segment(segment: str) -> bool:
    """Burn's CamelCase test (§5.4 step 1): ``BaseConv`` yes, ``conv``/``X``/``FC`` no."""
    return (
        len(segment.encode()) > 1 and segment[0].isupper() and any(c.islower() for c in segment[1:])
    )


def strip_enum_variant(name: str) -> str | None:
    """Remove the first inner segment that looks like an enum variant, or None if none does."""
    parts = name.split(".")
    for i in range(1, len(parts) - 1):
        if parts[i] and is_enum_variant_segment(parts[i]):
            return ".".join(parts[:i] + parts[i + 1 :])
    return None


def did_you_mean(missing: str, unused: Sequence[str]) -> str | None:
    """Burn's suggestion for one missing name (§5.4).

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


def summarize(
    source: Mapping[str, tuple[DType, Shape]],
    target: Mapping[str, tuple[DType, Shape]],
    *,
    include: Callable[[str], bool] | None = None,
    alternative: Callable[[str], str | None] | None = None,
    burn_compat: bool = False,
    containers: Mapping[str, str] | None = None,
    suggest_limit: int | None = DISPLAY_LIMIT,
    with_fixes: bool = True,
) -> LoadingSummary:
    """Classify converted tensors against a target, like Burn's ``ApplyResult`` (§5.1).

    Args:
        source: converted tensors, ``name -> (dtype, shape)``.
        target: the checkpoint the output must fit, in its (traversal) order.
        include: filter on target names; False means *skipped* (when present in the source).
        alternative: fallback name lookup for a target name absent from the source
            (Burn's norm ``gamma`` -> ``weight``).
        burn_compat: list sources found through ``alternative`` as unused, as Burn does.
        containers: target name -> container stack (``Struct:Model.Enum:Block``), if known.
        suggest_limit: compute "Did you mean" for this many missing names (None: all).
        with_fixes: compute :func:`suggest_fixes` (off for byte-for-byte Burn output).

    Returns:
        The summary.

    Example:
        >>> from ckptctl.dtypes import DType
        >>> s = summarize({"a": (DType.F32, (2,))}, {"a": (DType.F32, (3,))})
        >>> s.errors[0].expected, s.errors[0].found
        ((3,), (2,))
    """
    applied: list[str] = []
    skipped: list[str] = []
    missing: list[str] = []
    errors: list[SummaryError] = []
    notes: list[DTypeNote] = []
    consumed: set[str] = set()
    for name, (dtype, shape) in target.items():
        found = name if name in source else None
        if found is None and alternative is not None:
            alt = alternative(name)
            if alt is not None and alt in source:
                found = alt
        if found is None:
            missing.append(name)
            continue
        if not burn_compat:
            consumed.add(found)
        if include is not None and not include(name):
            skipped.append(name)
            continue
        src_dtype, src_shape = source[found]
        if src_shape != shape:
            errors.append(
                SummaryError(name, SummaryErrorKind.SHAPE_MISMATCH, expected=shape, found=src_shape)
            )
            continue
        applied.append(name)
        if src_dtype != dtype:
            notes.append(DTypeNote(name, dtype, src_dtype))
    unused = sorted(n for n in source if n not in target and n not in consumed)
    missing.sort()
    limit = len(missing) if suggest_limit is None else suggest_limit
    missing_entries = tuple(
        MissingTensor(
            name,
            containers.get(name) if containers else None,
            did_you_mean(name, unused) if i < limit else None,
        )
        for i, name in enumerate(missing)
    )
    if containers:
        enum_paths = sum(1 for m in missing_entries if "Enum:" in (m.container or ""))
    else:  # no container stacks: the CamelCase test is a heuristic stand-in (spec §5.6)
        enum_paths = sum(1 for m in missing if strip_enum_variant(m) is not None)
    fixes: tuple[str, ...] = ()
    if with_fixes and (missing or errors):
        fixes = tuple(
            suggest_fixes(
                missing,
                unused,
                {n: s for n, (_, s) in source.items()},
                {n: s for n, (_, s) in target.items()},
            )
        )
    return LoadingSummary(
        applied=tuple(applied),
        skipped=tuple(sorted(skipped)),
        missing=missing_entries,
        unused=tuple(unused),
        errors=tuple(errors),
        dtype_notes=tuple(notes),
        fixes=fixes,
        enum_paths=enum_paths,
    )


# --- suggested fixes ------------------------------------------------------------------------


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


def _fit(names: Iterable[str], target: Mapping[str, Shape]) -> int:
    return sum(1 for n in names if n in target)


def _best_rule(
    names: list[str], target: Mapping[str, Shape], number: int
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
        gain = _fit(renamed, target) - base
        if gain > 0 and (best is None or gain > best[0]):
            best = (gain, RemapRule(rule.pattern, rule.replacement, number), renamed)
    return None if best is None else (best[1], best[2])


def suggest_fixes(
    missing: Sequence[str],
    unused: Sequence[str],
    source: Mapping[str, Shape],
    target: Mapping[str, Shape],
) -> list[str]:
    """Ready-to-paste CLI options that would make more source tensors fit the target.

    Detects a prefix added or removed (``module.``, ``_orig_mod.``, ``model.``), a consistent
    segment rename (``fc.`` -> ``fc1.``), norm ``weight``/``bias`` versus ``gamma``/``beta``, and
    rank-2 shapes ``[a, b]`` versus ``[b, a]``. Every proposed ``--remap`` rule is verified: applied
    (with the ones before it) to all source names it must increase the number of target names
    found and must not make two names collide.

    Args:
        missing: target names not found in the source.
        unused: source names that are no target name.
        source: source shapes by name (all source tensors).
        target: target shapes by name.

    Returns:
        Options such as ``--remap '^fc\\.=fc1.'`` and ``--adapter pytorch-to-burn``.
    """
    fixes: list[str] = []
    names = list(source)
    if missing and unused:
        for number in range(1, MAX_FIX_RULES + 1):
            found = _best_rule(names, target, number)
            if found is None:
                break
            rule, names = found
            fixes.append("--remap " + shlex.quote(f"{rule.pattern}={rule.replacement}"))
    renamed = dict(zip(names, source.values(), strict=True))
    adapter = _adapter_hint(renamed, target)
    if adapter is not None:
        fixes.append(f"--adapter {adapter}")
    return fixes


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

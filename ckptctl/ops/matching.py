"""Name matching: Burn's "Did you mean" (Jaro, burn-store spec §5.4) and remap-rule inference.

Used by the Tensor Loading Summary (``ops.summary``) and by ``diff``: :func:`did_you_mean`
suggests the most similar unused name for a missing one, exactly as Burn does;
:func:`suggest_fixes` infers the ``--remap`` rules and the adapter that would make more source
names fit the target, each rule verified on the real names before it is proposed.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

from ckptctl.adapters.families import is_enum_variant_segment
from ckptctl.adapters.rename import RemapRule, parse_rules, remap_name
from ckptctl.fix import Option

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

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


def ranked_suggestion(
    fixes: Sequence[Option], *, forward: bool = False
) -> Callable[[str, Sequence[str]], str | None]:
    """A "Did you mean" that ranks candidates first by the inferred ``remap`` rules (they are
    verified), then by an exact suffix match (``module.bn.bias`` for ``bn.bias``), then by
    Burn's Jaro similarity (at least 0.7, :func:`did_you_mean`).

    The rules turn source names into target names: by default the name looked up is a target
    name and the candidates are source names; ``forward`` is the other way round.
    """
    rules = parse_rules([f.value for f in fixes if f.name == "remap" and f.value is not None])

    def suggest(missing: str, unused: Sequence[str]) -> str | None:
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
        return did_you_mean(missing, unused)

    return suggest


def suggest_fixes(
    missing: Sequence[str],
    unused: Sequence[str],
    source: Mapping[str, Shape],
    target: Mapping[str, Shape],
) -> list[Option]:
    """The ``remap`` rules and ``adapters`` that would make more source tensors fit the target.

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
        Options such as ``Option("remap", "^fc\\.=fc1.")`` and
        ``Option("adapters", "pytorch-to-burn")`` (the CLI spells them ``--remap``, ``--adapter``).
    """
    fixes: list[Option] = []
    names = list(source)
    if missing and unused:
        for number in range(1, MAX_FIX_RULES + 1):
            found = _best_rule(names, target, number)
            if found is None:
                break
            rule, names = found
            fixes.append(Option("remap", f"{rule.pattern}={rule.replacement}"))
    renamed = dict(zip(names, source.values(), strict=True))
    adapter = _adapter_hint(renamed, target)
    if adapter is not None:
        fixes.append(Option("adapters", adapter))
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

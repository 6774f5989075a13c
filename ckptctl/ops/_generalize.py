"""Fewer, more general remap rules: merge inferred rules that differ only in a number or a name.

``_structure.infer_rules`` writes one rule per pair of module templates, so a ResNet's four
stages give four rules per block part (``^layer1\\.([0-9]+)\\.conv1\\.(weight)$`` ...
``^layer4\\.([0-9]+)\\.conv1\\.(weight)$``). Two merges make them read as a person would write
them, and each merge is kept only when the whole list still renames every source name exactly as
before (the caller's ``exact``):

* **a number**: rules equal but for the digits ending one source segment, which end one target
  segment too (``layer1`` -> ``layer1``, ``layer2`` -> ``layer2``) become one rule capturing them
  (``layer([0-9]+)`` -> ``layer$1``);
* **a name kept as it is**: rules equal but for one source segment that the target keeps
  unchanged (``conv1`` -> ``conv1``, ``bn1`` -> ``bn1``) become one rule with the names as
  alternatives (``(bn1|conv1)`` -> ``$2``); their parameter names are joined the same way.

Rules are parsed from the form ``infer_rules`` writes (``^SEG\\.SEG...\\.(PARAMS)$`` with
``SEG`` an escaped name or a group); a rule in any other form is left as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    #: For each merge a rule allows: (the rule with the merged segments masked, the source
    #: segment, the target segment, "kept" or the number's (source, target) prefixes).
    Signature = Callable[["_Parsed"], list[tuple[object, int, int, object]]]

Rule = tuple[str, str, str]
#: Merges tried at most, each checked against every source name (bounds the work on huge models).
MAX_MERGE_ATTEMPTS = 400

_GROUP = re.compile(r"\(([^()]*)\)")
_TRAILING_DIGITS = re.compile(r"^(.*?)([0-9]+)$")
_REF = re.compile(r"^\$([0-9]+)$")
_PREFIXED_REF = re.compile(r"^(.*?)\$([0-9]+)$")


@dataclass(frozen=True)
class _Seg:
    """A source segment: ``prefix`` then, when ``group`` is not None, a capture of ``group``."""

    prefix: str
    group: str | None = None


@dataclass(frozen=True)
class _Out:
    """A target segment: ``prefix`` then, when ``ref`` is not None, source capture ``ref``."""

    prefix: str
    ref: int | None = None


@dataclass(frozen=True)
class _Parsed:
    source: tuple[_Seg, ...]
    target: tuple[_Out, ...]
    params: tuple[str, ...]
    evidence: str
    merged: int = 1


def generalize(rules: Sequence[Rule], exact: Callable[[list[Rule]], bool]) -> list[Rule]:
    """``rules`` with those that differ only in a number or a kept name merged (see the module
    docstring), each merge kept only when ``exact`` accepts the whole list after it."""
    parsed: list[_Parsed | Rule] = [_parse(r) or r for r in rules]
    budget = [MAX_MERGE_ATTEMPTS]
    while budget[0] > 0:  # numbers first: a name merge would list them instead
        merged = _merge_pass(parsed, _number_signature, exact, budget)
        if merged is None:
            merged = _merge_pass(parsed, _name_signature, exact, budget)
        if merged is None:
            break
        parsed = merged
    return [r if isinstance(r, tuple) else _text(r) for r in parsed]


# --- parsing and writing the rules infer_rules writes --------------------------------------------


def _parse(rule: Rule) -> _Parsed | None:
    pattern, replacement, evidence = rule
    if not (pattern.startswith("^") and pattern.endswith(")$")):
        return None
    body, sep, params = pattern[1:-2].rpartition(r"\.(")
    if not sep or not body or "(" in params:
        return None
    source = tuple(_segment(part) for part in body.split(r"\."))
    if any(seg is None for seg in source):
        return None
    captures = sum(1 for seg in source if seg is not None and seg.group is not None)
    out_parts = replacement.split(".")
    if out_parts[-1] != f"${captures + 1}":
        return None
    target = tuple(_output(part, captures) for part in out_parts[:-1])
    if any(out is None for out in target):
        return None
    names = tuple(re.sub(r"\\(.)", r"\1", p) for p in params.split("|"))
    return _Parsed(source, target, names, evidence)  # type: ignore[arg-type]  # None ruled out


def _segment(part: str) -> _Seg | None:
    match = _GROUP.search(part)
    if match is None:
        return _Seg(_unescape(part)) if "(" not in part and ")" not in part else None
    if match.end() != len(part):
        return None
    return _Seg(_unescape(part[: match.start()]), match.group(1))


def _output(part: str, captures: int) -> _Out | None:
    match = _PREFIXED_REF.match(part)
    if match is None:
        return None if "$" in part else _Out(part)
    ref = int(match.group(2)) - 1
    return _Out(match.group(1), ref) if 0 <= ref < captures and "$" not in match.group(1) else None


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _text(rule: _Parsed) -> Rule:
    pattern = r"\.".join(
        re.escape(seg.prefix) + (f"({seg.group})" if seg.group is not None else "")
        for seg in rule.source
    )
    params = "|".join(re.escape(p) for p in sorted(rule.params))
    out = [o.prefix + (f"${o.ref + 1}" if o.ref is not None else "") for o in rule.target]
    captures = sum(1 for seg in rule.source if seg.group is not None)
    replacement = ".".join([*out, f"${captures + 1}"])
    evidence = rule.evidence if rule.merged == 1 else f"{rule.merged} rules in one: {rule.evidence}"
    return "^" + pattern + r"\.(" + params + ")$", replacement, evidence


# --- merging ---------------------------------------------------------------------------------


def _number_signature(rule: _Parsed) -> list[tuple[object, int, int, object]]:
    """For each source literal ending in digits that a target literal ends in too (the same
    number): the rule with both numbers masked."""
    out: list[tuple[object, int, int, object]] = []
    for i, seg in enumerate(rule.source):
        found = _TRAILING_DIGITS.match(seg.prefix) if seg.group is None else None
        if found is None:
            continue
        for j, target in enumerate(rule.target):
            other = _TRAILING_DIGITS.match(target.prefix) if target.ref is None else None
            if other is not None and other.group(2) == found.group(2):
                kind = (found.group(1), other.group(1))
                out.append((_masked(rule, i, j, kind), i, j, kind))
    return out


def _name_signature(rule: _Parsed) -> list[tuple[object, int, int, object]]:
    """For each source literal the target keeps as it is: the rule with both masked (the
    parameter names too, which a merge joins)."""
    return [
        (_masked(rule, i, j, "kept"), i, j, "kept")
        for i, seg in enumerate(rule.source)
        if seg.group is None
        for j, target in enumerate(rule.target)
        if target.ref is None and target.prefix == seg.prefix
    ]


def _masked(rule: _Parsed, i: int, j: int, kind: object) -> object:
    source = rule.source[:i] + rule.source[i + 1 :]
    target = rule.target[:j] + rule.target[j + 1 :]
    params = None if kind == "kept" else rule.params
    return (kind, i, j, source, target, params)


def _merge_pass(
    rules: list[_Parsed | Rule],
    signature: Signature,
    exact: Callable[[list[Rule]], bool],
    budget: list[int],
) -> list[_Parsed | Rule] | None:
    """The first merge of two or more rules with one signature that ``exact`` accepts."""
    groups: dict[object, tuple[int, int, object, list[_Parsed]]] = {}
    places: dict[object, list[int]] = {}
    for k, rule in enumerate(rules):
        if isinstance(rule, _Parsed):
            for key, i, j, kind in signature(rule):
                groups.setdefault(key, (i, j, kind, []))[3].append(rule)
                places.setdefault(key, []).append(k)
    for key, (i, j, kind, found) in groups.items():
        if len(found) < 2 or budget[0] <= 0:
            continue
        budget[0] -= 1
        merged = _merged(found, i, j, number=kind != "kept")
        members = places[key]
        trial = [r for k, r in enumerate(rules) if k not in members]
        trial.insert(members[0], merged)
        if exact([r if isinstance(r, tuple) else _text(r) for r in trial]):
            return trial
    return None


def _merged(rules: list[_Parsed], i: int, j: int, *, number: bool) -> _Parsed:
    """One rule for ``rules``: source segment ``i`` captured (``number``: the digits after its
    prefix; else the names as alternatives), target segment ``j`` referring to the capture."""
    first = rules[0]
    before = sum(1 for seg in first.source[:i] if seg.group is not None)
    if number:  # the signature made every prefix and target prefix the same
        digits = _TRAILING_DIGITS.match(first.source[i].prefix)
        other = _TRAILING_DIGITS.match(first.target[j].prefix)
        assert digits is not None
        assert other is not None
        seg = _Seg(digits.group(1), "[0-9]+")
        out = _Out(other.group(1), before)
    else:
        names = sorted({r.source[i].prefix for r in rules})
        seg = _Seg("", "|".join(re.escape(n) for n in names))
        out = _Out("", before)
    shifted = tuple(
        replace(o, ref=o.ref + 1) if o.ref is not None and o.ref >= before else o
        for o in first.target
    )
    target = (*shifted[:j], out, *shifted[j + 1 :])
    source = (*first.source[:i], seg, *first.source[i + 1 :])
    params = tuple(sorted({p for r in rules for p in r.params}))
    return _Parsed(source, target, params, first.evidence, sum(r.merged for r in rules))

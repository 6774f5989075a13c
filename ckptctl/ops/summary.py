"""The Tensor Loading Summary: converted tensors checked against a target.

See ``docs/formats/burn-store.md#tensor-loading-summary``.

:func:`summarize` classifies every name the way Burn's ``ApplyResult`` does:

* ``applied`` -- target names found in the source with the target's shape (target order);
* ``skipped`` -- target names present in the source but excluded by the filter (sorted);
* ``missing`` -- target names not found in the source, filtered or not (sorted), each with a
  "Did you mean" suggestion computed with Burn's algorithm (:func:`did_you_mean`,
  ``docs/formats/burn-store.md#did-you-mean``);
* ``unused`` -- source names that are no target name (sorted);
* ``errors`` -- shape mismatches (target order); an errored name is neither missing nor unused.

ckptctl extras: ``dtype_notes`` (source and target dtypes differ; Burn never checks dtypes)
and ``fixes`` -- the options (remap rules, adapters) from :func:`suggest_fixes`. With an
``alternative`` lookup (Burn's norm ``gamma`` -> ``weight`` fallback,
``docs/formats/burn-store.md#pytorch-adapters``) the source name found through the alternative
counts as used, unless ``burn_compat`` reproduces Burn's quirk of listing it as unused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.ops.matching import (
    adapter_origins,
    did_you_mean,
    ranked_suggestion,
    strip_enum_variant,
    suggest_fixes,
)
from ckptctl.report.summary import (
    DISPLAY_LIMIT,
    AmbiguousTensor,
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
    from ckptctl.fix import Option
    from ckptctl.model import TensorEntry


def specs_of(entries: Iterable[TensorEntry]) -> dict[str, tuple[DType, Shape]]:
    """``name -> (dtype, shape)`` for entries (what :func:`summarize` compares)."""
    return {e.name: (e.dtype, e.shape) for e in entries}


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
    given: Sequence[str] = (),
    ambiguous: Sequence[AmbiguousTensor] = (),
) -> LoadingSummary:
    """Classify converted tensors against a target, like Burn's ``ApplyResult``.

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
        given: adapters the source already went through: never suggested again, and no
            split or fuse is simulated on top of them.
        ambiguous: target tensors whose filling is unproven (``ops._structure``, undecided
            square layouts): listed, and never counted as applied even when name and shape fit.

    Returns:
        The summary.

    Example:
        >>> from ckptctl.dtypes import DType
        >>> s = summarize({"a": (DType.F32, (2,))}, {"a": (DType.F32, (3,))})
        >>> s.errors[0].expected, s.errors[0].found
        ((3,), (2,))
    """
    found = _Classified(source, include, alternative, burn_compat, {a.name for a in ambiguous})
    for name, spec in target.items():
        found.add(name, spec)
    unused = sorted(n for n in source if n not in target and n not in found.consumed)
    missing = sorted(found.missing)
    fixes: tuple[Option, ...] = ()
    suggest: Callable[[str, Sequence[str]], str | None] = did_you_mean
    if with_fixes:
        shapes = _shapes(source), _shapes(target)
        if missing or found.errors:
            fixes = tuple(suggest_fixes(missing, unused, *shapes, given=given))
        if not burn_compat:  # Burn's own ranking byte for byte in burn_compat mode
            # an output name the adapter makes is named here by the source tensor it reads
            suggest = ranked_suggestion(fixes, origins=adapter_origins(fixes, *shapes))
    limit = len(missing) if suggest_limit is None else suggest_limit
    missing_entries = tuple(
        MissingTensor(
            name,
            containers.get(name) if containers else None,
            suggest(name, unused) if i < limit else None,
        )
        for i, name in enumerate(missing)
    )
    return LoadingSummary(
        applied=tuple(found.applied),
        skipped=tuple(sorted(found.skipped)),
        missing=missing_entries,
        unused=tuple(unused),
        errors=tuple(found.errors),
        dtype_notes=tuple(found.notes),
        fixes=fixes,
        enum_paths=_enum_paths(missing_entries, containers),
        ambiguous=tuple(ambiguous),
    )


@dataclass
class _Classified:
    """Target names by outcome, in target order, and the source names they used; the first
    fields are :func:`summarize`'s arguments of the same names."""

    source: Mapping[str, tuple[DType, Shape]]
    include: Callable[[str], bool] | None
    alternative: Callable[[str], str | None] | None
    burn_compat: bool
    unproven: set[str]
    applied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    errors: list[SummaryError] = field(default_factory=list)
    notes: list[DTypeNote] = field(default_factory=list)
    consumed: set[str] = field(default_factory=set)

    def add(self, name: str, spec: tuple[DType, Shape]) -> None:
        """Classify the target tensor ``name``."""
        found = self._source_name(name)
        if found is None:
            self.missing.append(name)
            return
        if not self.burn_compat:
            self.consumed.add(found)
        if self.include is not None and not self.include(name):
            self.skipped.append(name)
            return
        dtype, shape = spec
        src_dtype, src_shape = self.source[found]
        if src_shape != shape:
            kind = SummaryErrorKind.SHAPE_MISMATCH
            self.errors.append(SummaryError(name, kind, expected=shape, found=src_shape))
            return
        if name in self.unproven:
            return
        self.applied.append(name)
        if src_dtype != dtype:
            self.notes.append(DTypeNote(name, dtype, src_dtype))

    def _source_name(self, name: str) -> str | None:
        """The source tensor that fills target ``name``: its own name, else the alternative's."""
        if name in self.source:
            return name
        alt = self.alternative(name) if self.alternative is not None else None
        return alt if alt is not None and alt in self.source else None


def _shapes(specs: Mapping[str, tuple[DType, Shape]]) -> dict[str, Shape]:
    return {n: s for n, (_, s) in specs.items()}


def _enum_paths(missing: Sequence[MissingTensor], containers: Mapping[str, str] | None) -> int:
    """How many missing names have an enum variant on their path."""
    if containers:
        return sum(1 for m in missing if "Enum:" in (m.container or ""))
    # no container stacks: the CamelCase test is a heuristic stand-in
    return sum(1 for m in missing if strip_enum_variant(m.name) is not None)

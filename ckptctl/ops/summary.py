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
    applied: list[str] = []
    skipped: list[str] = []
    missing: list[str] = []
    errors: list[SummaryError] = []
    notes: list[DTypeNote] = []
    consumed: set[str] = set()
    unproven = {a.name for a in ambiguous}
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
        if name in unproven:
            continue
        applied.append(name)
        if src_dtype != dtype:
            notes.append(DTypeNote(name, dtype, src_dtype))
    unused = sorted(n for n in source if n not in target and n not in consumed)
    missing.sort()
    fixes: tuple[Option, ...] = ()
    if with_fixes and (missing or errors):
        fixes = tuple(
            suggest_fixes(
                missing,
                unused,
                {n: s for n, (_, s) in source.items()},
                {n: s for n, (_, s) in target.items()},
                given=given,
            )
        )
    limit = len(missing) if suggest_limit is None else suggest_limit
    # Burn's own ranking byte for byte in burn_compat mode; otherwise the inferred rules first
    suggest: Callable[[str, Sequence[str]], str | None]
    if burn_compat or not with_fixes:
        suggest = did_you_mean
    else:
        shapes = {n: s for n, (_, s) in source.items()}
        made = adapter_origins(fixes, shapes, {n: s for n, (_, s) in target.items()})
        # an output name the adapter makes is named here by the source tensor it reads
        suggest = ranked_suggestion(fixes, origins=made)
    missing_entries = tuple(
        MissingTensor(
            name,
            containers.get(name) if containers else None,
            suggest(name, unused) if i < limit else None,
        )
        for i, name in enumerate(missing)
    )
    if containers:
        enum_paths = sum(1 for m in missing_entries if "Enum:" in (m.container or ""))
    else:  # no container stacks: the CamelCase test is a heuristic stand-in
        enum_paths = sum(1 for m in missing if strip_enum_variant(m) is not None)
    return LoadingSummary(
        applied=tuple(applied),
        skipped=tuple(sorted(skipped)),
        missing=missing_entries,
        unused=tuple(unused),
        errors=tuple(errors),
        dtype_notes=tuple(notes),
        fixes=fixes,
        enum_paths=enum_paths,
        ambiguous=tuple(ambiguous),
    )

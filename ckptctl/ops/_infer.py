"""Remap rules inferred from the structure of a source and of a reference checkpoint.

One engine for ``convert --target`` and ``diff``: the source's names after the user's remap
rules (before adapters) are matched to the reference's by ``_structure.infer_rules``; where the
structure leaves a choice open, the reference's values decide. Names the layer-family stage maps
(MHA, LSTM, Transformer layers) are left to that stage, never to a rule.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ckptctl.adapters.pipeline import PipelineOptions, leading_renames, run_pipeline
from ckptctl.formats import open_checkpoint

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ckptctl.adapters import PlanItem
    from ckptctl.dtypes import DType
    from ckptctl.model import TensorEntry
    from ckptctl.report.summary import AmbiguousTensor

    Specs = Mapping[str, tuple[DType, tuple[int, ...]]]

#: An inferred rule: pattern, replacement, and the evidence that decided it.
Rule = tuple[str, str, str]


def fits(items: list[PlanItem], target: Specs) -> bool:
    """Every target tensor is among the outputs of ``items``, with its shape."""
    names = {i.entry.name: i.entry.shape for i in items if i.entry is not None}
    return all(names.get(n) == shape for n, (_, shape) in target.items())


def rule_text(pattern: str, replacement: str) -> str:
    """A rule as ``--remap`` takes it (an ``=`` in the pattern escaped)."""
    return pattern.replace("=", "\\=") + "=" + replacement


def same_values(source: TensorEntry, ref: TensorEntry) -> str | None:
    """``equal`` or ``transposed`` when ``ref`` holds ``source``'s values (bytes, or the bytes
    of the rank-2 transpose), else None; different dtypes or sizes are never equal."""
    import numpy as np

    if source.dtype is not ref.dtype or source.numel != ref.numel:
        return None
    a, b = source.load(), ref.load()
    if a.shape == b.shape and a.tobytes() == b.tobytes():
        return "equal"
    if (
        a.ndim == 2
        and a.shape[::-1] == b.shape
        and np.ascontiguousarray(a.T).tobytes() == b.tobytes()
    ):
        return "transposed"
    return None


def definition_order(fmt: str, entries: Sequence[TensorEntry]) -> list[str] | None:
    """The tensor names in the order the model defines its modules, when ``fmt`` keeps it:
    a pickled ``state_dict`` (``torch.save``) keeps its insertion order, which is the modules'
    registration order; a burnpack lays its payloads out in module traversal (field
    declaration) order, whatever its sorted metadata says
    (``docs/formats/burnpack.md#placement``). Others (the safetensors library sorts by dtype and
    name) say nothing: None."""
    if fmt.startswith("pytorch-"):
        return [e.name for e in entries]
    if fmt == "burnpack" and all(e.offset is not None for e in entries):
        return [e.name for e in sorted(entries, key=lambda e: e.offset or 0)]
    return None


def infer_from_reference(
    entries: list[TensorEntry],
    pipeline: PipelineOptions,
    target: Specs,
    path: str,
    order: Sequence[str] | None = None,
) -> tuple[tuple[Rule, ...], list[AmbiguousTensor]]:
    """Rules from the structure of the renamed source (before adapters) and of the target;
    where that leaves a choice open, from the target's values (the checkpoint at ``path``)
    and, when ``order`` (the source names in definition order, :func:`definition_order`) and
    the target's file both keep the modules' order, from that order."""
    from ckptctl.ops._structure import infer_rules
    from ckptctl.report.summary import AmbiguityKind, AmbiguousTensor

    # the names the rules see: after the adapters that rename before them (gguf-to-hf)
    names_only = replace(pipeline, adapters=leading_renames(pipeline.adapters), module_types=())
    renamed, _ = run_pipeline(entries, names_only)
    kept = [i for i in renamed if i.entry is not None]
    owned = _family_owned([i.entry for i in kept if i.entry is not None])
    if order is not None:
        rank = {name: k for k, name in enumerate(order)}
        kept.sort(key=lambda i: rank.get(i.source, len(rank)))
    source = {
        i.entry.name: i.entry.shape
        for i in kept
        if i.entry is not None and i.entry.name not in owned
    }
    shapes = {n: s for n, (_, s) in target.items()}
    found = infer_rules(source, shapes)
    if found.ambiguous:
        by_name = {i.entry.name: i.entry for i in kept if i.entry is not None}
        with open_checkpoint(path) as ref:
            ref_order = definition_order(ref.format, list(ref.values()))
            ordered = order is not None and ref_order is not None
            if ref_order is not None:
                shapes = {n: shapes[n] for n in ref_order if n in shapes}
            found = infer_rules(
                source, shapes, lambda s, t: same_values(by_name[s], ref[t]) is not None,
                ordered=ordered,
            )  # fmt: skip
    ambiguous = [
        AmbiguousTensor(name, AmbiguityKind.SOURCE, sources)
        for amb in found.ambiguous
        for name, sources in zip(amb.names, amb.sources, strict=True)
    ]
    return found.rules, ambiguous


def _family_owned(entries: list[TensorEntry]) -> set[str]:
    """Names the layer-family stage splits, fuses or renames (MHA, LSTM, Transformer layers):
    the adapter, not a remap rule, maps those."""
    from ckptctl.adapters.families import TO_BURN, restructure
    from ckptctl.errors import CkptError

    try:
        placed = restructure(entries, TO_BURN).placed
    except CkptError:
        return set()
    owned = {e.name for e in entries if e.name not in placed}
    return owned | {n for n, built in placed.items() if any(b.module_type for b in built)}

"""Report objects: what each command found, independent of how it is shown.

``ops`` builds these; ``cli`` renders them as text (``report.text``) or JSON (``report.json``).
Strings taken from files are stored raw here and escaped by the renderers.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ckptctl.errors import CkptError
    from ckptctl.fix import Note, Option
    from ckptctl.model import HeaderLayout, JSONValue
    from ckptctl.report.quant import QuantModule
    from ckptctl.report.summary import LoadingSummary
    from ckptctl.report.tree import TreeNode
    from ckptctl.report.values import TensorStats
    from ckptctl.safety import PickleSafety

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class TensorRow:
    """One tensor as listed by ``ls``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    numel: int
    param_id: int | None = None
    module_type: str | None = None
    offset: int | None = None
    #: ``ls --stats``: the values' statistics (None for complex tensors or without --stats)
    stats: TensorStats | None = None
    #: a buffer, not a parameter (BatchNorm's running statistics): its elements are counted
    #: apart, as ``torch`` and torchvision count parameters
    buffer: bool = False

    @property
    def parameters(self) -> int:
        """Elements that are parameters: all of them, none for a buffer."""
        return 0 if self.buffer else self.numel


@dataclass(frozen=True)
class DTypeTotal:
    """Tensors, elements (parameters and buffers) and bytes of one dtype."""

    dtype: str
    tensors: int
    numel: int
    nbytes: int
    buffers: int = 0

    @property
    def parameters(self) -> int:
        """Elements that are parameters (``numel`` less the buffers')."""
        return self.numel - self.buffers


@dataclass(frozen=True)
class ListingTotal:
    """Tensors, parameters, buffer elements and bytes of a whole listing (the sums of its
    dtype totals)."""

    tensors: int
    parameters: int
    nbytes: int
    buffers: int = 0


@dataclass(frozen=True)
class LsReport:
    """What ``ckptctl ls`` shows: the file's kind and its tensors."""

    path: str
    format: str
    tensors: tuple[TensorRow, ...]
    metadata: Mapping[str, str]
    kind: str | None = None
    notes: tuple[str, ...] = ()
    scalars: Mapping[str, JSONValue] = field(default_factory=dict)
    state_key: str | None = None
    total_tensors: int | None = None
    #: tensors in the whole file, when ``state_key`` leaves some outside (else None)
    file_tensors: int | None = None
    #: the first names of the tensors outside ``state_key``
    outside_state_key: tuple[str, ...] = ()
    safety: PickleSafety | None = None
    #: plain values stored beside the tensors (epoch, lr, hyper-parameters), by key path
    objects: Mapping[str, JSONValue] = field(default_factory=dict)
    #: ``(parameters, bytes)`` really stored when tied weights or views share storage, else None
    stored: tuple[int, int] | None = None
    #: the module tree (``ls --tree``), else None
    tree: TreeNode | None = None
    #: ``ls --stats``: every row carries its statistics
    with_stats: bool = False
    #: quantized modules (GPTQ, AWQ, bitsandbytes, FP8, compressed-tensors), natural order
    quantized: tuple[QuantModule, ...] = ()

    @property
    def logical_parameters(self) -> int | None:
        """Parameters once the quantized weights are unpacked (None: nothing quantized, or a
        layout that does not give its weight's size)."""
        if not self.quantized or any(q.parameters is None for q in self.quantized):
            return None
        packed = {name for q in self.quantized for name in q.tensors}
        plain = sum(r.numel for r in self.tensors if r.name not in packed)
        return plain + sum(q.parameters or 0 for q in self.quantized)

    @functools.cached_property  # renderers ask for it several times (and for total)
    def totals(self) -> tuple[DTypeTotal, ...]:
        """Totals by dtype, largest first."""
        count: Counter[str] = Counter()
        numel: Counter[str] = Counter()
        nbytes: Counter[str] = Counter()
        buffers: Counter[str] = Counter()
        for row in self.tensors:
            count[row.dtype] += 1
            numel[row.dtype] += row.numel
            nbytes[row.dtype] += row.nbytes
            buffers[row.dtype] += row.numel - row.parameters
        order = sorted(count, key=lambda d: (-nbytes[d], d))
        return tuple(DTypeTotal(d, count[d], numel[d], nbytes[d], buffers[d]) for d in order)

    @property
    def total(self) -> ListingTotal:
        """The listed tensors' count, parameters and bytes."""
        totals = self.totals
        return ListingTotal(
            sum(t.tensors for t in totals),
            sum(t.parameters for t in totals),
            sum(t.nbytes for t in totals),
            sum(t.buffers for t in totals),
        )


@dataclass(frozen=True)
class HeaderReport:
    """What ``ckptctl header`` shows: the decoded header and the byte accounting."""

    path: str
    layout: HeaderLayout
    #: the file is damaged (truncated): what ``layout`` could not account for; exit 3
    damage: CkptError | None = None

    def bytes_by_kind(self) -> dict[str, int]:
        """Bytes per region kind, in the order kinds first appear."""
        out: dict[str, int] = {}
        for region in self.layout.regions:
            out[region.kind] = out.get(region.kind, 0) + region.size
        return out


@dataclass(frozen=True)
class PlanRow:
    """One tensor's way through ``convert``/``remap``: source → target and what was done."""

    source: str
    target: str | None
    dtype_before: str
    dtype_after: str | None
    shape_before: tuple[int, ...]
    shape_after: tuple[int, ...] | None
    actions: tuple[str, ...] = ()
    #: what each action did (``rename``, ``transpose``, ``cast``, ``keep`` ...), in order
    kinds: tuple[str, ...] = ()

    @property
    def changes(self) -> tuple[str, ...]:
        """What changed in name or bytes: ``rename``, ``transpose``, ``cast`` ... (no ``keep``)."""
        out = [k for k in dict.fromkeys(self.kinds) if k not in ("keep", "drop")]
        if self.target is not None and self.target != self.source and "rename" not in out:
            out.insert(0, "rename")
        return tuple(out)


@dataclass(frozen=True)
class ConvertReport:
    """What ``convert``/``remap`` did (or, with ``--dry-run``, would do)."""

    source: str
    destination: str
    source_format: str
    destination_format: str
    plan: tuple[PlanRow, ...]
    written: bool
    dry_run: bool
    bytes_written: int = 0
    warnings: tuple[str | Note, ...] = ()
    summary: LoadingSummary | None = None
    fixes: tuple[Option, ...] = ()
    ok: bool = True
    #: why nothing was written although asked (a target that does not fit, --strict), if so
    refused: str | Note | None = None
    #: remap rules inferred from the target's structure and applied: (pattern, replacement,
    #: evidence), in order (``ops._structure``)
    inferred: tuple[tuple[str, str, str], ...] = ()

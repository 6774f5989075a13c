"""Float casts: ``cast:DTYPE`` (``FloatCastAdapter``) and ``half`` (``HalfPrecisionAdapter``).

Both round to nearest even (the block kernels of ``ckptctl.dtypes``: numpy's own results for
F16, torch's for BF16, NaNs kept). Like Burn, F64 goes to F16/BF16 through F32 (two roundings,
``docs/formats/burn-store.md#half-precision-and-casts``), so results match Burn bit for bit. A
cast entry's data (:class:`ConvertedData`) converts a range at a time: writers stream it like a
copy.

* ``cast:DTYPE`` (Burn's ``FloatCastAdapter``) converts every float tensor not already in
  DTYPE, whatever its module.
* ``half`` (Burn's ``HalfPrecisionAdapter``) converts F32 -> F16 and F16 -> F32 (direction
  follows each tensor's dtype), only for tensors whose module type is in
  :data:`HALF_PRECISION_MODULES`. BatchNorm is excluded entirely (``running_var`` can underflow in
  F16); tensors without a module type, user structs, F64, BF16 and non-floats are untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ckptctl.adapters._base import Action, ActionKind, Adapted, BaseAdapter
from ckptctl.adapters.modules import Decision, resolve
from ckptctl.dtypes import DType, bf16_into, ckernels_for, f16_into, widen_into
from ckptctl.errors import CorruptCheckpointError, SelectionError
from ckptctl.model import TensorData, expected_nbytes, is_local_file
from ckptctl.sources import spare_buffer

if TYPE_CHECKING:
    from collections.abc import Mapping

    from numpy.typing import NDArray

    from ckptctl.model import TensorEntry

#: Burn's default half-precision module set (14 types; BatchNorm deliberately absent).
HALF_PRECISION_MODULES = frozenset(
    {
        "Linear", "Embedding", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
        "ConvTranspose2d", "ConvTranspose3d", "DeformConv2d", "LayerNorm", "GroupNorm",
        "InstanceNorm", "RmsNorm", "PRelu",
    }
)  # fmt: skip
#: Dtypes a cast may produce (no FP8: ``from_float`` refuses it, and so does ``Cast``).
CAST_TARGETS = (DType.F64, DType.F32, DType.F16, DType.BF16)


#: Elements per step of a cast: a block of F32 and its scratch stay in the CPU's cache, so
#: the passes of a conversion run from cache instead of from memory.
CAST_BLOCK_ELEMENTS = 1 << 16
#: Blocks per :meth:`ConvertedData.compute_step`: enough that the read, the conversion and the
#: write of a step cost little Python per byte; few enough that the step stays in the cache.
CAST_STEP_BLOCKS = 2


def convert_float(raw: NDArray[Any], source: DType, target: DType) -> NDArray[Any]:
    """Convert an array stored as ``source`` (raw bits for BF16/FP8) to ``target`` storage.

    Rounds to nearest even; F64 reaches F16/BF16 through F32, as Burn does. Computed a block
    of ``CAST_BLOCK_ELEMENTS`` at a time (:func:`convert_into`).
    """
    flat = np.ascontiguousarray(raw).reshape(-1)
    out = np.empty(flat.shape, dtype=target.numpy)
    convert_into(flat, source, target, out)
    return out.reshape(np.shape(raw))


#: Casts numpy does fast and as specified (F16's it does one element at a time: ``dtypes``).
_NUMPY_CASTS = frozenset({(DType.F32, DType.F64), (DType.F64, DType.F32)})
#: Casts the compiled kernels (:func:`ckptctl.dtypes.ckernels`) do in one pass, whole.
_COMPILED_CASTS = {
    (DType.F32, DType.BF16): "f32_to_bf16",
    (DType.F32, DType.F16): "f32_to_f16",
    (DType.F16, DType.F32): "f16_to_f32",
    (DType.BF16, DType.F32): "bf16_to_f32",
}


def convert_into(raw: NDArray[Any], source: DType, target: DType, out: NDArray[Any]) -> None:
    """Convert the 1-D ``raw``, stored as ``source``, into ``out``, stored as ``target``
    (:func:`convert_float`), a block of ``CAST_BLOCK_ELEMENTS`` at a time through one reused
    scratch buffer, so a pass over a tensor allocates nothing per block."""
    # overflow to +-inf and NaNs (signalling ones too) are results, not warnings
    with np.errstate(over="ignore", invalid="ignore"):
        if source is target or (source, target) in _NUMPY_CASTS:  # F64 -> F32: nearest even
            np.copyto(out, raw, casting="unsafe")
            return
        if not raw.size or _convert_compiled(raw, source, target, out):
            return
        step = min(raw.size, CAST_BLOCK_ELEMENTS)
        with spare_buffer("cast_scratch", 16 * step) as space:
            scratch = np.frombuffer(space, dtype=np.uint32)
            for at in range(0, raw.size, step):
                _convert_block(raw[at : at + step], source, target, out[at : at + step], scratch)


def _convert_compiled(raw: NDArray[Any], source: DType, target: DType, out: NDArray[Any]) -> bool:
    """:func:`convert_into` in one call of a compiled kernel, if there is one for the cast
    (no blocks: the kernel makes one pass from the cache whatever the length); else False."""
    name = _COMPILED_CASTS.get((source, target))
    kernels = ckernels_for(raw, out) if name is not None else None
    if name is None or kernels is None:
        return False
    getattr(kernels, name)(raw, out, raw.size)
    return True


def _convert_block(
    raw: NDArray[Any], source: DType, target: DType, out: NDArray[Any], scratch: NDArray[Any]
) -> None:
    """:func:`convert_into` of one block, ``scratch`` holding four times its elements."""
    n = raw.size
    values = raw  # F32 as it is; else widened (BF16/FP8/F16 exactly, F64 rounded)
    if source is not DType.F32:
        values = out if target is DType.F32 else scratch[3 * n : 4 * n].view(np.float32)
        widen_into(raw, source, values, scratch[:n])
    if target is DType.BF16:
        bf16_into(values, out, scratch[:n])
    elif target is DType.F16:
        f16_into(values, out.view(np.uint16), scratch[: 3 * n])
    elif target is DType.F64:
        np.copyto(out, values)


@dataclass(frozen=True, eq=False)
class ConvertedData(TensorData):
    """The elements of ``entry`` converted to ``target``, a range at a time: a range of the
    output reads only the elements it needs (``read_into`` of the entry's data, into a reused
    buffer) and converts them block by block, so a writer streams a cast like a copy, on the
    copy threads (:meth:`compute_step`). Read whole, it is converted the same way.
    """

    entry: TensorEntry
    target: DType

    @property
    def inner(self) -> TensorData:
        """The data converted."""
        return self.entry.data

    @property
    def source(self) -> DType:
        """The dtype converted from."""
        return self.entry.dtype

    @property
    def numel(self) -> int:
        """Elements converted."""
        return self.entry.numel

    @property
    def nbytes(self) -> int:
        """Bytes of the converted tensor."""
        return self.numel * self.target.itemsize

    def read(self) -> memoryview:
        if not self.numel:  # refused as the entry itself is, when numpy cannot hold its shape
            return memoryview(self.entry.load().tobytes()[:0])
        out = np.empty(self.nbytes, dtype=np.uint8)
        whole = None
        if not self.inner.is_ranged():  # computed whole anyway: once, not once per block
            whole = memoryview(self.inner.read()).cast("B")
            if len(whole) != self.numel * self.source.itemsize:
                raise CorruptCheckpointError(
                    f"a tensor to cast has {len(whole)} bytes, expected "
                    f"{self.numel * self.source.itemsize}"
                )
        step = CAST_BLOCK_ELEMENTS * self.target.itemsize
        for start in range(0, self.nbytes, step):
            self._convert(start, out[start : start + step].data, whole)
        return out.data

    def read_range(self, start: int, length: int) -> bytes | memoryview:
        size = self.target.itemsize
        first = start - start % size
        stop = min(self.nbytes, -(-(start + length) // size) * size)
        if start < 0 or length < 0 or start + length > self.nbytes:
            raise ValueError(f"range {start}+{length} outside a tensor of {self.nbytes} bytes")
        out = np.empty(stop - first, dtype=np.uint8)
        self.read_into(first, out.data)
        return out.data[start - first : start - first + length]

    def read_into(self, start: int, out: memoryview) -> None:
        size = self.target.itemsize
        if start % size or len(out) % size:  # not whole elements: the covering ones
            out[:] = self.read_range(start, len(out))
            return
        step = self.compute_step() or CAST_BLOCK_ELEMENTS * size * CAST_STEP_BLOCKS
        for done in range(0, len(out), step):  # the inner data read in its own steps
            self._convert(start + done, out[done : done + step], None)

    def _convert(self, start: int, out: memoryview, whole: memoryview | None) -> None:
        """Convert the elements of output bytes ``[start, start + len(out))`` into ``out``,
        reading them from ``whole`` or else from the inner data into a reused buffer."""
        first, count = start // self.target.itemsize, len(out) // self.target.itemsize
        isize = self.source.itemsize
        dst = np.frombuffer(out, dtype=self.target.numpy)
        with spare_buffer("cast_in", count * isize) as space:
            if whole is None:
                self.inner.read_into(first * isize, space)
                raw = np.frombuffer(space, dtype=self.source.numpy)
            else:
                raw = np.frombuffer(
                    whole[first * isize : (first + count) * isize], self.source.numpy
                )
            convert_into(raw, self.source, self.target, dst)

    def is_ranged(self) -> bool:
        return self.inner.is_ranged()

    def compute_step(self) -> int:
        inner = self.inner.compute_step()
        if inner:  # whole steps of the inner data (a transpose's band of rows)
            return max(1, inner // self.source.itemsize) * self.target.itemsize
        if self.inner.is_ranged() and is_local_file(self.inner):
            return CAST_BLOCK_ELEMENTS * CAST_STEP_BLOCKS * self.target.itemsize
        return 0


def cast_entry(entry: TensorEntry, target: DType) -> TensorEntry:
    """A new entry with ``target`` dtype whose data converts lazily, a range at a time."""
    return replace(
        entry,
        dtype=target,
        nbytes=expected_nbytes(target, entry.shape),
        offset=None,
        source_dtype=None,
        data=ConvertedData(entry, target),
    )


@dataclass(frozen=True)
class Cast(BaseAdapter):
    """Cast every float tensor (BF16 and FP8 included) to ``to``; others pass through.

    Raises:
        SelectionError: ``to`` is not F64, F32, F16 or BF16.
    """

    to: DType

    def __post_init__(self) -> None:
        if self.to not in CAST_TARGETS:
            raise SelectionError(
                f"cannot cast to {self.to.value}",
                hint="cast targets: " + ", ".join(f"cast:{d.value.lower()}" for d in CAST_TARGETS),
            )

    @classmethod
    def parse(cls, text: str) -> Cast:
        """``Cast.parse("bf16")``; any ``DType.parse`` spelling.

        Raises:
            SelectionError: unknown dtype or not a cast target.
        """
        try:
            dtype = DType.parse(text)
        except ValueError:
            raise SelectionError(
                f"unknown dtype {text!r} in cast:{text}",
                hint="e.g. cast:f32, cast:f16, cast:bf16, cast:f64",
            ) from None
        return cls(dtype)

    def apply(self, entry: TensorEntry) -> Adapted:
        if not entry.dtype.is_float or entry.dtype is self.to:
            return entry, ()
        detail = f"{entry.dtype.value} -> {self.to.value}"
        action = Action(ActionKind.CAST, detail, "every float tensor is cast", self.describe())
        return cast_entry(entry, self.to), (action,)

    def describe(self) -> str:
        return f"cast:{self.to.value}"


@dataclass(frozen=True)
class HalfPrecision(BaseAdapter):
    """Burn's ``HalfPrecisionAdapter``: F32 <-> F16 for tensors of the listed module types.

    Attributes:
        decisions: module-type decisions by tensor name (else ``entry.module_type`` is used).
        modules: the module types converted (default: Burn's 14, without BatchNorm).
    """

    decisions: Mapping[str, Decision] = field(default_factory=dict)
    modules: frozenset[str] = HALF_PRECISION_MODULES

    def apply(self, entry: TensorEntry) -> Adapted:
        if entry.dtype not in (DType.F32, DType.F16):
            return entry, ()
        decision = resolve(entry, self.decisions)
        if decision is None or decision.module_type not in self.modules:
            return entry, ()
        target = DType.F16 if entry.dtype is DType.F32 else DType.F32
        detail = f"{entry.dtype.value} -> {target.value}"
        reason = f"{decision.module_type} is in the half-precision set ({decision.evidence})"
        return cast_entry(entry, target), (
            Action(ActionKind.CAST, detail, reason, self.describe()),
        )

    def describe(self) -> str:
        return "half"

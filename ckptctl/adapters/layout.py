"""``pytorch-to-burn`` and ``burn-to-pytorch``: Burn's PyTorch adapters.

See ``docs/formats/burn-store.md#pytorch-adapters``.

Only two things ever change:

* a rank-2 ``weight`` owned by a ``Linear`` is transposed (``[out, in]`` <-> ``[in, out]``);
* in ``BatchNorm``, ``LayerNorm``, ``GroupNorm``, ``RmsNorm`` and ``InstanceNorm`` PyTorch
  ``weight``/``bias`` are Burn ``gamma``/``beta`` (renamed; the RmsNorm rename needs Burn 0.22+,
  see the page), and PReLU's ``weight`` is Burn's ``alpha``. Burn's own adapters skip the last
  two (``docs/formats/burn-store.md#hazards``), so Burn's ``PytorchStore`` cannot load them;
  Burn's modules store these names.

Layers Burn stores as several modules (MultiheadAttention, LSTM, GRU, RNN, Transformer layers)
are split or fused before this adapter by :mod:`ckptctl.adapters.families`, whose decisions are
``done``. Everything else -- Embedding, convolutions, user parameters, tensors whose module type
is unknown -- passes through unchanged (the same entry, so copies stay zero-copy).
The module type comes from :mod:`ckptctl.adapters.modules` decisions; a target verdict in a
decision (``transpose``/``rename``) overrides the type-based rule. Burn does the file-side
rename for PyTorch -> Burn through an alternative-name lookup at load time; a file
converter has to rename for real, which is what this adapter does.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ckptctl.adapters._base import Action, ActionKind, Adapted, BaseAdapter
from ckptctl.adapters.modules import RENAMED_NORMS, Decision, resolve
from ckptctl.dtypes import ckernels
from ckptctl.model import TensorData, iter_row_blocks
from ckptctl.sources import spare_buffer

if TYPE_CHECKING:
    from collections.abc import Mapping

    from numpy.typing import NDArray

    from ckptctl.model import TensorEntry

#: Rows of the input copied per step: the output is written 16 elements (64 bytes of F32, one
#: cache line) per row, and the 16 input rows being read stay in cache meanwhile. Measured
#: against 32/64/128-element square tiles and numpy's own strided ``.T`` copy, this is the
#: fastest pure-numpy transpose here (benchmarks/RESULTS.md, round two).
STRIP_ROWS = 16
#: Columns per pass over a strip, so each pass's output rows stay in L2.
STRIP_COLUMNS = 1024
#: Bands narrower than this are transposed in one numpy call (:func:`_transpose_narrow`).
NARROW_COLUMNS = 128
#: Scratch of :func:`_transpose_units` (unit rows split back at a time): small enough to
#: stay in the CPU's cache between its two copies.
UNITS_SCRATCH_BYTES = 256 << 10
#: Below this many elements one numpy copy is faster than the strips.
SMALL_TRANSPOSE_ELEMENTS = 1 << 16
#: Output bytes per step of a transposed tensor written by ranges: a band of whole output rows
#: (input columns), up to ``STRIP_COLUMNS`` wide. numpy pays per call, so narrow bands are
#: slow (16-64 columns of a 4096-row F32 matrix: 0.2-0.5 GiB/s in-process under load, where
#: 512-2048 columns run at 1.0-1.3 GiB/s: benchmarks/RESULTS.md, issue 50); 8 MiB holds 512
#: columns of 4096 F32 rows, and one such buffer per copy thread keeps the peak memory
#: within its bound (64 MiB + the largest tensor, whose mapped input pages count too).
TRANSPOSE_STEP_BYTES = 4 << 20
#: The narrowest band: every input cache line read serves a whole line of output.
BAND_MIN_BYTES = 64


def transpose_into(out: NDArray[Any], array: NDArray[Any]) -> None:
    """Write ``array.T`` into ``out`` (shape ``array.shape[::-1]``, any strides), strip by strip.

    Works on any dtype by element: BF16/FP8 arrive as their raw unsigned-integer bits and are
    moved without decoding.
    """
    if _transpose_compiled(out, array):
        return
    rows, cols = array.shape
    if rows * cols <= SMALL_TRANSPOSE_ELEMENTS:
        np.copyto(out, array.T)
        return
    if (cols < NARROW_COLUMNS or array.dtype.itemsize < 4) and _transpose_units(out, array):
        return
    if cols < NARROW_COLUMNS and array.dtype.itemsize in (1, 2, 4, 8):
        _transpose_narrow(out, array)
        return
    for c in range(0, cols, STRIP_COLUMNS):
        source = array[:, c : c + STRIP_COLUMNS]
        target = out[c : c + STRIP_COLUMNS]
        for r in range(0, rows, STRIP_ROWS):
            np.copyto(target[:, r : r + STRIP_ROWS], source[r : r + STRIP_ROWS].T)


def _transpose_compiled(out: NDArray[Any], array: NDArray[Any]) -> bool:
    """:func:`transpose_into` by the compiled kernel (:func:`ckptctl.dtypes.ckernels`), if it is
    built and both arrays have rows of adjacent elements of 1, 2, 4 or 8 bytes (any row stride,
    as a band of columns of a memory map has); else False, writing nothing. The kernel gets each
    array's memory as a flat run of elements from its first to its last, and the row strides."""
    kernels = ckernels()
    item = array.dtype.itemsize
    if kernels is None or item not in (1, 2, 4, 8) or out.dtype.itemsize != item:
        return False
    rows, cols = array.shape
    if not rows or not cols:
        return True
    (src_row, src_col), (dst_row, dst_col) = array.strides, out.strides
    if src_col != item or dst_col != item or src_row % item or dst_row % item:
        return False
    if src_row < cols * item or dst_row < rows * item:  # not overlapping rows (nor negative)
        return False
    src = as_strided(array, ((rows - 1) * src_row // item + cols,), (item,), writeable=False)
    dst = as_strided(out, ((cols - 1) * dst_row // item + rows,), (item,))
    kernels.transpose(src, dst, rows, cols, src_row // item, dst_row // item, item)
    return True


def _transpose_narrow(out: NDArray[Any], array: NDArray[Any]) -> None:
    """:func:`transpose_into` of a narrow band of columns in one numpy call: both arrays seen
    as ``(row block, column, row in block)``, an order numpy's iterator keeps (the two
    arrays' strides disagree on it), so it walks the strips as the loop above does without a
    Python call per strip of a few hundred elements (1.0-1.25 GiB/s against 0.6-0.9 for 32-64
    columns of 16,384 F32 rows, in-process under load). Elements are moved as unsigned integers
    of their size (``positive`` of an integer is a copy; of a float it could quiet a NaN)."""
    rows, cols = array.shape
    full = rows - rows % STRIP_ROWS
    bits = np.dtype(f"<u{array.dtype.itemsize}")
    source = array[:full].view(bits).reshape(full // STRIP_ROWS, STRIP_ROWS, cols)
    target = out[:, :full].view(bits).reshape(cols, full // STRIP_ROWS, STRIP_ROWS)
    np.positive(source.transpose(0, 2, 1), out=target.transpose(1, 0, 2))
    if full < rows:
        np.copyto(out[:, full:], array[full:].T)


def _transpose_units(out: NDArray[Any], array: NDArray[Any]) -> bool:
    """:func:`transpose_into` in two passes, if ``array`` allows: its rows seen as 8-byte units
    of ``k`` adjacent elements (two F32, four F16) are transposed by :func:`_transpose_narrow`
    (which pays per element moved, so moving ``k`` at a time costs less) straight into
    ``out``, where unit row ``j`` fills output rows ``jk`` to ``jk + k - 1``; then each group
    of unit rows is copied to a small scratch buffer and split back into its output rows by one
    strided copy, at memory speed. Each input page is read once per band, as before. From the
    page cache, 64-column bands of ``[16384, 1024]`` F32: 9 % less CPU; F16 in 128-column
    bands: 38 % less (benchmarks/RESULTS.md, issue 50 round two). Returns False, writing
    nothing, for elements of 8 bytes or more, an ``out`` that is not C-contiguous, or an
    ``array`` whose rows cannot be seen as aligned 8-byte units."""
    rows, cols = array.shape
    item = array.dtype.itemsize
    k = 8 // item if item in (1, 2, 4) else 1
    if k == 1 or cols < k or not out.flags.c_contiguous:
        return False
    if array.strides[1] != item or array.strides[0] % 8 or array.ctypes.data % 8:
        return False
    full = cols - cols % k
    units = out[:full].reshape(-1).view(np.uint64).reshape(full // k, rows)
    _transpose_narrow(units, array[:, :full].view(np.uint64))
    bits = np.dtype(f"<u{item}")
    group = max(1, UNITS_SCRATCH_BYTES // (rows * 8))
    with spare_buffer("transpose_units", min(group, full // k) * rows * 8) as space:
        scratch = np.frombuffer(space, dtype=np.uint64)
        for j in range(0, full // k, group):
            moved = scratch[: min(group, full // k - j) * rows].reshape(-1, rows)
            np.copyto(moved, units[j : j + len(moved)])
            split = moved.view(bits).reshape(len(moved), rows, k).transpose(0, 2, 1)
            np.copyto(out[j * k : (j + len(moved)) * k].view(bits).reshape(-1, k, rows), split)
    if full < cols:
        _transpose_narrow(out[full:], array[:, full:])
    return True


def transpose_2d(array: NDArray[Any]) -> NDArray[Any]:
    """Transpose a 2-D array into a new C-contiguous array (see :func:`transpose_into`)."""
    rows, cols = array.shape
    out = np.empty((cols, rows), dtype=array.dtype)
    transpose_into(out, array)
    return out


def _load_transposed(entry: TensorEntry) -> NDArray[Any]:
    """Transpose block by block of rows: memory is the output plus one input block."""
    rows, cols = entry.shape
    if rows * cols <= SMALL_TRANSPOSE_ELEMENTS:
        return transpose_2d(entry.load())
    out = np.empty((cols, rows), dtype=entry.dtype.numpy)
    for first, block in iter_row_blocks(entry):
        transpose_into(out[:, first : first + block.shape[0]], block)
    return out


@dataclass(frozen=True, eq=False)
class TransposedData(TensorData):
    """The transpose of the rank-2 ``entry`` (``[rows, cols]`` -> ``[cols, rows]``).

    Whole (:meth:`read`), it is transposed block by block of input rows read with ``pread``.
    When the input lies in a local file, a range of whole output rows (a band of input
    columns) is also transposed on its own, straight from the file's memory map into the
    caller's buffer, so a writer streams it a band at a time on the copy threads
    (:meth:`compute_step`); the input's pages are unmapped again once every band was read.
    """

    entry: TensorEntry
    _done: list[int] = field(default_factory=lambda: [0])  # bytes read since the last release
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self) -> memoryview:
        return np.ascontiguousarray(_load_transposed(self.entry)).reshape(-1).view(np.uint8).data

    def is_ranged(self) -> bool:
        where = self.entry.data.file_range()
        return where is not None and not where[0].is_remote

    def compute_step(self) -> int:
        if not self.is_ranged() or not self.entry.nbytes:
            return 0
        rows, cols = self.entry.shape
        row_bytes = rows * self.entry.dtype.itemsize  # one output row
        least = -(-BAND_MIN_BYTES // self.entry.dtype.itemsize)
        band = max(least, TRANSPOSE_STEP_BYTES // row_bytes)
        band -= band % least  # whole cache lines of every input row: no odd column left over
        return min(cols, band) * row_bytes

    def read_range(self, start: int, length: int) -> bytes | memoryview:
        if start < 0 or length < 0 or start + length > self.entry.nbytes:
            raise ValueError(
                f"range {start}+{length} outside a tensor of {self.entry.nbytes} bytes"
            )
        if not self.is_ranged():
            return self.read()[start : start + length]
        row = self.entry.shape[0] * self.entry.dtype.itemsize
        first, stop = start - start % row, -(-(start + length) // row) * row
        out = np.empty(stop - first, dtype=np.uint8)
        self.read_into(first, out.data)
        return out.data[start - first : start - first + length]

    def read_into(self, start: int, out: memoryview) -> None:
        rows, cols = self.entry.shape
        row = rows * self.entry.dtype.itemsize
        where = self.entry.data.file_range()
        if where is None or where[0].is_remote or start % row or len(out) % row:
            out[:] = self.read_range(start, len(out))
            return
        source, offset = where
        source.check_still_holds(offset, self.entry.nbytes)  # not SIGBUS if it was truncated
        matrix = np.frombuffer(source.view(offset, self.entry.nbytes), self.entry.dtype.numpy)
        first, count = start // row, len(out) // row
        band = np.frombuffer(out, self.entry.dtype.numpy).reshape(count, rows)
        transpose_into(band, matrix.reshape(rows, cols)[:, first : first + count])
        with self._lock:
            self._done[0] += len(out)
            done = self._done[0] >= self.entry.nbytes
            if done:
                self._done[0] = 0
        if done:  # every band read: the input's mapped pages leave this process's memory
            source.release_pages(offset, self.entry.nbytes)


def transposed(entry: TensorEntry) -> TensorEntry:
    """A rank-2 entry with swapped shape whose data transposes lazily."""
    rows, cols = entry.shape
    return replace(entry, shape=(cols, rows), offset=None, data=TransposedData(entry))


def _fmt(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


# PyTorch's PReLU ``weight`` is Burn's ``PRelu.alpha`` (burn-nn src/activation/prelu.rs:12-15);
# Burn's own adapter does not rename it (docs/formats/burn-store.md#hazards), a converted file must.
_PRELU = {"pytorch-to-burn": {"weight": "alpha"}, "burn-to-pytorch": {"alpha": "weight"}}


def will_transpose(entry: TensorEntry, decision: Decision | None) -> bool:
    """Whether the layout adapters transpose ``entry`` under ``decision``: a rank-2 ``weight``
    of a Linear, unless the target's shapes gave another verdict; never a family's output."""
    if decision is None or decision.done or decision.module_type is None:
        return False
    if entry.name.rpartition(".")[2] != "weight" or len(entry.shape) != 2:
        return False
    return (
        decision.transpose if decision.transpose is not None else decision.module_type == "Linear"
    )


def _layout(
    entry: TensorEntry,
    decision: Decision | None,
    renames: Mapping[str, str],
    rename_rmsnorm: bool,
    label: str,
) -> Adapted:
    prefix, _, param = entry.name.rpartition(".")
    rank2_weight = param == "weight" and len(entry.shape) == 2
    if decision is not None and decision.done:
        return entry, ()
    if decision is not None and decision.module_type == "PRelu":
        renames = _PRELU.get(label, renames)
    if decision is None or decision.module_type is None:
        if rank2_weight:
            why = decision.evidence if decision else "module type unknown"
            # a target's shape decides a non-square weight (a wrong guess is a shape error);
            # a square one is unproven unless a verdict decided it
            unproven = entry.shape[0] == entry.shape[1] and (
                decision is None or decision.transpose is None
            )
            keep = Action(ActionKind.KEEP, _fmt(entry.shape), f"{why}; left as is", label, unproven)
            return entry, (keep,)
        return entry, ()
    module_type = decision.module_type
    if will_transpose(entry, decision):
        out = transposed(entry)
        detail = f"{_fmt(entry.shape)} -> {_fmt(out.shape)}"
        return out, (
            Action(ActionKind.TRANSPOSE, detail, f"{module_type} ({decision.evidence})", label),
        )
    new_param = renames.get(param)
    norm = module_type == "PRelu" or (
        module_type in RENAMED_NORMS and (rename_rmsnorm or module_type != "RmsNorm")
    )
    do_rename = new_param is not None and (decision.rename if decision.rename is not None else norm)
    if do_rename and new_param is not None:
        new_name = f"{prefix}.{new_param}" if prefix else new_param
        action = Action(
            ActionKind.RENAME,
            f"{entry.name} -> {new_name}",
            f"{module_type} ({decision.evidence})",
            label,
        )
        # carry the decided type so later adapters (half) still know it under the new name
        return replace(entry, name=new_name, module_type=module_type), (action,)
    if rank2_weight:
        reason = f"{module_type} ({decision.evidence}); not transposed"
        return entry, (Action(ActionKind.KEEP, _fmt(entry.shape), reason, label),)
    return entry, ()


@dataclass(frozen=True)
class _LayoutAdapter(BaseAdapter):
    """Transpose Linear weights and rename norm parameters, in one direction.

    Attributes:
        decisions: module-type decisions by tensor name (else ``entry.module_type`` is used).
        rename_rmsnorm: rename RmsNorm parameters too (Burn 0.22+; set False for Burn 0.21).
    """

    decisions: Mapping[str, Decision] = field(default_factory=dict)
    rename_rmsnorm: bool = True
    #: norm parameter renames in this direction
    renames: ClassVar[Mapping[str, str]] = {}
    name: ClassVar[str] = ""

    def apply(self, entry: TensorEntry) -> Adapted:
        decision = resolve(entry, self.decisions)
        return _layout(entry, decision, self.renames, self.rename_rmsnorm, self.describe())

    def describe(self) -> str:
        return self.name


@dataclass(frozen=True)
class PyTorchToBurn(_LayoutAdapter):
    """PyTorch -> Burn: transpose Linear weights, norm ``weight``/``bias`` -> ``gamma``/``beta``."""

    renames: ClassVar[Mapping[str, str]] = {"weight": "gamma", "bias": "beta"}
    name: ClassVar[str] = "pytorch-to-burn"


@dataclass(frozen=True)
class BurnToPyTorch(_LayoutAdapter):
    """Burn -> PyTorch: transpose Linear weights, norm ``gamma``/``beta`` -> ``weight``/``bias``."""

    renames: ClassVar[Mapping[str, str]] = {"gamma": "weight", "beta": "bias"}
    name: ClassVar[str] = "burn-to-pytorch"

"""Chunked, NaN-aware comparison of two tensor entries in bounded memory.

Tensors are compared ``CHUNK_ELEMENTS`` at a time. File-backed entries (``data.file_range()``
is not None) are read chunk by chunk with ``os.pread`` through their ``ByteSource`` rather than
through the memory map, because every page touched through a map counts in the process RSS until
the map is closed; two 10 GB files thus diff in a few tens of MiB. Computed entries (adapter
output, strided or compressed PyTorch tensors) have no file range and are loaded one tensor at
a time.

Values are compared as numbers, whatever the dtypes (F32 against F16 or BF16, I32 against I64):
each chunk is widened to float64 (complex128 for complex dtypes). The rules follow
``numpy.isclose(a, b, rtol, atol, equal_nan=True)`` with B as the reference:

* an element is *close* when ``|a - b| <= atol + rtol * |b|``; infinities are close only to the
  same infinity; NaN is close to NaN (any payload), never to a number;
* ``max_abs`` is ``max |a - b|`` and ``max_rel`` is ``max |a - b| / |b|`` over the elements where
  neither side is NaN (``inf`` when ``b`` is 0 and ``a`` is not, or when one side is infinite);
* ``nan_mismatched`` counts elements that are NaN on one side only; ``mismatched`` counts every
  element that is not close, NaN mismatches included;
* ``relative_change`` is ``‖a - b‖ / ‖a‖`` and ``cosine`` is ``<a, b> / (‖a‖ ‖b‖)`` (Euclidean
  norms of the flattened tensors, over the elements finite on both sides), the measures of how
  far a fine-tune moved a tensor; identical tensors give 0 and 1. Chunks whose bytes are equal
  cost no arithmetic until a chunk differs; then the equal ones before it are read once more
  for their norms.

64-bit integers above 2**53 lose precision in float64; two such values that differ but round
to the same float still count as mismatched, with a difference of at least 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ckptctl.dtypes import DType, to_float

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ckptctl.model import TensorData, TensorEntry
    from ckptctl.sources import ByteSource

#: Elements compared per step: 8 MiB of float64 per operand, a few tens of MiB in all.
CHUNK_ELEMENTS = 1 << 20

_INTEGERS = frozenset(
    {
        DType.I64,
        DType.I32,
        DType.I16,
        DType.I8,
        DType.U64,
        DType.U32,
        DType.U16,
        DType.U8,
        DType.BOOL,
    }
)


@dataclass(frozen=True)
class ValueDiff:
    """How the values of two tensors with the same element count differ.

    Attributes:
        identical_bytes: same dtype and every byte equal (the other numbers are then 0).
        max_abs: largest ``|a - b|`` where neither is NaN (0.0 for empty tensors).
        max_rel: largest ``|a - b| / |b|`` there (``inf`` when ``b`` is 0 and ``a`` is not).
        allclose: every element is close (``numpy.isclose`` with ``equal_nan=True``).
        mismatched: elements that are not close, NaN mismatches included.
        nan_mismatched: elements that are NaN on one side only.
        numel: elements compared.
        transposed: ``a.T`` was compared with ``b``.
        relative_change: ``‖a - b‖ / ‖a‖`` (``inf`` when ``a`` is 0 and ``b`` is not; None
            when the sums overflow float64).
        cosine: cosine similarity of ``a`` and ``b`` (None when either is 0, or on overflow).
    """

    identical_bytes: bool
    max_abs: float
    max_rel: float
    allclose: bool
    mismatched: int
    nan_mismatched: int
    numel: int
    transposed: bool = False
    relative_change: float | None = 0.0
    cosine: float | None = 1.0

    @property
    def equal(self) -> bool:
        """Every value is exactly equal as a number (NaN equal to NaN; -0.0 equal to 0.0)."""
        return self.identical_bytes or (self.mismatched == 0 and self.max_abs == 0.0)


class _Accumulator:
    """Running maxima and counts over the chunks of one comparison."""

    def __init__(self, rtol: float, atol: float, exact_ints: bool) -> None:
        self.rtol = rtol
        self.atol = atol
        self.exact_ints = exact_ints
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.mismatched = 0
        self.nan_mismatched = 0
        self.norms = np.zeros(4)  # ‖a‖², ‖b‖², <a, b>, ‖a - b‖² over elements finite on both

    def add_equal(self, raw: NDArray[Any], dtype: DType) -> None:
        """Fold in a chunk whose two sides have the same bytes (only their norms change)."""
        a = _as_float(raw, dtype)
        a = a[np.isfinite(a)]
        square = float(np.vdot(a, a).real)
        self.norms += (square, square, square, 0.0)

    def _add_norms(self, a: NDArray[Any], b: NDArray[Any]) -> None:
        finite = np.isfinite(a) & np.isfinite(b)
        a, b = a[finite], b[finite]
        delta = a - b
        self.norms += (
            np.vdot(a, a).real,
            np.vdot(b, b).real,
            np.vdot(b, a).real,  # Re(sum a * conj(b))
            np.vdot(delta, delta).real,
        )

    def add(self, raw_a: NDArray[Any], dtype_a: DType, raw_b: NDArray[Any], dtype_b: DType) -> None:
        """Fold one pair of same-shaped chunks (raw storage values) into the totals."""
        a = _as_float(raw_a, dtype_a)
        b = _as_float(raw_b, dtype_b)
        nan_a = np.isnan(a)
        nan_b = np.isnan(b)
        both_nan = nan_a & nan_b
        self.nan_mismatched += int(np.count_nonzero(nan_a ^ nan_b))
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            same = a == b
            delta = np.abs(a - b)  # inf - inf is NaN: fixed just below
            delta[same | both_nan] = 0.0
            if self.exact_ints:
                # 64-bit integers above 2**53 can round to the same float64 and still differ
                lost = (delta == 0.0) & (raw_a != raw_b)
                delta[lost] = 1.0
                same &= ~lost
            scale = np.abs(b)
            infinite = np.isinf(a) | np.isinf(b)
            close = same | both_nan | (~infinite & (delta <= self.atol + self.rtol * scale))
            numbers = ~(nan_a | nan_b)
            if np.any(numbers):
                d = delta[numbers]
                s = scale[numbers]
                self.max_abs = max(self.max_abs, float(np.max(d)))
                rel = np.where(d == 0.0, 0.0, d / s)
                rel[np.isnan(rel)] = np.inf  # inf / inf: a finite value against an infinite one
                self.max_rel = max(self.max_rel, float(np.max(rel)))
        self.mismatched += int(np.count_nonzero(~close))
        self._add_norms(a, b)

    def result(self, numel: int, *, transposed: bool) -> ValueDiff:
        relative, cosine = _norm_measures(*(float(x) for x in self.norms))
        return ValueDiff(
            identical_bytes=False,
            max_abs=self.max_abs,
            max_rel=self.max_rel,
            allclose=self.mismatched == 0,
            mismatched=self.mismatched,
            nan_mismatched=self.nan_mismatched,
            numel=numel,
            transposed=transposed,
            relative_change=relative,
            cosine=cosine,
        )


def _norm_measures(
    square_a: float, square_b: float, dot: float, square_delta: float
) -> tuple[float | None, float | None]:
    """Relative change and cosine from the sums; None where they overflowed float64 (values
    past about 1e154) or, for the cosine, where a side is all zeros."""
    if not all(map(math.isfinite, (square_a, square_b, dot, square_delta))):
        return None, None
    if square_a > 0:
        relative = math.sqrt(square_delta) / math.sqrt(square_a)
    else:
        relative = math.inf if square_delta > 0 else 0.0
    if square_a == 0 or square_b == 0:
        return relative, None
    cosine = dot / (math.sqrt(square_a) * math.sqrt(square_b))
    return relative, max(-1.0, min(1.0, cosine))


def _as_float(chunk: NDArray[Any], dtype: DType) -> NDArray[Any]:
    values = to_float(chunk, dtype)
    if values.dtype.kind == "c":
        return values.astype(np.complex128)
    return values.astype(np.float64)


class ElementReader:
    """Bounded random access to an entry's elements, as raw storage values.

    File-backed entries are read with ``os.pread`` per request; other entries are loaded once
    (one tensor in memory) and sliced.
    """

    def __init__(self, entry: TensorEntry) -> None:
        self.dtype = entry.dtype
        self.np_dtype = entry.dtype.numpy
        self.itemsize = entry.dtype.itemsize
        self._source: ByteSource | None = None
        self._offset = 0
        self._array: NDArray[Any] | None = None
        self._ranged: TensorData | None = None
        where = entry.data.file_range()
        if where is not None and entry.nbytes == entry.numel * self.itemsize:
            self._source, self._offset = where
        elif entry.data.is_ranged() and entry.nbytes == entry.numel * self.itemsize:
            self._ranged = entry.data  # a strided view: gathered per request, never whole
        else:
            self._array = entry.load().reshape(-1)

    @property
    def is_streamed(self) -> bool:
        """True when elements are read from the file per request (not held in memory)."""
        return self._source is not None

    def flat(self, start: int, count: int) -> NDArray[Any]:
        """Elements ``[start, start + count)`` of the flattened tensor."""
        if self._array is not None:
            return self._array[start : start + count]
        if self._ranged is not None:
            raw = self._ranged.read_range(start * self.itemsize, count * self.itemsize)
            return np.frombuffer(raw, dtype=self.np_dtype)
        assert self._source is not None
        raw = self._source.read(self._offset + start * self.itemsize, count * self.itemsize)
        return np.frombuffer(raw, dtype=self.np_dtype)

    def tile(self, rows: tuple[int, int], cols: tuple[int, int], ncols: int) -> NDArray[Any]:
        """The block ``[r0:r1, c0:c1]`` of the tensor viewed as a matrix with ``ncols`` columns."""
        (r0, r1), (c0, c1) = rows, cols
        if c0 == 0 and c1 == ncols:  # whole rows are contiguous: one read
            return self.flat(r0 * ncols, (r1 - r0) * ncols).reshape(r1 - r0, ncols)
        if self._array is not None:
            return self._array.reshape(-1, ncols)[r0:r1, c0:c1]
        return np.stack([self.flat(r * ncols + c0, c1 - c0) for r in range(r0, r1)])


def compare_values(
    a: TensorEntry, b: TensorEntry, *, rtol: float, atol: float, transposed: bool = False
) -> ValueDiff:
    """Compare the values of ``a`` and ``b``, chunk by chunk, in bounded memory.

    Args:
        a: the first entry.
        b: the second entry, with as many elements as ``a`` (any dtype).
        rtol: relative tolerance (of ``|b|``).
        atol: absolute tolerance.
        transposed: ``a`` is ``[m, n]`` and ``b`` is ``[n, m]``; compare ``a.T`` with ``b``.

    Returns:
        The differences.

    Raises:
        ValueError: the element counts (or, with ``transposed``, the shapes) do not fit.
        CorruptCheckpointError: a tensor's bytes lie outside its file.
    """
    numel = a.numel
    if numel != b.numel:
        raise ValueError(f"cannot compare {a.shape} with {b.shape}: element counts differ")
    reader_a, reader_b = ElementReader(a), ElementReader(b)
    acc = _Accumulator(rtol, atol, a.dtype in _INTEGERS and b.dtype in _INTEGERS)
    if transposed:
        if len(a.shape) != 2 or b.shape != (a.shape[1], a.shape[0]):
            raise ValueError(f"{a.shape} and {b.shape} are not transposes of each other")
        _compare_transposed(reader_a, reader_b, a.shape, acc)
        return acc.result(numel, transposed=True)
    same_dtype = a.dtype is b.dtype
    all_bytes_equal = same_dtype
    for start in range(0, numel, CHUNK_ELEMENTS):
        count = min(CHUNK_ELEMENTS, numel - start)
        chunk_a = reader_a.flat(start, count)
        chunk_b = reader_b.flat(start, count)
        if same_dtype and np.array_equal(chunk_a.view(np.uint8), chunk_b.view(np.uint8)):
            # equal bytes are equal values (NaN at the same place counts as equal); their norms
            # count once a chunk differs, so an identical tensor costs no arithmetic
            if not all_bytes_equal:
                acc.add_equal(chunk_a, a.dtype)
            continue
        if all_bytes_equal:
            for before in range(0, start, CHUNK_ELEMENTS):
                acc.add_equal(reader_a.flat(before, CHUNK_ELEMENTS), a.dtype)
        all_bytes_equal = False
        acc.add(chunk_a, a.dtype, chunk_b, b.dtype)
    if all_bytes_equal:
        return ValueDiff(True, 0.0, 0.0, True, 0, 0, numel)
    return acc.result(numel, transposed=False)


def _compare_transposed(
    reader_a: ElementReader, reader_b: ElementReader, shape: tuple[int, ...], acc: _Accumulator
) -> None:
    """Compare ``a.T`` with ``b`` by square tiles, so both sides are read in bounded pieces."""
    m, n = shape
    side = max(1, math.isqrt(CHUNK_ELEMENTS))
    for i0 in range(0, m, side):
        i1 = min(m, i0 + side)
        for j0 in range(0, n, side):
            j1 = min(n, j0 + side)
            tile_a = reader_a.tile((i0, i1), (j0, j1), n)  # a[i0:i1, j0:j1]
            tile_b = reader_b.tile((j0, j1), (i0, i1), m)  # b[j0:j1, i0:i1]
            acc.add(
                np.ascontiguousarray(tile_a.T).reshape(-1),
                reader_a.dtype,
                np.ascontiguousarray(tile_b).reshape(-1),
                reader_b.dtype,
            )

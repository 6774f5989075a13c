"""``show`` and ``ls --stats``: tensor values, decoded exactly, read one block at a time.

Statistics stream through :func:`ckptctl.ops._stream.iter_values` (one chunk resident, split
into cache-sized blocks) and combine per-block means and squared deviations
(Chan et al.'s pairwise update) in float64, so a tensor of any size costs one chunk of memory.
The preview is numpy's own printing (``str(array)``): for a tensor numpy would summarise, only
the elements numpy shows are read (see :func:`preview`).
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ckptctl.dtypes import DType, to_float
from ckptctl.model import STORED_TYPE
from ckptctl.ops._compare import ElementReader
from ckptctl.ops._stream import iter_values
from ckptctl.report.values import Histogram, TensorStats

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ckptctl.model import TensorEntry

#: Elements per statistics block: 1 MiB of F32 (one ``FILE_CHUNK_BYTES`` piece, in L2), its
#: float64 copy and zero mask in L3 between the block's passes. Quarter-size blocks were no
#: faster on the benchmark VM (more calls, about 15 us each), 4 MiB blocks twice as slow.
BLOCK_ELEMENTS = 1 << 18
#: A block's ``Σx² / Σ(x - mean)²`` above which its one-pass sum of squares is redone in two
#: passes (the one-pass result keeps ``16 - log10(_CANCELLING)`` digits, about 14).
_CANCELLING = 64.0
#: Bins of ``show``'s histogram.
HISTOGRAM_BINS = 32
#: numpy's print options the preview follows (its defaults: ``np.get_printoptions()``).
_EDGE_ITEMS = 3
_THRESHOLD = 1000


def _decoded(raw: NDArray[Any], dtype: DType) -> NDArray[Any]:
    """Values numpy can print and compute with: F16 stays float16, BF16/FP8 become the float32
    they are exactly, the rest are as stored."""
    return raw if dtype.is_native else to_float(raw, dtype)


class _Moments:
    """Running count, mean and sum of squared deviations, min, max, zeros, NaN, Inf.

    A block's squared deviations come from its float64 sum and sum of squares
    (``Σx² - mean·Σx``): one conversion to float64 and two sums, no pass that subtracts the
    mean. That difference cancels when the mean is large against the spread; where it would
    keep fewer than about 14 of float64's 16 digits (``Σx²`` more than ``_CANCELLING`` times
    the result) the block is summed again the two-pass way, ``Σ(x - mean)²``.
    """

    def __init__(self) -> None:
        self.count = self.finite = self.zeros = self.nan = self.inf = 0
        self.mean = self.m2 = 0.0
        self.low = math.inf
        self.high = -math.inf
        self.scratch = np.empty(BLOCK_ELEMENTS, dtype=np.float64)
        self.is_zero = np.empty(BLOCK_ELEMENTS, dtype=np.bool_)

    def add(self, values: NDArray[Any]) -> None:
        for start in range(0, values.size, BLOCK_ELEMENTS):
            self._block(values[start : start + BLOCK_ELEMENTS])

    def _block(self, v: NDArray[Any]) -> None:
        n = v.size
        self.count += n
        self.zeros += int(np.count_nonzero(np.equal(v, 0, out=self.is_zero[:n])))
        low, high = float(v.min()), float(v.max())  # NaN propagates, Inf shows as an end
        if not (math.isfinite(low) and math.isfinite(high)):
            nan = np.isnan(v)
            self.nan += int(np.count_nonzero(nan))
            self.inf += int(np.count_nonzero(np.isinf(v)))
            v = v[np.isfinite(v)]
            n = v.size
            if not n:
                return
            low, high = float(v.min()), float(v.max())
        self.low, self.high = min(self.low, low), max(self.high, high)
        x = self.scratch[:n]
        np.copyto(x, v, casting="unsafe")
        total = float(x.sum())
        mean = total / n
        np.multiply(x, x, out=x)
        squares = float(x.sum())
        m2 = squares - total * mean
        if m2 * _CANCELLING < squares:
            np.copyto(x, v, casting="unsafe")
            np.subtract(x, mean, out=x)
            np.multiply(x, x, out=x)
            m2 = float(x.sum())
        self._merge(n, mean, m2)

    def _merge(self, n: int, mean: float, m2: float) -> None:
        """Chan et al.'s update: this block's count, mean and squared deviations into the total."""
        total = self.finite + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.finite * n / total
        self.finite = total

    def result(self, histogram: Histogram | None) -> TensorStats:
        some = self.finite > 0
        return TensorStats(
            count=self.count,
            min=self.low if some else None,
            max=self.high if some else None,
            mean=self.mean if some else None,
            std=math.sqrt(self.m2 / (self.finite - 1)) if self.finite > 1 else None,
            absmax=max(-self.low, self.high) if some else None,
            zeros=self.zeros,
            nan=self.nan,
            inf=self.inf,
            histogram=histogram,
        )


def value_entry(entry: TensorEntry) -> TensorEntry | None:
    """The entry whose values statistics and previews read: a block-quantized GGUF tensor
    decoded to F32 (``formats.gguf.dequantized``); None when its type cannot be decoded."""
    if STORED_TYPE not in entry.extra:
        return entry
    from ckptctl.formats.gguf import can_decode, dequantized

    return dequantized(entry) if can_decode(entry) else None


def tensor_stats(entry: TensorEntry, *, histogram: bool = False) -> TensorStats | None:
    """Statistics of ``entry``'s values in one streamed pass (a second for ``histogram``).

    Returns:
        The statistics; None for complex tensors and stored types that cannot be decoded.
    """
    decoded = value_entry(entry)
    if decoded is None or decoded.dtype in (DType.C64, DType.C128):
        return None
    entry = decoded
    moments = _Moments()
    for raw in iter_values(entry):
        moments.add(_decoded(raw, entry.dtype))
    hist = None
    if histogram and moments.finite:
        hist = _histogram(entry, moments.low, moments.high)
    return moments.result(hist)


def _histogram(entry: TensorEntry, low: float, high: float) -> Histogram:
    counts = np.zeros(HISTOGRAM_BINS, dtype=np.int64)
    top = high if high > low else low + 1.0  # one value: everything in the first bin
    for raw in iter_values(entry):
        values = _decoded(raw, entry.dtype)
        if values.dtype.kind == "f":
            values = values[np.isfinite(values)]
        elif values.dtype.kind == "b":
            values = values.view(np.uint8)  # np.histogram warns on bool input
        found, _ = np.histogram(values, bins=HISTOGRAM_BINS, range=(low, top))
        counts += found
    return Histogram(low, high, tuple(int(c) for c in counts))


def preview(entry: TensorEntry) -> str:
    """``str(values)`` as numpy prints the whole tensor, reading only what numpy shows.

    numpy summarises an array of more than 1000 elements: along each axis longer than six it
    prints the first and last three and ``...``, and chooses the number format from those
    elements alone. So the preview gathers, per axis, the first three, one stand-in and the last
    three (seven indices: numpy still sees an axis it must cut, and cuts the stand-in) and
    prints that small array with numpy, summarised.
    """
    entry = value_entry(entry) or entry  # undecodable blocks: shown as their bytes
    if entry.numel <= _THRESHOLD:
        return str(_decoded(entry.load(), entry.dtype))
    picks = [
        list(range(d)) if d <= 2 * _EDGE_ITEMS else [0, 1, 2, 0, d - 3, d - 2, d - 1]
        for d in entry.shape
    ]
    reader = ElementReader(entry)
    last = entry.shape[-1]
    strides = [math.prod(entry.shape[i + 1 :]) for i in range(len(entry.shape))]
    rows = []
    for lead in itertools.product(*picks[:-1]):
        base = sum(i * s for i, s in zip(lead, strides, strict=False))
        if last <= 2 * _EDGE_ITEMS:
            rows.append(reader.flat(base, last))
        else:
            head = reader.flat(base, _EDGE_ITEMS)
            tail = reader.flat(base + last - _EDGE_ITEMS, _EDGE_ITEMS)
            rows.append(np.concatenate([head, head[:1], tail]))
    corner = np.concatenate(rows).reshape([len(p) for p in picks])
    return np.array2string(_decoded(corner, entry.dtype), threshold=0)

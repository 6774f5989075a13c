"""Chunked, NaN-aware comparison of two tensor entries in bounded memory.

Both entries are read as flat views (memory-mapped where the format allows) and compared
``CHUNK_ELEMENTS`` at a time, so two 10 GB files diff with a few MiB of working memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ckptctl.dtypes import to_float

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ckptctl.model import TensorEntry

#: Elements compared per step (8 MiB of float64 per operand).
CHUNK_ELEMENTS = 1 << 20


@dataclass(frozen=True)
class ValueDiff:
    """How the values of two same-sized tensors differ."""

    identical_bytes: bool
    max_abs: float
    max_rel: float
    allclose: bool
    mismatched: int
    nan_mismatched: int
    numel: int
    transposed: bool = False


def _flat(entry: TensorEntry) -> NDArray[Any]:
    return entry.load().reshape(-1)


def _as_float(chunk: NDArray[Any], entry: TensorEntry) -> NDArray[Any]:
    values = to_float(chunk, entry.dtype)
    if values.dtype.kind == "c":
        return values.astype(np.complex128)
    return values.astype(np.float64)


def _accumulate(
    a: NDArray[Any], b: NDArray[Any], rtol: float, atol: float, acc: list[float]
) -> None:
    """Fold one chunk into ``acc = [max_abs, max_rel, mismatched, nan_mismatched]``."""
    nan_a = np.isnan(a)
    nan_b = np.isnan(b)
    both_nan = nan_a & nan_b
    acc[3] += int(np.count_nonzero(nan_a ^ nan_b))
    with np.errstate(invalid="ignore", over="ignore"):
        same_inf = (a == b) & np.isinf(a)
        delta = np.abs(a - b)
        delta[both_nan | same_inf] = 0.0
        finite = ~(nan_a | nan_b)
        if np.any(finite):
            acc[0] = max(acc[0], float(np.max(delta[finite])))
            scale = np.abs(b[finite])
            rel = delta[finite] / np.where(scale > 0, scale, 1.0)
            rel[(scale == 0) & (delta[finite] > 0)] = np.inf
            acc[1] = max(acc[1], float(np.max(rel)))
        close = (delta <= atol + rtol * np.abs(b)) | both_nan | same_inf
    acc[2] += int(np.count_nonzero(~close))


def compare_values(
    a: TensorEntry, b: TensorEntry, *, rtol: float, atol: float, transposed: bool = False
) -> ValueDiff:
    """Compare the values of ``a`` and ``b`` (same element count; any dtypes).

    With ``transposed``, ``a`` is ``[m, n]`` and ``b`` is ``[n, m]`` and ``a.T`` is compared.
    """
    numel = a.numel
    identical = False
    if not transposed and a.dtype is b.dtype and a.nbytes == b.nbytes:
        identical = _bytes_equal(a, b)
        if identical:
            return ValueDiff(True, 0.0, 0.0, True, 0, 0, numel)
    acc = [0.0, 0.0, 0.0, 0.0]
    if transposed:
        left = a.load()
        right = b.load()
        rows = max(1, CHUNK_ELEMENTS // max(1, right.shape[1]))
        for start in range(0, right.shape[0], rows):
            chunk_b = right[start : start + rows]
            chunk_a = np.ascontiguousarray(left[:, start : start + rows].T)
            _accumulate(_as_float(chunk_a, a), _as_float(chunk_b, b), rtol, atol, acc)
    else:
        fa, fb = _flat(a), _flat(b)
        for start in range(0, numel, CHUNK_ELEMENTS):
            end = start + CHUNK_ELEMENTS
            _accumulate(_as_float(fa[start:end], a), _as_float(fb[start:end], b), rtol, atol, acc)
    mismatched = int(acc[2])
    return ValueDiff(
        identical_bytes=False,
        max_abs=acc[0],
        max_rel=acc[1],
        allclose=mismatched == 0 and acc[3] == 0,
        mismatched=mismatched,
        nan_mismatched=int(acc[3]),
        numel=numel,
        transposed=transposed,
    )


def _bytes_equal(a: TensorEntry, b: TensorEntry) -> bool:
    ra, rb = a.data.read(), b.data.read()
    if len(ra) != len(rb):
        return False
    step = CHUNK_ELEMENTS * 8
    return all(ra[i : i + step] == rb[i : i + step] for i in range(0, len(ra), step))

"""DeepSpeed tensors made of byte ranges of other tensors (the ranks' flat partitions).

A consolidated parameter is a ``model.PiecesData``: byte ranges (``Piece`` s) of the flat fp32
tensors in the rank files, in order, which writers copy straight from the files.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ckptctl.dtypes import DType
from ckptctl.errors import CorruptCheckpointError
from ckptctl.model import ComputedData, Piece, PiecesData, TensorEntry

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import NDArray


def slice_elements(parts: Sequence[TensorEntry], first: int, count: int) -> list[Piece]:
    """Elements ``first .. first + count - 1`` of the 1-D tensors ``parts`` concatenated."""
    out: list[Piece] = []
    at = 0
    for part in parts:
        n = part.numel
        lo, hi = max(first, at), min(first + count, at + n)
        if lo < hi:
            size = part.dtype.itemsize
            out.append(Piece(part.data, (lo - at) * size, (hi - lo) * size))
        at += n
        if at >= first + count:
            break
    if sum(p.length for p in out) != count * (parts[0].dtype.itemsize if parts else 0):
        raise CorruptCheckpointError(
            f"elements {first}..{first + count - 1} lie past the end of the fp32 partitions "
            f"({at} elements)"
        )
    return out


def truncate(pieces: list[Piece], nbytes: int) -> tuple[Piece, ...]:
    out: list[Piece] = []
    left = nbytes
    for p in pieces:
        if left <= 0:
            break
        out.append(Piece(p.data, p.start, min(p.length, left)))
        left -= out[-1].length
    return tuple(out)


def pieces_entry(
    name: str, dtype: DType, shape: tuple[int, ...], pieces: Sequence[Piece]
) -> TensorEntry:
    """An entry over ``pieces``; ``extra`` counts them and the rank files they lie in."""
    nbytes = math.prod(shape) * dtype.itemsize
    data = PiecesData(tuple(pieces), nbytes)
    where = data.file_range()
    files = {id(r[0]) if (r := p.data.file_range()) else id(p.data) for p in pieces}
    extra = {"chunks": str(len(pieces)), "rank_files": str(len(files))}
    return TensorEntry(name, dtype, shape, nbytes, where[1] if where else None, data, extra=extra)


def as_f32(entry: TensorEntry) -> TensorEntry:
    """``tensor.float()`` of a floating buffer (zero_to_fp32 widens F16/BF16/F64 buffers)."""
    if entry.dtype not in (DType.F16, DType.BF16, DType.F64):
        return entry
    import numpy as np

    from ckptctl.dtypes import to_float

    def compute() -> NDArray[Any]:
        return np.ascontiguousarray(to_float(entry.load(), entry.dtype), dtype="<f4")

    nbytes = entry.numel * 4
    return TensorEntry(entry.name, DType.F32, entry.shape, nbytes, None, ComputedData(compute))

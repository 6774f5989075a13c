"""Lazy row ranges and row concatenations of tensors, for the splits and fuses of ``families``.

A block of rows of a row-major tensor is one contiguous byte range, so a split reads only its
own rows (``read_range`` of the source, ``pread`` for file-backed data) and a transposed split
reads them block by block (``layout.transposed``). A fuse writes each part's rows straight into
the one output buffer: the fused tensor exists once, never as parts plus a copy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from ckptctl.model import ComputedData, TensorData, iter_row_blocks

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ckptctl.model import TensorEntry
    from ckptctl.sources import ByteSource


@dataclass(frozen=True, eq=False)
class RowsData(TensorData):
    """Rows ``[first, first + count)`` of ``inner`` (a row-major tensor, ``row_bytes`` per row)."""

    inner: TensorData
    start: int
    nbytes: int

    def read(self) -> memoryview:
        return memoryview(self.inner.read_range(self.start, self.nbytes)).cast("B")

    def read_range(self, start: int, length: int) -> bytes | memoryview:
        if start < 0 or length < 0 or start + length > self.nbytes:
            raise ValueError(f"range {start}+{length} outside a tensor of {self.nbytes} bytes")
        return self.inner.read_range(self.start + start, length)

    def is_ranged(self) -> bool:
        return self.inner.is_ranged()

    def read_into(self, start: int, out: memoryview) -> None:
        if start < 0 or start + len(out) > self.nbytes:
            raise ValueError(f"range {start}+{len(out)} outside a tensor of {self.nbytes} bytes")
        self.inner.read_into(self.start + start, out)

    def file_range(self) -> tuple[ByteSource, int] | None:
        where = self.inner.file_range()  # a block of rows of a contiguous tensor lies in the file
        return None if where is None else (where[0], where[1] + self.start)


def row_slice(entry: TensorEntry, first: int, count: int, name: str) -> TensorEntry:
    """Rows ``[first, first + count)`` of ``entry`` along its first axis, as a lazy entry."""
    row_bytes = entry.nbytes // entry.shape[0] if entry.shape[0] else 0
    shape = (count, *entry.shape[1:])
    data = RowsData(entry.data, first * row_bytes, count * row_bytes)
    return replace(entry, name=name, shape=shape, nbytes=count * row_bytes, offset=None, data=data)


def _fill(
    parts: tuple[tuple[TensorEntry, bool], ...], shape: tuple[int, ...], dtype: np.dtype[Any]
) -> NDArray[Any]:
    import numpy as np  # here: listing and raw copies never load numpy (tests/test_core.py)

    from ckptctl.adapters.layout import transpose_into

    out: NDArray[Any] = np.empty(shape, dtype=dtype)
    row = 0
    for part, transpose in parts:
        if transpose:  # part is [in, rows_i]: its transpose fills rows [row, row + rows_i)
            rows = part.shape[1]
            for first, block in iter_row_blocks(part):
                transpose_into(out[row : row + rows, first : first + block.shape[0]], block)
        else:
            rows = part.shape[0]
            for first, block in iter_row_blocks(part):
                out[row + first : row + first + block.shape[0]] = block
        row += rows
    return out


def concat_rows(
    parts: tuple[tuple[TensorEntry, bool], ...], name: str, template: TensorEntry
) -> TensorEntry:
    """Parts stacked along the first axis (each transposed first when its flag says so)."""
    rows = sum(p.shape[1] if t else p.shape[0] for p, t in parts)
    first, transpose = parts[0]
    rest = first.shape[:1] if transpose else first.shape[1:]
    shape = (rows, *rest)
    nbytes = sum(p.nbytes for p, _ in parts)
    data = ComputedData(partial(_fill, parts, shape, template.dtype.numpy))
    return replace(
        template, name=name, shape=shape, nbytes=nbytes, offset=None, data=data, param_id=None
    )

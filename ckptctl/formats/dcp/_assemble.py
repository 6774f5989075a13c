"""A DCP tensor's bytes, assembled from its chunks: whole, by file ranges, or gathered."""

from __future__ import annotations

import heapq
import itertools
import math
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptctl.errors import CorruptCheckpointError
from ckptctl.model import (
    FileData,
    Piece,
    PiecesData,
    TensorData,
    TensorEntry,
    iter_row_blocks,
)
from ckptctl.sources import Interleaved

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from numpy.typing import NDArray

    from ckptctl.dtypes import DType
    from ckptctl.sources import ByteSource, SliceSource


class LazyChunk:
    """One chunk of a tensor: where it goes (``offsets``, ``sizes``, from ``.metadata``) and its
    entry, opened from its item the first time its bytes are needed (listing a checkpoint of
    100,000 items opens none of them) and kept when ``keep`` (a chunk whose item is decoded into
    memory is opened again each time instead, so memory does not grow with the checkpoint)."""

    def __init__(
        self,
        offsets: tuple[int, ...],
        sizes: tuple[int, ...],
        opener: Callable[[], TensorEntry],
        keep: bool = True,
    ) -> None:
        self.offsets = offsets
        self.sizes = sizes
        self._opener = opener
        self._keep = keep
        self._entry: TensorEntry | None = None
        self._lock = threading.Lock()  # sharded writes read tensors in threads

    @property
    def entry(self) -> TensorEntry:
        """The chunk's values, as the entry of its item.

        Raises:
            CkptError: the item is damaged, unsafe or not what ``.metadata`` says.
        """
        if not self._keep:
            return self._opener()
        with self._lock:
            if self._entry is None:
                self._entry = self._opener()
            return self._entry


@dataclass(frozen=True, eq=False)
class AssembledData(TensorData):
    """A tensor's bytes assembled from its chunks.

    Attributes:
        chunks: the chunks.
        dtype: the tensor's dtype.
        shape: the global shape.
        decoded: some chunk is decoded into memory (a stream transform): no file ranges, and
            the tensor is read whole, each chunk decoded once.
    """

    chunks: tuple[LazyChunk, ...]
    dtype: DType
    shape: tuple[int, ...]
    decoded: bool = False

    @property
    def nbytes(self) -> int:
        """The tensor's size in bytes."""
        return math.prod(self.shape) * self.dtype.itemsize

    def _whole(self) -> TensorEntry | None:
        """The one chunk, when it is the whole tensor."""
        return self.chunks[0].entry if self._is_one_chunk() else None

    def _split_by_rows(self) -> bool:
        """Whether the tensor is several chunks, each whole rows (of the first dimension)."""
        if not self.shape or self._is_one_chunk():
            return False
        rest = self.shape[1:]
        return all(c.sizes[1:] == rest and not any(c.offsets[1:]) for c in self.chunks)

    def _is_one_chunk(self) -> bool:
        return len(self.chunks) == 1 and self.chunks[0].sizes == self.shape

    def _rows(self) -> PiecesData | None:
        """The chunks' bytes in row order, when split by rows (the chunks tile the tensor,
        ``_metadata`` checks, so one after the other they are its bytes)."""
        if self.decoded or not self._split_by_rows():
            return None
        row = math.prod(self.shape[1:]) * self.dtype.itemsize
        ordered = sorted((c for c in self.chunks if c.sizes[0]), key=lambda c: c.offsets[0])
        pieces = tuple(Piece(c.entry.data, 0, c.sizes[0] * row) for c in ordered)
        return PiecesData(pieces, self.nbytes)

    def read(self) -> memoryview:
        import numpy as np

        whole = self._whole()
        if whole is not None:
            return memoryview(whole.data.read())
        out: NDArray[Any] = np.empty(self.shape, dtype=self.dtype.numpy)
        flat = out.reshape(-1).view(np.uint8).data
        for chunk in self.chunks:
            entry = chunk.entry
            if not scatter(flat, self.shape, chunk.offsets, entry):
                for first, block in iter_row_blocks(entry):
                    place = tuple(
                        slice(o + (first if d == 0 else 0), o + (first if d == 0 else 0) + n)
                        for d, (o, n) in enumerate(zip(chunk.offsets, block.shape, strict=True))
                    )
                    out[place] = block
        return flat

    def file_pieces(self) -> Iterable[tuple[ByteSource, int, int]] | None:
        """The chunks' contiguous runs as file ranges in the tensor's byte order (a row split:
        one range per chunk; a column split: each row's part of every chunk, which writers copy
        from the rank files a buffer-full at a time, never assembling the tensor); None when a
        chunk is not contiguous in a file, or is many runs shorter than ``MIN_RUN_BYTES``."""
        if self.decoded or self._is_one_chunk():
            return None
        located: list[tuple[ByteSource, int, Runs]] = []
        for chunk in self.chunks:
            entry = chunk.entry
            where = entry.data.file_range()
            if entry.nbytes == 0:
                continue
            if where is None:
                return None
            runs = chunk_runs(self.shape, chunk.offsets, entry)
            if runs.length < MIN_RUN_BYTES and runs.count > 1:
                return None
            located.append((where[0], where[1], runs))
        return in_tensor_order(located)

    def file_range(self) -> tuple[ByteSource, int] | None:
        whole = None if self.decoded else self._whole()
        return None if whole is None else whole.data.file_range()

    def is_ranged(self) -> bool:
        if self.decoded:
            return False
        whole = self._whole()
        if whole is not None:
            return whole.data.is_ranged()
        return self._split_by_rows()

    def read_range(self, start: int, length: int) -> bytes | memoryview:
        if self.decoded:
            return self.read()[start : start + length]
        whole = self._whole()
        if whole is not None:
            return whole.data.read_range(start, length)
        rows = self._rows()
        if rows is None:
            return self.read()[start : start + length]
        return rows.read_range(start, length)


#: Shortest contiguous run gathered by ``preadv`` straight into the tensor (shorter runs go
#: through row blocks: one system call per few bytes would cost more than a copy).
MIN_RUN_BYTES = 512
#: Buffers per ``preadv`` call (Linux's ``IOV_MAX``).
MAX_IOVECS = 1024


@dataclass(frozen=True)
class Runs:
    """A chunk's contiguous runs in the C-order tensor it is part of (its innermost partial
    dimension and the whole dimensions after it), in the chunk's own order, in which they
    follow each other in its file.

    Attributes:
        length: bytes per run.
        count: how many.
        base: where the first starts in the tensor (bytes).
        sizes: the chunk's sizes of the dimensions before the run's (the outer index grid).
        strides: the tensor's strides (bytes) of those dimensions.
    """

    length: int
    count: int
    base: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    def starts(self) -> Iterator[int]:
        """Where each run starts in the tensor, ascending (pure Python: copying a tensor's
        ranges needs no numpy)."""
        if not self.sizes:
            yield self.base
            return
        *outer, last = self.sizes
        step = self.strides[-1]
        for index in itertools.product(*map(range, outer)):
            first = self.base + sum(i * st for i, st in zip(index, self.strides, strict=False))
            yield from range(first, first + last * step, step)


def chunk_runs(shape: tuple[int, ...], offsets: tuple[int, ...], entry: TensorEntry) -> Runs:
    """The contiguous runs of the chunk ``entry`` at ``offsets`` of a tensor of ``shape``."""
    sizes = entry.shape
    axis = max((d for d, (n, full) in enumerate(zip(sizes, shape, strict=True)) if n != full),
               default=0)  # fmt: skip
    itemsize = entry.dtype.itemsize
    strides = tuple(math.prod(shape[d + 1 :]) * itemsize for d in range(len(shape)))
    base = sum(o * st for o, st in zip(offsets, strides, strict=True))
    return Runs(
        math.prod(sizes[axis:]) * itemsize,
        math.prod(sizes[:axis]),
        base,
        tuple(sizes[:axis]),
        strides[:axis],
    )


def in_tensor_order(
    located: list[tuple[ByteSource, int, Runs]],
) -> Iterable[tuple[ByteSource, int, int]]:
    """``(source, offset, length)`` of every run of the chunks ``(source, start, runs)``, in the
    order of their places in the tensor (the chunks tile it, ``_metadata`` checks, so one after
    the other they are its bytes): round by round where the chunks run in lockstep (a column
    split, which ``copy_ranges`` copies without listing its runs), else merged."""
    if not _in_lockstep(located):
        return _InTensorOrder(located)
    order = sorted(located, key=lambda one: one[2].base)
    return Interleaved(tuple((source, start, runs.length) for source, start, runs in order),
                       located[0][2].count)  # fmt: skip


@dataclass(frozen=True)
class _InTensorOrder:
    """The runs of chunks not in lockstep in tensor order (:func:`in_tensor_order`), merged
    lazily each time it is iterated."""

    located: list[tuple[ByteSource, int, Runs]]

    def __iter__(self) -> Iterator[tuple[ByteSource, int, int]]:
        def chunk(source: ByteSource, start: int, runs: Runs) -> Iterator[tuple[int, ...]]:
            n = runs.length
            return zip(runs.starts(), itertools.count(start, n), itertools.repeat(n))

        located = self.located
        streams = [chunk(*one) for one in located]
        tagged = (zip(stream, itertools.repeat(i)) for i, stream in enumerate(streams))
        for (_, offset, length), i in heapq.merge(*tagged, key=lambda item: item[0][0]):
            yield located[i][0], offset, length


def _in_lockstep(located: list[tuple[ByteSource, int, Runs]]) -> bool:
    """Whether the chunks' runs follow each other in the tensor round by round: every chunk has
    the same grid of runs (sizes and strides: a split along the runs' own dimension, such as a
    column split) and all first runs start within one step of that grid, so run k of every
    chunk, in the order of their bases, comes before run k + 1 of any."""
    if not located:
        return False
    first = located[0][2]
    if any(r.sizes != first.sizes or r.strides != first.strides for _, _, r in located):
        return False
    bases = [r.base for _, _, r in located]
    # successive runs of one chunk are at least the innermost stride apart (C order)
    return not first.sizes or max(bases) - min(bases) < first.strides[-1]


def scatter(
    flat: memoryview, shape: tuple[int, ...], offsets: tuple[int, ...], entry: TensorEntry
) -> bool:
    """Read a chunk stored contiguous in a file straight into its place in the C-order tensor
    ``flat`` (bytes) with ``preadv``: each contiguous run of the chunk (:func:`chunk_runs`)
    goes into its own buffer, so nothing passes through an intermediate copy and no file page
    is mapped. False when it cannot (the chunk is not contiguous in a file, or its runs are
    short); the caller then copies row blocks."""
    where = entry.data.file_range()
    preadv = getattr(os, "preadv", None)
    if where is None or preadv is None or entry.nbytes == 0:
        return False
    source, start = where
    try:
        fd = source.fileno()
    except OSError:
        return False
    runs = chunk_runs(shape, offsets, entry)
    run = runs.length
    if run < MIN_RUN_BYTES:
        return False
    dest = list(runs.starts())
    for first in range(0, len(dest), MAX_IOVECS):
        batch = dest[first : first + MAX_IOVECS]
        buffers = [flat[d : d + run] for d in batch]
        got = preadv(fd, buffers, start + first * run)
        if got != run * len(batch):
            raise CorruptCheckpointError(
                f"tensor chunk at byte {start} of {source.path} is short ({got} bytes read)",
                path=source.path,
            )
    return True


def absolute(entry: TensorEntry, source: SliceSource) -> TensorEntry:
    """A chunk entry whose bytes lie contiguous in the item, as a range of the rank file (so
    writers copy it with ``copy_file_range``)."""
    data = entry.data
    if isinstance(data, FileData) and data.source is source:
        from dataclasses import replace

        offset = source.absolute(data.offset)
        return replace(entry, offset=offset, data=FileData(source.parent, offset, data.nbytes))
    return entry

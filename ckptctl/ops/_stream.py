"""One tensor's bytes, a bounded chunk at a time: what ``hash``, ``show`` and ``ls --stats`` read.

File-backed entries are read with ``preadv`` into one reused buffer of ``FILE_CHUNK_BYTES``
(:func:`ckptctl.sources.read_chunks`), never through the memory map, so a pass over a 100 GB
file keeps one chunk resident. Strided
views (``.pt`` views, expanded stride-0 views) are gathered whole rows at a time; other computed
entries (adapters, compressed storages) produce their bytes in memory anyway and are sliced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from ckptctl.errors import CorruptCheckpointError
from ckptctl.formats._base import ranged_step
from ckptctl.sources import CHUNK_BYTES, read_chunks

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from ckptctl.model import Progress, TensorEntry

T = TypeVar("T")

#: Pieces a file-backed tensor is read in. The buffer stays in a 1 MiB L2 cache between the
#: kernel's copy and the reader's passes (SHA-256, statistics); 8 MiB pieces were evicted first
#: and cost ``ls --stats`` a quarter more CPU (0.97-1.02 s against 0.68-0.78 s per GiB on the
#: benchmark VM; mapping each chunk instead: 0.80-0.94 s; benchmarks/RESULTS.md, issue 27).
FILE_CHUNK_BYTES = 1 << 20


def iter_bytes(entry: TensorEntry) -> Iterator[bytes | memoryview]:
    """The canonical bytes of ``entry`` (C order, little-endian), in order, in pieces of at most
    ``CHUNK_BYTES`` (``FILE_CHUNK_BYTES`` from a file, whole rows for strided views). A piece
    is valid until the next is taken.

    Raises:
        CorruptCheckpointError: the bytes are not ``entry.nbytes`` long.
    """
    if entry.nbytes == 0:
        return
    located = entry.data.file_range()
    if located is not None:
        yield from read_chunks(located[0], located[1], entry.nbytes, FILE_CHUNK_BYTES)
        return
    data = entry.data
    if data.is_ranged():
        step = ranged_step(entry)
        for start in range(0, entry.nbytes, step):
            length = min(step, entry.nbytes - start)
            piece = data.read_range(start, length)
            if len(piece) != length:
                raise CorruptCheckpointError(
                    f"tensor {entry.name!r} has a short range at byte {start}"
                )
            yield piece
        return
    raw = memoryview(data.read()).cast("B")
    if len(raw) != entry.nbytes:
        raise CorruptCheckpointError(
            f"tensor {entry.name!r} has {len(raw)} bytes, expected {entry.nbytes}"
        )
    for start in range(0, entry.nbytes, CHUNK_BYTES):
        yield raw[start : start + CHUNK_BYTES]


def iter_values(entry: TensorEntry) -> Iterator[Any]:
    """:func:`iter_bytes` as flat numpy arrays of ``entry.dtype.numpy`` (raw bits for BF16/FP8).

    Every piece holds whole elements: the chunk sizes and whole rows are multiples of every
    itemsize. An array is valid until the next is taken.
    """
    import numpy as np

    for piece in iter_bytes(entry):
        yield np.frombuffer(piece, dtype=entry.dtype.numpy)


def tracked(
    entries: Sequence[TensorEntry], results: Iterable[T], progress: Progress | None
) -> Iterator[T]:
    """``results`` (one per entry, in order, computed lazily), telling ``progress`` each
    entry's bytes as its result arrives; first ``progress(0, total)``, so a bar knows its end
    before the first tensor is read. That is the only call with 0 bytes (an empty tensor is
    not reported), so a caller making several passes can tell where each begins (``verify``)."""
    if progress is None:
        yield from results
        return
    total = sum(e.nbytes for e in entries)
    progress(0, total)
    for entry, result in zip(entries, results, strict=True):
        if entry.nbytes:
            progress(entry.nbytes, total)
        yield result

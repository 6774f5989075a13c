"""What a format module provides: a ``FormatSpec`` with sniff, open, layout and write functions."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, cast

from ckptctl._io import libc_function, start_writeback
from ckptctl.errors import CorruptCheckpointError
from ckptctl.model import HeaderLayout, Region, RegionKind
from ckptctl.sources import CHUNK_BYTES, copy_range, copy_ranges, fill_ranges

if TYPE_CHECKING:
    from ckptctl.model import Checkpoint, JSONValue, TensorEntry
    from ckptctl.sources import ByteSource

#: Bytes read from the start of a file to detect its format.
SNIFF_BYTES = 4096


Sniff = Callable[[bytes, "ByteSource"], bool]
Opener = Callable[["ByteSource"], "Checkpoint"]
LayoutFn = Callable[["ByteSource"], HeaderLayout]
WriteFn = Callable[
    [IO[bytes], Sequence["TensorEntry"], Mapping[str, str], Mapping[str, "JSONValue"]], None
]


@dataclass(frozen=True)
class FormatSpec:
    """One checkpoint format.

    Attributes:
        name: the format's name in reports (``safetensors``, ``burnpack``, ``pytorch``).
        extensions: output extensions that select this format (``.safetensors``).
        sniff: ``(head, source) -> bool``: is this file in this format? ``head`` holds the first
            ``SNIFF_BYTES`` bytes. Must not raise for any input.
        open: parse the header and return a lazy checkpoint.
        layout: decode the raw header and account for every byte (``ckptctl header``).
        write: ``(out, entries, metadata, scalars)``: write a file to ``out``, streaming.
        weak_sniff: ``sniff`` may read past ``head`` to guess (PyTorch's text pickles have no
            magic number), so detection tries this format after every other one.
    """

    name: str
    extensions: tuple[str, ...]
    sniff: Sniff
    open: Opener
    layout: LayoutFn | None = None
    write: WriteFn | None = None
    weak_sniff: bool = False


# A format package's ``__init__`` is imported whenever the formats are registered (every
# command), so its reader and writer modules (cbor2, numpy...) are named here and imported on
# the first open, layout or write (tests/test_startup.py).


def lazy_open(module: str, name: str) -> Opener:
    """The opener ``module.name``, imported when first called."""
    return cast("Opener", _forward(module, name))


def lazy_layout(module: str, name: str) -> LayoutFn:
    """The header view ``module.name``, imported when first called."""
    return cast("LayoutFn", _forward(module, name))


def lazy_write(module: str, name: str) -> WriteFn:
    """The writer ``module.name``, imported when first called."""
    return cast("WriteFn", _forward(module, name))


def _forward(module: str, name: str) -> Callable[..., object]:
    # the signature is the caller's to state: a type checker sees ``getattr`` as untyped anyway
    def call(*args: object, **kwargs: object) -> object:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    return call


def tile_regions(regions: list[Region], size: int) -> list[Region]:
    """Sort regions, refuse overlaps, and fill gaps with ``other`` so they tile ``[0, size)``.

    Raises:
        CorruptCheckpointError: two regions overlap, or one runs past ``size``.
    """
    out: list[Region] = []
    pos = 0
    for region in sorted(regions, key=lambda r: (r.start, r.end)):
        if region.start < pos or region.end > size or region.end < region.start:
            raise CorruptCheckpointError(
                f"structures overlap or run past the end of the file at byte {region.start}",
                hint="the file is damaged or crafted",
            )
        if region.start > pos:
            out.append(Region(RegionKind.OTHER, pos, region.start, note=_gap_note(out)))
        out.append(region)
        pos = region.end
    if pos < size:
        out.append(Region(RegionKind.OTHER, pos, size, note=_gap_note(out)))
    return out


def _gap_note(before: list[Region]) -> str:
    if not before:
        return "bytes before the container (not part of it)"
    return "bytes no structure of the container accounts for"


def has_fileno(out: IO[bytes]) -> bool:
    """True when ``out`` is a real file (``os.copy_file_range`` can write into it)."""
    try:
        out.fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation (BytesIO) is both
        return False
    return True


def preallocate(out: IO[bytes], size: int) -> None:
    """Reserve ``size`` bytes for ``out`` up front with Linux ``fallocate(2)``, if it can.

    The writer must then write exactly ``size`` bytes (the file's length becomes ``size`` at
    once). Allocating the extents in one call instead of block by block during the copy saves
    0.07 s per GiB on ext4 (benchmarks/RESULTS.md, round two). Not ``os.posix_fallocate``:
    glibc emulates that by writing every block where the filesystem lacks ``fallocate``, which
    would cost more than it saves; here any failure just leaves the file to grow as it is written.
    """
    if size <= 0 or not has_fileno(out):
        return
    fallocate = _fallocate()
    if fallocate is None:
        return
    out.flush()
    fallocate(out.fileno(), 0, 0, size)  # -1 (EOPNOTSUPP, ENOSPC...) is fine: see above


@functools.cache
def _fallocate() -> Callable[..., int] | None:
    return libc_function("fallocate", "c_int", "c_int", "c_int64", "c_int64")


def read_entry_bytes(entry: TensorEntry) -> memoryview:
    """An entry's bytes, checked to be ``nbytes`` long.

    Raises:
        CorruptCheckpointError: the data is shorter or longer than the entry says.
    """
    raw = memoryview(entry.data.read())
    if len(raw) != entry.nbytes:
        raise CorruptCheckpointError(
            f"tensor {entry.name!r} has {len(raw)} bytes, expected {entry.nbytes}"
        )
    return raw


def ranged_step(entry: TensorEntry) -> int:
    """Bytes per ``read_range`` call for a chunked pass: whole rows of the first dimension
    when a row fits in ``CHUNK_BYTES`` (a strided view gathers those as one slab), else whole
    elements."""
    rows = entry.shape[0] if entry.shape else 1
    row_bytes = entry.nbytes // rows if rows else entry.nbytes
    if 0 < row_bytes <= CHUNK_BYTES:
        return CHUNK_BYTES // row_bytes * row_bytes
    itemsize = max(1, entry.dtype.itemsize)
    return max(itemsize, CHUNK_BYTES - CHUNK_BYTES % itemsize)


def write_entry_bytes(out: IO[bytes], entry: TensorEntry) -> None:
    """Stream one entry's bytes to ``out`` without a tensor-sized buffer where possible.

    File-backed bytes (one range, or the ranges of :meth:`TensorData.file_pieces`) are copied
    with ``sources.copy_ranges`` when ``out`` is a real file, else through ``CHUNK_BYTES``
    views of the memory map; bytes computed a range at a time (:meth:`TensorData.compute_step`:
    casts, transposes) with ``sources.fill_ranges``; other computed bytes are read once.
    """
    where = entry.data.file_range()
    pieces = entry.data.file_pieces() if where is None and has_fileno(out) else None
    if pieces is not None:  # ranges of several files (PiecesData, split DCP tensors)
        start = out.tell()
        copy_ranges(pieces, out)
        start_writeback(out, start, entry.nbytes)
        return
    step = entry.data.compute_step() if where is None and has_fileno(out) else 0
    if step and entry.nbytes > step:
        # A cast or a transpose: computed a step at a time into a reused buffer on the copy
        # threads and written from the CPU's cache, as a copy is (issue 50).
        start = out.tell()
        fill_ranges(entry.data.read_into, entry.nbytes, step, out)
        start_writeback(out, start, entry.nbytes)
        return
    if where is None and entry.nbytes > CHUNK_BYTES and entry.data.is_ranged():
        # A strided view (an expanded one can be 2**28 elements of a 4-element storage):
        # gathered CHUNK_BYTES at a time, never whole (issue 25).
        start = out.tell() if has_fileno(out) else 0
        step = ranged_step(entry)
        for done in range(0, entry.nbytes, step):
            piece = entry.data.read_range(done, min(step, entry.nbytes - done))
            if len(piece) != min(step, entry.nbytes - done):
                raise CorruptCheckpointError(
                    f"tensor {entry.name!r} has a short range at byte {done}"
                )
            out.write(piece)
        if has_fileno(out):
            start_writeback(out, start, entry.nbytes)
        return
    if has_fileno(out):
        start = out.tell()
        if where is None:
            out.write(read_entry_bytes(entry))
        else:
            copy_range(where[0], where[1], entry.nbytes, out)
        start_writeback(out, start, entry.nbytes)  # the disk works while the next tensor comes
        return
    if where is None:
        out.write(read_entry_bytes(entry))
        return
    source, offset = where
    for done in range(0, entry.nbytes, CHUNK_BYTES):
        out.write(source.view(offset + done, min(CHUNK_BYTES, entry.nbytes - done)))

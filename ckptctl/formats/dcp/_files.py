"""The rank files of a DCP directory: opened, their items checked against them, and the
safetensors-serialised variant recognised.

The safetensors variant (torch 2.13 ``FileSystemWriter(serialization_format=
SerializationFormat.SAFETENSORS)``, ``_write_item`` and ``_write_files_from_queue`` in
``torch/distributed/checkpoint/filesystem.py``; checked against the files it writes,
``fixtures/make_distributed.py``)::

    __R_N.distcp   value items (torch.save bytes, as in the default variant), back to back,
                   then ONE safetensors blob: every tensor chunk of the rank, keyed by its name,
                   __metadata__ = {"DCP_SHARDING_INFO": json {name: {"saved_offsets": [...]}},
                                   "DCP_VERSION": "1.0", "format": "pt"}

Nothing is written for a tensor item itself, so in ``.metadata`` every tensor chunk of the file
has ``offset`` = where the blob starts and ``length`` = its element count x element size: the
items overlap. torch's own ``FileSystemReader`` slices the file at offset/length and
``torch.load``s each slice (it starts at the blob's header), so it cannot read the directory.
A file is read as this variant when all its tensor items start at one offset and a safetensors
header whose ``__metadata__`` carries torch's DCP keys starts there (a file of values only: the
blob after its last value, which torch writes even when empty); each chunk is then the blob's
entry of its name, checked against ``.metadata`` (dtype, sizes, byte count, ``saved_offsets``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptctl.errors import CkptError, CorruptCheckpointError, InputError
from ckptctl.formats.dcp._metadata import beside, chunk_what, items_by_file, metadata_error
from ckptctl.model import FileData, TensorEntry

if TYPE_CHECKING:
    from ckptctl.formats.dcp._metadata import Chunk, DcpMetadata, Item, TensorMeta
    from ckptctl.sources import ByteSource, FilePool

#: The ``__metadata__`` keys of torch 2.13's blobs (``torch/distributed/checkpoint/_hf_utils.py``:
#: ``CUSTOM_METADATA_KEY``, ``DCP_VERSION_KEY``, ``FORMAT_KEY``); the first two mark the variant.
SHARDING_KEY = "DCP_SHARDING_INFO"
VERSION_KEY = "DCP_VERSION"
FORMAT_KEY = "format"
#: The key of each tensor's chunk offsets in ``DCP_SHARDING_INFO`` (``SAVED_OFFSETS_KEY``).
SAVED_OFFSETS_KEY = "saved_offsets"
#: Bytes read at a blob's start to sniff it (the u64 length and the header's first bytes).
SNIFF_BYTES = 64

_BLOB_HINT = "the rank file's safetensors blob is damaged; copy it again from where it was written"


@dataclass(frozen=True)
class Blob:
    """The safetensors blob of a rank file in the safetensors variant.

    Attributes:
        offset: where it starts in the rank file (it runs to the file's end).
        length: its bytes.
        header_bytes: its u64 length and JSON header.
        tensors: the chunk entries by tensor name, as ranges of the rank file.
        version: its ``DCP_VERSION``.
    """

    offset: int
    length: int
    header_bytes: int
    tensors: dict[str, TensorEntry]
    version: str


@dataclass(frozen=True)
class RankFiles:
    """Every rank file of a checkpoint, opened, and the blobs of those in the safetensors
    variant, by file name."""

    sources: dict[str, ByteSource]
    blobs: dict[str, Blob]

    def close(self) -> None:
        for source in self.sources.values():
            source.close()


def open_files(source: ByteSource, meta: DcpMetadata) -> RankFiles:
    """Open every rank file beside ``source`` and check that it holds its items, none
    overlapping another (the tensor chunks of a safetensors-variant file: its blob's entries);
    the caller closes them.

    Raises:
        CorruptCheckpointError: a missing rank file, an item past a file's end, two items
            sharing bytes, a blob that is damaged or disagrees with ``.metadata``.
        UnsupportedError: a blob holds a dtype ckptctl cannot read.
    """
    chunks: dict[str, list[tuple[TensorMeta, Chunk]]] = {}
    for tensor in meta.tensors:
        for chunk in tensor.chunks:
            chunks.setdefault(chunk.item.file, []).append((tensor, chunk))
    from ckptctl.sources import file_pool

    held = items_by_file(meta)
    files = RankFiles({}, {})
    pool = file_pool(len(meta.files))  # thousands of rank files: not all open at once
    try:
        for file in meta.files:
            rank_file = _open_rank_file(source, file, len(held[file]), pool)
            files.sources[file] = rank_file
            blob = _find_blob(file, rank_file, chunks.get(file, []), held[file])
            if blob is None:
                _check_items(file, rank_file, held[file])
                continue
            files.blobs[file] = blob
            values = [(w, i) for w, i in held[file] if w.startswith("value ")]
            _check_items(file, rank_file, values, end=blob.offset)
    except BaseException:
        files.close()
        raise
    return files


def _open_rank_file(source: ByteSource, file: str, items: int, pool: FilePool | None) -> ByteSource:
    from ckptctl.formats._lfs import refuse_pointer
    from ckptctl.sources import open_source

    try:
        rank_file = open_source(beside(source, file), pool)
    except InputError as exc:
        raise CorruptCheckpointError(
            f"rank file {file!r} is missing ({exc.message}; .metadata places {items} items in it)",
            path=source.path,
            hint="copy every file of the checkpoint directory: each __R_N.distcp is needed",
        ) from None
    try:
        refuse_pointer(rank_file, f"rank file {file!r} is ")  # never fetched (issue 44)
    except BaseException:
        rank_file.close()
        raise
    return rank_file


def _check_items(
    file: str, rank_file: ByteSource, held: list[tuple[str, Item]], end: int | None = None
) -> None:
    """Check that the items lie inside the file (before ``end``), none overlapping another."""
    limit = rank_file.size if end is None else end
    held = sorted(held, key=lambda pair: pair[1].offset)
    last_end, last = 0, ""
    for what, item in held:
        if item.offset < last_end:
            raise metadata_error(f"{what} and {last} share bytes of rank file {file!r}")
        last_end, last = item.offset + item.length, what
        if last_end > limit:
            where = "" if end is None else f" before its safetensors blob at byte {end}"
            raise CorruptCheckpointError(
                f"rank file {file!r} has {limit} bytes{where}, but .metadata places {what} at "
                f"bytes {item.offset}..{last_end}",
                path=rank_file.path,
                hint="the file looks truncated; copy it again from where it was written",
            )


# --- the safetensors variant ------------------------------------------------------------------


def _find_blob(
    file: str,
    rank_file: ByteSource,
    chunks: list[tuple[TensorMeta, Chunk]],
    held: list[tuple[str, Item]],
) -> Blob | None:
    """The file's blob, when it is in the safetensors variant; None when it is not.

    Raises:
        CorruptCheckpointError: its tensor items start where a safetensors header does, but the
            blob is damaged or disagrees with ``.metadata``.
    """
    from ckptctl.formats.safetensors import sniff

    starts = {chunk.item.offset for _, chunk in chunks}
    if len(starts) > 1:
        return None  # the default variant: one torch.save archive per item
    # A file of values only: torch still writes an (empty) blob after them.
    start = starts.pop() if starts else max(i.offset + i.length for _, i in held)
    if start >= rank_file.size:
        return None
    head = rank_file.read(start, min(SNIFF_BYTES, rank_file.size - start))
    if not sniff(head, rank_file):
        return None  # e.g. one chunk, a torch.save archive ("PK\x03\x04")
    try:
        return _open_blob(file, rank_file, start, chunks)
    except CkptError as exc:
        if not chunks:  # trailing bytes after the values: not claimed as a blob
            return None
        exc.message = f"the safetensors blob at byte {start} of rank file {file!r}: {exc.message}"
        exc.path = rank_file.path
        exc.hint = exc.hint or _BLOB_HINT
        raise


def _open_blob(
    file: str, rank_file: ByteSource, start: int, chunks: list[tuple[TensorMeta, Chunk]]
) -> Blob:
    from ckptctl.formats.safetensors import HEADER_LENGTH_BYTES, open_safetensors
    from ckptctl.sources import SliceSource

    where = SliceSource(rank_file, start, rank_file.size - start, f"{file}@{start}")
    try:
        with open_safetensors(where) as blob:
            metadata = dict(blob.metadata)
            entries = {entry.name: entry for entry in blob.values()}
    except CkptError as exc:
        exc.message = f"{exc.message} (bytes counted from the blob's start)"
        raise
    if SHARDING_KEY not in metadata or VERSION_KEY not in metadata:
        raise CorruptCheckpointError(
            f"its __metadata__ has no {SHARDING_KEY} and {VERSION_KEY} (torch's DCP keys)"
        )
    saved = _saved_offsets(metadata[SHARDING_KEY])
    if set(saved) != set(entries):
        odd = sorted(set(saved) ^ set(entries))[0]
        raise CorruptCheckpointError(
            f"tensor {odd!r} is in one of its tensors and its {SHARDING_KEY}, not both"
        )
    tensors: dict[str, TensorEntry] = {}
    for tensor, chunk in chunks:
        what = chunk_what(tensor, chunk)
        entry = entries.get(tensor.name)
        if entry is None:
            raise CorruptCheckpointError(f"{what} is not in it")
        if tensor.name in tensors:
            raise CorruptCheckpointError(
                f"{what}: a second chunk of the tensor in one blob (its entries are by name)"
            )
        if entry.dtype is not tensor.dtype or entry.shape != chunk.sizes:
            raise CorruptCheckpointError(
                f"{what}: it holds a {entry.dtype.value} tensor of shape {list(entry.shape)}, "
                f".metadata says {tensor.dtype.value} {list(chunk.sizes)}"
            )
        if saved[tensor.name] != chunk.offsets:
            raise CorruptCheckpointError(
                f"{what}: its {SAVED_OFFSETS_KEY} are {list(saved[tensor.name])}, .metadata "
                f"says {list(chunk.offsets)}"
            )
        if chunk.item.length != entry.nbytes:
            raise CorruptCheckpointError(
                f"{what}: it holds {entry.nbytes} bytes, .metadata says {chunk.item.length}"
            )
        offset = where.absolute(entry.offset or 0)
        tensors[tensor.name] = TensorEntry(
            entry.name,
            entry.dtype,
            entry.shape,
            entry.nbytes,
            offset,
            FileData(rank_file, offset, entry.nbytes),
        )
    extra = sorted(set(entries) - set(tensors))
    if extra:
        raise CorruptCheckpointError(
            f"it holds tensor {extra[0]!r}, which .metadata does not place in this rank file"
        )
    header = HEADER_LENGTH_BYTES + int.from_bytes(where.read(0, HEADER_LENGTH_BYTES), "little")
    return Blob(start, where.size, header, tensors, metadata[VERSION_KEY])


def _saved_offsets(text: str) -> dict[str, tuple[int, ...]]:
    """``DCP_SHARDING_INFO``: each tensor's chunk offsets."""
    from ckptctl.formats.safetensors import loads_strict

    info = loads_strict(text, SHARDING_KEY)
    if not isinstance(info, dict):
        raise CorruptCheckpointError(f"{SHARDING_KEY} is not a JSON object")
    out: dict[str, tuple[int, ...]] = {}
    for name, value in info.items():
        offsets = value.get(SAVED_OFFSETS_KEY) if isinstance(value, dict) else None
        if not isinstance(offsets, list) or any(type(o) is not int or o < 0 for o in offsets):
            raise CorruptCheckpointError(
                f"{SHARDING_KEY} has no {SAVED_OFFSETS_KEY} list for tensor {name!r}"
            )
        out[name] = tuple(offsets)
    return out

"""torch.distributed.checkpoint (DCP) directories, read without torch.

What torch 2.13 writes (``torch/distributed/checkpoint/metadata.py`` and ``filesystem.py``;
checked against the files it writes, ``fixtures/make_distributed.py``)::

    DIR/.metadata       a pickle of Metadata(state_dict_metadata, planner_data, storage_data,
                        storage_meta, version)
    DIR/__R_N.distcp    rank R's N-th file: items back to back, each a complete torch.save zip

* ``state_dict_metadata``: flat name -> ``TensorStorageMetadata(properties=TensorProperties(dtype,
  ...), size, chunks=[ChunkStorageMetadata(offsets, sizes), ...])`` for tensors (a DTensor or
  FSDP parameter has one chunk per shard), ``BytesStorageMetadata()`` for other values;
* ``storage_data``: ``MetadataIndex(fqn, offset, index)`` -> ``_StorageInfo(relative_path, offset,
  length, transform_descriptors)``: where each chunk (keyed by its offsets; ``index`` is only a
  hint) or value (offset None) is stored;
* ``planner_data``: flat name -> the nested key path it came from (``('optim', 'state', 0,
  'exp_avg')``);
* each item is ``torch.save`` of the chunk (a tensor of the chunk's ``sizes``) or, for a value,
  of the object (``BYTE_IO``). ``transform_descriptors`` (``stream.zstd/1``) name stream
  transforms applied to the item's bytes.

torch's reader loads ``.metadata`` with a plain ``pickle.load``. Here it is judged first (the
allowlist verdict of ``pytorch/_safety.py``: the DCP classes are outside torch's weights-only
list, so the verdict is needs-trust; a hostile one is unsafe and never unpickled), then read by
the inert unpickler, whose stand-ins this module reads as data. Every item is opened with the
PyTorch zip reader (each gets its own verdict, merged into the checkpoint's).

Opening checks that every referenced file exists, every item lies inside its file with no two
overlapping, and every tensor's chunks tile it with no gap or overlap. Entries are the tensors in
``.metadata`` order, named by their flat names (``model.fc.weight``, which is how ``ls`` names
the nested ``.pt`` torch's ``dcp_to_torch_save`` writes); their bytes are assembled from the
chunks on demand: a tensor stored whole is a range of its rank file, one split by rows is read a
range at a time, and any other split is gathered into one tensor-sized buffer.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptctl.dtypes import DType
from ckptctl.errors import CkptError, CorruptCheckpointError, UnsupportedError
from ckptctl.formats._base import FormatSpec
from ckptctl.model import (
    OMITTED_KEY,
    Checkpoint,
    CheckpointKind,
    FileData,
    HeaderLayout,
    Region,
    RegionKind,
    Sharding,
    Structure,
    TensorData,
    TensorEntry,
    describe_groups,
    iter_row_blocks,
)
from ckptctl.safety import GlobalUse, PickleSafety, Problem
from ckptctl.sources import ByteSource, SliceSource

if TYPE_CHECKING:
    from collections.abc import Iterable

    from numpy.typing import NDArray

    from ckptctl.model import JSONValue

__all__ = ["METADATA_FILE", "SPEC", "open_dcp", "read_metadata", "sniff"]

#: The metadata file of a DCP directory (what ``formats.resolve_path`` opens for the directory).
METADATA_FILE = ".metadata"
#: The module every DCP metadata pickle names first (``Metadata``'s).
_MODULE = b"torch.distributed.checkpoint.metadata"
#: Largest ``.metadata`` read (the unpickler's own limit; real ones are a few MiB).
MAX_METADATA_BYTES = 1 << 30
#: Most chunks in one checkpoint (bounds the work of the tiling check and of opening items).
MAX_CHUNKS = 10_000_000
#: Most dimensions of a tensor (as the PyTorch reader's ``MAX_RANK``).
MAX_NDIM = 64
#: Most non-tensor values kept for the objects table.
MAX_VALUES = 1000
#: Rank files named in notes before "and N more".
FILES_SHOWN = 4


def sniff(head: bytes, source: ByteSource) -> bool:
    """A protocol 2+ pickle that names ``torch.distributed.checkpoint.metadata`` at once."""
    try:
        return head[:1] == b"\x80" and _MODULE in head[:512]
    except Exception:  # sniffing must never raise
        return False


# --- the metadata, as data --------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One stored item: ``length`` bytes of the rank file ``file`` at ``offset``."""

    file: str
    offset: int
    length: int
    transforms: tuple[str, ...] = ()


@dataclass(frozen=True)
class Chunk:
    """One stored piece of a tensor: its place in the global tensor and its item."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    item: Item


@dataclass(frozen=True)
class TensorMeta:
    """A tensor of the checkpoint: flat name, nested key path, dtype, global shape, chunks."""

    name: str
    path: tuple[str, ...]
    dtype: DType
    shape: tuple[int, ...]
    chunks: tuple[Chunk, ...]


@dataclass(frozen=True)
class ValueMeta:
    """A non-tensor value (``BYTE_IO``): flat name, nested key path, item."""

    name: str
    path: tuple[str, ...]
    item: Item


@dataclass(frozen=True)
class DcpMetadata:
    """What ``.metadata`` says, validated.

    Attributes:
        tensors: in the order of the nested state dict torch rebuilds from them.
        values: the non-tensor values, in ``.metadata`` order.
        files: every rank file an item is in, in first-use order.
        version: the metadata's ``version`` field (``1.0.0``), when given.
        safety: the verdict of the ``.metadata`` pickle.
    """

    tensors: tuple[TensorMeta, ...]
    values: tuple[ValueMeta, ...]
    files: tuple[str, ...]
    version: str | None
    safety: PickleSafety


def _bad(message: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f".metadata: {message}", hint="the checkpoint's .metadata is damaged; re-save it"
    )


def _fields(obj: object, cls: str, what: str) -> dict[str, object]:
    """The attributes of a stand-in for the DCP class ``cls`` (a dataclass pickled by BUILD)."""
    from ckptctl.formats.pytorch._unpickler import Stub

    if not isinstance(obj, Stub) or obj.qualname.rsplit(".", 1)[-1] != cls:
        raise _bad(f"{what} is {type(obj).__name__}, not a {cls}")
    state = obj.state
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
        state = {**(state[0] or {}), **state[1]}  # (dict, slots) form of a slotted class
    if state is None:
        return {}
    if not isinstance(state, dict):
        raise _bad(f"{what} has an unexpected state ({type(state).__name__})")
    return {str(k): v for k, v in state.items()}


def _ints(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple | list) or len(value) > MAX_NDIM:
        raise _bad(f"{what} is not a shape")
    if any(type(v) is not int or v < 0 for v in value):
        raise _bad(f"{what} is not a list of non-negative integers")
    return tuple(value)


def _dtype(properties: object, name: str) -> DType:
    from ckptctl.formats.pytorch._unpickler import TorchDType

    stub = getattr(properties, "state", None)
    # TensorProperties.__setstate__ takes (dtype, layout, requires_grad, memory_format,
    # pin_memory); older torch pickled its __dict__.
    if isinstance(stub, tuple) and stub:
        dtype = stub[0]
    else:
        dtype = _fields(properties, "TensorProperties", f"tensor {name!r}'s properties").get(
            "dtype"
        )
    if not isinstance(dtype, TorchDType):
        raise _bad(f"tensor {name!r} has no dtype")
    try:
        return DType.parse(dtype.name)
    except ValueError:
        raise UnsupportedError(f"tensor {name!r} has the dtype torch.{dtype.name}") from None


def _relative(name: object) -> str:
    """A storage file name, checked to stay inside the directory."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise _bad(f"a storage file name is {name!r}")
    norm = os.path.normpath(name)
    if os.path.isabs(name) or norm in (".", "..") or norm.startswith(".." + os.sep):
        raise _bad(f"the storage file {name!r} is outside the checkpoint directory")
    return norm


def _storage(metadata: dict[str, object]) -> dict[tuple[str, tuple[int, ...] | None], Item]:
    storage = metadata.get("storage_data")
    if not isinstance(storage, dict):
        raise _bad("storage_data is not a mapping")
    if len(storage) > MAX_CHUNKS:
        raise _bad(f"more than {MAX_CHUNKS} stored items")
    out: dict[tuple[str, tuple[int, ...] | None], Item] = {}
    for key, info in storage.items():
        index = _fields(key, "MetadataIndex", "a storage_data key")
        fqn = index.get("fqn")
        if not isinstance(fqn, str):
            raise _bad("a storage_data key has no name")
        offset = index.get("offset")
        offsets = None if offset is None else _ints(offset, f"the offsets of {fqn!r}")
        where = _fields(info, "_StorageInfo", f"the storage of {fqn!r}")
        start, length = where.get("offset"), where.get("length")
        if type(start) is not int or type(length) is not int or start < 0 or length < 0:
            raise _bad(f"the storage of {fqn!r} has no valid byte range")
        transforms = where.get("transform_descriptors") or ()
        if not isinstance(transforms, list | tuple) or not all(
            isinstance(t, str) for t in transforms
        ):
            raise _bad(f"the storage of {fqn!r} has malformed transform descriptors")
        item = Item(_relative(where.get("relative_path")), start, length, tuple(transforms))
        out[(fqn, offsets)] = item
    return out


def _raw_path(planner: object, name: str) -> tuple[str | int, ...]:
    """The nested key path of ``name`` (``planner_data``; ints are list indices), else
    the flat name alone."""
    path = planner.get(name) if isinstance(planner, dict) else None
    if isinstance(path, tuple | list) and path and all(type(p) in (str, int) for p in path):
        return tuple(path)
    return (name,)


def _path(planner: object, name: str) -> tuple[str, ...]:
    return tuple(str(p) for p in _raw_path(planner, name))


def _nested_order(names: list[str], planner: object) -> dict[str, int]:
    """Each name's place in the nested state dict torch rebuilds (``dcp_to_torch_save``): keys
    inserted in ``.metadata`` order, so a container sits where its first key came; list items
    by index."""
    tree: dict[object, Any] = {}
    for name in names:
        node: Any = tree
        path = _raw_path(planner, name)
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):  # a name that is also a container: placed last
                break
        else:
            node.setdefault(path[-1], name)
    order: list[str] = []
    stack: list[object] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            order.append(node)
            continue
        assert isinstance(node, dict)
        keys = list(node)
        if keys and all(type(k) is int for k in keys):
            keys.sort()
        stack.extend(node[k] for k in reversed(keys))
    return {name: place for place, name in enumerate(order)}


def _tensor(name: str, meta: object, items: dict[Any, Item], planner: object) -> TensorMeta:
    fields = _fields(meta, "TensorStorageMetadata", f"the metadata of {name!r}")
    shape = _ints(fields.get("size"), f"the size of {name!r}")
    dtype = _dtype(fields.get("properties"), name)
    raw = fields.get("chunks")
    if not isinstance(raw, list | tuple):
        raise _bad(f"tensor {name!r} has no chunk list")
    chunks = []
    for number, stub in enumerate(raw):
        chunk = _fields(stub, "ChunkStorageMetadata", f"chunk {number} of {name!r}")
        offsets = _ints(chunk.get("offsets"), f"the offsets of chunk {number} of {name!r}")
        sizes = _ints(chunk.get("sizes"), f"the sizes of chunk {number} of {name!r}")
        item = items.get((name, offsets))
        if item is None:
            raise _bad(f"chunk {list(offsets)} of tensor {name!r} has no storage entry")
        chunks.append(Chunk(offsets, sizes, item))
    tensor = TensorMeta(name, _path(planner, name), dtype, shape, tuple(chunks))
    check_tiling(tensor)
    return tensor


def check_tiling(tensor: TensorMeta) -> None:
    """Check that the chunks of ``tensor`` tile it: inside it, no two overlapping, no gap.

    Raises:
        CorruptCheckpointError: a chunk of the wrong rank, outside the tensor, two chunks that
            overlap, or chunks that leave part of the tensor uncovered.
    """
    name, shape = tensor.name, tensor.shape
    for chunk in tensor.chunks:
        if len(chunk.offsets) != len(shape) or len(chunk.sizes) != len(shape):
            raise _bad(
                f"a chunk of tensor {name!r} has {len(chunk.sizes)} dimensions, not {len(shape)}"
            )
        for offset, size, dim in zip(chunk.offsets, chunk.sizes, shape, strict=True):
            if offset + size > dim:
                raise _bad(
                    f"chunk {list(chunk.offsets)} {list(chunk.sizes)} of tensor {name!r} "
                    f"lies outside its shape {list(shape)}"
                )
    # Sweep along the first dimension: only chunks whose row ranges meet can overlap.
    ordered = sorted(tensor.chunks, key=lambda c: c.offsets[:1])
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            if shape and b.offsets[0] >= a.offsets[0] + a.sizes[0]:
                break
            if all(
                x < y + t and y < x + s
                for x, s, y, t in zip(a.offsets, a.sizes, b.offsets, b.sizes, strict=True)
            ):
                raise _bad(
                    f"chunks {list(a.offsets)} and {list(b.offsets)} of tensor {name!r} overlap"
                )
    covered = sum(math.prod(c.sizes) for c in tensor.chunks)
    if covered != math.prod(shape):
        raise _bad(
            f"the chunks of tensor {name!r} cover {covered} of its {math.prod(shape)} elements"
        )


def read_metadata(source: ByteSource) -> DcpMetadata:
    """Judge, then read, a DCP ``.metadata`` file.

    Raises:
        UnsafePickleError: the pickle is unsafe (nothing of it is unpickled).
        CorruptCheckpointError: not the metadata of a DCP checkpoint, or inconsistent.
        UnsupportedError: a tensor of a dtype ckptctl has no name for.
    """
    from ckptctl.formats.pytorch._safety import Ledger
    from ckptctl.formats.pytorch._unpickler import load_pickle

    if source.size > MAX_METADATA_BYTES:
        raise _bad(f"{source.size} bytes, more than the limit of {MAX_METADATA_BYTES}")
    ledger = Ledger()
    root, _ = load_pickle(source.read(0, source.size), METADATA_FILE, ledger=ledger)
    metadata = _fields(root, "Metadata", "the pickled object")
    described = metadata.get("state_dict_metadata")
    if not isinstance(described, dict):
        raise _bad("state_dict_metadata is not a mapping")
    items = _storage(metadata)
    planner = metadata.get("planner_data")
    tensors: list[TensorMeta] = []
    values: list[ValueMeta] = []
    for name, meta in described.items():
        if not isinstance(name, str):
            raise _bad(f"a tensor name is {type(name).__name__}, not text")
        qualname = getattr(meta, "qualname", "")
        if isinstance(qualname, str) and qualname.endswith(".BytesStorageMetadata"):
            item = items.get((name, None))
            if item is None:
                raise _bad(f"value {name!r} has no storage entry")
            values.append(ValueMeta(name, _path(planner, name), item))
        else:
            tensors.append(_tensor(name, meta, items, planner))
    order = _nested_order([n for n in described if isinstance(n, str)], planner)
    tensors.sort(key=lambda t: order.get(t.name, len(order)))
    files = dict.fromkeys(
        [c.item.file for t in tensors for c in t.chunks] + [v.item.file for v in values]
    )
    version = metadata.get("version")
    return DcpMetadata(
        tuple(tensors),
        tuple(values),
        tuple(files),
        version if isinstance(version, str) else None,
        ledger.safety,
    )


def _all_items(meta: DcpMetadata) -> list[tuple[str, Item]]:
    """Every item with what it holds (``tensor 'x' chunk [0, 0]`` / ``value 'step'``)."""
    out = [
        (f"tensor {t.name!r} chunk {list(c.offsets)}", c.item)
        for t in meta.tensors
        for c in t.chunks
    ]
    out += [(f"value {v.name!r}", v.item) for v in meta.values]
    return out


def check_files(directory: str, meta: DcpMetadata) -> dict[str, int]:
    """Check that every rank file exists and holds its items, none overlapping; their sizes.

    Raises:
        CorruptCheckpointError: a missing rank file, an item past a file's end, two items
            sharing bytes.
    """
    by_file: dict[str, list[tuple[str, Item]]] = {}
    for what, item in _all_items(meta):
        by_file.setdefault(item.file, []).append((what, item))
    sizes: dict[str, int] = {}
    for file, held in by_file.items():
        try:
            sizes[file] = size = os.stat(os.path.join(directory, file)).st_size
        except OSError:
            raise CorruptCheckpointError(
                f"rank file {file!r} is missing (.metadata places {len(held)} items in it)",
                path=os.path.join(directory, METADATA_FILE),
                hint="copy every file of the checkpoint directory: each __R_N.distcp is needed",
            ) from None
        held.sort(key=lambda pair: pair[1].offset)
        end, last = 0, ""
        for what, item in held:
            if item.offset < end:
                raise _bad(f"{what} and {last} share bytes of rank file {file!r}")
            end, last = item.offset + item.length, what
            if end > size:
                raise CorruptCheckpointError(
                    f"rank file {file!r} has {size} bytes, but .metadata places {what} at bytes "
                    f"{item.offset}..{end}",
                    path=os.path.join(directory, file),
                    hint="the file looks truncated; copy it again from where it was written",
                )
    return sizes


# --- opening ----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class AssembledData(TensorData):
    """A tensor's bytes assembled from its chunks (each a lazily read entry of a rank file).

    Attributes:
        pieces: ``(offsets, entry)`` per chunk, the entry holding the chunk's values.
        dtype: the tensor's dtype.
        shape: the global shape.
    """

    pieces: tuple[tuple[tuple[int, ...], TensorEntry], ...]
    dtype: DType
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """The tensor's size in bytes."""
        return math.prod(self.shape) * self.dtype.itemsize

    def _whole(self) -> TensorEntry | None:
        """The one chunk, when it is the whole tensor."""
        if len(self.pieces) == 1 and self.pieces[0][1].shape == self.shape:
            return self.pieces[0][1]
        return None

    def _by_rows(self) -> list[tuple[int, TensorEntry]] | None:
        """``(first byte, entry)`` per chunk, when every chunk is whole rows of the tensor."""
        if not self.shape:
            return None
        rest = self.shape[1:]
        if any(e.shape[1:] != rest or any(o[1:]) for o, e in self.pieces):
            return None
        row = math.prod(rest) * self.dtype.itemsize
        return sorted((o[0] * row, e) for o, e in self.pieces if e.nbytes)

    def read(self) -> memoryview:
        import numpy as np

        whole = self._whole()
        if whole is not None:
            return memoryview(whole.data.read())
        out: NDArray[Any] = np.empty(self.shape, dtype=self.dtype.numpy)
        for offsets, entry in self.pieces:
            for first, block in iter_row_blocks(entry):
                place = tuple(
                    slice(o + (first if d == 0 else 0), o + (first if d == 0 else 0) + n)
                    for d, (o, n) in enumerate(zip(offsets, block.shape, strict=True))
                )
                out[place] = block
        return out.reshape(-1).view(np.uint8).data

    def file_range(self) -> tuple[ByteSource, int] | None:
        whole = self._whole()
        return None if whole is None else whole.data.file_range()

    def is_ranged(self) -> bool:
        whole = self._whole()
        if whole is not None:
            return whole.data.is_ranged()
        return self._by_rows() is not None

    def read_range(self, start: int, length: int) -> bytes | memoryview:
        whole = self._whole()
        if whole is not None:
            return whole.data.read_range(start, length)
        rows = self._by_rows()
        if rows is None:
            return self.read()[start : start + length]
        parts: list[bytes | memoryview] = []
        end = start + length
        for first, entry in rows:
            lo, hi = max(start, first), min(end, first + entry.nbytes)
            if lo < hi:
                parts.append(entry.data.read_range(lo - first, hi - lo))
        return parts[0] if len(parts) == 1 else b"".join(parts)


def _absolute(entry: TensorEntry, source: SliceSource) -> TensorEntry:
    """A chunk entry whose bytes lie contiguous in the item, as a range of the rank file (so
    writers copy it with ``copy_file_range``)."""
    data = entry.data
    if isinstance(data, FileData) and data.source is source:
        from dataclasses import replace

        offset = source.absolute(data.offset)
        return replace(entry, offset=offset, data=FileData(source.parent, offset, data.nbytes))
    return entry


class _Opened:
    """The rank files of one checkpoint, opened once each, and the verdicts of its items."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.sources: dict[str, ByteSource] = {}
        self.globals: dict[tuple[str, str, bool], GlobalUse] = {}
        self.problems: dict[tuple[str, str], Problem] = {}

    def slice(self, item: Item, what: str) -> SliceSource:
        if item.transforms:
            raise UnsupportedError(
                f"{what} is stored with the stream transform {', '.join(item.transforms)}, "
                "which ckptctl does not decode yet",
                path=os.path.join(self.directory, item.file),
                hint="re-save the checkpoint without _extensions (dcp.FileSystemWriter)",
            )
        source = self.sources.get(item.file)
        if source is None:
            source = self.sources[item.file] = ByteSource(os.path.join(self.directory, item.file))
        return SliceSource(source, item.offset, item.length, f"{item.file}@{item.offset}")

    def judged(self, safety: PickleSafety | None, what: str) -> None:
        """Keep an item's verdict; a use or problem repeated by later items is kept once."""
        if safety is None:
            return
        from dataclasses import replace

        for use in safety.globals:
            self.globals.setdefault(
                (use.name, use.verdict.value, use.reached),
                replace(use, where=f"{what}: {use.where}"),
            )
        for problem in safety.problems:
            self.problems.setdefault(
                (problem.message, problem.verdict.value),
                replace(problem, where=f"{what}: {problem.where}"),
            )

    def close(self) -> None:
        for source in self.sources.values():
            source.close()


def _read_item(opened: _Opened, item: Item, what: str) -> Checkpoint:
    """Open one item as the torch.save archive it is."""
    from ckptctl.formats.pytorch import open_pytorch

    source = opened.slice(item, what)
    try:
        ckpt = open_pytorch(source)
    except CkptError as exc:
        exc.message = f"{what} (bytes {item.offset}..{item.offset + item.length}): {exc.message}"
        exc.path = os.path.join(opened.directory, item.file)
        raise
    opened.judged(ckpt.safety, f"{item.file} ({what})")
    return ckpt


def _chunk_entry(opened: _Opened, tensor: TensorMeta, chunk: Chunk) -> TensorEntry:
    what = f"tensor {tensor.name!r} chunk {list(chunk.offsets)}"
    ckpt = _read_item(opened, chunk.item, what)
    entries = ckpt.entries()
    if ckpt.kind is not CheckpointKind.TENSOR or len(entries) != 1:
        raise CorruptCheckpointError(
            f"{what}: the item holds {ckpt.kind}, not one tensor",
            path=os.path.join(opened.directory, chunk.item.file),
        )
    entry = entries[0]
    if entry.dtype is not tensor.dtype or entry.shape != chunk.sizes:
        raise CorruptCheckpointError(
            f"{what}: the item holds a {entry.dtype} tensor of shape {list(entry.shape)}, "
            f".metadata says {tensor.dtype} {list(chunk.sizes)}",
            path=os.path.join(opened.directory, chunk.item.file),
        )
    where = entry.data.file_range()
    if where is not None and isinstance(where[0], SliceSource):
        return _absolute(entry, where[0])
    return entry


def _value(opened: _Opened, value: ValueMeta) -> object:
    """A non-tensor value, as plain data for the objects table (``<qualname>`` otherwise)."""
    from ckptctl.formats.pytorch._containers import read_zip
    from ckptctl.formats.pytorch._safety import Ledger
    from ckptctl.formats.pytorch._structure import plain_value

    what = f"value {value.name!r}"
    source = opened.slice(value.item, what)
    ledger = Ledger()
    try:
        parsed = read_zip(source, ledger)
    except CkptError as exc:
        exc.message = f"{what} (bytes {value.item.offset}..): {exc.message}"
        exc.path = os.path.join(opened.directory, value.item.file)
        raise
    finally:
        opened.judged(ledger.safety, f"{value.item.file} ({what})")
    return plain_value(parsed.root)


def _objects(pairs: Iterable[tuple[tuple[str, ...], object]]) -> dict[str, object]:
    """Values nested by their key paths (one mapping per container), at most ``MAX_VALUES``."""
    out: dict[str, object] = {}
    omitted = 0
    for number, (path, value) in enumerate(pairs):
        if number >= MAX_VALUES:
            omitted += 1
            continue
        node = out
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[path[-1]] = value
    if omitted:
        out[OMITTED_KEY] = omitted
    return out


def _structure(meta: DcpMetadata) -> tuple[CheckpointKind, Structure, list[str]]:
    top = sum(1 for t in meta.tensors if len(t.path) == 1)
    containers = dict(Counter(".".join(t.path[:-1]) for t in meta.tensors if len(t.path) > 1))
    paths = [t.path for t in meta.tensors] + [v.path for v in meta.values]
    keys = tuple(dict.fromkeys(p[0] for p in paths))[:100]
    structure = Structure(top, containers, None, keys)
    if not meta.tensors:
        return CheckpointKind.EMPTY, structure, ["the checkpoint holds no tensors"]
    if top == len(meta.tensors):
        return CheckpointKind.STATE_DICT, structure, []
    note = f"nested checkpoint: tensors are under {describe_groups(structure.groups)}"
    return CheckpointKind.NESTED, structure, [note]


def _describe(meta: DcpMetadata) -> str:
    chunks = sum(len(t.chunks) for t in meta.tensors)
    shown = ", ".join(meta.files[:FILES_SHOWN])
    more = f" and {len(meta.files) - FILES_SHOWN} more" if len(meta.files) > FILES_SHOWN else ""
    split = sum(1 for t in meta.tensors if len(t.chunks) > 1)
    split_note = f", {_count(split, 'tensor')} split into several" if split else ""
    return (
        f"a torch.distributed.checkpoint directory: {_count(len(meta.tensors), 'tensor')} in "
        f"{_count(chunks, 'chunk')}{split_note}, {_count(len(meta.values), 'other value')}, "
        f"in {_count(len(meta.files), 'rank file')} ({shown}{more})"
    )


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def open_dcp(source: ByteSource) -> Checkpoint:
    """Open a DCP directory from its ``.metadata``: one lazy checkpoint over every rank file.

    The returned checkpoint owns ``source`` and every rank file.

    Raises:
        UnsafePickleError: ``.metadata`` or an item is an unsafe pickle.
        CorruptCheckpointError: inconsistent metadata, a missing or truncated rank file, an item
            that is not what ``.metadata`` says.
        UnsupportedError: a dtype or stream transform ckptctl cannot read.
    """
    meta = read_metadata(source)
    directory = os.path.dirname(os.path.abspath(source.path))
    check_files(directory, meta)
    opened = _Opened(directory)
    try:
        entries = []
        for tensor in meta.tensors:
            pieces = tuple((c.offsets, _chunk_entry(opened, tensor, c)) for c in tensor.chunks)
            data = AssembledData(pieces, tensor.dtype, tensor.shape)
            files = len({c.item.file for c in tensor.chunks})
            entries.append(
                TensorEntry(
                    tensor.name,
                    tensor.dtype,
                    tensor.shape,
                    data.nbytes,
                    None,
                    data,
                    extra={"chunks": str(len(tensor.chunks)), "rank_files": str(files)},
                )
            )
        objects = _objects((v.path, _value(opened, v)) for v in meta.values)
    except BaseException:
        opened.close()
        raise
    kind, structure, notes = _structure(meta)
    items = PickleSafety(tuple(opened.globals.values()), tuple(opened.problems.values()))
    return Checkpoint(
        entries,
        path=source.path,
        format="dcp",
        # The metadata version stays in the header view: it is no user metadata a converted
        # file should carry (safetensors' save_file of the same tensors writes none).
        metadata={},
        kind=kind,
        notes=[_describe(meta), *notes, TORCH_READS],
        structure=structure,
        objects=objects,
        sharding=Sharding(source.path, meta.files),
        sources=[source, *opened.sources.values()],
        safety=meta.safety.merge(items),
    )


#: How torch itself reads the metadata (said in every listing).
TORCH_READS = (
    "torch's DCP reader loads .metadata with plain pickle.load (full trust); ckptctl judged it "
    "and read it as inert data"
)


# --- header -----------------------------------------------------------------------------------


def _item_json(item: Item) -> dict[str, JSONValue]:
    out: dict[str, JSONValue] = {"file": item.file, "offset": item.offset, "length": item.length}
    if item.transforms:
        out["transforms"] = list(item.transforms)
    return out


def layout_dcp(source: ByteSource) -> HeaderLayout:
    """The decoded ``.metadata`` and how every byte of every rank file is used.

    ``header`` holds the tensors (dtype, global shape, chunks with their items), the values and
    the rank files, each with its size, the bytes its items cover and any bytes they do not.
    The regions are those of ``.metadata`` itself (one pickle).

    Raises:
        UnsafePickleError: ``.metadata`` is unsafe.
        CorruptCheckpointError: inconsistent metadata, a missing or truncated rank file.
    """
    meta = read_metadata(source)
    directory = os.path.dirname(os.path.abspath(source.path))
    sizes = check_files(directory, meta)
    files = []
    for file in meta.files:
        items = sorted((i for _, i in _all_items(meta) if i.file == file), key=lambda i: i.offset)
        covered = sum(i.length for i in items)
        files.append(
            {
                "file": file,
                "bytes": sizes[file],
                "items": len(items),
                "item_bytes": covered,
                "unaccounted_bytes": sizes[file] - covered,
            }
        )
    header = {
        "version": meta.version,
        "tensors": [
            {
                "name": t.name,
                "path": list(t.path),
                "dtype": t.dtype.value,
                "shape": list(t.shape),
                "chunks": [
                    {"offsets": list(c.offsets), "sizes": list(c.sizes), **_item_json(c.item)}
                    for c in t.chunks
                ],
            }
            for t in meta.tensors
        ],
        "values": [
            {"name": v.name, "path": list(v.path), **_item_json(v.item)} for v in meta.values
        ],
        "files": files,
    }
    region = Region(RegionKind.METADATA, 0, source.size, note="DCP metadata (pickle)")
    return HeaderLayout(
        "dcp",
        source.size,
        header,
        (region,) if source.size else (),
        {
            "tensors": len(meta.tensors),
            "chunks": sum(len(t.chunks) for t in meta.tensors),
            "values": len(meta.values),
            "rank_files": len(meta.files),
            "unaccounted_bytes": sum(f["unaccounted_bytes"] for f in files),
        },
    )


SPEC = FormatSpec(name="dcp", extensions=(), sniff=sniff, open=open_dcp, layout=layout_dcp)

#: The formats this module adds to the registry (``ckptctl.formats``).
SPECS = (SPEC,)

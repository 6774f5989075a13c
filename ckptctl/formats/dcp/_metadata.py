"""The ``.metadata`` of a DCP directory, judged, read as data and checked against its rank files
(the layout is in ``formats/dcp/__init__.py``)."""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptctl.dtypes import DType
from ckptctl.errors import CorruptCheckpointError, UnsupportedError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ckptctl.safety import PickleSafety
    from ckptctl.sources import ByteSource

#: The metadata file of a DCP directory (what ``formats.resolve_path`` opens for the directory).
METADATA_FILE = ".metadata"
#: Largest ``.metadata`` read (the unpickler's own limit; real ones are a few MiB).
MAX_METADATA_BYTES = 1 << 30
#: Most chunks in one checkpoint (bounds the work of the tiling check and of opening items).
MAX_CHUNKS = 10_000_000
#: Most blocks the chunk boundaries of one tensor may cut it into for the overlap check (which
#: marks each block once), beyond ``TILING_CELLS_PER_CHUNK`` per chunk: 4 Mi, a 4 MiB map.
MAX_TILING_CELLS = 1 << 22
#: Blocks per chunk always checked: chunks along one dimension make at most two blocks each.
TILING_CELLS_PER_CHUNK = 4
#: Most dimensions of a tensor (as the PyTorch reader's ``MAX_RANK``).
MAX_NDIM = 64
#: Most parts of a nested key path in ``planner_data`` (torch's are a few:
#: ``('optim', 'state', 0, 'exp_avg')``).
MAX_PATH_PARTS = 64
#: Most non-tensor values kept for the objects table.
MAX_VALUES = 1000
#: Rank files named in notes before "and N more".
FILES_SHOWN = 4


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


def metadata_error(message: str) -> CorruptCheckpointError:
    """An error saying ``.metadata`` is damaged."""
    return CorruptCheckpointError(
        f".metadata: {message}", hint="the checkpoint's .metadata is damaged; re-save it"
    )


def _fields(obj: object, cls: str, what: str) -> dict[str, object]:
    """The attributes of a stand-in for the DCP class ``cls`` (a dataclass pickled by BUILD)."""
    from ckptctl.formats.pytorch._unpickler import Stub

    if not isinstance(obj, Stub) or obj.qualname.rsplit(".", 1)[-1] != cls:
        raise metadata_error(f"{what} is {type(obj).__name__}, not a {cls}")
    state = obj.state
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
        state = {**(state[0] or {}), **state[1]}  # (dict, slots) form of a slotted class
    if state is None:
        return {}
    if not isinstance(state, dict):
        raise metadata_error(f"{what} has an unexpected state ({type(state).__name__})")
    return {str(k): v for k, v in state.items()}


def _ints(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple | list) or len(value) > MAX_NDIM:
        raise metadata_error(f"{what} is not a shape")
    if any(type(v) is not int or v < 0 for v in value):
        raise metadata_error(f"{what} is not a list of non-negative integers")
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
        raise metadata_error(f"tensor {name!r} has no dtype")
    try:
        return DType.parse(dtype.name)
    except ValueError:
        raise UnsupportedError(f"tensor {name!r} has the dtype torch.{dtype.name}") from None


def _relative(name: object) -> str:
    """A storage file name, checked to stay inside the directory."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise metadata_error(f"a storage file name is {name!r}")
    norm = os.path.normpath(name)
    if os.path.isabs(name) or norm in (".", "..") or norm.startswith(".." + os.sep):
        raise metadata_error(f"the storage file {name!r} is outside the checkpoint directory")
    return norm


def _storage(metadata: dict[str, object]) -> dict[tuple[str, tuple[int, ...] | None], Item]:
    storage = metadata.get("storage_data")
    if not isinstance(storage, dict):
        raise metadata_error("storage_data is not a mapping")
    if len(storage) > MAX_CHUNKS:
        raise metadata_error(f"more than {MAX_CHUNKS} stored items")
    out: dict[tuple[str, tuple[int, ...] | None], Item] = {}
    for key, info in storage.items():
        index = _fields(key, "MetadataIndex", "a storage_data key")
        fqn = index.get("fqn")
        if not isinstance(fqn, str):
            raise metadata_error("a storage_data key has no name")
        offset = index.get("offset")
        offsets = None if offset is None else _ints(offset, f"the offsets of {fqn!r}")
        where = _fields(info, "_StorageInfo", f"the storage of {fqn!r}")
        start, length = where.get("offset"), where.get("length")
        if type(start) is not int or type(length) is not int or start < 0 or length < 0:
            raise metadata_error(f"the storage of {fqn!r} has no valid byte range")
        transforms = where.get("transform_descriptors") or ()
        if not isinstance(transforms, list | tuple) or not all(
            isinstance(t, str) for t in transforms
        ):
            raise metadata_error(f"the storage of {fqn!r} has malformed transform descriptors")
        item = Item(_relative(where.get("relative_path")), start, length, tuple(transforms))
        out[(fqn, offsets)] = item
    return out


#: A nested key path as ``planner_data`` gives it (ints are list indices).
KeyPath = tuple[str | int, ...]


def _key_paths(planner: object, names: list[str], file_bytes: int) -> dict[str, KeyPath]:
    """The nested key path of each name (``planner_data``), else the flat name alone.

    Raises:
        CorruptCheckpointError: a path of more than ``MAX_PATH_PARTS`` parts, or more parts in
            all than the file has bytes (the pickle's memo lets every name share one long path:
            300 names sharing 200,000 parts took 15 s and 530 MiB to list, issue 44).
    """
    paths: dict[str, KeyPath] = {}
    total = 0
    for name in names:
        path = planner.get(name) if isinstance(planner, dict) else None
        paths[name] = (name,)
        if not isinstance(path, tuple | list) or not path:
            continue
        if len(path) > MAX_PATH_PARTS:
            raise metadata_error(
                f"the key path of {name!r} has {len(path)} parts, more than the limit of "
                f"{MAX_PATH_PARTS}"
            )
        total += len(path)
        if total > file_bytes:
            raise metadata_error(
                f"the key paths of planner_data have more than {file_bytes} parts in all, more "
                "than the file has bytes (a path shared through the pickle's memo?)"
            )
        if all(type(p) in (str, int) for p in path):
            paths[name] = tuple(path)
    return paths


def _path(paths: dict[str, KeyPath], name: str) -> tuple[str, ...]:
    return tuple(str(p) for p in paths[name])


def _nested_order(names: list[str], paths: dict[str, KeyPath]) -> dict[str, int]:
    """Each name's place in the nested state dict torch rebuilds (``dcp_to_torch_save``): keys
    inserted in ``.metadata`` order, so a container sits where its first key came; list items
    by index."""
    tree: dict[object, Any] = {}
    for name in names:
        node: Any = tree
        path = paths[name]
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


def _tensor(
    name: str, meta: object, items: dict[Any, Item], paths: dict[str, KeyPath]
) -> TensorMeta:
    fields = _fields(meta, "TensorStorageMetadata", f"the metadata of {name!r}")
    shape = _ints(fields.get("size"), f"the size of {name!r}")
    dtype = _dtype(fields.get("properties"), name)
    raw = fields.get("chunks")
    if not isinstance(raw, list | tuple):
        raise metadata_error(f"tensor {name!r} has no chunk list")
    chunks = []
    for number, stub in enumerate(raw):
        chunk = _fields(stub, "ChunkStorageMetadata", f"chunk {number} of {name!r}")
        offsets = _ints(chunk.get("offsets"), f"the offsets of chunk {number} of {name!r}")
        sizes = _ints(chunk.get("sizes"), f"the sizes of chunk {number} of {name!r}")
        item = items.get((name, offsets))
        if item is None:
            raise metadata_error(f"chunk {list(offsets)} of tensor {name!r} has no storage entry")
        chunks.append(Chunk(offsets, sizes, item))
    tensor = TensorMeta(name, _path(paths, name), dtype, shape, tuple(chunks))
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
            raise metadata_error(
                f"a chunk of tensor {name!r} has {len(chunk.sizes)} dimensions, not {len(shape)}"
            )
        for offset, size, dim in zip(chunk.offsets, chunk.sizes, shape, strict=True):
            if offset + size > dim:
                raise metadata_error(
                    f"chunk {list(chunk.offsets)} {list(chunk.sizes)} of tensor {name!r} "
                    f"lies outside its shape {list(shape)}"
                )
    _check_overlaps(tensor)
    covered = sum(math.prod(c.sizes) for c in tensor.chunks)
    if covered != math.prod(shape):
        raise metadata_error(
            f"the chunks of tensor {name!r} cover {covered} of its {math.prod(shape)} elements"
        )


def _check_overlaps(tensor: TensorMeta) -> None:
    """Raise when two chunks of ``tensor`` (inside its shape) share an element.

    The chunks' first and last indices cut every dimension; the cuts split the tensor into a
    grid of cells, and each chunk covers a block of whole cells. Marking each chunk's cells
    finds an overlap in time linear in the cells (a grid of chunks, as every DTensor, FSDP or
    tensor-parallel sharding is, has one cell per chunk): comparing chunks pairwise took
    minutes for 8,000 column chunks of one tensor (issue 44).
    """
    chunks = [c for c in tensor.chunks if all(c.sizes)]  # empty chunks overlap nothing
    cuts = [
        sorted(
            {0, dim, *(c.offsets[d] for c in chunks), *(c.offsets[d] + c.sizes[d] for c in chunks)}
        )
        for d, dim in enumerate(tensor.shape)
    ]
    cells = math.prod(len(c) - 1 for c in cuts)
    limit = max(MAX_TILING_CELLS, TILING_CELLS_PER_CHUNK * len(chunks))
    if cells > limit:
        raise UnsupportedError(
            f"the {len(chunks)} chunks of tensor {tensor.name!r} cut it into {cells} blocks, "
            f"more than the {limit} ckptctl checks for overlaps"
        )
    index = [{cut: i for i, cut in enumerate(c)} for c in cuts]
    strides = [math.prod(len(c) - 1 for c in cuts[d + 1 :]) for d in range(len(cuts))]
    marks = bytearray(cells)
    for number, chunk in enumerate(chunks):
        spans = [
            range(index[d][o], index[d][o + s])
            for d, (o, s) in enumerate(zip(chunk.offsets, chunk.sizes, strict=True))
        ]
        for start in _cell_rows(spans[:-1], strides[:-1]):
            first, last = (start + spans[-1].start, start + spans[-1].stop) if spans else (0, 1)
            if marks.find(1, first, last) >= 0:
                other = next(c for c in chunks[:number] if _meet(c, chunk))
                raise metadata_error(
                    f"chunks {list(other.offsets)} and {list(chunk.offsets)} of tensor "
                    f"{tensor.name!r} overlap"
                )
            marks[first:last] = b"\x01" * (last - first)


def _cell_rows(spans: list[range], strides: list[int]) -> Iterator[int]:
    """The flat index of the first cell of each row of a block of cells (the last dimension's
    span is the row)."""
    for point in itertools.product(*spans):
        yield sum(i * stride for i, stride in zip(point, strides, strict=True))


def _meet(a: Chunk, b: Chunk) -> bool:
    return all(
        x < y + t and y < x + s
        for x, s, y, t in zip(a.offsets, a.sizes, b.offsets, b.sizes, strict=True)
    )


def read_metadata(source: ByteSource) -> DcpMetadata:
    """Judge, then read, a DCP ``.metadata`` file.

    Raises:
        UnsafePickleError: the pickle is unsafe (nothing of it is unpickled).
        CorruptCheckpointError: not the metadata of a DCP checkpoint, or inconsistent.
        UnsupportedError: a tensor of a dtype ckptctl has no name for.
    """
    from ckptctl.formats.pytorch._unpickler import load_pickle
    from ckptctl.formats.pytorch._verdict import Ledger

    if source.size > MAX_METADATA_BYTES:
        raise metadata_error(f"{source.size} bytes, more than the limit of {MAX_METADATA_BYTES}")
    ledger = Ledger()
    root, _ = load_pickle(source.read(0, source.size), METADATA_FILE, ledger=ledger)
    metadata = _fields(root, "Metadata", "the pickled object")
    described = metadata.get("state_dict_metadata")
    if not isinstance(described, dict):
        raise metadata_error("state_dict_metadata is not a mapping")
    items = _storage(metadata)
    names = [n for n in described if isinstance(n, str)]
    paths = _key_paths(metadata.get("planner_data"), names, source.size)
    tensors: list[TensorMeta] = []
    values: list[ValueMeta] = []
    for name, meta in described.items():
        if not isinstance(name, str):
            raise metadata_error(f"a tensor name is {type(name).__name__}, not text")
        qualname = getattr(meta, "qualname", "")
        if isinstance(qualname, str) and qualname.endswith(".BytesStorageMetadata"):
            item = items.get((name, None))
            if item is None:
                raise metadata_error(f"value {name!r} has no storage entry")
            values.append(ValueMeta(name, _path(paths, name), item))
        else:
            tensors.append(_tensor(name, meta, items, paths))
    order = _nested_order(names, paths)
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


def chunk_what(tensor: TensorMeta, chunk: Chunk) -> str:
    """What messages call a tensor chunk: ``tensor 'x' chunk [0, 0]``."""
    return f"tensor {tensor.name!r} chunk {list(chunk.offsets)}"


def all_items(meta: DcpMetadata) -> list[tuple[str, Item]]:
    """Every item with what it holds (``tensor 'x' chunk [0, 0]`` / ``value 'step'``)."""
    out = [(chunk_what(t, c), c.item) for t in meta.tensors for c in t.chunks]
    out += [(f"value {v.name!r}", v.item) for v in meta.values]
    return out


def items_by_file(meta: DcpMetadata) -> dict[str, list[tuple[str, Item]]]:
    """:func:`all_items` grouped by rank file (in first-use order)."""
    out: dict[str, list[tuple[str, Item]]] = {}
    for what, item in all_items(meta):
        out.setdefault(item.file, []).append((what, item))
    return out


def beside(source: ByteSource, name: str) -> str:
    """The path (or URL) of the file ``name`` in the directory of ``source``'s ``.metadata``."""
    if source.is_remote:  # a URL: the rank files are fetched next to it
        return source.sibling(name)  # type: ignore[attr-defined, no-any-return]  # RemoteSource
    return os.path.join(os.path.dirname(os.path.abspath(source.path)), name)

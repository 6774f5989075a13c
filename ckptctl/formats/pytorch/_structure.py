"""From an unpickled object tree to named tensor entries, a kind, notes and a structure.

Naming follows the CLI contract ("Tensor names"): a flat state_dict keeps its keys; tensors in
nested containers are named by their key path joined with ``.`` (list items by index); a whole
pickled ``nn.Module`` is listed with the names its ``state_dict()`` would have
(``docs/formats/pytorch.md#whole-models``); a TorchScript archive likewise from its attributes
and ``code/`` member lists (``docs/formats/pytorch.md#torchscript``).

Entries: a C-contiguous view of a stored storage is ``FileData`` (zero-copy, absolute offset);
anything else (strided views, compressed records, conj/neg flags, big-endian data) is
``ComputedData`` gathering the elements with ``as_strided`` after a bounds check
(docs/formats/pytorch.md#views).
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptctl.dtypes import DType
from ckptctl.errors import CorruptCheckpointError, UnsupportedError
from ckptctl.formats.pytorch._unpickler import StorageRef, Stub, TensorRef
from ckptctl.model import (
    OMITTED_KEY,
    TRUNCATED_KEY,
    CheckpointKind,
    ComputedData,
    FileData,
    StridedData,
    Structure,
    TensorEntry,
    describe_groups,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from numpy.typing import NDArray

    from ckptctl.formats.pytorch._containers import Parsed, StorageBytes
    from ckptctl.sources import ByteSource

#: Most nodes the structure walk visits (memo sharing can make a small pickle a huge tree).
MAX_WALK_NODES = 2_000_000
#: Most top-level keys of a dict checkpoint kept in its facts.
MAX_LISTED_KEYS = 100
#: Most tensors listed from one file.
MAX_TENSORS = 10_000_000
#: Largest byte size (elements ignoring zero dimensions, times the item size) a shape may
#: describe: numpy refuses any larger array, even an empty one.
MAX_BYTES = 2**63 - 1

_DTYPES: dict[str, DType] = {
    "float64": DType.F64, "float32": DType.F32, "float16": DType.F16, "bfloat16": DType.BF16,
    "float8_e4m3fn": DType.F8_E4M3, "float8_e5m2": DType.F8_E5M2,
    "float8_e8m0fnu": DType.F8_E8M0, "int64": DType.I64, "int32": DType.I32,
    "int16": DType.I16, "int8": DType.I8, "uint64": DType.U64, "uint32": DType.U32,
    "uint16": DType.U16, "uint8": DType.U8, "bool": DType.BOOL, "complex64": DType.C64,
    "complex128": DType.C128,
}  # fmt: skip
_SIGN_BIT = {DType.BF16: 0x8000, DType.F8_E4M3: 0x80, DType.F8_E5M2: 0x80}
_MANGLE = re.compile(r"\.___torch_mangle_\d+")
#: Module attributes kept for ``Structure.modules``: what decides how Burn stores a layer.
MODULE_ATTRIBUTES = ("norm_first", "bidirectional", "num_layers", "proj_size", "batch_first")
#: Most submodules described in ``Structure.modules``.
MAX_MODULES = 100_000


@dataclass
class Found:
    """A tensor found in the tree, with its name and the owning module's class."""

    name: str
    tensor: TensorRef
    container: str
    module_type: str | None = None


@dataclass
class Analysis:
    """Everything ``open`` reports besides the entries."""

    found: list[Found]
    kind: CheckpointKind
    notes: list[str]
    structure: Structure
    objects: dict[str, object]


def _short(qualname: str) -> str:
    return _MANGLE.sub("", qualname).rsplit(".", 1)[-1]


def _state_dict_of(stub: Stub) -> dict[Any, Any] | None:
    state = stub.state
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[0], dict):
        state = state[0]  # (dict, slot dict)
    return state if isinstance(state, dict) else None


def _is_module(stub: Stub) -> bool:
    state = _state_dict_of(stub)
    return state is not None and "_parameters" in state and "_modules" in state


def _mapping_items(value: object) -> list[tuple[Any, Any]]:
    if isinstance(value, dict):
        return list(value.items())
    return []


#: Most non-tensor values (epoch, lr, hyper-parameters) kept for ``ls``; the rest are counted
#: under the key ``$omitted``.
MAX_OBJECTS = 1000
#: Longest text value (characters) and list (items) kept whole. A longer one is kept as
#: ``{"$truncated": FULL_LENGTH, "head": FIRST_PART}`` (see docs/json.md).
MAX_OBJECT_TEXT = 4096
MAX_OBJECT_LIST = 1024
#: All kept values together, roughly (text by length, 8 bytes per other value): the pickle memo
#: can repeat one long list many times for a few bytes each, and the listing must stay small.
MAX_OBJECT_BYTES = 1 << 20
_PLAIN = (bool, int, float, str, bytes, type(None))


def _plain(value: object) -> object:
    """A JSON-able form of a plain value, whole up to the limits, else explicitly truncated."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str) and len(value) > MAX_OBJECT_TEXT:
        return {TRUNCATED_KEY: len(value), "head": value[:MAX_OBJECT_TEXT]}
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, list | tuple):
        if len(value) > MAX_OBJECT_LIST:
            return {TRUNCATED_KEY: len(value), "head": [_plain(v) for v in value[:MAX_OBJECT_LIST]]}
        return [_plain(v) for v in value]
    return value


def plain_value(value: object) -> object:
    """A value of any type for an objects table: plain data whole (as :func:`_plain` keeps it),
    mappings by text key, anything else as ``<qualname>`` (a DCP ``BYTE_IO`` value)."""
    if isinstance(value, _PLAIN):
        return _plain(value)
    if isinstance(value, list | tuple) and len(value) <= MAX_OBJECT_LIST:
        return [plain_value(v) for v in value]
    if isinstance(value, list | tuple):
        return _plain(value)
    if isinstance(value, dict):
        return {str(k): plain_value(v) for k, v in list(value.items())[:MAX_OBJECT_LIST]}
    if isinstance(value, TensorRef):
        return "<tensor>"
    return f"<{getattr(value, 'qualname', type(value).__name__)}>"


def _rough_size(plain: object) -> int:
    if isinstance(plain, str):
        return len(plain) + 8
    if isinstance(plain, list):
        return 8 + sum(_rough_size(v) for v in plain)
    if isinstance(plain, dict):
        return 8 + sum(_rough_size(v) for v in plain.values())
    return 8


class _Walker:
    def __init__(self, parsed: Parsed) -> None:
        self.parsed = parsed
        self.found: list[Found] = []
        self.objects: dict[str, object] = {}
        self.kept_objects = 0
        self.object_bytes = 0
        self.more_objects = 0
        self.nodes = 0
        self.script = parsed.format == "torchscript"
        self.modules: dict[str, tuple[str, dict[str, object]]] = {}

    def emit(self, parts: tuple[str, ...], tensor: TensorRef, module_type: str | None) -> None:
        if len(self.found) >= MAX_TENSORS:
            raise CorruptCheckpointError(f"more than {MAX_TENSORS} tensors")
        self.found.append(Found(".".join(parts), tensor, ".".join(parts[:-1]), module_type))

    def children(self, obj: object) -> tuple[Iterable[tuple[str, object]], str | None]:
        """Named children of a container node, and the module class owning its tensors.

        Lazy for lists, tuples, dicts and stub items: a list of a million references to one
        object (a few MiB of BINGET) would otherwise be a million name tuples at once (#25).
        """
        if isinstance(obj, dict):
            return ((str(k), v) for k, v in obj.items()), None
        if isinstance(obj, list | tuple):
            return ((str(i), v) for i, v in enumerate(obj)), None
        if not isinstance(obj, Stub):
            return (), None
        if self.script and obj.qualname.startswith("__torch__."):
            return self.script_children(obj), _short(obj.qualname)
        if _is_module(obj):
            return self.module_children(obj), _short(obj.qualname)
        state = _state_dict_of(obj)
        named = ((str(k), v) for k, v in (state or {}).items())
        return itertools.chain(named, _stub_items(obj.items)), None

    def module_children(self, stub: Stub) -> list[tuple[str, object]]:
        # Module.state_dict(): own parameters, persistent buffers, then children (spec 9.2).
        state = _state_dict_of(stub) or {}
        out = [(str(k), v) for k, v in _mapping_items(state.get("_parameters")) if v is not None]
        skip = state.get("_non_persistent_buffers_set") or set()
        skip = skip if isinstance(skip, set | frozenset | list | tuple) else set()
        out += [
            (str(k), v)
            for k, v in _mapping_items(state.get("_buffers"))
            if v is not None and k not in skip
        ]
        out += [(str(k), v) for k, v in _mapping_items(state.get("_modules")) if v is not None]
        return [(k, v) for k, v in out if isinstance(v, TensorRef | Stub)]

    def script_children(self, stub: Stub) -> list[tuple[str, object]]:
        state = _state_dict_of(stub) or {}
        members = self.parsed.script_members.get(stub.qualname) or self.parsed.script_members.get(
            _MANGLE.sub("", stub.qualname)
        )
        if members is None:  # no code record: every tensor attribute, every submodule
            return [(str(k), v) for k, v in state.items() if isinstance(v, TensorRef | Stub)]
        keep = [*members[0], *members[1]]
        out = [(k, state[k]) for k in keep if isinstance(state.get(k), TensorRef)]
        out += [
            (str(k), v)
            for k, v in state.items()
            if isinstance(v, Stub) and v.qualname.startswith("__torch__.")
        ]
        return out

    def note_object(self, parts: tuple[str, ...], value: object) -> None:
        """Keep a plain value (``epoch``, ``optimizer.param_groups.0.lr``) for listings."""
        if not parts:
            return
        plain = _plain(value)
        size = _rough_size(plain)
        if self.kept_objects >= MAX_OBJECTS or self.object_bytes + size > MAX_OBJECT_BYTES:
            self.more_objects += 1
            return
        self.kept_objects += 1
        self.object_bytes += size
        node = self.objects  # nested as in the checkpoint: one mapping per container
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[parts[-1]] = plain

    def walk(self, root: object) -> None:
        # Iterative DFS over lazy child iterators (memory grows with the depth, not the width);
        # ``on_path`` breaks cycles, the node budget bounds memo-shared DAGs.
        frames: list[tuple[Iterator[tuple[str, object]], tuple[str, ...], str | None, int]] = []
        on_path: set[int] = set()
        self.visit(root, (), None, frames, on_path)
        while frames:
            kids, parts, owner, ident = frames[-1]
            item = next(kids, None)
            if item is None:
                frames.pop()
                on_path.discard(ident)
                continue
            name, child = item
            self.visit(child, (*parts, name), owner, frames, on_path)

    def visit(
        self,
        obj: object,
        parts: tuple[str, ...],
        module_type: str | None,
        frames: list[tuple[Iterator[tuple[str, object]], tuple[str, ...], str | None, int]],
        on_path: set[int],
    ) -> None:
        """Count one node and emit it, note it, or open a frame over its children."""
        self.nodes += 1
        if self.nodes > MAX_WALK_NODES:
            raise CorruptCheckpointError(
                f"the pickle describes more than {MAX_WALK_NODES} objects (a memo bomb?)"
            )
        if isinstance(obj, TensorRef):
            self.emit(parts, obj, module_type)
            return
        if isinstance(obj, StorageRef):  # a bare storage: its bytes as a 1-D tensor
            dtype = obj.stype.dtype or "uint8"
            self.emit(parts, TensorRef(obj, 0, (obj.numel,), (1,), dtype), module_type)
            return
        if isinstance(obj, _PLAIN) or (
            isinstance(obj, list | tuple) and all(isinstance(v, _PLAIN) for v in obj)
        ):
            self.note_object(parts, obj)
            return
        if id(obj) in on_path:
            return
        kids, owner = self.children(obj)
        if owner is not None and isinstance(obj, Stub) and len(self.modules) < MAX_MODULES:
            state = _state_dict_of(obj) or {}
            attrs = {k: state[k] for k in MODULE_ATTRIBUTES if isinstance(state.get(k), bool | int)}
            self.modules[".".join(parts)] = (owner, attrs)
        on_path.add(id(obj))
        frames.append((iter(kids), parts, owner, id(obj)))


def _stub_items(items: list[object]) -> Iterator[tuple[str, object]]:
    """A stub's APPENDed items (or SETITEM pairs with a text key), named by index otherwise."""
    for index, item in enumerate(items):
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            yield item
        else:
            yield str(index), item


def analyse(parsed: Parsed) -> Analysis:
    """Find and name every tensor in ``parsed.root``; classify the checkpoint."""
    walker = _Walker(parsed)
    root = parsed.root
    walker.walk(root)
    found = walker.found
    notes: list[str] = []
    module_class: str | None = None
    if isinstance(root, Stub) and (_is_module(root) or parsed.format == "torchscript"):
        module_class = _MANGLE.sub("", root.qualname)
    if isinstance(root, TensorRef | StorageRef) and found:
        found[0].name = "tensor"
    top = sum(1 for f in found if f.container == "" and isinstance(root, dict))
    containers = dict(Counter(f.container for f in found if f.container))
    if parsed.format == "torchscript":
        kind = CheckpointKind.TORCHSCRIPT
        notes.append(
            f"a TorchScript archive of {_short(module_class or '?')}, listed with its "
            "state_dict() names"
        )
        top = 0
    elif module_class is not None:
        kind = CheckpointKind.MODULE
        notes.append(f"a pickled {_short(module_class)} object, listed with its state_dict() names")
        top = 0
    elif isinstance(root, TensorRef | StorageRef):
        kind = CheckpointKind.TENSOR
        notes.append("a single bare tensor, listed as 'tensor'")
    elif not found:
        kind = CheckpointKind.EMPTY
        notes.append("the file holds no tensors")
    elif top == len(found):
        kind = CheckpointKind.STATE_DICT
    else:
        kind = CheckpointKind.NESTED
        groups = Structure(containers=containers).groups
        notes.append(f"nested checkpoint: tensors are under {describe_groups(groups)}")
    keys = (
        [k for k in root if isinstance(k, str)][:MAX_LISTED_KEYS] if isinstance(root, dict) else []
    )
    modules = walker.modules if module_class is not None else {}
    structure = Structure(top, containers, module_class, tuple(keys), modules)
    objects = walker.objects
    if walker.more_objects:
        objects[OMITTED_KEY] = walker.more_objects
    return Analysis(found, kind, notes, structure, objects)


# --- entries ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)  # most tensors of a model share a few shapes
def _contiguous(size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    expected = 1
    for dim, st in zip(reversed(size), reversed(stride), strict=True):
        if dim != 1 and st != expected:
            return False
        expected *= dim
    return True


def _storage_nbytes(parsed: Parsed, ref: StorageRef) -> int:
    if ref.inline is not None:
        return len(ref.inline)
    return parsed.storages[ref.key].nbytes  # _entry has refused a key not in the file


def make_entries(
    parsed: Parsed, structure: Analysis, source: ByteSource
) -> tuple[list[TensorEntry], list[str]]:
    """Turn found tensors into lazy entries; return them and notes on shared storages."""
    refs = [f.tensor.storage for f in structure.found]
    users = Counter((ref.key, id(ref.inline)) for ref in refs if ref is not None)
    entries = []
    shared = 0
    for f in structure.found:
        entry = _entry(parsed, f, source)
        ref = f.tensor.storage
        if ref is not None and users[(ref.key, id(ref.inline))] > 1:
            shared += 1
            entry = TensorEntry(
                entry.name, entry.dtype, entry.shape, entry.nbytes, entry.offset, entry.data,
                module_type=entry.module_type,
                extra={
                    "storage": ref.key,
                    "storage_offset": str(f.tensor.offset),
                    "stride": ",".join(map(str, f.tensor.stride)),
                    "storage_nbytes": str(_storage_nbytes(parsed, ref)),
                },
            )  # fmt: skip
        entries.append(entry)
    notes = []
    if shared:
        notes.append(
            f"{shared} tensors share a storage with another tensor (tied weights or views); "
            "each is listed with its own shape and values"
        )
    return entries, notes


_UNSUPPORTED_HINTS = {
    "a quantized tensor": "save tensor.dequantize() in torch, then convert that",
    "a sparse tensor": "save tensor.to_dense() in torch, then convert that",
    "a nested tensor": "save its components (tensor.unbind()) as separate tensors",
}


def _entry(parsed: Parsed, found: Found, source: ByteSource) -> TensorEntry:
    t = found.tensor
    name = found.name
    if t.unsupported is not None:
        raise UnsupportedError(
            f"tensor {name!r} is {t.unsupported}, which ckptctl cannot read",
            hint=_UNSUPPORTED_HINTS.get(t.unsupported),
        )
    dtype = _DTYPES.get(t.dtype)
    if dtype is None:
        raise UnsupportedError(
            f"tensor {name!r} has dtype torch.{t.dtype}, which ckptctl cannot represent"
        )
    ref = t.storage
    if ref is None:
        raise CorruptCheckpointError(f"tensor {name!r} has no storage")
    if ref.stype.dtype is not None and ref.stype.dtype != t.dtype:
        raise CorruptCheckpointError(
            f"tensor {name!r} is {t.dtype} but its storage holds {ref.stype.dtype}"
        )
    if len(t.size) != len(t.stride):
        raise CorruptCheckpointError(f"tensor {name!r} has {len(t.size)} sizes but "
                                     f"{len(t.stride)} strides")  # fmt: skip
    itemsize = dtype.itemsize
    if ref.inline is not None:
        blob = ref.inline
        storage_bytes = len(blob)
        location: StorageBytes | None = None
    else:
        location = parsed.storages.get(ref.key)
        if location is None:
            raise CorruptCheckpointError(
                f"tensor {name!r} uses storage {ref.key!r}, not in the file"
            )
        storage_bytes = location.nbytes
    base = 0  # element offset of the usable range inside the storage
    count = storage_bytes // itemsize
    if ref.view is not None:  # legacy storage views (spec 6.3)
        base, count = ref.view[1], ref.view[2]
        if (base + count) * itemsize > storage_bytes:
            raise CorruptCheckpointError(f"tensor {name!r} uses a storage view past its storage")
    numel = math.prod(t.size)
    if (numel or math.prod(d for d in t.size if d)) * itemsize > MAX_BYTES:
        # numpy cannot even describe an empty array this large (fixtures/hostile/limits)
        raise CorruptCheckpointError(
            f"tensor {name!r} has shape {list(t.size)}, too large to represent",
            hint="the file is damaged or crafted",
        )
    contiguous = _contiguous(t.size, t.stride)
    if numel:
        if contiguous:  # the common case: the last element is numel - 1 past the offset
            last = t.offset + numel - 1
        else:
            last = t.offset + sum((s - 1) * st for s, st in zip(t.size, t.stride, strict=True))
        if last >= count:
            raise CorruptCheckpointError(
                f"tensor {name!r} reads element {last} of a storage with {count} elements",
                hint="the file is damaged or crafted",
            )
    nbytes = numel * itemsize
    start = (base + t.offset) * itemsize
    plain = not t.flags and parsed.byteorder == "little"
    if plain and contiguous and location is not None and location.file_offset is not None:
        offset = location.file_offset + start if numel else None
        data: FileData | ComputedData
        if numel:
            data = FileData(source, location.file_offset + start, nbytes)
        else:
            data = ComputedData(lambda: b"")
        return TensorEntry(name, dtype, t.size, nbytes, offset, data, module_type=found.module_type)

    def storage() -> bytes | memoryview:
        return ref.inline if ref.inline is not None else location.load()  # type: ignore[union-attr]  # location set when inline is None

    def compute() -> NDArray[Any]:
        return _gather(storage(), dtype, t, base, count, parsed.byteorder)

    if contiguous or not numel:
        computed = ComputedData(compute)
    else:  # a strided (perhaps expanded) view: gathered a range at a time where possible
        computed = StridedData(
            compute,
            gather=lambda first, n: _gather_range(
                storage(), dtype, t, base, count, parsed.byteorder, first, n
            ),
            itemsize=itemsize,
            distinct=lambda: _distinct(storage(), dtype, t, base, count, parsed.byteorder),
            distinct_numel=math.prod(d for d, st in zip(t.size, t.stride, strict=True) if st),
            view=(lambda: _view(storage(), dtype, t, base, count)) if plain else None,
            nbytes=nbytes,
        )
    return TensorEntry(name, dtype, t.size, nbytes, None, computed, module_type=found.module_type)


def _gather_range(
    raw: bytes | memoryview,
    dtype: DType,
    t: TensorRef,
    base: int,
    count: int,
    byteorder: str,
    first: int,
    n: int,
) -> NDArray[Any]:
    """Elements ``first .. first + n - 1`` (C order) of a strided view, without the rest."""
    import numpy as np

    np_dtype = dtype.numpy
    if byteorder == "big":
        np_dtype = np_dtype.newbyteorder(">")
    flat = np.frombuffer(raw, dtype=np_dtype, count=count, offset=base * dtype.itemsize)
    row = math.prod(t.size[1:])
    if row and first % row == 0 and n % row == 0:  # whole rows: a slab of the strided view
        view = np.lib.stride_tricks.as_strided(
            flat[t.offset :],
            shape=t.size,
            strides=[st * dtype.itemsize for st in t.stride],
            writeable=False,
        )
        slab = view[first // row : (first + n) // row]
        out = np.ascontiguousarray(slab).reshape(-1).astype(dtype.numpy, copy=False)
        return _flagged(out, dtype, t)
    index = np.arange(first, first + n, dtype=np.int64)
    where = np.full(n, t.offset, dtype=np.int64)
    for dim, st in zip(reversed(t.size), reversed(t.stride), strict=True):
        if st:
            where += (index % dim) * st
        index //= dim
    return _flagged(flat[where].astype(dtype.numpy, copy=False), dtype, t)


def _view(
    raw: bytes | memoryview, dtype: DType, t: TensorRef, base: int, count: int
) -> NDArray[Any]:
    """The strided view itself, read-only, over the storage's bytes (nothing copied)."""
    import numpy as np

    flat = np.frombuffer(raw, dtype=dtype.numpy, count=count, offset=base * dtype.itemsize)
    return np.lib.stride_tricks.as_strided(
        flat[t.offset :],
        shape=t.size,
        strides=[st * dtype.itemsize for st in t.stride],
        writeable=False,
    )


def _distinct(
    raw: bytes | memoryview, dtype: DType, t: TensorRef, base: int, count: int, byteorder: str
) -> tuple[NDArray[Any], int]:
    """The view without its stride-0 dimensions, and how often each element repeats."""
    keep = [(d, st) for d, st in zip(t.size, t.stride, strict=True) if st]
    repeats = math.prod(d for d, st in zip(t.size, t.stride, strict=True) if not st)
    reduced = TensorRef(t.storage, t.offset, tuple(d for d, _ in keep),
                        tuple(st for _, st in keep), t.dtype, flags=t.flags)  # fmt: skip
    return _gather(raw, dtype, reduced, base, count, byteorder).reshape(-1), repeats


def _gather(
    raw: bytes | memoryview, dtype: DType, t: TensorRef, base: int, count: int, byteorder: str
) -> NDArray[Any]:
    """Materialise a (possibly strided) view as a C-contiguous array of ``dtype``'s encoding."""
    import numpy as np

    np_dtype = dtype.numpy
    if byteorder == "big":
        np_dtype = np_dtype.newbyteorder(">")
    flat = np.frombuffer(raw, dtype=np_dtype, count=count, offset=base * dtype.itemsize)
    if math.prod(t.size) == 0:
        out = np.zeros(t.size, dtype=dtype.numpy)
    else:
        view = np.lib.stride_tricks.as_strided(
            flat[t.offset :],
            shape=t.size,
            strides=[st * dtype.itemsize for st in t.stride],
            writeable=False,
        )
        out = np.ascontiguousarray(view).astype(dtype.numpy, copy=False)
    return _flagged(out, dtype, t)


def _flagged(out: NDArray[Any], dtype: DType, t: TensorRef) -> NDArray[Any]:
    """``out`` with the tensor's conj/neg flags applied."""
    import numpy as np

    if "conj" in t.flags and dtype in (DType.C64, DType.C128):
        out = np.conj(out)
    if "neg" in t.flags:
        if dtype in _SIGN_BIT:
            out = out ^ np.array(_SIGN_BIT[dtype], dtype=out.dtype)
        elif dtype is not DType.BOOL:
            out = np.negative(out)
    return out

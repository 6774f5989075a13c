"""The core model: a checkpoint is an ordered, read-only mapping of tensor entries.

Everything about an entry but its bytes is known once a header is parsed; ``entry.load()`` is the
only call that reads tensor bytes. Entries are frozen: adapters make new entries whose ``data``
wraps the old one, so metadata changes happen at once and data work stays lazy.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeAlias

from ckptctl.errors import CkptError, CorruptCheckpointError, UnsupportedError

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ckptctl.dtypes import DType
    from ckptctl.safety import PickleSafety
    from ckptctl.sources import ByteSource

#: Metadata values taken from files (JSON-like, validated by each reader).
JSONValue: TypeAlias = Any
#: Progress callbacks: ``progress(nbytes, total)`` once per tensor, with the bytes of that tensor
#: and, when known, the bytes of every tensor the operation goes through (``verify``: the bytes
#: of every pass over the files opened so far, so its end grows as files are opened).
Progress: TypeAlias = Callable[[int, "int | None"], None]

#: In ``Checkpoint.objects``: the marker of a value cut at its size limit
#: (``{"$truncated": FULL_LENGTH, "head": FIRST_PART}``), and the key counting values not kept.
TRUNCATED_KEY = "$truncated"
OMITTED_KEY = "$omitted"


class StrEnum(str, Enum):
    """An enum whose members are their string values (in JSON, f-strings and comparisons)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    def __hash__(self) -> int:  # Enum hashes the member name; equal strings must hash alike
        return hash(str(self.value))


class CheckpointKind(StrEnum):
    """What a pickle-based checkpoint is as a whole (the CLI contract's kinds)."""

    STATE_DICT = "state_dict"
    NESTED = "nested"
    MODULE = "module"
    TORCHSCRIPT = "torchscript"
    TENSOR = "tensor"
    EMPTY = "empty"


class RegionKind(StrEnum):
    """What a byte range of a file holds (``ckptctl header``)."""

    HEADER = "header"
    METADATA = "metadata"
    PADDING = "padding"
    TENSOR = "tensor"
    OTHER = "other"


@dataclass(frozen=True)
class Region:
    """A byte range of a file, ``end`` exclusive.

    ``name`` is the tensor name for tensor regions; ``note`` says why (padding's reason, what an
    ``other`` region holds).
    """

    kind: RegionKind
    start: int
    end: int
    name: str | None = None
    note: str | None = None

    @property
    def size(self) -> int:
        """Length in bytes."""
        return self.end - self.start


@dataclass(frozen=True)
class HeaderLayout:
    """A file's raw header, decoded, and the region every byte of the file belongs to.

    ``facts`` is a JSON-able summary for reports (tensor and padding bytes, alignment ...).
    """

    format: str
    file_size: int
    header: JSONValue
    regions: tuple[Region, ...]
    facts: Mapping[str, JSONValue] = field(default_factory=dict)


@dataclass(frozen=True)
class Structure:
    """Where a pickle-based checkpoint keeps its tensors.

    Attributes:
        top_level_tensors: tensors directly under the root dict (what a flat reader sees).
        containers: tensors per container key path (``{"model": 273, "optimizer.state.0": 2}``).
        module_class: the pickled module's class (whole models, TorchScript), else None.
        top_level_keys: the root dict's string keys (first 100).
        modules: a whole pickled module's submodules by ``state_dict`` path (``""`` for the
            root): class name (last component) and the plain attributes that decide how Burn
            stores the layer (``norm_first``, ``bidirectional``, ``num_layers``, ``proj_size``).
    """

    top_level_tensors: int = 0
    containers: Mapping[str, int] = field(default_factory=dict)
    module_class: str | None = None
    top_level_keys: tuple[str, ...] = ()
    modules: Mapping[str, tuple[str, Mapping[str, JSONValue]]] = field(default_factory=dict)

    @property
    def groups(self) -> dict[str, int]:
        """Tensors per top-level key of a nested checkpoint (``{"model": 4, "optimizer": 12}``)."""
        out: dict[str, int] = {}
        for container, count in self.containers.items():
            if container:
                top = container.split(".", 1)[0]
                out[top] = out.get(top, 0) + count
        return out


def describe_groups(groups: Mapping[str, int]) -> str:
    """``'model' (4), 'optimizer' (12)``: how ``ls``, ``verify`` and every hint name the places
    tensors hide in a nested checkpoint."""
    return ", ".join(f"'{key}' ({count:,})" for key, count in groups.items())


@dataclass(frozen=True)
class Sharding:
    """A checkpoint split over files listed in an index.

    Attributes:
        index: the index file.
        shards: the shard files, as the index names them, in first-use order.
        total_size: the index's ``metadata.total_size``, when given.
    """

    index: str
    shards: tuple[str, ...]
    total_size: int | None = None


class TensorData:
    """Where an entry's bytes come from. Subclasses implement :meth:`read`.

    ``read()`` returns the tensor's bytes in the canonical encoding of its dtype: C order,
    little-endian, exactly ``nbytes`` long.
    """

    def read(self) -> memoryview:
        """The tensor's bytes (a zero-copy view where the layout allows)."""
        raise NotImplementedError

    def file_range(self) -> tuple[ByteSource, int] | None:
        """``(source, absolute offset)`` when the bytes lie contiguous in a file, else None."""
        return None

    def read_range(self, start: int, length: int) -> bytes | memoryview:
        """``length`` bytes from byte ``start`` of the tensor, for chunked processing.

        File-backed data reads them with ``pread`` into a fresh buffer instead of touching the
        memory map, so a pass over a large file does not grow the process's resident memory.
        """
        return self.read()[start : start + length]

    def is_ranged(self) -> bool:
        """Whether :meth:`read_range` reads only the range (not the whole tensor each time)."""
        return False

    def read_into(self, start: int, out: memoryview) -> None:
        """Fill ``out`` with ``len(out)`` bytes from byte ``start`` of the tensor: what
        :meth:`read_range` returns, written into a buffer the caller reuses (file-backed data
        reads straight into it)."""
        out[:] = memoryview(self.read_range(start, len(out))).cast("B")

    def compute_step(self) -> int:
        """Bytes per :meth:`read_into` call when the bytes are computed a range at a time from
        local files (a cast, a transpose), so that a writer fills them a step at a time through
        one reused buffer, on several threads at once (``read_into`` is then thread-safe);
        0 when the data is read whole, copied, or read by ``read_range`` on one thread."""
        return 0

    def file_pieces(self) -> Iterable[tuple[ByteSource, int, int]] | None:
        """``(source, absolute offset, length)`` ranges whose bytes, one after the other, are the
        tensor's (a tensor made of ranges of several files: :class:`PiecesData`, a split DCP
        tensor); None when it is not so. May be worked out lazily, as it is iterated."""
        return None


@dataclass(frozen=True, eq=False)
class FileData(TensorData):
    """Bytes that lie contiguous in an input file."""

    source: ByteSource
    offset: int
    nbytes: int

    def read(self) -> memoryview:
        return self.source.view(self.offset, self.nbytes)

    def file_range(self) -> tuple[ByteSource, int] | None:
        return (self.source, self.offset)

    def read_range(self, start: int, length: int) -> bytes | memoryview:
        if start < 0 or length < 0 or start + length > self.nbytes:
            raise ValueError(f"range {start}+{length} outside a tensor of {self.nbytes} bytes")
        return self.source.read(self.offset + start, length)

    def read_into(self, start: int, out: memoryview) -> None:
        if start < 0 or start + len(out) > self.nbytes:
            raise ValueError(f"range {start}+{len(out)} outside a tensor of {self.nbytes} bytes")
        self.source.read_into(self.offset + start, out)

    def is_ranged(self) -> bool:
        return True


@dataclass(frozen=True)
class Piece:
    """``length`` bytes from byte ``start`` of ``data``."""

    data: TensorData
    start: int
    length: int


@dataclass(frozen=True, eq=False)
class PiecesData(TensorData):
    """A tensor whose bytes are byte ranges of other tensors, one after the other: a DeepSpeed
    parameter across the ranks' flat partitions, a DCP tensor split by rows across rank files.

    Nothing is assembled until the tensor is read; writers copy each piece that lies in a file
    straight from it (:meth:`file_pieces`), or read a large tensor a range at a time.
    """

    pieces: tuple[Piece, ...]
    nbytes: int

    def read(self) -> memoryview:
        if len(self.pieces) == 1:
            p = self.pieces[0]
            return memoryview(p.data.read_range(p.start, p.length)).cast("B")
        out = bytearray(self.nbytes)
        done = 0
        for p in self.pieces:
            out[done : done + p.length] = p.data.read_range(p.start, p.length)
            done += p.length
        return memoryview(out)

    def file_range(self) -> tuple[ByteSource, int] | None:
        if len(self.pieces) != 1:
            return None
        p = self.pieces[0]
        where = p.data.file_range()
        return None if where is None else (where[0], where[1] + p.start)

    def read_range(self, start: int, length: int) -> bytes | memoryview:
        if start < 0 or length < 0 or start + length > self.nbytes:
            raise ValueError(f"range {start}+{length} outside a tensor of {self.nbytes} bytes")
        parts: list[bytes | memoryview] = []
        at = 0
        for p in self.pieces:
            lo, hi = max(start, at), min(start + length, at + p.length)
            if lo < hi:
                parts.append(p.data.read_range(p.start + lo - at, hi - lo))
            at += p.length
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read_into(self, start: int, out: memoryview) -> None:
        if start < 0 or start + len(out) > self.nbytes:
            raise ValueError(f"range {start}+{len(out)} outside a tensor of {self.nbytes} bytes")
        at = 0
        for p in self.pieces:
            lo, hi = max(start, at), min(start + len(out), at + p.length)
            if lo < hi:
                p.data.read_into(p.start + lo - at, out[lo - start : hi - start])
            at += p.length

    def is_ranged(self) -> bool:
        return True

    def file_pieces(self) -> list[tuple[ByteSource, int, int]] | None:
        out = []
        for p in self.pieces:
            where = p.data.file_range()
            if where is None:
                return None
            out.append((where[0], where[1] + p.start, p.length))
        return out


@dataclass(frozen=True, eq=False)
class ComputedData(TensorData):
    """Bytes computed on demand (adapters, decoded or strided tensors)."""

    compute: Callable[[], NDArray[Any] | bytes | memoryview]

    def read(self) -> memoryview:
        import numpy as np

        out = self.compute()
        if isinstance(out, np.ndarray):
            return np.ascontiguousarray(out).reshape(-1).view(np.uint8).data
        return memoryview(out).cast("B")


#: Largest strided view gathered whole by ``read()`` (writers and scans read views in chunks).
MAX_GATHER_BYTES = 4 << 30


@dataclass(frozen=True, eq=False)
class StridedData(ComputedData):
    """A strided view of a storage, whose elements can be gathered a range at a time.

    An expanded view (stride 0) of a 4-element storage can describe 2**28 elements in a 1 KB
    file: writers and scans read it with :meth:`read_range`, never whole (issue 25).

    Attributes:
        gather: ``gather(first, count)`` -> elements ``first .. first + count - 1`` of the view
            in C order, as a contiguous array of the entry's dtype.
        itemsize: bytes per element.
        distinct: ``() -> (elements, repeats)``: the view without its stride-0 dimensions, and
            how many times each of its elements appears in the view (for counts such as NaNs).
        distinct_numel: element count of ``distinct()``'s array, known without computing it.
        view: ``() -> array``: the view itself as a read-only numpy view of the storage (no
            copy), when no conversion (byte order, conj/neg flags) is needed; else None.
        nbytes: the view's size in bytes.
    """

    gather: Callable[[int, int], NDArray[Any]] = field(default=None)  # type: ignore[assignment]  # always given
    itemsize: int = 1
    distinct: Callable[[], tuple[NDArray[Any], int]] | None = None
    distinct_numel: int = 0
    view: Callable[[], NDArray[Any]] | None = None
    nbytes: int = 0

    def read(self) -> memoryview:
        if self.nbytes > MAX_GATHER_BYTES:
            raise UnsupportedError(
                f"a strided view of {self.nbytes} bytes is too large to gather in memory (the "
                f"limit is {MAX_GATHER_BYTES} bytes); it is read in chunks when converted",
            )
        return super().read()

    def read_range(self, start: int, length: int) -> bytes | memoryview:
        if start % self.itemsize or length % self.itemsize:
            return self.read()[start : start + length]
        return self.gather(start // self.itemsize, length // self.itemsize).view("u1").data

    def is_ranged(self) -> bool:
        return True


@dataclass(frozen=True)
class TensorEntry:
    """One tensor: its name, dtype, shape and where its bytes are.

    Attributes:
        name: the tensor name (``fc.weight``).
        dtype: element type.
        shape: dimension sizes; ``()`` is a scalar.
        nbytes: size of the tensor's bytes in canonical encoding.
        offset: absolute byte offset in the file when the bytes lie there contiguous, else None.
        data: the lazy loader.
        param_id: burnpack parameter identity, when the file carries one.
        module_type: the module class that owns this tensor (``Linear``), when the file says.
        source_dtype: the format's own spelling of the dtype when it carries more than ``dtype``
            (burnpack ``Flex32`` or a bool store), so a same-format rewrite reproduces it.
        extra: format-specific facts for reports (shared storage, strides), as strings.
    """

    name: str
    dtype: DType
    shape: tuple[int, ...]
    nbytes: int
    offset: int | None
    data: TensorData = field(repr=False, compare=False)
    param_id: int | None = None
    module_type: str | None = None
    source_dtype: JSONValue = None
    extra: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def numel(self) -> int:
        """Number of elements (1 for a scalar, 0 when any dimension is 0)."""
        return math.prod(self.shape)

    def load(self) -> NDArray[Any]:
        """Read the tensor: a read-only numpy array of ``dtype.numpy`` with ``shape``.

        BF16 and FP8 come back as their raw unsigned bits; see ``ckptctl.dtypes.to_float``.

        Raises:
            CorruptCheckpointError: the bytes are not ``nbytes`` long.
            UnsupportedError: an empty tensor whose other dimensions numpy cannot hold (torch
                and safetensors allow ``[0, 2**61]``; numpy refuses any shape whose non-zero
                dimensions span more than ``2**63 - 1`` bytes).
        """
        import numpy as np

        span = math.prod(dim for dim in self.shape if dim) * self.dtype.itemsize
        if span > sys.maxsize:
            where = self.data.file_range()
            raise UnsupportedError(
                f"tensor {self.name!r} has shape {list(self.shape)}: numpy cannot hold it, even "
                "empty (its non-zero dimensions span more than 2**63 - 1 bytes)",
                path=where[0].path if where else None,
            )
        if isinstance(self.data, StridedData) and self.data.view is not None:
            return self.data.view()  # a strided view of the storage: nothing copied
        raw = self.data.read()
        if len(raw) != self.nbytes:
            raise CorruptCheckpointError(
                f"tensor {self.name!r} has {len(raw)} bytes, expected {self.nbytes}"
            )
        return np.frombuffer(raw, dtype=self.dtype.numpy).reshape(self.shape)

    def renamed(self, name: str) -> TensorEntry:
        """The same entry under another tensor name."""
        return replace(self, name=name)


#: ``TensorEntry.extra`` key: the format's own name of a stored type that :class:`DType` has no
#: member for (GGUF's block-quantized ``Q4_K``, an unknown GGML type). Such an entry is its stored
#: bytes as a U8 vector of shape ``(nbytes,)`` (what ``hash`` digests and ``diff`` compares);
#: reports list it under this name and the shape in ``extra["logical_shape"]`` (JSON), and
#: writers of plain formats refuse it (it holds no values until decoded).
STORED_TYPE = "stored_type"


def listed_dtype(entry: TensorEntry) -> str:
    """The dtype reports show: the stored type's own name, else the DType's code."""
    return entry.extra.get(STORED_TYPE) or entry.dtype.value


def listed_shape(entry: TensorEntry) -> tuple[int, ...]:
    """The shape reports show: the logical shape of a stored type, else the entry's."""
    if STORED_TYPE in entry.extra and "logical_shape" in entry.extra:
        return tuple(int(d) for d in json.loads(entry.extra["logical_shape"]))
    return entry.shape


#: Bytes read per step when an adapter streams a file-backed tensor.
BLOCK_BYTES = 8 * 1024 * 1024


def iter_row_blocks(
    entry: TensorEntry, block_bytes: int = BLOCK_BYTES
) -> Iterator[tuple[int, NDArray[Any]]]:
    """Yield ``(first_row, rows)`` blocks of ``entry`` along its first axis, about
    ``block_bytes`` each, read without mapping the whole tensor (see ``read_range``).

    A rank-0 or empty tensor yields the whole tensor once.
    """
    import numpy as np

    if not entry.shape or entry.numel == 0:
        yield 0, entry.load()
        return
    rows = entry.shape[0]
    row_bytes = entry.nbytes // rows
    step = max(1, block_bytes // max(1, row_bytes))
    for first in range(0, rows, step):
        count = min(step, rows - first)
        raw = entry.data.read_range(first * row_bytes, count * row_bytes)
        block = np.frombuffer(raw, dtype=entry.dtype.numpy).reshape((count, *entry.shape[1:]))
        yield first, block


def is_local_file(data: TensorData) -> bool:
    """Whether ``data``'s bytes lie in local files (one range, or pieces of several): ranges of
    them may then be read on several threads at once (a remote source is read by one)."""
    where = data.file_range()
    if where is not None:
        return not where[0].is_remote
    pieces = data.file_pieces()
    return pieces is not None and all(not source.is_remote for source, _, _ in pieces)


def expected_nbytes(dtype: DType, shape: tuple[int, ...]) -> int:
    """``prod(shape) * itemsize`` with Python ints (no overflow)."""
    return math.prod(shape) * dtype.itemsize


class Checkpoint(Mapping[str, TensorEntry]):
    """An ordered, read-only mapping from tensor name to entry, plus metadata.

    A checkpoint owns the files it read from; use it as a context manager (or call ``close``).

    Attributes:
        path: the file (or index) it was opened from.
        format: the format name (``safetensors``, ``burnpack``, ``pytorch-zip`` ...).
        metadata: string key/values from the file.
        metadata_summary: shorter renderings of long metadata values, by key (a GGUF array: its
            length and first items), which listings show unless asked for whole values.
        scalars: burnpack typed scalars (``{"step": {"UInt": 42}}``), empty elsewhere.
        typed_metadata: the file's key/values with their types, by key in file order, for a
            writer of the same format to keep them as they are (GGUF:
            ``formats.gguf.StoredValue``); empty elsewhere. ``metadata`` has them as strings.
        kind: what the file is as a whole, for formats where that is a question; None elsewhere.
        notes: human-readable facts about the structure (where tensors hide, aliasing).
        structure: where the tensors are (pickle-based formats), None elsewhere.
        sharding: the index and shards of a sharded checkpoint, None for one file.
        objects: plain values stored beside the tensors (``epoch``, hyper-parameters, the
            optimizer's ``param_groups``), nested as in the checkpoint (one mapping per
            container; list items by index), whole up to documented limits (a longer value is
            ``{"$truncated": LENGTH, "head": ...}``, values past the count limit are counted
            under ``$omitted``); pickle-based formats only.
        safety: the pickle safety verdict (pickle-based formats), None for other formats.
        views: other tensor sets a state key selects instead of the entries, built on demand
            (a DeepSpeed checkpoint's optimizer states by parameter name: ``exp_avg`` ...).
        check_rest: for formats that open parts only when their bytes are read (a DCP
            directory's tensor chunks), opens and checks every such part and returns the verdict
            over the whole checkpoint (``verify`` runs it; a damaged part raises ``CkptError``);
            None where opening already checked everything.
    """

    def __init__(
        self,
        entries: list[TensorEntry],
        *,
        path: str,
        format: str,
        metadata: Mapping[str, str] | None = None,
        metadata_summary: Mapping[str, str] | None = None,
        scalars: Mapping[str, JSONValue] | None = None,
        typed_metadata: Mapping[str, object] | None = None,
        kind: CheckpointKind | None = None,
        notes: list[str] | None = None,
        structure: Structure | None = None,
        sharding: Sharding | None = None,
        objects: Mapping[str, JSONValue] | None = None,
        sources: list[ByteSource] | None = None,
        safety: PickleSafety | None = None,
        views: Mapping[str, Callable[[], list[TensorEntry]]] | None = None,
        check_rest: Callable[[], PickleSafety | None] | None = None,
    ) -> None:
        self._entries: dict[str, TensorEntry] = {}
        for entry in entries:
            if entry.name in self._entries:
                raise CorruptCheckpointError(f"tensor name {entry.name!r} appears twice", path=path)
            self._entries[entry.name] = entry
        self.path = path
        self.format = format
        self.metadata: Mapping[str, str] = dict(metadata or {})
        self.metadata_summary: Mapping[str, str] = dict(metadata_summary or {})
        self.scalars: Mapping[str, JSONValue] = dict(scalars or {})
        self.typed_metadata: Mapping[str, object] = dict(typed_metadata or {})
        self.kind = kind
        self.notes = list(notes or [])
        self.structure = structure
        self.sharding = sharding
        self.objects: Mapping[str, JSONValue] = dict(objects or {})
        self.safety = safety
        self.views: Mapping[str, Callable[[], list[TensorEntry]]] = dict(views or {})
        self.check_rest = check_rest
        self._sources = list(sources or [])

    def __getitem__(self, name: str) -> TensorEntry:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[TensorEntry]:
        """All entries in file order."""
        return list(self._entries.values())

    @property
    def input_bytes(self) -> int:
        """Total size of the files this checkpoint reads from (all shards of an index)."""
        return sum(source.size for source in self._sources)

    def close(self) -> None:
        """Close every file this checkpoint read from."""
        for source in self._sources:
            source.close()
        self._sources.clear()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Checkpoint({self.path!r}, format={self.format!r}, tensors={len(self)})"


def damaged_layout(exc: CkptError) -> HeaderLayout | None:
    """What could be read of a damaged file's header, when ``exc`` carries it (``errors.py``
    carries it as data: it imports nothing)."""
    layout = getattr(exc, "layout", None)
    return layout if isinstance(layout, HeaderLayout) else None

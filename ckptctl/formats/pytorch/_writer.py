"""Write a PyTorch zip checkpoint byte-for-byte the way ``torch.save`` (torch 2.13) does.

Format: ``docs/formats/pytorch.md#zip-container`` (also ``#pickle``, ``#dtypes``, ``#views``).
The output is a flat ``OrderedDict`` state_dict, name -> tensor, in entry order::

    <prefix>/data.pkl                 pickle protocol 2: OrderedDict of _rebuild_tensor_v2/_v3 calls
    <prefix>/.format_version          "1"
    <prefix>/.storage_alignment       "64"
    <prefix>/byteorder                "little"
    <prefix>/data/0, data/1, ...      raw storage bytes, in storage-key order
    <prefix>/version                  "3\\n"
    <prefix>/.data/serialization_id   40 decimal digits
    central directory, zip64 end record + locator, classic end record

Every record is stored (method 0) with flags 0x0808: the local header carries zero CRC and sizes,
and a data descriptor (``PK\\x07\\x08``, CRC, sizes) follows the data, so the writer streams
without seeking back. The local header's extra field ends with an ``FB`` field of ``Z`` bytes
that puts the record's data on a 64-byte boundary (miniz as patched by pytorch's
``caffe2/serialize/inline_container.cc``, ``getPadding``). Records, offsets or sizes past 4 GiB
get zip64 extra fields exactly where miniz puts them (spec 2.5).

Shared storage: entries whose ``extra`` names the same ``"storage"`` (as the pytorch reader sets
it, with ``"storage_offset"`` and ``"stride"`` in elements) and the same dtype are written as
views of one storage record again, provided their views agree on every element they share and
sharing is not bigger than writing copies. Everything else gets its own contiguous storage.

Metadata and burnpack scalars are not written: a torch state_dict has no standard place for
them (``state_dict._metadata`` holds module versions, not user data).

The first 20 digits of ``serialization_id`` are torch's hash of the record names, which depends
on libstdc++'s ``std::hash`` and ``unordered_set`` order; we write a deterministic stand-in
(torch never checks it). The last 20 digits are torch's combined CRC, reproduced exactly.
"""

from __future__ import annotations

import hashlib
import logging
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from ckptctl._io import start_writeback
from ckptctl.dtypes import TORCH_NAMES, DType
from ckptctl.errors import CorruptCheckpointError, OutputError
from ckptctl.formats._base import ranged_step
from ckptctl.sources import CHUNK_BYTES, fill_chunks, read_chunks

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    import numpy as np
    from numpy.typing import NDArray

    from ckptctl.model import JSONValue, TensorEntry

__all__ = ["ALIGNMENT_BYTES", "archive_prefix", "write_zip"]

logger = logging.getLogger(__name__)

#: Data alignment of every record (torch's default ``.storage_alignment``).
ALIGNMENT_BYTES = 64
#: Sizes and offsets at or above this need zip64 fields (miniz's ``MZ_UINT32_MAX`` test).
ZIP64_LIMIT = 0xFFFFFFFF
#: Value of the ``version`` record for ``torch.save`` archives.
VERSION_RECORD = b"3\n"

_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
_CENTRAL_HEADER = struct.Struct("<IHHHHHHIIIHHHHHII")
_DESCRIPTOR32 = struct.Struct("<IIII")
_DESCRIPTOR64 = struct.Struct("<IIQQ")
_ZIP64_END = struct.Struct("<IQHHIIQQQQ")
_ZIP64_LOCATOR = struct.Struct("<IIQI")
_END = struct.Struct("<IHHHHIIH")
_FLAGS = 0x0808  # bit 3: sizes in a data descriptor; bit 11: UTF-8 names
_MASK64 = (1 << 64) - 1

#: Legacy storage classes (``_rebuild_tensor_v2``); the other dtypes are torch's "new" dtypes,
#: written with ``UntypedStorage`` and ``_rebuild_tensor_v3`` (docs/formats/pytorch.md#dtypes).
_STORAGE_CLASS = {
    DType.F64: "DoubleStorage", DType.F32: "FloatStorage", DType.F16: "HalfStorage",
    DType.BF16: "BFloat16Storage", DType.I64: "LongStorage", DType.I32: "IntStorage",
    DType.I16: "ShortStorage", DType.I8: "CharStorage", DType.U8: "ByteStorage",
    DType.BOOL: "BoolStorage", DType.C64: "ComplexFloatStorage",
    DType.C128: "ComplexDoubleStorage",
}  # fmt: skip


# --- plan: which tensor lives where --------------------------------------------------------------


@dataclass
class _Storage:
    """One ``data/<key>`` record and the tensors that view it."""

    key: int
    dtype: DType
    numel: int
    members: list[_View] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def is_plain(self) -> bool:
        """One tensor that is exactly the whole storage in C order: stream its bytes as is."""
        return len(self.members) == 1 and self.members[0].is_contiguous_whole(self.numel)


@dataclass(frozen=True)
class _View:
    """One tensor as a view of a storage: offset and strides in elements."""

    entry: TensorEntry
    offset: int
    stride: tuple[int, ...]

    def extent(self) -> int:
        """One past the last storage element this view touches (``offset`` when empty)."""
        if self.entry.numel == 0:
            return self.offset
        return (
            self.offset
            + sum((n - 1) * s for n, s in zip(self.entry.shape, self.stride, strict=True))
            + 1
        )

    def is_contiguous_whole(self, numel: int) -> bool:
        return (
            self.offset == 0
            and self.stride == _contiguous_stride(self.entry.shape)
            and self.entry.numel == numel
        )


def _contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride: list[int] = []
    step = 1
    for n in reversed(shape):
        stride.append(step)
        step *= max(n, 1)
    return tuple(reversed(stride))


_INT = re.compile(r"-?\d+")


def _parse_view(entry: TensorEntry) -> tuple[str, int, tuple[int, ...]] | None:
    """``(storage key, offset, stride)`` from a reader's ``extra``, or None when unusable."""
    extra = entry.extra
    key = extra.get("storage")
    offset_text = extra.get("storage_offset", "0")
    stride_text = extra.get("stride")
    if key is None or stride_text is None or entry.numel == 0:
        return None
    if not re.fullmatch(r"\s*\d+\s*", offset_text):
        return None
    stride = tuple(int(s) for s in _INT.findall(stride_text))
    # Stale view facts (an adapter changed the shape but kept ``extra``) must not be trusted.
    if len(stride) != len(entry.shape) or any(s < 0 for s in stride):
        return None
    if entry.nbytes != entry.numel * entry.dtype.itemsize:
        return None
    return key, int(offset_text), stride


def plan_storages(entries: Sequence[TensorEntry]) -> tuple[list[_Storage], list[tuple[int, _View]]]:
    """Assign each entry a storage: shared where the source shared one, else its own.

    Returns:
        The storages in key order, and for each entry (in order) its storage key and view.
    """
    groups: dict[tuple[str, DType], list[_View]] = {}
    parsed: list[tuple[tuple[str, DType], _View] | None] = []
    for entry in entries:
        facts = _parse_view(entry)
        if facts is None:
            parsed.append(None)
            continue
        group, source_view = (facts[0], entry.dtype), _View(entry, facts[1], facts[2])
        groups.setdefault(group, []).append(source_view)
        parsed.append((group, source_view))
    shared = {group for group, views in groups.items() if _can_share(views)}

    storages: list[_Storage] = []
    by_group: dict[tuple[str, DType], _Storage] = {}
    placed: list[tuple[int, _View]] = []
    for entry, found in zip(entries, parsed, strict=True):
        if found is not None and found[0] in shared:
            group, view = found
            storage = by_group.get(group)
            if storage is None:
                numel = max(v.extent() for v in groups[group])
                storage = _Storage(len(storages), entry.dtype, numel)
                storages.append(storage)
                by_group[group] = storage
        else:
            storage = _Storage(len(storages), entry.dtype, entry.numel)
            storages.append(storage)
            view = _View(entry, 0, _contiguous_stride(entry.shape))
        storage.members.append(view)
        placed.append((storage.key, view))
    return storages, placed


def _can_share(views: list[_View]) -> bool:
    """Share a storage only when it is no bigger than copies and the views agree on values."""
    if len(views) < 2:
        return False
    itemsize = views[0].entry.dtype.itemsize
    extent_bytes = max(v.extent() for v in views) * itemsize
    if extent_bytes > sum(v.entry.nbytes for v in views):
        return False  # mostly unused storage (uncloned views): copies are smaller
    try:
        _fill_storage(views, max(v.extent() for v in views), itemsize)
    except _ConflictError as exc:
        logger.info("not sharing storage: %s", exc)
        return False
    return True


class _ConflictError(Exception):
    """Two views of one storage disagree about an element's value."""


def _fill_storage(views: list[_View], numel: int, itemsize: int) -> NDArray[np.uint8]:
    """Scatter each view's bytes into one storage buffer, checking that overlaps agree.

    Bytes no view covers stay zero. Holds the storage plus one tensor in memory.
    """
    import numpy as np

    buffer = np.zeros(numel * itemsize, dtype=np.uint8)
    written = np.zeros(numel, dtype=np.bool_)
    for view in views:
        entry = view.entry
        data = np.frombuffer(_read_exact(entry), dtype=np.uint8).reshape((*entry.shape, itemsize))
        strides = tuple(s * itemsize for s in view.stride)
        target = np.lib.stride_tricks.as_strided(
            buffer[view.offset * itemsize :], shape=data.shape, strides=(*strides, 1)
        )
        seen = np.lib.stride_tricks.as_strided(
            written[view.offset :], shape=entry.shape, strides=view.stride
        )
        if not np.array_equal(target[seen], data[seen]):
            raise _ConflictError(f"{entry.name!r} disagrees with a tensor sharing its storage")
        target[...] = data
        # A stride-0 view writes some elements several times; the last write must match all.
        if not np.array_equal(target, data):
            raise _ConflictError(f"{entry.name!r} repeats an element with different values")
        seen[...] = True
    return buffer


def _read_exact(entry: TensorEntry) -> bytes | memoryview:
    # File-backed bytes are read with ``pread`` (``read_range``), not through the memory map:
    # mapped pages stay resident until the map closes, so a pass over the input would grow the
    # peak RSS to the size of the file instead of one tensor.
    where = entry.data.file_range()
    raw = entry.data.read() if where is None else where[0].read(where[1], entry.nbytes)
    if len(raw) != entry.nbytes:
        raise CorruptCheckpointError(
            f"tensor {entry.name!r} has {len(raw)} bytes, expected {entry.nbytes}"
        )
    return raw


def _storage_chunks(storage: _Storage) -> Iterator[bytes | memoryview]:
    """The storage's bytes, in chunks, reading at most one tensor (or shared storage) at once."""
    if not storage.is_plain:
        buffer = _fill_storage(storage.members, storage.numel, storage.dtype.itemsize)
        yield buffer.data
        return
    entry = storage.members[0].entry
    where = entry.data.file_range()
    step = entry.data.compute_step() if where is None else 0
    if step and entry.nbytes > step:  # a cast or a transpose: through one reused buffer (#50)
        yield from fill_chunks(entry.data.read_into, entry.nbytes, step)
        return
    if where is None and entry.nbytes > CHUNK_BYTES and entry.data.is_ranged():
        # A strided (perhaps expanded) view: gathered a slab at a time, never whole (#25).
        step = ranged_step(entry)
        for start in range(0, entry.nbytes, step):
            piece = entry.data.read_range(start, min(step, entry.nbytes - start))
            if len(piece) != min(step, entry.nbytes - start):
                raise CorruptCheckpointError(f"tensor {entry.name!r} has a short range")
            yield piece
        return
    if where is None:
        yield _read_exact(entry)
        return
    # Stream with ``pread`` in CHUNK_BYTES pieces: each is CRC'd and written, then freed, so
    # memory stays one chunk whatever the tensor size. (``copy_range`` could copy without
    # touching the bytes, but the data descriptor needs their CRC, so we read them once here;
    # views of the memory map would keep every page resident until the end.)
    source, offset = where
    source.check_range(offset, entry.nbytes, f"tensor {entry.name!r}")
    yield from read_chunks(source, offset, entry.nbytes)


# --- pickle: a minimal protocol-2 emitter ---------------------------------------------------------


@dataclass(frozen=True)
class _Global:
    module: str
    name: str


@dataclass(frozen=True)
class _Memo:
    """A string pickled once and fetched from the memo afterwards (torch reuses these objects)."""

    text: str


@dataclass(frozen=True)
class _PersId:
    value: tuple[object, ...]


@dataclass(frozen=True)
class _Reduce:
    func: _Global
    args: tuple[object, ...]


_ORDERED_DICT = _Global("collections", "OrderedDict")


class _Pickler:
    """Emits exactly the opcodes CPython's protocol-2 pickler writes for a torch state_dict.

    Every object is memoized (BINPUT) like CPython does; globals and ``_Memo`` strings are
    fetched back (BINGET) when they occur again, as torch's identical objects are.
    """

    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")  # PROTO 2
        self._memo: dict[object, int] = {}
        self._count = 0

    def _put(self, key: object = None) -> None:
        index = self._count
        self._count += 1
        if key is not None:
            self._memo[key] = index
        self.out += b"q" + bytes([index]) if index < 256 else b"r" + struct.pack("<I", index)

    def _get(self, key: object) -> bool:
        index = self._memo.get(key)
        if index is None:
            return False
        self.out += b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)
        return True

    def save(self, obj: object) -> None:
        if obj is None:
            self.out += b"N"
        elif isinstance(obj, bool):
            self.out += b"\x88" if obj else b"\x89"
        elif isinstance(obj, int):
            self._save_int(obj)
        elif isinstance(obj, str):
            self._save_str(obj)
        elif isinstance(obj, _Memo):
            if not self._get(obj):
                self._save_str(obj.text, memo=obj)
        elif isinstance(obj, _Global):
            if not self._get(obj):
                self.out += f"c{obj.module}\n{obj.name}\n".encode("ascii")
                self._put(obj)
        elif isinstance(obj, tuple):
            self._save_tuple(obj)
        elif isinstance(obj, _PersId):
            self._save_tuple(obj.value)
            self.out += b"Q"  # BINPERSID
        elif isinstance(obj, _Reduce):
            self.save(obj.func)
            self.save(obj.args)
            self.out += b"R"
            self._put()
        else:  # pragma: no cover - only this module builds the values
            raise TypeError(f"cannot pickle {type(obj).__name__}")

    def _save_int(self, value: int) -> None:
        if 0 <= value <= 0xFF:
            self.out += b"K" + bytes([value])
        elif 0 <= value <= 0xFFFF:
            self.out += b"M" + struct.pack("<H", value)
        elif -0x80000000 <= value <= 0x7FFFFFFF:
            self.out += b"J" + struct.pack("<i", value)
        else:
            raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
            self.out += b"\x8a" + bytes([len(raw)]) + raw  # LONG1 (sizes < 2**2040)

    def _save_str(self, text: str, memo: object = None) -> None:
        raw = text.encode("utf-8", "surrogatepass")
        self.out += b"X" + struct.pack("<I", len(raw)) + raw
        self._put(memo)

    def _save_tuple(self, items: tuple[object, ...]) -> None:
        if not items:
            self.out += b")"
            return
        if len(items) <= 3:
            for item in items:
                self.save(item)
            self.out += b"\x85\x86\x87"[len(items) - 1 : len(items)]
        else:
            self.out += b"("
            for item in items:
                self.save(item)
            self.out += b"t"
        self._put()

    def save_state_dict(self, items: Iterable[tuple[str, object]]) -> bytes:
        """Pickle ``OrderedDict(items)`` the way CPython batches dict items (1000 per SETITEMS)."""
        self.save(_Reduce(_ORDERED_DICT, ()))
        batch: list[tuple[str, object]] = []
        for item in items:
            batch.append(item)
            if len(batch) == 1000:
                self._save_batch(batch)
                batch = []
        self._save_batch(batch)
        self.out += b"."
        return bytes(self.out)

    def _save_batch(self, batch: list[tuple[str, object]]) -> None:
        if len(batch) == 1:
            self.save(batch[0][0])
            self.save(batch[0][1])
            self.out += b"s"  # SETITEM
        elif batch:
            self.out += b"("
            for name, value in batch:
                self.save(name)
                self.save(value)
            self.out += b"u"  # SETITEMS


def _tensor_call(storage: _Storage, view: _View) -> _Reduce:
    """``_rebuild_tensor_v2(pid, offset, size, stride, False, OrderedDict())``, or v3."""
    dtype = storage.dtype
    legacy = _STORAGE_CLASS.get(dtype)
    hooks = _Reduce(_ORDERED_DICT, ())
    key = _Memo(str(storage.key))
    if legacy is not None:
        pid = _PersId(
            (_Memo("storage"), _Global("torch", legacy), key, _Memo("cpu"), storage.numel)
        )
        args: tuple[object, ...] = (pid, view.offset, view.entry.shape, view.stride, False, hooks)
        return _Reduce(_Global("torch._utils", "_rebuild_tensor_v2"), args)
    untyped = _Global("torch.storage", "UntypedStorage")
    pid = _PersId((_Memo("storage"), untyped, key, _Memo("cpu"), storage.nbytes))
    torch_dtype = _Global("torch", TORCH_NAMES[dtype])
    args = (pid, view.offset, view.entry.shape, view.stride, False, hooks, torch_dtype)
    return _Reduce(_Global("torch._utils", "_rebuild_tensor_v3"), args)


def build_pickle(storages: Sequence[_Storage], placed: Sequence[tuple[int, _View]]) -> bytes:
    """The ``data.pkl`` bytes for the planned storages."""
    items = ((view.entry.name, _tensor_call(storages[key], view)) for key, view in placed)
    return _Pickler().save_state_dict(items)


# --- zip container --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Record:
    name: bytes
    offset: int
    size: int
    crc: int


class _ZipWriter:
    """Streams stored records with torch's alignment padding; offsets relative to the start."""

    def __init__(self, out: IO[bytes], prefix: str) -> None:
        self._out = out
        self._prefix = prefix
        self._pos = 0
        self._records: list[_Record] = []
        self._combined_crc = 0

    def _write(self, data: bytes | memoryview) -> None:
        self._out.write(data)
        self._pos += len(data)

    def add(self, name: str, size: int, chunks: Iterable[bytes | memoryview]) -> None:
        full = f"{self._prefix}/{name}".encode()
        offset = self._pos
        zip64 = _zip64_extra(size, offset)
        start = offset + _LOCAL_HEADER.size + len(full) + len(zip64) + 4
        padding = -start % ALIGNMENT_BYTES
        extra = zip64 + b"FB" + struct.pack("<H", padding) + b"Z" * padding
        flags = _flags(size)
        self._write(
            _LOCAL_HEADER.pack(0x04034B50, 0, flags, 0, 0, 0, 0, 0, 0, len(full), len(extra))
        )
        self._write(full + extra)
        crc = 0
        written = 0
        for chunk in chunks:
            crc = zlib.crc32(chunk, crc)
            written += len(chunk)
            self._write(chunk)
        if written != size:
            raise CorruptCheckpointError(f"record {name!r} has {written} bytes, expected {size}")
        if size:  # miniz writes no data descriptor for an empty record
            self._write_descriptor(crc, size, zip64=bool(zip64))
        self._records.append(_Record(full, offset, size, crc))
        start_writeback(self._out, offset, self._pos - offset)  # disk works while we read on

    def _write_descriptor(self, crc: int, size: int, *, zip64: bool) -> None:
        if zip64:  # miniz writes 8-byte sizes whenever the local header has a zip64 field
            self._write(_DESCRIPTOR64.pack(0x08074B50, crc, size, size))
        else:
            self._write(_DESCRIPTOR32.pack(0x08074B50, crc, size, size))
        # torch's serialization id combines the CRCs seen in data descriptors (c10::hash_combine).
        seed = self._combined_crc
        self._combined_crc = seed ^ ((crc + 0x9E3779B9 + (seed << 6) + (seed >> 2)) & _MASK64)

    def add_bytes(self, name: str, data: bytes) -> None:
        self.add(name, len(data), (data,))

    def serialization_id(self) -> bytes:
        names = b"\n".join(record.name for record in self._records)
        name_hash = int.from_bytes(hashlib.sha256(names).digest()[:8], "little")
        return b"%020d%020d" % (name_hash, self._combined_crc)

    def finish(self) -> None:
        central_offset = self._pos
        for record in self._records:
            extra = _zip64_extra(record.size, record.offset)
            self._write(
                _CENTRAL_HEADER.pack(
                    0x02014B50,
                    0,
                    0,
                    _flags(record.size),
                    0,
                    0,
                    0,
                    record.crc,
                    _field32(record.size),
                    _field32(record.size),
                    len(record.name),
                    len(extra),
                    0,
                    0,
                    0,
                    0,
                    _field32(record.offset),
                )
            )
            self._write(record.name + extra)
        central_size = self._pos - central_offset
        count = len(self._records)
        end64 = self._pos
        # torch always writes the zip64 end records (miniz with MZ_ZIP_FLAG_WRITE_ZIP64).
        self._write(
            _ZIP64_END.pack(
                0x06064B50,
                _ZIP64_END.size - 12,
                0x031E,
                0x002D,
                0,
                0,
                count,
                count,
                central_size,
                central_offset,
            )
        )
        self._write(_ZIP64_LOCATOR.pack(0x07064B50, 0, end64, 1))
        self._write(
            _END.pack(
                0x06054B50,
                0,
                0,
                min(count, 0xFFFF),
                min(count, 0xFFFF),
                _field32(central_size),
                _field32(central_offset),
                0,
            )
        )


def _field32(value: int) -> int:
    """A 32-bit size or offset field: the value, or 0xFFFFFFFF when a zip64 field holds it."""
    return 0xFFFFFFFF if value >= ZIP64_LIMIT else value


def _flags(size: int) -> int:
    """General-purpose flags: miniz sets bit 3 (sizes in a data descriptor) only for data."""
    return _FLAGS if size else _FLAGS & ~0x0008


def _zip64_extra(size: int, offset: int) -> bytes:
    """miniz's zip64 extra field: sizes when the record is big, the offset when it is far."""
    fields = b""
    if size >= ZIP64_LIMIT:
        fields += struct.pack("<QQ", size, size)
    if offset >= ZIP64_LIMIT:
        fields += struct.pack("<Q", offset)
    return struct.pack("<HH", 1, len(fields)) + fields if fields else b""


def archive_prefix(out: IO[bytes]) -> str:
    """The archive's top directory: the file's name without its last extension, as torch does.

    torch names the directory after the path it saves to, or ``archive`` when given a file
    object. Our output usually goes through a temporary file whose name means nothing, so any
    name that is not a plain file name (an int descriptor, our temp files, an odd name) gives
    ``archive``.
    """
    name = getattr(out, "name", None)
    if not isinstance(name, str):
        return "archive"
    base = re.split(r"[\\/]", name)[-1]
    stem = base.rsplit(".", 1)[0] if "." in base else base
    if not stem or base.startswith(".ckptctl-") or not stem.isprintable():
        return "archive"
    return stem


def write_zip(
    out: IO[bytes],
    entries: Sequence[TensorEntry],
    metadata: Mapping[str, str],
    scalars: Mapping[str, JSONValue],
    *,
    prefix: str | None = None,
) -> None:
    """Write ``entries`` as a flat state_dict in torch's zip format, streaming one tensor at a time.

    Args:
        out: the destination, positioned at the start of the archive.
        entries: tensors in order; their names become the state_dict keys.
        metadata: ignored (a torch state_dict has nowhere standard to keep it).
        scalars: ignored, as ``metadata``.
        prefix: the archive's top directory; default from ``out.name`` (see
            :func:`archive_prefix`).

    Raises:
        OutputError: two entries have the same name, or the prefix is unusable.
        CorruptCheckpointError: an entry's bytes are not ``nbytes`` long.

    Example:
        >>> with open("model.pt", "wb") as out:  # doctest: +SKIP
        ...     write_zip(out, list(ckpt.values()), {}, {})
    """
    names = [entry.name for entry in entries]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise OutputError(f"tensor name {dup!r} appears twice; a state_dict needs unique names")
    prefix = archive_prefix(out) if prefix is None else prefix
    if not prefix or "/" in prefix or "\\" in prefix:
        raise OutputError(f"archive prefix {prefix!r} must be a non-empty name without slashes")
    if metadata or scalars:
        logger.info("pytorch zip output keeps no metadata; %d keys dropped", len(metadata))
    storages, placed = plan_storages(entries)
    zip_out = _ZipWriter(out, prefix)
    zip_out.add_bytes("data.pkl", build_pickle(storages, placed))
    zip_out.add_bytes(".format_version", b"1")
    zip_out.add_bytes(".storage_alignment", str(ALIGNMENT_BYTES).encode("ascii"))
    zip_out.add_bytes("byteorder", b"little")
    for storage in storages:
        zip_out.add(f"data/{storage.key}", storage.nbytes, _storage_chunks(storage))
    zip_out.add_bytes("version", VERSION_RECORD)
    zip_out.add_bytes(".data/serialization_id", zip_out.serialization_id())
    zip_out.finish()

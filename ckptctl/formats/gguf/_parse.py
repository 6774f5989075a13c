"""GGUF's header, parsed within the file's bounds (the byte layout is in ``gguf/__init__.py``).

Every count and length is checked against the bytes left in the file before anything is
allocated: a key/value takes at least :data:`MIN_KV_BYTES`, a tensor info
:data:`MIN_TENSOR_INFO_BYTES`, an array item its element size (8 for a string, 12 for an
array). Arrays nest at most :data:`MAX_ARRAY_DEPTH` deep. Tensor offsets must be aligned, in
the file and not overlapping; whether they are the running padded size ``gguf.cpp`` requires is
recorded (:attr:`ParsedGGUF.llama_cpp_problems`) for ``verify``, not refused (gguf-py reads
such files).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.errors import CorruptCheckpointError, TruncatedError, UnsupportedError
from ckptctl.formats.gguf._ggml import GGML_TYPES, SCALAR_FORMATS, GGMLType, ValueType

if TYPE_CHECKING:
    from ckptctl.sources import ByteSource

MAGIC = b"GGUF"
#: Versions read: 2 and 3 differ only in that 3 allows big-endian files (gguf-py reads these
#: two; version 1 had 32-bit counts and lengths and no reader has written it since 2023).
SUPPORTED_VERSIONS = (2, 3)
#: Bytes of magic, version, tensor count and key/value count.
FIXED_HEADER_BYTES = 24
#: ``general.alignment``'s default (``GGUF_DEFAULT_ALIGNMENT``).
DEFAULT_ALIGNMENT = 32
#: Largest ``general.alignment`` accepted (gguf-py and gguf.cpp take any power of two; a
#: larger one is no layout anyone writes and would invent megabytes of padding).
MAX_ALIGNMENT = 1 << 20
#: ``GGML_MAX_DIMS``: gguf.cpp refuses a tensor of more dimensions.
MAX_DIMS = 4
#: ``GGML_MAX_NAME``: gguf.cpp refuses a tensor name of this many bytes or more.
MAX_NAME_BYTES = 64
#: Arrays of arrays deeper than this are refused (each level is 12 bytes of file).
MAX_ARRAY_DEPTH = 32
#: A key (8-byte length), its value type (4) and the smallest value (1).
MIN_KV_BYTES = 13
#: A name (8-byte length), n_dims (4), type (4) and offset (8).
MIN_TENSOR_INFO_BYTES = 24
#: Bytes read from the file at a time while parsing the header.
READ_CHUNK_BYTES = 1 << 16
#: ``int64_t`` bound of gguf.cpp's element and byte counts.
INT64_END = 1 << 63
#: Bytes an array item of each type takes at least.
_MIN_ITEM_BYTES = {
    **{t: size for t, (_, size) in SCALAR_FORMATS.items()},
    ValueType.STRING: 8,
    ValueType.ARRAY: 12,
}


@dataclass(frozen=True)
class KeyValue:
    """One key/value: its decoded value and its byte range ``[start, end)``.

    ``value`` is an ``int``, ``float``, ``bool`` or ``str``; an array is a ``list`` (strings,
    nested arrays) or a 1-D numpy array (numbers, bools). ``item_type`` is an array's item type.
    """

    key: str
    type: ValueType
    value: object
    start: int
    end: int
    item_type: ValueType | None = None


@dataclass(frozen=True)
class TensorInfo:
    """One tensor info: GGUF's ``ne`` (fastest dimension first), type id, data offset."""

    name: str
    ne: tuple[int, ...]
    type_id: int
    offset: int
    start: int
    end: int

    @property
    def ggml(self) -> GGMLType | None:
        """The tensor's type; None for an id ckptctl does not know."""
        return GGML_TYPES.get(self.type_id)

    @property
    def type_name(self) -> str:
        """``Q4_K``, or ``type 42`` for an unknown id."""
        known = self.ggml
        return known.name if known is not None else f"type {self.type_id}"

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy/PyTorch order: the reverse of ``ne``."""
        return tuple(reversed(self.ne))

    @property
    def nbytes(self) -> int | None:
        """Stored bytes; None for an unknown type."""
        known = self.ggml
        return None if known is None else known.nbytes(math.prod(self.ne))


@dataclass(frozen=True)
class ParsedGGUF:
    """A GGUF header, checked: where everything is and what llama.cpp would say of it."""

    size: int
    version: int
    big_endian: bool
    kvs: tuple[KeyValue, ...]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    #: End of the last tensor info.
    info_end: int
    #: Start of the data section: ``info_end`` rounded up to ``alignment``.
    data_start: int
    #: Stored bytes of each tensor (for an unknown type: up to the next tensor or the file's
    #: end), by name.
    spans: dict[str, int] = field(default_factory=dict)
    #: Why gguf.cpp (llama.cpp's reader) would refuse the file while gguf-py reads it.
    llama_cpp_problems: tuple[str, ...] = ()


def align_up(offset: int, alignment: int) -> int:
    """``offset`` rounded up to a multiple of ``alignment``."""
    return -(-offset // alignment) * alignment


class _Cursor:
    """Sequential, bounded reads of the header.

    A local file is read through its memory map, exactly the bytes parsed (the header's end is
    known only once it is parsed, and listing must not touch tensor pages); a remote one
    ``READ_CHUNK_BYTES`` at a time (each read is a request).
    """

    def __init__(self, source: ByteSource, order: str) -> None:
        self.source = source
        self.size = source.size
        self.order = order
        self.big = order == ">"
        self.pos = 0
        self._whole = None if source.is_remote else source.buffer
        self._buf = b""
        self._buf_start = 0

    def take(self, length: int, what: str) -> bytes:
        if length > self.size - self.pos:
            raise TruncatedError(
                f"{what} at byte {self.pos} needs {length} bytes, but the file ends at byte "
                f"{self.size}",
                hint="the file looks truncated or its header is damaged; re-download it",
            )
        start, self.pos = self.pos, self.pos + length
        if self._whole is not None:
            return bytes(self._whole[start : start + length])
        lo = start - self._buf_start
        if lo + length > len(self._buf):
            want = min(self.size - start, max(length, READ_CHUNK_BYTES))
            self._buf, self._buf_start, lo = self.source.read(start, want), start, 0
        return self._buf[lo : lo + length]

    def unpack(self, fmt: str, what: str) -> int:
        size = struct.calcsize(fmt)
        value: int = struct.unpack(self.order + fmt, self.take(size, what))[0]
        return value

    def string(self, what: str) -> str:
        length = self.unpack("Q", f"the length of {what}")
        raw = self.take(length, f"{what} ({length} bytes)")
        return raw.decode("utf-8", errors="replace")

    def strings(self, count: int, what: str) -> list[str]:
        """``count`` strings in a row (a tokenizer's 32k tokens): on a mapped file, read in
        one loop that builds no message; the first string that does not fit is read again
        by :meth:`string`, which raises with its usual message."""
        whole = self._whole
        if whole is None:
            return [self.string(f"item {i} of {what}") for i in range(count)]
        length_at = struct.Struct(self.order + "Q").unpack_from
        out: list[str] = []
        pos, end = self.pos, self.size
        for i in range(count):
            length = length_at(whole, pos)[0] if end - pos >= 8 else end
            if length > end - pos - 8:
                self.pos = pos
                return out + [self.string(f"item {j} of {what}") for j in range(i, count)]
            out.append(str(whole[pos + 8 : pos + 8 + length], "utf-8", "replace"))
            pos += 8 + length
        self.pos = pos
        return out

    def room(self) -> int:
        return self.size - self.pos


def _version(source: ByteSource, head: bytes) -> tuple[int, str]:
    """The version and byte order (``<``/``>``): a big-endian file's version read as
    little-endian has its low 16 bits zero (gguf-py's test)."""
    if len(head) < FIXED_HEADER_BYTES or head[:4] != MAGIC:
        if head[:4] != MAGIC:
            raise CorruptCheckpointError("not a GGUF file: it does not start with 'GGUF'")
        raise TruncatedError(
            f"the file has {len(head)} bytes, fewer than GGUF's {FIXED_HEADER_BYTES}-byte header",
            hint="the file looks truncated; re-download it",
        )
    (little,) = struct.unpack("<I", head[4:8])
    order = ">" if little & 0xFFFF == 0 else "<"
    (version,) = struct.unpack(order + "I", head[4:8])
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedError(
            f"GGUF version {version} is not supported (ckptctl reads versions 2 and 3)",
            hint="re-save it with a current llama.cpp (convert_hf_to_gguf.py or llama-quantize)",
        )
    return version, order


def parse_gguf(source: ByteSource) -> ParsedGGUF:
    """Parse and check a GGUF file's header (no tensor bytes are read).

    Raises:
        CorruptCheckpointError: a count, length, type, dimension or offset the file cannot hold.
        UnsupportedError: a version other than 2 or 3.
    """
    head = source.read(0, min(source.size, FIXED_HEADER_BYTES))
    version, order = _version(source, head)
    cur = _Cursor(source, order)
    cur.pos = 8
    n_tensors = cur.unpack("Q", "the tensor count")
    n_kv = cur.unpack("Q", "the key/value count")
    if n_tensors * MIN_TENSOR_INFO_BYTES + n_kv * MIN_KV_BYTES > cur.room():
        raise CorruptCheckpointError(
            f"the header declares {n_tensors} tensors and {n_kv} key/values, more than the "
            f"file's {source.size} bytes can hold",
            hint="the header is damaged; re-download the file",
        )
    kvs = _key_values(cur, n_kv)
    alignment = _alignment(kvs)
    infos = _tensor_infos(cur, n_tensors)
    data_start = align_up(cur.pos, alignment)
    spans, problems = _check_offsets(infos, data_start, alignment, source.size)
    return ParsedGGUF(
        size=source.size,
        version=version,
        big_endian=order == ">",
        kvs=kvs,
        tensors=infos,
        alignment=alignment,
        info_end=cur.pos,
        data_start=data_start,
        spans=spans,
        llama_cpp_problems=problems,
    )


def _key_values(cur: _Cursor, count: int) -> tuple[KeyValue, ...]:
    seen: set[str] = set()
    out = []
    for index in range(count):
        start = cur.pos
        key = cur.string(f"the key of key/value {index}")
        if key in seen:
            raise CorruptCheckpointError(
                f"key {key!r} appears twice (at byte {start})", hint="the header is damaged"
            )
        seen.add(key)
        kind = _value_type(cur, f"key {key!r}")
        item_type = None
        if kind is ValueType.ARRAY:
            item_type = _value_type(cur, f"the items of key {key!r}")
            value = _array(cur, item_type, f"key {key!r}", 1)
        else:
            value = _value(cur, kind, f"key {key!r}")
        out.append(KeyValue(key, kind, value, start, cur.pos, item_type))
    return tuple(out)


def _value_type(cur: _Cursor, what: str) -> ValueType:
    at = cur.pos
    raw = cur.unpack("I", f"the value type of {what}")
    try:
        return ValueType(raw)
    except ValueError:
        raise CorruptCheckpointError(
            f"{what} has value type {raw} at byte {at}, not a GGUF type (0-12)",
            hint="the header is damaged; re-download the file",
        ) from None


def _value(cur: _Cursor, kind: ValueType, what: str) -> object:
    if kind is ValueType.STRING:
        return cur.string(f"the string of {what}")
    letter, size = SCALAR_FORMATS[kind]
    value: object = struct.unpack(cur.order + letter, cur.take(size, f"the value of {what}"))[0]
    return value


def _array(cur: _Cursor, item_type: ValueType, what: str, depth: int) -> object:
    at = cur.pos
    count = cur.unpack("Q", f"the length of the array of {what}")
    if depth > MAX_ARRAY_DEPTH:
        raise CorruptCheckpointError(
            f"the array of {what} nests arrays more than {MAX_ARRAY_DEPTH} deep (at byte {at})"
        )
    if count * _MIN_ITEM_BYTES[item_type] > cur.room():
        raise CorruptCheckpointError(
            f"the array of {what} declares {count} items at byte {at}, more than the "
            f"{cur.room()} bytes left in the file can hold",
            hint="the header is damaged or the file truncated; re-download it",
        )
    if item_type is ValueType.STRING:
        return cur.strings(count, what)
    if item_type is ValueType.ARRAY:
        items = []
        for i in range(count):
            inner = _value_type(cur, f"item {i} of {what}")
            items.append(_array(cur, inner, f"item {i} of {what}", depth + 1))
        return items
    import numpy as np

    letter, size = SCALAR_FORMATS[item_type]
    raw = cur.take(count * size, f"the items of {what}")
    return np.frombuffer(raw, dtype=np.dtype(letter).newbyteorder(">" if cur.big else "<"))


def _alignment(kvs: tuple[KeyValue, ...]) -> int:
    found = next((kv for kv in kvs if kv.key == "general.alignment"), None)
    if found is None:
        return DEFAULT_ALIGNMENT
    value = found.value
    if found.type is not ValueType.UINT32 or not isinstance(value, int):
        raise CorruptCheckpointError(
            f"general.alignment is a {found.type.name}, not a UINT32",
            hint="gguf.cpp and gguf-py refuse it too; the writer is broken",
        )
    if value <= 0 or value & (value - 1) or value > MAX_ALIGNMENT:
        raise CorruptCheckpointError(
            f"general.alignment is {value}, not a power of two up to {MAX_ALIGNMENT}",
            hint="gguf.cpp and gguf-py refuse it too; the writer is broken",
        )
    return value


def _tensor_infos(cur: _Cursor, count: int) -> tuple[TensorInfo, ...]:
    out = []
    for index in range(count):
        start = cur.pos
        name = cur.string(f"the name of tensor {index}")
        n_dims = cur.unpack("I", f"the dimension count of tensor {name!r}")
        if n_dims > MAX_DIMS:
            raise CorruptCheckpointError(
                f"tensor {name!r} has {n_dims} dimensions; GGUF allows at most {MAX_DIMS}",
                hint="the header is damaged; re-download the file",
            )
        ne = tuple(cur.unpack("Q", f"dimension {d} of tensor {name!r}") for d in range(n_dims))
        type_id = cur.unpack("I", f"the type of tensor {name!r}")
        offset = cur.unpack("Q", f"the offset of tensor {name!r}")
        info = TensorInfo(name, ne, type_id, offset, start, cur.pos)
        _check_shape(info)
        out.append(info)
    return tuple(out)


def _check_shape(info: TensorInfo) -> None:
    numel = math.prod(info.ne)
    if any(d >= INT64_END for d in info.ne) or numel >= INT64_END:
        raise CorruptCheckpointError(
            f"tensor {info.name!r} has ne {list(info.ne)}: its element count overflows int64",
            hint="the header is damaged; re-download the file",
        )
    known = info.ggml
    if known is not None and info.ne and info.ne[0] % known.block_size:
        raise CorruptCheckpointError(
            f"tensor {info.name!r} ({known.name}) has rows of {info.ne[0]} elements, not a "
            f"multiple of its {known.block_size}-element blocks",
            hint="the header is damaged; re-download the file",
        )


def _check_offsets(
    infos: tuple[TensorInfo, ...], data_start: int, alignment: int, size: int
) -> tuple[dict[str, int], tuple[str, ...]]:
    """Each tensor's stored bytes, checked; and gguf.cpp's stricter rules, reported."""
    room = max(0, size - data_start)
    names: set[str] = set()
    order = sorted(range(len(infos)), key=lambda i: (infos[i].offset, i))
    spans: dict[str, int] = {}
    for rank, i in enumerate(order):
        info = infos[i]
        if info.name in names:
            raise CorruptCheckpointError(f"tensor name {info.name!r} appears twice")
        names.add(info.name)
        if info.offset % alignment:
            raise CorruptCheckpointError(
                f"tensor {info.name!r} starts at data offset {info.offset}, not a multiple of "
                f"the {alignment}-byte alignment",
                hint="the header is damaged; re-download the file",
            )
        following = infos[order[rank + 1]].offset if rank + 1 < len(order) else room
        nbytes = info.nbytes
        span = max(0, following - info.offset) if nbytes is None else nbytes
        if info.offset + span > room:
            raise TruncatedError(
                f"tensor {info.name!r} ends at byte {data_start + info.offset + span}, past the "
                f"end of the file ({size} bytes)",
                hint="the file looks truncated; re-download it",
            )
        if nbytes is not None and info.offset + nbytes > following:
            raise CorruptCheckpointError(
                f"tensor {info.name!r} (bytes {info.offset} to {info.offset + nbytes} of the "
                f"data section) overlaps the tensor at {following}",
                hint="the header is damaged; re-download the file",
            )
        spans[info.name] = span
    return spans, _llama_cpp_problems(infos, alignment)


def _llama_cpp_problems(infos: tuple[TensorInfo, ...], alignment: int) -> tuple[str, ...]:
    """What ``gguf_init_from_file_impl`` refuses: names of ``GGML_MAX_NAME`` bytes or more,
    unknown types, and offsets other than the running padded size (tensors back to back in
    file order, each padded to the alignment)."""
    problems = []
    expected = 0
    for info in infos:
        if len(info.name.encode("utf-8")) >= MAX_NAME_BYTES:
            problems.append(
                f"tensor name {info.name!r} has {MAX_NAME_BYTES} bytes or more (GGML_MAX_NAME)"
            )
        nbytes = info.nbytes
        if nbytes is None:
            problems.append(
                f"tensor {info.name!r} has {info.type_name}, unknown to ckptctl: the offsets "
                "after it cannot be checked"
            )
            return tuple(problems)
        if info.offset != expected:
            problems.append(
                f"tensor {info.name!r} is at data offset {info.offset}; gguf.cpp requires "
                f"{expected} (tensors back to back in header order, each padded to {alignment})"
            )
            return tuple(problems)
        expected += align_up(nbytes, alignment)
    return tuple(problems)

"""GGUF key/values for writing: typed values, their little-endian bytes, ``--set-meta`` text.

A key/value written is one of three things, encoded as gguf-py's ``GGUFWriter._pack_val``
encodes it (string key, u32 value type, value; strings and arrays with a u64 length; an
array's items after its u32 item type, an inner array as its item type, count and items):

* a :class:`StoredValue`, carried from a GGUF source: its bytes as the file holds them (a
  big-endian file's numbers swapped), so strings that are not valid UTF-8, nested arrays and
  empty arrays keep every byte;
* a :class:`TypedValue`, made by ``--set-meta KEY=TYPE:VALUE``, ``--arch`` and the like;
* a plain ``str`` (a metadata string of another format): a STRING.

``--set-meta`` types are ``u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str`` and
``arr[TYPE]`` (any of those, or another ``arr[...]``) whose VALUE is a JSON array:
``tokenizer.ggml.add_bos_token=bool:true``, ``general.tags=arr[str]:["a","b"]``,
``x=arr[arr[i32]]:[[1,2],[3]]``.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptctl.errors import SelectionError, UnsupportedError
from ckptctl.formats.gguf._ggml import SCALAR_FORMATS, ValueType

if TYPE_CHECKING:
    from ckptctl.formats.gguf._parse import KeyValue
    from ckptctl.sources import ByteSource

#: ``--set-meta`` type names.
TYPE_NAMES: dict[str, ValueType] = {
    "u8": ValueType.UINT8,
    "i8": ValueType.INT8,
    "u16": ValueType.UINT16,
    "i16": ValueType.INT16,
    "u32": ValueType.UINT32,
    "i32": ValueType.INT32,
    "u64": ValueType.UINT64,
    "i64": ValueType.INT64,
    "f32": ValueType.FLOAT32,
    "f64": ValueType.FLOAT64,
    "bool": ValueType.BOOL,
    "str": ValueType.STRING,
}
#: The smallest and largest value of each integer type.
INT_RANGES: dict[ValueType, tuple[int, int]] = {
    ValueType.UINT8: (0, (1 << 8) - 1),
    ValueType.INT8: (-(1 << 7), (1 << 7) - 1),
    ValueType.UINT16: (0, (1 << 16) - 1),
    ValueType.INT16: (-(1 << 15), (1 << 15) - 1),
    ValueType.UINT32: (0, (1 << 32) - 1),
    ValueType.INT32: (-(1 << 31), (1 << 31) - 1),
    ValueType.UINT64: (0, (1 << 64) - 1),
    ValueType.INT64: (-(1 << 63), (1 << 63) - 1),
}
#: Arrays in ``--set-meta`` nest at most this deep (as the reader's ``MAX_ARRAY_DEPTH``).
MAX_SET_META_DEPTH = 32


@dataclass(frozen=True)
class TypedValue:
    """A value and its GGUF type.

    ``value`` is an ``int``, ``float``, ``bool`` or ``str``; for an ARRAY, a tuple of items
    of ``item_type`` (for arrays of arrays, :class:`TypedValue` ARRAYs).
    """

    type: ValueType
    value: object
    item_type: ValueType | None = None


@dataclass(frozen=True)
class StoredValue:
    """A key/value of a GGUF file, written back as the file stores it."""

    kv: KeyValue
    source: ByteSource
    big_endian: bool

    @property
    def type(self) -> ValueType:
        """The value type."""
        return self.kv.type

    @property
    def value(self) -> object:
        """The decoded value (see :class:`~ckptctl.formats.gguf._parse.KeyValue`)."""
        return self.kv.value

    def encoded(self) -> bytes:
        """The key/value's bytes, little-endian."""
        raw = bytes(self.source.read(self.kv.start, self.kv.end - self.kv.start))
        return _to_little_endian(raw) if self.big_endian else raw


def utf8(text: str, what: str) -> bytes:
    """``text`` as UTF-8.

    Raises:
        UnsupportedError: it holds lone surrogates (no UTF-8 spelling).
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise UnsupportedError(f"{what} {text!r} is not valid UTF-8 text") from None


def _string(text: str, what: str) -> bytes:
    raw = utf8(text, what)
    return struct.pack("<Q", len(raw)) + raw


def _payload(kind: ValueType, value: object, item_type: ValueType | None, what: str) -> bytes:
    if kind is ValueType.STRING:
        return _string(str(value), what)
    if kind is ValueType.ARRAY:
        assert item_type is not None
        assert isinstance(value, tuple)
        head = struct.pack("<IQ", item_type, len(value))
        if item_type is ValueType.ARRAY:
            items = [_payload(i.type, i.value, i.item_type, what) for i in value]
        else:
            items = [_payload(item_type, i, None, what) for i in value]
        return head + b"".join(items)
    letter, _ = SCALAR_FORMATS[kind]
    return struct.pack("<" + letter, value)


def encode_key_value(key: str, value: object) -> bytes:
    """The little-endian bytes of one key/value.

    ``value`` is a :class:`StoredValue` (its own bytes; its key is ``key``), a
    :class:`TypedValue` or a ``str`` (a STRING).

    Raises:
        UnsupportedError: a key or string that is not valid UTF-8.
    """
    if isinstance(value, StoredValue):
        return value.encoded()
    typed = value if isinstance(value, TypedValue) else TypedValue(ValueType.STRING, str(value))
    what = f"the value of key {key!r}"
    kind = struct.pack("<I", typed.type)
    return _string(key, "key") + kind + _payload(typed.type, typed.value, typed.item_type, what)


# --- a big-endian file's key/value, little-endian --------------------------------------------


def _to_little_endian(raw: bytes) -> bytes:
    """One key/value of a big-endian file (already parsed and checked) with every number
    swapped; strings stay byte for byte."""
    out = bytearray()
    pos = _copy_string(raw, 0, out)
    kind = ValueType(struct.unpack_from(">I", raw, pos)[0])
    out += struct.pack("<I", kind)
    _copy_value(raw, pos + 4, kind, out)
    return bytes(out)


def _copy_string(raw: bytes, pos: int, out: bytearray) -> int:
    length: int = struct.unpack_from(">Q", raw, pos)[0]
    out += struct.pack("<Q", length) + raw[pos + 8 : pos + 8 + length]
    return pos + 8 + length


def _copy_value(raw: bytes, pos: int, kind: ValueType, out: bytearray) -> int:
    if kind is ValueType.STRING:
        return _copy_string(raw, pos, out)
    if kind is not ValueType.ARRAY:
        return _copy_numbers(raw, pos, kind, 1, out)
    item_type = ValueType(struct.unpack_from(">I", raw, pos)[0])
    count: int = struct.unpack_from(">Q", raw, pos + 4)[0]
    out += struct.pack("<IQ", item_type, count)
    pos += 12
    if item_type not in (ValueType.STRING, ValueType.ARRAY):
        return _copy_numbers(raw, pos, item_type, count, out)
    for _ in range(count):
        pos = _copy_value(raw, pos, item_type, out)
    return pos


def _copy_numbers(raw: bytes, pos: int, kind: ValueType, count: int, out: bytearray) -> int:
    import numpy as np

    _, size = SCALAR_FORMATS[kind]
    end = pos + size * count
    # swapped as unsigned integers of the same size: a float's NaN payload keeps every bit
    big = np.frombuffer(raw[pos:end], dtype=np.dtype(f">u{size}"))
    out += big.astype(f"<u{size}").tobytes()
    return end


# --- --set-meta KEY=TYPE:VALUE ----------------------------------------------------------------


class _Invalid(Exception):
    """What is wrong with a ``--set-meta`` text (becomes a ``SelectionError``)."""


def _usage(text: str, problem: str) -> SelectionError:
    return SelectionError(
        f"cannot set key/value {text!r}: {problem}",
        hint="write KEY=TYPE:VALUE with TYPE one of " + ", ".join(TYPE_NAMES)
        + ', or arr[TYPE] with a JSON array (general.tags=arr[str]:["a","b"])',
    )  # fmt: skip


def parse_set_meta(text: str) -> tuple[str, TypedValue]:
    """``KEY=TYPE:VALUE`` as the key and its typed value.

    Raises:
        SelectionError: no ``=`` or ``:``, an empty key, an unknown type, or a value the type
            cannot hold (out of range, not a number, not a JSON array of the item type).
    """
    key, eq, rest = text.partition("=")
    type_name, colon, raw = rest.partition(":")
    if not eq or not colon or not key:
        raise _usage(text, "expected KEY=TYPE:VALUE")
    try:
        utf8(key, "the key")
        kind, item_type = _parse_type(type_name.strip(), 0)
        if kind is not ValueType.ARRAY:
            return key, TypedValue(kind, _scalar(raw, kind))
        try:
            items = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting past Python's
            raise _Invalid(f"not a JSON array ({exc})") from None
        assert item_type is not None
        return key, _array(items, type_name.strip(), 0, "the value")
    except (_Invalid, UnsupportedError) as exc:
        raise _usage(text, str(exc)) from None


def _parse_type(name: str, depth: int) -> tuple[ValueType, ValueType | None]:
    """A type name: the type and, for ``arr[...]``, the item type."""
    if name in TYPE_NAMES:
        return TYPE_NAMES[name], None
    if name.startswith("arr[") and name.endswith("]") and depth < MAX_SET_META_DEPTH:
        inner, _ = _parse_type(name[4:-1].strip(), depth + 1)
        return ValueType.ARRAY, inner
    raise _Invalid(f"unknown type {name!r}")


def _array(items: object, type_name: str, depth: int, where: str) -> TypedValue:
    """A JSON array as an ARRAY of ``type_name`` (``arr[...]``)."""
    if not isinstance(items, list):
        raise _Invalid(f"{where}: {type_name} needs a JSON array, not {json.dumps(items)}")
    inner = type_name[4:-1].strip()
    item_type = _parse_type(inner, depth + 1)[0]
    out = [
        _array(item, inner, depth + 1, f"item {i}")
        if item_type is ValueType.ARRAY
        else _json_item(item, item_type, f"item {i}")
        for i, item in enumerate(items)
    ]
    return TypedValue(ValueType.ARRAY, tuple(out), item_type)


def _json_item(item: object, kind: ValueType, where: str) -> object:
    """One JSON array item as a value of ``kind``."""
    if kind is ValueType.STRING:
        if not isinstance(item, str):
            raise _Invalid(f"{where}: {json.dumps(item)} is not a string")
        utf8(item, f"{where}:")
        return item
    if kind is ValueType.BOOL:
        if not isinstance(item, bool):
            raise _Invalid(f"{where}: {json.dumps(item)} is not true or false")
        return item
    if isinstance(item, bool) or not isinstance(item, int | float):
        raise _Invalid(f"{where}: {json.dumps(item)} is not a number")
    if kind in INT_RANGES and not isinstance(item, int):
        raise _Invalid(f"{where}: {json.dumps(item)} is not an integer")
    return _checked(item, kind, where)


def _scalar(text: str, kind: ValueType) -> object:
    """A command-line value as a value of ``kind``."""
    if kind is ValueType.STRING:
        utf8(text, "the value")
        return text
    word = text.strip()
    if kind is ValueType.BOOL:
        if word.lower() not in ("true", "false"):
            raise _Invalid(f"{word!r} is not true or false")
        return word.lower() == "true"
    try:
        if kind not in INT_RANGES:
            return _checked(float(word), kind, "the value")
        prefixed = word.lstrip("+-")[:2].lower() in ("0x", "0o", "0b")
        return _checked(int(word, 0) if prefixed else int(word), kind, "the value")
    except ValueError:
        kind_name = "an integer" if kind in INT_RANGES else "a number"
        raise _Invalid(f"{word!r} is not {kind_name}") from None


def _checked(number: int | float, kind: ValueType, where: str) -> object:
    if kind in INT_RANGES:
        low, high = INT_RANGES[kind]
        if not low <= int(number) <= high:
            raise _Invalid(f"{where}: {number} is outside {kind.name}'s range {low}..{high}")
        return int(number)
    value = float(number)
    if kind is ValueType.FLOAT32:
        try:
            struct.pack("<f", value)
        except OverflowError:
            raise _Invalid(f"{where}: {number} is outside FLOAT32's range") from None
    return value

"""A bounded reader of the protobuf wire format over a :class:`ByteSource`.

Protobuf encoding (https://protobuf.dev/programming-guides/encoding/): a message is a sequence
of fields, each a varint key ``(number << 3) | wire_type`` followed by its value:

    wire 0  VARINT  a base-128 varint, at most 10 bytes (the 10th holds bit 63 only)
    wire 1  I64     8 bytes little-endian (double, fixed64)
    wire 2  LEN     a varint length, then that many bytes (strings, bytes, messages, packed
                    repeated scalars)
    wire 5  I32     4 bytes little-endian (float, fixed32)

Wire types 3 and 4 (groups) are deprecated; ONNX has none, so they are refused. This reader
never holds a message in memory: it walks field keys through a small window of the file and
hands out each value's byte range, so a caller descends only into the messages it needs and
skips the rest (a 2 GB ``raw_data`` payload costs one key and one length).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from ckptctl.errors import CorruptCheckpointError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ckptctl.sources import ByteSource

VARINT, I64, LEN, I32 = 0, 1, 2, 5
#: The longest varint protobuf writes (a negative int64 sign-extended to 64 bits).
MAX_VARINT_BYTES = 10
#: Bytes read at a time while walking field keys (one request per window for a remote file).
WINDOW_BYTES = 64 * 1024
#: Largest field number protobuf allows (2**29 - 1).
MAX_FIELD_NUMBER = (1 << 29) - 1
_FIXED = {I64: 8, I32: 4}
_U64 = (1 << 64) - 1
_HINT = "the file is not a valid protobuf (truncated or damaged?); re-export or re-download it"


@dataclass(frozen=True)
class Field:
    """One field of a message.

    Attributes:
        number: the field number.
        wire: the wire type.
        key_start: where the field's key begins (its first byte in the file).
        start: where its value begins (after the key and, for LEN, the length).
        end: where its value ends (exclusive).
        value: the varint's value for wire type 0 (unsigned 64-bit), else 0.
    """

    number: int
    wire: int
    key_start: int
    start: int
    end: int
    value: int = 0


def corrupt(message: str, path: str | None = None) -> NoReturn:
    """Raise the error every malformed protobuf gives (``path``: when raised on load)."""
    raise CorruptCheckpointError(message, path=path, hint=_HINT)


def signed64(value: int) -> int:
    """An unsigned 64-bit varint value as the int64 it encodes (two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


class WireReader:
    """Walks the fields of messages in ``source``, reading through a window of the file."""

    def __init__(self, source: ByteSource) -> None:
        self.source = source
        self._base = 0
        self._buf = b""

    def _window(self, pos: int, end: int) -> None:
        """Make the window start at ``pos`` and hold up to ``WINDOW_BYTES`` before ``end``."""
        self._base = pos
        self._buf = self.source.read(pos, min(WINDOW_BYTES, end - pos))

    def varint(self, pos: int, end: int) -> tuple[int, int]:
        """The varint at ``pos`` (which must end before ``end``) and the position after it.

        Bits past the 64th are dropped, as protobuf's own parsers do.

        Raises:
            CorruptCheckpointError: it runs past ``end`` or is longer than 10 bytes.
        """
        need = min(end - pos, MAX_VARINT_BYTES)
        offset = pos - self._base
        if offset < 0 or offset + need > len(self._buf):
            self._window(pos, end)
            offset = 0
        buf = self._buf
        value = shift = 0
        for i in range(offset, offset + need):
            byte = buf[i]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value & _U64, pos + i - offset + 1
            shift += 7
        if need == MAX_VARINT_BYTES:
            corrupt(f"a varint at byte {pos} is longer than {MAX_VARINT_BYTES} bytes")
        corrupt(f"a varint at byte {pos} runs past the end of its message (byte {end})")

    def field(self, pos: int, end: int) -> Field:
        """The field whose key starts at ``pos`` inside a message ending at ``end``."""
        key, at = self.varint(pos, end)
        number, wire = key >> 3, key & 7
        if number == 0 or number > MAX_FIELD_NUMBER:
            corrupt(f"field number {number} at byte {pos} is not a valid protobuf field number")
        if wire == VARINT:
            value, after = self.varint(at, end)
            return Field(number, wire, pos, at, after, value)
        if wire == LEN:
            length, at = self.varint(at, end)
            if length > end - at:
                corrupt(
                    f"field {number} at byte {pos} declares {length} bytes, but its message "
                    f"ends {end - at} bytes later (byte {end})"
                )
            return Field(number, wire, pos, at, at + length)
        size = _FIXED.get(wire)
        if size is None:
            corrupt(f"field {number} at byte {pos} has wire type {wire}, which ONNX never uses")
        if size > end - at:
            corrupt(f"field {number} at byte {pos} runs past the end of its message (byte {end})")
        return Field(number, wire, pos, at, at + size)

    def fields(self, start: int, end: int) -> Iterator[Field]:
        """Every field of the message occupying ``[start, end)``, in file order."""
        pos = start
        while pos < end:
            found = self.field(pos, end)
            yield found
            pos = found.end

    def bytes(self, found: Field, limit: int) -> bytes:
        """A LEN (or fixed) field's bytes, refused past ``limit`` bytes.

        Raises:
            CorruptCheckpointError: the value is longer than ``limit``.
        """
        length = found.end - found.start
        if length > limit:
            corrupt(
                f"field {found.number} at byte {found.key_start} holds {length} bytes, more "
                f"than the {limit} this reader accepts there"
            )
        offset = found.start - self._base
        if offset >= 0 and found.end - self._base <= len(self._buf):
            return self._buf[offset : offset + length]
        return self.source.read(found.start, length)

    def text(self, found: Field, limit: int, what: str) -> str:
        """A string field as text (invalid UTF-8 is refused)."""
        if found.wire != LEN:
            corrupt(f"{what} at byte {found.key_start} is not a string (wire type {found.wire})")
        try:
            return self.bytes(found, limit).decode("utf-8")
        except UnicodeDecodeError as exc:
            corrupt(f"{what} at byte {found.key_start} is not valid UTF-8 (byte {exc.start})")

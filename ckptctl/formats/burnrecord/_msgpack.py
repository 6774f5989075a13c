"""A bounded MessagePack scanner for ``rmp_serde`` named records (the ``.mpk`` recorders).

Only what serde produces is accepted: nil, booleans, integers, floats, strings, byte strings,
arrays and maps with string keys. Byte strings (tensor payloads) are recorded as :class:`Blob`
ranges and skipped; ext types, the unused byte ``0xc1``, non-string map keys, duplicate keys,
nesting past ``MAX_DEPTH`` and more than ``MAX_NODES`` values are refused as corrupt.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ckptctl.errors import CorruptCheckpointError
from ckptctl.formats.burnrecord._stream import FileCursor
from ckptctl.formats.burnrecord._tree import (
    MAX_NODES,
    MAX_STRING_BYTES,
    Blob,
    Node,
    Scan,
)

if TYPE_CHECKING:
    from ckptctl.formats.burnrecord._stream import Cursor

_FIXED = {0xC0: None, 0xC2: False, 0xC3: True}
_UINT = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q"}
_INT = {0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
_LEN = {1: ">B", 2: ">H", 4: ">I"}
_BIN = {0xC4: 1, 0xC5: 2, 0xC6: 4}
_STR = {0xD9: 1, 0xDA: 2, 0xDB: 4}
_ARRAY = {0xDC: 2, 0xDD: 4}
_MAP = {0xDE: 2, 0xDF: 4}
_EXT = frozenset({0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8})


class _Scanner:
    def __init__(self, cursor: Cursor, scan: Scan) -> None:
        self.c = cursor
        self.scan = scan

    def _unpack(self, fmt: str, size: int) -> int:
        value: int = struct.unpack(fmt, self.c.take(size))[0]
        return value

    def _count(self, n: int, what: str, at: int) -> int:
        budget = MAX_NODES - self.scan.nodes
        if n > budget:
            raise CorruptCheckpointError(
                f"the {what} at byte {at} declares {n} entries, more than the {MAX_NODES} "
                "values a Burn record may hold"
            )
        if isinstance(self.c, FileCursor) and n > self.c.remaining():
            raise CorruptCheckpointError(
                f"the {what} at byte {at} declares {n} entries, but only "
                f"{self.c.remaining()} bytes follow"
            )
        return n

    def _string(self, n: int, at: int) -> str:
        if n > MAX_STRING_BYTES:
            raise CorruptCheckpointError(
                f"the string at byte {at} is {n} bytes long, more than the limit of "
                f"{MAX_STRING_BYTES}"
            )
        raw = self.c.take(n)
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptCheckpointError(f"the string at byte {at} is not UTF-8") from None

    def value(self, depth: int) -> Node:
        self.scan.enter(depth, self.c.pos)
        at = self.c.pos
        b = self.c.take(1)[0]
        if b <= 0x7F:
            return b
        if b >= 0xE0:
            return b - 0x100
        if b <= 0x8F:
            return self._map(b & 0x0F, depth, at)
        if b <= 0x9F:
            return self._array(b & 0x0F, depth, at)
        if b <= 0xBF:
            return self._string(b & 0x1F, at)
        if b in _FIXED:
            return _FIXED[b]
        if b in _UINT:
            fmt = _UINT[b]
            return self._unpack(fmt, struct.calcsize(fmt))
        if b in _INT:
            fmt = _INT[b]
            return self._unpack(fmt, struct.calcsize(fmt))
        if b == 0xCA:
            single: float = struct.unpack(">f", self.c.take(4))[0]
            return single
        if b == 0xCB:
            double: float = struct.unpack(">d", self.c.take(8))[0]
            return double
        if b in _BIN:
            n = self._unpack(_LEN[_BIN[b]], _BIN[b])
            blob = Blob(self.c.pos, n)
            self.c.skip(n)
            self.scan.payloads.append(blob)
            return blob
        if b in _STR:
            return self._string(self._unpack(_LEN[_STR[b]], _STR[b]), at)
        if b in _ARRAY:
            return self._array(self._unpack(_LEN[_ARRAY[b]], _ARRAY[b]), depth, at)
        if b in _MAP:
            return self._map(self._unpack(_LEN[_MAP[b]], _MAP[b]), depth, at)
        if b in _EXT:
            raise CorruptCheckpointError(
                f"byte {at}: MessagePack extension type 0x{b:02x} is not part of a Burn record"
            )
        raise CorruptCheckpointError(f"byte {at}: 0x{b:02x} is not a MessagePack type")

    def _array(self, n: int, depth: int, at: int) -> list[Node]:
        return [self.value(depth + 1) for _ in range(self._count(n, "array", at))]

    def _map(self, n: int, depth: int, at: int) -> dict[str, Node]:
        out: dict[str, Node] = {}
        for _ in range(self._count(n, "map", at)):
            key_at = self.c.pos
            key = self.value(depth + 1)
            if not isinstance(key, str):
                raise CorruptCheckpointError(
                    f"byte {key_at}: a map key is {type(key).__name__}, not a string"
                )
            if key in out:
                raise CorruptCheckpointError(
                    f"byte {key_at}: key {key!r} appears twice in the map at byte {at}"
                )
            value_at = self.c.pos
            out[key] = self.value(depth + 1)
            if depth == 0 and key == "metadata":
                self.scan.metadata_span = (value_at, self.c.pos)
        return out


def scan_msgpack(cursor: Cursor) -> Scan:
    """Decode one MessagePack value from ``cursor``, recording payload ranges.

    Raises:
        CorruptCheckpointError: malformed, truncated or over a limit.
    """
    scan = Scan()
    scan.root = _Scanner(cursor, scan).value(0)
    scan.end = cursor.pos
    return scan

"""A bounded JSON scanner for ``serde_json`` records (the ``.json`` / ``.json.gz`` recorders).

serde_json writes a tensor's bytes as an array of numbers, one per byte (pretty-printed: one per
line). Such arrays are not decoded while scanning: the scanner finds the closing bracket in
chunks, counts the commas and checks the characters, and keeps a :class:`Numbers` range. Short
arrays (shapes, constants) are decoded. Loading a tensor parses its range with numpy, in chunks.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from ckptctl.errors import CorruptCheckpointError
from ckptctl.formats.burnrecord._tree import (
    MAX_STRING_BYTES,
    Node,
    Numbers,
    Scan,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    import numpy as np
    from numpy.typing import NDArray

    from ckptctl.formats.burnrecord._stream import Cursor

_WS = b" \t\r\n"
#: Text of a number array read per step while scanning or parsing.
TEXT_CHUNK_BYTES = 4 * 1024 * 1024
#: Number arrays up to this much text are decoded while scanning (shapes, small constants).
SMALL_ARRAY_BYTES = 4096
_STRING = re.compile(rb'"(?:[^"\\\x00-\x1f]|\\.)*"')
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NOT_INTEGER_TEXT = re.compile(rb"[^0-9,\s]")
_NOT_NUMBER_TEXT = re.compile(rb"[^-+.eE0-9,\s]")
_BAD_BYTE_TEXT = re.compile(rb"[0-9]{4}|[^0-9,\s]|,\s*,|^\s*,|,\s*$")


class _Scanner:
    def __init__(self, cursor: Cursor, scan: Scan) -> None:
        self.c = cursor
        self.scan = scan

    def _ws(self) -> None:
        while True:
            window = bytes(self.c.peek(256))
            n = len(window) - len(window.lstrip(_WS))
            self.c.skip(n)
            if n < len(window) or not window:
                return

    def _expect(self, char: bytes) -> None:
        at = self.c.pos
        got = bytes(self.c.peek(1))
        if got != char:
            shown = repr(got.decode("latin-1")) if got else "the end of the file"
            raise CorruptCheckpointError(
                f"byte {at}: expected {char.decode()!r} in JSON but found {shown}"
            )
        self.c.skip(1)

    def value(self, depth: int, key: str | None = None) -> Node:
        self.scan.enter(depth, self.c.pos)
        self._ws()
        at = self.c.pos
        head = bytes(self.c.peek(1))
        if head == b"{":
            return self._object(depth, at)
        if head == b"[":
            return self._array(depth, at, key)
        if head == b'"':
            return self._string(at)
        for literal, value in ((b"true", True), (b"false", False), (b"null", None)):
            if head == literal[:1]:
                if bytes(self.c.peek(len(literal))) != literal:
                    break
                self.c.skip(len(literal))
                return value
        window = bytes(self.c.peek(400))
        match = _NUMBER.match(window)
        if match is None or not match.group():
            shown = repr(head.decode("latin-1")) if head else "the end of the file"
            raise CorruptCheckpointError(f"byte {at}: expected a JSON value but found {shown}")
        self.c.skip(match.end())
        number: int | float = json.loads(match.group())
        return number

    def _string(self, at: int) -> str:
        size, match = 256, None
        while True:
            window = bytes(self.c.peek(size))
            match = _STRING.match(window)
            if match is not None or len(window) < size or size > MAX_STRING_BYTES:
                break
            size *= 4
        if match is None:
            raise CorruptCheckpointError(
                f"byte {at}: a JSON string is unterminated, malformed or longer than "
                f"{MAX_STRING_BYTES} bytes"
            )
        self.c.skip(match.end())
        try:
            text: str = json.loads(match.group())
        except ValueError as exc:
            raise CorruptCheckpointError(f"byte {at}: bad JSON string: {exc}") from None
        return text

    def _object(self, depth: int, at: int) -> dict[str, Node]:
        self.c.skip(1)
        out: dict[str, Node] = {}
        self._ws()
        if bytes(self.c.peek(1)) == b"}":
            self.c.skip(1)
            return out
        while True:
            self._ws()
            key_at = self.c.pos
            if bytes(self.c.peek(1)) != b'"':
                raise CorruptCheckpointError(f"byte {key_at}: expected a JSON object key")
            key = self._string(key_at)
            if key in out:
                raise CorruptCheckpointError(
                    f"byte {key_at}: key {key!r} appears twice in the object at byte {at}"
                )
            self._ws()
            self._expect(b":")
            self._ws()
            value_at = self.c.pos
            out[key] = self.value(depth + 1, key)
            if depth == 0 and key == "metadata":
                self.scan.metadata_span = (value_at, self.c.pos)
            self._ws()
            if bytes(self.c.peek(1)) == b",":
                self.c.skip(1)
                continue
            self._expect(b"}")
            return out

    def _array(self, depth: int, at: int, key: str | None) -> list[Node] | Numbers:
        self.c.skip(1)
        self._ws()
        first = bytes(self.c.peek(1))
        if first and (first.isdigit() or first == b"-"):
            return self._numbers(at, lazy=key == "bytes")
        out: list[Node] = []
        if first == b"]":
            self.c.skip(1)
            return out
        while True:
            out.append(self.value(depth + 1))
            self._ws()
            if bytes(self.c.peek(1)) == b",":
                self.c.skip(1)
                continue
            self._expect(b"]")
            return out

    def _numbers(self, at: int, *, lazy: bool) -> list[Node] | Numbers:
        """An array of numbers: find ``]`` chunk by chunk, count and check, keep the range.

        A tensor's ``bytes`` (``lazy``) always stays a range; other short arrays are decoded.
        """
        commas = 0
        integers = True
        small = bytearray()
        while True:
            chunk = bytes(self.c.peek(TEXT_CHUNK_BYTES))
            if not chunk:
                raise CorruptCheckpointError(f"byte {at}: a JSON array is never closed")
            close = chunk.find(b"]")
            part = chunk if close < 0 else chunk[:close]
            if integers and _NOT_INTEGER_TEXT.search(part):
                integers = False
            bad = _NOT_NUMBER_TEXT.search(part)
            if bad is not None:
                raise CorruptCheckpointError(
                    f"byte {self.c.pos + bad.start()}: an array of numbers holds "
                    f"{bad.group().decode('latin-1')!r}"
                )
            commas += part.count(b",")
            if len(small) <= SMALL_ARRAY_BYTES:
                small += part
            self.c.skip(len(part))
            if close >= 0:
                self.c.skip(1)
                break
        self.scan.nodes += commas
        if len(small) <= SMALL_ARRAY_BYTES and not lazy:
            try:
                values: list[Node] = json.loads(b"[" + bytes(small) + b"]")
            except ValueError as exc:
                raise CorruptCheckpointError(f"byte {at}: bad JSON array: {exc}") from None
            return values
        numbers = Numbers(at, self.c.pos, commas + 1, integers)
        self.scan.payloads.append(numbers)
        return numbers


def scan_json(cursor: Cursor) -> Scan:
    """Decode one JSON value from ``cursor``, leaving long number arrays as ranges.

    Raises:
        CorruptCheckpointError: malformed, truncated or over a limit.
    """
    scan = Scan()
    scanner = _Scanner(cursor, scan)
    scan.root = scanner.value(0)
    scan.end = cursor.pos
    scanner._ws()
    return scan


def parse_byte_text(chunks: Iterable[bytes], count: int, what: str) -> NDArray[np.uint8]:
    """Parse the text inside a JSON byte array (``0, 12, 255``) into ``count`` bytes.

    ``chunks`` are consecutive pieces of the text between the brackets; they are parsed in
    pieces cut at commas, so memory stays at about two chunks plus the result.

    Raises:
        CorruptCheckpointError: a value is not an integer 0-255, or there are not ``count``.
    """
    import numpy as np

    out = np.empty(count, dtype=np.uint8)
    filled = 0
    carry = b""

    def parse(part: bytes) -> None:
        nonlocal filled
        if _BAD_BYTE_TEXT.search(part):
            raise CorruptCheckpointError(f"{what}: its byte array holds a value that is not 0-255")
        try:
            values = np.fromstring(part, dtype=np.int16, sep=",")
        except ValueError:
            raise CorruptCheckpointError(f"{what}: its byte array is malformed") from None
        if filled + values.size > count or (values.size and int(values.max()) > 255):
            raise CorruptCheckpointError(
                f"{what}: its byte array has more than {count} values or one above 255"
            )
        out[filled : filled + values.size] = values
        filled += values.size

    for chunk in chunks:
        text = carry + chunk
        cut = text.rfind(b",")
        if cut < 0:
            carry = text
            continue
        parse(text[:cut])
        carry = text[cut + 1 :]
    if carry.strip(_WS):
        parse(carry)
    elif count and (carry or filled):
        raise CorruptCheckpointError(f"{what}: its byte array ends with an empty value")
    if filled != count:
        raise CorruptCheckpointError(
            f"{what}: its byte array has {filled} values, expected {count}"
        )
    return out

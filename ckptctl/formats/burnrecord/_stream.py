"""Byte cursors over a record: the file itself, or its gzip stream decompressed on the fly.

The scanners read a record front to back through a cursor and never hold more than a bounded
window of it. For an uncompressed file every read is a zero-copy view of exactly the bytes a token
needs, so listing reads no tensor payload. For a gzip file the cursor decompresses in chunks of at
most ``INFLATE_CHUNK_BYTES`` and forgets what lies behind it; payloads are skipped by inflating and
discarding, and loaded one tensor at a time into a buffer of exactly their size.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from ckptctl.errors import CorruptCheckpointError

if TYPE_CHECKING:
    from ckptctl.sources import ByteSource

#: Compressed bytes read from the file per step.
READ_CHUNK_BYTES = 256 * 1024
#: Decompressed bytes produced per step (the cursor's working set is a few of these).
INFLATE_CHUNK_BYTES = 1024 * 1024
#: gzip stream with header and CRC trailer (zlib's ``wbits`` for gzip).
GZIP_WBITS = 16 + zlib.MAX_WBITS
#: A gzip record may inflate to ``max(MIN_INFLATE_BUDGET_BYTES, INFLATE_BUDGET_PER_FILE_BYTE x
#: the file's size)`` bytes, as a pickle's budget (``pytorch/_scan.py``): weights compress to 90%
#: of their size or more (the fixtures' records to 35-70%, headers included), while deflate can
#: reach 1032:1, so an 8 MiB file of zeros inflated to 8 GiB (20 s of work, issue 44).
MIN_INFLATE_BUDGET_BYTES = 64 << 20
INFLATE_BUDGET_PER_FILE_BYTE = 64


def inflate_budget(file_bytes: int) -> int:
    """The most a gzip record of ``file_bytes`` bytes may inflate to."""
    return max(MIN_INFLATE_BUDGET_BYTES, INFLATE_BUDGET_PER_FILE_BYTE * file_bytes)


class FileCursor:
    """A cursor over an uncompressed file; reads are views of exactly the bytes asked for."""

    compressed = False

    def __init__(self, source: ByteSource) -> None:
        self.source = source
        self.pos = 0

    def _short(self, n: int) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            f"the record is truncated: a value at byte {self.pos} needs {n} bytes but the file "
            f"has {self.source.size}"
        )

    def take(self, n: int) -> bytes | memoryview:
        """The next ``n`` bytes, consumed."""
        if self.pos + n > self.source.size:
            raise self._short(n)
        view = self.source.view(self.pos, n)
        self.pos += n
        return view

    def skip(self, n: int) -> None:
        """Consume ``n`` bytes without reading them."""
        if self.pos + n > self.source.size:
            raise self._short(n)
        self.pos += n

    def peek(self, n: int) -> bytes | memoryview:
        """Up to ``n`` bytes from the current position, not consumed (shorter only at the end)."""
        return self.source.view(self.pos, max(0, min(n, self.source.size - self.pos)))

    def remaining(self) -> int:
        """Bytes after the current position."""
        return self.source.size - self.pos


class GzipCursor:
    """A forward-only cursor over the decompressed content of a gzip file.

    Raises ``CorruptCheckpointError`` for truncated or corrupt compressed data (the CRC and length
    in the gzip trailer are checked by zlib when the stream ends).
    """

    compressed = True

    def __init__(self, source: ByteSource) -> None:
        self.source = source
        self.pos = 0
        self._inflate = zlib.decompressobj(GZIP_WBITS)
        self._in_pos = 0
        self._buf = bytearray()
        self._buf_start = 0  # decompressed offset of _buf[0]
        self.budget = inflate_budget(source.size)

    @property
    def compressed_consumed(self) -> int:
        """Compressed bytes handed to zlib so far, minus what it did not need."""
        return self._in_pos - len(self._inflate.unused_data) - len(self._inflate.unconsumed_tail)

    @property
    def ended(self) -> bool:
        """True once the gzip member's end (and trailer) has been read."""
        return self._inflate.eof

    @property
    def trailing_compressed(self) -> int:
        """Bytes of the file after the first gzip member (another member, or junk)."""
        if not self._inflate.eof:
            return 0
        return self.source.size - self.compressed_consumed

    def _more(self, want: int) -> bool:
        """Append up to about ``want`` decompressed bytes to the buffer; False at the end."""
        while True:
            if self._inflate.eof:
                return False
            data: bytes = self._inflate.unconsumed_tail
            if not data:
                if self._in_pos >= self.source.size:
                    raise CorruptCheckpointError(
                        "the gzip stream is truncated: the file ends before the stream does"
                    )
                n = min(READ_CHUNK_BYTES, self.source.size - self._in_pos)
                data = self.source.read(self._in_pos, n)
                self._in_pos += n
            try:
                out = self._inflate.decompress(data, max(min(want, INFLATE_CHUNK_BYTES), 65536))
            except zlib.error as exc:
                raise CorruptCheckpointError(f"the gzip data is corrupt: {exc}") from None
            if out:
                self._compact()
                self._buf += out
                if self._buf_start + len(self._buf) > self.budget:
                    raise self._over_budget()
                return True

    def _over_budget(self) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            f"the gzip stream inflates to more than {self.budget} bytes, the most a "
            f"{self.source.size}-byte record may (max({MIN_INFLATE_BUDGET_BYTES}, "
            f"{INFLATE_BUDGET_PER_FILE_BYTE} x the file's size))",
            hint="real records compress far less: the file is crafted (a decompression bomb?); "
            "if you trust it, gunzip it and read the uncompressed record",
        )

    def _compact(self) -> None:
        drop = self.pos - self._buf_start
        if drop > INFLATE_CHUNK_BYTES or drop == len(self._buf):
            del self._buf[:drop]
            self._buf_start += drop

    def _avail(self) -> int:
        return self._buf_start + len(self._buf) - self.pos

    def _short(self, n: int) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            f"the record is truncated: a value at decompressed byte {self.pos} needs {n} bytes "
            f"but the stream has {self._buf_start + len(self._buf)}"
        )

    def take(self, n: int) -> bytes | memoryview:
        """The next ``n`` bytes (``n`` small: a token), consumed."""
        while self._avail() < n:
            if not self._more(n - self._avail()):
                raise self._short(n)
        off = self.pos - self._buf_start
        self.pos += n
        return bytes(self._buf[off : off + n])

    def peek(self, n: int) -> bytes | memoryview:
        """Up to ``n`` bytes, not consumed (shorter only at the end of the stream)."""
        while self._avail() < n and self._more(n - self._avail()):
            pass
        off = self.pos - self._buf_start
        return bytes(self._buf[off : off + n])

    def skip(self, n: int) -> None:
        """Consume ``n`` bytes by inflating and discarding them."""
        target = self.pos + n
        while self._buf_start + len(self._buf) < target:
            self.pos = self._buf_start + len(self._buf)
            self._buf.clear()
            self._buf_start = self.pos
            if not self._more(target - self.pos):
                raise CorruptCheckpointError(
                    f"the record is truncated: a value needs the stream to reach decompressed "
                    f"byte {target}, but it ends at {self.pos}"
                )
        self.pos = target

    def read_into(self, out: memoryview) -> None:
        """Fill ``out`` with the next ``len(out)`` bytes (no intermediate tensor-sized copy)."""
        n, filled = len(out), 0
        while filled < n:
            avail = self._avail()
            if avail == 0:
                self._buf.clear()
                self._buf_start = self.pos
                if not self._more(n - filled):
                    raise self._short(n - filled)
                continue
            k = min(avail, n - filled)
            off = self.pos - self._buf_start
            out[filled : filled + k] = self._buf[off : off + k]
            filled += k
            self.pos += k

    def snapshot(self) -> GzipCursor:
        """An independent cursor at the same position (zlib's state is copied, not redone)."""
        twin = GzipCursor(self.source)
        twin._inflate = self._inflate.copy()
        twin._in_pos = self._in_pos
        twin._buf = self._buf[self.pos - self._buf_start :]
        twin._buf_start = twin.pos = self.pos
        return twin

    def remaining(self) -> int:
        """Decompressed bytes after the current position (inflates and discards them)."""
        count = self._avail()
        self.pos += count
        while True:
            self._buf.clear()
            self._buf_start = self.pos
            if not self._more(INFLATE_CHUNK_BYTES):
                return count
            count += len(self._buf)
            self.pos += len(self._buf)


Cursor = FileCursor | GzipCursor


def is_gzip(head: bytes) -> bool:
    """True for the gzip magic with the deflate method."""
    return head[:3] == b"\x1f\x8b\x08"


def inflate_head(head: bytes, limit: int = 512) -> bytes:
    """Up to ``limit`` decompressed bytes from the start of a gzip stream (for sniffing).

    Never raises: corrupt or too-short input gives what could be decompressed (maybe nothing).
    """
    try:
        return zlib.decompressobj(GZIP_WBITS).decompress(head, limit)
    except zlib.error:
        return b""


def gzip_header_length(head: bytes) -> int | None:
    """Length of the gzip member header (RFC 1952 §2.3), or None when ``head`` cannot tell."""
    if len(head) < 10 or not is_gzip(head):
        return None
    flags, pos = head[3], 10
    if flags & 0x04:  # FEXTRA
        if len(head) < pos + 2:
            return None
        pos += 2 + int.from_bytes(head[pos : pos + 2], "little")
    for bit in (0x08, 0x10):  # FNAME, FCOMMENT: zero-terminated
        if flags & bit:
            end = head.find(b"\0", pos)
            if end < 0:
                return None
            pos = end + 1
    if flags & 0x02:  # FHCRC
        pos += 2
    return pos if pos <= len(head) else None

"""A zip central-directory parser for checkpoint archives: one pass, no per-record objects.

``zipfile.ZipFile`` builds a ``ZipInfo`` per record and is slow for archives of many small
records (20,000 storages take about 0.2 s); it also cannot say where each byte of the archive is.
This parser reads the end records and the central directory once, straight from the memory
map, and keeps what the reader and ``ckptctl header`` need. Layout (APPNOTE 6.3.10,
docs/formats/pytorch.md#zip-container):

    [local header 30 B + name + extra][data][data descriptor 16/24 B]  ... per record
    [central directory: 46 B + name + extra + comment per record]
    [zip64 end record 56 B + extension][zip64 locator 20 B]            (torch always writes them)
    [end of central directory 22 B + comment]

Offsets in the central directory are relative to the archive start; a file with bytes
prepended (``prefix``) has them shifted, as ``zipfile`` allows (``absolute=True`` reads them
as stated instead). torch's own view of an archive (``_torchzip.py``) parses its entries with
the same :func:`read_entries`; :func:`inflate` decompresses one record's bytes for both.
"""

from __future__ import annotations

import bz2
import lzma
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from ckptctl.errors import CorruptCheckpointError, UnsupportedError

if TYPE_CHECKING:
    from collections.abc import Callable

    from ckptctl.sources import ByteSource

#: Most records accepted in one archive (each storage is a record).
MAX_ZIP_RECORDS = 10_000_000
#: Longest record name accepted.
MAX_NAME_BYTES = 4096

_EOCD = struct.Struct("<4s4H2LH")
_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_LOCAL = struct.Struct("<4s2B4HL2L2H")
_U32_MAX = 0xFFFFFFFF


class ZipRecord(NamedTuple):
    """One record, from its central-directory entry (offsets absolute in the file).

    A named tuple, not a frozen dataclass: archives hold tens of thousands of records and
    a frozen dataclass ``__init__`` costs several times more per record.
    """

    name: str
    header_offset: int
    flags: int
    method: int
    crc32: int
    compress_size: int
    file_size: int


@dataclass(frozen=True)
class ZipDirectory:
    """The archive's records and where its trailing structures lie (absolute offsets).

    Attributes:
        records: records in central-directory order.
        prefix: bytes before the archive proper (0 for torch files).
        cd_start: start of the central directory.
        cd_end: end of the central directory.
        zip64_end: ``(start, end)`` of the zip64 end record, or None.
        zip64_locator: ``(start, end)`` of the zip64 locator, or None.
        eocd: ``(start, end)`` of the end-of-central-directory record, comment included.
        raw_names: each record's name as stored (bytes), in ``records`` order.
        attributes: each record's external attributes, in ``records`` order.
    """

    records: list[ZipRecord]
    prefix: int
    cd_start: int
    cd_end: int
    zip64_end: tuple[int, int] | None
    zip64_locator: tuple[int, int] | None
    eocd: tuple[int, int]
    raw_names: list[bytes] = field(default_factory=list, compare=False)
    attributes: list[int] = field(default_factory=list, compare=False)


def _corrupt(why: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"corrupt zip archive: {why}", hint="the file looks truncated or damaged"
    )


def _find_eocd(buf: memoryview, size: int) -> int:
    # The EOCD is the last 22 bytes unless a comment (at most 65535 bytes) follows it.
    if size >= _EOCD.size and bytes(buf[size - 22 : size - 18]) == b"PK\x05\x06":
        return size - 22
    start = max(0, size - 22 - 0xFFFF)
    tail = bytes(buf[start:size])
    pos = tail.rfind(b"PK\x05\x06")
    while pos >= 0:
        if pos + 22 <= len(tail):
            (comment,) = struct.unpack_from("<H", tail, pos + 20)
            if pos + 22 + comment <= len(tail):
                return start + pos
        pos = tail.rfind(b"PK\x05\x06", 0, pos)
    raise _corrupt("no end-of-central-directory record")


def read_directory(
    source: ByteSource, *, absolute: bool = False, same_as: ZipDirectory | None = None
) -> ZipDirectory:
    """Parse the end records and the central directory of the zip archive in ``source``.

    By default offsets are ``zipfile``'s: the directory ends where its end records begin, and
    a gap before it shifts every offset (bytes prepended to the archive). With ``absolute``,
    the directory is where the end record says and offsets are taken as they are (readers
    such as Info-ZIP's do this; ``verify`` compares what each would read).

    ``same_as``: a directory already parsed from this file (torch's view, ``_torchzip.py``);
    when its bytes are the same range, read with no shift, its records are taken as they are
    instead of parsing the same bytes again.

    Raises:
        CorruptCheckpointError: missing or inconsistent end records, a central directory past
            the end of the file, bad entry signatures, too many records.
    """
    size = source.size
    buf = source.buffer
    eocd = _find_eocd(buf, size)
    _, disk, cd_disk, _n_disk, count, cd_size, cd_offset, comment = _EOCD.unpack(
        bytes(buf[eocd : eocd + _EOCD.size])
    )
    if disk or cd_disk:
        raise _corrupt("multi-disk archives are not supported")
    eocd_range = (eocd, min(size, eocd + 22 + comment))
    zip64_end: tuple[int, int] | None = None
    locator: tuple[int, int] | None = None
    end_of_cd = eocd
    loc = eocd - _LOCATOR.size
    if loc >= 0 and bytes(buf[loc : loc + 4]) == b"PK\x06\x07":
        _, _, z64_offset, _ = _LOCATOR.unpack(bytes(buf[loc : loc + _LOCATOR.size]))
        locator = (loc, eocd)
        # The zip64 end record sits right before the locator; its own offset field may be
        # shifted by a prefix, so find it by position, as zipfile does.
        z64 = loc - _ZIP64_EOCD.size
        if z64 < 0 or bytes(buf[z64 : z64 + 4]) != b"PK\x06\x06":
            raise _corrupt("zip64 locator without a zip64 end record")
        sig, rec_size, *_v, d1, d2, _n, count64, size64, offset64 = _ZIP64_EOCD.unpack(
            bytes(buf[z64 : z64 + _ZIP64_EOCD.size])
        )
        if d1 or d2:
            raise _corrupt("multi-disk archives are not supported")
        # A zip64 end record may carry an extensible data sector: rec_size counts it.
        ext = rec_size - (_ZIP64_EOCD.size - 12)
        if ext != 0:
            raise _corrupt("zip64 end record with extensible data is not supported")
        zip64_end = (z64, loc)
        count, cd_size, cd_offset = count64, size64, offset64
        end_of_cd = z64
        del sig, z64_offset
    cd_start = cd_offset if absolute else end_of_cd - cd_size
    prefix = cd_start - cd_offset
    if absolute:
        end_of_cd = cd_start + cd_size
        if end_of_cd > size:
            raise _corrupt("central directory runs past the end of the file")
    if cd_start < 0 or prefix < 0:
        raise _corrupt("central directory offset is past its end records")
    if count > MAX_ZIP_RECORDS or count * _CENTRAL.size > cd_size:
        raise _corrupt(f"central directory claims {count} records in {cd_size} bytes")
    if (
        same_as is not None
        and (same_as.cd_start, same_as.cd_end, same_as.prefix) == (cd_start, end_of_cd, prefix)
        and len(same_as.records) == count
    ):
        records, raw_names, attributes = same_as.records, same_as.raw_names, same_as.attributes
    else:
        records, raw_names, attributes = read_entries(buf, cd_start, end_of_cd, count, prefix)
    return ZipDirectory(
        records, prefix, cd_start, end_of_cd, zip64_end, locator, eocd_range, raw_names, attributes
    )


def read_entries(
    buf: memoryview,
    pos: int,
    end: int,
    count: int,
    prefix: int,
    check: Callable[[tuple[int, ...]], None] | None = None,
) -> tuple[list[ZipRecord], list[bytes], list[int]]:
    """The records of the central directory at ``[pos, end)``, their raw names and attributes.

    ``check``, when given, sees each entry's fields (``_CENTRAL`` order) before it is taken:
    the rules torch's zip reader adds (``_torchzip.py``).
    """
    unpack = _CENTRAL.unpack_from
    records: list[ZipRecord] = []
    raw_names: list[bytes] = []
    attributes: list[int] = []
    append = records.append
    make = ZipRecord._make
    data = bytes(buf[pos:end])  # one copy of the directory: slicing bytes is cheaper than views
    pos = 0
    limit = len(data)
    for _ in range(count):
        if pos + 46 > limit:
            raise _corrupt("central directory is truncated")
        fields = unpack(data, pos)
        (sig, _cv, _cs, _ev, _r, flags, method, _t, _d, crc, csize, fsize, n, m, k, _vol, _ia,
         ea, offset) = fields  # fmt: skip
        if sig != b"PK\x01\x02":
            raise _corrupt(f"bad central directory entry signature at byte {pos}")
        if check is not None:
            check(fields)
        name_end = pos + 46 + n
        if name_end + m + k > limit or n > MAX_NAME_BYTES:
            raise _corrupt("central directory entry runs past the directory")
        raw = data[pos + 46 : name_end]
        name = raw.decode("utf-8" if flags & 0x800 else "cp437", "replace")
        if (csize == _U32_MAX or fsize == _U32_MAX or offset == _U32_MAX) and m:
            fsize, csize, offset = _zip64_extra(data[name_end : name_end + m], fsize, csize, offset)
        append(make((name, offset + prefix, flags, method, crc, csize, fsize)))
        raw_names.append(raw)
        attributes.append(ea)
        pos = name_end + m + k
    return records, raw_names, attributes


def _zip64_extra(extra: bytes, fsize: int, csize: int, offset: int) -> tuple[int, int, int]:
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        if tag == 1:
            body = extra[pos + 4 : pos + 4 + length]
            values = [v for (v,) in struct.iter_unpack("<Q", body[: len(body) // 8 * 8])]
            fields = [fsize, csize, offset]
            for index, value in enumerate(fields):
                if value == _U32_MAX:
                    if not values:
                        raise _corrupt("zip64 extra field is too short")
                    fields[index] = values.pop(0)
            return fields[0], fields[1], fields[2]
        pos += 4 + length
    return fsize, csize, offset


def local_header(source: ByteSource, record: ZipRecord) -> tuple[int, int]:
    """``(name length, extra length)`` of ``record``'s local header (spec 2.4 step 2).

    Read with ``source.read`` (``pread``), not through the memory map: a fault on a mapped
    page-cache folio can map all of it (up to 2 MiB), and reading the 64 local headers of a
    1 GiB ``.pt`` through the map once took opening it from 15 to 146 MiB resident
    (benchmarks/RESULTS.md, round two, continued).

    Raises:
        CorruptCheckpointError: no local header signature at the record's offset.
    """
    offset = record.header_offset
    if offset < 0 or offset + 30 > source.size:
        raise CorruptCheckpointError(f"zip record {record.name!r} has no local header")
    sig, *_rest, n, m = _LOCAL.unpack(source.read(offset, _LOCAL.size))
    if sig != b"PK\x03\x04":
        raise CorruptCheckpointError(f"zip record {record.name!r} has no local header")
    return n, m


#: Compressed bytes fed to a decompressor at a time. Deflate64's decompressor cannot cap its
#: output, so its input is fed in small pieces: one call then yields at most about 1 MiB.
_INFLATE_INPUT_BYTES = 64 << 10
_DEFLATE64_INPUT_BYTES = 1 << 10


def inflate(method: int, raw: memoryview, cap: int) -> bytearray:
    """Decompress ``raw`` (one record's data) with zip ``method``, stopping at ``cap`` bytes.

    Raises:
        NotImplementedError: an unknown method.
    """
    out = bytearray()
    if method == zipfile.ZIP_STORED:  # sizes that disagree: read what is there, as zipfile does
        out += raw[:cap]
        return out
    if method == zipfile.ZIP_DEFLATED:
        inflater = zlib.decompressobj(-15)
        for start in range(0, len(raw), _INFLATE_INPUT_BYTES):
            piece = bytes(raw[start : start + _INFLATE_INPUT_BYTES])
            while piece and len(out) < cap:
                out += inflater.decompress(piece, cap - len(out))
                piece = inflater.unconsumed_tail
            if inflater.eof or len(out) >= cap:
                break
        return out
    if method == 9:  # deflate64
        from zipfile_deflate64 import deflate64

        inflater64 = deflate64.Deflate64()
        for start in range(0, len(raw), _DEFLATE64_INPUT_BYTES):
            out += inflater64.decompress(bytes(raw[start : start + _DEFLATE64_INPUT_BYTES]))
            if len(out) >= cap:
                del out[cap:]
                break
        return out
    decoder: bz2.BZ2Decompressor | lzma.LZMADecompressor
    if method == zipfile.ZIP_BZIP2:
        decoder = bz2.BZ2Decompressor()
    elif method == zipfile.ZIP_LZMA:  # APPNOTE 5.8.8: version (2 B), properties size (2 B)
        if len(raw) < 4:
            raise EOFError("truncated LZMA header")
        (psize,) = struct.unpack_from("<H", raw, 2)
        props = bytes(raw[4 : 4 + psize])
        if len(props) != psize:
            raise EOFError("truncated LZMA properties")
        lzma1 = lzma._decode_filter_properties(lzma.FILTER_LZMA1, props)  # type: ignore[attr-defined]  # what zipfile itself uses
        decoder = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[lzma1])
        raw = raw[4 + psize :]
    else:
        raise NotImplementedError(method)
    for start in range(0, len(raw), _INFLATE_INPUT_BYTES):
        out += decoder.decompress(bytes(raw[start : start + _INFLATE_INPUT_BYTES]), cap - len(out))
        while not decoder.eof and not decoder.needs_input and len(out) < cap:
            out += decoder.decompress(b"", cap - len(out))
        if decoder.eof or len(out) >= cap:
            break
    return out


#: Largest ratio of decompressed to compressed size accepted for a record (deflate tops out near
#: 1032:1, so no real archive comes close); bigger claims are zip bombs.
MAX_COMPRESSION_RATIO = 1100
#: Records decompressing to less than this are never refused for their ratio.
MIN_BOMB_BYTES = 1 << 20


class ZipRecords:
    """Byte access to the records of one archive (stored by raw offset, others decompressed).

    ``directory`` is the one the records come from: miniz's (what torch reads,
    ``_torchzip.py``) or, by default, the ``zipfile``-style one of ``_zipdir.py``.
    """

    def __init__(self, source: ByteSource, directory: ZipDirectory | None = None) -> None:
        self.source = source
        self.directory = directory or read_directory(source)
        #: name -> record as a ``zipfile``-style reader finds it (exact names, last one wins)
        self.infos = {r.name: r for r in self.directory.records if not r.name.endswith("/")}
        self.data_end = min(self.directory.cd_start, source.size)

    def data_offset(self, info: ZipRecord) -> int:
        n, m = local_header(self.source, info)
        offset = info.header_offset + 30 + n + m
        if offset + info.compress_size > self.data_end:
            raise CorruptCheckpointError(
                f"zip record {info.name!r} runs past the start of the central directory",
                hint="the file looks truncated or damaged",
            )
        return offset

    def is_stored(self, info: ZipRecord) -> bool:
        if info.flags & 0x1:
            raise UnsupportedError(f"zip record {info.name!r} is encrypted")
        return info.method == zipfile.ZIP_STORED and info.compress_size == info.file_size

    def read(self, info: ZipRecord, cap: int) -> bytes:
        """The record's bytes (decompressed), refusing records larger than ``cap``."""
        if info.file_size > cap:
            raise CorruptCheckpointError(f"zip record {info.name!r} is larger than {cap} bytes")
        if self.is_stored(info):
            return self.source.read(self.data_offset(info), info.file_size)
        return self.decompress(info, info.file_size)

    def decompress(self, info: ZipRecord, expected: int) -> bytes:
        """Inflate one record straight from its data offset (no ``zipfile.ZipFile`` per call).

        Building a ``ZipFile`` reads the whole central directory, so doing it per record made
        loading n compressed storages cost O(n^2) (6,000 of them took minutes, issue 25). The
        output is capped at ``expected + 1`` bytes whatever the stream claims; a CRC of 0 means
        the writer computed none (torch's ``set_crc32_options(False)``).
        """
        if expected > max(MIN_BOMB_BYTES, MAX_COMPRESSION_RATIO * info.compress_size):
            raise CorruptCheckpointError(
                f"zip record {info.name!r} claims {expected} bytes from {info.compress_size} "
                f"compressed bytes, a ratio over {MAX_COMPRESSION_RATIO}:1 (a zip bomb?)",
                hint="deflate never compresses more than about 1032:1; the file is crafted",
            )
        offset = self.data_offset(info)  # validates the local header and range
        try:
            data = inflate(info.method, self.source.view(offset, info.compress_size), expected + 1)
        except NotImplementedError:
            raise UnsupportedError(
                f"zip record {info.name!r} uses an unsupported compression method ({info.method})",
                hint="re-zip the archive with store or deflate",
            ) from None
        # zlib.error: found by fuzz/fuzz_readers.py
        except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
            raise CorruptCheckpointError(f"cannot decompress {info.name!r}: {exc}") from None
        if len(data) > expected:  # the cap stopped it: how much more it holds is not known
            raise CorruptCheckpointError(
                f"zip record {info.name!r} inflates to more than the {expected} bytes its header "
                "states"
            )
        if len(data) != expected:
            raise CorruptCheckpointError(
                f"zip record {info.name!r} has {len(data)} bytes, expected {expected}"
            )
        # no CRC check: torch's miniz is built without one, and loads such records as they are
        return bytes(data)

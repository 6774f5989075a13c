"""The zip directory of a ``.pt`` file: end records, the central directory, local headers.

``read_directory`` and ``local_header`` are the zip stage every reader of a ``.pt`` goes
through (docs/formats/pytorch.md#zip-container, APPNOTE 6.3.10). Archives here are built with the
stdlib ``zipfile`` or packed by hand with ``zipfile``'s own record layouts (``structCentralDir``,
``structEndArchive`` ...), and where ``zipfile`` can read them its ``ZipInfo`` values are the
expected ones. Refusals are checked by class, exit code, hint and a keyword plus the facts
(record counts, byte positions, record names); limits are probed at the limit and one past it.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

import pytest

from ckptctl.errors import CorruptCheckpointError, ExitCode
from ckptctl.formats.pytorch import _zipdir
from ckptctl.formats.pytorch._zipdir import ZipDirectory, ZipRecord, local_header, read_directory
from ckptctl.sources import ByteSource

VALID = Path(__file__).resolve().parents[2] / "fixtures" / "valid" / "pytorch"
U32 = 0xFFFFFFFF
U16 = 0xFFFF

# zipfile's own record layouts (APPNOTE 4.3.7 .. 4.3.16); private names, so not in typeshed
CENTRAL_FMT: str = zipfile.structCentralDir  # type: ignore[attr-defined]  # see above
EOCD_FMT: str = zipfile.structEndArchive  # type: ignore[attr-defined]  # see above
Z64_FMT: str = zipfile.structEndArchive64  # type: ignore[attr-defined]  # see above
LOCATOR_FMT: str = zipfile.structEndArchive64Locator  # type: ignore[attr-defined]  # see above
LOCAL_FMT: str = zipfile.structFileHeader  # type: ignore[attr-defined]  # see above

# the record signatures of APPNOTE 4.3.7, 4.3.12, 4.3.14, 4.3.15, 4.3.16
LOCAL_SIG = b"PK\x03\x04"
CENTRAL_SIG = b"PK\x01\x02"
EOCD_SIG = b"PK\x05\x06"
Z64_SIG = b"PK\x06\x06"
LOCATOR_SIG = b"PK\x06\x07"


# --- building archives by hand --------------------------------------------------------------


def central(
    name: bytes = b"a",
    *,
    offset: int = 0,
    flags: int = 0,
    method: int = 0,
    crc: int = 0,
    csize: int = 0,
    fsize: int = 0,
    extra: bytes = b"",
    comment: bytes = b"",
    sig: bytes = CENTRAL_SIG,
) -> bytes:
    """One central-directory entry (APPNOTE 4.3.12)."""
    head = struct.pack(
        CENTRAL_FMT,
        sig, 45, 3, 20, 0, flags, method, 0, 0x21, crc, csize, fsize,
        len(name), len(extra), len(comment), 0, 0, 0, offset,
    )  # fmt: skip
    return head + name + extra + comment


def end_record(
    count: int,
    cd_size: int,
    cd_offset: int,
    comment: bytes = b"",
    *,
    disk: int = 0,
    cd_disk: int = 0,
    comment_length: int | None = None,
) -> bytes:
    """The end-of-central-directory record (APPNOTE 4.3.16)."""
    n = len(comment) if comment_length is None else comment_length
    return (
        struct.pack(EOCD_FMT, EOCD_SIG, disk, cd_disk, count, count, cd_size, cd_offset, n)
        + comment
    )


def zip64_end(
    count: int, cd_size: int, cd_offset: int, *, rec_size: int = 44, d1: int = 0, d2: int = 0
) -> bytes:
    """The zip64 end record (APPNOTE 4.3.14): ``rec_size`` counts the bytes after its field."""
    return struct.pack(
        Z64_FMT, Z64_SIG, rec_size, 45, 45, d1, d2, count, count, cd_size,
        cd_offset,
    )  # fmt: skip


def locator(z64_offset: int) -> bytes:
    """The zip64 end-record locator (APPNOTE 4.3.15)."""
    return struct.pack(LOCATOR_FMT, LOCATOR_SIG, 0, z64_offset, 1)


def archive(
    entries: list[bytes],
    *,
    body: bytes = b"",
    comment: bytes = b"",
    zip64: bool = False,
    count: int | None = None,
) -> bytes:
    """``body`` (the local records), the directory of ``entries`` and the end records."""
    directory = b"".join(entries)
    n = len(entries) if count is None else count
    tail = b""
    if zip64:
        tail = zip64_end(n, len(directory), len(body)) + locator(len(body) + len(directory))
    return body + directory + tail + end_record(n, len(directory), len(body), comment)


def extra64(*values: int, tag: int = 1) -> bytes:
    """A zip64 extended-information extra field (APPNOTE 4.5.3) holding ``values``."""
    return struct.pack("<HH", tag, 8 * len(values)) + b"".join(struct.pack("<Q", v) for v in values)


def write(tmp_path: Path, data: bytes, name: str = "t.pt") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def parse(tmp_path: Path, data: bytes) -> ZipDirectory:
    with ByteSource(write(tmp_path, data)) as source:
        return read_directory(source)


def parse_error(tmp_path: Path, data: bytes) -> CorruptCheckpointError:
    with pytest.raises(CorruptCheckpointError) as info:
        parse(tmp_path, data)
    assert type(info.value) is CorruptCheckpointError
    assert "truncated" in str(info.value.hint)
    assert info.value.exit_code == ExitCode.INPUT
    return info.value


def assert_says(err: CorruptCheckpointError, fact: str) -> None:
    """``err`` is about the zip archive and says ``fact``."""
    assert err.message.startswith("corrupt zip archive: "), err.message
    assert fact in err.message, err.message


def expected_records(data: bytes) -> list[ZipRecord]:
    """What ``zipfile`` makes of the archive's central directory (absolute offsets)."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [
            ZipRecord(
                i.orig_filename,
                i.header_offset,
                i.flag_bits,
                i.compress_type,
                i.CRC,
                i.compress_size,
                i.file_size,
            )
            for i in z.infolist()
        ]


def stdlib_zip(
    members: dict[str, bytes], *, comment: bytes = b"", force_zip64: bool = False
) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, payload in members.items():
            with z.open(name, "w", force_zip64=force_zip64) as out:
                out.write(payload)
        z.comment = comment
    return buf.getvalue()


def tail_layout(data: bytes) -> tuple[int, int, int]:
    """``(eocd start, cd size, cd offset)`` read with ``struct`` from the classic end record."""
    eocd = data.rindex(EOCD_SIG)
    _, _, _, _, _, cd_size, cd_offset, _ = struct.unpack_from(EOCD_FMT, data, eocd)
    return eocd, cd_size, cd_offset


# --- valid archives: every field against zipfile ---------------------------------------------


@pytest.mark.parametrize("fixture", ["min_zip.pt", "rezip_zip64.pt", "rezip_deflate.pt"])
def test_torch_and_rezipped_fixtures_match_zipfile(fixture: str) -> None:
    path = VALID / fixture
    data = path.read_bytes()
    with ByteSource(path) as source:
        got = read_directory(source)
    assert got.records == expected_records(data)
    with zipfile.ZipFile(path) as z:
        assert got.cd_start == z.start_dir
    assert got.prefix == 0
    eocd = len(data) - 22  # no archive comment
    assert got.eocd == (eocd, len(data))
    if data[eocd - 20 : eocd - 16] == LOCATOR_SIG:
        assert got.zip64_locator == (eocd - 20, eocd)
        assert got.zip64_end == (eocd - 76, eocd - 20)
        assert got.cd_end == eocd - 76
    else:
        assert got.zip64_locator is None
        assert got.zip64_end is None
        assert got.cd_end == eocd


def test_min_zip_is_the_spec_example() -> None:
    # the byte table of min_zip.pt: records at 0, 315, ..., 1042; zip64 end record at 1731, locator
    # at 1787, EOCD 1807
    with ByteSource(VALID / "min_zip.pt") as source:
        got = read_directory(source)
    assert [r.header_offset for r in got.records] == [0, 315, 401, 530, 662, 808, 920, 1042]
    weight = struct.pack("<6f", 0, 1, 2, 3, 4, 5)  # arange(6.) as stored, little-endian f32
    assert got.records[4] == ZipRecord("min_zip/data/0", 662, 0x808, 0, zlib.crc32(weight), 24, 24)
    assert got.zip64_end == (1731, 1787)
    assert got.zip64_locator == (1787, 1807)
    assert got.eocd == (1807, 1829)
    assert got.cd_end == 1731


def test_stdlib_zip_with_comment_and_prefix(tmp_path: Path) -> None:
    data = stdlib_zip({"a/data.pkl": b"x" * 7, "a/data/0": b"yz"}, comment=b"hello, zip")
    prefix = b"#!/bin/sh\n" * 3
    got = parse(tmp_path, prefix + data)
    want = expected_records(data)
    assert got.records == [r._replace(header_offset=r.header_offset + 30) for r in want]
    eocd, cd_size, cd_offset = tail_layout(data)
    assert got.prefix == 30
    assert got.cd_start == 30 + cd_offset
    assert got.cd_end == 30 + cd_offset + cd_size == 30 + eocd
    assert got.eocd == (30 + eocd, 30 + len(data))
    assert got.zip64_end is None
    assert got.zip64_locator is None


def test_stdlib_force_zip64_archive_with_prefix(tmp_path: Path) -> None:
    data = stdlib_zip({"w": b"abc"}, force_zip64=True)
    got = parse(tmp_path, b"P" * 5 + data)
    assert got.records == [
        r._replace(header_offset=r.header_offset + 5) for r in expected_records(data)
    ]
    assert got.prefix == 5


def test_empty_archive(tmp_path: Path) -> None:
    data = stdlib_zip({})
    assert len(data) == 22  # only the end record
    got = parse(tmp_path, data)
    assert got == ZipDirectory([], 0, 0, 0, None, None, (0, 22))


def test_record_fields_are_read_from_their_own_columns(tmp_path: Path) -> None:
    entries = [
        central(b"first", offset=0, flags=0x8, method=8, crc=0x12345678, csize=300, fsize=1000,
                extra=b"\x99\x99\x02\x00ab", comment=b"c1"),
        central(b"second", offset=345, flags=0x800, method=0, crc=0xDEADBEEF, csize=77, fsize=77,
                extra=b"", comment=b"comment two"),
        central(b"3", offset=500, flags=0, method=12, crc=1, csize=2, fsize=3,
                extra=b"\x0a\x00\x00\x00"),
    ]  # fmt: skip
    data = archive(entries, body=bytes(600))
    got = parse(tmp_path, data)
    assert got.records == [
        ZipRecord("first", 0, 0x8, 8, 0x12345678, 300, 1000),
        ZipRecord("second", 345, 0x800, 0, 0xDEADBEEF, 77, 77),
        ZipRecord("3", 500, 0, 12, 1, 2, 3),
    ]
    assert got.records == expected_records(data)
    assert (got.cd_start, got.cd_end) == (600, 600 + sum(map(len, entries)))


# --- names ----------------------------------------------------------------------------------


def test_names_decode_as_utf8_only_with_flag_bit_11(tmp_path: Path) -> None:
    raw = "café/данные".encode()
    entries = [
        central(raw, flags=0x800),
        central(raw, flags=0),
        central(raw, flags=0x1),  # encrypted bit, not the language-encoding bit
        central(raw, flags=0x801),
    ]
    got = parse(tmp_path, archive(entries))
    names = [r.name for r in got.records]
    assert names == [raw.decode(), raw.decode("cp437"), raw.decode("cp437"), raw.decode()]
    assert names == [r.name for r in expected_records(archive(entries))]


def test_invalid_utf8_name_is_replaced_not_refused(tmp_path: Path) -> None:
    raw = b"w\xff\xfe.bin"
    got = parse(tmp_path, archive([central(raw, flags=0x800)]))
    assert got.records[0].name == "w\ufffd\ufffd.bin"


def test_name_length_limit_is_inclusive(tmp_path: Path) -> None:
    limit = 4096
    got = parse(tmp_path, archive([central(b"n" * limit)]))
    assert got.records[0].name == "n" * limit
    err = parse_error(tmp_path, archive([central(b"n" * (limit + 1))]))
    assert_says(err, "entry runs past")


# --- the end-of-central-directory record ---------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"PK\x05\x06",
        b"PK\x03\x04" + bytes(100),
        bytes(22),
        # 21 bytes from the signature on: one short of an end record, its comment length unreadable
        bytes(10) + EOCD_SIG + bytes(17),
        EOCD_SIG + bytes(17),
        # a record 22 + 65536 bytes before the end: its comment could not reach the end
        end_record(0, 0, 0) + b"c" * 0x10000,
    ],
)
def test_no_end_record(tmp_path: Path, data: bytes) -> None:
    assert_says(parse_error(tmp_path, data), "end-of-central-directory")


def test_end_record_found_before_a_comment(tmp_path: Path) -> None:
    data = archive([central(b"w", offset=0)], body=bytes(40), comment=b"a comment")
    got = parse(tmp_path, data)
    assert got.eocd == (len(data) - 31, len(data))
    assert got.records == expected_records(data)


def test_end_record_with_the_longest_comment(tmp_path: Path) -> None:
    comment = b"c" * 0xFFFF
    data = archive([central(b"w", offset=3)], body=bytes(8), comment=comment)
    got = parse(tmp_path, data)
    assert got.eocd == (len(data) - 22 - 0xFFFF, len(data))
    assert got.records == [ZipRecord("w", 3, 0, 0, 0, 0, 0)]
    assert got.records == expected_records(data)


def test_end_record_at_the_start_of_a_short_file(tmp_path: Path) -> None:
    data = end_record(0, 0, 0, b"abc")
    got = parse(tmp_path, data)
    assert got == ZipDirectory([], 0, 0, 0, None, None, (0, 25))


def test_comment_length_that_runs_past_the_file_skips_the_candidate(tmp_path: Path) -> None:
    # the real end record first, then a comment holding a signature whose length field runs
    # past the end of the file: the scan must step back over the fake one
    fake = EOCD_SIG + bytes(16) + struct.pack("<H", 500)
    data = archive([central(b"w", offset=1)], body=bytes(4), comment=fake + b"tail")
    got = parse(tmp_path, data)
    eocd = len(data) - 22 - len(fake) - 4
    assert got.eocd == (eocd, len(data))
    assert got.records == [ZipRecord("w", 1, 0, 0, 0, 0, 0)]
    # the same at the very start of the file (no records)
    data = end_record(0, 0, 0, fake + b"tail")
    assert parse(tmp_path, data).eocd == (0, len(data))


def test_comment_length_overrunning_by_one_byte_is_not_an_end_record(tmp_path: Path) -> None:
    # fake records whose comment would end 1 byte past the file, or 0xFFFF bytes (an unsigned
    # length), after the real one
    for after, length in ((6, 7), (6, 0xFFFF), (40, 41)):
        fake = EOCD_SIG + bytes(16) + struct.pack("<H", length) + b"t" * after
        data = archive([central(b"w", offset=2)], body=bytes(4), comment=fake)
        got = parse(tmp_path, data)
        assert got.eocd == (len(data) - 22 - len(fake), len(data))
        assert got.records == [ZipRecord("w", 2, 0, 0, 0, 0, 0)]


def test_last_valid_end_record_wins(tmp_path: Path) -> None:
    # an archive whose comment holds a whole end record: the later one is used, as by zipfile
    inner = end_record(0, 0, 0)
    data = archive([central(b"w")], comment=inner + b"zz")
    got = parse(tmp_path, data)
    assert got.eocd == (len(data) - 24, len(data) - 2)
    assert got.records == []
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert z.infolist() == []


def test_scan_steps_back_to_the_nearest_valid_end_record(tmp_path: Path) -> None:
    # an empty archive, then an archive whose comment ends in a fake record: the scan skips the
    # fake one and takes the second archive's record, not the first archive's
    first = end_record(0, 0, 0)
    fake = EOCD_SIG + bytes(16) + struct.pack("<H", 100) + b"x"
    second = archive([central(b"w", offset=0)], comment=fake)
    data = first + second
    got = parse(tmp_path, data)
    assert got.eocd == (len(data) - 45, len(data))
    assert got.prefix == 22
    assert got.records == [ZipRecord("w", 22, 0, 0, 0, 0, 0)]


def test_bytes_after_the_end_record_are_not_part_of_it(tmp_path: Path) -> None:
    data = archive([central(b"w")], comment=b"note") + b"junk!"
    got = parse(tmp_path, data)
    assert got.eocd == (len(data) - 31, len(data) - 5)
    assert got.records == [ZipRecord("w", 0, 0, 0, 0, 0, 0)]


def test_last_22_bytes_are_taken_as_the_end_record(tmp_path: Path) -> None:
    # an end record in the last 22 bytes is used even when its comment length is not 0
    # (its comment cannot be there); the range it covers stops at the end of the file
    data = end_record(0, 0, 0, comment_length=5)
    assert len(data) == 22
    assert parse(tmp_path, data).eocd == (0, 22)
    data = bytes(9) + end_record(0, 0, 0, comment_length=300)
    got = parse(tmp_path, data)
    assert got.eocd == (9, 31)
    assert got.prefix == 9


@pytest.mark.parametrize(("disk", "cd_disk"), [(1, 0), (0, 1), (2, 2)])
def test_multi_disk_archives_are_refused(tmp_path: Path, disk: int, cd_disk: int) -> None:
    data = central(b"w") + end_record(1, 46 + 1, 0, disk=disk, cd_disk=cd_disk)
    err = parse_error(tmp_path, data)
    assert_says(err, "multi-disk")


# --- the central directory's place and size ------------------------------------------------


def test_central_directory_starting_before_the_file_is_corrupt(tmp_path: Path) -> None:
    entry = central(b"w")
    # cd_size one more than the bytes before the end record
    data = entry + end_record(1, len(entry) + 1, 0)
    err = parse_error(tmp_path, data)
    assert_says(err, "offset is past")


def test_central_directory_offset_past_its_start_is_corrupt(tmp_path: Path) -> None:
    entry = central(b"w")
    data = bytes(10) + entry + end_record(1, len(entry), 10)
    assert parse(tmp_path, data).cd_start == 10  # the offset at the limit
    err = parse_error(tmp_path, bytes(10) + entry + end_record(1, len(entry), 11))
    assert_says(err, "offset is past")


def test_central_directory_at_the_start_of_the_file(tmp_path: Path) -> None:
    entry = central(b"w", offset=0)
    data = entry + end_record(1, len(entry), 0)
    got = parse(tmp_path, data)
    assert got.cd_start == 0
    assert got.cd_end == len(entry)
    assert got.records == [ZipRecord("w", 0, 0, 0, 0, 0, 0)]


def test_record_count_must_fit_the_directory_size(tmp_path: Path) -> None:
    # entries with empty names: exactly 46 bytes each, so the directory is full
    data = archive([central(b""), central(b"")])
    assert [r.name for r in parse(tmp_path, data).records] == ["", ""]
    err = parse_error(tmp_path, archive([central(b""), central(b"")], count=3))
    assert_says(err, "3 records in 92 bytes")
    # 2 * 46 = 92 bytes needed, 91 claimed
    entry = central(b"")
    data = entry + entry[:45] + end_record(2, 91, 0)
    err = parse_error(tmp_path, data)
    assert_says(err, "2 records in 91 bytes")


def test_record_limit_is_inclusive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the real limit (ten million records) needs a directory of 460 MB at least; the
    # comparison is the same at any limit
    monkeypatch.setattr(_zipdir, "MAX_ZIP_RECORDS", 2)
    assert len(parse(tmp_path, archive([central(b"a"), central(b"b")])).records) == 2
    err = parse_error(tmp_path, archive([central(b"a"), central(b"b"), central(b"c")]))
    assert_says(err, "3 records in 141 bytes")


# --- central directory entries -------------------------------------------------------------


@pytest.mark.parametrize("kept", [36, 45])
def test_truncated_directory(tmp_path: Path, kept: int) -> None:
    first = central(b"0123456789")  # 56 bytes, then only part of the next entry's 46
    data = first + central(b"")[:kept]
    assert len(data) >= 92  # room for two entries by the count check
    assert_says(parse_error(tmp_path, data + end_record(2, len(data), 0)), "directory is truncated")


def test_last_entry_may_end_exactly_at_the_directory_end(tmp_path: Path) -> None:
    first = central(b"0123456789")
    data = first + central(b"") + end_record(2, len(first) + 46, 0)
    assert [r.name for r in parse(tmp_path, data).records] == ["0123456789", ""]


def test_bad_entry_signature_names_its_byte_in_the_directory(tmp_path: Path) -> None:
    first = central(b"abc", extra=b"\x07\x00\x01\x00z", comment=b"cc")  # 46 + 3 + 5 + 2 = 56
    data = archive([first, central(b"x", sig=LOCAL_SIG)], body=bytes(16))
    err = parse_error(tmp_path, data)
    assert_says(err, "signature at byte 56")
    err = parse_error(tmp_path, archive([central(b"x", sig=b"PK\x01\x03")]))
    assert_says(err, "signature at byte 0")


@pytest.mark.parametrize("part", ["name", "extra", "comment"])
def test_entry_running_past_the_directory(tmp_path: Path, part: str) -> None:
    entry = central(b"name", extra=b"\x07\x00\x00\x00", comment=b"cmt")
    # claim one byte more for one part, keep the real bytes: the entry overruns by one
    field = {"name": 28, "extra": 30, "comment": 32}[part]
    n = struct.unpack_from("<H", entry, field)[0]
    bad = entry[:field] + struct.pack("<H", n + 1) + entry[field + 2 :]
    err = parse_error(tmp_path, bad + end_record(1, len(bad), 0))
    assert_says(err, "entry runs past")


def test_entries_are_walked_by_name_extra_and_comment_lengths(tmp_path: Path) -> None:
    entries = [
        central(b"a" * 3, offset=11, extra=b"\x07\x00\x01\x00q", comment=b"x" * 7),
        central(b"b" * 5, offset=22, extra=b"", comment=b"y" * 2),
        central(b"c" * 2, offset=33, extra=b"\x08\x00\x03\x00qqq", comment=b""),
    ]
    got = parse(tmp_path, archive(entries, body=bytes(40)))
    assert [(r.name, r.header_offset) for r in got.records] == [
        ("aaa", 11),
        ("bbbbb", 22),
        ("cc", 33),
    ]


# --- zip64 extra fields in the central directory -------------------------------------------


def test_zip64_extra_replaces_only_the_fields_at_their_limit(tmp_path: Path) -> None:
    big_f, big_c, big_o = 5 << 32, (5 << 32) - 7, 6 << 32
    entries = [
        central(b"all", fsize=U32, csize=U32, offset=U32, extra=extra64(big_f, big_c, big_o)),
        central(b"fsize", fsize=U32, csize=10, offset=20, extra=extra64(big_f)),
        central(b"csize", fsize=10, csize=U32, offset=20, extra=extra64(big_c)),
        central(b"offset", fsize=10, csize=11, offset=U32, extra=extra64(big_o)),
        central(b"sizes", fsize=U32, csize=U32, offset=30, extra=extra64(big_f, big_c)),
        central(b"c+o", fsize=12, csize=U32, offset=U32, extra=extra64(big_c, big_o)),
    ]
    data = archive(entries)
    got = parse(tmp_path, data)
    assert [(r.name, r.file_size, r.compress_size, r.header_offset) for r in got.records] == [
        ("all", big_f, big_c, big_o),
        ("fsize", big_f, 10, 20),
        ("csize", 10, big_c, 20),
        ("offset", 10, 11, big_o),
        ("sizes", big_f, big_c, 30),
        ("c+o", 12, big_c, big_o),
    ]
    assert got.records == expected_records(data)


def test_zip64_offset_is_shifted_by_the_prefix(tmp_path: Path) -> None:
    data = archive([central(b"w", offset=U32, extra=extra64(7))], body=bytes(10))
    got = parse(tmp_path, b"\0" * 3 + data)
    assert got.prefix == 3
    assert got.records[0].header_offset == 10


def test_zip64_extra_after_other_fields(tmp_path: Path) -> None:
    other = struct.pack("<HH", 0x4246, 5) + b"FBFBF"  # torch's padding field first
    also = struct.pack("<HH", 2, 8) + struct.pack("<Q", 99)  # a tag-2 field that looks zip64
    extra = other + also + extra64(1234, 4321) + struct.pack("<HH", 0x7075, 1) + b"u"
    data = archive([central(b"w", fsize=U32, csize=U32, offset=5, extra=extra)])
    got = parse(tmp_path, data)
    assert got.records[0][1:] == (5, 0, 0, 0, 4321, 1234)
    assert got.records == expected_records(data)


def test_values_at_the_limit_without_a_zip64_field_are_kept(tmp_path: Path) -> None:
    entries = [
        central(b"none", fsize=U32, csize=U32, offset=0),  # no extra at all
        central(b"other", fsize=U32, csize=1, offset=2, extra=b"\x07\x00\x02\x00zz"),
        central(b"tail", fsize=U32, csize=1, offset=2, extra=b"\x07\x00\x00\x00abc"),  # 3 stray
    ]
    got = parse(tmp_path, archive(entries))
    assert [(r.file_size, r.compress_size, r.header_offset) for r in got.records] == [
        (U32, U32, 0),
        (U32, 1, 2),
        (U32, 1, 2),
    ]


def test_zip64_field_without_values_at_the_limit_changes_nothing(tmp_path: Path) -> None:
    got = parse(tmp_path, archive([central(b"w", fsize=1, csize=2, offset=3, extra=extra64(9, 9))]))
    assert got.records[0][1:] == (3, 0, 0, 0, 2, 1)


def test_zip64_extra_too_short(tmp_path: Path) -> None:
    cases = [
        extra64(1),  # two fields at the limit, one value
        struct.pack("<HH", 1, 0),  # the header alone, at the very end of the extra
        struct.pack("<HH", 1, 7) + bytes(7) + struct.pack("<HH", 9, 1) + b"z",  # < 8 bytes
        struct.pack("<HH", 1, 12) + bytes(12),  # 1 value and 4 stray bytes
    ]
    for extra in cases:
        data = archive([central(b"w", fsize=U32, csize=U32, extra=extra)])
        assert_says(parse_error(tmp_path, data), "field is too short")


def test_zip64_field_with_a_partial_value_uses_the_whole_ones(tmp_path: Path) -> None:
    extra = struct.pack("<HH", 1, 12) + struct.pack("<Q", 77) + b"\x01\x02\x03\x04"
    got = parse(tmp_path, archive([central(b"w", fsize=U32, csize=3, extra=extra)]))
    assert (got.records[0].file_size, got.records[0].compress_size) == (77, 3)


def test_zip64_values_are_unsigned(tmp_path: Path) -> None:
    top = 0xFFFF_FFFF_FFFF_FFFF
    data = archive([central(b"w", fsize=U32, csize=U32, extra=extra64(top, 1 << 63))])
    got = parse(tmp_path, data)
    assert (got.records[0].file_size, got.records[0].compress_size) == (top, 1 << 63)
    assert got.records == expected_records(data)


def test_zip64_field_claiming_more_bytes_than_the_extra_uses_what_is_there(
    tmp_path: Path,
) -> None:
    # the length 0xFFFF is unsigned: the body is cut at the end of the extra, not empty
    extra = struct.pack("<HH", 1, 0xFFFF) + struct.pack("<Q", 5 << 32)
    got = parse(tmp_path, archive([central(b"w", fsize=U32, csize=9, extra=extra)]))
    assert (got.records[0].file_size, got.records[0].compress_size) == (5 << 32, 9)


def test_other_field_claiming_more_bytes_than_the_extra_ends_the_walk(tmp_path: Path) -> None:
    for length in (0xFFF0, 0x8000, 0xFFFC):
        extra = struct.pack("<HH", 0x5455, length) + extra64(5 << 32)
        got = parse(tmp_path, archive([central(b"w", fsize=U32, csize=9, extra=extra)]))
        assert (got.records[0].file_size, got.records[0].compress_size) == (U32, 9)


def test_zip64_field_length_bounds_its_body(tmp_path: Path) -> None:
    # a 7-byte tag-1 body followed by another field: the next field's bytes are not a value
    extra = struct.pack("<HH", 1, 7) + bytes(7) + struct.pack("<HH", 9, 4) + b"abcd"
    data = archive([central(b"w", fsize=U32, csize=3, extra=extra)])
    assert_says(parse_error(tmp_path, data), "field is too short")


# --- zip64 end records ---------------------------------------------------------------------


def test_zip64_end_records_override_the_classic_ones(tmp_path: Path) -> None:
    entries = [central(b"a", offset=0), central(b"b", offset=7)]
    directory = b"".join(entries)
    body = bytes(20)
    data = (
        body
        + directory
        + zip64_end(2, len(directory), len(body))
        + locator(len(body) + len(directory))
        + end_record(U16, U32, U32)
    )
    got = parse(tmp_path, data)
    assert got.records == expected_records(data)
    assert [r.name for r in got.records] == ["a", "b"]
    end = len(body) + len(directory)
    assert (got.cd_start, got.cd_end) == (len(body), end)
    assert got.zip64_end == (end, end + 56)
    assert got.zip64_locator == (end + 56, end + 76)
    assert got.eocd == (end + 76, end + 98)


def test_zip64_end_record_at_the_start_of_the_file(tmp_path: Path) -> None:
    data = zip64_end(0, 0, 0) + locator(0) + end_record(0, 0, 0)
    got = parse(tmp_path, data)
    assert got == ZipDirectory([], 0, 0, 0, (0, 56), (56, 76), (76, 98))


def test_locator_without_a_zip64_end_record(tmp_path: Path) -> None:
    msg = "locator without"
    # the locator at byte 0: no room for the zip64 end record before it
    assert_says(parse_error(tmp_path, locator(0) + end_record(0, 0, 0)), msg)
    # room, but no signature
    data = bytes(56) + locator(0) + end_record(0, 0, 0)
    assert_says(parse_error(tmp_path, data), msg)
    # 55 bytes before the locator: one short
    data = zip64_end(0, 0, 0)[1:] + locator(0) + end_record(0, 0, 0)
    assert_says(parse_error(tmp_path, data), msg)


def test_locator_found_only_right_before_the_end_record(tmp_path: Path) -> None:
    # a locator signature one byte earlier is not a locator: the archive is a plain one
    entry = central(b"w")
    data = entry + b"x" + locator(0)[:19] + end_record(1, len(entry) + 20, 0)
    got = parse(tmp_path, data)
    assert got.zip64_locator is None
    assert got.zip64_end is None


@pytest.mark.parametrize(("d1", "d2"), [(1, 0), (0, 1), (3, 3)])
def test_zip64_multi_disk_is_refused(tmp_path: Path, d1: int, d2: int) -> None:
    data = zip64_end(0, 0, 0, d1=d1, d2=d2) + locator(0) + end_record(0, 0, 0)
    err = parse_error(tmp_path, data)
    assert_says(err, "multi-disk")


@pytest.mark.parametrize("rec_size", [45, 43, 44 + 16, 0])
def test_zip64_extensible_data_is_refused(tmp_path: Path, rec_size: int) -> None:
    data = zip64_end(0, 0, 0, rec_size=rec_size) + locator(0) + end_record(0, 0, 0)
    err = parse_error(tmp_path, data)
    assert_says(err, "extensible data")


def test_zip64_central_directory_before_the_file_is_corrupt(tmp_path: Path) -> None:
    entry = central(b"w")
    data = entry + zip64_end(1, len(entry) + 1, 0) + locator(0) + end_record(1, len(entry), 0)
    err = parse_error(tmp_path, data)
    assert_says(err, "offset is past")


def test_zip64_counts_are_checked(tmp_path: Path) -> None:
    entry = central(b"w")
    data = entry + zip64_end(2, len(entry), 0) + locator(0) + end_record(1, len(entry), 0)
    err = parse_error(tmp_path, data)
    assert_says(err, "2 records in 47 bytes")


# --- local headers -------------------------------------------------------------------------


def local(name: bytes, extra: bytes, sig: bytes = LOCAL_SIG) -> bytes:
    return (
        struct.pack(LOCAL_FMT, sig, 20, 0, 0, 0, 0, 0, 0, 0, 0, len(name), len(extra))
        + name
        + extra
    )


def read_local(tmp_path: Path, data: bytes, offset: int, name: str = "w") -> tuple[int, int]:
    with ByteSource(write(tmp_path, data, "local.pt")) as source:
        return local_header(source, ZipRecord(name, offset, 0, 0, 0, 0, 0))


def local_error(
    tmp_path: Path, data: bytes, offset: int, name: str = "w"
) -> CorruptCheckpointError:
    with pytest.raises(CorruptCheckpointError) as info:
        read_local(tmp_path, data, offset, name)
    assert type(info.value) is CorruptCheckpointError
    assert info.value.hint is None
    return info.value


def test_local_header_lengths_match_zipfile(tmp_path: Path) -> None:
    path = VALID / "rezip_zip64.pt"
    raw = path.read_bytes()
    with zipfile.ZipFile(path) as z, ByteSource(path) as source:
        for info in z.infolist():
            n, m = struct.unpack_from("<HH", raw, info.header_offset + 26)
            record = ZipRecord(info.filename, info.header_offset, 0, 0, 0, 0, 0)
            assert local_header(source, record) == (n, m)
            assert m > 0  # zip64 extra fields: the two lengths differ


def test_local_header_at_the_start_and_at_the_end_of_the_file(tmp_path: Path) -> None:
    head = local(b"abcde", b"0123456789ab")
    assert read_local(tmp_path, head, 0) == (5, 12)
    # a header of exactly 30 bytes that ends at the end of the file
    bare = bytes(7) + struct.pack(LOCAL_FMT, LOCAL_SIG, 20, 0, 0, 0, 0, 0, 0, 0, 0, 3, 4)
    assert read_local(tmp_path, bare, 7) == (3, 4)
    err = local_error(tmp_path, bare, 8, "late")
    assert err.message == "zip record 'late' has no local header"


def test_local_header_negative_offset(tmp_path: Path) -> None:
    err = local_error(tmp_path, local(b"a", b"") * 3, -1, "neg")
    assert err.message == "zip record 'neg' has no local header"


def test_local_header_bad_signature(tmp_path: Path) -> None:
    data = local(b"a", b"") + local(b"b", b"", sig=CENTRAL_SIG)
    assert read_local(tmp_path, data, 0) == (1, 0)
    err = local_error(tmp_path, data, 31, "data/0")
    assert err.message == "zip record 'data/0' has no local header"

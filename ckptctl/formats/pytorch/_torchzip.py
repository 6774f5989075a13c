"""What torch 2.13's own zip reader sees in a ``.pt`` archive, emulated byte for byte.

``torch.load`` reads a zip checkpoint with ``caffe2::serialize::PyTorchStreamReader``
(``caffe2/serialize/inline_container.cc``) over miniz 3.0.2 (``third_party/miniz-3.0.2``).
That reader differs from Python's ``zipfile`` (and from ckptctl's own directory parser,
``_zipdir.py``, which follows ``zipfile``) in ways an attacker can use to show one pickle to a
scanner and another to torch (issue 25). Here, each rule is miniz's or torch's:

* **End record** (``mz_zip_reader_locate_header_sig``): scanning back from the end in 4 KiB
  windows, the *last* ``PK\\x05\\x06`` with at least 22 bytes after it, whatever its comment
  length says; the search gives up once a window starts 65,557 bytes or more before the end.
* **Zip64** (``mz_zip_reader_read_central_dir``): a locator right before the end record points,
  by absolute offset, at the zip64 end record; only then do the zip64 values replace the
  classic ones.
* **Central directory**: read at the *absolute* offset the end record gives (no shift for bytes
  prepended to the archive, unlike ``zipfile``), with miniz's per-entry checks.
* **Names** (``mz_zip_reader_locate_file`` with flags 0): the directory is heap-sorted by name
  with ASCII letters folded to lower case, and found by binary search, so ``archive/DATA.PKL``
  is what torch reads as ``data.pkl``, and of two names that differ only in case the sort
  decides which one torch reads.
* **Prefix** (``PyTorchStreamReader::init``): whatever precedes the first ``/`` of the first
  directory entry; every other record must start with it, byte for byte
  (``getAllRecords``, called by ``torch.load``'s TorchScript check), or torch refuses the file.
* **Version**: ``.data/version`` if present, else ``version`` (required), parsed like C++
  ``std::stoull``, between 1 and 10.
* **Records** (``mz_zip_reader_extract_to_mem``): stored or deflated only, never encrypted; a
  record whose name ends in ``/`` or whose DOS attributes say "directory" reads as nothing.

Python keys (``torch/serialization.py``): ``byteorder`` must be exactly ``little`` or ``big``;
storage ``KEY`` is always record ``data/KEY``, and its size must equal the pickle's.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ckptctl.errors import CorruptCheckpointError
from ckptctl.formats.pytorch._zipdir import (
    ZipDirectory,
    ZipRecord,
    inflate,
    local_header,
    read_entries,
)

if TYPE_CHECKING:
    from ckptctl.sources import ByteSource

__all__ = ["TorchArchive", "TorchRefusal", "open_torch_archive"]

_EOCD_SIG = 0x06054B50
_EOCD_BYTES = 22
_LOCATOR_BYTES = 20
_ZIP64_EOCD_BYTES = 56
_WINDOW_BYTES = 4096
_U32_MAX = 0xFFFFFFFF
_U16_MAX = 0xFFFF
#: ``mz_zip_reader_extract_to_mem`` refuses these flag bits: encrypted, strong encryption, patch.
_UNREADABLE_FLAGS = 0x1 | 0x40 | 0x20
#: Central-directory flag bit 13 (``MZ_ZIP_GENERAL_PURPOSE_BIT_FLAG_LOCAL_DIR_IS_MASKED``).
_MASKED_FLAG = 0x2000
_DOS_DIRECTORY = 0x10
#: torch 2.13's ``kMinSupportedFileFormatVersion`` .. ``kMaxSupportedFileFormatVersion``
#: (``caffe2/serialize/versions.h``; the maximum found by experiment: 10 loads, 11 is refused).
MIN_VERSION, MAX_VERSION = 1, 10
#: ``MZ_ZIP_MAX_ARCHIVE_FILENAME_SIZE``: ``getAllRecords`` reads names into a buffer this big.
_NAME_BUFFER = 512
#: Directories of more records than this holding names that differ only in case are refused
#: rather than heap-sorted in Python to find which one torch reads.
MAX_FOLDED_SORT_RECORDS = 200_000
_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")


class TorchRefusal(CorruptCheckpointError):
    """torch 2.13's zip reader would refuse the archive (the message says why)."""


def _refuse(why: str) -> TorchRefusal:
    return TorchRefusal(why)


def _locate_eocd(source: ByteSource) -> int:
    """``mz_zip_reader_locate_header_sig`` for the end record, window by window as miniz reads.

    Each 4 KiB window is scanned from its end for the last signature with room for the fixed
    22 bytes after it; windows step back by 4093 bytes (they overlap by 3, so every start
    position is seen) until one starts 65,557 bytes or more before the end of the file.
    """
    size = source.size
    if size < _EOCD_BYTES:
        raise _refuse("not a zip archive (too small)")
    cur = max(size - _WINDOW_BYTES, 0)
    while True:
        window = source.read(cur, min(_WINDOW_BYTES, size - cur))
        pos = window.rfind(b"PK\x05\x06", 0, min(len(window), size - cur - _EOCD_BYTES + 4))
        if pos >= 0:
            return cur + pos
        if not cur or size - cur >= _U16_MAX + _EOCD_BYTES:
            raise _refuse("no end-of-central-directory record where miniz looks for it")
        cur = max(cur - (_WINDOW_BYTES - 3), 0)


def read_torch_directory(source: ByteSource) -> ZipDirectory:
    """The directory miniz 3.0.2 reads (``mz_zip_reader_read_central_dir``), offsets absolute.

    Raises:
        TorchRefusal: miniz fails to open the archive.
    """
    size = source.size
    eocd = _locate_eocd(source)
    (_, this_disk, cd_disk, on_disk, total, cd_size, cd_offset, _comment) = struct.unpack(
        "<I4H2LH", source.read(eocd, _EOCD_BYTES)
    )
    zip64_end: tuple[int, int] | None = None
    locator: tuple[int, int] | None = None
    if eocd >= _LOCATOR_BYTES + _ZIP64_EOCD_BYTES:
        loc = source.read(eocd - _LOCATOR_BYTES, _LOCATOR_BYTES)
        if loc[:4] == b"PK\x06\x07":
            (z64,) = struct.unpack_from("<Q", loc, 8)
            if z64 > size - _ZIP64_EOCD_BYTES:
                raise _refuse("the zip64 locator points past the end of the file")
            record = source.read(z64, _ZIP64_EOCD_BYTES)
            if record[:4] == b"PK\x06\x06":
                zip64_end = (z64, z64 + _ZIP64_EOCD_BYTES)
                locator = (eocd - _LOCATOR_BYTES, eocd)
                (disks,) = struct.unpack_from("<L", loc, 16)
                (rec_size, _v1, _v2, this_disk, cd_disk, on_disk, total, cd_size, cd_offset) = (
                    struct.unpack_from("<Q2H2L4Q", record, 4)
                )
                if rec_size < _ZIP64_EOCD_BYTES - 12:
                    raise _refuse("the zip64 end record is too short")
                if disks != 1:
                    raise _refuse("a multi-disk archive")
                if total > _U32_MAX or on_disk > _U32_MAX:
                    raise _refuse("too many records for miniz")
                if cd_size > _U32_MAX:
                    raise _refuse("a central directory too large for miniz")
    if total != on_disk or ((this_disk | cd_disk) != 0 and (this_disk != 1 or cd_disk != 1)):
        raise _refuse("a multi-disk archive")
    if cd_size < total * 46 or cd_offset + cd_size > size:
        raise _refuse("the central directory does not fit where the end record puts it")

    def check(fields: tuple[int, ...]) -> None:
        flags, method, csize, fsize, disk, offset = (
            fields[5], fields[6], fields[10], fields[11], fields[15], fields[18]
        )  # fmt: skip
        if (
            csize != _U32_MAX
            and fsize != _U32_MAX
            and ((method == 0 and fsize != csize) or (fsize and not csize))
        ):
            raise _refuse("a record's sizes are inconsistent")
        if disk == _U16_MAX or (disk not in (this_disk, 1)):
            raise _refuse("a multi-disk archive")
        if csize != _U32_MAX and offset + 30 + csize > size:
            raise _refuse("a record runs past the end of the file")
        if flags & _MASKED_FLAG:
            raise _refuse("a record with a masked local header (encryption)")

    try:
        records, raw_names, attributes = read_entries(
            source.buffer, cd_offset, cd_offset + cd_size, total, 0, check
        )
    except TorchRefusal:
        raise
    except CorruptCheckpointError as exc:
        raise _refuse(exc.message) from None
    return ZipDirectory(
        records,
        0,
        cd_offset,
        cd_offset + cd_size,
        zip64_end,
        locator,
        (eocd, size),
        raw_names,
        attributes,
    )


def _cstr(raw: bytes) -> bytes:
    """What a C string of ``raw`` is: everything before the first NUL."""
    return raw.split(b"\0", 1)[0]


def _stoull(text: bytes) -> int | None:
    """``std::stoull(text)`` (base 10), or None where it throws."""
    text = _cstr(text).lstrip(b" \t\n\v\f\r")
    sign = 1
    if text[:1] in (b"+", b"-"):
        sign = -1 if text[:1] == b"-" else 1
        text = text[1:]
    digits = len(text) - len(text.lstrip(b"0123456789"))
    if not digits:
        return None
    value = int(text[:digits])
    if value > 0xFFFFFFFFFFFFFFFF:
        return None
    return value if sign > 0 else (-value) % (1 << 64)


@dataclass(frozen=True)
class TorchArchive:
    """An archive as torch's reader opens it.

    Attributes:
        directory: the records miniz reads, in central-directory order.
        prefix: the archive name plus ``/`` (``archive_name_plus_slash_``), as text.
        raw_prefix: the same, as stored.
        version: the parsed ``version`` (or ``.data/version``) record.
        folded: each record's name with ASCII letters in lower case, as miniz compares them.
        groups: folded name -> the indices of the records that have it, in directory order.
        order: miniz's sorted index (only when two names fold alike; else None, and a folded
            name finds its single record in ``groups``).
    """

    directory: ZipDirectory
    prefix: str
    raw_prefix: bytes
    version: int
    folded: list[bytes]
    groups: dict[bytes, list[int]]
    order: list[int] | None

    def lookup(self, name: str | bytes) -> int | None:
        """The index of the record torch reads for ``name`` (relative to the prefix), or None.

        Args:
            name: a record name such as ``data.pkl`` or ``data/0``.
        """
        raw = name.encode("utf-8", "surrogateescape") if isinstance(name, str) else name
        return self.locate(self.raw_prefix + raw)

    def locate(self, full: bytes) -> int | None:
        """``mz_zip_reader_locate_file(full, flags=0)``: the record index, or None."""
        key = _cstr(full).translate(_LOWER)  # torch passes a C string; miniz folds case
        if self.order is None:
            group = self.groups.get(key)
            return None if group is None else group[0]
        lo, hi = 0, len(self.order) - 1
        while lo <= hi:  # mz_zip_locate_file_binary_search
            mid = lo + ((hi - lo) >> 1)
            index = self.order[mid]
            if self.folded[index] == key:
                return index
            if self.folded[index] < key:
                lo = mid + 1
            else:
                hi = mid - 1
        return None

    def record(self, index: int) -> ZipRecord:
        """The record at ``index``."""
        return self.directory.records[index]

    def twins(self, index: int) -> list[int]:
        """The other records whose names fold to the same lower-case name as ``index``'s."""
        return [i for i in self.groups[self.folded[index]] if i != index]


def _heap_sort(keys: list[bytes]) -> list[int]:
    """miniz's ``mz_zip_reader_sort_central_dir_offsets_by_filename``, step for step.

    Only used when names collide once folded: then the (unstable) heap sort decides which of
    the equal names the binary search meets, and so which record torch reads.
    """
    size = len(keys)
    order = list(range(size))
    if size <= 1:
        return order

    def sift(root: int, end: int) -> None:
        while True:
            child = root * 2 + 1
            if child >= end:
                return
            if child + 1 < end and keys[order[child]] < keys[order[child + 1]]:
                child += 1
            if not keys[order[root]] < keys[order[child]]:
                return
            order[root], order[child] = order[child], order[root]
            root = child

    for start in range((size - 2) >> 1, -1, -1):
        sift(start, size)
    for end in range(size - 1, 0, -1):
        order[end], order[0] = order[0], order[end]
        sift(0, end)
    return order


def open_torch_archive(source: ByteSource) -> TorchArchive:
    """Open ``source`` as ``torch.load`` does, up to (not including) unpickling ``data.pkl``.

    Raises:
        TorchRefusal: torch 2.13 refuses the archive; the message says why.
        CorruptCheckpointError: names that collide once case-folded, in a huge directory.
    """
    directory = read_torch_directory(source)
    if not directory.records:
        raise _refuse("the archive holds no records")
    folded = [n.translate(_LOWER) for n in directory.raw_names]
    groups: dict[bytes, list[int]] = {}
    for i, key in enumerate(folded):
        groups.setdefault(key, []).append(i)
    order: list[int] | None = None
    if len(groups) != len(folded):
        if len(folded) > MAX_FOLDED_SORT_RECORDS:
            raise CorruptCheckpointError(
                f"zip archive of {len(folded)} records has names that differ only in case",
                hint="torch reads one of them by a case-insensitive search; the file is crafted",
            )
        order = _heap_sort(folded)
    first = directory.raw_names[0]
    slash = first.find(b"/")
    if slash < 0:
        raise _refuse(f"its first record {_show(first)} is not in a folder")
    raw_prefix = first[: slash + 1]
    prefix = raw_prefix.decode("utf-8", "replace")
    archive = TorchArchive(directory, prefix, raw_prefix, 0, folded, groups, order)
    version = _read_version(source, archive)
    _check_all_records(archive)
    return replace(archive, version=version)


def _show(raw: bytes) -> str:
    return repr(raw.decode("utf-8", "replace"))


def _read_version(source: ByteSource, archive: TorchArchive) -> int:
    index = archive.lookup(".data/version")
    if index is None:
        index = archive.lookup("version")
    if index is None:
        raise _refuse("it has no version record")
    why = unreadable_reason(source, archive, index)
    if why is not None:
        raise _refuse(f"its version record {why}")
    value = _stoull(read_small(source, archive.record(index), _MAX_VERSION_BYTES))
    if value is None:
        raise _refuse("its version record is not a number")
    if not MIN_VERSION <= value <= MAX_VERSION:
        raise _refuse(f"its version {value} is outside {MIN_VERSION}..{MAX_VERSION}")
    return value


#: Largest ``version`` record read (torch reads any size; a number never needs more).
_MAX_VERSION_BYTES = 4096


def read_small(source: ByteSource, record: ZipRecord, cap: int) -> bytes:
    """The bytes of a small readable record (stored or deflated), at most ``cap`` of them."""
    n, m = local_header(source, record)
    start = record.header_offset + 30 + n + m
    try:
        raw = source.view(start, min(record.compress_size, cap * 1100 + 64))  # the ratio bound
        return bytes(inflate(record.method, raw, cap))
    except zlib.error as exc:
        raise _refuse(f"record {record.name!r} does not inflate: {exc}") from None


def _check_all_records(archive: TorchArchive) -> None:
    """``getAllRecords`` (every ``torch.load`` of a zip calls it): names within the prefix."""
    want = _cstr(archive.raw_prefix)
    size = len(archive.raw_prefix)
    for raw in archive.directory.raw_names:
        name = _cstr(raw[: _NAME_BUFFER - 1])
        if name[:size] != want[:size]:
            raise _refuse(f"record {_show(raw)} is outside its folder {_show(archive.raw_prefix)}")
        try:
            name[size:].decode("utf-8")  # pybind11 hands the names to Python as str
        except UnicodeDecodeError:
            raise _refuse(f"record name {_show(raw)} is not valid UTF-8") from None


def unreadable_reason(
    source: ByteSource, archive: TorchArchive, index: int, *, local: bool = True
) -> str | None:
    """Why torch cannot read record ``index`` (None when it can), per miniz's extract rules.

    ``local=False`` skips the local header (a read per record: storages are checked when
    their bytes are loaded, and a remote file would pay a request for each).
    """
    record = archive.record(index)
    raw = archive.directory.raw_names[index]
    if raw.endswith(b"/") or archive.directory.attributes[index] & _DOS_DIRECTORY:
        return "is marked as a directory (torch reads uninitialised memory for it)"
    if record.flags & _UNREADABLE_FLAGS:
        return "is encrypted"
    if record.method not in (0, 8):
        return f"uses compression method {record.method} (torch reads only stored and deflate)"
    if record.compress_size == 0 or not local:
        return None
    try:
        n, m = local_header(source, record)
    except CorruptCheckpointError:
        return "has no local header"
    if record.header_offset + 30 + n + m + record.compress_size > source.size:
        return "runs past the end of the file"
    return None

"""``ckptctl header`` for PyTorch files: the raw container, decoded, with every byte accounted for.

Regions by container (``docs/formats/pytorch.md``: zip container, legacy stream,
tar, plain pickles):

* ZIP: per record in file order, the local header and name (``header``), the extra field
  (``padding`` for torch's ``FB`` alignment field, ``header`` for zip64 fields), the data
  (``tensor`` for storage records, named by the tensors using them; ``metadata`` for the
  pickle and small records), the data descriptor (``header``); then the central directory,
  the zip64 end records and the end-of-central-directory record (``header``).
* legacy stream: the five pickles (``metadata``), each storage's 8-byte element count
  (``header``) and bytes (``tensor``).
* TAR: header blocks (``header``), member data (``metadata``; storages as above), block
  padding and the end-of-archive blocks (``padding``).
* plain pickle: the stream (``metadata``); storages pickled by value stay inside it.

Bytes no structure claims (a prefix before an archive, gaps, trailing junk) are ``other``.
"""

from __future__ import annotations

import pickletools
import struct
from typing import TYPE_CHECKING, Any

from ckptctl.errors import CorruptCheckpointError
from ckptctl.formats._base import tile_regions
from ckptctl.formats.pytorch._scan import PickleTruncatedError
from ckptctl.formats.pytorch._unpickler import MAX_PICKLE_BYTES
from ckptctl.formats.pytorch._walker import scan_pickle
from ckptctl.model import HeaderLayout, Region, RegionKind

if TYPE_CHECKING:
    from ckptctl.formats.pytorch._containers import Parsed
    from ckptctl.formats.pytorch._structure import Analysis
    from ckptctl.formats.pytorch._zipdir import ZipDirectory, ZipRecord
    from ckptctl.sources import ByteSource

#: Most distinct globals listed in the header view of a pickle.
MAX_LISTED_GLOBALS = 1000
#: Largest pickle whose opcodes are listed for the header view (bigger ones: globals omitted).
MAX_DISASSEMBLED_BYTES = 64 << 20

_FB_TAG = 0x4246  # torch's alignment extra field, "FB"
_ZIP64_TAG = 0x0001
_TAR_BLOCK = 512
#: Small text records whose values the header view shows (by name after the archive's prefix).
_SMALL_RECORDS = ("version", "byteorder", ".format_version", ".storage_alignment", ".data/version")


def _storage_users(structure: Analysis) -> dict[str, tuple[str, list[str]]]:
    """Storage key -> (dtype name, names of the tensors that use it), in listing order."""
    out: dict[str, tuple[str, list[str]]] = {}
    for found in structure.found:
        ref = found.tensor.storage
        if ref is None or ref.inline is not None:
            continue
        dtype = ref.stype.dtype or found.tensor.dtype or "uint8"
        out.setdefault(ref.key, (dtype, []))[1].append(found.name)
    return out


def _storage_region(
    start: int, end: int, key: str, users: dict[str, tuple[str, list[str]]], extra: str = ""
) -> Region:
    dtype, names = users.get(key, ("?", []))
    if not names:
        return Region(
            RegionKind.OTHER, start, end, note=f"storage {key} used by no listed tensor{extra}"
        )
    note = f"storage {key} ({dtype}, {end - start} bytes{extra})"
    return Region(RegionKind.TENSOR, start, end, name=",".join(names), note=note)


def pickle_summary(data: bytes) -> dict[str, Any]:
    """``{"protocol", "globals"}`` of one pickle, from its opcodes alone (nothing is run).

    STACK_GLOBAL takes its module and name from the two strings pushed before it.
    """
    protocol = 0
    names: dict[str, None] = {}
    strings: list[str] = []
    if len(data) > MAX_DISASSEMBLED_BYTES:
        return {"protocol": data[1] if data[:1] == b"\x80" else 0, "globals": None}
    try:
        for op, arg, _pos in pickletools.genops(data):
            protocol = max(protocol, op.proto)
            if op.name == "PROTO" and isinstance(arg, int):
                protocol = arg
            elif op.name in ("GLOBAL", "INST") and isinstance(arg, str):
                names.setdefault(arg.replace(" ", "."), None)
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                names.setdefault(f"{strings[-2]}.{strings[-1]}", None)
            if isinstance(arg, str) and "UNICODE" in op.name:
                strings = [*strings[-1:], arg]
            if op.name == "STOP" or len(names) >= MAX_LISTED_GLOBALS:
                break
    except (ValueError, KeyError, struct.error, UnicodeDecodeError):
        pass  # the reader already validated this pickle; list what was seen
    return {"protocol": protocol, "globals": list(names)}


def _parse_and_name(source: ByteSource) -> tuple[Parsed, dict[str, tuple[str, list[str]]]]:
    from ckptctl.formats.pytorch._read import parse
    from ckptctl.formats.pytorch._structure import analyse

    parsed = parse(source)
    return parsed, _storage_users(analyse(parsed))


def layout_pytorch(source: ByteSource) -> HeaderLayout:
    """Decode a PyTorch checkpoint's container and assign every byte of it to a region.

    Args:
        source: the input file.

    Returns:
        The layout; ``header["container"]`` is ``zip``, ``legacy``, ``tar`` or ``pickle``.

    Raises:
        CorruptCheckpointError: the container or a pickle is malformed, or regions overlap.
        UnsafePickleError: a pickle is unsafe (see ``ckptctl.safety``).
    """
    parsed, users = _parse_and_name(source)
    if parsed.format in ("pytorch-zip", "torchscript"):
        header, regions = _zip_layout(source, parsed, users)
    elif parsed.format == "pytorch-legacy":
        header, regions = _legacy_layout(source, parsed, users)
    elif parsed.format == "pytorch-tar":
        header, regions = _tar_layout(source, parsed, users)
    else:
        header, regions = _plain_layout(source)
    header = {"format": parsed.format, **header, "pickle_verdict": parsed.ledger.safety.describe()}
    tiled = tile_regions(regions, source.size)
    tensor_bytes = sum(r.size for r in tiled if r.kind == "tensor")
    facts = {
        "container": header["container"],
        "tensor_bytes": tensor_bytes,
        "padding_bytes": sum(r.size for r in tiled if r.kind == "padding"),
        "storages": len(parsed.storages),
    }
    return HeaderLayout(parsed.format, source.size, header, tuple(tiled), facts)


# --- ZIP ------------------------------------------------------------------------------------


def _zip_layout(
    source: ByteSource, parsed: Parsed, users: dict[str, tuple[str, list[str]]]
) -> tuple[dict[str, Any], list[Region]]:
    from ckptctl.formats.pytorch._containers import _zip_prefix
    from ckptctl.formats.pytorch._zipdir import read_directory

    directory = read_directory(source)
    names = [r.name for r in directory.records if not r.name.endswith("/")]
    prefix = parsed.zip_prefix if parsed.main_record is not None else _zip_prefix(names)
    alignment = _alignment(source, directory.records, prefix)
    regions: list[Region] = []
    records: list[dict[str, Any]] = []
    small: dict[str, str] = {}
    ordered = sorted(directory.records, key=lambda r: r.header_offset)
    ends = [r.header_offset for r in ordered[1:]] + [directory.cd_start]
    for record, nxt in zip(ordered, ends, strict=True):
        data_offset, found = _record_regions(source, record, nxt, alignment, parsed, users)
        regions += found
        records.append(_record_facts(record, data_offset))
        value = _small_value(source, record, data_offset, prefix)
        if value is not None:
            small[record.name[len(prefix) :]] = value
    regions += _directory_regions(directory)
    header: dict[str, Any] = {"container": "zip", "prefix": prefix.rstrip("/"), "records": records}
    pkl = next((r for r in ordered if r.header_offset == parsed.main_record), None)
    if pkl is not None:
        header["pickle"] = _main_pickle(source, pkl, parsed)
    header["byteorder"] = small.get("byteorder", "little")
    header["version"] = small.get("version") or small.get(".data/version")
    for key, label in ((".format_version", "format_version"), (".storage_alignment", "alignment")):
        if key in small:
            header[label] = small[key]
    return header, regions


def _record_regions(
    source: ByteSource,
    record: ZipRecord,
    nxt: int,
    alignment: int,
    parsed: Parsed,
    users: dict[str, tuple[str, list[str]]],
) -> tuple[int, list[Region]]:
    """Where a record's data starts, and the regions of the record: its local header, extra
    field, data and data descriptor (``nxt``: where the next structure starts)."""
    from ckptctl.formats.pytorch._zipdir import local_header

    n, m = local_header(source, record)
    start = record.header_offset
    data_offset = start + 30 + n + m
    data_end = data_offset + record.compress_size
    note = f"zip local header of {record.name!r}"
    regions = [Region(RegionKind.HEADER, start, start + 30 + n, note=note)]
    extra = bytes(source.buffer[start + 30 + n : data_offset])
    regions += _extra_regions(extra, start + 30 + n, alignment)
    key = parsed.storage_records.get(start)  # local header offset -> key, as the reader resolved
    method = _method_note(record.method)
    if key is not None:
        regions.append(_storage_region(data_offset, data_end, key, users, method))
    elif record.compress_size:
        what = "the pickle" if record.name.endswith(".pkl") else "record"
        note = f"{what} {record.name!r}{method}"
        regions.append(Region(RegionKind.METADATA, data_offset, data_end, note=note))
    if record.flags & 0x08:
        size = _descriptor_size(source.buffer, data_end, nxt, record)
        if size:
            end = data_end + size
            regions.append(Region(RegionKind.HEADER, data_end, end, note="zip data descriptor"))
    return data_offset, regions


def _method_note(method: int) -> str:
    if method == 0:
        return ""
    if method == 8:
        return ", deflate-compressed"
    return f", compressed with method {method}"


def _record_facts(record: ZipRecord, data_offset: int) -> dict[str, Any]:
    return {
        "name": record.name,
        "offset": record.header_offset,
        "data_offset": data_offset,
        "size": record.file_size,
        "compressed_size": record.compress_size,
        "method": record.method,
        "crc32": record.crc32,
    }


def _small_value(
    source: ByteSource, record: ZipRecord, data_offset: int, prefix: str
) -> str | None:
    """The text of one of :data:`_SMALL_RECORDS`, stored uncompressed; else None."""
    from ckptctl.formats.pytorch._containers import MAX_TEXT_RECORD_BYTES

    short = record.name[len(prefix) :]
    if (
        record.method != 0
        or record.file_size > MAX_TEXT_RECORD_BYTES
        or short not in _SMALL_RECORDS
    ):
        return None
    data = bytes(source.buffer[data_offset : data_offset + record.compress_size])
    return data.decode("ascii", "replace").strip()


def _directory_regions(directory: ZipDirectory) -> list[Region]:
    """The central directory and the end records after it."""
    count = len(directory.records)
    note = f"zip central directory ({count} entries)"
    regions = [Region(RegionKind.HEADER, directory.cd_start, directory.cd_end, note=note)]
    if directory.zip64_end is not None:
        note = "zip64 end of central directory"
        regions.append(Region(RegionKind.HEADER, *directory.zip64_end, note=note))
    if directory.zip64_locator is not None:
        note = "zip64 end of central directory locator"
        regions.append(Region(RegionKind.HEADER, *directory.zip64_locator, note=note))
    regions.append(Region(RegionKind.HEADER, *directory.eocd, note="zip end of central directory"))
    return regions


def _main_pickle(source: ByteSource, pkl: ZipRecord, parsed: Parsed) -> dict[str, Any]:
    # the reader's unpickler saw every global as it resolved it: no second disassembly
    from ckptctl.formats.pytorch._zipdir import local_header

    head = _record_bytes(source, pkl, local_header(source, pkl))[:2]
    protocol = head[1] if head[:1] == b"\x80" else 0
    return {"protocol": protocol, "globals": list(dict.fromkeys(parsed.globals))}


def _record_bytes(source: ByteSource, record: ZipRecord, lengths: tuple[int, int]) -> bytes:
    if record.method != 0:
        from ckptctl.formats.pytorch._zipdir import ZipRecords

        return ZipRecords(source).read(record, MAX_PICKLE_BYTES)
    offset = record.header_offset + 30 + lengths[0] + lengths[1]
    if record.file_size > MAX_PICKLE_BYTES:
        raise CorruptCheckpointError(f"zip record {record.name!r} is too large")
    return source.read(offset, record.file_size)


def _alignment(source: ByteSource, records: list[ZipRecord], prefix: str) -> int:
    """The ``.storage_alignment`` record's value (torch >= 2.7), else torch's default 64."""
    from ckptctl.formats.pytorch._zipdir import local_header

    for record in records:
        if record.name == prefix + ".storage_alignment" and record.method == 0:
            n, m = local_header(source, record)
            text = source.read(record.header_offset + 30 + n + m, min(record.file_size, 16))
            if text.strip().isdigit() and 0 < int(text) <= 1 << 20:
                return int(text)
    return 64


def _extra_regions(extra: bytes, offset: int, alignment: int) -> list[Region]:
    """The local extra field: torch's ``FB`` padding, zip64 sizes, or anything else."""
    out: list[Region] = []
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        end = min(len(extra), pos + 4 + length)
        if tag == _FB_TAG:
            aligned = (offset + len(extra)) % alignment == 0
            note = (
                f"zip extra field padding the record data to a {alignment}-byte boundary"
                if aligned
                else "zip extra field padding (torch's FB alignment field)"
            )
            out.append(Region(RegionKind.PADDING, offset + pos, offset + end, note=note))
        elif tag == _ZIP64_TAG:
            out.append(
                Region(RegionKind.HEADER, offset + pos, offset + end, note="zip64 extra field")
            )
        else:
            out.append(
                Region(
                    RegionKind.HEADER,
                    offset + pos,
                    offset + end,
                    note=f"zip extra field 0x{tag:04x}",
                )
            )
        pos = end
    if pos < len(extra):
        out.append(
            Region(RegionKind.OTHER, offset + pos, offset + len(extra), note="zip extra field tail")
        )
    return out


def _descriptor_size(buf: memoryview, pos: int, nxt: int, record: ZipRecord) -> int:
    """Length of the data descriptor after a record's data (APPNOTE 4.3.9), 0 if none fits.

    The signature is optional, and the sizes are 8 bytes wide when zip64 applies, which a
    writer may decide from the local header alone: prefer the size that reaches the next
    structure exactly.
    """
    signed = 4 if bytes(buf[pos : pos + 4]) == b"PK\x07\x08" else 0
    wide = record.compress_size >= 0xFFFFFFFF or record.file_size >= 0xFFFFFFFF
    sizes = (20 + signed, 12 + signed) if wide else (12 + signed, 20 + signed)
    for size in sizes:
        if pos + size == nxt:
            return size
    return sizes[0] if pos + sizes[0] <= nxt else 0


# --- legacy stream, tar, plain pickle ----------------------------------------------------------


def _pickle_end(source: ByteSource, pos: int, limit: int, where: str) -> tuple[bytes, int]:
    """The bytes and end offset of the pickle starting at ``pos``."""
    chunk = 1 << 16
    while True:
        n = min(chunk, limit - pos)
        data = source.read(pos, n)
        try:
            end = scan_pickle(data, 0, where)
        except PickleTruncatedError:
            if pos + n >= limit or n >= MAX_PICKLE_BYTES:
                raise
            chunk *= 4
            continue
        return data[:end], pos + end


def _storage_run(
    parsed: Parsed, users: dict[str, tuple[str, list[str]]], lo: int, hi: int
) -> list[Region]:
    """Count + bytes regions of storages whose bytes lie in ``[lo, hi)``."""
    out: list[Region] = []
    for key, where in parsed.storages.items():
        start = where.file_offset
        if start is None or not lo + 8 <= start <= hi:
            continue
        out.append(
            Region(RegionKind.HEADER, start - 8, start, note=f"element count of storage {key}")
        )
        out.append(_storage_region(start, start + where.nbytes, key, users))
    return out


def _legacy_layout(
    source: ByteSource, parsed: Parsed, users: dict[str, tuple[str, list[str]]]
) -> tuple[dict[str, Any], list[Region]]:
    regions: list[Region] = []
    pos = 0
    labels = ("magic number", "protocol version", "sys_info", "object", "storage keys")
    summary: dict[str, Any] = {}
    for label in labels:
        data, end = _pickle_end(source, pos, source.size, f"the legacy {label} pickle")
        regions.append(Region(RegionKind.METADATA, pos, end, note=f"legacy stream {label} pickle"))
        if label == "object":
            summary = pickle_summary(data)
        pos = end
    storages = [
        {"key": key, "offset": s.file_offset, "nbytes": s.nbytes}
        for key, s in parsed.storages.items()
    ]
    regions += _storage_run(parsed, users, pos, source.size)
    header = {
        "container": "legacy",
        "protocol_version": 1001,
        "byteorder": parsed.byteorder,
        "pickle": summary,
        "storages": storages,
    }
    return header, regions


def _tar_layout(
    source: ByteSource, parsed: Parsed, users: dict[str, tuple[str, list[str]]]
) -> tuple[dict[str, Any], list[Region]]:
    import tarfile

    from ckptctl.formats.pytorch._containers import ViewReader

    regions: list[Region] = []
    members: list[dict[str, Any]] = []
    try:
        archive = tarfile.open(fileobj=ViewReader(source.buffer), mode="r:")  # noqa: SIM115  # a view
        infos = list(archive)
    except tarfile.TarError as exc:
        raise CorruptCheckpointError(f"corrupt tar archive: {exc}") from None
    end = 0
    summary: dict[str, Any] = {}
    for info in infos:
        start, data, size = info.offset, info.offset_data, info.size
        regions.append(Region(RegionKind.HEADER, start, data, note=f"tar header of {info.name!r}"))
        if info.name == "storages":
            inner = _storage_run(parsed, users, data, data + size)
            regions += inner
            pos = data
            for region in inner:  # the pickled headers between storages
                if region.start > pos:
                    regions.append(
                        Region(
                            RegionKind.METADATA,
                            pos,
                            region.start,
                            note="tar storages member pickles",
                        )
                    )
                pos = region.end
            if pos < data + size:
                regions.append(
                    Region(
                        RegionKind.METADATA, pos, data + size, note="tar storages member pickles"
                    )
                )
        elif size:
            regions.append(
                Region(RegionKind.METADATA, data, data + size, note=f"tar member {info.name!r}")
            )
            if info.name == "pickle":
                summary = pickle_summary(source.read(data, min(size, MAX_PICKLE_BYTES)))
        end = data + size
        padded = -(-end // _TAR_BLOCK) * _TAR_BLOCK
        if padded > end:
            regions.append(
                Region(RegionKind.PADDING, end, padded, note="tar block padding to 512 bytes")
            )
        end = padded
        members.append({"name": info.name, "offset": start, "data_offset": data, "size": size})
    if end < source.size:
        tail = source.view(end, source.size - end)
        if not any(tail):
            regions.append(
                Region(RegionKind.PADDING, end, source.size, note="tar end-of-archive blocks")
            )
    header = {"container": "tar", "members": members, "pickle": summary}
    return header, regions


def _plain_layout(source: ByteSource) -> tuple[dict[str, Any], list[Region]]:
    data, end = _pickle_end(source, 0, source.size, "the pickle")
    regions = [
        Region(RegionKind.METADATA, 0, end, note="pickle (storages pickled by value inside)")
    ]
    if end < source.size:
        regions.append(
            Region(RegionKind.OTHER, end, source.size, note="bytes after the end of the pickle")
        )
    return {"container": "pickle", "pickle": pickle_summary(data)}, regions

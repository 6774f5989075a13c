"""Opening Burn records lazily, loading their tensors, and the byte-level header view."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.errors import CorruptCheckpointError, UnsupportedError
from ckptctl.formats.burnrecord._json import TEXT_CHUNK_BYTES, parse_byte_text
from ckptctl.formats.burnrecord._msgpack import scan_msgpack
from ckptctl.formats.burnrecord._record import (
    METADATA_KEYS,
    Interpreted,
    RecordKind,
    TensorSpec,
    interpret,
)
from ckptctl.formats.burnrecord._stream import (
    FileCursor,
    GzipCursor,
    gzip_header_length,
)
from ckptctl.formats.burnrecord._tree import Blob, Node, Numbers, Scan
from ckptctl.model import (
    Checkpoint,
    ComputedData,
    FileData,
    HeaderLayout,
    Region,
    RegionKind,
    TensorData,
    TensorEntry,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import numpy as np
    from numpy.typing import NDArray

    from ckptctl.formats.burnrecord._stream import Cursor
    from ckptctl.model import JSONValue
    from ckptctl.sources import ByteSource


class BurnRecordCheckpoint(Checkpoint):
    """A checkpoint read from a Burn record, with what kind of record it is.

    Attributes:
        record_kind: model, optimizer or scheduler record.
        refusal: why the record cannot be written in burn 0.22's layout, or None.
    """

    record_kind: RecordKind = RecordKind.MODEL
    refusal: str | None = None


# --- bincode records: refused -------------------------------------------------------------


BIN_HINT = (
    "bincode records are not self-describing; load it with the burn version that wrote it and "
    "save it with NamedMpkFileRecorder, then convert that .mpk file"
)


def open_bin(source: ByteSource) -> Checkpoint:
    """Refuse a bincode record with the way out.

    Raises:
        UnsupportedError: always.
    """
    raise UnsupportedError(
        "is a Burn record written by BinFileRecorder (bincode), which cannot be read without "
        "the Rust types that wrote it",
        hint=BIN_HINT,
    )


def layout_bin(source: ByteSource) -> HeaderLayout:
    """Refuse a bincode record (see :func:`open_bin`)."""
    open_bin(source)
    raise AssertionError("unreachable")  # pragma: no cover


# --- tensor data -----------------------------------------------------------------------------


#: Distance between the saved decompressor states a backward read restarts from.
SEEK_MARK_BYTES = 256 * 1024 * 1024


class _GzipSource:
    """Reads decompressed byte ranges of a gzip file.

    Reads in file order stream forward. Going back restarts from the nearest saved decompressor
    state (one every ``SEEK_MARK_BYTES`` of the stream, each about a window's size), so reading
    tensors in another order costs at most that much extra inflating per tensor.
    """

    def __init__(self, source: ByteSource) -> None:
        self.source = source
        self._cursor: GzipCursor | None = None
        self._marks: dict[int, GzipCursor] = {}

    def _seek(self, offset: int) -> GzipCursor:
        cursor = self._cursor
        if cursor is None or offset < cursor.pos:
            below = [m for m in self._marks if m <= offset]
            cursor = self._marks[max(below)].snapshot() if below else GzipCursor(self.source)
        while True:
            mark = (cursor.pos // SEEK_MARK_BYTES + 1) * SEEK_MARK_BYTES
            if mark > offset:
                break
            cursor.skip(mark - cursor.pos)
            self._marks.setdefault(mark, cursor.snapshot())
        cursor.skip(offset - cursor.pos)
        self._cursor = cursor
        return cursor

    def read(self, offset: int, length: int) -> memoryview:
        cursor = self._seek(offset)
        out = bytearray(length)
        cursor.read_into(memoryview(out))
        return memoryview(out)

    def chunks(self, start: int, end: int) -> Iterator[bytes]:
        for pos in range(start, end, TEXT_CHUNK_BYTES):
            yield bytes(self.read(pos, min(TEXT_CHUNK_BYTES, end - pos)))


class _PlainSource:
    """Reads byte ranges of an uncompressed file with ``pread`` (no memory-map growth)."""

    def __init__(self, source: ByteSource) -> None:
        self.source = source

    def read(self, offset: int, length: int) -> memoryview:
        return memoryview(self.source.read(offset, length))

    def chunks(self, start: int, end: int) -> Iterator[bytes]:
        for pos in range(start, end, TEXT_CHUNK_BYTES):
            yield self.source.read(pos, min(TEXT_CHUNK_BYTES, end - pos))


@dataclass(frozen=True, eq=False)
class StreamData(TensorData):
    """A tensor payload inside a gzip stream: inflated into a buffer of its size on load."""

    reader: _GzipSource
    offset: int
    nbytes: int

    def read(self) -> memoryview:
        return self.reader.read(self.offset, self.nbytes)

    def read_range(self, start: int, length: int) -> bytes | memoryview:
        if start < 0 or length < 0 or start + length > self.nbytes:
            raise ValueError(f"range {start}+{length} outside a tensor of {self.nbytes} bytes")
        return self.reader.read(self.offset + start, length)


@dataclass(frozen=True, eq=False)
class JsonBytesData(TensorData):
    """A tensor payload written as a JSON array of byte values, parsed on load.

    The last parsed tensor is kept, so chunked passes (``read_range``) parse it once.
    """

    reader: _GzipSource | _PlainSource
    numbers: Numbers
    name: str
    _last: list[NDArray[np.uint8]] = field(default_factory=list)

    def _parse(self) -> NDArray[np.uint8]:
        if not self._last:
            text = self.reader.chunks(self.numbers.start + 1, self.numbers.end - 1)
            self._last.append(parse_byte_text(text, self.numbers.count, f"tensor {self.name!r}"))
        return self._last[0]

    def read(self) -> memoryview:
        data = self._parse()
        self._last.clear()  # one tensor at a time: the writer reads each once
        return data.data.cast("B")

    def read_range(self, start: int, length: int) -> bytes | memoryview:
        data = self._parse()
        view = data.data[start : start + length]
        if start + length >= len(data):
            self._last.clear()
        return view


def _u32_bools(inner: TensorData) -> Callable[[], NDArray[np.uint8]]:
    def compute() -> NDArray[np.uint8]:
        import numpy as np

        words = np.frombuffer(inner.read(), dtype="<u4")
        bools: NDArray[np.uint8] = (words != 0).astype(np.uint8)
        return bools

    return compute


def _entry(
    spec: TensorSpec, source: ByteSource, reader: _GzipSource | _PlainSource | None
) -> TensorEntry:
    payload = spec.payload
    offset: int | None = None
    data: TensorData
    if isinstance(payload, bytes):
        data = ComputedData(lambda raw=payload: raw)  # type: ignore[misc]  # bound default
    elif isinstance(payload, Numbers):
        assert reader is not None
        data = JsonBytesData(reader, payload, spec.name)
    elif reader is None:
        offset = payload.start
        data = FileData(source, payload.start, payload.length)
    else:
        assert isinstance(reader, _GzipSource)
        data = StreamData(reader, payload.start, payload.length)
    nbytes = math.prod(spec.shape) * spec.dtype.itemsize
    extra: dict[str, str] = {}
    if spec.itemsize != spec.dtype.itemsize:  # a u32 bool store: present canonical 0/1 bytes
        data = ComputedData(_u32_bools(data))
        offset = None
        extra["bool_store"] = "U32"
    return TensorEntry(
        name=spec.name,
        dtype=spec.dtype,
        shape=spec.shape,
        nbytes=nbytes,
        offset=offset,
        data=data,
        param_id=spec.param_id,
        source_dtype=spec.source_dtype,
        extra=extra,
    )


# --- opening ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Variant:
    name: str
    gzip: bool
    json: bool

    @property
    def recorder(self) -> str:
        return {
            "burn-mpk": "NamedMpkFileRecorder",
            "burn-mpk-gz": "NamedMpkGzFileRecorder",
            "burn-json": "PrettyJsonFileRecorder",
            "burn-json-gz": "JsonGzFileRecorder",
        }[self.name]


MPK = _Variant("burn-mpk", gzip=False, json=False)
MPK_GZ = _Variant("burn-mpk-gz", gzip=True, json=False)
JSON = _Variant("burn-json", gzip=False, json=True)
JSON_GZ = _Variant("burn-json-gz", gzip=True, json=True)

#: format name -> its variant (the registry, ``burnrecord/__init__.py``, names them)
VARIANTS = {v.name: v for v in (MPK, MPK_GZ, JSON, JSON_GZ)}


@dataclass
class _Parsed:
    scan: Scan
    record: Interpreted
    cursor: Cursor
    trailing: int  # bytes (decompressed, for gzip) after the record value


def _parse(source: ByteSource, variant: _Variant) -> _Parsed:
    cursor: Cursor = GzipCursor(source) if variant.gzip else FileCursor(source)
    scan = (
        _scan_json(cursor) if variant.json else scan_msgpack(cursor)
    )  # raises CorruptCheckpointError
    record = interpret(scan.root)
    trailing = cursor.remaining() if variant.gzip else source.size - scan.end
    if variant.json and trailing:
        raise CorruptCheckpointError(
            f"{trailing} bytes of text follow the JSON record at byte {scan.end}"
        )
    return _Parsed(scan, record, cursor, trailing)


def _scan_json(cursor: Cursor) -> Scan:
    from ckptctl.formats.burnrecord._json import scan_json

    return scan_json(cursor)


def _notes(variant: _Variant, parsed: _Parsed) -> list[str]:
    md = parsed.record.metadata
    version = md.get("version", "?")
    settings = md.get("settings", "?")
    notes = [
        f"Burn {parsed.record.kind} record written by burn {version} "
        f"({variant.recorder}, {settings}); burn >= 0.22 cannot read it: convert it to .bpk"
    ]
    if "Half" in settings:
        notes.append(
            "written with HalfPrecisionSettings: floats are stored as F16 (the cast:f32 adapter "
            "writes them back as F32)"
        )
    notes.extend(parsed.record.notes)
    if parsed.trailing:
        notes.append(f"{parsed.trailing} bytes after the record are ignored (burn ignores them)")
    if isinstance(parsed.cursor, GzipCursor) and parsed.cursor.trailing_compressed:
        notes.append(f"{parsed.cursor.trailing_compressed} bytes after the gzip stream are ignored")
    return notes


def open_record(source: ByteSource, variant: _Variant) -> BurnRecordCheckpoint:
    """Open a Burn record lazily: scan its structure, keep each payload's position.

    An uncompressed ``.mpk`` gives file-backed tensors (raw copies); gzip payloads are inflated
    one tensor at a time on load; JSON payloads are parsed one tensor at a time on load.

    Raises:
        CorruptCheckpointError: malformed, truncated, over a limit, or not what burn wrote.
        UnsupportedError: quantized tensors, the pre-0.14 tensor layout, UUID optimizer ids.
    """
    parsed = _parse(source, variant)
    reader: _GzipSource | _PlainSource | None = None
    if variant.gzip:
        reader = _GzipSource(source)
    elif variant.json:
        reader = _PlainSource(source)
    entries = [_entry(spec, source, reader) for spec in parsed.record.tensors]
    ckpt = BurnRecordCheckpoint(
        entries,
        path=source.path,
        format=variant.name,
        metadata={
            k: parsed.record.metadata[k] for k in METADATA_KEYS if k in parsed.record.metadata
        },
        scalars=parsed.record.scalars,
        notes=_notes(variant, parsed),
        sources=[source],
    )
    ckpt.record_kind = parsed.record.kind
    ckpt.refusal = parsed.record.refusal
    return ckpt


# --- header view -----------------------------------------------------------------------------


def _jsonable(node: Node, depth: int = 0) -> JSONValue:
    if isinstance(node, Blob):
        return f"<{node.length} bytes at {node.start}>"
    if isinstance(node, Numbers):
        return f"<{node.count} numbers at {node.start}>"
    if isinstance(node, dict):
        if depth > 32:
            return "..."
        return {k: _jsonable(v, depth + 1) for k, v in node.items()}
    if isinstance(node, list):
        if depth > 32:
            return "..."
        shown: list[JSONValue] = [_jsonable(v, depth + 1) for v in node[:64]]
        if len(node) > 64:
            shown.append(f"... {len(node) - 64} more")
        return shown
    return node


def _regions(parsed: _Parsed, size: int, what: str) -> list[Region]:
    """Regions tiling ``[0, size)`` of the (decompressed) record."""
    names = {
        (s.payload.start, s.name)
        for s in parsed.record.tensors
        if isinstance(s.payload, (Blob, Numbers))
    }
    by_start = dict(names)
    spans: list[tuple[int, int, RegionKind, str | None, str | None]] = []
    if parsed.scan.metadata_span is not None:
        start, end = parsed.scan.metadata_span
        spans.append((start, end, RegionKind.METADATA, None, "record metadata"))
    for payload in parsed.scan.payloads:
        name = by_start.get(payload.start)
        if name is not None:
            spans.append((payload.start, payload.end, RegionKind.TENSOR, name, None))
        else:
            spans.append((payload.start, payload.end, RegionKind.OTHER, None, "unused payload"))
    spans.sort()
    regions: list[Region] = []
    pos = 0
    for start, end, kind, name, note in spans:
        if start > pos:
            regions.append(Region(RegionKind.HEADER, pos, start, note=what))
        regions.append(Region(kind, start, end, name=name, note=note))
        pos = end
    if parsed.scan.end > pos:
        regions.append(Region(RegionKind.HEADER, pos, parsed.scan.end, note=what))
        pos = parsed.scan.end
    if size > pos:
        regions.append(Region(RegionKind.OTHER, pos, size, note="bytes after the record"))
    return regions


def _totals(regions: list[Region]) -> dict[str, int]:
    out = {"structure_bytes": 0, "metadata_bytes": 0, "tensor_bytes": 0, "other_bytes": 0}
    key = {
        RegionKind.HEADER: "structure_bytes",
        RegionKind.METADATA: "metadata_bytes",
        RegionKind.TENSOR: "tensor_bytes",
    }
    for r in regions:
        out[key.get(r.kind, "other_bytes")] += r.size
    return out


def layout_record(source: ByteSource, variant: _Variant) -> HeaderLayout:
    """Account for every byte of a record.

    Uncompressed: MessagePack/JSON structure (maps, keys, ids, shapes, dtypes) as ``header``
    regions, the record metadata as ``metadata``, each payload as a ``tensor`` region. Gzip: the
    regions cover the compressed file (gzip header, deflate stream, trailer) and ``facts`` give
    the same accounting of the decompressed record (``decompressed_regions``).

    Raises:
        CorruptCheckpointError: as :func:`open_record`.
        UnsupportedError: as :func:`open_record`.
    """
    parsed = _parse(source, variant)
    what = (
        "JSON structure: objects, keys, ids, shapes, dtypes"
        if variant.json
        else ("MessagePack structure: maps, keys, ids, shapes, dtypes")
    )
    header: dict[str, JSONValue] = {
        "recorder": variant.recorder,
        "encoding": "JSON" if variant.json else "MessagePack (rmp_serde, named)",
        "compression": "gzip" if variant.gzip else None,
        "record_kind": str(parsed.record.kind),
        "record": _jsonable(parsed.scan.root),
    }
    if not variant.gzip:
        regions = _regions(parsed, source.size, what)
        facts: dict[str, JSONValue] = {"record_kind": str(parsed.record.kind), **_totals(regions)}
        facts["tensor_count"] = len(parsed.record.tensors)
        return HeaderLayout(variant.name, source.size, header, tuple(regions), facts)
    cursor = parsed.cursor
    assert isinstance(cursor, GzipCursor)
    decompressed = cursor.pos
    inner = _regions(parsed, decompressed, what)
    head = gzip_header_length(source.read(0, min(source.size, 65536))) or 10
    member_end = cursor.compressed_consumed
    regions = [Region(RegionKind.HEADER, 0, head, note="gzip member header")]
    regions.append(
        Region(
            RegionKind.OTHER,
            head,
            member_end - 8,
            note=f"deflate stream: {decompressed} bytes of {variant.recorder} record",
        )
    )
    regions.append(
        Region(RegionKind.HEADER, member_end - 8, member_end, note="gzip trailer: CRC-32, size")
    )
    if source.size > member_end:
        regions.append(
            Region(RegionKind.OTHER, member_end, source.size, note="bytes after the gzip stream")
        )
    facts = {
        "record_kind": str(parsed.record.kind),
        "compressed_bytes": source.size,
        "decompressed_bytes": decompressed,
        **_totals(inner),
        "tensor_count": len(parsed.record.tensors),
        "decompressed_regions": [
            {"kind": str(r.kind), "start": r.start, "end": r.end}
            | ({"name": r.name} if r.name is not None else {})
            | ({"note": r.note} if r.note is not None else {})
            for r in inner
        ],
    }
    return HeaderLayout(variant.name, source.size, header, tuple(regions), facts)

"""Opening ONNX models lazily, and the byte-level view of the protobuf."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from ckptctl.errors import CorruptCheckpointError, TruncatedError, UnsupportedError
from ckptctl.formats.onnx import _schema as s
from ckptctl.formats.onnx._data import (
    ExternalFiles,
    external_data,
    packed_4bit,
    stored_nbytes,
    typed_data,
)
from ckptctl.formats.onnx._parse import ModelParser, ParsedModel, TensorInfo
from ckptctl.formats.onnx._truncated import TRUNCATED_HINT, Cut, find_cut
from ckptctl.formats.onnx._wire import LEN, Field, WireReader, corrupt
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
    from ckptctl.dtypes import DType
    from ckptctl.model import JSONValue
    from ckptctl.sources import ByteSource

#: The state keys that select one kind of tensor (``--state-key initializers``).
VIEWS = ("initializers", "constants")


def _dtype(info: TensorInfo) -> DType:
    onnx_name, dtype = s.DATA_TYPES.get(info.data_type, (None, None))
    if dtype is None:
        what = onnx_name or f"code {info.data_type}"
        raise UnsupportedError(
            f"{info.kind} {info.name!r} has the ONNX data type {what}, which ckptctl cannot "
            "represent (no safetensors dtype holds it)"
        )
    return dtype


def _storage(info: TensorInfo) -> str:
    if info.location_external:
        return "external"
    if info.raw is not None:
        return "raw_data"
    if info.inline is not None:
        return "attribute"
    number = s.STORAGE_FIELD.get(info.data_type)
    return s.TYPED_FIELDS.get(number or 0, "none") if info.typed.get(number or 0) else "none"


def _data(
    source: ByteSource, info: TensorInfo, dtype: DType, files: ExternalFiles
) -> tuple[TensorData, int]:
    """The tensor's data as stored (packed for 4-bit types) and its size in bytes."""
    stored = stored_nbytes(info, dtype)
    if info.location_external:
        return external_data(info, files, stored), stored
    if info.raw is not None:
        start, end = info.raw
        if end - start != stored:
            corrupt(
                f"{info.kind} {info.name!r} has shape {list(info.dims)} of "
                f"{s.DATA_TYPES[info.data_type][0]} ({stored} bytes) but its raw_data at byte "
                f"{start} holds {end - start} bytes"
            )
        return FileData(source, start, stored), stored
    if info.inline is not None:
        inline = info.inline
        return ComputedData(lambda: inline), len(inline)
    if info.numel == 0:
        return ComputedData(lambda: b""), 0
    return typed_data(source, info, dtype)


def _entry(source: ByteSource, info: TensorInfo, files: ExternalFiles) -> TensorEntry:
    if not info.name:
        corrupt(f"an {info.kind} at byte {info.at} has no name")
    dtype = _dtype(info)
    data, nbytes = _data(source, info, dtype, files)
    extra = {"onnx_kind": info.kind, "onnx_storage": _storage(info)}
    if info.location_external:
        keys = dict(info.external or [])
        extra["location"] = keys.get("location", "")
        if "checksum" in keys:  # checked by verify (onnx-checksum)
            extra["checksum"] = keys["checksum"]
    if info.data_type in s.PACKED_4BIT:
        extra["onnx_dtype"] = s.DATA_TYPES[info.data_type][0]
        data, nbytes = packed_4bit(info, data), info.numel
    offset = info.raw[0] if info.raw is not None and not info.location_external else None
    return TensorEntry(
        name=info.name,
        dtype=dtype,
        shape=info.dims,
        nbytes=nbytes,
        offset=offset if isinstance(data, FileData) else None,
        data=data,
        extra=extra,
    )


def _notes(model: ParsedModel, entries: list[TensorEntry]) -> list[str]:
    notes = []
    constants = sum(1 for e in entries if e.extra["onnx_kind"] == "constant")
    if constants:
        notes.append(
            f"{len(entries) - constants} initializers and {constants} Constant node values "
            "(named by the node's output); --state-key initializers selects the initializers"
        )
    strings = [t.name for t in model.tensors if t.data_type == s.STRING]
    if strings:
        notes.append(f"{len(strings)} string tensors are not listed: {', '.join(strings[:5])}")
    if model.sparse:
        notes.append(f"{model.sparse} sparse initializers are not listed")
    if model.skipped_constants:
        shown = ", ".join(model.skipped_constants[:5])
        notes.append(f"Constant nodes without a tensor value (not listed): {shown}")
    packed = [e.name for e in entries if "onnx_dtype" in e.extra]
    if packed:
        notes.append(
            f"{len(packed)} INT4/UINT4 tensors (packed two to a byte) are read as I8/U8, one "
            f"byte per element: {', '.join(packed[:5])}"
        )
    return notes


def _parse(source: ByteSource, *, show_layout: bool = False) -> ParsedModel:
    """The whole model; a file that ends inside a field raises ``TruncatedError`` at the cut,
    carrying the layout of the fields before it when ``show_layout``."""
    try:
        return ModelParser(source).parse()
    except CorruptCheckpointError:
        cut = find_cut(WireReader(source), 0, source.size)
        if cut is None:
            raise
        error = _truncated(source, cut)
        if show_layout:
            with contextlib.suppress(CorruptCheckpointError):  # else no layout to show
                error.layout = _damaged_layout(source, cut)
        raise error from None


def open_onnx(source: ByteSource) -> Checkpoint:
    """Open an ONNX model lazily: walk the protobuf, read no tensor bytes.

    Args:
        source: the ``.onnx`` file; the returned checkpoint owns and closes it, and the
            external data files it opens.

    Returns:
        Initializers, then Constant values, each in file order; INT4/UINT4 tensors read as
        I8/U8, one byte per element.

    Raises:
        CorruptCheckpointError: a malformed protobuf, a limit exceeded, sizes that disagree
            (``TruncatedError``: the file ends inside a field).
        UnsafePickleError: an external-data location outside the model's folder.
        UnsupportedError: a tensor whose data type ckptctl cannot represent.
    """
    model = _parse(source)
    files = ExternalFiles(source)
    try:
        listed = [t for t in model.tensors if t.data_type != s.STRING]
        entries = [_entry(source, t, files) for t in listed]
        entries.sort(key=lambda e: e.extra["onnx_kind"] != "initializer")  # stable
        notes = _notes(model, entries)
        views = {
            "initializers": lambda: [e for e in entries if e.extra["onnx_kind"] == "initializer"],
            "constants": lambda: [e for e in entries if e.extra["onnx_kind"] == "constant"],
        }
        return Checkpoint(
            entries,
            path=source.path,
            format="onnx",
            metadata=model.metadata,
            notes=notes,
            sources=[source, *files.opened.values()],
            views=views,
        )
    except BaseException:
        files.close()
        raise


# --- header: every byte of the protobuf ------------------------------------------------------


def _graph_spans(wire: WireReader, start: int, end: int) -> list[Region]:
    """The graph's fields, consecutive ones of the same number as one region."""
    runs: list[Region] = []
    number, count = -1, 0
    for f in wire.fields(start, end):
        if runs and f.number == number:
            count += 1
            label = s.GRAPH_FIELDS.get(number, f"field {number}")
            runs[-1] = Region(
                RegionKind.HEADER, runs[-1].start, f.end, note=f"graph.{label} x{count}"
            )
            continue
        number, count = f.number, 1
        label = s.GRAPH_FIELDS.get(number, f"field {number}")
        runs.append(Region(RegionKind.HEADER, f.key_start, f.end, note=f"graph.{label} x1"))
    return runs


def _model_spans(source: ByteSource, end: int) -> list[Region]:
    """The regions of the model's fields before byte ``end`` (all of them: the file's size)."""
    wire = WireReader(source)
    spans: list[Region] = []
    for f in wire.fields(0, end):
        label = s.MODEL_FIELDS.get(f.number, f"field {f.number}")
        if f.number == s.MODEL_GRAPH and f.wire == LEN:
            spans.append(Region(RegionKind.HEADER, f.key_start, f.start, note="graph: key, length"))
            spans.extend(_graph_spans(wire, f.start, f.end))
        else:
            spans.append(Region(RegionKind.METADATA, f.key_start, f.end, note=f"model.{label}"))
    return spans


def _cut(spans: list[Region], payloads: list[tuple[int, int, str]]) -> list[Region]:
    """``spans`` with each payload (which lies inside one span) cut out as a tensor region."""
    out: list[Region] = []
    queue = iter(payloads)
    pending = next(queue, None)
    for span in spans:
        pos = span.start
        while pending is not None and pending[0] < span.end:
            start, end, name = pending
            if start > pos:
                out.append(Region(span.kind, pos, start, note=span.note))
            out.append(Region(RegionKind.TENSOR, start, end, name=name, note="raw_data"))
            pos = end
            pending = next(queue, None)
        if span.end > pos:
            out.append(Region(span.kind, pos, span.end, note=span.note))
    return out


def _header_json(model: ParsedModel) -> dict[str, JSONValue]:
    tensors: list[JSONValue] = [
        {
            "name": t.name,
            "kind": t.kind,
            "data_type": s.DATA_TYPES.get(t.data_type, (str(t.data_type), None))[0],
            "dims": list(t.dims),
            "storage": _storage(t),
            **({"external_data": dict(t.external or [])} if t.location_external else {}),
        }
        for t in model.tensors
    ]
    return {"metadata": dict(model.metadata), "tensors": tensors}


def layout_onnx(source: ByteSource) -> HeaderLayout:
    """Account for every byte of an ONNX file: each inline ``raw_data`` payload of a listed
    tensor as a tensor region at its exact range, the rest by protobuf field (the model's own
    fields as metadata, the graph's fields as header, runs of one field as one region).

    Raises:
        CorruptCheckpointError: a malformed protobuf (unknown data types are shown, not refused).
        TruncatedError: the file ends inside a field; its ``layout`` shows the fields before.
    """
    model = _parse(source, show_layout=True)
    return _layout(source, model, _model_spans(source, source.size))


def _layout(source: ByteSource, model: ParsedModel, spans: list[Region]) -> HeaderLayout:
    payloads = sorted(
        (t.raw[0], t.raw[1], t.name)
        for t in model.tensors
        if t.raw is not None and not t.location_external
    )
    regions = _cut(spans, payloads)
    inline = sum(end - start for start, end, _ in payloads)
    external = sum(1 for t in model.tensors if t.location_external)
    return HeaderLayout(
        format="onnx",
        file_size=source.size,
        header=_header_json(model),
        regions=tuple(regions),
        facts={
            "tensors": len(model.tensors),
            "initializers": sum(1 for t in model.tensors if t.kind == "initializer"),
            "constants": sum(1 for t in model.tensors if t.kind == "constant"),
            "raw_data_bytes": inline,
            "external_tensors": external,
            "graphs": model.graphs,
        },
    )


# --- truncated files -------------------------------------------------------------------------


def _field_name(prefix: str, names: dict[int, str], number: int | None) -> str:
    if number is None:
        return f"a {prefix} field's key"
    return f"{prefix}.{names.get(number, f'field {number}')}"


def _truncated(source: ByteSource, cut: Cut) -> TruncatedError:
    what = _field_name("model", s.MODEL_FIELDS, cut.number)
    message = f"the file ends at byte {source.size}, inside {what} at byte {cut.key_start}"
    if cut.declared_end is not None:
        missing = cut.declared_end - source.size
        message += f", which declares {cut.declared_end - cut.key_start} bytes ({missing} missing)"
    return TruncatedError(message, hint=TRUNCATED_HINT)


def _damaged_layout(source: ByteSource, cut: Cut) -> HeaderLayout:
    """The layout of a truncated file: its whole fields, those of a cut graph included, then
    one region from the field the file ends inside to its end."""
    size = source.size
    parser = ModelParser(source)
    parser.parse(end=cut.key_start)
    spans = _model_spans(source, cut.key_start)
    if cut.number == s.MODEL_GRAPH and cut.start is not None:
        wire = WireReader(source)
        inner = find_cut(wire, cut.start, size)
        end = size if inner is None else inner.key_start
        parser.graph(Field(cut.number, LEN, cut.key_start, cut.start, end), 0)
        note = f"graph: key, length; {cut.present(size)}"
        spans.append(Region(RegionKind.HEADER, cut.key_start, cut.start, note=note))
        spans.extend(_graph_spans(wire, cut.start, end))
        if inner is not None:
            note = f"{_field_name('graph', s.GRAPH_FIELDS, inner.number)}, {inner.present(size)}"
            spans.append(Region(RegionKind.HEADER, inner.key_start, size, note=note))
    else:
        note = f"{_field_name('model', s.MODEL_FIELDS, cut.number)}, {cut.present(size)}"
        spans.append(Region(RegionKind.METADATA, cut.key_start, size, note=note))
    return _layout(source, parser.model, spans)

"""Opening burnpack files lazily, and the byte-level header view."""

from __future__ import annotations

import json
import math
from functools import partial
from typing import TYPE_CHECKING

from ckptctl.dtypes import DType
from ckptctl.errors import TruncatedError
from ckptctl.formats.burnpack._parse import ParsedTensor, parse_file
from ckptctl.formats.burnpack._schema import (
    ALIGNMENT_BYTES,
    HEADER_BYTES,
    MAGIC,
    MAX_CBOR_DEPTH,
    PLAIN_DTYPES,
    describe,
)
from ckptctl.model import (
    Checkpoint,
    ComputedData,
    FileData,
    HeaderLayout,
    Region,
    RegionKind,
    TensorEntry,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ckptctl.model import JSONValue
    from ckptctl.sources import ByteSource


def _read_u32_bools(source: ByteSource, offset: int, count: int) -> NDArray[np.uint8]:
    """A u32 bool store as canonical 0/1 bytes (non-zero is true)."""
    import numpy as np

    words = np.frombuffer(source.view(offset, count * 4), dtype="<u4")
    bools: NDArray[np.uint8] = (words != 0).astype(np.uint8)
    return bools


def _entry(source: ByteSource, t: ParsedTensor, data_start: int) -> TensorEntry:
    offset = data_start + t.start
    raw = t.raw_dtype
    source_dtype = None if isinstance(raw, str) and raw in PLAIN_DTYPES else raw
    if t.itemsize is None:  # quantized: the opaque payload as a U8 vector
        ((_, scheme),) = raw.items()
        value = scheme.get("value")
        return TensorEntry(
            name=t.name,
            dtype=DType.U8,
            shape=(t.length,),
            nbytes=t.length,
            offset=offset,
            data=FileData(source, offset, t.length),
            param_id=t.param_id,
            source_dtype=source_dtype,
            extra={
                "quantized": value if isinstance(value, str) else "unknown",
                "logical_shape": json.dumps(list(t.shape)),
            },
        )
    if t.dtype is DType.BOOL and t.itemsize == 4:
        numel = math.prod(t.shape)
        return TensorEntry(
            name=t.name,
            dtype=DType.BOOL,
            shape=t.shape,
            nbytes=numel,
            offset=None,  # the canonical bytes are computed, not in the file
            data=ComputedData(partial(_read_u32_bools, source, offset, numel)),
            param_id=t.param_id,
            source_dtype=source_dtype,
            extra={"bool_store": "U32"},
        )
    return TensorEntry(
        name=t.name,
        dtype=t.dtype,
        shape=t.shape,
        nbytes=t.length,
        offset=offset,
        data=FileData(source, offset, t.length),
        param_id=t.param_id,
        source_dtype=source_dtype,
    )


def _quantized_note(entry: TensorEntry) -> str:
    scheme = entry.source_dtype["QFloat"]
    # burn 0.19 - 0.22.0-pre.2 wrote `param`/`level`; current burn silently misreads those
    # (docs/formats/burnpack.md#dtypes)
    era = "; scheme in the burn 0.19-0.22.0-pre.2 form" if {"param", "level"} & set(scheme) else ""
    return (
        f"tensor {entry.name!r} is quantized ({entry.extra['quantized']}, shape "
        f"{entry.extra['logical_shape']}); listed as its opaque payload bytes (U8){era}"
    )


def open_burnpack(source: ByteSource) -> Checkpoint:
    """Open a burnpack file lazily: validate header and metadata, read no tensor bytes.

    Args:
        source: the file; the returned checkpoint owns and closes it.

    Returns:
        A checkpoint with entries in data (write) order, metadata, scalars and notes.

    Raises:
        CorruptCheckpointError: bad magic, header, CBOR, descriptor, limit or byte range.
        UnsupportedError: format version > 1 or an unknown dtype.
    """
    parsed = parse_file(source)
    notes = list(parsed.notes)
    entries = [_entry(source, t, parsed.data_start) for t in parsed.tensors]
    notes.extend(_quantized_note(e) for e in entries if "quantized" in e.extra)
    return Checkpoint(
        entries,
        path=source.path,
        format="burnpack",
        metadata=parsed.metadata,
        scalars=parsed.scalars,
        notes=notes,
        sources=[source],
    )


def _jsonable(value: object, depth: int = 0) -> JSONValue:
    """Decoded CBOR as JSON-like data; bounded, because value-sharing tags can make cycles."""
    if depth > MAX_CBOR_DEPTH:
        return "..."
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {
            k if isinstance(k, str) else repr(k): _jsonable(v, depth + 1) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    return describe(value)


def _is_zero(source: ByteSource, start: int, end: int) -> bool:
    import numpy as np

    return not np.any(np.frombuffer(source.view(start, end - start), dtype=np.uint8))


def layout_burnpack(source: ByteSource) -> HeaderLayout:
    """Decode the header and CBOR metadata and account for every byte of the file.

    Regions, in order: header (10), metadata (N), padding to the aligned data section, then each
    tensor in data order with the padding before it, then any trailing bytes.

    Raises:
        CorruptCheckpointError: as :func:`open_burnpack` (unknown dtypes are shown, not refused).
        UnsupportedError: format version > 1.
    """
    p = parse_file(source, lenient=True, truncated_ok=True)
    size = source.size
    short: list[str] = []
    unpadded = HEADER_BYTES + p.metadata_length
    regions = [
        Region(RegionKind.HEADER, 0, HEADER_BYTES, note=f"magic NRUB, version {p.version}"),
        Region(RegionKind.METADATA, HEADER_BYTES, unpadded, note="CBOR map"),
    ]
    pos = unpadded
    if p.data_start > unpadded:
        pos = min(p.data_start, size)
        regions.append(
            Region(
                RegionKind.PADDING,
                unpadded,
                pos,
                note="zero padding to the 256-byte aligned data section",
            )
        )
    for t in p.tensors:
        start = p.data_start + t.start
        gap_end = min(start, size)  # a truncated file may end before the tensor starts
        if gap_end > pos:
            zero = _is_zero(source, pos, gap_end)
            if zero and start - pos < ALIGNMENT_BYTES and not p.legacy:
                note = f"alignment of {t.name!r} to {ALIGNMENT_BYTES} bytes"
                regions.append(Region(RegionKind.PADDING, pos, gap_end, note=note))
            else:
                note = f"{gap_end - pos} unused bytes before tensor {t.name!r}"
                kind = RegionKind.PADDING if zero else RegionKind.OTHER
                regions.append(Region(kind, pos, gap_end, note=note))
        end = start + t.length
        if end > size:
            short.append(t.name)
            if start < size:
                note = f"truncated: {size - start} of {t.length} bytes present"
                regions.append(Region(RegionKind.TENSOR, start, size, name=t.name, note=note))
            pos = size
            continue
        regions.append(Region(RegionKind.TENSOR, start, end, name=t.name))
        pos = max(pos, end)
    if pos < size:
        if _is_zero(source, pos, size):
            regions.append(Region(RegionKind.PADDING, pos, size, note="trailing zero bytes"))
        else:
            regions.append(
                Region(RegionKind.OTHER, pos, size, note="trailing bytes after the data section")
            )

    def total(kind: str) -> int:
        return sum(r.size for r in regions if r.kind == kind)

    result = HeaderLayout(
        format="burnpack",
        file_size=size,
        header={
            "magic": MAGIC.decode("ascii"),
            "version": p.version,
            "metadata_length": p.metadata_length,
            "cbor": _jsonable(p.decoded),
        },
        regions=tuple(regions),
        facts={
            "layout": "unaligned-0.19" if p.legacy else "aligned",
            "data_start": p.data_start,
            "alignment": 1 if p.legacy else ALIGNMENT_BYTES,
            "metadata_bytes": p.metadata_length,
            "tensor_count": len(p.tensors),
            "tensor_bytes": total("tensor"),
            "padding_bytes": total("padding"),
            "other_bytes": total("other"),
        },
    )
    if short:
        error = TruncatedError(
            f"{len(short)} tensor{'s' if len(short) != 1 else ''} run past the end of the file "
            f"({size} bytes), {short[-1]!r} among them",
            hint="the file looks truncated; re-download or re-save it",
        )
        error.layout = result
        raise error
    return result

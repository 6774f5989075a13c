"""Opening GGUF files (one, or the parts of a split model) lazily, and their byte layout."""

from __future__ import annotations

import json
import os
import re
from functools import partial
from typing import TYPE_CHECKING, Any

from ckptctl.dtypes import DType
from ckptctl.errors import CkptError, CorruptCheckpointError, InputError, UnsupportedError
from ckptctl.formats.gguf._kv import StoredValue
from ckptctl.formats.gguf._parse import (
    FIXED_HEADER_BYTES,
    ParsedGGUF,
    TensorInfo,
    parse_gguf,
)
from ckptctl.formats.gguf._values import metadata_text, summarize
from ckptctl.model import (
    STORED_TYPE,
    Checkpoint,
    ComputedData,
    FileData,
    HeaderLayout,
    Region,
    RegionKind,
    Sharding,
    TensorData,
    TensorEntry,
)
from ckptctl.sources import open_source

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ckptctl.sources import ByteSource

#: A split model's part names (llama.cpp's ``gguf-split``): ``NAME-00001-of-00003.gguf``.
SPLIT_NAME = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
#: Most parts a split model may have (gguf-split numbers them with five digits).
MAX_SPLITS = 99_999
#: ``TensorEntry.extra`` key set (to ``"big"``) on the block-quantized tensors of a big-endian
#: file: their blocks' fields are in that byte order, which the GGUF writer does not swap.
BYTE_ORDER = "byte_order"


class _Undecodable(TensorData):
    """The bytes of a tensor of a GGML type ckptctl does not know: never read or decoded."""

    def __init__(self, what: str) -> None:
        self.what = what

    def read(self) -> memoryview:
        raise UnsupportedError(f"{self.what}: its bytes cannot be decoded or copied")


def _byteswapped(source: ByteSource, offset: int, nbytes: int, dtype: DType) -> NDArray[Any]:
    import numpy as np

    raw = np.frombuffer(source.view(offset, nbytes), dtype=dtype.numpy.newbyteorder(">"))
    swapped: NDArray[Any] = raw.astype(dtype.numpy)
    return swapped


def _entry(source: ByteSource, parsed: ParsedGGUF, info: TensorInfo) -> TensorEntry:
    offset = parsed.data_start + info.offset
    nbytes = parsed.spans[info.name]
    known = info.ggml
    if known is not None and known.plain is not None:
        if parsed.big_endian and known.plain.itemsize > 1:
            data: TensorData = ComputedData(
                partial(_byteswapped, source, offset, nbytes, known.plain)
            )
            return TensorEntry(info.name, known.plain, info.shape, nbytes, None, data)
        return TensorEntry(
            info.name, known.plain, info.shape, nbytes, offset, FileData(source, offset, nbytes)
        )
    extra = {STORED_TYPE: info.type_name, "logical_shape": json.dumps(list(info.shape))}
    if known is None:
        what = f"tensor {info.name!r} has GGML {info.type_name}, unknown to ckptctl"
        return TensorEntry(
            info.name, DType.U8, (nbytes,), nbytes, None, _Undecodable(what), extra=extra
        )
    extra["quantized"] = known.name
    if parsed.big_endian:
        extra[BYTE_ORDER] = "big"
    return TensorEntry(
        info.name,
        DType.U8,
        (nbytes,),
        nbytes,
        offset,
        FileData(source, offset, nbytes),
        source_dtype=known.name,
        extra=extra,
    )


def _notes(parsed: ParsedGGUF, path: str) -> list[str]:
    notes = []
    if parsed.big_endian:
        notes.append("big-endian GGUF: plain tensors are byte-swapped when read")
    unknown = [t for t in parsed.tensors if t.ggml is None]
    notes.extend(
        f"tensor {t.name!r} has {t.type_name}, unknown to ckptctl: listed, never decoded"
        for t in unknown[:5]
    )
    quantized = sum(1 for t in parsed.tensors if t.ggml is not None and t.ggml.quantized)
    if quantized:
        notes.append(
            f"{quantized} tensor{'s are' if quantized != 1 else ' is'} block-quantized: dtype "
            "is the GGML type, shape the logical one, nbytes the stored blocks"
        )
    if parsed.tensors and parsed.data_start > parsed.size:
        notes.append(f"{os.path.basename(path)}: the data section starts past the file's end")
    return notes


def _one(source: ByteSource) -> tuple[ParsedGGUF, list[TensorEntry]]:
    parsed = parse_gguf(source)
    return parsed, [_entry(source, parsed, t) for t in parsed.tensors]


def open_gguf(source: ByteSource) -> Checkpoint:
    """Open a GGUF file lazily: its header is parsed and checked, no tensor bytes are read.

    A part of a split model (``NAME-00002-of-00003.gguf``, with ``split.*`` keys) opens every
    part, as one checkpoint: the first part's key/values, every part's tensors in order.

    Raises:
        CorruptCheckpointError: a header the file cannot hold (see ``_parse``), a missing part.
        UnsupportedError: a GGUF version other than 2 or 3.
    """
    parsed, entries = _one(source)
    split = _split_names(source.path, parsed)
    if split is None:
        return _checkpoint(source.path, [source], [parsed], entries, None)
    sources: list[ByteSource] = []
    parts: list[ParsedGGUF] = []
    everything: list[TensorEntry] = []
    try:
        for name in split:
            part = source if name == source.path else _open_part(name, source.path)
            sources.append(part)
            got, found = (parsed, entries) if part is source else _one_checked(part)
            parts.append(got)
            everything.extend(found)
    except BaseException:
        for part in sources:
            if part is not source:
                part.close()
        raise
    sharding = Sharding(split[0], tuple(os.path.basename(n) for n in split))
    return _checkpoint(source.path, sources, parts, everything, sharding)


def _one_checked(part: ByteSource) -> tuple[ParsedGGUF, list[TensorEntry]]:
    try:
        return _one(part)
    except CkptError as exc:
        raise exc.with_path(part.path) from None


def _open_part(name: str, given: str) -> ByteSource:
    try:
        return open_source(name)
    except InputError as exc:
        raise CorruptCheckpointError(
            f"part {os.path.basename(name)} of the split model is missing or unreadable "
            f"({exc.message})",
            path=given,
            hint="download every part of the model into one folder",
        ) from None


def _checkpoint(
    path: str,
    sources: list[ByteSource],
    parts: list[ParsedGGUF],
    entries: list[TensorEntry],
    sharding: Sharding | None,
) -> Checkpoint:
    first = parts[0]
    metadata = {kv.key: metadata_text(kv) for kv in first.kvs}
    summary = {
        kv.key: short
        for kv in first.kvs
        if (short := summarize(kv)) is not None and short != metadata[kv.key]
    }
    notes = [n for part, src in zip(parts, sources, strict=True) for n in _notes(part, src.path)]
    return Checkpoint(
        entries,
        path=path,
        format="gguf",
        metadata=metadata,
        metadata_summary=summary,
        typed_metadata={kv.key: StoredValue(kv, sources[0], first.big_endian) for kv in first.kvs},
        notes=list(dict.fromkeys(notes)),
        sharding=sharding,
        sources=sources,
    )


def _split_names(path: str, parsed: ParsedGGUF) -> list[str] | None:
    """Every part's path when ``path`` names a part of a split model, else None."""
    match = SPLIT_NAME.match(os.path.basename(path))
    count_kv = next((kv for kv in parsed.kvs if kv.key == "split.count"), None)
    if match is None or count_kv is None:
        return None
    count = int(match["count"])
    if count_kv.value != count or not 1 <= int(match["no"]) <= count <= MAX_SPLITS:
        raise CorruptCheckpointError(
            f"the name says part {int(match['no'])} of {count}, but split.count is "
            f"{count_kv.value}",
            hint="the parts were renamed or mixed up; restore gguf-split's names",
        )
    folder = path[: len(path) - len(os.path.basename(path))]
    return [f"{folder}{match['stem']}-{n:05d}-of-{count:05d}.gguf" for n in range(1, count + 1)]


# --- header: every byte accounted for ---------------------------------------------------------


def _is_zero(source: ByteSource, start: int, end: int) -> bool:
    import numpy as np

    return not np.any(np.frombuffer(source.view(start, end - start), dtype=np.uint8))


def _gap(source: ByteSource, start: int, end: int, alignment: int, before: str) -> Region:
    zero = _is_zero(source, start, end)
    if zero and end - start < alignment:
        return Region(RegionKind.PADDING, start, end, note=f"alignment of {before} to {alignment}")
    kind = RegionKind.PADDING if zero else RegionKind.OTHER
    return Region(kind, start, end, note=f"{end - start} unused bytes before {before}")


def layout_gguf(source: ByteSource) -> HeaderLayout:
    """Decode the header and account for every byte of one GGUF file.

    Regions, in order: the fixed header (magic, version, counts), each key/value, each tensor
    info, padding to the aligned data section (only as far as the file goes: a vocab-only file
    may end before it), each tensor in offset order with the padding before it, trailing bytes.

    Raises:
        CorruptCheckpointError: as :func:`open_gguf`.
        UnsupportedError: a GGUF version other than 2 or 3.
    """
    p = parse_gguf(source)
    order = "big-endian" if p.big_endian else "little-endian"
    regions = [
        Region(
            RegionKind.HEADER,
            0,
            FIXED_HEADER_BYTES,
            note=f"magic GGUF, version {p.version} ({order}), {len(p.tensors)} tensors, "
            f"{len(p.kvs)} key/values",
        ),
        *(Region(RegionKind.METADATA, kv.start, kv.end, note=kv.key) for kv in p.kvs),
        *(
            Region(RegionKind.HEADER, t.start, t.end, note=f"tensor info of {t.name!r}")
            for t in p.tensors
        ),
    ]
    pos = p.info_end
    if min(p.data_start, p.size) > pos:
        end = min(p.data_start, p.size)
        regions.append(_gap(source, pos, end, p.alignment, "the data section"))
        pos = end
    for t in sorted(p.tensors, key=lambda t: t.offset):
        start = p.data_start + t.offset
        if start > pos:
            regions.append(_gap(source, pos, start, p.alignment, f"tensor {t.name!r}"))
        end = start + p.spans[t.name]
        regions.append(Region(RegionKind.TENSOR, start, end, name=t.name, note=t.type_name))
        pos = max(pos, end)
    if pos < p.size:
        kind = RegionKind.PADDING if _is_zero(source, pos, p.size) else RegionKind.OTHER
        regions.append(Region(kind, pos, p.size, note="trailing bytes after the data section"))
    return HeaderLayout(
        format="gguf",
        file_size=p.size,
        header={
            "magic": "GGUF",
            "version": p.version,
            "byte_order": order,
            "tensor_count": len(p.tensors),
            "kv_count": len(p.kvs),
            "metadata": {kv.key: summarize(kv) or metadata_text(kv) for kv in p.kvs},
            "tensors": [
                {"name": t.name, "type": t.type_name, "ne": list(t.ne), "offset": t.offset}
                for t in p.tensors
            ],
        },
        regions=tuple(regions),
        facts={
            "alignment": p.alignment,
            "data_start": p.data_start,
            "tensor_count": len(p.tensors),
            "tensor_bytes": sum(r.size for r in regions if r.kind == RegionKind.TENSOR),
            "padding_bytes": sum(r.size for r in regions if r.kind == RegionKind.PADDING),
            "other_bytes": sum(r.size for r in regions if r.kind == RegionKind.OTHER),
            "llama_cpp_problems": list(p.llama_cpp_problems),
        },
    )

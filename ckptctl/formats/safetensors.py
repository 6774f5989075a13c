"""safetensors: an 8-byte header length, a JSON header, then one contiguous data section.

Format notes: ``docs/formats/safetensors.md``.

Byte layout (https://github.com/huggingface/safetensors, ``safetensors/src/tensor.rs``)::

    0        8                    8+N                                   file end
    | u64 N  | JSON header (N bytes) | data: tensor bytes back to back     |
      little                          data_offsets are relative to 8+N
      endian

The header is a UTF-8 JSON object. Each key is a tensor name mapped to
``{"dtype": "F32", "shape": [2, 3], "data_offsets": [start, end]}``; the optional key
``"__metadata__"`` maps strings to strings. Writers pad the header with spaces so that 8+N is a
multiple of 8; readers must also accept JSON whitespace before the ``{`` (the reference test
``test_whitespace_leading_padded_header``).

What the reference reader (``SafeTensors::read_metadata`` + ``Metadata::validate``) enforces, and
this reader too: N <= 100,000,000 and 8+N <= file size; valid UTF-8 and JSON; known dtypes;
``end - start == prod(shape) * itemsize``; tensors sorted by offsets tile the data section from 0
without holes or overlaps; the file ends exactly where the last tensor ends. This reader also
refuses duplicate JSON keys, non-string metadata values, control characters in tensor names,
shapes that are not lists of non-negative ints, more than ``MAX_TENSORS`` tensors, ranks above
``MAX_NDIM`` and nesting deep enough to exhaust the parser.

Dtypes are the reference's ``Dtype`` enum. Ones ckptctl cannot represent (``F4``, ``F6_E2M3``,
``F6_E3M2``, ``F8_E4M3FNUZ``, ``F8_E5M2FNUZ``) and unknown strings raise ``UnsupportedError``;
ckptctl's ``C128`` is not a safetensors dtype, so it is unsupported here in both directions.

The writer keeps the caller's tensor order. The reference writer sorts tensors by descending
dtype alignment, then by name (``prepare`` in ``tensor.rs``); :func:`reference_order` gives that
order, and with it (and at most one metadata key, since the reference stores metadata in a hash
map) ckptctl's output is byte-identical to the reference's.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, NoReturn

from ckptctl.dtypes import DType
from ckptctl.errors import CorruptCheckpointError, OutputError, TruncatedError, UnsupportedError
from ckptctl.fix import Note, Option
from ckptctl.formats._base import FormatSpec, preallocate, write_entry_bytes
from ckptctl.model import (
    Checkpoint,
    FileData,
    HeaderLayout,
    JSONValue,
    Region,
    RegionKind,
    TensorEntry,
    expected_nbytes,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from ckptctl.sources import ByteSource

__all__ = [
    "MAX_HEADER_BYTES",
    "MAX_NAME_BYTES",
    "MAX_NDIM",
    "MAX_TENSORS",
    "SPEC",
    "layout",
    "open_safetensors",
    "plan_header",
    "reference_order",
    "sniff",
    "write",
]

#: Length of the little-endian u64 that starts the file.
HEADER_LENGTH_BYTES = 8
#: The reference's ``MAX_HEADER_SIZE``.
MAX_HEADER_BYTES = 100_000_000
#: More tensors than any real model has; bounds the work a crafted header can cause.
MAX_TENSORS = 1_000_000
#: numpy's own limit on array rank.
MAX_NDIM = 64
#: Longest tensor name accepted, in UTF-8 bytes.
MAX_NAME_BYTES = 16_384
#: The writer pads the header so the data section starts on this boundary (as the reference).
ALIGNMENT_BYTES = 8
METADATA_KEY = "__metadata__"

_JSON_WHITESPACE = b" \t\r\n"
_TRUNCATED_HINT = "the file looks truncated; re-download it"
_LAYOUT_HINT = "the header's data_offsets do not describe a valid data section; re-save the file"

#: The reference ``Dtype`` enum in its declared (alignment) order, with bits per element.
#: The reference writer sorts tensors by this order, descending.
REFERENCE_DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
    "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
    "U64": 64,
}  # fmt: skip
_REFERENCE_RANK = {code: rank for rank, code in enumerate(REFERENCE_DTYPE_BITS)}
#: ckptctl dtypes that safetensors can hold (every DType but C128).
_SUPPORTED: dict[str, DType] = {d.value: d for d in DType if d.value in REFERENCE_DTYPE_BITS}


@dataclass(frozen=True)
class _TensorInfo:
    name: str
    code: str
    dtype: DType | None  # None: a dtype ckptctl cannot represent
    shape: tuple[int, ...]
    start: int
    end: int


@dataclass(frozen=True)
class _Header:
    length: int  # N, the declared header length
    leading: int  # whitespace bytes before the JSON object
    trailing: int  # whitespace bytes after it
    raw: dict[str, JSONValue]
    metadata: dict[str, str]
    tensors: tuple[_TensorInfo, ...]  # sorted by data offsets

    @property
    def data_start(self) -> int:
        return HEADER_LENGTH_BYTES + self.length

    @property
    def data_end(self) -> int:
        return self.tensors[-1].end if self.tensors else 0


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _corrupt(message: str, hint: str | None = None) -> NoReturn:
    raise CorruptCheckpointError(message, hint=hint)


def _pairs_without_duplicates(pairs: list[tuple[str, JSONValue]]) -> dict[str, JSONValue]:
    result: dict[str, JSONValue] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKeyError(key)
        result[key] = value
    return result


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


#: The decoder of :func:`loads_strict`; its ``raw_decode`` parses one value inside a longer text
#: (inside :func:`strict_json_errors`).
STRICT_JSON = json.JSONDecoder(
    object_pairs_hook=_pairs_without_duplicates, parse_constant=_reject_constant
)


@contextlib.contextmanager
def strict_json_errors(what: str) -> Iterator[None]:
    """Turn the errors of parsing ``what`` (``header``, ``index``) with ``STRICT_JSON`` into
    ``CorruptCheckpointError``."""
    try:
        yield
    except _DuplicateKeyError as exc:
        _corrupt(f"the JSON {what} has the key {exc.key!r} twice")
    except RecursionError:
        _corrupt(f"the JSON {what} is nested too deeply")
    except json.JSONDecodeError as exc:
        _corrupt(f"the {what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except ValueError as exc:  # int too long to convert, rejected constants
        _corrupt(f"the {what} is not valid JSON: {exc}")


def loads_strict(text: str, what: str) -> JSONValue:
    """Parse JSON, refusing duplicate keys, NaN/Infinity and nesting that exhausts the parser.

    Args:
        text: the JSON text.
        what: what the text is, for messages (``header``, ``index``).

    Raises:
        CorruptCheckpointError: the text is not strict JSON.
    """
    with strict_json_errors(what):
        return json.loads(
            text, object_pairs_hook=_pairs_without_duplicates, parse_constant=_reject_constant
        )


#: The fix for a tensor name an output format cannot store.
RENAME = Option("remap", takes_value=True)


def check_tensor_name(name: str) -> str | None:
    """Why ``name`` is not an acceptable tensor name, or None when it is."""
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    control = _CONTROL.search(name)
    if control is not None:
        return f"contains the control character {control.group()!r}"
    return None


#: Unicode's categories Cc (U+0000-U+001F, U+007F-U+009F) and Cs (the surrogates): one regular
#: expression instead of a category look-up per character (an index of two million names spent
#: seconds in ``unicodedata``, issue 44).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _type_name(value: JSONValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _is_index(value: JSONValue) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse_metadata(value: JSONValue) -> dict[str, str]:
    if value is None:  # the reference's Option<HashMap> accepts null
        return {}
    if not isinstance(value, dict):
        _corrupt(f"{METADATA_KEY} is {_type_name(value)}, not an object of strings")
    for key, item in value.items():
        if not isinstance(item, str):
            _corrupt(
                f"metadata value for {key!r} is {_type_name(item)}, not a string",
                hint="safetensors metadata maps strings to strings",
            )
    return dict(value)


def _parse_tensor(name: str, info: JSONValue) -> _TensorInfo:
    problem = check_tensor_name(name)
    if problem:
        _corrupt(f"tensor name {name!r} {problem}")
    if not isinstance(info, dict):
        _corrupt(f"tensor {name!r} is described by {_type_name(info)}, not an object")
    for key in ("dtype", "shape", "data_offsets"):
        if key not in info:
            _corrupt(f"tensor {name!r} has no {key!r}")
    code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(code, str):
        _corrupt(f"tensor {name!r} has a dtype that is {_type_name(code)}, not a string")
    if not isinstance(shape, list):
        _corrupt(f"tensor {name!r} has a shape that is {_type_name(shape)}, not a list")
    if len(shape) > MAX_NDIM:
        _corrupt(f"tensor {name!r} has {len(shape)} dimensions, more than the limit of {MAX_NDIM}")
    for dim in shape:
        if not _is_index(dim):
            _corrupt(f"tensor {name!r} has shape {shape}: {dim!r} is not a non-negative integer")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_index, offsets))):
        _corrupt(f"tensor {name!r} has data_offsets {offsets!r}, not two non-negative integers")
    start, end = offsets
    return _TensorInfo(name, code, _SUPPORTED.get(code), tuple(shape), start, end)


def _check_sizes(info: _TensorInfo) -> None:
    if info.end < info.start:
        _corrupt(
            f"tensor {info.name!r} has data_offsets [{info.start}, {info.end}]: "
            "the end is before the start"
        )
    bits = REFERENCE_DTYPE_BITS.get(info.code)
    if bits is None:
        return  # unknown dtype: its size cannot be checked, UnsupportedError follows
    nbits = math.prod(info.shape) * bits
    if nbits % 8:
        _corrupt(
            f"tensor {info.name!r} with shape {list(info.shape)} and dtype {info.code} "
            "does not fill whole bytes"
        )
    span = info.end - info.start
    if span != nbits // 8:
        _corrupt(
            f"tensor {info.name!r} has shape {list(info.shape)} and dtype {info.code}, which is "
            f"{nbits // 8} bytes, but its data_offsets [{info.start}, {info.end}] span {span} bytes"
        )


def _check_tiling(
    tensors: list[_TensorInfo], data_start: int, file_size: int, *, truncated_ok: bool = False
) -> None:
    """Tensors sorted by offsets must tile the data section, which must end the file."""
    prev: _TensorInfo | None = None
    for info in tensors:
        _check_sizes(info)
        if data_start + info.end > file_size and not truncated_ok:
            _corrupt(
                f"tensor {info.name!r} ends at byte {data_start + info.end} "
                f"but the file has {file_size} bytes",
                hint=_TRUNCATED_HINT,
            )
        prev_end = prev.end if prev else 0
        if prev is not None and info.start < prev_end:
            _corrupt(
                f"tensor {info.name!r} (data_offsets [{info.start}, {info.end}]) overlaps tensor "
                f"{prev.name!r} (data_offsets [{prev.start}, {prev.end}])",
                hint=_LAYOUT_HINT,
            )
        if info.start > prev_end:
            where = f"after tensor {prev.name!r}" if prev else "at the start of the data section"
            _corrupt(
                f"{info.start - prev_end} unused bytes {where}: tensor {info.name!r} starts at "
                f"data offset {info.start}, expected {prev_end}",
                hint=_LAYOUT_HINT,
            )
        prev = info
    data_end = data_start + (prev.end if prev else 0)
    if file_size > data_end:
        _corrupt(
            f"the file has {file_size - data_end} bytes after the end of the tensor data "
            f"(byte {data_end})",
            hint="the file was appended to or is corrupted",
        )


def _read_header(source: ByteSource) -> tuple[int, int, int, str]:
    """Read N and the header text; return (N, leading ws, trailing ws, text)."""
    size = source.size
    if size < HEADER_LENGTH_BYTES:
        _corrupt(
            f"the file has only {size} bytes; a safetensors file starts with an 8-byte "
            "header length",
            hint=_TRUNCATED_HINT,
        )
    length = int.from_bytes(source.read(0, HEADER_LENGTH_BYTES), "little")
    if length > MAX_HEADER_BYTES:
        _corrupt(f"the header length {length} is over the limit of {MAX_HEADER_BYTES} bytes")
    if length > size - HEADER_LENGTH_BYTES:
        _corrupt(
            f"the header length {length} runs past the end of the file "
            f"({size} bytes, so at most {size - HEADER_LENGTH_BYTES})",
            hint=_TRUNCATED_HINT,
        )
    if length < 2:
        _corrupt(f"the header length {length} is too small for a JSON object")
    blob = source.read(HEADER_LENGTH_BYTES, length)
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        _corrupt(f"the header is not valid UTF-8 (byte {HEADER_LENGTH_BYTES + exc.start})")
    leading = len(blob) - len(blob.lstrip(_JSON_WHITESPACE))
    trailing = len(blob) - len(blob.rstrip(_JSON_WHITESPACE)) if leading < len(blob) else 0
    return length, leading, trailing, text


def _parse(
    source: ByteSource, *, allow_unsupported: bool = False, truncated_ok: bool = False
) -> _Header:
    length, leading, trailing, text = _read_header(source)
    raw = loads_strict(text, "header")
    if not isinstance(raw, dict):
        kind = "array" if isinstance(raw, list) else _type_name(raw).split()[-1]
        _corrupt(f"the header is a JSON {kind}, not an object")
    count = len(raw) - (METADATA_KEY in raw)
    if count > MAX_TENSORS:
        _corrupt(f"the header lists {count} tensors, more than the limit of {MAX_TENSORS}")
    metadata: dict[str, str] = {}
    tensors: list[_TensorInfo] = []
    for name, info in raw.items():
        if name == METADATA_KEY:
            metadata = _parse_metadata(info)
        else:
            tensors.append(_parse_tensor(name, info))
    tensors.sort(key=lambda t: (t.start, t.end))  # stable: ties keep header order
    _check_tiling(tensors, HEADER_LENGTH_BYTES + length, source.size, truncated_ok=truncated_ok)
    unsupported = [t for t in tensors if t.dtype is None]
    if unsupported and not allow_unsupported:
        first = unsupported[0]
        known = first.code in REFERENCE_DTYPE_BITS
        more = f" ({len(unsupported) - 1} more tensors too)" if len(unsupported) > 1 else ""
        raise UnsupportedError(
            f"tensor {first.name!r} has dtype {first.code!r}, which ckptctl "
            + ("does not support yet" if known else "does not know")
            + more,
            hint="supported dtypes: " + " ".join(_SUPPORTED),
        )
    return _Header(length, leading, trailing, raw, metadata, tuple(tensors))


def sniff(head: bytes, source: ByteSource) -> bool:
    """Does ``head`` start like a safetensors file? Never raises.

    An 8-byte binary header length followed by ``{`` (or ``[``, so that a JSON array header is
    reported as corrupt rather than unknown) after optional JSON whitespace. The length is
    deliberately not checked against the file size or ``MAX_HEADER_BYTES``, so that truncated
    files and absurd lengths are claimed and :func:`open_safetensors` can say what is wrong; a
    length over the limit is only claimed when its 8 bytes are not printable text (a JSON file).
    """
    try:
        if len(head) < HEADER_LENGTH_BYTES + 2:
            return False
        prefix = head[:HEADER_LENGTH_BYTES]
        length = int.from_bytes(prefix, "little")
        if length > MAX_HEADER_BYTES and all(0x20 <= b < 0x7F or b in b"\t\r\n" for b in prefix):
            return False
        text = head[HEADER_LENGTH_BYTES : HEADER_LENGTH_BYTES + max(length, 2)]
        return length >= 2 and text.lstrip(_JSON_WHITESPACE)[:1] in (b"{", b"[")
    except Exception:  # sniffing must never raise
        return False


def open_safetensors(source: ByteSource) -> Checkpoint:
    """Parse a safetensors header and return a lazy checkpoint over ``source``.

    Entries are in data-offset order; each one's data is a zero-copy view of the file and
    ``entry.offset`` is its absolute file offset. The checkpoint closes ``source``.

    Raises:
        CorruptCheckpointError: anything the module docstring lists as invalid.
        UnsupportedError: a tensor's dtype is one ckptctl cannot represent.
    """
    header = _parse(source)
    entries = []
    for info in header.tensors:
        assert info.dtype is not None  # _parse raised otherwise
        offset = header.data_start + info.start
        nbytes = info.end - info.start
        entries.append(
            TensorEntry(
                name=info.name,
                dtype=info.dtype,
                shape=info.shape,
                nbytes=nbytes,
                offset=offset,
                data=FileData(source, offset, nbytes),
            )
        )
    return Checkpoint(
        entries,
        path=source.path,
        format="safetensors",
        metadata=header.metadata,
        sources=[source],
    )


def layout(source: ByteSource) -> HeaderLayout:
    """Decode the header and assign every byte of the file to a region.

    Regions: ``header`` (the 8-byte length), ``padding`` for whitespace before the JSON,
    ``metadata`` (the JSON text), ``padding`` for whitespace after it, then one ``tensor`` region
    per tensor in offset order (zero-size tensors give empty regions). Tensors with dtypes
    ckptctl cannot load are still shown.

    Raises:
        CorruptCheckpointError: the header or offsets are invalid.
    """
    header = _parse(source, allow_unsupported=True, truncated_ok=True)
    size = source.size
    regions = [
        Region(RegionKind.HEADER, 0, HEADER_LENGTH_BYTES, note="u64 little-endian header length")
    ]
    pos = HEADER_LENGTH_BYTES
    if header.leading:
        regions.append(
            Region(
                RegionKind.PADDING,
                pos,
                pos + header.leading,
                note="whitespace before the JSON header",
            )
        )
        pos += header.leading
    json_end = header.data_start - header.trailing
    regions.append(Region(RegionKind.METADATA, pos, json_end, note="JSON header"))
    if header.trailing:
        regions.append(
            Region(
                RegionKind.PADDING,
                json_end,
                header.data_start,
                note="spaces padding the header to a multiple of 8 bytes",
            )
        )
    short: list[_TensorInfo] = []
    for info in header.tensors:
        start, end = header.data_start + info.start, header.data_start + info.end
        if end > size:
            short.append(info)
            if start >= size:
                continue
            note = f"truncated: {size - start} of {end - start} bytes present"
            regions.append(Region(RegionKind.TENSOR, start, size, name=info.name, note=note))
            continue
        regions.append(Region(RegionKind.TENSOR, start, end, name=info.name))
    result = HeaderLayout(
        format="safetensors",
        file_size=source.size,
        header=header.raw,
        regions=tuple(regions),
        facts={
            "header_length": header.length,
            "data_start": header.data_start,
            "tensor_bytes": header.data_end,
            "padding_bytes": header.leading + header.trailing,
        },
    )
    if short:
        last = max(short, key=lambda t: t.end)
        error = TruncatedError(
            f"{len(short)} tensor{'s' if len(short) != 1 else ''} run past the end of the file: "
            f"{last.name!r} ends at byte {header.data_start + last.end} but the file has "
            f"{size} bytes",
            hint=_TRUNCATED_HINT,
        )
        error.layout = result
        raise error
    return result


def reference_order(entries: Sequence[TensorEntry]) -> list[TensorEntry]:
    """``entries`` in the order the reference writer stores them: descending dtype, then name."""
    return sorted(entries, key=lambda e: (-_REFERENCE_RANK[e.dtype.value], e.name))


def plan_header(entries: Sequence[TensorEntry], metadata: Mapping[str, str]) -> bytes:
    """The first ``8 + N`` bytes of the file: tensors in the given order, contiguous offsets.

    ``__metadata__`` is stored only when ``metadata`` is non-empty; the JSON is compact, as
    serde_json writes it, and padded with spaces so the data section starts at a multiple of 8.

    Raises:
        OutputError: duplicate tensor names, non-string metadata, a header over
            ``MAX_HEADER_BYTES``.
        UnsupportedError: a dtype safetensors cannot hold (``C128``), a tensor name it cannot
            (control characters, too long, ``__metadata__``).
        CorruptCheckpointError: an entry's ``nbytes`` does not match its shape and dtype.
    """
    header: dict[str, JSONValue] = {}
    if metadata:
        untrusted: Iterable[tuple[object, object]] = metadata.items()  # callers may pass anything
        for key, value in untrusted:
            if not isinstance(key, str) or not isinstance(value, str):
                raise OutputError(f"metadata {key!r}: {value!r} is not a string to string pair")
        header[METADATA_KEY] = dict(metadata)
    offset = 0
    for entry in entries:
        if entry.name in header and entry.name != METADATA_KEY:
            raise OutputError(f"tensor name {entry.name!r} appears twice")
        # A name safetensors readers refuse (ckptctl's too) comes from a valid input that the
        # format cannot hold, like a dtype it lacks: unsupported (exit 4), not an output error.
        problem = "is reserved" if entry.name == METADATA_KEY else check_tensor_name(entry.name)
        if problem:
            raise UnsupportedError(
                f"tensor name {entry.name!r} {problem}, which safetensors cannot store",
                hint=Note("write a .pt instead, or rename it with {fix0}", (RENAME,)),
            )
        if entry.dtype.value not in _SUPPORTED:
            raise UnsupportedError(
                f"tensor {entry.name!r} has dtype {entry.dtype.value}, which safetensors "
                "cannot store",
                hint=Note(
                    "write a .pt instead, or leave it out with {fix0}",
                    (Option("exclude", f"^{re.escape(entry.name)}$"),),
                ),
            )
        expected = expected_nbytes(entry.dtype, entry.shape)
        if entry.nbytes != expected:
            raise CorruptCheckpointError(
                f"tensor {entry.name!r} has {entry.nbytes} bytes, but shape "
                f"{list(entry.shape)} of {entry.dtype.value} needs {expected}"
            )
        header[entry.name] = {
            "dtype": entry.dtype.value,
            "shape": list(entry.shape),
            "data_offsets": [offset, offset + entry.nbytes],
        }
        offset += entry.nbytes
    try:
        text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise OutputError(f"cannot encode the header as UTF-8: {exc.reason}") from None
    length = -(-len(text) // ALIGNMENT_BYTES) * ALIGNMENT_BYTES
    if length > MAX_HEADER_BYTES:
        raise OutputError(
            f"the header would be {length} bytes, over the safetensors limit of {MAX_HEADER_BYTES}",
            hint="split the checkpoint into shards",
        )
    return length.to_bytes(HEADER_LENGTH_BYTES, "little") + text.ljust(length, b" ")


def write(
    out: IO[bytes],
    entries: Sequence[TensorEntry],
    metadata: Mapping[str, str],
    scalars: Mapping[str, JSONValue],
) -> None:
    """Write a safetensors file: plan the header, then stream one tensor at a time.

    Args:
        out: a binary file open for writing, positioned at 0.
        entries: tensors in write order (kept as given; see :func:`reference_order`).
        metadata: string key/values for ``__metadata__``.
        scalars: ignored: safetensors has no typed scalars. Callers that must not lose them
            should check ``scalars`` before choosing this format.

    Raises:
        OutputError, UnsupportedError, CorruptCheckpointError: see :func:`plan_header`.
    """
    del scalars  # safetensors cannot hold them (documented above)
    header = plan_header(entries, metadata)
    preallocate(out, len(header) + sum(entry.nbytes for entry in entries))
    out.write(header)
    for entry in entries:
        write_entry_bytes(out, entry)


SPEC = FormatSpec(
    name="safetensors",
    extensions=(".safetensors",),
    sniff=sniff,
    open=open_safetensors,
    layout=layout,
    write=write,
)

#: The formats this module adds to the registry (``ckptctl.formats``).
SPECS = (SPEC,)

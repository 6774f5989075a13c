"""Validation of a burnpack header and its CBOR metadata.

See ``docs/formats/burnpack.md`` (layout, metadata, limits, Burn 0.19 files).

Everything read from the file is checked before it is used: the metadata length against the limit
and the file size before reading it, CBOR types exactly, every payload range inside the file and
not overlapping another, byte lengths against ``prod(shape) * itemsize``.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.dtypes import DType
from ckptctl.errors import CorruptCheckpointError, UnsupportedError
from ckptctl.formats.burnpack._cbor import decode_cbor
from ckptctl.formats.burnpack._schema import (
    ALIGNMENT_BYTES,
    BOOL_STORE_ITEMSIZE,
    DESCRIPTOR_KEYS,
    HEADER_BYTES,
    LEGACY_LAYOUT_NOTE,
    MAGIC,
    MAX_CBOR_DEPTH,
    MAX_METADATA_BYTES,
    MAX_TENSORS,
    PLAIN_DTYPES,
    TOP_KEYS,
    VERSION,
    align_up,
    check_scalar,
    describe,
    has_bad_name,
    is_uint,
)

if TYPE_CHECKING:
    from ckptctl.model import JSONValue
    from ckptctl.sources import ByteSource


# --- parsing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedTensor:
    """One validated descriptor."""

    name: str
    raw_dtype: JSONValue
    dtype: DType
    itemsize: int | None  # bytes per element on disk; None when quantized or unknown
    shape: tuple[int, ...]
    start: int
    end: int
    param_id: int | None

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass
class ParsedFile:
    """A validated header and metadata."""

    version: int
    metadata_length: int
    decoded: dict[object, object]
    tensors: list[ParsedTensor]  # in data order
    metadata: dict[str, str]
    scalars: dict[str, JSONValue]
    data_start: int
    legacy: bool
    notes: list[str] = field(default_factory=list)


def _corrupt(message: str, hint: str | None = None) -> CorruptCheckpointError:
    return CorruptCheckpointError(message, hint=hint)


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str):
        raise _corrupt(f"{what} {describe(name)} is not a text string")
    if not name:
        raise _corrupt(f"{what} is empty")
    if has_bad_name(name):
        raise _corrupt(f"{what} {name!r} contains control characters")
    return name


def _check_plain(value: object, where: str, depth: int = 0) -> None:
    """Accept only CBOR data a quantization scheme is made of (and bound the depth)."""
    if depth > MAX_CBOR_DEPTH:
        raise _corrupt(f"{where} is nested deeper than {MAX_CBOR_DEPTH} levels")
    if value is None or isinstance(value, (bool, int, float, str)):
        return
    if isinstance(value, list):
        for item in value:
            _check_plain(item, where, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _corrupt(f"{where} has a non-text key {describe(key)}")
            _check_plain(item, where, depth + 1)
        return
    raise _corrupt(f"{where} holds {type(value).__name__} data, which burnpack never writes")


def _decode_dtype(name: str, value: object, *, lenient: bool) -> tuple[DType, int | None]:
    """The DType of a descriptor's dtype value and its on-disk element size (None: opaque)."""
    unknown: str | None = None
    if isinstance(value, str):
        if value in PLAIN_DTYPES:
            return PLAIN_DTYPES[value], PLAIN_DTYPES[value].itemsize
        if value == "Flex32":
            return DType.F32, 4
        if value == "Bool":
            return DType.BOOL, 1
        unknown = f"dtype {value!r}"
    elif isinstance(value, dict) and len(value) == 1:
        ((kind, arg),) = value.items()
        if kind == "Bool" and isinstance(arg, str) and arg in BOOL_STORE_ITEMSIZE:
            return DType.BOOL, BOOL_STORE_ITEMSIZE[arg]
        if kind == "QFloat":
            if not isinstance(arg, dict):
                raise _corrupt(f"tensor {name!r}: QFloat scheme is not a map")
            _check_plain(arg, f"tensor {name!r}: QFloat scheme")
            return DType.U8, None
        unknown = f"bool store {describe(arg)}" if kind == "Bool" else f"dtype {describe(value)}"
    else:
        raise _corrupt(
            f"tensor {name!r}: dtype {describe(value)} is neither a text string nor a one-entry map"
        )
    if lenient:  # the header view shows such files; only open() refuses them
        return DType.U8, None
    raise UnsupportedError(
        f"tensor {name!r} has {unknown}, which ckptctl does not support",
        hint="supported burnpack dtypes: " + ", ".join([*PLAIN_DTYPES, "Flex32", "Bool", "QFloat"]),
    )


def _parse_descriptor(
    name: object, desc: object, notes: list[str], *, lenient: bool
) -> ParsedTensor:
    name = _check_name(name, "tensor name")
    if not isinstance(desc, dict):
        raise _corrupt(f"tensor {name!r}: descriptor is not a map")
    for key in ("dtype", "shape", "data_offsets"):
        if key not in desc:
            raise _corrupt(f"tensor {name!r}: descriptor has no {key!r}")
    extra_keys = sorted(map(repr, set(desc) - DESCRIPTOR_KEYS))
    if extra_keys:
        notes.append(f"tensor {name!r}: ignored unknown descriptor keys {', '.join(extra_keys)}")
    shape = desc["shape"]
    if not isinstance(shape, list) or not all(is_uint(dim) for dim in shape):
        raise _corrupt(
            f"tensor {name!r}: shape {describe(shape)} is not a list of unsigned integers"
        )
    offsets = desc["data_offsets"]
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(is_uint, offsets))):
        raise _corrupt(
            f"tensor {name!r}: data_offsets {describe(offsets)} is not a pair of unsigned integers"
        )
    start, end = offsets
    if end < start:
        raise _corrupt(f"tensor {name!r}: data_offsets end {end} is before start {start}")
    param_id = desc.get("param_id")
    if param_id is not None and not is_uint(param_id):
        raise _corrupt(
            f"tensor {name!r}: param_id {describe(param_id)} is not an unsigned 64-bit integer"
        )
    dtype, itemsize = _decode_dtype(name, desc["dtype"], lenient=lenient)
    if itemsize is not None:
        needed = math.prod(shape) * itemsize
        if end - start != needed:
            raise _corrupt(
                f"tensor {name!r} has {end - start} bytes in the file, but shape {shape} "
                f"of {describe(desc['dtype'])} needs {needed}"
            )
    return ParsedTensor(name, desc["dtype"], dtype, itemsize, tuple(shape), start, end, param_id)


def _string_map(value: object, what: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _corrupt(f"{what} is not a map")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise _corrupt(f"{what} entry {describe(key)}: {describe(item)} is not text to text")
    return dict(value)


def parse_file(
    source: ByteSource, *, lenient: bool = False, truncated_ok: bool = False
) -> ParsedFile:
    """Read and validate the header and metadata; never reads tensor bytes.

    ``truncated_ok`` accepts payloads that run past the end of the file (``header`` shows them).
    """
    size = source.size
    if size < HEADER_BYTES:
        raise _corrupt(f"the file has only {size} bytes, fewer than the 10-byte burnpack header")
    head = source.read(0, HEADER_BYTES)
    if head[:4] != MAGIC:
        raise _corrupt(f"bad magic {head[:4]!r}, expected {MAGIC!r}")
    version, length = struct.unpack_from("<HI", head, 4)
    if version > VERSION:
        raise UnsupportedError(
            f"burnpack format version {version} is newer than the supported version {VERSION}",
            hint="upgrade ckptctl, or re-save the file with an older burn",
        )
    if length > MAX_METADATA_BYTES:
        raise _corrupt(f"metadata length {length} exceeds the limit of {MAX_METADATA_BYTES} bytes")
    if length > size - HEADER_BYTES:
        raise _corrupt(
            f"metadata length {length} runs past the end of the file ({size} bytes)",
            hint="the file looks truncated; re-download or re-save it",
        )
    decoded = decode_cbor(source.read(HEADER_BYTES, length))
    if not isinstance(decoded, dict):
        raise _corrupt(f"metadata is a CBOR {type(decoded).__name__}, not a map")
    if "tensors" not in decoded:
        raise _corrupt("metadata has no 'tensors' map")
    notes: list[str] = []
    unknown_top = sorted(map(repr, set(decoded) - TOP_KEYS))
    if unknown_top:
        notes.append(f"ignored unknown metadata keys {', '.join(unknown_top)}")
    raw_tensors = decoded["tensors"]
    if not isinstance(raw_tensors, dict):
        raise _corrupt("metadata 'tensors' is not a map")
    if len(raw_tensors) > MAX_TENSORS:
        raise _corrupt(f"{len(raw_tensors)} tensors exceed the limit of {MAX_TENSORS}")
    metadata = _string_map(decoded.get("metadata", {}), "metadata 'metadata'")
    scalars_raw = decoded.get("scalars", {})
    if not isinstance(scalars_raw, dict):
        raise _corrupt("metadata 'scalars' is not a map")
    for key, value in scalars_raw.items():
        check_scalar(_check_name(key, "scalar name"), value, CorruptCheckpointError)
    tensors = [_parse_descriptor(n, d, notes, lenient=lenient) for n, d in raw_tensors.items()]
    tensors.sort(key=lambda t: (t.start, t.end, t.name))

    unpadded = HEADER_BYTES + length
    data_start = align_up(unpadded)
    legacy = False
    if tensors:  # docs/formats/burnpack.md#burn-019-files: burn 0.19 wrote no padding at all
        max_end = max(t.end for t in tensors)
        misaligned = any(t.start % ALIGNMENT_BYTES for t in tensors)
        legacy = misaligned or (unpadded != data_start and size == unpadded + max_end)
    if legacy:
        data_start = unpadded
        notes.append(LEGACY_LAYOUT_NOTE)
    _check_ranges(tensors, data_start, size, truncated_ok=truncated_ok)
    return ParsedFile(
        version, length, decoded, tensors, metadata, dict(scalars_raw), data_start, legacy, notes
    )


def _check_ranges(
    tensors: list[ParsedTensor], data_start: int, size: int, *, truncated_ok: bool
) -> None:
    """Every payload inside the file, no two non-empty payloads overlapping."""
    reach, owner = 0, ""
    for t in tensors:  # sorted by start
        if data_start + t.end > size and not truncated_ok:
            raise _corrupt(
                f"tensor {t.name!r} ends at byte {data_start + t.end} "
                f"but the file has {size} bytes",
                hint="the file looks truncated; re-download or re-save it",
            )
        if t.length == 0:
            continue
        if t.start < reach:
            raise _corrupt(f"tensors {owner!r} and {t.name!r} overlap in the data section")
        reach, owner = t.end, t.name

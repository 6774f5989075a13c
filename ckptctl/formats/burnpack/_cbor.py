"""Burnpack metadata CBOR: a bounded decoder (cbor2) and an encoder matching ciborium's bytes.

The encoder follows Burn's ciborium encoding (``docs/formats/burnpack.md#metadata``): definite
lengths, shortest integers, maps in insertion order (the caller sorts name-keyed maps) and the
shortest float that round-trips exactly. It is hand-written
because plain ``cbor2.dumps`` writes every float as a 9-byte double.
"""

from __future__ import annotations

import io
import struct

import cbor2

from ckptctl.errors import CorruptCheckpointError
from ckptctl.formats.burnpack._schema import MAX_CBOR_DEPTH


def decode_cbor(blob: bytes) -> object:
    """Decode the metadata item; every decoder failure becomes CorruptCheckpointError."""
    # A decoder on a stream reads one item: trailing bytes inside N are ignored, as in burn.
    stream = io.BytesIO(blob)
    try:  # cbor2 >= 6 (pyproject.toml) bounds the nesting itself
        decoder = cbor2.CBORDecoder(stream, max_depth=MAX_CBOR_DEPTH, allow_duplicate_keys=False)
        return decoder.decode()
    except Exception as exc:  # cbor2's tag decoders can raise almost anything on hostile input
        raise CorruptCheckpointError(f"invalid CBOR metadata: {exc}") from None


def _cbor_head(major: int, value: int) -> bytes:
    if value < 24:
        return bytes([major << 5 | value])
    for extra, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
        if value < 1 << (8 * struct.calcsize(fmt)):
            return bytes([major << 5 | extra]) + struct.pack(fmt, value)
    raise ValueError(f"integer {value} does not fit 64 bits")


def _cbor_float(value: float) -> bytes:
    """The shortest of half/single/double that gives back the identical double (ciborium)."""
    exact = struct.pack(">d", value)
    for fmt, prefix in ((">e", b"\xf9"), (">f", b"\xfa")):
        try:
            packed = struct.pack(fmt, value)
        except OverflowError:
            continue
        if struct.pack(">d", struct.unpack(fmt, packed)[0]) == exact:
            return prefix + packed
    return b"\xfb" + exact


def _encode(value: object, out: bytearray) -> None:
    """Append ``value``: maps keep insertion order, integers and floats in shortest form."""
    if value is None:
        out += b"\xf6"
    elif isinstance(value, bool):
        out += b"\xf5" if value else b"\xf4"
    elif isinstance(value, int):
        out += _cbor_head(0, value) if value >= 0 else _cbor_head(1, -1 - value)
    elif isinstance(value, float):
        out += _cbor_float(value)
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        out += _cbor_head(3, len(raw)) + raw
    elif isinstance(value, (list, tuple)):
        out += _cbor_head(4, len(value))
        for item in value:
            _encode(item, out)
    elif isinstance(value, dict):
        out += _cbor_head(5, len(value))
        for key, item in value.items():
            _encode(key, out)
            _encode(item, out)
    else:
        raise TypeError(f"cannot encode {type(value).__name__} in burnpack metadata")


def encode_cbor(value: object) -> bytes:
    """Encode ``value`` (dicts, lists, str, int, float, bool, None) as burn would.

    Raises:
        TypeError: a value of another type.
        ValueError: an integer outside the 64-bit range.
    """
    out = bytearray()
    _encode(value, out)
    return bytes(out)

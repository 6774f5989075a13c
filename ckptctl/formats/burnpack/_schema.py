"""Constants, dtype tables and checks shared by the burnpack reader and writer."""

from __future__ import annotations

import base64
import struct
import unicodedata
from typing import TYPE_CHECKING

from ckptctl.dtypes import DType

if TYPE_CHECKING:
    from ckptctl.errors import CkptError

MAGIC = b"NRUB"
VERSION = 1
HEADER_BYTES = 10
ALIGNMENT_BYTES = 256
#: Limits of burn's own reader (docs/formats/burnpack.md#limits).
MAX_METADATA_BYTES = 100 * 1024 * 1024
MAX_TENSORS = 100_000
MAX_CBOR_DEPTH = 128
U64_END = 1 << 64
I64_MIN, I64_END = -(1 << 63), 1 << 63

LEGACY_LAYOUT_NOTE = "burn 0.19 unaligned layout"

PLAIN_DTYPES = {
    "F64": DType.F64, "F32": DType.F32, "F16": DType.F16, "BF16": DType.BF16,
    "I64": DType.I64, "I32": DType.I32, "I16": DType.I16, "I8": DType.I8,
    "U64": DType.U64, "U32": DType.U32, "U16": DType.U16, "U8": DType.U8,
}  # fmt: skip
DTYPE_NAMES = {dtype: name for name, dtype in PLAIN_DTYPES.items()}
BOOL_STORE_ITEMSIZE = {"Native": 1, "U8": 1, "U32": 4}
DEFAULT_BOOL = {"Bool": "Native"}
SCALAR_KINDS = ("Int", "UInt", "Float", "Bool")
DESCRIPTOR_KEYS = frozenset({"dtype", "shape", "data_offsets", "param_id"})
TOP_KEYS = frozenset({"tensors", "metadata", "scalars"})


def align_up(offset: int, alignment: int = ALIGNMENT_BYTES) -> int:
    """``offset`` rounded up to a multiple of ``alignment``."""
    return -(-offset // alignment) * alignment


# --- parameter ids --------------------------------------------------------------------------


def format_param_id(value: int) -> str:
    """Burn's printed form of a ParamId: base32hex of its 8 little-endian bytes
    (docs/formats/burnpack.md#paramids).

    Args:
        value: the u64 id as stored in the file.

    Returns:
        13 lower-case characters, e.g. ``avq43klip2pc6``.

    Raises:
        ValueError: ``value`` is not in ``[0, 2**64)``.
    """
    if not 0 <= value < U64_END:
        raise ValueError(f"param_id {value} is not an unsigned 64-bit integer")
    return base64.b32hexencode(struct.pack("<Q", value)).decode("ascii").lower().rstrip("=")


def parse_param_id(text: str) -> int:
    """Inverse of :func:`format_param_id`; also accepts burn's legacy 10-character ids.

    Raises:
        ValueError: ``text`` is not a 13- or 10-character base32hex id.
    """
    if len(text) not in (10, 13):
        raise ValueError(f"param id {text!r} must have 13 (or legacy 10) characters")
    padded = text.upper() + "=" * (-len(text) % 8)
    try:
        raw = base64.b32hexdecode(padded)
    except ValueError:
        raise ValueError(f"param id {text!r} is not base32hex") from None
    return int.from_bytes(raw.ljust(8, b"\0")[:8], "little")


def describe(value: object) -> str:
    """A short, escaped rendering of a decoded value for error messages."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def is_uint(value: object, end: int = U64_END) -> bool:
    """True for a (non-bool) integer in ``[0, end)``."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < end


def has_bad_name(name: str) -> bool:
    """True for names burnpack readers should refuse: empty or with control characters."""
    return not name or any(unicodedata.category(ch) == "Cc" for ch in name)


def check_scalar(key: str, value: object, error: type[CkptError]) -> None:
    """Validate one typed scalar, raising ``error`` with a clear message.

    Scalars: ``docs/formats/burnpack.md#metadata``.
    """
    if not (isinstance(value, dict) and len(value) == 1):
        raise error(f"scalar {key!r}: {describe(value)} is not a one-entry map like {{'UInt': 1}}")
    ((kind, payload),) = value.items()
    if kind not in SCALAR_KINDS:
        raise error(
            f"scalar {key!r} has unknown kind {describe(kind)}; expected one of "
            + ", ".join(SCALAR_KINDS)
        )
    if isinstance(payload, bool):
        ok = kind == "Bool"
    elif isinstance(payload, int):  # burn is strict: no int for Float, no float for Int/UInt
        ok = (kind == "Int" and I64_MIN <= payload < I64_END) or (
            kind == "UInt" and 0 <= payload < U64_END
        )
    else:
        ok = kind == "Float" and isinstance(payload, float)
    if not ok:
        raise error(f"scalar {key!r}: {describe(payload)} is not a valid {kind} value")

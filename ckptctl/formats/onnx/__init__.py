"""ONNX models (``.onnx``): every initializer and Constant node value, read lazily.

Format notes: ``docs/formats/onnx.md``.

Byte layout (``onnx/onnx.proto``, https://github.com/onnx/onnx/blob/main/onnx/onnx.proto): the
file is one protobuf ``ModelProto`` with no magic number. Its ``graph`` (field 7) holds
``initializer`` TensorProtos (field 5) and ``node``s (field 1); a ``Constant`` node keeps its
value in an attribute, and ``If``/``Loop``/``Scan`` nodes keep subgraphs in attributes (``g``,
``graphs``). A TensorProto has ``dims``, ``data_type`` and ``name``, and its data in exactly one
of: ``raw_data`` (little-endian elements), a typed field (``float_data``, ``int32_data``,
``int64_data``, ``double_data``, ``uint64_data``), or external data (``data_location``
EXTERNAL and ``external_data`` keys ``location``, ``offset``, ``length``, ``checksum``: a file
relative to the model's folder).

The reader walks the wire format (``_wire.py``) without ever holding the model in memory: no
2 GB protobuf limit, each tensor a byte range (of this file or of its external data file) read
only when loaded. Field numbers and limits are in ``_schema.py``; data decoding in ``_data.py``.

How ONNX data types map onto :class:`~ckptctl.dtypes.DType`: FLOAT..COMPLEX128, BFLOAT16,
FLOAT8E4M3FN, FLOAT8E5M2 and FLOAT8E8M0 to the dtype of the same meaning; INT4/UINT4 (packed
two to a byte) to I8/U8, read unpacked, one byte per element (lossless: every 4-bit value is
one of I8/U8, and no output format holds packed 4-bit elements); STRING tensors are not
listed; the FNUZ float8 types, FLOAT4E2M1, INT2/UINT2 and FLOAT6 are unsupported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.formats._base import FormatSpec, lazy_layout, lazy_open

if TYPE_CHECKING:
    from ckptctl.sources import ByteSource

__all__ = ["SPEC", "SPECS", "sniff_onnx"]

#: ModelProto fields: number -> wire type (0 varint, 2 length-delimited).
_MODEL_WIRE = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}
#: ModelProto's graph field.
MODEL_GRAPH = 7
#: The fields that may run past the sniffed bytes (the others are short).
_LONG_FIELDS = frozenset({6, 7, 20, 25, 26})


def _varint(head: bytes, pos: int) -> tuple[int, int] | None:
    value = shift = 0
    for i in range(pos, min(len(head), pos + 10)):
        value |= (head[i] & 0x7F) << shift
        if head[i] < 0x80:
            return value, i + 1
        shift += 7
    return None


def sniff_onnx(head: bytes, source: ByteSource) -> bool:
    """True when the first bytes parse as ModelProto fields with an ``ir_version`` and a graph
    (seen, or a long field that runs past ``head``). Once the graph began, the file may end
    inside a field (``open`` reports it truncated). Reads nothing beyond ``head``."""
    pos, seen = 0, set[int]()
    whole = len(head) >= source.size
    while pos < min(len(head), source.size):
        key = _varint(head, pos)
        if key is None:
            return whole and {1, MODEL_GRAPH} <= seen
        number, wire = key[0] >> 3, key[0] & 7
        if _MODEL_WIRE.get(number) != wire:
            return False
        value = _varint(head, key[1])
        if value is None:
            return whole and {1, MODEL_GRAPH} <= seen
        seen.add(number)
        pos = value[1] if wire == 0 else value[1] + value[0]
        if pos > source.size:  # the file ends inside this field
            return {1, MODEL_GRAPH} <= seen
        if pos > len(head) and number not in _LONG_FIELDS:
            return False
    return 1 in seen and (MODEL_GRAPH in seen or pos > len(head))


_READER = "ckptctl.formats.onnx.reader"

SPEC = FormatSpec(
    name="onnx",
    extensions=(".onnx",),
    sniff=sniff_onnx,
    open=lazy_open(_READER, "open_onnx"),
    layout=lazy_layout(_READER, "layout_onnx"),
)
#: The formats this module adds to the registry (``ckptctl.formats``).
SPECS = (SPEC,)

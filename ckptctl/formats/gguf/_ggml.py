"""GGML's tensor types and GGUF's key/value types, as data.

Each row is (type id, name, elements per block, bytes per block), from gguf-py 0.19.0
(``gguf/constants.py``: ``GGMLQuantizationType``, ``GGML_QUANT_SIZES``), which mirrors
``enum ggml_type`` and ``ggml_type_traits`` in llama.cpp's ``ggml/src/ggml.c``. Ids missing
from the table (4, 5: the removed Q4_2/Q4_3; 31-33: removed Q4_0_4_4 ... repacked layouts)
are unknown to ckptctl: a tensor of such a type is named by its id and never decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from ckptctl.dtypes import DType

#: Elements in one super-block of the k-quants (``QK_K`` in ggml-common.h).
QK_K = 256


@dataclass(frozen=True)
class GGMLType:
    """One GGML tensor type: ``block_size`` elements stored in ``type_size`` bytes."""

    id: int
    name: str
    block_size: int
    type_size: int
    #: The plain dtype whose bytes these are (little-endian); None for block-quantized types.
    plain: DType | None = None

    @property
    def quantized(self) -> bool:
        """True for block formats that need decoding to give values."""
        return self.plain is None

    def nbytes(self, count: int) -> int:
        """Bytes that ``count`` elements take; ``count`` must be a multiple of the block."""
        return count // self.block_size * self.type_size


_TYPES = (
    GGMLType(0, "F32", 1, 4, DType.F32),
    GGMLType(1, "F16", 1, 2, DType.F16),
    GGMLType(2, "Q4_0", 32, 2 + 16),
    GGMLType(3, "Q4_1", 32, 2 + 2 + 16),
    GGMLType(6, "Q5_0", 32, 2 + 4 + 16),
    GGMLType(7, "Q5_1", 32, 2 + 2 + 4 + 16),
    GGMLType(8, "Q8_0", 32, 2 + 32),
    GGMLType(9, "Q8_1", 32, 4 + 4 + 32),
    GGMLType(10, "Q2_K", QK_K, 2 + 2 + QK_K // 16 + QK_K // 4),
    GGMLType(11, "Q3_K", QK_K, 2 + QK_K // 4 + QK_K // 8 + 12),
    GGMLType(12, "Q4_K", QK_K, 2 + 2 + QK_K // 2 + 12),
    GGMLType(13, "Q5_K", QK_K, 2 + 2 + QK_K // 2 + QK_K // 8 + 12),
    GGMLType(14, "Q6_K", QK_K, 2 + QK_K // 2 + QK_K // 4 + QK_K // 16),
    GGMLType(15, "Q8_K", QK_K, 4 + QK_K + QK_K // 8),
    GGMLType(16, "IQ2_XXS", QK_K, 2 + QK_K // 4),
    GGMLType(17, "IQ2_XS", QK_K, 2 + QK_K // 4 + QK_K // 32),
    GGMLType(18, "IQ3_XXS", QK_K, 2 + QK_K // 4 + QK_K // 8),
    GGMLType(19, "IQ1_S", QK_K, 2 + QK_K // 8 + QK_K // 16),
    GGMLType(20, "IQ4_NL", 32, 2 + 16),
    GGMLType(21, "IQ3_S", QK_K, 2 + QK_K // 4 + QK_K // 8 + QK_K // 32 + 4),
    GGMLType(22, "IQ2_S", QK_K, 2 + QK_K // 4 + QK_K // 16),
    GGMLType(23, "IQ4_XS", QK_K, 2 + 2 + QK_K // 2 + QK_K // 64),
    GGMLType(24, "I8", 1, 1, DType.I8),
    GGMLType(25, "I16", 1, 2, DType.I16),
    GGMLType(26, "I32", 1, 4, DType.I32),
    GGMLType(27, "I64", 1, 8, DType.I64),
    GGMLType(28, "F64", 1, 8, DType.F64),
    GGMLType(29, "IQ1_M", QK_K, QK_K // 8 + QK_K // 16 + QK_K // 32),
    GGMLType(30, "BF16", 1, 2, DType.BF16),
    GGMLType(34, "TQ1_0", QK_K, 2 + 4 * 13),
    GGMLType(35, "TQ2_0", QK_K, 2 + 64),
    GGMLType(39, "MXFP4", 32, 1 + 16),
    GGMLType(40, "NVFP4", 64, 4 + 32),
    GGMLType(41, "Q1_0", 128, 2 + 16),
)

#: Every known type by its id.
GGML_TYPES: dict[int, GGMLType] = {t.id: t for t in _TYPES}
#: Every known type by its name (``"Q4_K"``).
GGML_TYPES_BY_NAME: dict[str, GGMLType] = {t.name: t for t in _TYPES}
#: The GGML type that stores each plain dtype.
GGML_TYPE_OF: dict[DType, GGMLType] = {t.plain: t for t in _TYPES if t.plain is not None}


class ValueType(IntEnum):
    """A GGUF key/value type (``enum gguf_type`` in ggml/include/gguf.h)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


#: The ``struct`` format letter and size of each fixed-size value type.
SCALAR_FORMATS: dict[ValueType, tuple[str, int]] = {
    ValueType.UINT8: ("B", 1),
    ValueType.INT8: ("b", 1),
    ValueType.UINT16: ("H", 2),
    ValueType.INT16: ("h", 2),
    ValueType.UINT32: ("I", 4),
    ValueType.INT32: ("i", 4),
    ValueType.FLOAT32: ("f", 4),
    ValueType.BOOL: ("?", 1),
    ValueType.UINT64: ("Q", 8),
    ValueType.INT64: ("q", 8),
    ValueType.FLOAT64: ("d", 8),
}

"""ONNX's field numbers, data types and the limits of this reader.

Field numbers are those of ``onnx/onnx.proto`` in onnx 1.23.2 (checked against the installed
package's ``onnx.proto``); only the messages this reader descends into are listed.
"""

from __future__ import annotations

from ckptctl.dtypes import DType

# ModelProto
MODEL_IR_VERSION = 1
MODEL_PRODUCER_NAME = 2
MODEL_PRODUCER_VERSION = 3
MODEL_DOMAIN = 4
MODEL_MODEL_VERSION = 5
MODEL_DOC_STRING = 6
MODEL_GRAPH = 7
MODEL_OPSET_IMPORT = 8
MODEL_METADATA_PROPS = 14
#: ModelProto's fields as ``header`` names them (the others are shown by number).
MODEL_FIELDS = {
    1: "ir_version", 2: "producer_name", 3: "producer_version", 4: "domain",
    5: "model_version", 6: "doc_string", 7: "graph", 8: "opset_import",
    14: "metadata_props", 20: "training_info", 25: "functions", 26: "configuration",
}  # fmt: skip

# OperatorSetIdProto and StringStringEntryProto
OPSET_DOMAIN = 1
OPSET_VERSION = 2
ENTRY_KEY = 1
ENTRY_VALUE = 2

# GraphProto
GRAPH_NODE = 1
GRAPH_INITIALIZER = 5
GRAPH_SPARSE_INITIALIZER = 15
#: GraphProto's fields as ``header`` names them.
GRAPH_FIELDS = {
    1: "node", 2: "name", 5: "initializer", 10: "doc_string", 11: "input", 12: "output",
    13: "value_info", 14: "quantization_annotation", 15: "sparse_initializer",
    16: "metadata_props",
}  # fmt: skip

# NodeProto
NODE_OUTPUT = 2
NODE_OP_TYPE = 4
NODE_ATTRIBUTE = 5
NODE_DOMAIN = 7

# AttributeProto
ATTR_NAME = 1
ATTR_F = 2
ATTR_I = 3
ATTR_T = 5
ATTR_G = 6
ATTR_FLOATS = 7
ATTR_INTS = 8
ATTR_GRAPHS = 11

# TensorProto
TENSOR_DIMS = 1
TENSOR_DATA_TYPE = 2
TENSOR_SEGMENT = 3
TENSOR_FLOAT_DATA = 4
TENSOR_INT32_DATA = 5
TENSOR_STRING_DATA = 6
TENSOR_INT64_DATA = 7
TENSOR_NAME = 8
TENSOR_RAW_DATA = 9
TENSOR_DOUBLE_DATA = 10
TENSOR_UINT64_DATA = 11
TENSOR_EXTERNAL_DATA = 13
TENSOR_DATA_LOCATION = 14
#: The typed value fields and their names.
TYPED_FIELDS = {
    4: "float_data", 5: "int32_data", 7: "int64_data", 10: "double_data", 11: "uint64_data",
}  # fmt: skip
#: ``data_location`` EXTERNAL.
LOCATION_EXTERNAL = 1

#: TensorProto.DataType: code -> (ONNX name, the ckptctl dtype or None when there is none).
#: INT4/UINT4 map to the dtype they unpack to (see ``PACKED_4BIT``).
DATA_TYPES: dict[int, tuple[str, DType | None]] = {
    1: ("FLOAT", DType.F32), 2: ("UINT8", DType.U8), 3: ("INT8", DType.I8),
    4: ("UINT16", DType.U16), 5: ("INT16", DType.I16), 6: ("INT32", DType.I32),
    7: ("INT64", DType.I64), 8: ("STRING", None), 9: ("BOOL", DType.BOOL),
    10: ("FLOAT16", DType.F16), 11: ("DOUBLE", DType.F64), 12: ("UINT32", DType.U32),
    13: ("UINT64", DType.U64), 14: ("COMPLEX64", DType.C64), 15: ("COMPLEX128", DType.C128),
    16: ("BFLOAT16", DType.BF16), 17: ("FLOAT8E4M3FN", DType.F8_E4M3),
    18: ("FLOAT8E4M3FNUZ", None), 19: ("FLOAT8E5M2", DType.F8_E5M2),
    20: ("FLOAT8E5M2FNUZ", None), 21: ("UINT4", DType.U8), 22: ("INT4", DType.I8),
    23: ("FLOAT4E2M1", None), 24: ("FLOAT8E8M0", DType.F8_E8M0), 25: ("UINT2", None),
    26: ("INT2", None), 27: ("FLOAT6E2M3", None), 28: ("FLOAT6E3M2", None),
}  # fmt: skip
STRING = 8
FLOAT = 1
INT64 = 7
#: 4-bit types stored two to a byte, the first element in the low nibble.
PACKED_4BIT = frozenset({21, 22})
#: The typed field each data type keeps its values in (``numpy_helper.to_array``'s rules).
STORAGE_FIELD: dict[int, int] = {
    1: 4, 14: 4, 11: 10, 15: 10, 7: 7, 12: 11, 13: 11,
    **{code: 5 for code in (2, 3, 4, 5, 6, 9, 10, 16, 17, 19, 21, 22, 24)},
}  # fmt: skip

#: Deepest nesting of subgraphs (If/Loop/Scan bodies) followed; real models nest a few levels.
MAX_GRAPH_DEPTH = 32
#: Most tensors listed (initializers and constants), as for safetensors.
MAX_TENSORS = 1_000_000
#: numpy's own limit on array rank.
MAX_NDIM = 64
#: Longest string field read (names, metadata values, external-data keys), in bytes.
MAX_STRING_BYTES = 1 << 20
#: Most separate runs a repeated typed field may come in (writers emit one packed run).
MAX_DATA_PIECES = 4096

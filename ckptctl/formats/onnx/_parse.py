"""Walking an ONNX ModelProto down to its tensors: initializers and Constant nodes' values.

Only ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto, OperatorSetIdProto and
StringStringEntryProto are descended into; every other field is skipped by its length. A
repeated message field is merged as protobuf merges it (two ``graph`` fields add up), a
singular scalar keeps its last value, and a field with another wire type than its declaration
is an unknown field (skipped), as protobuf's own parsers do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.formats.onnx import _schema as s
from ckptctl.formats.onnx._wire import I32, I64, LEN, VARINT, WireReader, corrupt, signed64

if TYPE_CHECKING:
    from ckptctl.formats.onnx._wire import Field
    from ckptctl.sources import ByteSource

#: A run of one repeated scalar field: (wire type, start, end). Wire type LEN is a packed
#: payload; VARINT/I32/I64 is a run of unpacked fields (keys included) one after the other.
Piece = tuple[int, int, int]


@dataclass
class TensorInfo:
    """One tensor as the file describes it (nothing of its data read).

    Attributes:
        name: the tensor name (a Constant's: its node's first output).
        kind: ``initializer`` or ``constant``.
        at: the byte where its TensorProto (or Constant attribute) begins, for messages.
        data_type: the TensorProto data type code.
        dims: the shape.
        raw: the inline ``raw_data`` payload's byte range.
        typed: the typed field in use and its runs.
        typed_count: elements in fixed-width runs (counted while walking); None for varints.
        external: the ``external_data`` key/values, when the data is in another file.
        inline: the value's bytes when the file holds them in no byte range (``value_int``).
    """

    name: str
    kind: str
    at: int
    data_type: int = 0
    dims: tuple[int, ...] = ()
    raw: tuple[int, int] | None = None
    typed: dict[int, list[Piece]] = field(default_factory=dict)
    external: list[tuple[str, str]] | None = None
    location_external: bool = False
    inline: bytes | None = None

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.dims)


@dataclass
class ParsedModel:
    """What a model declares: metadata, tensors in file order, counts of what is not listed."""

    metadata: dict[str, str] = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)
    sparse: int = 0
    skipped_constants: list[str] = field(default_factory=list)
    graphs: int = 0


class ModelParser:
    """Walks one model file (see the module docstring)."""

    def __init__(self, source: ByteSource) -> None:
        self.wire = WireReader(source)
        self.model = ParsedModel()
        self.size = source.size

    def parse(self, end: int | None = None) -> ParsedModel:
        """Walk the whole ModelProto (its fields before byte ``end``: a truncated file's).

        Raises:
            CorruptCheckpointError: a malformed protobuf or a limit exceeded.
        """
        meta = self.model.metadata
        opsets: list[str] = []
        for f in self.wire.fields(0, self.size if end is None else end):
            if f.number in (s.MODEL_IR_VERSION, s.MODEL_MODEL_VERSION) and f.wire == VARINT:
                meta[s.MODEL_FIELDS[f.number]] = str(signed64(f.value))
            elif f.number in (2, 3, 4, 6) and f.wire == LEN:
                meta[s.MODEL_FIELDS[f.number]] = self._text(f, s.MODEL_FIELDS[f.number])
            elif f.number == s.MODEL_GRAPH and f.wire == LEN:
                self.graph(f, 0)
            elif f.number == s.MODEL_OPSET_IMPORT and f.wire == LEN:
                opsets.append(self._opset(f))
            elif f.number == s.MODEL_METADATA_PROPS and f.wire == LEN:
                key, value = self._entry(f)
                meta.setdefault(key, value)
        if opsets:
            meta["opset_import"] = ",".join(opsets)
        return self.model

    def _text(self, f: Field, what: str) -> str:
        return self.wire.text(f, s.MAX_STRING_BYTES, what)

    def _opset(self, f: Field) -> str:
        domain, version = "ai.onnx", 0
        for g in self.wire.fields(f.start, f.end):
            if g.number == s.OPSET_DOMAIN and g.wire == LEN:
                domain = self._text(g, "an opset domain") or "ai.onnx"
            elif g.number == s.OPSET_VERSION and g.wire == VARINT:
                version = signed64(g.value)
        return f"{domain}:{version}"

    def _entry(self, f: Field) -> tuple[str, str]:
        key = value = ""
        for g in self.wire.fields(f.start, f.end):
            if g.number == s.ENTRY_KEY and g.wire == LEN:
                key = self._text(g, "a key")
            elif g.number == s.ENTRY_VALUE and g.wire == LEN:
                value = self._text(g, "a value")
        return key, value

    def graph(self, f: Field, depth: int) -> None:
        """Collect the tensors of the GraphProto in ``f`` and of its subgraphs."""
        if depth > s.MAX_GRAPH_DEPTH:
            corrupt(
                f"subgraphs nest deeper than {s.MAX_GRAPH_DEPTH} levels (at byte {f.key_start})"
            )
        self.model.graphs += 1
        for g in self.wire.fields(f.start, f.end):
            if g.wire != LEN:
                continue
            if g.number == s.GRAPH_NODE:
                self._node(g, depth)
            elif g.number == s.GRAPH_INITIALIZER:
                self._add(self.tensor(g, "initializer"))
            elif g.number == s.GRAPH_SPARSE_INITIALIZER:
                self.model.sparse += 1

    def _add(self, info: TensorInfo) -> None:
        if len(self.model.tensors) >= s.MAX_TENSORS:
            corrupt(f"the model has more than {s.MAX_TENSORS} tensors")
        self.model.tensors.append(info)

    def _node(self, f: Field, depth: int) -> None:
        outputs: list[str] = []
        op_type = domain = ""
        attributes: list[Field] = []
        for g in self.wire.fields(f.start, f.end):
            if g.wire != LEN:
                continue
            if g.number == s.NODE_OUTPUT:
                outputs.append(self._text(g, "a node output"))
            elif g.number == s.NODE_OP_TYPE:
                op_type = self._text(g, "an op_type")
            elif g.number == s.NODE_DOMAIN:
                domain = self._text(g, "a node domain")
            elif g.number == s.NODE_ATTRIBUTE:
                attributes.append(g)
        constant = op_type == "Constant" and domain in ("", "ai.onnx")
        for attribute in attributes:
            self._attribute(attribute, depth, outputs[0] if constant and outputs else None)
        if constant and not outputs:
            corrupt(f"a Constant node at byte {f.key_start} has no output to name its value")

    def _attribute(self, f: Field, depth: int, constant: str | None) -> None:
        """Follow subgraphs; for a Constant node (``constant`` names it), take its value."""
        name = ""
        value: Field | None = None
        scalars: list[Field] = []
        for g in self.wire.fields(f.start, f.end):
            if g.number == s.ATTR_NAME and g.wire == LEN:
                name = self._text(g, "an attribute name")
            elif g.number in (s.ATTR_G, s.ATTR_GRAPHS) and g.wire == LEN:
                self.graph(g, depth + 1)
            elif g.number == s.ATTR_T and g.wire == LEN:
                value = g
            elif g.number in (s.ATTR_F, s.ATTR_I, s.ATTR_FLOATS, s.ATTR_INTS):
                scalars.append(g)
        if constant is None:
            return
        if name == "value" and value is not None:
            info = self.tensor(value, "constant")
            info.name = constant
            self._add(info)
        elif name in ("value_float", "value_floats", "value_int", "value_ints"):
            self._add(self._scalar_constant(name, constant, f.key_start, scalars))
        elif name:
            self.model.skipped_constants.append(f"{constant!r} ({name})")

    def _scalar_constant(self, name: str, constant: str, at: int, found: list[Field]) -> TensorInfo:
        """A Constant's ``value_float(s)`` / ``value_int(s)`` as the tensor onnx makes of it."""
        info = TensorInfo(constant, "constant", at, s.FLOAT if "float" in name else s.INT64)
        number = {"value_float": s.ATTR_F, "value_int": s.ATTR_I}.get(name)
        if number is not None:  # a 0-d tensor: the last value given wins
            last = next((g for g in reversed(found) if g.number == number), None)
            if name == "value_float" and last is not None and last.wire == I32:
                info.raw = (last.start, last.end)
            elif last is not None and last.wire == VARINT:
                info.inline = signed64(last.value).to_bytes(8, "little", signed=True)
            else:
                info.inline = bytes(8 if number == s.ATTR_I else 4)
            return info
        number = s.ATTR_FLOATS if name == "value_floats" else s.ATTR_INTS
        pieces: list[Piece] = []
        count = 0
        for g in found:
            if g.number == number:
                count += self._piece(pieces, g, I32 if number == s.ATTR_FLOATS else VARINT)
        info.typed = {
            s.TENSOR_FLOAT_DATA if number == s.ATTR_FLOATS else s.TENSOR_INT64_DATA: pieces
        }
        info.dims = (count if number == s.ATTR_FLOATS else self.count_varints(pieces),)
        return info

    def _piece(self, pieces: list[Piece], g: Field, wire: int) -> int:
        """Add field ``g`` of a repeated scalar (declared ``wire``) to ``pieces``; returns the
        fixed-width elements it adds (0 for varints, counted when read)."""
        if g.wire not in (LEN, wire):
            return 0  # another wire type: an unknown field to protobuf
        if g.wire != LEN and pieces and pieces[-1][0] == g.wire and pieces[-1][2] == g.key_start:
            pieces[-1] = (g.wire, pieces[-1][1], g.end)  # one more unpacked element of the run
        else:
            if len(pieces) >= s.MAX_DATA_PIECES:
                corrupt(f"a repeated field at byte {g.key_start} comes in too many runs")
            pieces.append((g.wire, g.key_start if g.wire != LEN else g.start, g.end))
        size = {I32: 4, I64: 8}.get(wire)
        if size is None:
            return 0
        return (g.end - g.start) // size if g.wire == LEN else 1

    def count_varints(self, pieces: list[Piece]) -> int:
        """Elements in the varint runs ``pieces`` (reads them: used for Constant lists only)."""
        count = 0
        for wire, start, end in pieces:
            if wire == LEN:
                data = self.wire.source.read(start, end - start)
                count += sum(1 for byte in data if byte < 0x80)
            else:
                count += sum(1 for _ in self.wire.fields(start, end))
        return count

    def tensor(self, f: Field, kind: str) -> TensorInfo:
        """The TensorProto in ``f``."""
        info = TensorInfo("", kind, f.key_start)
        dims: list[int] = []
        for g in self.wire.fields(f.start, f.end):
            number = g.number
            if number == s.TENSOR_DIMS:
                self._dims(g, dims)
            elif number == s.TENSOR_DATA_TYPE and g.wire == VARINT:
                info.data_type = signed64(g.value) & 0xFFFFFFFF
            elif number == s.TENSOR_NAME and g.wire == LEN:
                info.name = self._text(g, "a tensor name")
            elif number == s.TENSOR_RAW_DATA and g.wire == LEN:
                info.raw = (g.start, g.end)
            elif number in s.TYPED_FIELDS:
                wire = {s.TENSOR_FLOAT_DATA: I32, s.TENSOR_DOUBLE_DATA: I64}.get(number, VARINT)
                self._piece(info.typed.setdefault(number, []), g, wire)
            elif number == s.TENSOR_EXTERNAL_DATA and g.wire == LEN:
                info.external = [*(info.external or []), self._entry(g)]
            elif number == s.TENSOR_DATA_LOCATION and g.wire == VARINT:
                info.location_external = g.value == s.LOCATION_EXTERNAL
            elif number == s.TENSOR_SEGMENT and g.wire == LEN:
                corrupt(f"tensor at byte {f.key_start} is a segment, which onnx cannot load")
        if len(dims) > s.MAX_NDIM:
            corrupt(f"tensor {info.name!r} has {len(dims)} dimensions (limit {s.MAX_NDIM})")
        info.dims = tuple(dims)
        return info

    def _dims(self, g: Field, dims: list[int]) -> None:
        if g.wire == VARINT:
            values = [g.value]
        elif g.wire == LEN:  # packed: at most MAX_NDIM varints of up to 10 bytes
            data = self.wire.bytes(g, (s.MAX_NDIM + 1) * 10)
            values = decode_varints(data, g.key_start)
        else:
            return
        for value in values:
            dim = signed64(value)
            if dim < 0:
                corrupt(f"a tensor at byte {g.key_start} has the negative dimension {dim}")
            dims.append(dim)
            if len(dims) > s.MAX_NDIM:
                corrupt(f"a tensor at byte {g.key_start} has more than {s.MAX_NDIM} dimensions")


def decode_varints(data: bytes, at: int) -> list[int]:
    """The varints of a short packed payload (dims), as unsigned 64-bit values."""
    values: list[int] = []
    value = shift = 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            values.append(value & ((1 << 64) - 1))
            value = shift = 0
        elif shift >= 70:
            corrupt(f"a varint in the packed field at byte {at} is longer than 10 bytes")
    if shift:
        corrupt(f"the packed field at byte {at} ends inside a varint")
    return values

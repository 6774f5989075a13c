"""What a decoded record means: model tensors, optimizer states or a scheduler's counters.

A record is serde's encoding of ``BurnRecord { metadata: BurnMetadata, item }``. ``item`` is:

* a module record (``model-N.mpk``): structs as maps of field names, ``Vec`` as arrays,
  ``Option::None`` and constant fields as nil, enums as ``{"Variant": payload}``; a parameter is
  ``{"id": ParamId text, "param": TensorData}`` and a plain tensor a bare ``TensorData``
  ``{"bytes", "shape", "dtype"}``. Tensor names are the field paths joined with ``.``.
* an optimizer record (``optim-N.mpk``): ``{ParamId text: {"V1": {"RankN": state}}}``, the
  adaptor's versioned, rank-tagged state per parameter. It is presented in burn 0.22's optimizer
  record layout (``docs/formats/burn-store.md#optimizer-records``): tensors
  ``<id>.<field path>`` carrying ``param_id = id``, scalars ``<id>.__rank`` and the state's
  integer/float/bool fields (``<id>.momentum.time``).
* a learning-rate scheduler record (``scheduler-N.mpk``): a bare number (cosine, linear, noam,
  step, exponential), nil (constant) or a composed ``{"schedulers": [{"Cosine": n}, ...]}``.
  burn 0.22's burn-train stores ``ModuleLrScheduler`` records, whose scalars sit under the
  parameter group's index (``0.current_iter``). Only records whose scheduler is known from the
  value itself are given that layout; a bare integer could be any of four schedulers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.dtypes import DType
from ckptctl.errors import CorruptCheckpointError, UnsupportedError
from ckptctl.formats.burnpack._schema import parse_param_id
from ckptctl.formats.burnrecord._tree import MAX_NDIM, Blob, Node, Numbers
from ckptctl.model import StrEnum

if TYPE_CHECKING:
    from ckptctl.model import JSONValue

METADATA_KEYS = ("float", "int", "format", "version", "settings")

#: burn ``DType`` names (every release 0.14-0.21) that map onto one of ours.
PLAIN_DTYPES = {
    "F64": DType.F64, "F32": DType.F32, "F16": DType.F16, "BF16": DType.BF16,
    "I64": DType.I64, "I32": DType.I32, "I16": DType.I16, "I8": DType.I8,
    "U64": DType.U64, "U32": DType.U32, "U16": DType.U16, "U8": DType.U8,
}  # fmt: skip
BOOL_STORES = {"Native": 1, "U8": 1, "U32": 4}

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_RANK = re.compile(r"Rank([0-9])")

LEGACY_HINT = (
    "this record was written by burn < 0.14 (tensors as {value, shape}); load it with burn "
    "0.14-0.16 (feature record-backward-compat) and save it again, then convert that file"
)

#: Optimizer state structs burn shipped, by the field paths of one parameter's state.
KNOWN_STATES: tuple[tuple[str, frozenset[str], frozenset[str]], ...] = (
    (
        "Adam/AdamW",
        frozenset({"momentum.time", "momentum.moment_1", "momentum.moment_2"}),
        frozenset({"momentum.max_moment_2"}),
    ),
    (
        "Adan",
        frozenset(
            {
                "momentum.time",
                "momentum.exp_avg",
                "momentum.exp_avg_sq",
                "momentum.exp_avg_diff",
                "momentum.neg_pre_grad",
            }
        ),
        frozenset(),
    ),
    ("AdaGrad", frozenset({"lr_decay.time", "lr_decay.sum"}), frozenset()),
    ("SGD/Muon with momentum", frozenset({"momentum.velocity"}), frozenset()),
    ("SGD without momentum", frozenset(), frozenset()),
    (
        "RMSProp",
        frozenset({"square_avg.square_avg", "centered.avg"}),
        frozenset({"centered.grad_avg", "momentum.buf"}),
    ),
)

#: Old composed-scheduler variants -> burn 0.22 scalar name and kind.
SCHEDULER_FIELDS = {
    "Linear": ("remaining_iters", "UInt"),
    "Cosine": ("current_iter", "UInt"),
    "Exponential": ("previous_lr", "Float"),
    "Noam": ("step", "Float"),
}


class RecordKind(StrEnum):
    """What a Burn record holds."""

    MODEL = "model"
    OPTIMIZER = "optimizer"
    SCHEDULER = "scheduler"


@dataclass(frozen=True)
class TensorSpec:
    """One tensor found in a record, before it is bound to a byte source."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    payload: Blob | Numbers | bytes
    itemsize: int  # bytes per element in the payload (4 for a u32 bool store)
    param_id: int | None
    source_dtype: JSONValue


@dataclass
class Interpreted:
    """A record's tensors, scalars and what to say about it."""

    kind: RecordKind
    metadata: dict[str, str]
    tensors: list[TensorSpec] = field(default_factory=list)
    scalars: dict[str, JSONValue] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Why this record cannot be written in burn 0.22's layout (None: it can).
    refusal: str | None = None


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_id(text: str, where: str) -> int | None:
    """A ParamId's u64 from its text; None for a UUID-style id (burn < 0.13).

    Raises:
        CorruptCheckpointError: the text is neither.
    """
    if _UUID.fullmatch(text):
        return None
    if len(text) in (10, 13):
        try:
            return parse_param_id(text.lower())
        except ValueError:
            pass
    raise CorruptCheckpointError(
        f"{where}: ParamId {_describe(text)} is neither burn's 13-character base32 id nor a UUID"
    )


def _dtype(value: Node, name: str) -> tuple[DType, int, JSONValue]:
    """``(dtype, itemsize on disk, source_dtype)`` for a burn DType value."""
    if isinstance(value, str):
        if value in PLAIN_DTYPES:
            dtype = PLAIN_DTYPES[value]
            return dtype, dtype.itemsize, None
        if value == "Flex32":
            return DType.F32, 4, "Flex32"
        if value == "Bool":  # burn <= 0.20; 0.22 only reads {"Bool": store}, so write the default
            return DType.BOOL, 1, None
    if isinstance(value, dict) and len(value) == 1:
        ((kind, arg),) = value.items()
        if kind == "Bool" and isinstance(arg, str) and arg in BOOL_STORES:
            return DType.BOOL, BOOL_STORES[arg], {"Bool": arg}
        if kind == "QFloat":
            raise UnsupportedError(
                f"tensor {name!r} is quantized (QFloat); quantized tensors in pre-0.22 records "
                "are not supported",
                hint="dequantize it with the burn that wrote the record and save it again",
            )
    raise CorruptCheckpointError(f"tensor {name!r} has an unknown dtype {_describe(value)}")


def _shape(value: Node, name: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > MAX_NDIM:
        raise CorruptCheckpointError(
            f"tensor {name!r}: shape {_describe(value)} is not a list of at most {MAX_NDIM} sizes"
        )
    dims = []
    for dim in value:
        if not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim < 1 << 64:
            raise CorruptCheckpointError(
                f"tensor {name!r}: shape {_describe(value)} holds {_describe(dim)}"
            )
        dims.append(dim)
    return tuple(dims)


def _payload(value: Node, name: str) -> Blob | Numbers | bytes:
    if isinstance(value, Blob):
        return value
    if isinstance(value, Numbers):
        if not value.integers:
            raise CorruptCheckpointError(f"tensor {name!r}: its bytes are not integers 0-255")
        return value
    if isinstance(value, list) and all(  # an empty JSON byte array
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255 for v in value
    ):
        return bytes(v for v in value if isinstance(v, int))
    raise CorruptCheckpointError(f"tensor {name!r}: bytes are {_describe(value)}, not a byte array")


def is_tensor(node: Node) -> bool:
    """A serde ``TensorData``: exactly ``bytes``, ``shape`` and ``dtype``."""
    return isinstance(node, dict) and set(node) == {"bytes", "shape", "dtype"}


def is_param(node: Node) -> bool:
    """A serde ``ParamSerde``: exactly ``id`` (text) and ``param``."""
    return isinstance(node, dict) and set(node) == {"id", "param"} and isinstance(node["id"], str)


def _is_legacy(node: Node) -> bool:
    return isinstance(node, dict) and set(node) == {"value", "shape"}


def tensor_spec(node: dict[str, Node], name: str, param_id: int | None) -> TensorSpec:
    """Validate a ``TensorData`` map: dtype, shape and payload length."""
    dtype, itemsize, source_dtype = _dtype(node["dtype"], name)
    shape = _shape(node["shape"], name)
    payload = _payload(node["bytes"], name)
    length = payload.length if isinstance(payload, Blob) else _count(payload)
    need = math.prod(shape) * itemsize
    if length != need:
        raise CorruptCheckpointError(
            f"tensor {name!r} has {length} payload bytes, but shape {list(shape)} of "
            f"{node['dtype'] if isinstance(node['dtype'], str) else dtype.value} needs {need}"
        )
    return TensorSpec(name, dtype, shape, payload, itemsize, param_id, source_dtype)


def _count(payload: Numbers | bytes) -> int:
    return payload.count if isinstance(payload, Numbers) else len(payload)


# --- model records ---------------------------------------------------------------------------


def _walk_model(node: Node, path: list[str], out: Interpreted, uuids: list[str]) -> None:
    name = ".".join(path) or "item"
    if isinstance(node, dict):
        if is_param(node):
            param = node["param"]
            if _is_legacy(param):
                raise UnsupportedError(
                    f"tensor {name!r} uses burn's pre-0.14 layout", hint=LEGACY_HINT
                )
            if not is_tensor(param):
                raise CorruptCheckpointError(
                    f"parameter {name!r}: 'param' is not a tensor (bytes, shape, dtype)"
                )
            text = node["id"]
            assert isinstance(text, str)
            pid = parse_id(text, f"parameter {name!r}")
            if pid is None:
                uuids.append(name)
            out.tensors.append(tensor_spec(param, name, pid))  # type: ignore[arg-type]  # checked
            return
        if is_tensor(node):
            out.tensors.append(tensor_spec(node, name, None))
            return
        if _is_legacy(node):
            raise UnsupportedError(f"tensor {name!r} uses burn's pre-0.14 layout", hint=LEGACY_HINT)
        for key, value in node.items():
            _walk_model(value, [*path, key], out, uuids)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _walk_model(value, [*path, str(index)], out, uuids)


# --- optimizer records -----------------------------------------------------------------------


def _adaptor_state(value: Node) -> tuple[int, Node] | None:
    """``(rank, state)`` of ``{"V1": {"RankN": state}}``, else None."""
    if not (isinstance(value, dict) and set(value) == {"V1"}):
        return None
    inner = value["V1"]
    if not (isinstance(inner, dict) and len(inner) == 1):
        return None
    ((tag, state),) = inner.items()
    match = _RANK.fullmatch(tag)
    return None if match is None else (int(match.group(1)), state)


def _looks_like_id(text: str) -> bool:
    return len(text) in (10, 13) or _UUID.fullmatch(text) is not None


def is_optimizer_item(item: Node) -> bool:
    """``{ParamId: {"V1": {"RankN": state}}}`` with at least one state."""
    return (
        isinstance(item, dict)
        and bool(item)
        and all(_looks_like_id(k) and _adaptor_state(v) is not None for k, v in item.items())
    )


def _flatten_state(
    node: Node, path: str, pid: int, out: Interpreted, fields: set[str], prefix: str
) -> None:
    name = f"{prefix}.{path}"
    if node is None:  # Option::None: burn 0.22 writes nothing
        return
    if isinstance(node, dict) and is_tensor(node):
        out.tensors.append(tensor_spec(node, name, pid))
        fields.add(path)
    elif isinstance(node, dict):
        if _is_legacy(node):
            raise UnsupportedError(f"state {name!r} uses burn's pre-0.14 layout", hint=LEGACY_HINT)
        for key, value in node.items():
            _flatten_state(value, f"{path}.{key}" if path else key, pid, out, fields, prefix)
    elif isinstance(node, bool):
        out.scalars[name] = {"Bool": node}
        fields.add(path)
    elif isinstance(node, int):
        out.scalars[name] = {"UInt": node} if node >= 0 else {"Int": node}
        fields.add(path)
    elif isinstance(node, float):
        out.scalars[name] = {"Float": node}
        fields.add(path)
    elif isinstance(node, list) and all(isinstance(v, dict) and is_tensor(v) for v in node):
        for index, value in enumerate(node):  # Vec<Tensor>: `.i` tensors and a `.len` scalar
            assert isinstance(value, dict)
            out.tensors.append(tensor_spec(value, f"{name}.{index}", pid))
        out.scalars[f"{name}.len"] = {"UInt": len(node)}
        fields.add(path)
    else:
        raise UnsupportedError(
            f"optimizer state field {path!r} holds {_describe(node)}, which burn 0.22's "
            "optimizer record layout has no place for"
        )


def _optimizer_family(signatures: set[frozenset[str]]) -> str | None:
    names = []
    for signature in signatures:
        for family, required, optional in KNOWN_STATES:
            if required <= signature <= required | optional:
                names.append(family)
                break
        else:
            return None
    return " + ".join(sorted(set(names)))


def _interpret_optimizer(item: dict[str, Node], out: Interpreted) -> None:
    signatures: set[frozenset[str]] = set()
    for key, value in item.items():
        pid = parse_id(key, f"optimizer state {key!r}")
        if pid is None:
            raise UnsupportedError(
                f"optimizer state {key!r} is keyed by a UUID ParamId (burn < 0.13), which "
                "burn 0.22 hashes in a way ckptctl cannot reproduce",
                hint=LEGACY_HINT,
            )
        found = _adaptor_state(value)
        assert found is not None
        rank, state = found
        prefix = str(pid)
        if f"{prefix}.__rank" in out.scalars:
            raise CorruptCheckpointError(f"optimizer state for ParamId {pid} appears twice")
        out.scalars[f"{prefix}.__rank"] = {"UInt": rank}
        fields: set[str] = set()
        _flatten_state(state, "", pid, out, fields, prefix)
        signatures.add(frozenset(fields))
    family = _optimizer_family(signatures)
    states = len(item)
    if family is not None:
        out.notes.append(
            f"optimizer record: {states} parameter states ({family}), listed in burn 0.22's "
            "layout: <ParamId>.<field> tensors, <ParamId>.__rank and scalar fields"
        )
    else:
        shown = sorted({f for s in signatures for f in s})[:12]
        out.notes.append(
            f"optimizer record: {states} parameter states whose fields ({', '.join(shown)}) are "
            "not a known burn optimizer; carried field by field in burn 0.22's naming"
        )


# --- scheduler records -----------------------------------------------------------------------


def is_scheduler_item(item: Node) -> bool:
    """A bare number, nil, or a composed ``{"schedulers": [{"Variant": value}, ...]}``."""
    if item is None or (isinstance(item, (int, float)) and not isinstance(item, bool)):
        return True
    if not (isinstance(item, dict) and set(item) == {"schedulers"}):
        return False
    children = item["schedulers"]
    return isinstance(children, list) and all(
        isinstance(c, dict) and len(c) == 1 and next(iter(c)) in SCHEDULER_FIELDS for c in children
    )


def _scheduler_scalar(kind: str, value: Node) -> JSONValue:
    if kind == "Float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return {"Float": float(value)}
    elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return {"UInt": value}
    raise CorruptCheckpointError(f"scheduler value {_describe(value)} is not a {kind}")


def _interpret_scheduler(item: Node, out: Interpreted) -> None:
    group = "0"  # burn-train 0.22 saves a ModuleLrScheduler: one group, index 0
    if item is None:
        out.notes.append("scheduler record: constant learning rate (no state)")
    elif isinstance(item, float):
        out.scalars[f"{group}.previous_lr"] = {"Float": item}
        out.notes.append(f"scheduler record: exponential, previous_lr = {item!r}")
    elif isinstance(item, int):
        out.notes.append(
            f"scheduler record: the integer {item}, which is the state of a cosine "
            "(current_iter), linear (remaining_iters), noam (step) or step (iter_idx) scheduler"
        )
        out.refusal = (
            f"the scheduler record holds only the integer {item}: it may be a cosine, linear, "
            "noam or step scheduler, whose burn 0.22 records name and type it differently, and "
            "the old record does not say which"
        )
    else:
        assert isinstance(item, dict)
        children = item["schedulers"]
        assert isinstance(children, list)
        kinds = []
        for index, child in enumerate(children):
            assert isinstance(child, dict)
            ((variant, value),) = child.items()
            leaf, kind = SCHEDULER_FIELDS[variant]
            out.scalars[f"{group}.{index}.{leaf}"] = _scheduler_scalar(kind, value)
            kinds.append(variant.lower())
        out.notes.append(f"scheduler record: composed of {', '.join(kinds) or 'nothing'}")


# --- the whole record ------------------------------------------------------------------------


def _metadata(value: Node) -> dict[str, str]:
    if not isinstance(value, dict):
        raise CorruptCheckpointError(
            f"the record's metadata is {_describe(value)}, not a map of strings"
        )
    return {k: v for k, v in value.items() if isinstance(v, str)}


def interpret(root: Node) -> Interpreted:
    """Read a decoded ``BurnRecord`` as a model, optimizer or scheduler record.

    Raises:
        CorruptCheckpointError: not a Burn record, or a tensor or id that burn could not read.
        UnsupportedError: a valid record using what ckptctl does not migrate (quantized
            tensors, the pre-0.14 tensor layout, UUID optimizer ids).
    """
    if not (isinstance(root, dict) and "metadata" in root and "item" in root):
        raise CorruptCheckpointError(
            "not a Burn record: the top level must be a map with 'metadata' and 'item'"
        )
    extra = sorted(set(root) - {"metadata", "item", "_b"})  # _b: PhantomData, burn <= 0.21
    metadata = _metadata(root["metadata"])
    item = root["item"]
    if is_optimizer_item(item):
        assert isinstance(item, dict)
        out = Interpreted(RecordKind.OPTIMIZER, metadata)
        _interpret_optimizer(item, out)
    elif is_scheduler_item(item):
        out = Interpreted(RecordKind.SCHEDULER, metadata)
        _interpret_scheduler(item, out)
    else:
        out = Interpreted(RecordKind.MODEL, metadata)
        uuids: list[str] = []
        _walk_model(item, [], out, uuids)
        if uuids:
            out.notes.append(
                f"{len(uuids)} parameters have UUID-style ParamIds (burn < 0.13), which burn "
                "hashes in a way ckptctl cannot reproduce: they are kept without a param_id "
                f"(burn gives them fresh ids on load), e.g. {uuids[0]!r}"
            )
        ids: dict[int, str] = {}
        for spec in out.tensors:
            if spec.param_id is not None and spec.param_id in ids:
                out.notes.append(
                    f"ParamId {spec.param_id} is shared by {ids[spec.param_id]!r} and "
                    f"{spec.name!r}; optimizer state would attach to both"
                )
            elif spec.param_id is not None:
                ids[spec.param_id] = spec.name
        if not out.tensors:
            out.notes.append("the record holds no tensors")
    if extra:
        out.notes.append(f"top-level keys besides metadata and item are ignored: {extra}")
    return out

"""The unpickler stage of every .pt reader (``load_pickle``): the emulated rebuild functions
and builtins, pre-0.4 tensors, stand-in types for unknown globals, the global mapping, and what
it refuses.

Pickles are assembled from the stdlib's opcode constants; plain values are spelled as the stdlib
pickles them (protocol 2, ``pickletools.optimize``). Where the stdlib itself pickles an emulated
builtin (``bytearray``, ``set``, ``complex``, ``OrderedDict``, protocol 0 instances), those bytes
are unpickled and compared with ``pickle.loads``. Storage and dtype names follow
``docs/formats/pytorch.md#pickle`` and ``#dtypes``; torch-written fixtures give the parameter flags.
Refusals are checked by class, exit code and the facts their message must carry (what was found, the
argument, the global, the stream name, the byte position), matched with the safety walk's ``Says``;
hints by a keyword.
"""

from __future__ import annotations

import _compat_pickle
import argparse
import pickle
import pickletools
import runpy
import zipfile
from collections import OrderedDict
from pathlib import Path

# Opcodes, from the stdlib's own table.
from pickle import (
    APPEND,
    APPENDS,
    BINPERSID,
    BUILD,
    EMPTY_DICT,
    EMPTY_TUPLE,
    MARK,
    NEWOBJ,
    NONE,
    PROTO,
    REDUCE,
    SETITEM,
    SETITEMS,
    STOP,
    TUPLE,
    TUPLE2,
    TUPLE3,
)
from typing import Any

import pytest

from ckptctl.errors import (
    CkptError,
    CorruptCheckpointError,
    ExitCode,
    UnsafePickleError,
    UnsupportedError,
)
from ckptctl.formats import open_checkpoint
from ckptctl.formats.pytorch import _unpickler
from ckptctl.formats.pytorch._scan import PickleTruncatedError
from ckptctl.formats.pytorch._unpickler import (
    MAX_RANK,
    SafeUnpickler,
    StorageRef,
    StorageType,
    Stub,
    TensorRef,
    TorchDType,
    load_pickle,
)
from ckptctl.formats.pytorch._verdict import Ledger
from tests.conftest import VALID
from tests.formats.test_pytorch_safety_walk import Says

P2 = PROTO + b"\x02"
WHERE = "data.pkl"
PT = VALID / "pytorch"

# docs/formats/pytorch.md#dtypes: legacy storage (and pre-0.4 tensor) class name prefixes -> torch
# dtype.
SPEC_STORAGE_DTYPES = {
    "Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
    "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8",
    "Bool": "bool", "ComplexFloat": "complex64", "ComplexDouble": "complex128",
    "QUInt8": "quint8", "QInt8": "qint8", "QInt32": "qint32", "QUInt4x2": "quint4x2",
    "QUInt2x4": "quint2x4",
}  # fmt: skip


# --- pickle assembly --------------------------------------------------------------------------


def g(module: str, name: str) -> bytes:
    """GLOBAL ``module.name``, as protocol 2 spells it."""
    return pickle.GLOBAL + module.encode() + b"\n" + name.encode() + b"\n"


def val(obj: object) -> bytes:
    """The opcodes of a plain value as the stdlib pickles it (no PROTO, no STOP)."""
    data = pickletools.optimize(pickle.dumps(obj, protocol=2))
    assert data[:2] == P2
    assert data[-1:] == STOP
    return data[2:-1]


def call(func: bytes, *args: bytes) -> bytes:
    return func + MARK + b"".join(args) + TUPLE + REDUCE


def storage(
    name: str = "FloatStorage", key: str = "0", numel: int = 4, module: str = "torch"
) -> bytes:
    """A ZIP persistent id ``('storage', type, key, 'cpu', numel)``
    (docs/formats/pytorch.md#pickle)."""
    return (
        MARK
        + val("storage")
        + g(module, name)
        + val(key)
        + val("cpu")
        + val(numel)
        + TUPLE
        + BINPERSID
    )


def storage_ref(pid: object) -> StorageRef:
    """What the ZIP reader hands back for a storage persistent id."""
    assert isinstance(pid, tuple)
    assert len(pid) == 5
    assert pid[0] == "storage"
    _, stype, key, location, numel = pid
    assert isinstance(stype, StorageType)
    return StorageRef(key, stype, numel, location=location)


def hooks() -> bytes:
    return call(g("collections", "OrderedDict"))


def v2(*args: bytes) -> bytes:
    return call(g("torch._utils", "_rebuild_tensor_v2"), *args)


def dense(
    size: object = (2,), stride: object = (1,), offset: object = 0, st: bytes | None = None
) -> bytes:
    """``_rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())`` (torch's)."""
    st = storage() if st is None else st
    return v2(st, val(offset), val(size), val(stride), val(False), hooks())


def load(body: bytes, **kwargs: Any) -> object:
    data = P2 + body + STOP
    obj, end = load_pickle(data, WHERE, storage_ref, **kwargs)
    assert end == len(data)
    return obj


def tensor(body: bytes) -> TensorRef:
    obj = load(body)
    assert isinstance(obj, TensorRef)
    return obj


def error(body: bytes, cls: type[CkptError] = CorruptCheckpointError) -> CkptError:
    with pytest.raises(cls) as info:
        load(body)
    assert type(info.value) is cls
    assert str(info.value) == info.value.message
    assert info.value.exit_code == ExitCode.INPUT
    return info.value


def says(body: bytes, *facts: str) -> None:
    """``body`` is refused as corrupt, its message carrying each of ``facts``."""
    assert error(body).message == Says(*facts)


def fields(t: TensorRef) -> tuple[object, ...]:
    key = None if t.storage is None else t.storage.key
    return (key, t.offset, t.size, t.stride, t.dtype, t.flags, t.unsupported)


# --- objects the pickle did not make refuse BUILD -----------------------------------------------


@pytest.mark.parametrize(
    ("target", "shown"),
    [
        (g("torch._utils", "_rebuild_tensor_v2"), "torch._utils._rebuild_tensor_v2"),
        (g("__builtin__", "set"), "builtins.set"),  # named after the Python 2 mapping
        (g("torch.storage", "UntypedStorage"), "StorageType(torch.storage.UntypedStorage)"),
        (g("torch.cuda", "HalfStorage"), "StorageType(torch.cuda.HalfStorage)"),
        (g("torch", "FooStorage"), "StorageType(torch.FooStorage)"),
        (g("torch", "half"), "torch.float16"),
    ],
)
def test_build_on_an_object_the_pickle_did_not_make(target: bytes, shown: str) -> None:
    err = error(target + EMPTY_DICT + BUILD)
    assert err.message == Says(f"BUILD on {shown},", "the pickle made")
    assert err.hint is None


# --- dense tensors: storage, offset, size, stride ---------------------------------------------


def test_a_dense_tensor_records_its_layout() -> None:
    t = tensor(dense((2, 3), (3, 1), 5, storage("DoubleStorage", "7", 11)))
    assert fields(t) == ("7", 5, (2, 3), (3, 1), "float64", frozenset(), None)
    assert t.storage is not None
    assert t.storage.stype.qualname == "torch.DoubleStorage"
    assert (t.is_parameter, t.subclass) == (False, None)


def test_a_tensor_over_an_untyped_storage_is_bytes() -> None:
    """docs/formats/pytorch.md#dtypes: ``UntypedStorage`` alone holds bytes (u1)."""
    t = tensor(dense(st=storage("UntypedStorage", module="torch.storage")))
    assert t.dtype == "uint8"


NEGATIVE, RANK = "non-negative integer", f"at most {MAX_RANK} ints"
LAYOUT_ERRORS = [
    # (offset, size, stride, what, the refusal)
    (-1, (2,), (1,), "storage offset", NEGATIVE),
    (True, (2,), (1,), "storage offset", NEGATIVE),
    (1.0, (2,), (1,), "storage offset", NEGATIVE),
    (0, (2, -1), (1, 1), "size", NEGATIVE),
    (0, (True,), (1,), "size", NEGATIVE),
    (0, (1.5,), (1,), "size", NEGATIVE),
    (0, [2, -1], (1, 1), "size", NEGATIVE),
    (0, (2,), (-1,), "stride", NEGATIVE),
    (0, (2,), [None], "stride", NEGATIVE),
    (0, 5, (1,), "size", RANK),
    (0, "ab", (1,), "size", RANK),
    (0, (1,) * (MAX_RANK + 1), (1,), "size", RANK),
    (0, [1] * (MAX_RANK + 1), (1,), "size", RANK),
    (0, (1,), (0,) * (MAX_RANK + 1), "stride", RANK),
    # At the rank limit a bad element is reported as such, not as a rank overflow.
    (0, (1,) * (MAX_RANK - 1) + (-1,), (1,), "size", NEGATIVE),
    (0, [1] * (MAX_RANK - 1) + [-1], (1,), "size", NEGATIVE),
]


@pytest.mark.parametrize(("offset", "size", "stride", "what", "refusal"), LAYOUT_ERRORS)
def test_bad_layout_arguments(
    offset: object, size: object, stride: object, what: str, refusal: str
) -> None:
    says(dense(size, stride, offset), f"tensor {what} must be", refusal)


def test_rank_limit_is_inclusive() -> None:
    ones = (1,) * MAX_RANK
    t = tensor(dense(ones, (0,) * MAX_RANK))
    assert (t.size, t.stride) == (ones, (0,) * MAX_RANK)
    t = tensor(dense([1] * MAX_RANK, [0] * MAX_RANK))  # lists become tuples
    assert (t.size, t.stride) == (ones, (0,) * MAX_RANK)
    assert type(t.size) is tuple
    assert type(t.stride) is tuple
    t = tensor(dense([], []))
    assert (t.size, t.stride) == ((), ())
    t = tensor(dense((2**40, 0), (0, 1)))
    assert (t.size, t.stride) == ((2**40, 0), (0, 1))


def test_tensor_storage_must_come_from_a_persistent_id() -> None:
    for st in (val(None), g("torch", "FloatStorage"), val("0")):
        says(dense(st=st), "tensor storage", "persistent id")


# --- metadata flags, v3 dtypes, parameters ---------------------------------------------------


def v2_meta(metadata: bytes) -> bytes:
    return v2(storage(), val(0), val((2,)), val((1,)), val(False), hooks(), metadata)


def test_metadata_flags() -> None:
    """Spec 3.5: ``{'conj': True}`` / ``{'neg': True}``; a false flag is no flag."""
    assert tensor(v2_meta(val({"conj": True}))).flags == frozenset({"conj"})
    assert tensor(v2_meta(val({"conj": True, "neg": True}))).flags == frozenset({"conj", "neg"})
    assert tensor(v2_meta(val({"conj": False, "neg": True}))).flags == frozenset({"neg"})
    assert tensor(v2_meta(val(None))).flags == frozenset()
    assert tensor(v2_meta(call(g("collections", "OrderedDict")))).flags == frozenset()


def test_metadata_errors() -> None:
    says(v2_meta(val([("conj", True)])), "metadata", "not a dict")
    says(v2_meta(val("conj")), "metadata", "not a dict")
    says(v2_meta(val({"conj": True, "zero": True})), "unknown", "metadata key 'zero'")


def v3(dtype: bytes, *metadata: bytes) -> bytes:
    st = storage("UntypedStorage", numel=8, module="torch.storage")
    args = (st, val(1), val((3,)), val((1,)), val(False), hooks(), dtype, *metadata)
    return call(g("torch._utils", "_rebuild_tensor_v3"), *args)


def test_v3_takes_its_dtype_and_flags_from_the_arguments() -> None:
    t = tensor(v3(g("torch", "float8_e4m3fn"), val({"neg": True})))
    assert fields(t) == ("0", 1, (3,), (1,), "float8_e4m3fn", frozenset({"neg"}), None)
    t = tensor(v3(g("torch", "chalf"), val({"conj": True})))  # an alias
    assert (t.dtype, t.flags) == ("complex32", frozenset({"conj"}))
    assert tensor(v3(g("torch", "uint16"))).flags == frozenset()


def test_v3_dtype_must_be_a_torch_dtype() -> None:
    for dtype in (val("float16"), val(None), g("torch", "HalfStorage")):
        says(v3(dtype), "_rebuild_tensor_v3", "not a torch dtype")


def fixture_data_pkl(name: str) -> bytes:
    with zipfile.ZipFile(PT / name) as zf:
        (record,) = [n for n in zf.namelist() if n.endswith("/data.pkl")]
        return zf.read(record)


def test_torch_written_parameters_are_marked() -> None:
    params, _ = load_pickle(fixture_data_pkl("parameter.pt"), WHERE, storage_ref)
    assert isinstance(params, dict)
    assert len(params) == 2
    assert all(isinstance(t, TensorRef) and t.is_parameter is True for t in params.values())
    plain, _ = load_pickle(fixture_data_pkl("min_zip.pt"), WHERE, storage_ref)
    assert isinstance(plain, dict)
    assert len(plain) == 2
    assert all(isinstance(t, TensorRef) and t.is_parameter is False for t in plain.values())


@pytest.mark.parametrize(
    "function",
    [
        g("torch._utils", "_rebuild_parameter"),
        g("torch._utils", "_rebuild_parameter_with_state"),
        g("torch.nn.parameter", "Parameter"),  # very old files: Parameter(data, requires_grad)
    ],
)
def test_parameters(function: bytes) -> None:
    t = load(call(function, dense(), val(True), hooks()))
    assert isinstance(t, TensorRef)
    assert t.is_parameter is True
    assert fields(t) == ("0", 0, (2,), (1,), "float32", frozenset(), None)
    for data in (val(None), val((2,)), storage()):
        says(call(function, data, val(True), hooks()), "parameter data", "not a tensor")


def test_newobj_builds_a_parameter_as_very_old_files_do() -> None:
    # Spec 3.3: very old files build Parameter with NEWOBJ (cls.__new__(cls, *args)), which
    # torch's weights_only loader allows. NEWOBJ needs a real class, not a wrapped callable.
    t = load(g("torch.nn.parameter", "Parameter") + dense() + val(True) + TUPLE2 + NEWOBJ)
    assert isinstance(t, TensorRef)
    assert t.is_parameter is True
    assert fields(t) == ("0", 0, (2,), (1,), "float32", frozenset(), None)


def test_newobj_builds_an_ordered_dict_that_setitems_fills() -> None:
    body = g("collections", "OrderedDict") + EMPTY_TUPLE + NEWOBJ
    got = load(body + MARK + val("b") + val(2) + val("a") + val(1) + SETITEMS)
    assert isinstance(got, OrderedDict)
    assert list(got.items()) == [("b", 2), ("a", 1)]


@pytest.mark.parametrize(
    ("module", "name"), [("torch.nn.parameter", "Parameter"), ("collections", "OrderedDict")]
)
def test_build_on_a_class_newobj_builds_changes_nothing(module: str, name: str) -> None:
    cls = SafeUnpickler(b"", WHERE).find_class(module, name)
    assert isinstance(cls, type)
    before = dict(vars(cls))
    with pytest.raises(CkptError):
        load(g(module, name) + NONE + val({"__new__": 1}) + TUPLE2 + BUILD)
    with pytest.raises(CkptError):
        load(g(module, name) + val({"__init__": 1}) + BUILD)
    assert dict(vars(cls)) == before


def test_device_tensor_from_a_cpu_tensor_is_the_cpu_tensor() -> None:
    function = g("torch._utils", "_rebuild_device_tensor_from_cpu_tensor")
    t = tensor(
        call(function, dense((4,), (1,), 0), g("torch", "float32"), val("xla:0"), val(False))
    )
    assert fields(t) == ("0", 0, (4,), (1,), "float32", frozenset(), None)
    says(call(function, val(None), g("torch", "float32"), val("xla:0"), val(False)), "not a tensor")


# --- tensor subclasses: _rebuild_from_type_v2 ---------------------------------------------------


def from_type(
    func: bytes, new_type: bytes, args: bytes, *, name: str = "_rebuild_from_type_v2"
) -> bytes:
    return call(g("torch._tensor", name), func, new_type, args, val({}))


V2_ARGS = MARK + storage() + val(0) + val((2,)) + val((1,)) + val(False) + hooks() + TUPLE


@pytest.mark.parametrize("name", ["_rebuild_from_type_v2", "_rebuild_from_type"])
def test_a_tensor_subclass_records_its_class(name: str) -> None:
    rebuild = g("torch._utils", "_rebuild_tensor_v2")
    t = tensor(from_type(rebuild, g("mypkg.tensors", "MyTensor"), V2_ARGS, name=name))
    assert fields(t) == ("0", 0, (2,), (1,), "float32", frozenset(), None)
    assert t.subclass == "mypkg.tensors.MyTensor"
    for new_type in (val(None), g("collections", "OrderedDict"), val("mypkg.MyTensor")):
        t = tensor(from_type(rebuild, new_type, V2_ARGS, name=name))  # not a stand-in class
        assert t.subclass is None


def test_a_subclass_rebuild_that_makes_no_tensor_returns_what_it_made() -> None:
    made = load(from_type(g("builtins", "set"), g("mypkg", "MySet"), val(([1, 2],))))
    assert made == {1, 2}


def test_a_subclass_rebuild_needs_a_function_and_an_argument_tuple() -> None:
    rebuild = g("torch._utils", "_rebuild_tensor_v2")
    args_list = EMPTY_LIST_OF(V2_ARGS)
    for body in (
        from_type(val(5), g("mypkg", "MyTensor"), V2_ARGS),
        from_type(rebuild, g("mypkg", "MyTensor"), args_list),
        from_type(rebuild, g("mypkg", "MyTensor"), val(None)),
    ):
        says(body, "_rebuild_from_type_v2", "bad function or arguments")


def EMPTY_LIST_OF(tuple_body: bytes) -> bytes:  # reads as an opcode
    """The same items as a list: EMPTY_LIST, MARK, items, APPENDS (``tuple_body`` ends in TUPLE)."""
    assert tuple_body[:1] == MARK
    assert tuple_body[-1:] == TUPLE
    return pickle.EMPTY_LIST + tuple_body[:-1] + APPENDS


# --- tensors ckptctl cannot read -------------------------------------------------------------


UNSUPPORTED = [
    ("torch._utils", "_rebuild_qtensor", "a quantized tensor"),
    ("torch._utils", "_rebuild_sparse_tensor", "a sparse tensor"),
    ("torch._utils", "_rebuild_sparse_csr_tensor", "a sparse tensor"),
    ("torch._utils", "_rebuild_nested_tensor", "a nested tensor"),
    ("torch._utils", "_rebuild_meta_tensor_no_storage", Says("a meta tensor", "no data")),
    ("torch._utils", "_rebuild_wrapper_subclass", "a wrapper-subclass tensor"),
    ("torch._utils", "_rebuild_device_tensor_from_numpy", "a device tensor"),
    ("torch._utils", "_rebuild_xla_tensor", "an XLA tensor"),
    ("torch._utils", "_rebuild_mkldnn_tensor", "an MKL-DNN tensor"),
    ("torch.jit._pickle", "build_tensor_from_id", Says("a TorchScript tensor", "by id")),
]


@pytest.mark.parametrize(("module", "name", "kind"), UNSUPPORTED)
def test_an_unsupported_tensor_carries_only_its_kind(module: str, name: str, kind: str) -> None:
    t = tensor(call(g(module, name), storage(), val(0), val((2,)), val((1,))))
    assert fields(t) == (None, 0, (), (), "", frozenset(), kind)
    assert t.storage is None


def test_unsupported_rebuilds_of_a_freshly_built_table() -> None:
    """The rebuild table is built at import time, by calling ``_unsupported(kind)``.

    Re-run the module under its own name (mutmut's trampolines pick the active mutant by module
    name) and unpickle with the fresh module's own ``load_pickle`` and table.
    """
    fresh = runpy.run_path(_unpickler.__file__, run_name=_unpickler.__name__)
    for module, name, kind in UNSUPPORTED:
        data = P2 + call(g(module, name), val(0), val((2,)), val((1,)), val(None)) + STOP
        t, end = fresh["load_pickle"](data, WHERE)
        assert end == len(data)
        assert type(t) is fresh["TensorRef"]
        got = (t.storage, t.offset, t.size, t.stride, t.dtype, t.flags, t.unsupported)
        assert got == (None, 0, (), (), "", frozenset(), kind)


# --- pre-0.4 tensors: the class, then BUILD (storage, offset, size, stride) ---------------------


def legacy(module: str, name: str) -> bytes:
    return g(module, name) + EMPTY_TUPLE + REDUCE


def state(*parts: bytes) -> bytes:
    return MARK + b"".join(parts) + TUPLE + BUILD


@pytest.mark.parametrize("module", ["torch", "torch.cuda"])
@pytest.mark.parametrize(
    "prefix", ["Float", "Double", "Half", "Long", "Int", "Short", "Char", "Byte", "Bool"]
)
def test_a_legacy_tensor_class_names_the_dtype(module: str, prefix: str) -> None:
    dtype = SPEC_STORAGE_DTYPES[prefix]
    t = tensor(legacy(module, f"{prefix}Tensor"))  # before BUILD: an empty tensor, no storage
    assert fields(t) == (None, 0, (), (), dtype, frozenset(), None)
    body = legacy(module, f"{prefix}Tensor") + state(
        storage(f"{prefix}Storage", "3", 12), val(2), val((2, 3)), val((3, 1))
    )
    t = tensor(body)
    assert fields(t) == ("3", 2, (2, 3), (3, 1), dtype, frozenset(), None)


def test_a_legacy_tensor_keeps_its_class_dtype_over_an_untyped_storage() -> None:
    body = legacy("torch", "LongTensor") + state(
        storage("UntypedStorage", "k", 16, module="torch.storage"), val(0), val((2,)), val((1,))
    )
    assert fields(tensor(body)) == ("k", 0, (2,), (1,), "int64", frozenset(), None)


def test_a_legacy_tensor_ignores_python_attributes() -> None:
    t = tensor(legacy("torch", "FloatTensor") + val({"a": 1}) + BUILD)
    assert fields(t) == (None, 0, (), (), "float32", frozenset(), None)
    t = tensor(dense() + EMPTY_DICT + BUILD)
    assert fields(t) == ("0", 0, (2,), (1,), "float32", frozenset(), None)


def test_a_legacy_variable_is_refused() -> None:
    body = legacy("torch", "FloatTensor") + state(
        storage(), val(0), val((2,)), val((1,)), val(False)
    )
    says(body, "pre-0.4 Variable")


@pytest.mark.parametrize(
    "bad_state",
    [
        state(storage(), val(0), val((2,))),  # 3 elements
        state(storage(), val(0), val((2,)), val((1,)), val(False), val(None)),  # 6 elements
        val([None, 0, (2,), (1,)]),  # a list of 4, not a tuple
        val(4),
        val(None),
    ],
)
def test_unexpected_legacy_tensor_states(bad_state: bytes) -> None:
    body = legacy("torch", "FloatTensor")
    if not bad_state.endswith(BUILD):
        bad_state += BUILD
    says(body + bad_state, "unexpected tensor state")


def test_a_built_tensor_cannot_be_built_again() -> None:
    again = state(storage("FloatStorage", "9", 8), val(0), val((2,)), val((1,)))
    says(dense() + again, "unexpected tensor state")
    first = legacy("torch", "FloatTensor") + state(storage(), val(0), val((2,)), val((1,)))
    says(first + again, "unexpected tensor state")


# --- stand-ins for unknown globals -------------------------------------------------------------


def test_a_stand_in_is_named_like_the_class_it_replaces() -> None:
    data = pickletools.optimize(pickle.dumps(argparse.Namespace(lr=0.5), protocol=2))
    obj = load_pickle(data, WHERE)[0]
    assert isinstance(obj, Stub)
    assert type(obj).__name__ == argparse.Namespace.__name__
    assert type(obj).qualname == "argparse.Namespace"
    assert obj.state == {"lr": 0.5}
    linear = load(g("torch.nn.modules.linear", "Linear") + EMPTY_TUPLE + NEWOBJ)
    assert isinstance(linear, Stub)
    assert type(linear).__name__ == "Linear"
    assert type(linear).qualname == "torch.nn.modules.linear.Linear"
    assert repr(linear) == "<torch.nn.modules.linear.Linear>"


def test_a_stand_in_records_appended_and_set_items() -> None:
    bag = g("mypkg", "Bag") + EMPTY_TUPLE + NEWOBJ
    obj = load(bag + val(1) + APPEND + MARK + val("x") + val(2) + APPENDS)
    assert isinstance(obj, Stub)
    assert obj.items == [1, "x", 2]
    obj = load(bag + val("k") + val(1) + SETITEM + MARK + val("j") + NONE + SETITEMS)
    assert isinstance(obj, Stub)
    assert obj.items == [("k", 1), ("j", None)]


class Thing:
    """Pickled by the stdlib with protocols 0 and 1: ``copy_reg._reconstructor``."""

    def __init__(self) -> None:
        self.a = 1


@pytest.mark.parametrize("protocol", [0, 1])
def test_copyreg_reconstructor_makes_a_stand_in(protocol: int) -> None:
    data = pickle.dumps(Thing(), protocol=protocol)
    assert b"copy_reg\n_reconstructor" in data
    obj = load_pickle(data, WHERE)[0]
    assert isinstance(obj, Stub)
    assert type(obj).qualname == f"{Thing.__module__}.{Thing.__qualname__}"
    assert obj.state == pickle.loads(data).__dict__


def test_copyreg_reconstructor_of_anything_else_is_refused() -> None:
    for cls in (g("collections", "OrderedDict"), val(5), val(None)):
        body = call(g("copy_reg", "_reconstructor"), cls, g("__builtin__", "object"), NONE)
        says(body, "copyreg._reconstructor", "non-stub class")


# --- emulated builtins, against the stdlib ---------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        bytearray(b"ab\xff\x00"), bytearray(), b"\xe9\x00", {1, 2}, set(), frozenset({3}),
        frozenset(), complex(1.5, -2.0), complex(0, 1), OrderedDict(b=2, a=1), OrderedDict(),
    ],
)  # fmt: skip
def test_stdlib_pickles_of_emulated_builtins(value: object) -> None:
    data = pickletools.optimize(pickle.dumps(value, protocol=2))
    got = load_pickle(data, WHERE)[0]
    assert got == pickle.loads(data) == value
    assert type(got) is type(value) or isinstance(value, OrderedDict)
    if isinstance(value, OrderedDict):
        assert isinstance(got, OrderedDict)
        assert list(got) == list(value)


def test_builtins_called_with_default_arguments() -> None:
    """What the builtins give with no argument (REDUCE with an empty tuple)."""
    for name, expected in (("bytearray", bytearray()), ("set", set()), ("frozenset", frozenset()),
                           ("complex", 0j)):  # fmt: skip
        got = load(g("builtins", name) + EMPTY_TUPLE + REDUCE)
        assert got == expected
        assert type(got) is type(expected)
    assert load(call(g("builtins", "complex"), val(2.5))) == complex(2.5)
    assert load(call(g("builtins", "bytearray"), val([1, 255]))) == bytearray([1, 255])


def test_codecs_encode_accepts_both_latin_1_spellings() -> None:
    for spelling in ("latin1", "latin-1"):
        got = load(call(g("_codecs", "encode"), val("é\x00ÿ"), val(spelling)))
        assert got == "é\x00ÿ".encode("latin-1") == b"\xe9\x00\xff"


@pytest.mark.parametrize(
    "args",
    [
        (val("abc"),),  # the codec's default (utf-8)
        (val("abc"), val("utf-8")),
        (val("abc"), val("LATIN1")),
        (val(5), val("latin1")),
        (val(["abc"]), val("latin-1")),
    ],
)
def test_codecs_encode_refuses_anything_but_latin_1_text(args: tuple[bytes, ...]) -> None:
    says(call(g("_codecs", "encode"), *args), "_codecs.encode", "latin-1 text")


BUILTIN_ERRORS = [
    # (the call, what it would make, what it was given)
    (call(g("builtins", "bytearray"), val(5)), "bytearray", "non-bytes"),
    (call(g("builtins", "bytearray"), val("ab")), "bytearray", "non-bytes"),
    (call(g("builtins", "set"), val(5)), "set", "non-sequence"),
    (call(g("builtins", "frozenset"), val("ab")), "set", "non-sequence"),
    (call(g("builtins", "complex"), val("1"), val(1.0)), "complex", "non-numbers"),
    (call(g("builtins", "complex"), val(1.0), val("1")), "complex", "non-numbers"),
    (call(g("builtins", "complex"), val(None)), "complex", "non-numbers"),
    (call(g("collections", "OrderedDict"), val(5)), "OrderedDict", "non-sequence"),
    (call(g("collections", "OrderedDict"), val("ab")), "OrderedDict", "non-sequence"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "made", "given"), BUILTIN_ERRORS)
def test_emulated_builtin_errors(body: bytes, made: str, given: str) -> None:
    says(body, f"{made} from", given)


def test_ordered_dict_from_a_dict_or_pairs_keeps_the_order() -> None:
    got = load(call(g("collections", "OrderedDict"), val({"b": 2, "a": 1})))
    assert isinstance(got, OrderedDict)
    assert list(got.items()) == [("b", 2), ("a", 1)]
    got = load(call(g("collections", "OrderedDict"), val([("z", 0), ("y", 1)])))
    assert isinstance(got, OrderedDict)
    assert list(got.items()) == [("z", 0), ("y", 1)]


def test_torch_size_device_and_layout() -> None:
    assert load(call(g("torch", "Size"), val([2, 3]))) == (2, 3)
    assert load(call(g("torch", "Size"), val(()))) == ()
    says(call(g("torch", "Size"), val([2, -3])), "tensor size", NEGATIVE)
    # str(torch.device(...)), as torch prints it
    assert load(call(g("torch", "device"), val("cpu"))) == "cpu"
    assert load(call(g("torch", "device"), val("cuda"), val(1))) == "cuda:1"
    layout = call(g("torch.serialization", "_get_layout"), val("torch.sparse_coo"))
    assert load(layout) == "torch.sparse_coo"


# --- find_class: names, caching, refusals ----------------------------------------------------


def test_each_global_is_looked_up_and_reported_once() -> None:
    dtype = g("torch", "float32")
    body = dtype + dtype + g("collections", "OrderedDict") + TUPLE3
    seen: list[str] = []
    got = load(body, seen_globals=seen)
    assert isinstance(got, tuple)
    first, second, _ = got
    assert first is second
    assert isinstance(first, TorchDType)
    assert first.name == "float32"
    named = [
        str(arg).replace(" ", ".")
        for op, arg, _ in pickletools.genops(P2 + body + STOP)
        if op.name == "GLOBAL"
    ]
    assert len(named) == 3
    assert seen == list(dict.fromkeys(named)) == ["torch.float32", "collections.OrderedDict"]


@pytest.mark.parametrize(
    "py2",
    [("UserDict", "IterableUserDict"), ("__builtin__", "unicode"), ("__builtin__", "xrange")],
)
def test_python_2_names_are_mapped_like_the_stdlib(py2: tuple[str, str]) -> None:
    stand_in = load(g(*py2))
    assert isinstance(stand_in, type)
    assert issubclass(stand_in, Stub)
    real = pickle.loads(P2 + g(*py2) + STOP)  # the stdlib's own find_class
    assert stand_in.qualname == f"{real.__module__}.{real.__qualname__}"
    assert stand_in.qualname == ".".join(_compat_pickle.NAME_MAPPING[py2])


@pytest.mark.parametrize(
    ("module", "name", "shown"),
    [
        ("os", "system", "os.system"),
        ("__builtin__", "eval", "builtins.eval"),  # refused under its Python 3 name
        ("builtins", "getattr", "builtins.getattr"),
        ("mypkg", "a.b", "mypkg.a.b"),
    ],
)
def test_globals_only_an_attack_uses_are_refused(module: str, name: str, shown: str) -> None:
    err = error(g(module, name), UnsafePickleError)
    assert err.message == Says("unsafe", f"global '{shown}'", WHERE)
    assert err.hint == Says("run code", "torch.load")


STORAGE_TYPES = [
    *((("torch", f"{p}Storage"), f"torch.{p}Storage", d) for p, d in SPEC_STORAGE_DTYPES.items()),
    # torch maps any *Storage global to a dtype holder, whatever the module
    # (docs/formats/pytorch.md#pickle)
    (("torch.cuda", "HalfStorage"), "torch.cuda.HalfStorage", "float16"),
    (("torch.storage", "FloatStorage"), "torch.storage.FloatStorage", "float32"),
    (("torch.storage", "UntypedStorage"), "torch.storage.UntypedStorage", None),
    (("torch.storage", "TypedStorage"), "torch.storage.TypedStorage", "uint8"),
    (("torch.storage", "ByteStorage"), "torch.storage.ByteStorage", "uint8"),
    (("torch", "UntypedStorage"), "torch.UntypedStorage", "unknown:Untyped"),
    (("torch", "FooStorage"), "torch.FooStorage", "unknown:Foo"),
]


@pytest.mark.parametrize(("glob", "qualname", "dtype"), STORAGE_TYPES)
def test_storage_types(glob: tuple[str, str], qualname: str, dtype: str | None) -> None:
    stype = load(g(*glob))
    assert isinstance(stype, StorageType)
    assert (stype.qualname, stype.dtype) == (qualname, dtype)
    assert repr(stype) == f"StorageType({qualname})"


def test_an_unknown_storage_type_is_reported_by_name(tmp_path: Path) -> None:
    body = MARK + val("w") + dense(st=storage("FooStorage", "0", 2)) + pickle.DICT
    path = tmp_path / "foo.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", P2 + body + STOP)
        zf.writestr("archive/byteorder", b"little")
        zf.writestr("archive/data/0", bytes(8))
        zf.writestr("archive/version", b"3\n")
    with pytest.raises(UnsupportedError, match="storage type") as info:
        open_checkpoint(path)
    assert info.value.message == Says("unknown", "torch.FooStorage")
    assert info.value.exit_code == ExitCode.UNSUPPORTED


def test_a_persistent_id_without_a_loader_is_refused() -> None:
    data = P2 + storage() + STOP
    with pytest.raises(CorruptCheckpointError, match="persistent id") as info:
        load_pickle(data, WHERE)
    assert info.value.message == Says("unexpected", WHERE)


@pytest.mark.parametrize(
    "glob",
    [
        ("mypkg", "float32"),  # a dtype name outside torch
        ("torch.nn", "half"),
        ("mypkg", "FloatTensor"),  # a legacy tensor name outside torch and torch.cuda
        ("torch.sparse", "FloatTensor"),
        ("torch", "NotATensor"),
        ("torch", "Tensor"),
    ],
)
def test_names_that_only_look_like_torch_types_are_stand_ins(glob: tuple[str, str]) -> None:
    obj = load(g(*glob))
    assert isinstance(obj, type)
    assert issubclass(obj, Stub)
    assert obj.qualname == ".".join(glob)


def test_one_stand_in_class_per_qualified_name() -> None:
    """``__builtin__ unicode`` is ``builtins.str`` (stdlib mapping): the same stand-in class."""
    body = g("__builtin__", "unicode") + g("builtins", "str") + g("mypkg", "Net") + TUPLE3
    got = load(body)
    assert isinstance(got, tuple)
    py2, py3, other = got
    assert py2 is py3
    assert isinstance(py2, type)
    assert issubclass(py2, Stub)
    assert py2.qualname == "builtins.str"
    assert other is not py2


# --- load_pickle: where the pickle is, limits, encodings, errors ------------------------------


def test_a_pickle_inside_a_buffer_is_read_from_its_start() -> None:
    pickled = P2 + val({"a": (1, 2)}) + STOP
    data = b"head" + pickled + b"tail"
    assert load_pickle(data, WHERE, start=4) == ({"a": (1, 2)}, 4 + len(pickled))
    assert load_pickle(b"head" + pickled, WHERE, start=4) == ({"a": (1, 2)}, 4 + len(pickled))
    assert load_pickle(pickled + b"tail", WHERE) == ({"a": (1, 2)}, len(pickled))


def test_pickle_size_limit_is_inclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    pickled = P2 + val("abc") + STOP
    monkeypatch.setattr(_unpickler, "MAX_PICKLE_BYTES", len(pickled))
    data = bytes(100) + pickled  # the limit counts the pickle, not where it starts
    assert load_pickle(data, WHERE, start=100) == ("abc", len(data))
    bigger = P2 + val("abcd") + STOP
    with pytest.raises(CorruptCheckpointError, match="larger") as info:
        load_pickle(bytes(100) + bigger, WHERE, start=100)
    assert info.value.message == Says(WHERE, f"{len(pickled)} bytes")


def test_malformed_pickles_are_reported_at_their_place() -> None:
    with pytest.raises(CorruptCheckpointError, match="malformed") as info:
        load_pickle(P2 + pickle.TUPLE1 + STOP, WHERE)
    assert info.value.message == Says(WHERE, "byte 2", "stack underflow")


def test_python_2_strings_are_utf_8_then_latin_1() -> None:
    """torch's rule: decode as UTF-8, and retry the whole pickle as latin-1."""
    utf8 = P2 + pickle.SHORT_BINSTRING + b"\x02\xc3\xa9" + STOP
    assert load_pickle(utf8, WHERE)[0] == "é" == pickle.loads(utf8, encoding="utf-8")
    latin = P2 + pickle.SHORT_BINSTRING + b"\x01\xe9" + STOP
    assert load_pickle(latin, WHERE)[0] == "é" == pickle.loads(latin, encoding="latin1")
    seen: list[str] = []
    retried = P2 + g("mypkg", "Net") + pickle.SHORT_BINSTRING + b"\x01\xe9" + TUPLE2 + STOP
    got = load_pickle(retried, WHERE, seen_globals=seen)[0]
    assert isinstance(got, tuple)
    assert got[1] == "é"
    assert seen == ["mypkg.Net"]  # reported once, though unpickled twice


def test_text_that_no_encoding_decodes_is_reported() -> None:
    bad = P2 + pickle.BINUNICODE + b"\x01\x00\x00\x00\xff" + STOP  # BINUNICODE is always UTF-8
    with pytest.raises(UnicodeDecodeError) as stdlib:
        pickle.loads(bad, encoding="latin1")
    with pytest.raises(CorruptCheckpointError, match="cannot unpickle") as info:
        load_pickle(bad, WHERE)
    assert info.value.message == Says(WHERE, str(stdlib.value))


def test_other_unpickling_errors_name_the_exception() -> None:
    with pytest.raises(TypeError) as builtin:
        set([[1]])
    data = P2 + call(g("builtins", "set"), val([[1]])) + STOP
    with pytest.raises(CorruptCheckpointError, match="cannot unpickle") as info:
        load_pickle(data, WHERE)
    assert info.value.message == Says(WHERE, f"TypeError: {builtin.value}")
    assert info.value.hint == Says("damaged")


def test_a_truncated_pickle_is_judged_unless_more_may_follow() -> None:
    cut = P2 + g("mypkg", "Net") + EMPTY_TUPLE
    ledger = Ledger()
    with pytest.raises(PickleTruncatedError):
        load_pickle(cut, WHERE, ledger=ledger)
    assert [x.name for x in ledger.safety.globals] == ["mypkg.Net"]
    partial = Ledger()
    with pytest.raises(PickleTruncatedError):
        load_pickle(cut, WHERE, ledger=partial, complete=False)
    assert partial.safety.globals == ()


def test_the_unpickler_decodes_python_2_strings_as_utf_8_by_default() -> None:
    """torch's default; ``load_pickle`` retries as latin-1 itself."""
    utf8 = P2 + pickle.SHORT_BINSTRING + b"\x02\xc3\xa9" + STOP
    assert SafeUnpickler(utf8, WHERE).load() == "é" == pickle.loads(utf8, encoding="utf-8")
    latin = P2 + pickle.SHORT_BINSTRING + b"\x01\xe9" + STOP
    with pytest.raises(UnicodeDecodeError):
        SafeUnpickler(latin, WHERE).load()
    assert SafeUnpickler(latin, WHERE, encoding="latin1").load() == "é"

"""What the PyTorch reader makes of the unpickled object tree: names, the walk's limits, the
checkpoint kind and its notes, entry checks, gathering strided and byte-swapped tensors.

Object trees are built from the unpickler's own node types (``StorageRef``, ``TensorRef``,
``Stub``), the shapes the unpickler hands over for the pickles of ``docs/formats/pytorch.md``
(pickle, whole models, TorchScript), and go through ``analyse`` and ``make_entries``, the structure
stage's entry points; storage bytes come from ``struct`` / numpy, and values are compared after
``load()``. Notes are also checked on torch-written fixtures. Refusals are checked by class, exit
code, a keyword and the facts (tensor name, element index, shape); limits are probed at the limit
and one past it.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ckptctl.dtypes import TORCH_NAMES, DType
from ckptctl.errors import CorruptCheckpointError, ExitCode
from ckptctl.formats import open_checkpoint
from ckptctl.formats.pytorch import _structure
from ckptctl.formats.pytorch._containers import Parsed, StorageBytes
from ckptctl.formats.pytorch._structure import (
    MAX_OBJECT_BYTES,
    MAX_OBJECT_LIST,
    MAX_OBJECT_TEXT,
    MAX_OBJECTS,
    Analysis,
    analyse,
)
from ckptctl.formats.pytorch._unpickler import StorageRef, StorageType, Stub, TensorRef, _stub_type
from ckptctl.model import CheckpointKind, ComputedData, TensorEntry
from ckptctl.sources import ByteSource
from tests.conftest import VALID

PT = VALID / "pytorch"
FLOAT = StorageType("torch.FloatStorage", "float32")
BYTE = StorageType("torch.ByteStorage", "uint8")
UNTYPED = StorageType("torch.UntypedStorage", None)


def assert_shared_note(notes: list[str], count: int) -> None:
    """``notes`` is the one note that ``count`` tensors share a storage."""
    assert len(notes) == 1
    assert re.match(rf"{count} tensors share a storage\b", notes[0]), notes


def f32(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def ref(key: str = "0", stype: StorageType = FLOAT, numel: int = 4, **kw: Any) -> StorageRef:
    return StorageRef(key, stype, numel, **kw)


def tensor(
    storage: StorageRef | None,
    size: tuple[int, ...] = (2,),
    stride: tuple[int, ...] = (1,),
    offset: int = 0,
    dtype: str = "float32",
    flags: frozenset[str] = frozenset(),
) -> TensorRef:
    return TensorRef(storage, offset, size, stride, dtype, flags=flags)


def stub(qualname: str, state: object = None, items: Sequence[object] = ()) -> Stub:
    """An instance of the stand-in type the unpickler makes for ``qualname``, after BUILD."""
    obj = _stub_type(qualname)()
    obj.__setstate__(state)
    obj.extend(list(items))
    return obj


def module_state(
    params: dict[str, object] | None = None,
    buffers: dict[str, object] | None = None,
    modules: dict[str, object] | None = None,
    **extra: object,
) -> dict[str, object]:
    """The ``__dict__`` torch.save(model) pickles for an ``nn.Module``
    (docs/formats/pytorch.md#whole-models)."""
    return {
        "training": True,
        "_parameters": params or {},
        "_buffers": buffers or {},
        "_modules": modules or {},
        **extra,
    }


def run(root: object, fmt: str = "pytorch-zip", **kw: Any) -> Analysis:
    return analyse(Parsed(fmt, root, **kw))


def names(root: object, fmt: str = "pytorch-zip", **kw: Any) -> list[str]:
    return [f.name for f in run(root, fmt, **kw).found]


Build = Callable[..., list[TensorEntry]]


def _viewer(source: ByteSource, offset: int, nbytes: int) -> Callable[[], memoryview]:
    return lambda: source.view(offset, nbytes)


def _loader(blob: bytes) -> Callable[[], bytes]:
    return lambda: blob


@pytest.fixture
def build(tmp_path: Path) -> Iterator[Build]:
    """Entries for ``root`` with storages ``blobs`` laid out one after another in a file."""
    sources: list[ByteSource] = []

    def make(
        root: object,
        blobs: dict[str, bytes],
        *,
        in_file: bool = True,
        byteorder: str = "little",
        notes: list[str] | None = None,
    ) -> list[TensorEntry]:
        path = tmp_path / f"storages{len(sources)}.bin"
        path.write_bytes(b"\0" + b"".join(blobs.values()))
        source = ByteSource(path)
        sources.append(source)
        storages, pos = {}, 1
        for key, blob in blobs.items():
            if in_file:
                storages[key] = StorageBytes(len(blob), pos, _viewer(source, pos, len(blob)))
            else:  # compressed records: bytes from a loader, no file offset
                storages[key] = StorageBytes(len(blob), None, _loader(blob))
            pos += len(blob)
        parsed = Parsed("pytorch-zip", root, storages=storages, byteorder=byteorder)
        entries, shared = _structure.make_entries(parsed, analyse(parsed), source)
        if notes is not None:
            notes.extend(shared)
        return entries

    yield make
    for source in sources:
        source.close()


def entry_error(build: Build, t: TensorRef, blobs: dict[str, bytes]) -> CorruptCheckpointError:
    with pytest.raises(CorruptCheckpointError) as info:
        build({"w": t}, blobs)
    assert type(info.value) is CorruptCheckpointError
    assert info.value.exit_code == ExitCode.INPUT
    assert "'w'" in info.value.message
    return info.value


# --- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("qualname", "short"),
    [
        ("torch.nn.modules.linear.Linear", "Linear"),
        ("__torch__.torch.nn.modules.linear.___torch_mangle_0.Linear", "Linear"),
        ("__torch__.Net.___torch_mangle_12", "Net"),  # a marker last: dropped, not kept
        ("Net", "Net"),
    ],
)
def test_a_module_is_named_by_its_class_without_torchscript_mangling(
    qualname: str, short: str
) -> None:
    w = tensor(ref())
    analysis = run(stub(qualname, module_state({"weight": w})))
    assert analysis.kind == CheckpointKind.MODULE
    assert [(f.name, f.module_type) for f in analysis.found] == [("weight", short)]
    (note,) = analysis.notes
    assert re.search(rf"\b{short} object\b.*state_dict", note), note
    assert "mangle" not in note


def test_module_state_with_a_slot_dict_is_a_module() -> None:
    # object.__reduce_ex__ of a class with __slots__ pickles the state as (dict, slot dict)
    w = tensor(ref())
    state = (module_state({"weight": w}), {"cache": tensor(ref("1"))})
    analysis = run(stub("model.Net", state))
    assert analysis.kind == CheckpointKind.MODULE
    (note,) = analysis.notes
    assert re.search(r"\bNet object\b.*state_dict", note), note
    assert [(f.name, f.tensor, f.module_type) for f in analysis.found] == [("weight", w, "Net")]


def test_non_persistent_buffers_are_left_out_only_when_given_as_a_set() -> None:
    buffers: dict[str, object] = {"running_mean": tensor(ref("0")), "tmp": tensor(ref("1"))}
    skip = stub("m.BN", module_state(buffers=buffers, _non_persistent_buffers_set={"tmp"}))
    assert names(skip) == ["running_mean"]
    # a string is not a set of names: "running_mean" in "running_mean" must not skip it
    odd = stub("m.BN", module_state(buffers=buffers, _non_persistent_buffers_set="running_mean"))
    assert names(odd) == ["running_mean", "tmp"]


def test_torch_class_outside_torchscript_is_walked_as_a_plain_object() -> None:
    w = tensor(ref())
    analysis = run({"obj": stub("__torch__.Foo", {"w": w, "step": 3})})
    assert [(f.name, f.container, f.module_type) for f in analysis.found] == [
        ("obj.w", "obj", None)
    ]
    assert analysis.objects == {"obj": {"step": 3}}
    assert analysis.kind == CheckpointKind.NESTED


def test_stub_state_then_items_named_by_string_key_or_index() -> None:
    ts = [tensor(ref(str(i))) for i in range(6)]
    items = [ts[1], ("k", ts[2]), (1, ts[3]), ["j", ts[4]], ("a", "b", ts[5])]
    analysis = run(stub("collections.Counterish", {"w": ts[0]}, items))
    # only (str, value) pairs are dict items; anything else is the item at that index
    assert [(f.name, f.tensor) for f in analysis.found] == [
        ("w", ts[0]), ("0", ts[1]), ("k", ts[2]), ("2.1", ts[3]), ("3.1", ts[4]), ("4.2", ts[5])
    ]  # fmt: skip
    assert analysis.objects == {"2": {"0": 1}, "3": {"0": "j"}, "4": {"0": "a", "1": "b"}}


# --- TorchScript members --------------------------------------------------------------------


def _script(qualname: str, members: dict[str, tuple[list[str], list[str]]]) -> list[str]:
    state = {"training": True, "weight": tensor(ref("0")), "scratch": tensor(ref("1"))}
    return names(stub(qualname, state), "torchscript", script_members=members)


def test_script_members_found_under_the_mangled_class_name() -> None:
    # code/__torch__/___torch_mangle_4.py defines the mangled class itself
    mangled = "__torch__.___torch_mangle_4.Net"
    assert _script(mangled, {mangled: (["weight"], [])}) == ["weight"]


def test_script_members_found_under_the_demangled_class_name() -> None:
    assert _script("__torch__.___torch_mangle_4.Net", {"__torch__.Net": (["weight"], [])}) == [
        "weight"
    ]


def test_script_without_code_record_lists_every_tensor_attribute() -> None:
    assert _script("__torch__.___torch_mangle_4.Net", {}) == ["weight", "scratch"]


# --- the walk -------------------------------------------------------------------------------


def test_a_subtree_shared_by_two_keys_is_listed_under_both() -> None:
    w = tensor(ref())
    shared = [w]  # the pickle memo makes one object of both references
    assert names({"a": shared, "b": shared, "c": shared}) == ["a.0", "b.0", "c.0"]


def test_cycles_are_cut_and_the_walk_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_structure, "MAX_WALK_NODES", 1000)  # a missed cycle fails fast
    loop: list[object] = [tensor(ref("0"))]
    loop.append(loop)
    d: dict[str, object] = {"w": tensor(ref("1"))}
    d["self"] = d
    assert names([loop, d, tensor(ref("2"))]) == ["0.0", "1.w", "2"]


def test_empty_containers_are_skipped_not_the_end_of_the_walk() -> None:
    assert names({"a": {}, "b": stub("x.Empty"), "c": tensor(ref())}) == ["c"]


def test_bare_storages_are_one_dimensional_tensors_of_their_elements(build: Build) -> None:
    typed, raw = ref("0", FLOAT, 3), ref("1", UNTYPED, 5)
    root = {"typed": typed, "raw": raw, "after": tensor(ref("2"))}
    found = run(root).found
    assert [f.name for f in found] == ["typed", "raw", "after"]
    for f, storage, dtype in ((found[0], typed, "float32"), (found[1], raw, "uint8")):
        t = f.tensor
        assert (t.storage, t.offset, t.size, t.stride, t.dtype) == (
            storage, 0, (storage.numel,), (1,), dtype
        )  # fmt: skip
        assert (f.container, f.module_type, t.flags, t.unsupported) == ("", None, frozenset(), None)
    blobs = {"0": f32(1.5, 2.5, -3.0), "1": bytes([1, 2, 3, 250, 255]), "2": f32(7, 8)}
    entries = build(root, blobs)
    assert [(e.name, e.dtype, e.shape) for e in entries] == [
        ("typed", DType.F32, (3,)), ("raw", DType.U8, (5,)), ("after", DType.F32, (2,))
    ]  # fmt: skip
    np.testing.assert_array_equal(entries[0].load(), [1.5, 2.5, -3.0])
    np.testing.assert_array_equal(entries[1].load(), [1, 2, 3, 250, 255])


def test_bare_storage_at_the_root_is_listed_as_tensor() -> None:
    analysis = run(ref("0", FLOAT, 3))
    assert [f.name for f in analysis.found] == ["tensor"]
    assert analysis.kind == CheckpointKind.TENSOR
    (note,) = analysis.notes
    assert re.search(r"\bbare tensor\b.*'tensor'", note), note


def test_walk_node_limit_is_inclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_structure, "MAX_WALK_NODES", 4)
    assert run({"a": 1, "b": 2, "c": 3}).objects == {"a": 1, "b": 2, "c": 3}  # 4 nodes
    with pytest.raises(CorruptCheckpointError, match=r"\bmore than 4 objects\b"):
        run({"a": 1, "b": 2, "c": 3, "d": 4})  # 5 nodes


def test_tensor_limit_is_inclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_structure, "MAX_TENSORS", 2)
    assert names({"a": tensor(ref("0")), "b": tensor(ref("1"))}) == ["a", "b"]
    with pytest.raises(CorruptCheckpointError, match=r"^more than 2 tensors$"):
        run({"a": tensor(ref("0")), "b": tensor(ref("1")), "c": tensor(ref("2"))})


# --- plain values ---------------------------------------------------------------------------


def test_plain_values_are_kept_in_a_bounded_json_able_form() -> None:
    root = {
        "w": tensor(ref()),
        "epoch": 3,
        "nan": math.nan,
        "inf": math.inf,
        "ninf": -math.inf,
        "at_limit": "a" * MAX_OBJECT_TEXT,
        "over": "b" * (MAX_OBJECT_TEXT + 1),
        "blob": b"xyz",
        "list_at_limit": list(range(MAX_OBJECT_LIST)),
        "list_over": list(range(MAX_OBJECT_LIST + 1)),
        "pair": ("adam", 0.9),
        "none": None,
    }
    assert run(root).objects == {
        "epoch": 3,
        "nan": "nan",
        "inf": "inf",
        "ninf": "-inf",
        "at_limit": "a" * MAX_OBJECT_TEXT,
        "over": {"$truncated": MAX_OBJECT_TEXT + 1, "head": "b" * MAX_OBJECT_TEXT},
        "blob": "<3 bytes>",
        "list_at_limit": list(range(MAX_OBJECT_LIST)),
        "list_over": {"$truncated": MAX_OBJECT_LIST + 1, "head": list(range(MAX_OBJECT_LIST))},
        "pair": ["adam", 0.9],
        "none": None,
    }


def test_plain_value_limits_are_the_documented_ones() -> None:
    # docs/json.md (the `ls` row) states them
    assert (MAX_OBJECTS, MAX_OBJECT_TEXT, MAX_OBJECT_LIST) == (1000, 4096, 1024)
    assert MAX_OBJECT_BYTES == 1 << 20


def test_values_past_the_object_limit_are_counted() -> None:
    root = {f"v{i}": i for i in range(MAX_OBJECTS + 2)}
    objects = run(root).objects
    assert list(objects) == [*(f"v{i}" for i in range(MAX_OBJECTS)), "$omitted"]
    assert objects["$omitted"] == 2


def test_values_are_nested_as_in_the_checkpoint() -> None:
    root = {"w": tensor(ref()), "hp": {"lr": 0.1, "sched": [{"gamma": 0.5}]}}
    assert run(root).objects == {"hp": {"lr": 0.1, "sched": {"0": {"gamma": 0.5}}}}


# --- kinds and notes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "note"),
    [
        ("bare_tensor.pt", r"\bbare tensor\b.*'tensor'"),
        ("empty_checkpoint.pt", r"\bno tensors$"),
        ("shared_storage.pt", r"^6 tensors share a storage\b"),  # six over one 4x4 storage
        ("torchscript.pt", r"^a TorchScript archive of FixtureNet\b.*state_dict"),
    ],
)
def test_notes_of_torch_written_fixtures(name: str, note: str) -> None:
    with open_checkpoint(PT / name) as ckpt:
        assert re.search(note, ckpt.notes[0]), ckpt.notes
        assert len(ckpt.notes) == 1 or name == "torchscript.pt"


def test_torchscript_fixture_names_its_module_class() -> None:
    with open_checkpoint(PT / "torchscript.pt") as ckpt:
        assert ckpt.structure is not None
        assert ckpt.structure.module_class == "__torch__._fixture_models.FixtureNet"
        assert ckpt.structure.top_level_tensors == 0


def test_torchscript_module_class_is_demangled() -> None:
    root = stub("__torch__.___torch_mangle_9.Net", {"w": tensor(ref())})
    analysis = run(root, "torchscript")
    assert analysis.structure.module_class == "__torch__.Net"
    assert re.search(r"^a TorchScript archive of Net\b.*state_dict", analysis.notes[0])


def test_torchscript_archive_whose_root_is_not_a_module() -> None:
    analysis = run({"w": tensor(ref())}, "torchscript")
    assert analysis.kind == CheckpointKind.TORCHSCRIPT
    assert re.search(r"^a TorchScript archive of \?.*state_dict", analysis.notes[0])
    assert analysis.structure.top_level_tensors == 0
    assert analysis.structure.module_class is None


# --- shared storages ------------------------------------------------------------------------


def test_tensors_over_one_storage_by_value_are_shared(build: Build) -> None:
    blob = f32(1, 2, 3, 4)
    one = ref("7", numel=4, inline=blob)  # the memo hands both tensors the same object
    notes: list[str] = []
    entries = build({"a": tensor(one), "b": tensor(one, offset=2)}, {}, notes=notes)
    assert_shared_note(notes, 2)
    assert [e.extra for e in entries] == [
        {"storage": "7", "storage_offset": "0", "stride": "1", "storage_nbytes": "16"},
        {"storage": "7", "storage_offset": "2", "stride": "1", "storage_nbytes": "16"},
    ]
    np.testing.assert_array_equal(entries[1].load(), [3, 4])


def test_storages_by_value_with_the_same_key_are_not_shared(build: Build) -> None:
    # each embedded legacy stream numbers its own storages: equal keys, different storages
    a, b = ref("7", numel=2, inline=f32(1, 2)), ref("7", numel=2, inline=f32(3, 4))
    notes: list[str] = []
    entries = build({"a": tensor(a), "b": tensor(b)}, {}, notes=notes)
    assert notes == []
    assert [e.extra for e in entries] == [{}, {}]
    np.testing.assert_array_equal(entries[1].load(), [3, 4])


def test_shared_note_counts_every_tensor_of_a_shared_storage(build: Build) -> None:
    s, alone = ref("0", numel=6), ref("1", numel=2)
    root = {
        "a": tensor(s),
        "b": tensor(s, offset=2),
        "c": tensor(s, (2, 2), (1, 2)),
        "d": tensor(alone),
    }
    notes: list[str] = []
    entries = build(root, {"0": f32(0, 1, 2, 3, 4, 5), "1": f32(6, 7)}, notes=notes)
    assert_shared_note(notes, 3)
    assert [e.extra.get("storage_nbytes") for e in entries] == ["24", "24", "24", None]
    assert entries[2].extra["stride"] == "1,2"
    np.testing.assert_array_equal(entries[2].load(), [[0, 2], [1, 3]])


# --- entry checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t", "message"),
    [
        (tensor(None), r"\bno storage"),
        (tensor(ref(), dtype="int32"), r"\bint32 .*storage .*float32$"),
        (tensor(ref(), (2, 2), (2,)), r"\b2 sizes but 1 strides$"),
        (tensor(ref("9")), r"\bstorage '9', not in the file$"),
    ],
)
def test_entry_errors_name_the_tensor_and_the_fault(
    build: Build, t: TensorRef, message: str
) -> None:
    err = entry_error(build, t, {"0": f32(1, 2, 3, 4)})
    assert re.search(message, err.message), err.message
    assert err.hint is None


def test_legacy_storage_view_may_end_exactly_at_its_storage(build: Build) -> None:
    blobs = {"0": f32(0, 1, 2, 3)}
    (at,) = build({"w": tensor(ref(view=("v", 1, 3)), (3,))}, blobs)
    np.testing.assert_array_equal(at.load(), [1, 2, 3])
    for view, size in ((("v", 1, 4), 3), (("v", 4, 1), 1)):
        err = entry_error(build, tensor(ref(view=view), (size,)), blobs)
        assert re.search(r"\bstorage view past\b", err.message), err.message


def test_storage_view_offset_applies_to_gathered_tensors(build: Build) -> None:
    t = tensor(ref(view=("v", 2, 4)), (2,), (2,), offset=1)
    (e,) = build({"w": t}, {"0": f32(0, 1, 2, 3, 4, 5)}, in_file=False)
    assert isinstance(e.data, ComputedData)
    np.testing.assert_array_equal(e.load(), [3, 5])


def test_last_element_read_is_checked_against_the_storage(build: Build) -> None:
    blobs = {"0": f32(0, 1, 2, 3)}
    (e,) = build({"w": tensor(ref(), (2,), (3,))}, blobs)  # elements 0 and 3
    np.testing.assert_array_equal(e.load(), [0, 3])
    err = entry_error(build, tensor(ref(), (2,), (3,), offset=1), blobs)
    assert re.search(r"\belement 4 .* 4 elements$", err.message), err.message
    assert "damaged" in str(err.hint)


@pytest.mark.parametrize(("stype", "dtype"), [(BYTE, DType.U8), (FLOAT, DType.F32)])
def test_empty_shape_size_limit_is_numpys(build: Build, stype: StorageType, dtype: DType) -> None:
    # numpy refuses any array whose non-zero dimensions times the item size pass 2**63 - 1
    largest = (2**63 - 1) // dtype.itemsize
    assert np.empty((0, largest), dtype=dtype.numpy).shape == (0, largest)
    with pytest.raises(ValueError, match=r"too big|dimension exceeded"):
        np.empty((0, largest + 1), dtype=dtype.numpy)
    torch_dtype = stype.dtype
    assert torch_dtype is not None
    t = tensor(ref(stype=stype, numel=0), (0, largest), (largest, 1), dtype=torch_dtype)
    (e,) = build({"w": t}, {"0": b""})
    assert (e.shape, e.nbytes, e.offset) == ((0, largest), 0, None)
    assert e.load().shape == (0, largest)
    over = (0, largest + 1)
    err = entry_error(build, tensor(ref(stype=stype, numel=0), over, (largest + 1, 1),
                                    dtype=torch_dtype), {"0": b""})  # fmt: skip
    assert re.search(rf"\bshape {re.escape(str(list(over)))}, too large\b", err.message)
    assert "damaged" in str(err.hint)


def test_shape_size_limit_for_a_non_empty_tensor(build: Build) -> None:
    largest = 2**63 - 1  # bytes, so elements of uint8
    err = entry_error(build, tensor(ref(stype=BYTE, numel=1), (largest,), dtype="uint8"),
                      {"0": b"\1"})  # fmt: skip
    assert re.search(rf"\belement {largest - 1} .* 1 elements$", err.message), err.message
    assert "damaged" in str(err.hint)
    err = entry_error(build, tensor(ref(stype=BYTE, numel=1), (largest + 1,), dtype="uint8"),
                      {"0": b"\1"})  # fmt: skip
    assert re.search(rf"\bshape \[{largest + 1}\], too large\b", err.message), err.message
    assert "damaged" in str(err.hint)


def test_empty_tensors_have_no_file_offset() -> None:
    # fixtures/README.md: shapes (0, 5) F32 and (0,) I64 over zero-byte storage records
    with open_checkpoint(PT / "empty_tensor.pt") as ckpt:
        assert [(e.name, e.shape, e.nbytes, e.offset) for e in ckpt.values()] == [
            ("empty", (0, 5), 0, None), ("empty_1d", (0,), 0, None)
        ]  # fmt: skip
        assert ckpt["empty"].load().shape == (0, 5)


# --- gathering ------------------------------------------------------------------------------


def test_big_endian_storages_are_byte_swapped(build: Build) -> None:
    blob = struct.pack(">4f", 1.5, -2.0, 3.25, 0.5)
    (e,) = build({"w": tensor(ref(), (2, 2), (2, 1))}, {"0": blob}, byteorder="big")
    assert isinstance(e.data, ComputedData)
    out = e.load()
    assert out.dtype == np.dtype("<f4")
    np.testing.assert_array_equal(out, [[1.5, -2.0], [3.25, 0.5]])


def test_untyped_storage_with_a_partial_trailing_element(build: Build) -> None:
    # a float32 view over a 10-byte untyped storage: two whole elements and two spare bytes
    blob = f32(1.25, -4.0) + b"\xaa\xbb"
    t = tensor(ref(stype=UNTYPED, numel=10), (2,), (1,))
    (e,) = build({"w": t}, {"0": blob}, in_file=False)
    assert isinstance(e.data, ComputedData)
    np.testing.assert_array_equal(e.load(), [1.25, -4.0])


@pytest.mark.parametrize(("dtype", "codes", "negated"), [
    # IEEE-style formats: negation flips the top (sign) bit; bf16 1.0 is f32 1.0's top half
    (DType.BF16, [0x3F80, 0x0000, 0xC000], [0xBF80, 0x8000, 0x4000]),
    (DType.F8_E4M3, [0x38, 0x00, 0xC0], [0xB8, 0x80, 0x40]),
    (DType.F8_E5M2, [0x3C, 0x00, 0xC0], [0xBC, 0x80, 0x40]),
])  # fmt: skip
def test_neg_flag_flips_the_sign_bit_of_raw_bit_formats(
    build: Build, dtype: DType, codes: list[int], negated: list[int]
) -> None:
    assert struct.unpack(">H", struct.pack(">f", 1.0)[:2]) == (0x3F80,)
    raw = np.array(codes, dtype=dtype.numpy).tobytes()
    t = tensor(ref(stype=UNTYPED, numel=len(raw)), (3,), (1,), dtype=TORCH_NAMES[dtype],
               flags=frozenset({"neg"}))  # fmt: skip
    (e,) = build({"w": t}, {"0": raw})
    out = e.load()
    assert (e.dtype, out.dtype) == (dtype, dtype.numpy)
    assert out.tolist() == negated


def test_an_empty_tensor_loads_with_its_dtype(build: Build) -> None:
    half = StorageType("torch.HalfStorage", "float16")
    t = tensor(ref(stype=half, numel=0), (0, 3), (3, 1), dtype="float16")
    (e,) = build({"w": t}, {"0": b""}, in_file=False)
    out = e.load()
    assert (out.shape, out.dtype) == ((0, 3), np.dtype(np.float16))


def test_a_contiguous_tensor_loads_as_a_read_only_view_of_its_storage(build: Build) -> None:
    (e,) = build({"w": tensor(ref(), (2,), (1,), offset=1)}, {"0": f32(1, 2, 3, 4)})
    assert e.offset == 1 + 4  # one element into the storage, which starts at byte 1
    out = e.load()
    np.testing.assert_array_equal(out, [2, 3])
    with pytest.raises(ValueError, match="read-only"):
        out[0] = 9.0

"""``flat-reader``: would a flat name → tensor reader find the tensors, and if not, where are
they and what fixes it. Fixture files drive every kind a reader reports; crafted
:class:`~ckptctl.model.Checkpoint` objects (through the gate, ``flat_reader``) stand in for
layouts no fixture has."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from ckptctl.dtypes import DType
from ckptctl.fix import Command, Note, Option
from ckptctl.model import Checkpoint, CheckpointKind, ComputedData, Structure, TensorEntry
from ckptctl.ops.verify import Status
from ckptctl.ops.verify.flat_reader import flat_reader
from tests.conftest import HOSTILE, VALID
from tests.formats.test_pytorch_reader import f32, pkl, storage_pid, tensor_v2, write_zip
from tests.ops.test_verify import finding, one
from tests.ops.verify.test_run import order

PT = VALID / "pytorch"
TINY = VALID / "safetensors" / "tiny.safetensors"
MIN_ZIP = PT / "min_zip.pt"
TRUTH = json.loads((PT / "truth.json").read_text())["files"]


def truth_tensors(name: str) -> list[dict[str, Any]]:
    tensors: list[dict[str, Any]] = TRUTH[name]["tensors"]
    return tensors


def entry(name: str) -> TensorEntry:
    raw = np.zeros(1, "<f4").tobytes()
    return TensorEntry(name, DType.F32, (1,), len(raw), None, ComputedData(lambda: raw))


def crafted(
    names: list[str],
    kind: CheckpointKind,
    structure: Structure | None = None,
    *,
    path: str = "crafted.pt",
) -> Checkpoint:
    return Checkpoint(
        [entry(n) for n in names], path=path, format="pytorch-zip", kind=kind, structure=structure
    )


# --- whole objects: no map to read --------------------------------------------------------------


def test_empty_pickled_object_has_no_weights_to_load():
    ckpt = crafted([], CheckpointKind.MODULE, Structure(0, {}, "pkg.models.Net"))
    flat, entries = flat_reader(ckpt, None)
    assert flat.status is Status.FAIL
    assert "pickled object of Net with no tensors" in str(flat.message)
    assert "state_dict()" in str(flat.hint)
    assert entries == []


def test_empty_torchscript_archive_has_no_weights_to_load():
    result = one(HOSTILE / "zip" / "evil_constants.pt")
    flat = finding(result, "flat-reader")
    assert flat.status is Status.FAIL
    assert "TorchScript archive of model with no tensors" in str(flat.message)
    assert (result.kind, result.tensors) == (CheckpointKind.TORCHSCRIPT, 0)


@pytest.mark.parametrize(
    ("module_class", "named"),
    [("pkg.models.deep.Net", "Net"), ("Net", "Net"), (None, "model"), ("", "model")],
)
def test_pickled_module_is_named_by_its_short_class(module_class, named):
    ckpt = crafted(
        ["fc.weight"], CheckpointKind.MODULE, Structure(0, {}, module_class), path="m.pt"
    )
    flat, entries = flat_reader(ckpt, None)
    assert flat.status is Status.FAIL
    assert str(flat.message).startswith(f"a pickled {named} object, not a state_dict")
    assert isinstance(flat.hint, Note)
    assert flat.hint.fixes == (Command("convert", ("m.pt", "model.safetensors")),)
    assert [e.name for e in entries or []] == ["fc.weight"]


def test_pickled_module_fixture_is_named_by_its_class():
    result = one(PT / "module.pt")
    flat = finding(result, "flat-reader")
    assert str(flat.message).startswith("a pickled FixtureNet object")
    assert (result.kind, result.tensors) == ("module", len(truth_tensors("module.pt")))


def test_torchscript_with_tensors():
    path = PT / "torchscript.pt"
    result = one(path)
    flat = finding(result, "flat-reader")
    assert flat.status is Status.FAIL
    assert "TorchScript archive of FixtureNet" in str(flat.message)
    assert "torch.jit.load" in str(flat.message)
    assert isinstance(flat.hint, Note)
    assert flat.hint.fixes == (Command("convert", (str(path), "model.safetensors")),)
    assert result.tensors == len(truth_tensors("torchscript.pt"))


def test_bare_tensor():
    result = one(PT / "bare_tensor.pt")
    flat = finding(result, "flat-reader")
    assert flat.status is Status.FAIL
    assert "bare tensor" in str(flat.message)
    assert "torch.save" in str(flat.hint)
    assert result.tensors == 1


# --- state_key ----------------------------------------------------------------------------------


def test_wrong_state_key_says_where_the_tensors_are():
    result = one(PT / "nested.pt", state_key="net", min_tensors=1)
    # only readable, safe-pickle and flat-reader: nothing below the key for the other checks
    assert order(result) == [("readable", "ok"), ("safe-pickle", "ok"), ("flat-reader", "fail")]
    flat = result.findings[2]
    assert "'net'" in str(flat.message)
    assert "'model' (4), 'optimizer' (12)" in str(flat.hint)
    assert (result.format, result.kind, result.tensors) == ("pytorch-zip", "nested", 0)


@pytest.mark.parametrize("key", ["optimizer", "optimizer."])
def test_state_key_above_the_tensors_names_the_deeper_keys(key):
    result = one(PT / "nested.pt", state_key=key)
    deeper = {f"optimizer.state.{i}": 3 for i in range(4)}  # truth.json: Adam, 4 params
    flat = finding(result, "flat-reader")
    assert flat.status is Status.FAIL
    assert flat.details == {"state_key": key, "deeper": deeper}
    assert all(f"{k!r} (3)" in str(flat.message) for k in deeper)
    assert flat.hint == Note("pass {fix0}", (Option("state_key", "optimizer.state.0"),))
    assert result.tensors == 12


def test_deeper_keys_are_listed_up_to_the_limit_and_the_largest_is_suggested():
    containers = {"m.a": 1, "m.b": 5, "m.c": 2, "m.d": 1, "m.e": 1, "m.f": 1}
    names = [f"{c}.t{i}" for c, n in containers.items() for i in range(n)]
    ckpt = crafted(names, CheckpointKind.NESTED, Structure(0, containers, None, ("m",)))
    flat, selected = flat_reader(ckpt, "m")
    assert flat.status is Status.FAIL
    assert flat.details == {"state_key": "m", "deeper": containers}
    assert "'m.e' (1)" in str(flat.message)
    assert "'m.f'" not in str(flat.message)  # five listed
    assert flat.hint == Note("pass {fix0}", (Option("state_key", "m.b"),))
    assert selected is not None
    assert len(selected) == 11


@pytest.mark.parametrize("key", ["X", ".X."])
def test_state_key_is_stripped_of_dots(key):
    containers = {"X.a": 2, "X.b": 1}
    ckpt = crafted(["X.a.w", "X.a.v", "X.b.w"], CheckpointKind.NESTED, Structure(0, containers))
    flat, _ = flat_reader(ckpt, key)
    assert flat.details["deeper"] == containers


def test_tensors_directly_under_the_key_pass_even_with_deeper_ones():
    containers = {"m": 1, "m.sub": 2}
    ckpt = crafted(["m.w", "m.sub.a", "m.sub.b"], CheckpointKind.NESTED, Structure(0, containers))
    flat, selected = flat_reader(ckpt, "m")
    assert flat.status is Status.OK
    assert "3 tensors below state key 'm'" in str(flat.message)
    assert [e.name for e in selected or []] == ["w", "sub.a", "sub.b"]


def test_a_key_without_structure_selects_by_name(tmp_path):
    path = tmp_path / "prefixed.safetensors"
    save_file({"m.a": np.zeros(1, "<f4"), "m.b": np.zeros(2, "<f4")}, str(path))
    result = one(path, state_key="m", min_tensors=2)
    flat = finding(result, "flat-reader")
    assert flat.status is Status.OK
    assert "2 tensors below" in str(flat.message)
    assert result.tensors == 2
    save_file({"m.a": np.zeros(1, "<f4"), "x": np.zeros(2, "<f4")}, str(path))
    assert "1 tensor below" in str(finding(one(path, state_key="m"), "flat-reader").message)


def test_nested_state_key_passes():
    result = one(PT / "nested.pt", state_key="model")
    flat = finding(result, "flat-reader")
    assert flat.status is Status.OK
    assert "4 tensors below state key 'model'" in str(flat.message)
    assert result.tensors == 4


# --- empty and flat files -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "scalars"),
    [
        (PT / "empty_checkpoint.pt", None),
        (VALID / "burnpack" / "scalar_only.bpk", "(only 1 scalar)"),
        (VALID / "burnpack" / "meta_scalars.bpk", "ok"),
    ],
)
def test_files_without_tensors(path, scalars):
    result = one(path)
    flat = finding(result, "flat-reader")
    if scalars == "ok":
        assert flat.status is Status.OK
        return
    assert flat.status is Status.FAIL
    assert "holds no tensors" in str(flat.message)
    if scalars is not None:
        assert scalars in str(flat.message)
    assert "at least one tensor" in str(flat.hint)
    assert result.tensors == 0


def test_scalars_of_an_empty_file_are_counted():
    ckpt = Checkpoint(
        [], path="s.bpk", format="burnpack", scalars={"a": {"UInt": 1}, "b": {"UInt": 2}}
    )
    flat, _ = flat_reader(ckpt, None)
    assert "(only 2 scalars)" in str(flat.message)


@pytest.mark.parametrize(
    ("path", "count", "how"),
    [
        (MIN_ZIP, "2 tensors", "name → tensor map"),
        (PT / "scalar.pt", "1 tensor", "name → tensor map"),
        (TINY, "4 tensors", "flat by construction"),
        (VALID / "burnpack" / "single.bpk", "1 tensor", "flat by construction"),
    ],
)
def test_flat_files_pass(path, count, how):
    flat = finding(one(path), "flat-reader")
    assert flat.status is Status.OK
    assert str(flat.message).startswith(f"{count} at the top level")
    assert how in str(flat.message)


# --- nested -------------------------------------------------------------------------------------


def test_nested_checkpoint_fails_with_the_state_key_and_a_flat_copy():
    path = PT / "nested.pt"
    result = one(path)
    flat = finding(result, "flat-reader")
    assert flat.status is Status.FAIL
    assert flat.details == {
        "top_level_tensors": 0,
        "groups": {"model": 4, "optimizer": 12},  # truth.json
        "state_key": "model",
    }
    assert isinstance(flat.message, Note)
    assert flat.message.fixes == (Option("state_key", "model"),)
    assert isinstance(flat.hint, Note)
    assert flat.hint.fixes == (
        Command("convert", (str(path), "model.safetensors"), (Option("state_key", "model"),)),
    )
    assert result.tensors == len(truth_tensors("nested.pt"))


def test_lightning_checkpoint_suggests_state_dict_not_optimizer_states():
    flat = finding(one(PT / "lightning.ckpt"), "flat-reader")
    assert flat.details["state_key"] == "state_dict"
    assert flat.details["groups"] == {"state_dict": 4, "optimizer_states": 12}


@pytest.mark.parametrize(
    ("groups", "best"),
    [
        ({"optimizer": 12, "model": 4}, "model"),
        ({"ema": 3, "model": 4, "Optimizer_States": 9}, "model"),
        ({"a": 2, "b": 2}, "a"),  # the first of equal counts
        ({"optim": 3, "LR_Scheduler": 5}, "LR_Scheduler"),  # only optimizer state: the largest
    ],
)
def test_the_suggested_key_is_the_largest_group_that_is_not_optimizer_state(groups, best):
    names = [f"{g}.t{i}" for g, n in groups.items() for i in range(n)]
    ckpt = crafted(names, CheckpointKind.NESTED, Structure(0, groups, None, tuple(groups)))
    flat, _ = flat_reader(ckpt, None)
    assert flat.details["state_key"] == best


def test_optimizer_state_dict_is_named_as_such():
    ckpt = crafted(
        ["state.0.exp_avg", "state.0.exp_avg_sq"],
        CheckpointKind.NESTED,
        Structure(0, {"state.0": 2}, None, ("state", "param_groups")),
        path="optim.pt",
    )
    flat, entries = flat_reader(ckpt, None)
    assert flat.status is Status.FAIL
    assert "optimizer state_dict" in str(flat.message)
    assert isinstance(flat.hint, Note)
    assert flat.hint.fixes == (
        Command("verify", ("optim.pt",), (Option("checks", "safe-pickle"),)),
    )
    assert flat.details == {"top_level_tensors": 0, "groups": {"state": 2}, "state_key": None}
    assert entries is not None
    assert len(entries) == 2


def test_optimizer_keys_among_others_still_count():
    ckpt = crafted(
        ["state.0.m"],
        CheckpointKind.NESTED,
        Structure(0, {"state.0": 1}, None, ("param_groups", "epoch", "state")),
    )
    flat, _ = flat_reader(ckpt, None)
    assert "optimizer state_dict" in str(flat.message)
    only_state = crafted(
        ["state.0.m"], CheckpointKind.NESTED, Structure(0, {"state.0": 1}, None, ("state",))
    )
    flat, _ = flat_reader(only_state, None)
    assert flat.details["state_key"] == "state"


def test_nested_without_structure_groups_tensors_by_their_first_name_part():
    ckpt = crafted(["enc.layer.w", "enc.b", "head.w"], CheckpointKind.NESTED, path="n.pt")
    flat, _ = flat_reader(ckpt, None)
    assert flat.status is Status.FAIL
    assert flat.details == {
        "top_level_tensors": 0,
        "groups": {"enc": 2, "head": 1},
        "state_key": "enc",
    }
    assert "state_key='enc'" in str(flat.message)  # the library spells options as keywords


def test_mixed_top_level_and_nested_tensors_warn_with_the_counts():
    # top-level keys may hold dots ("fc.weight"): the groups come from the structure, which
    # knows they are not containers, not from the names
    ckpt = crafted(
        ["fc.weight", "fc.bias", "extra.x", "extra.y", "extra.z"],
        CheckpointKind.NESTED,
        Structure(2, {"": 2, "extra": 3}, None, ("fc.weight", "fc.bias", "extra")),
    )
    flat, _ = flat_reader(ckpt, None)
    assert flat.status is Status.WARN
    assert str(flat.message).startswith("2 tensors")
    assert "but 3 more" in str(flat.message)
    assert isinstance(flat.hint, Note)
    assert flat.hint.fixes == (Option("state_key", "extra"),)
    assert flat.details == {"top_level_tensors": 2, "groups": {"extra": 3}, "state_key": "extra"}


def test_nested_list_of_tensors_has_no_key_to_suggest(tmp_path):
    # torch.save([t0, t1]): the tensors are items of a list, no key names them
    w = tensor_v2(storage_pid("FloatStorage", "0", 2), 0, (2,), (1,))
    v = tensor_v2(storage_pid("FloatStorage", "1", 1), 0, (1,), (1,))
    body = b"](" + w + v + b"e"
    path = write_zip(tmp_path / "list.pt", pkl(body), {"0": f32(1, 2), "1": f32(3)})
    result = one(path)
    flat = finding(result, "flat-reader")
    assert flat.status is Status.FAIL
    assert flat.hint is None
    assert flat.details == {"top_level_tensors": 0, "groups": {}, "state_key": None}
    assert "list or tuple" in str(flat.message)
    assert (result.kind, result.tensors) == ("nested", 2)

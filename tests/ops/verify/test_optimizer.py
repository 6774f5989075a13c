"""``optimizer``: will a Burn optimizer record attach to the model's ParamIds? The fixture pairs
(``make_optim.py``) drive each verdict; crafted :class:`OptimizerCheck` values, worded by
``finding_of``, the branches no fixture pair reaches (counts, coverage, cohorts, repairs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptctl.errors import CkptError
from ckptctl.fix import Command, Note, Option, hint_of
from ckptctl.formats import open_checkpoint
from ckptctl.ops._optimizer import load_record
from ckptctl.ops.verify import Finding, Status
from ckptctl.ops.verify.optimizer import finding_of
from ckptctl.report.optimizer import OptimizerCheck, OptimizerVerdict, Orphan
from tests.ops.test_verify import MO, OPTIM, finding, one


def optim(model: str | Path, record: str | Path, **kwargs) -> Finding:
    found = finding(one(model, optimizer=record, **kwargs), "optimizer")
    assert found.optimizer is not None
    return found


def repair(model: str | Path, record: str | Path, state_key: str | None = None) -> Command:
    options = [Option("param_ids_from", str(record))]
    if state_key is not None:
        options.append(Option("state_key", state_key))
    return Command("convert", (str(model), "fixed.bpk"), tuple(options))


# --- the fixture pairs --------------------------------------------------------------------------


def test_optimizer_matching_model_is_ok():
    found = optim(OPTIM / "model.bpk", OPTIM / "optim.bpk")
    assert found.status is Status.OK
    assert str(found.message).startswith(f"ok: all {len(MO.TRAINABLE)} optimizer states")
    assert "100.0%" in str(found.message)
    assert found.hint is None


def test_optimizer_safetensors_model_has_no_ids():
    model, record = OPTIM / "model.safetensors", OPTIM / "optim.bpk"
    found = optim(model, record)
    assert found.status is Status.FAIL
    assert str(found.message).startswith("no-ids: the model is safetensors")
    assert f"all {len(MO.TRAINABLE)} optimizer states" in str(found.message)
    assert isinstance(found.hint, Note)
    assert found.hint.fixes == (repair(model, record),)


def test_optimizer_burnpack_model_without_ids():
    found = optim(OPTIM / "model_noids.bpk", OPTIM / "optim.bpk")
    assert str(found.message).startswith("no-ids: ")
    assert "burnpack" in str(found.message)
    assert "param_id" in str(found.message)
    assert f"all {len(MO.TRAINABLE)} optimizer states" in str(found.message)


def test_optimizer_repair_keeps_the_state_key(tmp_path):
    from safetensors.numpy import save_file

    model = tmp_path / "nested.safetensors"
    with open_checkpoint(OPTIM / "model.safetensors") as ckpt:
        save_file({f"model.{e.name}": e.load() for e in ckpt.values()}, str(model))
    found = optim(model, OPTIM / "optim.bpk", state_key="model")
    assert found.optimizer is not None
    assert found.optimizer.verdict == "no-ids"
    assert isinstance(found.hint, Note)
    assert found.hint.fixes == (repair(model, OPTIM / "optim.bpk", "model"),)


def test_optimizer_reinitialized_model_is_lost():
    model, record = OPTIM / "model_reinit.bpk", OPTIM / "optim.bpk"
    found = optim(model, record)
    assert found.status is Status.FAIL
    assert str(found.message).startswith(f"lost: none of the {len(MO.TRAINABLE)} optimizer")
    assert "cohorts" not in str(found.message)
    assert isinstance(found.hint, Note)
    assert found.hint.fixes == (repair(model, record),)
    assert f"all {len(MO.TRAINABLE)} states" in found.hint.text
    assert "re-keyed" in found.hint.text


@pytest.mark.parametrize(
    ("record", "message", "hint"),
    [
        ("optim_partial.bpk", "partial: 3 of 6 optimizer states attach (50.0%)", "from scratch"),
        ("optim_grown.bpk", "partial: 5 of 10 optimizer states attach (50.0%); ", "5 orphaned"),
        ("optim_shape.bpk", "(100.0%), 2 shape disagreements", "another model"),
    ],
)
def test_optimizer_partial_records(record, message, hint):
    found = optim(OPTIM / "model.bpk", OPTIM / record)
    assert found.status is Status.FAIL
    assert message in str(found.message)
    assert hint in str(found.hint)


def test_optimizer_grown_record_names_its_cohorts():
    found = optim(OPTIM / "model.bpk", OPTIM / "optim_grown.bpk")
    assert "2 cohorts" in str(found.message)
    assert found.optimizer is not None
    assert found.optimizer.cohorts == 2


def test_optimizer_record_that_is_not_one():
    record = OPTIM / "model.bpk"
    error = load_record(record)
    assert isinstance(error, CkptError)
    found = finding(one(OPTIM / "model.bpk", optimizer=record), "optimizer")
    assert found == Finding("optimizer", Status.FAIL, f"{record}: {error.message}", hint_of(error))


# --- every branch of the wording ----------------------------------------------------------------


def check(verdict: str, **kwargs) -> OptimizerCheck:
    base = {
        "verdict": OptimizerVerdict(verdict),
        "model": "m.bpk",
        "optimizer": "o.bpk",
        "model_format": "burnpack",
        "model_has_ids": True,
        "states": 4,
        "matched": 4,
        "trainable": 4,
        "trainable_with_state": 4,
        "running_stats": 0,
        "cohorts": 1,
    }
    return OptimizerCheck(**{**base, **kwargs})


FIX = Command("convert", ("m.bpk", "fixed.bpk"), (Option("param_ids_from", "o.bpk"),))


def test_no_ids_without_a_repair_says_how_to_resume():
    c = check("no-ids", model_has_ids=False, model_format="pytorch-zip", matched=0)
    found = finding_of(c)
    assert (found.status, found.optimizer) == (Status.FAIL, c)
    assert "pytorch-zip" in str(found.message)
    assert "all 4 optimizer states" in str(found.message)
    assert "ModuleRecord or BurnpackStore" in str(found.hint)


def test_no_ids_repair_that_may_not_fit_says_so():
    c = check("no-ids", model_has_ids=False, states=1234, repair=FIX, rebindable=False)
    found = finding_of(c)
    assert "all 1,234 optimizer states" in str(found.message)
    assert isinstance(found.hint, Note)
    assert found.hint.fixes == (FIX,)
    assert "check the result" in found.hint.text
    rebindable = finding_of(check("no-ids", model_has_ids=False, repair=FIX, rebindable=True))
    assert isinstance(rebindable.hint, Note)
    assert rebindable.hint.fixes == (FIX,)
    assert "check the result" not in rebindable.hint.text


@pytest.mark.parametrize(
    ("fields", "says", "never"),
    [
        ({"states": 0, "matched": 0, "trainable_with_state": 0}, "no parameter states", "%"),
        ({"states": 2, "matched": 2, "trainable": 0, "trainable_with_state": 0}, "all 2", "%"),
        (
            {"states": 3, "matched": 3, "trainable": 8, "trainable_with_state": 3},
            "37.5%",
            "param_id",
        ),
    ],
)
def test_ok_messages(fields, says, never):
    found = finding_of(check("ok", **fields))
    assert (found.status, found.hint) == (Status.OK, None)
    assert str(found.message).startswith("ok: ")
    assert says in str(found.message)
    assert never not in str(found.message)


@pytest.mark.parametrize(
    ("idless", "words"), [(1, "1 trainable tensor carries"), (2, "2 trainable tensors carry")]
)
def test_ok_with_id_less_tensors_warns(idless, words):
    found = finding_of(check("ok", without_ids=tuple(f"extra{i}" for i in range(idless))))
    assert (found.status, found.hint) == (Status.WARN, None)
    assert words in str(found.message)


def test_lost_with_cohorts_names_them():
    found = finding_of(check("lost", matched=0, trainable_with_state=0, cohorts=3))
    assert str(found.message).startswith("lost: none of the 4")
    assert "3 cohorts" in str(found.message)
    assert "from scratch" in str(found.hint)


@pytest.mark.parametrize(
    ("fields", "says", "never"),
    [
        (
            {"matched": 3, "trainable_with_state": 3},
            "3 of 4 optimizer states attach (75.0%)",
            "cohorts",
        ),
        (
            {"model_has_ids": False, "matched": 0, "trainable_with_state": 0},
            "0 of 4 optimizer states attach",
            "%",
        ),
        (
            {"path_disagreements": ((7, "fc.bias", "fc.weight"),)},
            "(100.0%), 1 path disagreement",
            "disagreements",
        ),
        (
            {"path_disagreements": ((7, "a", "b"), (8, "c", "d")), "shape_disagreements": ("s",)},
            "2 path disagreements, 1 shape disagreement",
            "cohorts",
        ),
    ],
)
def test_partial_messages(fields, says, never):
    found = finding_of(check("partial", **fields))
    assert found.status is Status.FAIL
    assert str(found.message).startswith("partial: ")
    assert says in str(found.message)
    assert never not in str(found.message)


def test_partial_hints_in_order_of_what_helps():
    repairable = finding_of(
        check("partial", repair=FIX, shape_disagreements=("s",), states=12, matched=6)
    )
    assert isinstance(repairable.hint, Note)
    assert repairable.hint.fixes == (FIX,)
    assert "all 12 states" in repairable.hint.text
    other = finding_of(check("partial", path_disagreements=((7, "a", "b"),)))
    assert "another model" in str(other.hint)
    orphans = check(
        "partial",
        states=7,
        reinitialized=(Orphan(1, "fc.weight", 2), Orphan(3, "fc.bias", 4)),
        foreign=(Orphan(5, None),),
    )
    assert orphans.coverage == 1.0
    assert "3 orphaned states" in str(finding_of(orphans).hint)
    one_orphan = check("partial", states=5, foreign=(Orphan(5, None),))
    assert "1 orphaned state will" in str(finding_of(one_orphan).hint)
    partial = check("partial", trainable=8, trainable_with_state=4, foreign=(Orphan(5, None),))
    assert "from scratch" in str(finding_of(partial).hint)

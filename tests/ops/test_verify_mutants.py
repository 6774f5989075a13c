# ruff: noqa: I001, E402  # transitional: the next commit folds it into tests/ops/verify/
# mypy: ignore-errors
"""Edge cases of ``ckptctl.ops.verify`` that mutation testing found untested (issue 17).

``verify`` is a CI gate: its findings are printed as they are (text and ``--json``), so a changed
word, count, status or finding order is a changed interface (CLI-CONTRACT: ``verify --json``,
exit 1 when any finding fails). Each check is driven on both sides of every branch: the exact
message, hint, details and status, limits at the limit and one past it (``MESSAGE_LIMIT`` names,
``min_tensors``, NaN scan chunks), and the order findings come in. Counts come from the fixtures'
ground truth (``truth.json``, ``make_optim.py``, the arrays written here); crafted
:class:`~ckptctl.model.Checkpoint` objects stand in for layouts no fixture has.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from ckptctl import save_checkpoint
from ckptctl.dtypes import DType
from ckptctl.errors import (
    CkptError,
    CorruptCheckpointError,
    ExitCode,
    SelectionError,
    UnsafePickleError,
)
from ckptctl.fix import Command, Note, Option, hint_of
from ckptctl.formats import open_checkpoint
from ckptctl.model import Checkpoint, CheckpointKind, ComputedData, Structure, TensorEntry
from ckptctl.ops.verify import (
    _run as run_mod,
    no_nan as nan_mod,
    optimizer as opt_mod,
    flat_reader as flat_mod,
    _check as check_mod,
    expect as expect_mod,
)
import types

verify_mod = types.SimpleNamespace(
    _plural=check_mod.plural,
    _more=check_mod.more,
    _is_optimizer_key=flat_mod._is_optimizer_key,
    _best_key=flat_mod._best_key,
    _short_class=flat_mod._short_class,
    _flat_reader=flat_mod.flat_reader,
    _deeper_than=flat_mod._deeper_than,
    _Options=check_mod.Options,
    _expect=lambda path, entries, opts, ref: expect_mod.expect(
        check_mod.Subject(path, "x", opts, None, entries)
    ),
    _no_nan=lambda entries, jobs=1: nan_mod.no_nan(
        check_mod.Subject("p", "x", check_mod.Options(**{**_BASE, "jobs": jobs}), None, entries)
    ),
    _optimizer_finding=lambda c: (
        opt_mod._no_ids(c)
        if c.verdict == "no-ids"
        else opt_mod._attached(c)
        if c.verdict == "ok"
        else Finding("optimizer", Status.FAIL, opt_mod._detached(c), opt_mod._hint(c), optimizer=c)
    ),
    _optimizer=lambda mp, mf, entries, optim, record, sk: opt_mod.optimizer(
        check_mod.Subject(
            mp,
            mf,
            check_mod.Options(**{**_BASE, "optimizer": optim, "record": record}),
            None,
            entries,
        )
    ),
)
_BASE = {
    "checks": frozenset(),
    "allow_globals": frozenset(),
    "trust": False,
    "state_key": None,
    "no_nan": False,
    "min_tensors": None,
    "expect": None,
    "expect_specs": None,
    "optimizer": None,
    "record": None,
}
from ckptctl.ops._optimizer import load_record
from ckptctl.ops.verify import FileResult, FileVerdict, Finding, Status, verify
from ckptctl.report.optimizer import OptimizerCheck, OptimizerVerdict, Orphan
from ckptctl.ops.verify import CHECKS
from ckptctl.safety import Verdict
from ckptctl.sources import ByteSource
from tests.conftest import HOSTILE, VALID
from tests.formats.test_pytorch_reader import (
    dict_of,
    f32,
    glob,
    lit,
    obj,
    pkl,
    storage_pid,
    tensor_v2,
    write_zip,
)
from tests.ops.test_verify import MO, finding, one

PT = VALID / "pytorch"
OPTIM = VALID / "optim"
SHARDED = VALID / "safetensors" / "sharded"
TINY = VALID / "safetensors" / "tiny.safetensors"
MIN_ZIP = PT / "min_zip.pt"
TRUTH = json.loads((PT / "truth.json").read_text())["files"]

FLAT_READERS = "a flat name → tensor reader (candle's from_pth, safetensors' load)"
NAN_HINT = (
    "the training run diverged or the file was written from a broken state; "
    "use an earlier checkpoint"
)
INDEX_HINT = "re-download the checkpoint or regenerate its index"
BUG_HINT = "this is a bug in ckptctl; please report it with the file if you can"


def order(result: FileResult) -> list[tuple[str, str]]:
    return [(f.check, f.status.value) for f in result.findings]


def text(value: object) -> str | None:
    return None if value is None else str(value)


def entry(name: str, values: np.ndarray | None = None, dtype: DType = DType.F32) -> TensorEntry:
    """A computed (not file-backed) entry holding ``values`` (one F32 zero by default)."""
    array = np.zeros(1, "<f4") if values is None else values
    raw = array.tobytes()
    return TensorEntry(name, dtype, array.shape, len(raw), None, ComputedData(lambda: raw))


def crafted(
    names: list[str],
    kind: CheckpointKind,
    structure: Structure | None = None,
    *,
    path: str = "crafted.pt",
) -> Checkpoint:
    return Checkpoint(
        [entry(n) for n in names],
        path=path,
        format="pytorch-zip",
        kind=kind,
        structure=structure,
    )


def truth_tensors(name: str) -> list[dict[str, Any]]:
    tensors: list[dict[str, Any]] = TRUTH[name]["tensors"]
    return tensors


# --- verify(): arguments ------------------------------------------------------------------------


def test_unknown_check_names_the_first_in_sorted_order():
    with pytest.raises(SelectionError) as info:
        verify([MIN_ZIP], checks=["zeta", "alpha"])
    assert info.value.message == "unknown check 'alpha'"
    assert info.value.hint == "checks: " + ", ".join(CHECKS)
    assert {"readable", "lfs-pointer", "safe-pickle", "gguf-layout"} <= set(CHECKS)
    assert info.value.exit_code == ExitCode.USAGE


def test_unknown_skip_is_a_selection_error_too():
    with pytest.raises(SelectionError) as info:
        verify([MIN_ZIP], skip=["bogus"])
    assert info.value.message == "unknown check 'bogus'"


def test_readable_cannot_be_skipped():
    with pytest.raises(SelectionError) as info:
        verify([MIN_ZIP], skip=["readable"])
    assert info.value.message == "the readable check cannot be skipped: every other check needs it"
    assert info.value.hint is None


def test_without_checks_every_check_that_runs_is_reported():
    result = one(MIN_ZIP, min_tensors=1)
    assert [f.check for f in result.findings] == [
        "readable",
        "safe-pickle",
        "flat-reader",
        "min-tensors",
    ]


def test_checks_choose_findings_and_readable_is_always_kept():
    result = one(MIN_ZIP, checks=["flat-reader"], min_tensors=1)
    assert [f.check for f in result.findings] == ["readable", "flat-reader"]
    assert (result.format, result.kind, result.tensors) == ("pytorch-zip", "state_dict", 2)


def test_skip_removes_findings_from_the_chosen_checks():
    result = one(
        MIN_ZIP, checks=["flat-reader", "min-tensors"], skip=["min-tensors"], min_tensors=1
    )
    assert [f.check for f in result.findings] == ["readable", "flat-reader"]
    skipped = one(MIN_ZIP, skip=["safe-pickle"], min_tensors=5)
    assert order(skipped) == [("readable", "ok"), ("flat-reader", "ok"), ("min-tensors", "fail")]


def test_a_single_path_object_is_one_file_named_as_a_string():
    report = verify(MIN_ZIP)
    (result,) = report.files
    assert result.path == str(MIN_ZIP)
    assert isinstance(result.path, str)
    assert result.ok


def test_paths_are_checked_in_order_and_named_as_strings(tmp_path):
    missing = tmp_path / "nope.pt"
    report = verify([missing, MIN_ZIP])
    assert [f.path for f in report.files] == [str(missing), str(MIN_ZIP)]
    assert [f.ok for f in report.files] == [False, True]


# --- one file: failures never escape ------------------------------------------------------------


def test_an_internal_error_fails_only_that_file(monkeypatch, tmp_path):
    real = run_mod._verify_file
    bad = str(tmp_path / "bad.pt")

    def flaky(path, opts, walked=False):
        if path == bad:
            raise RuntimeError("boom")
        return real(path, opts, walked)

    monkeypatch.setattr(run_mod, "_verify_file", flaky)
    report = verify([bad, MIN_ZIP])
    assert report.files[0] == FileResult(
        bad,
        None,
        None,
        None,
        (
            Finding(
                "readable",
                Status.FAIL,
                "internal error while checking this file: RuntimeError: boom",
                BUG_HINT,
            ),
        ),
        verdict=FileVerdict.UNREADABLE,
    )
    assert report.files[1].ok
    assert report.files[1].tensors == 2


def test_missing_file_is_one_readable_failure(tmp_path):
    path = tmp_path / "nope.pt"
    assert one(path) == FileResult(
        str(path),
        None,
        None,
        None,
        (Finding("readable", Status.FAIL, "no such file", None),),
        verdict=FileVerdict.UNREADABLE,
    )


def test_non_checkpoint_failure_keeps_the_readers_hint(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n")
    with pytest.raises(CkptError) as info:
        open_checkpoint(path)
    result = one(path)
    assert result.findings == (
        Finding("readable", Status.FAIL, info.value.message, hint_of(info.value)),
    )
    assert info.value.hint is not None


def test_a_corrupt_file_fails_readable_with_the_readers_error(tmp_path):
    path = tmp_path / "cut.safetensors"
    path.write_bytes(TINY.read_bytes()[:-10])
    with pytest.raises(CkptError) as info:
        open_checkpoint(path)
    result = one(path)
    assert result == FileResult(
        str(path),
        "safetensors",
        None,
        None,
        (Finding("readable", Status.FAIL, info.value.message, hint_of(info.value)),),
        verdict=FileVerdict.UNREADABLE,
    )


def test_unsafe_pickle_without_a_verdict_fails_safe_pickle(monkeypatch, tmp_path):
    # the unpickler's own refusal carries no verdict: the finding is its message and hint
    def refuse(path):
        raise UnsafePickleError(
            "unsafe pickle: global 'os.system' in data.pkl", hint="do not open it"
        )

    monkeypatch.setattr(run_mod, "open_checkpoint", refuse)
    result = one(MIN_ZIP)
    assert result == FileResult(
        str(MIN_ZIP),
        "pytorch",  # the detected format: the reader never opened it
        None,
        None,
        (
            Finding(
                "safe-pickle",
                Status.FAIL,
                "unsafe pickle: global 'os.system' in data.pkl",
                "do not open it",
            ),
        ),
        verdict=FileVerdict.UNSAFE,
    )


def test_unsafe_pickle_with_a_verdict_reports_the_verdict():
    path = HOSTILE / "pickle" / "subprocess.Popen__zip.pt"
    result = one(path)
    assert (result.format, result.kind, result.tensors) == ("pytorch", None, None)
    (unsafe,) = result.findings
    assert unsafe.check == "safe-pickle"
    assert unsafe.status is Status.FAIL
    assert unsafe.safety is not None
    assert str(unsafe.message).startswith("unsafe: globals subprocess.Popen in ")


# --- safe-pickle: trust and allow_globals reach the verdict -------------------------------------


def _needs_trust(tmp_path: Path, *, storage: bool) -> Path:
    """``{"w": tensor, "cfg": mypkg.config.Cfg}``; without its storage record it is corrupt."""
    w = tensor_v2(storage_pid("FloatStorage", "0", 2), 0, (2,), (1,))
    cfg = obj("mypkg.config", "Cfg", dict_of([(lit("lr"), lit(1))]))
    body = dict_of([(lit("w"), w), (lit("cfg"), cfg)])
    name = "trust.pt" if storage else "trust_corrupt.pt"
    return write_zip(tmp_path / name, pkl(body), {"0": f32(1, 2)} if storage else {})


@pytest.mark.parametrize("storage", [True, False], ids=["readable", "corrupt"])
def test_needs_trust_fails_warns_with_trust_and_passes_when_allowed(tmp_path, storage):
    path = _needs_trust(tmp_path, storage=storage)
    plain = finding(one(path), "safe-pickle")
    assert plain.status is Status.FAIL
    assert str(plain.message) == (
        "needs trust: globals outside torch's weights-only allowlist: mypkg.config.Cfg; "
        "torch.load(weights_only=True) refuses it and weights_only=False would run that code"
    )
    trusted = finding(one(path, trust=True), "safe-pickle")
    assert trusted.status is Status.WARN
    assert trusted.message == plain.message
    allowed = finding(one(path, allow_globals=["mypkg.config.Cfg"]), "safe-pickle")
    assert allowed.status is Status.OK
    # torch loads it only when told the same: the message says how, never plain "safe"
    assert str(allowed.message) == (
        "safe with the allowed globals: torch.load(weights_only=True) loads it inside "
        "torch.serialization.safe_globals([mypkg.config.Cfg]) (4 globals, 1 of them allowed)"
        if storage
        else "safe as far as read (4 globals, all on its allowlist): nothing "
        "torch.load(weights_only=True) refuses, but the file is unreadable, so torch may not "
        "load it either"
    )
    needless = finding(one(MIN_ZIP, allow_globals=["mypkg.config.Cfg"]), "safe-pickle")
    assert needless.message == finding(one(MIN_ZIP), "safe-pickle").message
    assert str(needless.message).startswith("safe: torch.load(weights_only=True) loads it")
    readable = finding(one(path), "readable")
    assert readable.status is (Status.OK if storage else Status.FAIL)


def test_allowed_globals_reach_the_verdict_of_an_unsafe_file(tmp_path):
    # an unsafe global (os.system) beside a needs-trust one: the file stays unsafe, but the
    # verdict it carries (--json details.globals) marks the allowed global as trusted
    cfg = obj("mypkg.config", "Cfg", dict_of([(lit("lr"), lit(1))]))
    call = glob("os", "system") + b"(" + lit("true") + b"tR"
    body = dict_of([(lit("cfg"), cfg), (lit("x"), call)])
    path = write_zip(tmp_path / "unsafe.pt", pkl(body), {})

    def verdicts(**kwargs: object) -> dict[str, Verdict]:
        result = one(path, **kwargs)
        assert [f.check for f in result.findings] == ["safe-pickle"]
        unsafe = result.findings[0]
        assert unsafe.status is Status.FAIL
        assert str(unsafe.message).startswith("unsafe: globals os.system in ")
        assert unsafe.safety is not None
        return {g.name: g.verdict for g in unsafe.safety.globals}

    assert verdicts()["mypkg.config.Cfg"] is Verdict.NEEDS_TRUST
    allowed = verdicts(allow_globals=["mypkg.config.Cfg"])
    assert allowed["mypkg.config.Cfg"] is Verdict.SAFE
    assert allowed["os.system"] is Verdict.UNSAFE


def test_corrupt_pickle_reports_readable_then_its_verdict():
    path = HOSTILE / "limits" / "pkl_frame_huge.pkl"
    result = one(path, trust=True)
    assert order(result) == [("readable", "fail"), ("safe-pickle", "warn")]
    assert (result.format, result.kind, result.tensors) == ("pytorch", None, None)
    assert order(one(path)) == [("readable", "fail"), ("safe-pickle", "fail")]


def test_module_pickle_with_trust_warns():
    result = one(PT / "module.pt", trust=True)
    assert order(result) == [("readable", "ok"), ("safe-pickle", "warn"), ("flat-reader", "fail")]


# --- readable, sharded-index --------------------------------------------------------------------


def test_plural():
    assert verify_mod._plural(0, "tensor") == "0 tensors"
    assert verify_mod._plural(1, "tensor") == "1 tensor"
    assert verify_mod._plural(2, "tensor") == "2 tensors"
    assert verify_mod._plural(1234, "float tensor") == "1,234 float tensors"


def test_more_counts_what_the_limit_left_out():
    assert verify_mod._more(4) == ""
    assert verify_mod._more(5) == ""  # exactly the limit: nothing left out
    assert verify_mod._more(6) == "; and 1 more"
    assert verify_mod._more(9) == "; and 4 more"
    assert verify_mod._more(3, 2) == "; and 1 more"
    assert verify_mod._more(2, 2) == ""


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (MIN_ZIP, "pytorch-zip, 2 tensors; every structural check passed"),
        (PT / "scalar.pt", "pytorch-zip, 1 tensor; every structural check passed"),
        (
            SHARDED / "model.safetensors.index.json",
            "safetensors, 4 tensors in 2 shards; every structural check passed",
        ),
        # meta_scalars.bpk: one tensor and six scalars; scalar_only.bpk: one scalar (README)
        (
            VALID / "burnpack" / "meta_scalars.bpk",
            "burnpack, 1 tensor, 6 scalars; every structural check passed",
        ),
        (
            VALID / "burnpack" / "scalar_only.bpk",
            "burnpack, 0 tensors, 1 scalar; every structural check passed",
        ),
    ],
)
def test_readable_message(path, message):
    readable = finding(one(path), "readable")
    assert readable == Finding("readable", Status.OK, message)


@pytest.mark.parametrize("name", ["model.safetensors.index.json", "."], ids=["index", "directory"])
def test_consistent_index_findings_in_order(name):
    result = one(SHARDED / name)  # the directory stands for its index: the same checks run
    assert result.findings[1] == Finding(
        "sharded-index", Status.OK, "the index and its shards agree on every tensor"
    )
    assert order(result) == [
        ("readable", "ok"),
        ("sharded-index", "ok"),
        ("flat-reader", "ok"),
    ]


def test_index_with_missing_shard_reports_readable_first(tmp_path):
    shutil.copytree(SHARDED, tmp_path / "s")
    index = tmp_path / "s" / "model.safetensors.index.json"
    (index.parent / "model-00002-of-00002.safetensors").unlink()
    result = one(index)
    assert order(result) == [("readable", "fail"), ("sharded-index", "fail")]
    assert (result.format, result.kind, result.tensors) == ("safetensors-index", None, None)
    sharded = result.findings[1]
    problems = sharded.details["problems"]
    assert len(problems) == 1
    assert sharded == Finding(
        "sharded-index",
        Status.FAIL,
        f"1 problem: {problems[0]}",
        INDEX_HINT,
        details={"problems": problems},
    )
    assert "model-00002-of-00002.safetensors" in problems[0]


def _pickle_index(tmp_path: Path, weight_map: dict[str, str]) -> Path:
    shutil.copy(
        HOSTILE / "bypass" / "sharded" / "pytorch_model-00001-of-00002.bin", tmp_path / "a.bin"
    )
    shutil.copy(HOSTILE / "limits" / "pkl_frame_huge.pkl", tmp_path / "bad.bin")
    index = tmp_path / "pytorch_model.bin.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return index


def test_index_of_pickle_shards_puts_safe_pickle_after_readable(tmp_path):
    result = one(_pickle_index(tmp_path, {"fc.weight": "a.bin"}))
    assert order(result) == [
        ("readable", "ok"),
        ("safe-pickle", "ok"),
        ("sharded-index", "ok"),
        ("flat-reader", "ok"),
    ]
    assert str(result.findings[0].message) == (
        "pytorch-zip, 1 tensor in 1 shard; every structural check passed"
    )


def test_index_with_a_corrupt_pickle_shard_keeps_the_verdict_second(tmp_path):
    result = one(_pickle_index(tmp_path, {"fc.weight": "a.bin", "x": "bad.bin"}))
    assert order(result) == [
        ("readable", "fail"),
        ("safe-pickle", "fail"),
        ("sharded-index", "fail"),
    ]
    assert result.format == "safetensors-index"


def test_index_with_an_unsafe_shard_puts_the_verdict_first():
    result = one(HOSTILE / "bypass" / "sharded" / "pytorch_model.bin.index.json")
    assert order(result) == [("safe-pickle", "fail"), ("sharded-index", "fail")]
    assert (result.format, result.kind, result.tensors) == ("safetensors-index", None, None)


def _index_problems(tmp_path: Path, unlisted: int) -> Path:
    """One shard of ``unlisted + 1`` tensors; the index lists only the first: a soft problem
    for every other tensor (and no metadata.total_size to check)."""
    names = [f"t{i}" for i in range(unlisted + 1)]
    save_file({n: np.zeros(1, "<f4") for n in names}, str(tmp_path / "shard.safetensors"))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": {"t0": "shard.safetensors"}}))
    return index


def _unlisted(i: int) -> str:
    return f"tensor 't{i}' in shard 'shard.safetensors' is not listed in the index"


@pytest.mark.parametrize(("unlisted", "more"), [(5, ""), (6, "; and 1 more")])
def test_index_problems_are_listed_up_to_the_limit(tmp_path, unlisted, more):
    result = one(_index_problems(tmp_path, unlisted))
    problems = [_unlisted(i) for i in range(1, unlisted + 1)]
    assert finding(result, "readable").status is Status.OK
    assert finding(result, "sharded-index") == Finding(
        "sharded-index",
        Status.FAIL,
        f"{unlisted} problems: " + "; ".join(problems[:5]) + more,
        INDEX_HINT,
        details={"problems": problems},
    )


def test_escaping_index_has_no_sharded_index_finding():
    result = one(HOSTILE / "safetensors" / "escape.safetensors.index.json")
    assert [f.check for f in result.findings] == ["readable"]


# --- flat-reader --------------------------------------------------------------------------------


def test_is_optimizer_key():
    assert verify_mod._is_optimizer_key("optimizer")
    assert verify_mod._is_optimizer_key("Optimizer_States")
    assert verify_mod._is_optimizer_key("optim")
    assert verify_mod._is_optimizer_key("lr_scheduler")
    assert verify_mod._is_optimizer_key("LR_Scheduler")
    assert not verify_mod._is_optimizer_key("model")
    assert not verify_mod._is_optimizer_key("state_dict")


def test_best_key_is_the_largest_group_that_is_not_optimizer_state():
    assert verify_mod._best_key({"optimizer": 12, "model": 4}) == "model"
    assert verify_mod._best_key({"ema": 3, "model": 4, "optimizer": 9}) == "model"
    assert verify_mod._best_key({"a": 2, "b": 2}) == "a"  # the first of equal counts
    # nothing but optimizer state: the largest group anyway
    assert verify_mod._best_key({"optimizer": 3, "lr_scheduler": 5}) == "lr_scheduler"


def test_short_class():
    def with_class(module_class: str | None) -> Checkpoint:
        return crafted([], CheckpointKind.MODULE, Structure(0, {}, module_class))

    assert verify_mod._short_class(with_class("pkg.models.deep.Net")) == "Net"
    assert verify_mod._short_class(with_class("Net")) == "Net"
    assert verify_mod._short_class(with_class(None)) == "model"
    assert verify_mod._short_class(with_class("")) == "model"
    assert verify_mod._short_class(crafted([], CheckpointKind.MODULE)) == "model"


def test_empty_pickled_object_has_no_weights_to_load():
    ckpt = crafted([], CheckpointKind.MODULE, Structure(0, {}, "pkg.models.Net"))
    flat, entries = verify_mod._flat_reader(ckpt, None)
    assert flat == Finding(
        "flat-reader",
        Status.FAIL,
        "a pickled object of Net with no tensors: there are no weights to load",
        "was the wrong file saved? (re-saving its state_dict() would be empty too)",
    )
    assert entries == []


def test_empty_torchscript_archive_has_no_weights_to_load():
    result = one(HOSTILE / "zip" / "evil_constants.pt")
    assert finding(result, "flat-reader") == Finding(
        "flat-reader",
        Status.FAIL,
        "a TorchScript archive of model with no tensors: there are no weights to load",
        "was the wrong file saved? (re-saving its state_dict() would be empty too)",
    )
    assert (result.kind, result.tensors) == (CheckpointKind.TORCHSCRIPT, 0)


def test_pickled_module_with_tensors():
    ckpt = crafted(["fc.weight"], CheckpointKind.MODULE, Structure(0, {}, "Net"), path="m.pt")
    flat, entries = verify_mod._flat_reader(ckpt, None)
    assert flat == Finding(
        "flat-reader",
        Status.FAIL,
        "a pickled Net object, not a state_dict: re-save model.state_dict() (or save safetensors)",
        Note(
            f"loading it needs Net's code; {FLAT_READERS} finds no tensors. "
            "Without torch: {fix0}",
            (Command("convert", ("m.pt", "model.safetensors")),),
        ),
    )
    assert [e.name for e in entries or []] == ["fc.weight"]


def test_pickled_module_fixture_is_named_by_its_class():
    result = one(PT / "module.pt")
    flat = finding(result, "flat-reader")
    assert str(flat.message) == (
        "a pickled FixtureNet object, not a state_dict: re-save model.state_dict() "
        "(or save safetensors)"
    )
    assert (result.kind, result.tensors) == ("module", len(truth_tensors("module.pt")))


def test_torchscript_with_tensors():
    path = PT / "torchscript.pt"
    result = one(path)
    assert finding(result, "flat-reader") == Finding(
        "flat-reader",
        Status.FAIL,
        "a TorchScript archive of FixtureNet, not a state_dict: re-save "
        "torch.jit.load(f).state_dict() (or save safetensors)",
        Note(
            f"{FLAT_READERS} finds no tensors in it. Without torch: {{fix0}}",
            (Command("convert", (str(path), "model.safetensors")),),
        ),
    )
    assert result.tensors == len(truth_tensors("torchscript.pt"))


def test_bare_tensor():
    result = one(PT / "bare_tensor.pt")
    assert finding(result, "flat-reader") == Finding(
        "flat-reader",
        Status.FAIL,
        "a single bare tensor, not a name → tensor map: a flat reader finds no tensor names",
        "save a dict instead, e.g. torch.save({'weight': t}, path)",
    )
    assert result.tensors == 1


def test_wrong_state_key_says_where_the_tensors_are():
    result = one(PT / "nested.pt", state_key="net", min_tensors=1)
    # only readable, safe-pickle and flat-reader: nothing below the key for the other checks
    assert order(result) == [("readable", "ok"), ("safe-pickle", "ok"), ("flat-reader", "fail")]
    assert result.findings[2] == Finding(
        "flat-reader",
        Status.FAIL,
        "no tensors under state key 'net'",
        "tensors are under 'model' (4), 'optimizer' (12)",
    )
    assert (result.path, result.format, result.kind, result.tensors) == (
        str(PT / "nested.pt"),
        "pytorch-zip",
        "nested",
        0,
    )


@pytest.mark.parametrize("key", ["optimizer", "optimizer."])
def test_state_key_above_the_tensors_names_the_deeper_keys(key):
    result = one(PT / "nested.pt", state_key=key)
    deeper = {f"optimizer.state.{i}": 3 for i in range(4)}  # truth.json: Adam, 4 params
    assert finding(result, "flat-reader") == Finding(
        "flat-reader",
        Status.FAIL,
        f"no tensors directly under state key {key!r}: they are deeper, under "
        "'optimizer.state.0' (3), 'optimizer.state.1' (3), 'optimizer.state.2' (3), "
        f"'optimizer.state.3' (3); a flat reader given {key!r} finds none",
        Note("pass {fix0}", (Option("state_key", "optimizer.state.0"),)),
        details={"state_key": key, "deeper": deeper},
    )
    assert result.tensors == 12


def test_deeper_keys_are_listed_up_to_the_limit_and_the_largest_is_suggested():
    containers = {"m.a": 1, "m.b": 5, "m.c": 2, "m.d": 1, "m.e": 1, "m.f": 1}
    names = [f"{c}.t{i}" for c, n in containers.items() for i in range(n)]
    ckpt = crafted(names, CheckpointKind.NESTED, Structure(0, containers, None, ("m",)))
    flat, selected = verify_mod._flat_reader(ckpt, "m")
    assert flat == Finding(
        "flat-reader",
        Status.FAIL,
        "no tensors directly under state key 'm': they are deeper, under "
        "'m.a' (1), 'm.b' (5), 'm.c' (2), 'm.d' (1), 'm.e' (1); a flat reader given 'm' finds none",
        Note("pass {fix0}", (Option("state_key", "m.b"),)),
        details={"state_key": "m", "deeper": containers},
    )
    assert selected is not None
    assert len(selected) == 11


def test_state_key_is_stripped_of_dots_only():
    containers = {"X.a": 2, "X.b": 1}
    ckpt = crafted(["X.a.w", "X.a.v", "X.b.w"], CheckpointKind.NESTED, Structure(0, containers))
    assert verify_mod._deeper_than(ckpt, "X") == containers
    assert verify_mod._deeper_than(ckpt, ".X.") == containers


def test_tensors_directly_under_the_key_pass_even_with_deeper_ones():
    containers = {"m": 1, "m.sub": 2}
    ckpt = crafted(["m.w", "m.sub.a", "m.sub.b"], CheckpointKind.NESTED, Structure(0, containers))
    assert verify_mod._deeper_than(ckpt, "m") == {}
    flat, selected = verify_mod._flat_reader(ckpt, "m")
    assert flat == Finding("flat-reader", Status.OK, "3 tensors below state key 'm'")
    assert [e.name for e in selected or []] == ["w", "sub.a", "sub.b"]


def test_deeper_than_without_structure_is_empty():
    ckpt = Checkpoint([entry("m.a")], path="x.safetensors", format="safetensors")
    assert verify_mod._deeper_than(ckpt, "m") == {}


def test_state_key_in_a_safetensors_file(tmp_path):
    path = tmp_path / "prefixed.safetensors"
    save_file({"m.a": np.zeros(1, "<f4"), "m.b": np.zeros(2, "<f4")}, str(path))
    result = one(path, state_key="m", min_tensors=2)
    assert finding(result, "flat-reader") == Finding(
        "flat-reader", Status.OK, "2 tensors below state key 'm'"
    )
    assert result.tensors == 2


def test_state_key_with_one_tensor_is_singular(tmp_path):
    path = tmp_path / "prefixed.safetensors"
    save_file({"m.a": np.zeros(1, "<f4"), "x": np.zeros(2, "<f4")}, str(path))
    assert str(finding(one(path, state_key="m"), "flat-reader").message) == (
        "1 tensor below state key 'm'"
    )


def test_nested_state_key_passes():
    result = one(PT / "nested.pt", state_key="model")
    assert finding(result, "flat-reader") == Finding(
        "flat-reader", Status.OK, "4 tensors below state key 'model'"
    )
    assert result.tensors == 4


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (PT / "empty_checkpoint.pt", "the file holds no tensors"),
        (VALID / "burnpack" / "scalar_only.bpk", "the file holds no tensors (only 1 scalar)"),
        (VALID / "burnpack" / "meta_scalars.bpk", None),
    ],
)
def test_files_without_tensors(path, message):
    result = one(path)
    flat = finding(result, "flat-reader")
    if message is None:
        assert flat.status is Status.OK
        return
    assert flat == Finding(
        "flat-reader",
        Status.FAIL,
        message,
        "a weights file needs at least one tensor; was the wrong file saved?",
    )
    assert result.tensors == 0


def test_scalars_of_an_empty_file_are_counted(tmp_path):
    ckpt = Checkpoint(
        [], path="s.bpk", format="burnpack", scalars={"a": {"UInt": 1}, "b": {"UInt": 2}}
    )
    flat, _ = verify_mod._flat_reader(ckpt, None)
    assert str(flat.message) == "the file holds no tensors (only 2 scalars)"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (MIN_ZIP, "2 tensors at the top level (a flat name → tensor map)"),
        (PT / "scalar.pt", "1 tensor at the top level (a flat name → tensor map)"),
        (TINY, "4 tensors at the top level (flat by construction)"),
        (VALID / "burnpack" / "single.bpk", "1 tensor at the top level (flat by construction)"),
    ],
)
def test_flat_files_pass(path, message):
    assert finding(one(path), "flat-reader") == Finding("flat-reader", Status.OK, message)


def test_nested_checkpoint_fails_with_the_state_key_and_a_flat_copy():
    path = PT / "nested.pt"
    result = one(path)
    groups = {"model": 4, "optimizer": 12}  # truth.json
    assert finding(result, "flat-reader") == Finding(
        "flat-reader",
        Status.FAIL,
        Note(
            f"{FLAT_READERS} finds no tensors at the top level: tensors are under "
            "'model' (4), 'optimizer' (12): pass {fix0}, or re-save model.state_dict()",
            (Option("state_key", "model"),),
        ),
        Note(
            "a flat copy without torch: {fix0}",
            (
                Command(
                    "convert", (str(path), "model.safetensors"), (Option("state_key", "model"),)
                ),
            ),
        ),
        details={"top_level_tensors": 0, "groups": groups, "state_key": "model"},
    )
    assert result.tensors == len(truth_tensors("nested.pt"))


def test_lightning_checkpoint_suggests_state_dict_not_optimizer_states():
    flat = finding(one(PT / "lightning.ckpt"), "flat-reader")
    assert flat.details["state_key"] == "state_dict"
    assert flat.details["groups"] == {"state_dict": 4, "optimizer_states": 12}


def test_optimizer_state_dict_is_named_as_such():
    ckpt = crafted(
        ["state.0.exp_avg", "state.0.exp_avg_sq"],
        CheckpointKind.NESTED,
        Structure(0, {"state.0": 2}, None, ("state", "param_groups")),
        path="optim.pt",
    )
    flat, entries = verify_mod._flat_reader(ckpt, None)
    assert flat == Finding(
        "flat-reader",
        Status.FAIL,
        "an optimizer state_dict (state, param_groups), not model weights: "
        f"{FLAT_READERS} finds no tensors at the top level",
        Note(
            "to gate optimizer files on safety and readability alone: {fix0}",
            (Command("verify", ("optim.pt",), (Option("checks", "safe-pickle"),)),),
        ),
        details={"top_level_tensors": 0, "groups": {"state": 2}, "state_key": None},
    )
    assert entries is not None
    assert len(entries) == 2


def test_optimizer_keys_among_others_still_count():
    ckpt = crafted(
        ["state.0.m"],
        CheckpointKind.NESTED,
        Structure(0, {"state.0": 1}, None, ("param_groups", "epoch", "state")),
    )
    flat, _ = verify_mod._flat_reader(ckpt, None)
    assert str(flat.message).startswith("an optimizer state_dict (state, param_groups)")
    only_state = crafted(
        ["state.0.m"], CheckpointKind.NESTED, Structure(0, {"state.0": 1}, None, ("state",))
    )
    flat, _ = verify_mod._flat_reader(only_state, None)
    assert flat.details["state_key"] == "state"


def test_nested_without_structure_groups_tensors_by_their_first_name_part():
    ckpt = crafted(["enc.layer.w", "enc.b", "head.w"], CheckpointKind.NESTED, path="n.pt")
    flat, _ = verify_mod._flat_reader(ckpt, None)
    assert flat.status is Status.FAIL
    assert flat.details == {
        "top_level_tensors": 0,
        "groups": {"enc": 2, "head": 1},
        "state_key": "enc",
    }
    assert str(flat.message) == (
        f"{FLAT_READERS} finds no tensors at the top level: tensors are under "
        "'enc' (2), 'head' (1): pass state_key='enc', or re-save model.state_dict()"
    )


def test_mixed_top_level_and_nested_tensors_warn_with_the_counts():
    # top-level keys may hold dots ("fc.weight"): the groups come from the structure, which
    # knows they are not containers, not from the names
    ckpt = crafted(
        ["fc.weight", "fc.bias", "extra.x", "extra.y", "extra.z"],
        CheckpointKind.NESTED,
        Structure(2, {"": 2, "extra": 3}, None, ("fc.weight", "fc.bias", "extra")),
    )
    flat, _ = verify_mod._flat_reader(ckpt, None)
    assert flat == Finding(
        "flat-reader",
        Status.WARN,
        "2 tensors at the top level, but 3 more are nested under 'extra' (3); "
        "a flat reader skips those",
        Note("pass {fix0}, or re-save model.state_dict()", (Option("state_key", "extra"),)),
        details={"top_level_tensors": 2, "groups": {"extra": 3}, "state_key": "extra"},
    )


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
    assert flat.message == (
        f"{FLAT_READERS} finds no tensors at the top level: tensors are under no key (in a list "
        "or tuple): re-save model.state_dict()"
    )
    assert (result.kind, result.tensors) == ("nested", 2)


# --- min-tensors --------------------------------------------------------------------------------


def test_min_tensors_at_the_limit_passes():
    result = one(MIN_ZIP, min_tensors=2)
    assert finding(result, "min-tensors") == Finding(
        "min-tensors",
        Status.OK,
        "2 tensors (at least 2)",
        details={"tensors": 2, "min_tensors": 2},
    )


def test_min_tensors_one_past_the_limit_fails():
    assert finding(one(MIN_ZIP, min_tensors=3), "min-tensors") == Finding(
        "min-tensors",
        Status.FAIL,
        "2 tensors, fewer than the required 3",
        "is this the right file (a partial save, or one shard of a sharded checkpoint)?",
        details={"tensors": 2, "min_tensors": 3},
    )


def test_min_tensors_zero_and_large_limits():
    assert str(finding(one(MIN_ZIP, min_tensors=0), "min-tensors").message) == (
        "2 tensors (at least 0)"
    )
    assert str(finding(one(MIN_ZIP, min_tensors=1000), "min-tensors").message) == (
        "2 tensors, fewer than the required 1,000"
    )


def test_min_tensors_below_a_state_key():
    ok = finding(one(PT / "nested.pt", state_key="model", min_tensors=4), "min-tensors")
    assert str(ok.message) == "4 tensors below state key 'model' (at least 4)"
    low = finding(one(PT / "nested.pt", state_key="model", min_tensors=5), "min-tensors")
    assert str(low.message) == "4 tensors below state key 'model', fewer than the required 5"
    assert low.details == {"tensors": 4, "min_tensors": 5}


# --- expect -------------------------------------------------------------------------------------


def _files(
    tmp_path: Path, source: dict[str, np.ndarray], ref: dict[str, np.ndarray]
) -> tuple[Path, Path]:
    save_file(source, str(tmp_path / "file.safetensors"))
    save_file(ref, str(tmp_path / "ref.safetensors"))
    return tmp_path / "file.safetensors", tmp_path / "ref.safetensors"


def z(*shape: int) -> np.ndarray:
    return np.zeros(shape, "<f4")


def _example_a(tmp_path: Path) -> tuple[Path, Path]:
    """burn-store spec §5.5 Example A: encoder.layer.N in the file, layers.N in the model."""
    source = {
        "encoder.layer.0.weight": z(8, 8),
        "encoder.layer.0.bias": z(8),
        "head.weight": z(8, 3),
    }
    ref = {k.replace("layer.", "layers."): v for k, v in source.items()}
    ref["head.weight"] = z(8, 5)
    return _files(tmp_path, source, ref)


def test_expect_mismatch_names_every_problem_and_a_fitting_copy(tmp_path):
    path, ref = _example_a(tmp_path)
    result = one(path, expect=ref)
    expect = finding(result, "expect")
    assert expect.status is Status.FAIL
    assert expect.summary is not None
    assert expect.summary.fixes  # the layer. -> layers. remap
    assert str(expect.message) == (
        f"against {ref}: 0 of 3 reference tensors match in name and shape "
        "(2 missing, 1 shape mismatch, 2 not in the reference)"
    )
    assert expect.hint == Note(
        "missing 'encoder.layers.0.bias': did you mean 'encoder.layer.0.bias'? "
        "see the Tensor Loading Summary; a copy that fits: {fix0}",
        (
            Command(
                "convert",
                (str(path), "fitted.safetensors"),
                (*expect.summary.fixes, Option("target", str(ref))),
            ),
        ),
    )
    assert expect.details == {}


def test_expect_fitting_copy_keeps_the_reference_format(tmp_path):
    path, ref = _example_a(tmp_path)
    bpk = tmp_path / "ref.bpk"
    with open_checkpoint(ref) as ckpt:
        save_checkpoint(bpk, list(ckpt.values()))
    hint = finding(one(path, expect=bpk), "expect").hint
    assert isinstance(hint, Note)
    (fitted,) = hint.fixes
    assert isinstance(fitted, Command)
    assert fitted.args == (str(path), "fitted.bpk")
    bare = tmp_path / "reference"
    shutil.copy(ref, bare)
    hint = finding(one(path, expect=bare), "expect").hint
    assert isinstance(hint, Note)
    (fitted,) = hint.fixes
    assert isinstance(fitted, Command)
    assert fitted.args == (str(path), "fitted.safetensors")  # no extension: safetensors


def test_expect_fitting_copy_below_a_state_key(tmp_path):
    path = PT / "nested.pt"
    ref = tmp_path / "ref.safetensors"
    # truth.json: model.0.weight (2, 3), model.0.bias (2,), model.2.weight (1, 2), model.2.bias (1,)
    shapes = {
        f"model.{t['name'][6:]}": tuple(t["shape"])
        for t in truth_tensors("nested.pt")
        if t["name"].startswith("model.")
    }
    save_file({f"layers.{k[6:]}": z(*s) for k, s in shapes.items()}, str(ref))
    expect = finding(one(path, state_key="model", expect=ref), "expect")
    assert expect.summary is not None
    assert expect.summary.fixes
    assert str(expect.message) == (
        f"against {ref}: 0 of 4 reference tensors match in name and shape "
        "(4 missing, 4 not in the reference)"
    )
    assert isinstance(expect.hint, Note)
    assert expect.hint.fixes == (
        Command(
            "convert",
            (str(path), "fitted.safetensors"),
            (Option("state_key", "model"), *expect.summary.fixes, Option("target", str(ref))),
        ),
    )
    assert expect.hint.text.startswith("missing 'layers.0.bias': did you mean '0.bias'? ")


@pytest.mark.parametrize(
    ("ref", "problems"),
    [
        (
            {"a": z(3), "b": z(4)},
            "0 of 2 reference tensors match in name and shape (2 shape mismatches)",
        ),
        (
            {"a": z(3), "b": z(3)},
            "1 of 2 reference tensors match in name and shape (1 shape mismatch)",
        ),
    ],
)
def test_expect_shape_mismatches_alone(tmp_path, ref, problems):
    path, ref_path = _files(tmp_path, {"a": z(2), "b": z(3)}, ref)
    expect = finding(one(path, expect=ref_path), "expect")
    assert expect.status is Status.FAIL
    assert str(expect.message) == f"against {ref_path}: {problems}"
    assert expect.hint == "see the Tensor Loading Summary"


def test_expect_missing_without_a_suggestion(tmp_path):
    path, ref = _files(tmp_path, {"a": z(2), "b": z(3)}, {"a": z(2), "zzzz.qqq": z(7)})
    expect = finding(one(path, expect=ref), "expect")
    assert expect.status is Status.FAIL
    assert expect.summary is not None
    assert [m.suggestion for m in expect.summary.missing] == [None]
    assert str(expect.message) == (
        f"against {ref}: 1 of 2 reference tensors match in name and shape "
        "(1 missing, 1 not in the reference)"
    )
    assert expect.hint == "see the Tensor Loading Summary"


def test_expect_the_same_file_passes():
    expect = finding(one(TINY, expect=TINY), "expect")
    assert expect.status is Status.OK
    assert str(expect.message) == (
        f"against {TINY}: 4 of 4 reference tensors match in name and shape"
    )
    assert expect.hint is None
    assert expect.summary is not None


def test_expect_extra_tensors_only_warn(tmp_path):
    ref = tmp_path / "ref.safetensors"
    save_file({"fc.weight": z(3, 4)}, str(ref))
    result = one(TINY, expect=ref)
    expect = finding(result, "expect")
    assert expect.status is Status.WARN
    assert str(expect.message) == (
        f"against {ref}: 1 of 1 reference tensors match in name and shape (3 not in the reference)"
    )
    assert expect.hint is None
    assert result.ok


def test_expect_unreadable_reference(tmp_path):
    ref = tmp_path / "ref.safetensors"
    ref.write_bytes(b"<html></html>" * 4)
    with pytest.raises(CkptError) as info:
        open_checkpoint(ref)
    expect = finding(one(MIN_ZIP, expect=ref), "expect")
    assert expect == Finding(
        "expect",
        Status.FAIL,
        f"the reference {ref} cannot be read: {info.value.message}",
        hint_of(info.value),
    )


def _options(**kwargs) -> verify_mod._Options:
    base = {
        "checks": frozenset(CHECKS),
        "allow_globals": frozenset(),
        "trust": False,
        "state_key": None,
        "no_nan": False,
        "min_tensors": None,
        "expect": None,
        "expect_specs": None,
        "optimizer": None,
        "record": None,
    }
    return verify_mod._Options(**{**base, **kwargs})


def test_expect_without_reference_specs_cannot_read_it():
    opts = _options(expect="ref.safetensors")
    found = verify_mod._expect("m.safetensors", [entry("a")], opts, "ref.safetensors")
    assert found == Finding(
        "expect", Status.FAIL, "the reference ref.safetensors cannot be read: cannot be read", None
    )


# --- no-nan -------------------------------------------------------------------------------------


def _bad_values(tmp_path: Path) -> Path:
    path = tmp_path / "nan.safetensors"
    save_file(
        {
            "a_clean": np.arange(6, dtype="<f4"),
            "b_nan": np.array([np.nan, 1.0, np.nan], "<f4"),
            "c_inf": np.array([np.inf, -np.inf], "<f4"),
            "d_both": np.array([np.nan, np.inf], "<f4"),
            "e_ints": np.array([1, 2], "<i8"),
        },
        str(path),
    )
    return path


def test_no_nan_names_each_tensor_with_what_it_holds(tmp_path):
    result = one(_bad_values(tmp_path), no_nan=True)
    bad = [
        {"name": "b_nan", "dtype": "F32", "nan": 2, "inf": 0},
        {"name": "c_inf", "dtype": "F32", "nan": 0, "inf": 2},
        {"name": "d_both", "dtype": "F32", "nan": 1, "inf": 1},
    ]
    assert finding(result, "no-nan") == Finding(
        "no-nan",
        Status.FAIL,
        "NaN or Inf in 3 of 4 float tensors: 'b_nan' (2 NaN), 'c_inf' (2 Inf), "
        "'d_both' (1 NaN, 1 Inf)",
        NAN_HINT,
        details={"scanned": 4, "elements": 6 + 3 + 2 + 2, "tensors": bad},
    )


@pytest.mark.parametrize(("count", "more"), [(5, ""), (6, "; and 1 more")])
def test_no_nan_lists_tensors_up_to_the_limit(tmp_path, count, more):
    path = tmp_path / "many.safetensors"
    save_file({f"t{i}": np.full(1, np.nan, "<f4") for i in range(count)}, str(path))
    nan = finding(one(path, no_nan=True), "no-nan")
    listed = ", ".join(f"'t{i}' (1 NaN)" for i in range(5))
    assert str(nan.message) == f"NaN or Inf in {count} of {count} float tensors: {listed}{more}"
    assert len(nan.details["tensors"]) == count


def test_no_nan_singular(tmp_path):
    path = tmp_path / "one.safetensors"
    save_file({"w": np.array([np.inf], "<f4")}, str(path))
    assert str(finding(one(path, no_nan=True), "no-nan").message) == (
        "NaN or Inf in 1 of 1 float tensor: 'w' (1 Inf)"
    )
    save_file({"w": np.array([0.5], "<f4")}, str(path))
    assert finding(one(path, no_nan=True), "no-nan") == Finding(
        "no-nan",
        Status.OK,
        "no NaN or Inf in 1 float tensor (1 value)",
        details={"scanned": 1, "elements": 1, "tensors": []},
    )


def test_no_nan_scans_floats_and_complex_but_not_integers():
    # truth.json: 17 tensors of shape (2, 3); F64 F32 F16 BF16 F8_E4M3 F8_E5M2 C64 C128 scanned
    tensors = truth_tensors("dtypes.pt")
    floats = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "C64", "C128"}
    scanned = [t for t in tensors if t["dtype"] in floats]
    assert len(scanned) == 8
    elements = sum(int(np.prod(t["shape"])) for t in scanned)
    assert finding(one(PT / "dtypes.pt", no_nan=True), "no-nan") == Finding(
        "no-nan",
        Status.OK,
        f"no NaN or Inf in 8 float tensors ({elements} values)",
        details={"scanned": 8, "elements": elements, "tensors": []},
    )


def _written(tmp_path: Path, entries: list[TensorEntry]) -> Path:
    path = tmp_path / "w.safetensors"
    save_checkpoint(path, entries)
    return path


def test_no_nan_finds_nan_in_complex_tensors(tmp_path):
    values = np.array([1 + 1j, complex(np.nan, 0), complex(0, np.inf)], "<c8")
    path = _written(tmp_path, [entry("c", values, DType.C64)])
    nan = finding(one(path, no_nan=True), "no-nan")
    assert nan.details["tensors"] == [{"name": "c", "dtype": "C64", "nan": 1, "inf": 1}]


def test_no_nan_one_byte_tensor_is_scanned(tmp_path):
    # F8_E4M3 (OCP FP8): 0x7F is NaN; a one-byte tensor is not empty
    path = _written(tmp_path, [entry("f8", np.array([0x7F], "u1"), DType.F8_E4M3)])
    nan = finding(one(path, no_nan=True), "no-nan")
    assert nan.details == {
        "scanned": 1,
        "elements": 1,
        "tensors": [{"name": "f8", "dtype": "F8_E4M3", "nan": 1, "inf": 0}],
    }


def test_no_nan_empty_tensor_is_clean(tmp_path):
    path = tmp_path / "empty.safetensors"
    save_file({"e": np.zeros(0, "<f4"), "w": np.ones(2, "<f4")}, str(path))
    assert finding(one(path, no_nan=True), "no-nan") == Finding(
        "no-nan",
        Status.OK,
        "no NaN or Inf in 2 float tensors (2 values)",
        details={"scanned": 2, "elements": 2, "tensors": []},
    )


def test_no_nan_scans_computed_tensors_whole():
    values = np.array([[np.nan, 1.0, np.inf], [np.nan, -np.inf, 2.0]], "<f4")
    found = verify_mod._no_nan([entry("m", values)])
    assert found.details["tensors"] == [{"name": "m", "dtype": "F32", "nan": 2, "inf": 2}]
    assert found.details["elements"] == 6


def test_no_nan_in_strided_views_from_torch():
    # conj_neg.pt: 'plain' C64 (2,), 'conj' C64 (2,) computed, 'neg_imag' F32 (1,) computed
    assert finding(one(PT / "conj_neg.pt", no_nan=True), "no-nan") == Finding(
        "no-nan",
        Status.OK,
        "no NaN or Inf in 3 float tensors (5 values)",
        details={"scanned": 3, "elements": 5, "tensors": []},
    )


def _spy_reads(monkeypatch) -> list[int]:
    reads: list[int] = []
    real_read = ByteSource.read

    def spy(self, offset, length):
        reads.append(length)
        return real_read(self, offset, length)

    monkeypatch.setattr(ByteSource, "read", spy)
    return reads


def test_no_nan_chunks_stop_at_the_end_of_each_tensor(tmp_path, monkeypatch):
    path = tmp_path / "two.safetensors"
    # "a" (40 bytes) is clean and lies just before "b", which is all NaN
    save_file({"a": np.arange(10, dtype="<f4"), "b": np.full(4, np.nan, "<f4")}, str(path))
    with open_checkpoint(path) as ckpt:
        assert ckpt["a"].offset is not None
        assert ckpt["b"].offset == ckpt["a"].offset + 40
    monkeypatch.setattr(nan_mod, "SCAN_CHUNK_BYTES", 16)
    reads = _spy_reads(monkeypatch)
    nan = finding(one(path, no_nan=True), "no-nan")
    assert nan.details["tensors"] == [{"name": "b", "dtype": "F32", "nan": 4, "inf": 0}]
    assert reads[-4:] == [16, 16, 8, 16]


def test_no_nan_chunk_is_rounded_down_to_whole_elements(tmp_path, monkeypatch):
    path = tmp_path / "w.safetensors"
    values = np.zeros(40, "<f4")
    values[[0, 17, 39]] = np.nan
    values[[1, 20, 38]] = [np.inf, -np.inf, np.inf]
    save_file({"w": values}, str(path))
    monkeypatch.setattr(nan_mod, "SCAN_CHUNK_BYTES", 66)  # 16.5 F32 values: 64 bytes a read
    reads = _spy_reads(monkeypatch)
    nan = finding(one(path, no_nan=True), "no-nan")
    assert nan.details["tensors"] == [{"name": "w", "dtype": "F32", "nan": 3, "inf": 3}]
    assert reads[-3:] == [64, 64, 32]


def test_no_nan_chunk_smaller_than_an_element_reads_one_element(tmp_path, monkeypatch):
    path = tmp_path / "w.safetensors"
    save_file({"w": np.array([1.0, np.nan, np.inf], "<f8")}, str(path))
    monkeypatch.setattr(nan_mod, "SCAN_CHUNK_BYTES", 3)
    reads = _spy_reads(monkeypatch)
    nan = finding(one(path, no_nan=True), "no-nan")
    assert nan.details["tensors"] == [{"name": "w", "dtype": "F64", "nan": 1, "inf": 1}]
    assert reads[-3:] == [8, 8, 8]


def test_no_nan_error_fails_only_that_check(monkeypatch, tmp_path):
    def unreadable(entry):
        raise CorruptCheckpointError("tensor 'b_nan' cannot be read", hint="re-download it")

    monkeypatch.setattr(nan_mod, "_scan", unreadable)
    result = one(_bad_values(tmp_path), no_nan=True, min_tensors=1)
    assert order(result) == [
        ("readable", "ok"),
        ("flat-reader", "ok"),
        ("min-tensors", "ok"),
        ("no-nan", "fail"),
    ]
    assert result.findings[3] == Finding(
        "no-nan", Status.FAIL, "tensor 'b_nan' cannot be read", "re-download it"
    )


def _threads(monkeypatch) -> set[int]:
    seen: set[int] = set()
    real = nan_mod._scan

    def spy(entry):
        seen.add(threading.get_ident())
        return real(entry)

    monkeypatch.setattr(nan_mod, "_scan", spy)
    return seen


def _pool_sizes(monkeypatch) -> list[int | None]:
    import concurrent.futures

    sizes: list[int | None] = []
    real = concurrent.futures.ThreadPoolExecutor

    class Spy(real):  # type: ignore[misc, valid-type]  # a subclass of the real pool, recording
        def __init__(self, max_workers=None, *args, **kwargs):
            sizes.append(max_workers)
            super().__init__(max_workers, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", Spy)
    return sizes


@pytest.mark.parametrize(
    ("jobs", "tensors", "pool"),
    [(1, 4, None), (0, 4, None), (2, 1, None), (2, 2, 2), (3, 2, 2), (2, 4, 2)],
)
def test_no_nan_jobs_scan_on_that_many_threads(tmp_path, monkeypatch, jobs, tensors, pool):
    path = tmp_path / "many.safetensors"
    arrays = {f"t{i}": np.full(i + 1, np.nan if i % 2 else 0.0, "<f4") for i in range(tensors)}
    save_file(arrays, str(path))
    seen = _threads(monkeypatch)
    sizes = _pool_sizes(monkeypatch)
    nan = finding(one(path, no_nan=True, jobs=jobs), "no-nan")
    # the report does not depend on jobs: odd tensors are all NaN, in file order
    assert nan.details["tensors"] == [
        {"name": f"t{i}", "dtype": "F32", "nan": i + 1, "inf": 0} for i in range(1, tensors, 2)
    ]
    assert nan.details["scanned"] == tensors
    if pool is None:
        assert sizes == []
        assert seen == {threading.get_ident()}
    else:
        assert sizes == [pool]
        assert threading.get_ident() not in seen


def test_no_nan_scans_on_the_calling_thread_by_default(tmp_path, monkeypatch):
    path = tmp_path / "two.safetensors"
    save_file({"a": np.zeros(2, "<f4"), "b": np.full(3, np.inf, "<f4")}, str(path))
    seen = _threads(monkeypatch)
    sizes = _pool_sizes(monkeypatch)
    nan = finding(one(path, no_nan=True), "no-nan")
    assert nan.details["tensors"] == [{"name": "b", "dtype": "F32", "nan": 0, "inf": 3}]
    direct = verify_mod._no_nan([entry("c"), entry("d", np.array([np.nan], "<f4"))])
    assert direct.details["tensors"] == [{"name": "d", "dtype": "F32", "nan": 1, "inf": 0}]
    assert sizes == []
    assert seen == {threading.get_ident()}


# --- optimizer ----------------------------------------------------------------------------------


def optim(model: str | Path, record: str | Path, **kwargs) -> Finding:
    found = finding(one(model, optimizer=record, **kwargs), "optimizer")
    assert found.optimizer is not None
    return found


def repair(model: str | Path, record: str | Path, state_key: str | None = None) -> Command:
    options = [Option("param_ids_from", str(record))]
    if state_key is not None:
        options.append(Option("state_key", state_key))
    return Command("convert", (str(model), "fixed.bpk"), tuple(options))


def test_optimizer_matching_model_is_ok():
    found = optim(OPTIM / "model.bpk", OPTIM / "optim.bpk")
    n = len(MO.TRAINABLE)
    assert found.status is Status.OK
    assert str(found.message) == (
        f"ok: all {n} optimizer states attach to their parameters; "
        "100.0% of trainable parameters have state"
    )
    assert found.hint is None


def test_optimizer_safetensors_model_has_no_ids():
    model, record = OPTIM / "model.safetensors", OPTIM / "optim.bpk"
    found = optim(model, record)
    assert found.status is Status.FAIL
    assert str(found.message) == (
        "no-ids: the model is safetensors, which carries no ParamIds; resuming from it starts "
        f"all {len(MO.TRAINABLE)} optimizer states from scratch (Adam moments reset, time = 1)"
    )
    assert found.hint == Note(
        "write a model with the optimizer's ParamIds: {fix0}", (repair(model, record),)
    )


def test_optimizer_burnpack_model_without_ids():
    found = optim(OPTIM / "model_noids.bpk", OPTIM / "optim.bpk")
    assert str(found.message) == (
        "no-ids: the model burnpack carries no param_id (Burn gives such tensors random ids); "
        f"resuming from it starts all {len(MO.TRAINABLE)} optimizer states from scratch "
        "(Adam moments reset, time = 1)"
    )


def test_optimizer_repair_keeps_the_state_key(tmp_path):
    model = tmp_path / "nested.safetensors"
    with open_checkpoint(OPTIM / "model.safetensors") as ckpt:
        save_file({f"model.{e.name}": e.load() for e in ckpt.values()}, str(model))
    found = optim(model, OPTIM / "optim.bpk", state_key="model")
    assert found.optimizer is not None
    assert found.optimizer.verdict == "no-ids"
    assert found.hint == Note(
        "write a model with the optimizer's ParamIds: {fix0}",
        (repair(model, OPTIM / "optim.bpk", "model"),),
    )


def test_optimizer_reinitialized_model_is_lost():
    model, record = OPTIM / "model_reinit.bpk", OPTIM / "optim.bpk"
    found = optim(model, record)
    n = len(MO.TRAINABLE)
    assert found.status is Status.FAIL
    assert str(found.message) == (
        f"lost: none of the {n} optimizer states attach (0.0%); resuming would silently "
        "restart the optimizer (Adam moments reset, time = 1)"
    )
    assert found.hint == Note(
        f"all {n} states can be re-keyed by path: {{fix0}}", (repair(model, record),)
    )


def test_optimizer_partial_record():
    found = optim(OPTIM / "model.bpk", OPTIM / "optim_partial.bpk")
    assert str(found.message) == "partial: 3 of 6 optimizer states attach (50.0%)"
    assert found.hint == (
        "states without a matching ParamId start from scratch; resume from the model file "
        "saved together with this record"
    )


def test_optimizer_grown_record():
    found = optim(OPTIM / "model.bpk", OPTIM / "optim_grown.bpk")
    assert str(found.message) == (
        "partial: 5 of 10 optimizer states attach (50.0%); the record holds 2 cohorts of states "
        "for the same paths (an earlier failed resume was saved back)"
    )
    assert found.hint == (
        "every trainable parameter has state, but 5 orphaned states will never be used and are "
        "saved again with every checkpoint (the file grows)"
    )


def test_optimizer_shape_disagreements():
    found = optim(OPTIM / "model.bpk", OPTIM / "optim_shape.bpk")
    assert str(found.message) == (
        "partial: 5 of 5 optimizer states attach (100.0%), 2 shape disagreements"
    )
    assert found.hint == (
        "the record was taken from another model (other paths or shapes); is this the pair?"
    )


def test_optimizer_record_that_is_not_one():
    record = OPTIM / "model.bpk"
    error = load_record(record)
    assert isinstance(error, CkptError)
    found = finding(one(OPTIM / "model.bpk", optimizer=record), "optimizer")
    assert found == Finding("optimizer", Status.FAIL, f"{record}: {error.message}", hint_of(error))


def test_optimizer_check_error_fails_only_that_check(monkeypatch):
    def unreadable(*args: object) -> OptimizerCheck:
        raise CorruptCheckpointError("tensor 'fc.weight' cannot be read", hint="re-download it")

    monkeypatch.setattr(opt_mod, "check_optimizer", unreadable)
    result = one(OPTIM / "model.bpk", optimizer=OPTIM / "optim.bpk")
    assert order(result) == [("readable", "ok"), ("flat-reader", "ok"), ("optimizer", "fail")]
    assert result.findings[2] == Finding(
        "optimizer", Status.FAIL, "tensor 'fc.weight' cannot be read", "re-download it"
    )


def test_optimizer_without_a_record_cannot_read_it():
    found = verify_mod._optimizer("m.bpk", "burnpack", [], "optim.bpk", None, None)
    assert found == Finding("optimizer", Status.FAIL, "optim.bpk: cannot be read", None)


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


def test_optimizer_finding_no_ids_without_a_repair():
    c = check("no-ids", model_has_ids=False, model_format="pytorch-zip", matched=0)
    assert verify_mod._optimizer_finding(c) == Finding(
        "optimizer",
        Status.FAIL,
        "no-ids: the model is pytorch-zip, which carries no ParamIds; resuming from it starts "
        "all 4 optimizer states from scratch (Adam moments reset, time = 1)",
        "resume from a burnpack written by ModuleRecord or BurnpackStore (it carries ParamIds)",
        optimizer=c,
    )


def test_optimizer_finding_no_ids_repair_that_may_not_fit():
    c = check("no-ids", model_has_ids=False, states=1234, repair=FIX, rebindable=False)
    found = verify_mod._optimizer_finding(c)
    assert str(found.message) == (
        "no-ids: the model burnpack carries no param_id (Burn gives such tensors random ids); "
        "resuming from it starts all 1,234 optimizer states from scratch "
        "(Adam moments reset, time = 1)"
    )
    assert found.hint == Note(
        "write a model with the optimizer's ParamIds: {fix0} (some recorded paths or shapes do "
        "not match this model; check the result)",
        (FIX,),
    )
    rebindable = verify_mod._optimizer_finding(
        check("no-ids", model_has_ids=False, repair=FIX, rebindable=True)
    )
    assert rebindable.hint == Note("write a model with the optimizer's ParamIds: {fix0}", (FIX,))


def test_optimizer_finding_ok_without_states():
    c = check("ok", states=0, matched=0, trainable_with_state=0)
    assert verify_mod._optimizer_finding(c) == Finding(
        "optimizer",
        Status.OK,
        "ok: the optimizer record holds no parameter states",
        None,
        optimizer=c,
    )


def test_optimizer_finding_ok_without_trainable_tensors_has_no_coverage():
    c = check("ok", states=2, matched=2, trainable=0, trainable_with_state=0)
    assert c.coverage is None
    assert str(verify_mod._optimizer_finding(c).message) == (
        "ok: all 2 optimizer states attach to their parameters"
    )


def test_optimizer_finding_ok_with_partial_coverage():
    c = check("ok", states=3, matched=3, trainable=8, trainable_with_state=3)
    assert str(verify_mod._optimizer_finding(c).message) == (
        "ok: all 3 optimizer states attach to their parameters; "
        "37.5% of trainable parameters have state"
    )


def test_optimizer_finding_ok_with_id_less_tensors_warns():
    c = check("ok", without_ids=("extra0", "extra1"))
    assert verify_mod._optimizer_finding(c) == Finding(
        "optimizer",
        Status.WARN,
        "ok: all 4 optimizer states attach to their parameters; 100.0% of trainable parameters "
        "have state; 2 trainable tensors carry no param_id and get random ids on load",
        None,
        optimizer=c,
    )


def test_optimizer_finding_lost_with_cohorts():
    c = check("lost", matched=0, trainable_with_state=0, cohorts=3)
    found = verify_mod._optimizer_finding(c)
    assert found.message == (
        "lost: none of the 4 optimizer states attach (0.0%); resuming would silently restart the "
        "optimizer (Adam moments reset, time = 1); the record holds 3 cohorts of states for the "
        "same paths (an earlier failed resume was saved back)"
    )
    assert found.hint == (
        "states without a matching ParamId start from scratch; resume from the model file "
        "saved together with this record"
    )


def test_optimizer_finding_partial_with_one_cohort_has_no_growth():
    c = check("partial", matched=3, trainable_with_state=3, cohorts=1)
    assert verify_mod._optimizer_finding(c).message == (
        "partial: 3 of 4 optimizer states attach (75.0%)"
    )


def test_optimizer_finding_partial_without_a_match_rate():
    c = check("partial", model_has_ids=False, matched=0, trainable_with_state=0)
    assert c.match_rate is None
    assert verify_mod._optimizer_finding(c).message == "partial: 0 of 4 optimizer states attach"


def test_optimizer_finding_partial_with_one_path_disagreement():
    c = check("partial", path_disagreements=((7, "fc.bias", "fc.weight"),))
    found = verify_mod._optimizer_finding(c)
    assert found.message == "partial: 4 of 4 optimizer states attach (100.0%), 1 path disagreement"
    assert found.hint == (
        "the record was taken from another model (other paths or shapes); is this the pair?"
    )


def test_optimizer_finding_partial_with_both_disagreements():
    c = check(
        "partial",
        path_disagreements=((7, "a", "b"), (8, "c", "d")),
        shape_disagreements=("state 9 has shape [1] but 'e' has [2]",),
    )
    assert verify_mod._optimizer_finding(c).message == (
        "partial: 4 of 4 optimizer states attach (100.0%), 2 path disagreements, "
        "1 shape disagreement"
    )


def test_optimizer_finding_repair_comes_before_disagreements():
    c = check("partial", repair=FIX, shape_disagreements=("s",), states=12, matched=6)
    assert verify_mod._optimizer_finding(c).hint == Note(
        "all 12 states can be re-keyed by path: {fix0}", (FIX,)
    )


def test_optimizer_finding_full_coverage_counts_both_kinds_of_orphans():
    c = check(
        "partial",
        states=7,
        reinitialized=(Orphan(1, "fc.weight", 2), Orphan(3, "fc.bias", 4)),
        foreign=(Orphan(5, None),),
    )
    assert c.coverage == 1.0
    assert verify_mod._optimizer_finding(c).hint == (
        "every trainable parameter has state, but 3 orphaned states will never be used and are "
        "saved again with every checkpoint (the file grows)"
    )


def test_optimizer_finding_speaks_of_one_id_less_tensor_and_one_orphan_in_the_singular():
    idless = check("ok", without_ids=("extra0",))
    assert str(verify_mod._optimizer_finding(idless).message).endswith(
        "; 1 trainable tensor carries no param_id and gets random ids on load"
    )
    orphan = check("partial", states=5, foreign=(Orphan(5, None),))
    assert orphan.coverage == 1.0
    assert verify_mod._optimizer_finding(orphan).hint == (
        "every trainable parameter has state, but 1 orphaned state will never be used and is "
        "saved again with every checkpoint (the file grows)"
    )


def test_optimizer_finding_partial_coverage_hint():
    c = check("partial", trainable=8, trainable_with_state=4, foreign=(Orphan(5, None),))
    assert verify_mod._optimizer_finding(c).hint == (
        "states without a matching ParamId start from scratch; resume from the model file "
        "saved together with this record"
    )


# --- the CLI: what CI sees ----------------------------------------------------------------------


def test_cli_json_for_a_deeper_state_key(run_cli):
    result = run_cli("verify", PT / "nested.pt", "--state-key", "optimizer", "--json")
    assert result.code == 1
    (file,) = json.loads(result.stdout)["files"]
    assert file["ok"] is False
    assert file["tensors"] == 12
    flat = next(f for f in file["findings"] if f["check"] == "flat-reader")
    assert flat["status"] == "fail"
    assert flat["hint"] == "pass --state-key optimizer.state.0"
    assert flat["details"] == {
        "state_key": "optimizer",
        "deeper": {f"optimizer.state.{i}": 3 for i in range(4)},
    }


def test_cli_checks_and_exit_codes(run_cli):
    result = run_cli("verify", PT / "nested.pt", "--check", "readable", "--json")
    assert result.code == 0  # the failing flat-reader check is not reported
    (file,) = json.loads(result.stdout)["files"]
    assert [f["check"] for f in file["findings"]] == ["readable"]
    assert run_cli("verify", MIN_ZIP, "--skip", "readable").code == 2
    assert run_cli("verify", MIN_ZIP, "--check", "nope").code == 2

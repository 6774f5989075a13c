"""How ``verify`` runs its checks on a file: which findings come, in which order, chosen by
``checks``/``skip``; a file's failures never escape (one bad file, a bug, an unreadable tensor);
``readable`` and ``safe-pickle`` as the runner makes them while opening the file."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ckptctl.errors import CkptError
from ckptctl.fix import hint_of
from ckptctl.formats import open_checkpoint
from ckptctl.ops.verify import FileResult, FileVerdict, Finding, Status, verify
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
from tests.ops.test_verify import finding, one

PT = VALID / "pytorch"
TINY = VALID / "safetensors" / "tiny.safetensors"
MIN_ZIP = PT / "min_zip.pt"


def order(result: FileResult) -> list[tuple[str, str]]:
    return [(f.check, f.status.value) for f in result.findings]


def deflated(tmp_path: Path, values: np.ndarray, *, corrupt: bool) -> Path:
    """``{"w": values}`` (F32) as a torch zip whose storage record is deflate-compressed: its
    bytes are produced in memory on load; ``corrupt`` garbles the compressed stream, which no
    structural check reads (only loading the tensor does)."""
    w = tensor_v2(storage_pid("FloatStorage", "0", values.size), 0, (values.size,), (1,))
    path = write_zip(
        tmp_path / "deflated.pt",
        pkl(dict_of([(lit("w"), w)])),
        {"0": values.astype("<f4").tobytes()},
        compression=zipfile.ZIP_DEFLATED,
    )
    if corrupt:
        raw = bytearray(path.read_bytes())
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo("archive/data/0")
        start = info.header_offset + 30 + len(info.filename) + len(info.extra)
        for i in range(start + 2, start + info.compress_size - 2):
            raw[i] ^= 0x55
        path.write_bytes(bytes(raw))
    return path


# --- which findings, in which order -------------------------------------------------------------


def test_without_checks_every_check_that_runs_is_reported_in_order():
    result = one(MIN_ZIP, min_tensors=1)
    assert order(result) == [
        ("readable", "ok"),
        ("safe-pickle", "ok"),
        ("flat-reader", "ok"),
        ("min-tensors", "ok"),
    ]


def test_every_optional_check_in_order():
    result = one(TINY, min_tensors=0, expect=TINY, no_nan=True)
    assert [f.check for f in result.findings] == [
        "readable",
        "flat-reader",
        "min-tensors",
        "expect",
        "no-nan",
    ]
    assert result.ok


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
    # a bug met while reading (injected where every local read starts): that file fails
    # readable, naming the exception, and the next file is checked as usual
    bad = tmp_path / "bad.pt"
    bad.write_bytes(MIN_ZIP.read_bytes())
    real = ByteSource.__init__

    def flaky(self, path, *args, **kwargs):
        if str(path) == str(bad):
            raise RuntimeError("boom")
        real(self, path, *args, **kwargs)

    monkeypatch.setattr(ByteSource, "__init__", flaky)
    report = verify([bad, MIN_ZIP])
    first, second = report.files
    assert (first.path, first.format, first.tensors) == (str(bad), None, None)
    assert first.verdict is FileVerdict.UNREADABLE
    (failed,) = first.findings
    assert (failed.check, failed.status) == ("readable", Status.FAIL)
    assert "RuntimeError: boom" in str(failed.message)
    assert "bug" in str(failed.hint)
    assert second.ok
    assert second.tensors == 2


def test_a_tensor_that_cannot_be_read_fails_only_the_check_reading_it(tmp_path):
    path = deflated(tmp_path, np.arange(64, dtype="<f4"), corrupt=True)
    result = one(path, no_nan=True, min_tensors=1)
    assert order(result) == [
        ("readable", "ok"),
        ("safe-pickle", "ok"),
        ("flat-reader", "ok"),
        ("min-tensors", "ok"),
        ("no-nan", "fail"),
    ]
    with open_checkpoint(path) as ckpt, pytest.raises(CkptError) as info:
        ckpt["w"].load()
    assert result.findings[4] == Finding(
        "no-nan", Status.FAIL, info.value.message, hint_of(info.value)
    )
    assert "archive/data/0" in info.value.message


def test_missing_file_is_one_readable_failure(tmp_path):
    path = tmp_path / "nope.pt"
    result = one(path)
    assert (result.path, result.format, result.kind, result.tensors) == (
        str(path),
        None,
        None,
        None,
    )
    (failed,) = result.findings
    assert (failed.check, failed.status) == ("readable", Status.FAIL)
    assert "no such file" in str(failed.message)
    assert result.verdict is FileVerdict.UNREADABLE


def test_a_corrupt_file_fails_readable_with_the_readers_error(tmp_path):
    path = tmp_path / "cut.safetensors"
    path.write_bytes(TINY.read_bytes()[:-10])
    with pytest.raises(CkptError) as info:
        open_checkpoint(path)
    result = one(path)
    assert (result.format, result.tensors, result.verdict) == (
        "safetensors",
        None,
        FileVerdict.UNREADABLE,
    )
    assert result.findings == (
        Finding("readable", Status.FAIL, info.value.message, hint_of(info.value)),
    )


def test_unsafe_refusal_without_a_verdict_is_the_safe_pickle_failure(tmp_path):
    # ONNX external data outside the model's folder: refused as unsafe before anything is
    # read, by a check that carries no pickle verdict
    from tests.formats.test_onnx import _outside

    model, _ = _outside(tmp_path, "dotdot")
    with pytest.raises(CkptError) as info:
        open_checkpoint(model)
    result = one(model)
    assert (result.format, result.kind, result.tensors) == ("onnx", None, None)
    assert result.findings == (
        Finding("safe-pickle", Status.FAIL, info.value.message, hint_of(info.value)),
    )
    assert result.verdict is FileVerdict.UNSAFE


def test_unsafe_pickle_with_a_verdict_reports_the_verdict():
    result = one(HOSTILE / "pickle" / "subprocess.Popen__zip.pt")
    assert (result.format, result.kind, result.tensors) == ("pytorch", None, None)
    (unsafe,) = result.findings
    assert (unsafe.check, unsafe.status) == ("safe-pickle", Status.FAIL)
    assert unsafe.safety is not None
    assert unsafe.safety.verdict is Verdict.UNSAFE
    assert "subprocess.Popen" in str(unsafe.message)
    assert result.verdict is FileVerdict.UNSAFE


# --- readable -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "what"),
    [
        (MIN_ZIP, "pytorch-zip, 2 tensors;"),
        (PT / "scalar.pt", "pytorch-zip, 1 tensor;"),
        (
            VALID / "safetensors" / "sharded" / "model.safetensors.index.json",
            "4 tensors in 2 shards",
        ),
        # meta_scalars.bpk: one tensor and six scalars; scalar_only.bpk: one scalar (README)
        (VALID / "burnpack" / "meta_scalars.bpk", "burnpack, 1 tensor, 6 scalars;"),
        (VALID / "burnpack" / "scalar_only.bpk", "burnpack, 0 tensors, 1 scalar;"),
    ],
)
def test_readable_names_the_format_and_counts(path, what):
    readable = finding(one(path), "readable")
    assert readable.status is Status.OK
    assert what in str(readable.message)
    assert readable.hint is None


def test_a_file_that_is_no_checkpoint_keeps_the_readers_hint(tmp_path):
    path = tmp_path / "notes.bin"
    path.write_text("just some text, not a checkpoint\n" * 4)
    with pytest.raises(CkptError) as info:
        open_checkpoint(path)
    result = one(path)
    assert result.findings == (
        Finding("readable", Status.FAIL, info.value.message, hint_of(info.value)),
    )
    assert result.label is not None
    assert result.label.endswith("not a checkpoint")


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
    assert str(plain.message).startswith("needs trust")
    assert "mypkg.config.Cfg" in str(plain.message)
    trusted = finding(one(path, trust=True), "safe-pickle")
    assert trusted.status is Status.WARN
    assert trusted.message == plain.message
    allowed = finding(one(path, allow_globals=["mypkg.config.Cfg"]), "safe-pickle")
    assert allowed.status is Status.OK
    # torch loads it only when told the same: the message says how, never plain "safe:"
    assert not str(allowed.message).startswith("safe:")
    if storage:
        assert "safe_globals([mypkg.config.Cfg])" in str(allowed.message)
    else:
        assert "unreadable" in str(allowed.message)
    needless = finding(one(MIN_ZIP, allow_globals=["mypkg.config.Cfg"]), "safe-pickle")
    assert needless.message == finding(one(MIN_ZIP), "safe-pickle").message
    assert str(needless.message).startswith("safe:")
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
        assert unsafe.safety is not None
        assert unsafe.safety.verdict is Verdict.UNSAFE
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
    assert result.verdict is FileVerdict.NEEDS_TRUST


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

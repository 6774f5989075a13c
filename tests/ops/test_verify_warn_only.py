"""Warnings never fail a file: ``verify`` exits 0 and says ``ok: true`` for warn-only files.

Issue 17: computing a file's ``ok`` as "every finding is ok" (instead of "no finding failed")
survived the whole suite, although it breaks every CI gate that runs ``verify`` on a file with
extra tensors, a mixed nested layout or id-less optimizer tensors. Each case here asserts the
finding's status, the file's and the report's ``ok``, the JSON and the exit code.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from ckptctl import TensorEntry, save_checkpoint
from ckptctl.dtypes import DType
from ckptctl.formats import open_checkpoint
from ckptctl.model import ComputedData
from ckptctl.ops.verify import Status, verify
from tests.conftest import VALID
from tests.formats.test_pytorch_reader import (
    dict_of,
    f32,
    lit,
    pkl,
    storage_pid,
    tensor_v2,
    write_zip,
)

OPTIM = VALID / "optim"
TINY = VALID / "safetensors" / "tiny.safetensors"


#: A warn-only file: its path and the keyword arguments of ``verify`` (the CLI's options).
Case = tuple[Path, dict[str, Path]]


def _extra_tensors(tmp_path: Path) -> Case:
    """``tiny.safetensors`` against a reference holding only one of its tensors."""
    ref = tmp_path / "ref.safetensors"
    save_file({"fc.weight": np.zeros((3, 4), "<f4")}, str(ref))
    return TINY, {"expect": ref}


def _mixed_nested(tmp_path: Path) -> Case:
    """``{"w": tensor, "extra": {"v": tensor}}``: a flat reader finds ``w``, skips ``extra.v``."""
    w = tensor_v2(storage_pid("FloatStorage", "0", 2), 0, (2,), (1,))
    v = tensor_v2(storage_pid("FloatStorage", "1", 1), 0, (1,), (1,))
    body = dict_of([(lit("w"), w), (lit("extra"), dict_of([(lit("v"), v)]))])
    path = write_zip(tmp_path / "mixed.pt", pkl(body), {"0": f32(1, 2), "1": f32(3)})
    return path, {}


def _idless_trainable(tmp_path: Path) -> Case:
    """``model.bpk`` plus one trainable tensor without a ParamId: every state still attaches."""
    with_ids = tmp_path / "model.bpk"
    with open_checkpoint(OPTIM / "model.bpk") as ckpt:
        entries = list(ckpt.values())
        raw = np.ones(3, "<f4").tobytes()
        extra = TensorEntry("adapter.scale", DType.F32, (3,), 12, None, ComputedData(lambda: raw))
        save_checkpoint(with_ids, [*entries, extra])
    return with_ids, {"optimizer": OPTIM / "optim.bpk"}


CASES = {
    "expect-extra-tensors": (_extra_tensors, "expect", "3 not in the reference"),
    "mixed-nested": (_mixed_nested, "flat-reader", "skips those"),
    "optimizer-without-ids": (
        _idless_trainable,
        "optimizer",
        "1 trainable tensor carries no param_id",
    ),
}


def cli_args(case: Case) -> list[str | Path]:
    path, options = case
    return [path, *(x for k, v in options.items() for x in (f"--{k.replace('_', '-')}", v))]


@pytest.mark.parametrize("case", CASES)
def test_warn_only_file_is_ok_in_the_library(tmp_path, case):
    make, check, fragment = CASES[case]
    path, options = make(tmp_path)
    report = verify([path], expect=options.get("expect"), optimizer=options.get("optimizer"))
    (result,) = report.files
    statuses = {f.check: f.status for f in result.findings}
    assert statuses[check] is Status.WARN, result.findings
    assert all(s is not Status.FAIL for s in statuses.values()), result.findings
    warned = next(f for f in result.findings if f.check == check)
    assert fragment in str(warned.message)
    assert result.ok
    assert result.failures == ()
    assert report.ok
    assert (report.passed, report.failed, report.warned) == (1, 0, 1)
    assert report.summary_line() == "1 file: 1 passed, 0 failed (1 with warnings)"


@pytest.mark.parametrize("case", CASES)
def test_warn_only_file_exits_0(tmp_path, run_cli, case):
    make, check, _ = CASES[case]
    args = cli_args(make(tmp_path))
    text = run_cli("verify", *args)
    assert text.code == 0, text
    assert text.stdout.splitlines()[0].startswith("WARN ")
    assert text.stdout.splitlines()[-1] == "1 file: 1 passed, 0 failed (1 with warnings)"
    result = run_cli("verify", *args, "--json")
    assert result.code == 0, result
    data = json.loads(result.stdout)
    assert data["ok"] is True
    assert data["summary"] == {
        "files": 1,
        "passed": 1,
        "failed": 0,
        "warned": 1,
        "verdicts": {"safe": 1, "needs-trust": 0, "unsafe": 0, "unreadable": 0},
        "skipped": 0,
        "skipped_paths": [],
    }
    (file,) = data["files"]
    assert file["ok"] is True
    assert {f["check"]: f["status"] for f in file["findings"]}[check] == "warn"


def test_a_warning_next_to_a_failure_still_fails(tmp_path, run_cli):
    # the other side of the rule: warnings do not hide a failure (--min-tensors 99 fails)
    args = cli_args(_extra_tensors(tmp_path))
    result = run_cli("verify", *args, "--min-tensors", "99", "--json")
    assert result.code == 1
    (file,) = json.loads(result.stdout)["files"]
    statuses = {f["check"]: f["status"] for f in file["findings"]}
    assert (statuses["expect"], statuses["min-tensors"]) == ("warn", "fail")
    assert file["ok"] is False

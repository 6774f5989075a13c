"""Checkpoints read by their producer's own loader (issue #44): DCP directories (torch 2.13, FSDP,
DTensor, Megatron-core torch_dist) and DeepSpeed ZeRO saves, from the committed fixtures
(``fixtures/make_distributed.py``, ``fixtures/make_deepspeed.py``, made with real torch and
deepspeed). Their pickles name the producers' inert classes: ``safe`` for that loader, and the
allowlist applies to nothing else; anything beyond it keeps its verdict.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from ckptctl import open_checkpoint
from ckptctl.formats.pytorch._allowlist import WEIGHTS_ONLY_GLOBALS
from ckptctl.formats.pytorch._producers import DCP, DEEPSPEED, MEGATRON
from ckptctl.ops.verify import verify
from ckptctl.report.verify import FileVerdict
from ckptctl.safety import Verdict
from tests.conftest import VALID
from tests.formats.test_pytorch_reader import glob, lit, pkl, write_zip

DIST = VALID / "distributed"
DEEPSPEED_DIR = VALID / "deepspeed"
DCP_CASES = sorted(p.name for p in DIST.iterdir() if (p / ".metadata").is_file())
ZERO_CASES = sorted(p.name for p in DEEPSPEED_DIR.iterdir() if (p / "latest").is_file())
CASES = [DIST / c for c in DCP_CASES] + [DEEPSPEED_DIR / c for c in ZERO_CASES]


def _pickle_finding(report: Any) -> Any:
    return next(f for f in report["files"][0]["findings"] if f["check"] == "safe-pickle")


def test_every_fixture_directory_is_covered() -> None:
    assert len(DCP_CASES) >= 11
    assert "megatron_torch_dist" in DCP_CASES
    assert {"zero1_bf16_2rank", "zero2_fp32_1rank", "zero3_bf16_2rank"} <= set(ZERO_CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_a_healthy_training_checkpoint_passes_verify_by_default(case: Path, run_cli) -> None:
    """verify with no options: exit 0, the verdict names the producer's loader."""
    result = run_cli("verify", case)
    assert result.code == 0, result.stdout
    report = json.loads(run_cli("verify", "--json", case).stdout)
    finding = _pickle_finding(report)
    assert finding["status"] == "ok"
    assert finding["details"]["verdict"] == "safe"
    assert "loader" in finding["message"]
    assert report["files"][0]["verdict"] == "safe"
    for item in report["files"][0]["findings"]:  # advice fits a directory
        assert ".metadata" not in str(item["hint"])
        assert "torch.save" not in str(item["hint"])


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_every_global_beyond_torchs_allowlist_is_the_producers(case: Path) -> None:
    """What the real producers wrote is inside their lists, each entry saying its source; the
    DCP or DeepSpeed classes are not on torch's weights-only allowlist (else no entry)."""
    with open_checkpoint(case) as ckpt:
        assert ckpt.check_rest is None or ckpt.check_rest() is not None
        safety = ckpt.check_rest() if ckpt.check_rest is not None else ckpt.safety
    assert safety is not None
    assert safety.producer is not None
    classes = safety.producer.classes
    for use in safety.globals:
        assert use.name in WEIGHTS_ONLY_GLOBALS or use.name in classes, use.name
        if use.name in classes:
            assert use.verdict is Verdict.SAFE
            assert use.reason is not None
            assert ".py" in use.reason  # the source file it comes from
    assert safety.produced()
    for producer in (DCP, DEEPSPEED, MEGATRON):
        assert not set(producer.classes) & WEIGHTS_ONLY_GLOBALS


def test_megatron_directory_is_judged_as_megatrons() -> None:
    with open_checkpoint(DIST / "megatron_torch_dist") as ckpt:
        assert ckpt.safety is not None
        assert ckpt.safety.producer is MEGATRON
    with open_checkpoint(DIST / "fsdp2") as ckpt:
        assert ckpt.safety is not None
        assert ckpt.safety.producer is DCP


def test_ls_and_header_name_the_loader(run_cli) -> None:
    listed = run_cli("ls", DEEPSPEED_DIR / "zero2_bf16_2rank")
    assert listed.code == 0
    assert "safe for DeepSpeed's loader" in listed.stdout
    # and torch's own weights-only loader still refuses the optimizer files: the note says so
    assert "torch.load(weights_only=True), the default since torch 2.6, refuses" in listed.stdout


@pytest.mark.parametrize(
    "case", [DIST / "dcp_single", DIST / "fsdp1", DEEPSPEED_DIR / "zero3_bf16_2rank"],
    ids=lambda p: p.name,
)  # fmt: skip
def test_convert_of_a_healthy_directory_warns_of_no_trust(case: Path, run_cli, tmp_path) -> None:
    result = run_cli("convert", case, tmp_path / "out.safetensors")
    assert result.code == 0, result.stderr
    assert "needs-trust" not in result.stderr
    assert "source pickle" not in result.stderr


def test_nested_dcp_passes_and_points_at_its_parts(run_cli) -> None:
    """{model, optim}: no flat reader opens a DCP directory, so nesting does not fail it; the
    hint's convert names the directory and the key of the weights."""
    case = DIST / "fsdp1"
    report = json.loads(run_cli("verify", "--json", case).stdout)
    flat = next(f for f in report["files"][0]["findings"] if f["check"] == "flat-reader")
    assert flat["status"] == "ok"
    assert flat["details"]["state_key"] == "model"
    assert f"ckptctl convert {case} " in flat["hint"]
    assert "--state-key model" in flat["hint"]
    assert run_cli("verify", "--state-key", "model", case).code == 0


# --- the allowlists apply to the producers' files only ------------------------------------------


def _dcp_in_a_pt(path: Path) -> Path:
    """A torch.save zip whose data.pkl holds a DCP Metadata instance and a DeepSpeed enum."""
    body = (
        b"("
        + glob("torch.distributed.checkpoint.metadata", "Metadata")
        + b")\x81"
        + glob("deepspeed.runtime.zero.config", "ZeroStageEnum")
        + lit((2,))
        + b"R"
        + b"t"
    )
    return write_zip(path, pkl(body), {})


def test_a_plain_pt_naming_producer_classes_keeps_torchs_verdict(tmp_path: Path, run_cli) -> None:
    """A .pt is read by torch.load(weights_only=True): the producers' lists do not apply."""
    path = _dcp_in_a_pt(tmp_path / "plain.pt")
    with open_checkpoint(path) as ckpt:
        assert ckpt.safety is not None
        assert ckpt.safety.producer is None
        assert ckpt.safety.verdict is Verdict.NEEDS_TRUST
    result = run_cli("verify", path)
    assert result.code == 1
    assert "torch.distributed.checkpoint.metadata.Metadata" in result.stdout


def test_a_deepspeed_rank_file_alone_keeps_torchs_verdict(run_cli) -> None:
    optim = next((DEEPSPEED_DIR / "zero2_fp32_1rank" / "global_step2").glob("*optim_states.pt"))
    result = run_cli("verify", optim)
    assert result.code == 1
    assert "deepspeed.runtime.zero.config.ZeroStageEnum" in result.stdout


# --- hostile directories ------------------------------------------------------------------------


def _copy(case: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(DIST / case, tmp_path / case))


def test_dcp_metadata_calling_os_system_stays_unsafe(tmp_path: Path, run_cli, monkeypatch) -> None:
    import os

    ran: list[object] = []
    monkeypatch.setattr(os, "system", lambda *a: ran.append(a))
    case = _copy("dcp_single", tmp_path)
    body = (
        glob("torch.distributed.checkpoint.metadata", "Metadata")
        + glob("os", "system")
        + lit(("true",))
        + b"R\x86"
    )
    (case / ".metadata").write_bytes(pkl(body))
    report = verify(case, trust=True)
    assert not report.ok
    assert report.files[0].verdict is FileVerdict.UNSAFE
    assert run_cli("verify", "--trust", case).code == 1
    assert ran == []


def _with_foreign_class(tmp_path: Path) -> Path:
    """dcp_single whose StorageMeta.checkpoint_id is a ``mymodel.Optimizer`` instead of a
    ``pathlib.PosixPath`` (same lengths: the frames still fit)."""
    case = _copy("dcp_single", tmp_path)
    raw = (case / ".metadata").read_bytes()
    assert raw.count(b"\x8c\x07pathlib") == 1
    assert raw.count(b"\x8c\x09PosixPath") == 1
    raw = raw.replace(b"\x8c\x07pathlib", b"\x8c\x07mymodel")
    (case / ".metadata").write_bytes(raw.replace(b"\x8c\x09PosixPath", b"\x8c\x09Optimizer"))
    return case


def test_dcp_metadata_naming_a_foreign_class_needs_trust(tmp_path: Path, run_cli) -> None:
    case = _with_foreign_class(tmp_path)
    result = run_cli("verify", case)
    assert result.code == 1
    assert "mymodel.Optimizer" in result.stdout
    report = json.loads(run_cli("verify", "--json", case).stdout)
    finding = _pickle_finding(report)
    assert finding["details"]["verdict"] == "needs-trust"
    assert "torch.save" not in finding["hint"]  # a directory is not re-saved with torch.save
    assert "--allow-global mymodel.Optimizer" in finding["hint"]
    assert run_cli("verify", "--trust", case).code == 0
    assert run_cli("verify", "--allow-global", "mymodel.Optimizer", case).code == 0


def test_convert_of_an_untrusted_directory_still_warns(tmp_path: Path, run_cli) -> None:
    case = _with_foreign_class(tmp_path)
    result = run_cli("convert", case, tmp_path / "out.safetensors")
    assert result.code == 0
    assert "needs-trust" in result.stderr


def test_security_md_lists_every_producer_class() -> None:
    """The per-producer allowlists are documented entry by entry (the table spells a class's
    module once, then its siblings by name)."""
    text = (Path(__file__).resolve().parents[2] / "SECURITY.md").read_text()
    section = text.split("## Per-producer allowlists", 1)[1].split("\n## ", 1)[0]
    for producer in (DCP, DEEPSPEED, MEGATRON):
        for name in producer.classes:
            module, last = name.rsplit(".", 1)
            assert re.search(rf"[`.]{re.escape(last)}`", section), name
            assert f"`{module}." in section, name

"""``verify DIR`` (issue 28): recursion, files that are no checkpoint skipped and counted, sharded
directories kept as one checkpoint, files by verdict, and ``-j N`` giving the same report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ckptctl.ops.verify import FileVerdict, verify
from ckptctl.report.json import to_json
from tests.conftest import HOSTILE, VALID

PT = VALID / "pytorch"
SHARDED = VALID / "safetensors" / "sharded"
NEEDS_TRUST = VALID / "trust" / "argparse_namespace.pt"
EVIL_NPY = HOSTILE / "pickle_elsewhere" / "object_array.npy"
UNSAFE_PT = HOSTILE / "pickle" / "subprocess.Popen__zip.pt"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """models/: checkpoints at two levels, non-checkpoints, a hidden directory, a sharded one."""
    top = tmp_path / "models"
    (top / "sub" / "deeper").mkdir(parents=True)
    (top / ".git").mkdir()
    shutil.copy(PT / "min_zip.pt", top / "b.pt")
    shutil.copy(VALID / "safetensors" / "tiny.safetensors", top / "a.safetensors")
    (top / "README.md").write_text("# models\n")
    (top / "notes.txt").write_text("hello.\n")
    shutil.copy(NEEDS_TRUST, top / "sub" / "args.pt")
    shutil.copy(EVIL_NPY, top / "sub" / "deeper" / "evil.npy")
    shutil.copy(UNSAFE_PT, top / "sub" / "deeper" / "popen.pt")
    shutil.copy(PT / "min_zip.pt", top / ".git" / "hidden.pt")
    shutil.copytree(SHARDED, top / "sub" / "sharded")
    return top


def test_a_directory_is_walked_in_sorted_order(tree: Path) -> None:
    report = verify(tree, jobs=1)
    index = next(p.name for p in SHARDED.iterdir() if p.name.endswith(".index.json"))
    assert [Path(f.path).relative_to(tree).as_posix() for f in report.files] == [
        "a.safetensors",
        "b.pt",
        "sub/args.pt",
        "sub/deeper/evil.npy",
        "sub/deeper/popen.pt",
        f"sub/sharded/{index}",  # its shards are checked through it, not again one by one
    ]
    assert report.skipped == 2 + sum(  # README.md, notes.txt, and the sharded dir's non-shards
        1 for p in SHARDED.iterdir() if not p.name.endswith((".safetensors", ".index.json"))
    )
    verdicts = {Path(f.path).name: f.verdict for f in report.files}
    assert verdicts["a.safetensors"] is FileVerdict.SAFE
    assert verdicts["args.pt"] is FileVerdict.NEEDS_TRUST
    assert verdicts["evil.npy"] is FileVerdict.UNSAFE
    assert verdicts["popen.pt"] is FileVerdict.UNSAFE
    assert report.verdicts() == {
        FileVerdict.SAFE: 3,
        FileVerdict.NEEDS_TRUST: 1,
        FileVerdict.UNSAFE: 2,
        FileVerdict.UNREADABLE: 0,
    }
    assert not report.ok


def test_a_sharded_directory_given_is_still_one_checkpoint() -> None:
    report = verify(SHARDED)
    assert [f.path for f in report.files] == [str(SHARDED)]
    assert report.files[0].tensors == 4
    checks = ["readable", "sharded-index", "flat-reader"]  # the index checked as when named
    assert [f.check for f in report.files[0].findings] == checks
    assert report.skipped == 0


def test_a_directory_with_no_checkpoint_fails(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello.\n")
    report = verify(tmp_path)
    (result,) = report.files
    assert result.path == str(tmp_path)
    assert not result.ok
    assert result.verdict is FileVerdict.UNREADABLE
    assert "no checkpoint" in str(result.findings[0].message)
    assert report.skipped == 1


def test_a_file_named_on_the_command_line_is_never_skipped(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello.\n")
    report = verify(path)
    assert report.skipped == 0
    assert report.files[0].verdict is FileVerdict.UNREADABLE
    assert not report.ok


def test_jobs_give_the_same_report_in_the_same_order(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import concurrent.futures

    pools: list[int] = []
    real = concurrent.futures.ProcessPoolExecutor

    def spy(workers: int, **kwargs: Any) -> concurrent.futures.ProcessPoolExecutor:
        pools.append(workers)
        return real(workers, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", spy)
    one = to_json(verify([tree, PT / "nested.pt"], jobs=1))
    assert pools == []
    two = to_json(verify([tree, PT / "nested.pt"], jobs=2))
    assert pools == [2]  # the files really were checked in two worker processes
    four = to_json(verify([tree, PT / "nested.pt"], jobs=4, no_nan=True))
    assert one == two
    assert [f["path"] for f in four["files"]] == [f["path"] for f in one["files"]]


def test_the_cli_prints_files_by_verdict_and_the_skipped(run_cli, tree: Path) -> None:
    result = run_cli("verify", tree, "-q", "-j", "2")
    assert result.code == 1
    lines = result.stdout.splitlines()
    assert (
        "by verdict: 3 safe, 1 needs-trust, 2 unsafe, 0 unreadable; "
        f"{verify(tree).skipped} files skipped (not checkpoints, no pickle in them)"
    ) in lines
    assert lines[-2] == "6 files: 3 passed, 3 failed"
    data = json.loads(run_cli("verify", tree, "--json").stdout)
    assert data["summary"]["verdicts"] == {
        "safe": 3,
        "needs-trust": 1,
        "unsafe": 2,
        "unreadable": 0,
    }
    assert [f["verdict"] for f in data["files"]] == [
        "safe",
        "safe",
        "needs-trust",
        "unsafe",
        "unsafe",
        "safe",
    ]

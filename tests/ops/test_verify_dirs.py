"""``verify DIR`` (issue 28): recursion, files that are no checkpoint skipped and counted, sharded
directories kept as one checkpoint, files by verdict, and ``-j N`` giving the same report; files
named as checkpoints always checked, git-lfs pointers failed, skipped files listed (issue 44)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ckptctl.errors import SelectionError
from ckptctl.ops.verify import FileVerdict, verify
from ckptctl.report.json import to_json
from tests.conftest import HOSTILE, LFS_POINTER, VALID, write_unfetched_clone

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
    (verdicts,) = [line for line in lines if line.startswith("by verdict:")]
    assert verdicts.startswith("by verdict: 3 safe, 1 needs-trust, 2 unsafe, 0 unreadable; ")
    assert f"; {verify(tree).skipped} files skipped (" in verdicts
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


# --- files named as checkpoints, git-lfs pointers, the skipped listed (issue 44) --------------

CLONE_FAILING = ["empty.safetensors", "model.safetensors", "weights.pt"]
CLONE_SKIPPED = ["README.md", "config.json", "tokenizer.json"]


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    return write_unfetched_clone(tmp_path / "models")


def test_a_clone_without_lfs_pull_fails(clone: Path) -> None:
    report = verify(clone)
    assert not report.ok
    assert [Path(f.path).name for f in report.files] == CLONE_FAILING
    assert all(not f.ok for f in report.files)
    assert [Path(p).name for p in report.skipped_paths] == CLONE_SKIPPED
    assert report.skipped == 3
    failed = {Path(f.path).name: [x.check for x in f.failures] for f in report.files}
    assert failed == {
        "empty.safetensors": ["readable"],
        "model.safetensors": ["lfs-pointer"],
        "weights.pt": ["readable"],
    }
    assert report.verdicts()[FileVerdict.UNREADABLE] == 3


def test_a_walked_file_fails_as_it_does_when_named(clone: Path) -> None:
    walked = {Path(f.path).name: f for f in verify(clone).files}
    for name in CLONE_FAILING:
        (named,) = verify(clone / name).files
        assert walked[name].findings == named.findings
        assert walked[name].verdict is named.verdict


def test_the_pointer_finding_gives_oid_size_and_the_fix(clone: Path) -> None:
    (result,) = verify(clone / "model.safetensors").files
    (finding,) = result.findings
    assert finding.check == "lfs-pointer"
    tiny = VALID / "safetensors" / "tiny.safetensors"
    oid = "sha256:" + hashlib.sha256(tiny.read_bytes()).hexdigest()
    assert finding.details["oid"] == oid
    assert finding.details["size"] == tiny.stat().st_size
    assert oid in str(finding.message)
    assert "git lfs pull" in str(finding.hint)
    assert result.verdict is FileVerdict.UNREADABLE


@pytest.mark.parametrize(
    "name",
    [
        "w.safetensors", "w.pt", "w.pth", "w.bin", "w.ckpt", "w.bpk", "w.mpk", "w.mpk.gz",
        "w.gguf", "w.onnx", "w.npz", "w.npy", "__0_0.distcp", "w.pkl", "W.SAFETENSORS",
        "model.safetensors.index.json",
    ],
)  # fmt: skip
def test_an_empty_file_named_as_a_checkpoint_is_never_skipped(tmp_path: Path, name: str) -> None:
    (tmp_path / "config.json").write_text("{}\n")
    (tmp_path / "sub").mkdir()  # below the top, where an index is walked, not opened as a model
    (tmp_path / "sub" / name).write_bytes(b"")
    report = verify(tmp_path)
    assert [Path(f.path).name for f in report.files] == [name]
    assert not report.ok
    assert [Path(p).name for p in report.skipped_paths] == ["config.json"]


@pytest.mark.parametrize(
    "name", ["tokenizer.model", "vocab.txt", "generation_config.json", "notes", "w.pt.txt"]
)
def test_other_names_no_reader_accepts_are_skipped(tmp_path: Path, name: str) -> None:
    shutil.copy(VALID / "safetensors" / "tiny.safetensors", tmp_path / "a.safetensors")
    (tmp_path / name).write_bytes(b"\x00\x01 not a checkpoint")
    report = verify(tmp_path)
    assert report.ok
    assert report.skipped_paths == (str(tmp_path / name),)


def test_a_pointer_under_another_name_is_skipped(tmp_path: Path) -> None:
    """A tokenizer or an image left as a pointer is no checkpoint ckptctl would read either."""
    shutil.copy(VALID / "safetensors" / "tiny.safetensors", tmp_path / "a.safetensors")
    shutil.copy(LFS_POINTER, tmp_path / "tokenizer.model")
    report = verify(tmp_path)
    assert report.ok
    assert report.skipped_paths == (str(tmp_path / "tokenizer.model"),)


def test_lfs_pointer_is_always_reported(clone: Path) -> None:
    report = verify(clone / "model.safetensors", checks=["safe-pickle"])
    assert [f.check for f in report.files[0].findings] == ["lfs-pointer"]
    assert not report.ok
    with pytest.raises(SelectionError, match="lfs-pointer"):
        verify(clone, skip=["lfs-pointer"])


def test_the_cli_lists_the_skipped(run_cli, clone: Path) -> None:
    result = run_cli("verify", clone)
    assert result.code == 1
    assert "3 files skipped" in result.stdout
    assert "skipped: " not in result.stdout
    assert "✗ lfs-pointer" in result.stdout
    verbose = run_cli("verify", clone, "-v")
    assert verbose.code == 1
    listed = [line for line in verbose.stdout.splitlines() if line.startswith("skipped: ")]
    assert listed == [f"skipped: {clone / name}" for name in CLONE_SKIPPED]
    quiet = run_cli("verify", clone, "--verbose", "-q")
    assert [line for line in quiet.stdout.splitlines() if line.startswith("skipped: ")] == listed


def test_the_json_lists_the_skipped_beside_the_count(run_cli, clone: Path) -> None:
    result = run_cli("verify", clone, "--json")
    assert result.code == 1
    data = json.loads(result.stdout)
    summary = data["summary"]
    assert list(summary)[-2:] == ["skipped", "skipped_paths"]
    assert summary["skipped"] == 3
    assert summary["skipped_paths"] == [str(clone / name) for name in CLONE_SKIPPED]
    pointer = next(f for f in data["files"] if f["path"].endswith("model.safetensors"))
    (finding,) = pointer["findings"]
    assert finding["check"] == "lfs-pointer"
    assert finding["status"] == "fail"
    assert finding["details"]["size"] == 352
    assert finding["details"]["oid"].startswith("sha256:")

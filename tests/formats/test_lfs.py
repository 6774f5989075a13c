"""git-lfs pointers (issue 44): every command that opens an input says it is a pointer (exit 3,
with the oid, the size and ``git lfs pull``), for the file itself or a shard its index names.

Ground truth is git-lfs 3.3.0: ``fixtures/hostile/lfs/model.safetensors`` is what ``git lfs
pointer --file`` writes for ``tiny.safetensors``, and ``manifest.json`` records what ``git lfs
pointer --check`` says of each variant (``make_lfs.py``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from ckptctl import LfsPointerError, UnknownFormatError, open_checkpoint, read_layout
from ckptctl.ops.verify import verify
from tests.conftest import HOSTILE, REPO, VALID

LFS = HOSTILE / "lfs"
POINTER = LFS / "model.safetensors"
MANIFEST = json.loads((LFS / "manifest.json").read_text())
TINY = VALID / "safetensors" / "tiny.safetensors"
SHARDED = VALID / "safetensors" / "sharded"


def test_the_pointer_git_lfs_wrote_names_the_real_file():
    assert MANIFEST["pointer"]["of"] == TINY.relative_to(REPO).as_posix()
    with pytest.raises(LfsPointerError, match="git-lfs pointer") as info:
        open_checkpoint(POINTER)
    assert info.value.oid == "sha256:" + hashlib.sha256(TINY.read_bytes()).hexdigest()
    assert info.value.size == TINY.stat().st_size
    assert info.value.path == str(POINTER)
    assert "git lfs pull" in str(info.value.hint)
    assert info.value.exit_code == 3


@pytest.mark.parametrize("name", sorted(MANIFEST["variants"]))
def test_a_pointer_is_what_git_lfs_reads_as_one(name: str):
    git_lfs_reads_it = MANIFEST["variants"][name] in (0, 2)  # 2: a pointer, not canonical
    with pytest.raises(UnknownFormatError) as info:
        open_checkpoint(LFS / "variants" / name)
    assert isinstance(info.value, LfsPointerError) is git_lfs_reads_it


def test_every_kind_of_variant_is_there():
    verdicts = list(MANIFEST["variants"].values())
    assert {0, 1, 2} <= set(verdicts)  # canonical pointers, lenient ones and near misses


@pytest.mark.parametrize(
    "command",
    [
        ("ls", "{p}"),
        ("header", "{p}"),
        ("hash", "{p}"),
        ("convert", "{p}", "{out}"),
        ("diff", "{p}", str(TINY)),
        ("diff", str(TINY), "{p}"),
    ],
    ids=lambda c: "-".join(c[:1] + tuple("P" if a == "{p}" else "" for a in c[1:])),
)
def test_every_command_says_pointer_and_exits_3(run_cli, tmp_path, command):
    out = tmp_path / "out.safetensors"
    args = [a.format(p=POINTER, out=out) for a in command]
    result = run_cli(*args)
    assert result.code == 3
    assert result.stderr.startswith(f"ckptctl: error: {POINTER}: ")
    assert "git-lfs pointer" in result.stderr
    assert "git lfs pull" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_read_layout_says_pointer_too():
    with pytest.raises(LfsPointerError, match="git-lfs pointer"):
        read_layout(POINTER)


@pytest.fixture
def unfetched(tmp_path: Path) -> Path:
    """The 2-shard model as a clone without `git lfs pull` leaves it: the index (plain JSON,
    in git) and a pointer where the second shard should be."""
    top = tmp_path / "sharded"
    shutil.copytree(SHARDED, top)
    (top / "model-00002-of-00002.safetensors").write_bytes(POINTER.read_bytes())
    return top


def test_a_pointer_shard_is_named(run_cli, unfetched: Path):
    result = run_cli("ls", unfetched)
    assert result.code == 3
    assert "model-00002-of-00002.safetensors" in result.stderr
    assert "git-lfs pointer" in result.stderr
    assert "git lfs pull" in result.stderr


def test_verify_fails_a_pointer_shard_as_lfs_pointer(unfetched: Path):
    (result,) = verify(unfetched).files
    assert not result.ok
    pointer = next(f for f in result.findings if f.check == "lfs-pointer")
    assert "model-00002-of-00002.safetensors" in str(pointer.message)
    assert pointer.details["size"] == TINY.stat().st_size
    assert "readable" not in [f.check for f in result.findings]


@pytest.mark.parametrize(
    ("save", "part"),
    [
        (VALID / "distributed" / "fsdp2", "__0_0.distcp"),
        (VALID / "deepspeed" / "zero2_fp32_2rank", "global_step2/mp_rank_00_model_states.pt"),
        (
            VALID / "deepspeed" / "zero2_fp32_2rank",
            "global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt",
        ),
    ],
    ids=["dcp-rank-file", "deepspeed-model-states", "deepspeed-optim-states"],
)
def test_a_pointer_part_of_a_checkpoint_directory_is_named(run_cli, tmp_path, save, part):
    top = tmp_path / "save"
    shutil.copytree(save, top)
    (top / part).write_bytes(POINTER.read_bytes())
    result = run_cli("ls", top)
    assert result.code == 3
    assert Path(part).name in result.stderr
    assert "git-lfs pointer" in result.stderr
    assert "git lfs pull" in result.stderr
    (checked,) = verify(top).files
    failed = [f for f in checked.findings if f.status.value == "fail"]
    assert [f.check for f in failed] == ["lfs-pointer"]
    assert Path(part).name in str(failed[0].message)

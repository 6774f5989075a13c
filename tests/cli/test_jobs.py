"""``-j N``: convert, verify and diff give the same bytes and reports for any N (issue 15)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ckptctl import DType, save_checkpoint
from ckptctl.formats.sharded import write_sharded
from ckptctl.model import ComputedData, TensorEntry
from tests.strategies import array_entry, make_entry


def _source(tmp_path):
    rng = np.random.default_rng(0)
    entries = [
        array_entry(f"layers.{i}.weight", rng.standard_normal((16, 8 + i)).astype("<f4"))
        for i in range(12)
    ]
    src = tmp_path / "in.safetensors"
    save_checkpoint(src, entries, {"note": "jobs"}, force=True)
    return src


def _files(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("adapter", [(), ("-a", "cast:bf16")])
def test_jobs_write_the_same_bytes_as_one_job(run_cli, tmp_path, adapter):
    src = _source(tmp_path)
    outputs = {}
    for jobs in ("1", "3", "8"):
        out = tmp_path / f"j{jobs}"
        out.mkdir()
        result = run_cli(
            "convert", src, out / "m.safetensors", "--max-shard-size", "1KB", "-j", jobs, *adapter
        )
        assert result.code == 0, result.stderr
        outputs[jobs] = _files(out)
    assert len(outputs["1"]) > 4  # several shards and the index
    assert outputs["3"] == outputs["1"]
    assert outputs["8"] == outputs["1"]


def test_jobs_must_be_positive(run_cli, tmp_path):
    result = run_cli("convert", _source(tmp_path), tmp_path / "m.safetensors", "-j", "0")
    assert result.code == 2


def test_parallel_failure_leaves_nothing_and_names_the_first_shard(tmp_path):
    def broken() -> bytes:
        raise OSError("disk on fire")

    good = [array_entry(f"t{i}", np.zeros(64, "<f4")) for i in range(6)]
    bad = TensorEntry("bad", DType.F32, (64,), 256, None, ComputedData(broken))
    entries = [*good[:2], bad, *good[2:], make_entry("late", DType.C128, (1,), bytes(16))]
    with pytest.raises(Exception, match="disk on fire"):
        write_sharded(tmp_path / "m.safetensors", entries, max_shard_bytes=300, jobs=4)
    assert list(tmp_path.iterdir()) == []


def _sharded_with_nan(run_cli, tmp_path):
    rng = np.random.default_rng(1)
    entries = []
    for i in range(10):
        values = rng.standard_normal(40).astype("<f4")
        if i in (3, 7):
            values[i] = np.nan if i == 3 else np.inf
        entries.append(array_entry(f"w{i}", values))
    src = tmp_path / "flat.safetensors"
    save_checkpoint(src, entries, {}, force=True)
    out = tmp_path / "sharded"
    out.mkdir()
    assert run_cli("convert", src, out / "m.safetensors", "--max-shard-size", "400B").code == 0
    return src, out / "m.safetensors.index.json"


def test_verify_no_nan_report_does_not_depend_on_jobs(run_cli, tmp_path):
    _, index = _sharded_with_nan(run_cli, tmp_path)
    results = [run_cli("verify", index, "--no-nan", "--json", "-j", j) for j in ("1", "4")]
    assert [r.code for r in results] == [1, 1]
    assert results[0].stdout == results[1].stdout
    assert "'w3' (1 NaN), 'w7' (1 Inf)" in results[0].stdout


def test_diff_report_does_not_depend_on_jobs(run_cli, tmp_path):
    src, index = _sharded_with_nan(run_cli, tmp_path)
    other = tmp_path / "other.safetensors"
    assert run_cli("convert", src, other, "-a", "cast:f16").code == 0
    results = [run_cli("diff", index, other, "--json", "-j", j) for j in ("1", "3")]
    assert [r.code for r in results] == [1, 1]
    assert results[0].stdout == results[1].stdout


#: Runs the CLI and prints, as it exits, how many threads the process has.
_THREADS_AT_EXIT = """
import atexit, os, sys
atexit.register(lambda: print("threads", len(os.listdir("/proc/self/task"))))
from ckptctl.cli import main
main(sys.argv[1:])
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_numpy_blas_runs_one_thread_unless_the_user_chose(tmp_path):
    """The CLI runs its own copy threads: OpenBLAS's thread per core only cost start-up time
    (issue 50). A user's OPENBLAS_NUM_THREADS still wins."""
    src = _source(tmp_path)
    base = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
    }

    def threads(**env: str) -> int:
        out = subprocess.run(
            [sys.executable, "-c", _THREADS_AT_EXIT, "ls", "--stats", str(src)],
            env={**base, **env},
            capture_output=True,
            text=True,
            check=True,
        )
        return int(out.stdout.rsplit("threads", 1)[1])

    assert threads(OPENBLAS_NUM_THREADS="2") == threads() + 1

"""``-j N``: convert, verify and diff give the same bytes and reports for any N (issue 15)."""

from __future__ import annotations

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

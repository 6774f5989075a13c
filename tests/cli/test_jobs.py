"""``convert -j N``: shards written in parallel are byte-identical to ``-j 1`` (issue 15)."""

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
    with pytest.raises(Exception, match="disk on fire|C128"):
        write_sharded(tmp_path / "m.safetensors", entries, max_shard_bytes=300, jobs=4)
    assert list(tmp_path.iterdir()) == []

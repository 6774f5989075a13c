"""``sharded-index``: an index against its shards, checked before the checkpoint is opened."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from ckptctl.ops.verify import Status
from tests.conftest import HOSTILE, VALID
from tests.ops.test_verify import finding, one
from tests.ops.verify.test_run import order

SHARDED = VALID / "safetensors" / "sharded"


@pytest.mark.parametrize("name", ["model.safetensors.index.json", "."], ids=["index", "directory"])
def test_consistent_index_findings_in_order(name):
    result = one(SHARDED / name)  # the directory stands for its index: the same checks run
    assert order(result) == [
        ("readable", "ok"),
        ("sharded-index", "ok"),
        ("flat-reader", "ok"),
    ]
    assert result.findings[1].details == {}


def test_index_with_missing_shard_reports_readable_first(tmp_path):
    shutil.copytree(SHARDED, tmp_path / "s")
    index = tmp_path / "s" / "model.safetensors.index.json"
    (index.parent / "model-00002-of-00002.safetensors").unlink()
    result = one(index)
    assert order(result) == [("readable", "fail"), ("sharded-index", "fail")]
    assert (result.format, result.kind, result.tensors) == ("safetensors-index", None, None)
    sharded = result.findings[1]
    (problem,) = sharded.details["problems"]
    assert "model-00002-of-00002.safetensors" in problem
    assert str(sharded.message) == f"1 problem: {problem}"
    assert "regenerate its index" in str(sharded.hint)


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
    assert "1 tensor in 1 shard" in str(result.findings[0].message)


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


@pytest.mark.parametrize(("unlisted", "more"), [(5, ""), (6, "; and 1 more")])
def test_index_problems_are_listed_up_to_the_limit(tmp_path, unlisted, more):
    result = one(_index_problems(tmp_path, unlisted))
    assert finding(result, "readable").status is Status.OK
    sharded = finding(result, "sharded-index")
    assert sharded.status is Status.FAIL
    problems = sharded.details["problems"]
    assert len(problems) == unlisted
    assert all(f"'t{i}'" in p for i, p in enumerate(problems, 1))
    assert str(sharded.message) == f"{unlisted} problems: " + "; ".join(problems[:5]) + more


def test_escaping_index_has_no_sharded_index_finding():
    result = one(HOSTILE / "safetensors" / "escape.safetensors.index.json")
    assert [f.check for f in result.findings] == ["readable"]

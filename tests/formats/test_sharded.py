"""Sharded Hugging Face checkpoints: ``*.safetensors.index.json`` plus shard files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import ckptctl.formats.sharded as shmod  # registers the index format until the registry does
from ckptctl import (
    CorruptCheckpointError,
    InputError,
    UnknownFormatError,
    UnsupportedError,
    open_checkpoint,
)
from ckptctl.model import Sharding
from ckptctl.sources import ByteSource
from tests.conftest import HOSTILE, VALID

SHARDED = VALID / "safetensors" / "sharded"
INDEX = SHARDED / "model.safetensors.index.json"
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"


def copy_model(tmp_path: Path) -> Path:
    """A writable copy of the 2-shard fixture; returns the index path."""
    for name in (SHARD1, SHARD2, INDEX.name):
        shutil.copy(SHARDED / name, tmp_path / name)
    return tmp_path / INDEX.name


def edit_index(index: Path, change: Any) -> None:
    data = json.loads(index.read_text())
    change(data)
    index.write_text(json.dumps(data))


def test_two_shards_open_as_one_checkpoint() -> None:
    expected = {**load_file(str(SHARDED / SHARD1)), **load_file(str(SHARDED / SHARD2))}
    with open_checkpoint(INDEX) as ckpt:
        assert ckpt.format == "safetensors"
        assert ckpt.path == str(INDEX)
        assert ckpt.sharding == Sharding(str(INDEX), (SHARD1, SHARD2), 104)
        assert ckpt.metadata == {"format": "pt"}
        assert ckpt.notes == ["sharded across 2 files listed in this index"]
        # shard order, then data-offset order inside each shard
        first = {e.name for e in ckpt.entries()[:2]}
        assert first == {"embed.weight", "layers.0.weight"}
        assert sorted(ckpt) == sorted(expected)
        for name, array in expected.items():
            np.testing.assert_array_equal(ckpt[name].load(), array)
            assert ckpt[name].dtype.numpy == array.dtype
    assert shmod.check_index(INDEX) == []


def test_close_closes_every_shard(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[str] = []
    original = ByteSource.close

    def spy(self: ByteSource) -> None:
        closed.append(Path(self.path).name)
        original(self)

    monkeypatch.setattr(ByteSource, "close", spy)
    with open_checkpoint(INDEX):
        pass
    assert sorted(closed) == sorted([INDEX.name, SHARD1, SHARD2])


def test_missing_shard(tmp_path: Path) -> None:
    index = copy_model(tmp_path)
    (tmp_path / SHARD2).unlink()
    with pytest.raises(CorruptCheckpointError, match=f"shard '{SHARD2}' .* cannot be opened"):
        open_checkpoint(index)
    problems = shmod.check_index(index)
    assert len(problems) == 1
    assert problems[0].startswith(f"shard '{SHARD2}' listed in the index cannot be opened")
    assert problems[0].endswith("no such file")


def test_tensor_listed_but_absent(tmp_path: Path) -> None:
    index = copy_model(tmp_path)
    edit_index(index, lambda d: d["weight_map"].update({"ghost.weight": SHARD1}))
    with pytest.raises(CorruptCheckpointError, match=r"'ghost\.weight' in shard .* no such tensor"):
        open_checkpoint(index)
    assert any("ghost.weight" in p for p in shmod.check_index(index))


def test_tensor_in_wrong_shard_names_where_it_is(tmp_path: Path) -> None:
    index = copy_model(tmp_path)
    edit_index(index, lambda d: d["weight_map"].update({"embed.weight": SHARD2}))
    with pytest.raises(CorruptCheckpointError, match=f"\\(it is in '{SHARD1}'\\)"):
        open_checkpoint(index)


def test_tensor_in_two_shards(tmp_path: Path) -> None:
    index = copy_model(tmp_path)
    tensors = load_file(str(tmp_path / SHARD2))
    tensors["embed.weight"] = np.zeros((2, 4), "<f4")
    save_file(tensors, str(tmp_path / SHARD2))
    with pytest.raises(CorruptCheckpointError, match=r"'embed\.weight' is in both shard"):
        open_checkpoint(index)
    assert any("in both shard" in p for p in shmod.check_index(index))


def test_unindexed_tensor_and_wrong_total_are_soft(tmp_path: Path) -> None:
    index = copy_model(tmp_path)

    def change(data: dict[str, Any]) -> None:
        del data["weight_map"]["lm_head.bias"]
        data["metadata"]["total_size"] = 100

    edit_index(index, change)
    with open_checkpoint(index) as ckpt:
        assert "lm_head.bias" in ckpt  # transformers loads every tensor of every shard
        assert len(ckpt.notes) == 3  # "sharded across 2 files" and the two problems
    problems = shmod.check_index(index)
    assert problems == [
        f"tensor 'lm_head.bias' in shard '{SHARD2}' is not listed in the index",
        "the index's metadata.total_size is 100 but the tensors hold 104 bytes",
    ]


def test_total_size_of_wrong_type(tmp_path: Path) -> None:
    index = copy_model(tmp_path)
    edit_index(index, lambda d: d["metadata"].update({"total_size": "104"}))
    assert shmod.check_index(index) == [
        "the index's metadata.total_size is '104', not a byte count"
    ]


@pytest.mark.parametrize(
    ("weight_map", "pattern"),
    [
        ({"w": "/etc/passwd"}, r"absolute shard path '/etc/passwd'"),
        ({"w": "../model.safetensors"}, r"leaves the index's directory"),
        ({"w": "sub/../../x.safetensors"}, r"leaves the index's directory"),
        ({"w": 3}, r"shard 3, not a file name"),
        ({"w": ""}, r"shard '', not a file name"),
        ({"bad\x07name": SHARD1}, r"control character"),
        ([1, 2], r"no weight_map object"),
    ],
)
def test_bad_index_entries(tmp_path: Path, weight_map: object, pattern: str) -> None:
    index = copy_model(tmp_path)
    index.write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(CorruptCheckpointError, match=pattern):
        open_checkpoint(index)
    with pytest.raises(CorruptCheckpointError, match=pattern):
        shmod.check_index(index)


def test_committed_escape_fixture() -> None:
    path = HOSTILE / "safetensors" / "escape.safetensors.index.json"
    with pytest.raises(CorruptCheckpointError, match="leaves the index's directory") as info:
        open_checkpoint(path)
    assert info.value.path == str(path)


def test_duplicate_key_in_weight_map(tmp_path: Path) -> None:
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"weight_map": {"w": "a.safetensors", "w": "b.safetensors"}}')
    with pytest.raises(CorruptCheckpointError, match="has the key 'w' twice"):
        open_checkpoint(index)


def test_shard_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    index = copy_model(tmp_path)
    (tmp_path / SHARD2).write_bytes(b"GGUF\x03\x00\x00\x00 not a checkpoint format we read")
    with pytest.raises(UnsupportedError, match="neither safetensors nor a PyTorch") as info:
        open_checkpoint(index)
    assert info.value.path == str(tmp_path / SHARD2)
    (tmp_path / SHARD2).write_bytes(b"PK\x03\x04 a damaged zip")
    with pytest.raises(CorruptCheckpointError) as corrupt:
        open_checkpoint(index)
    assert corrupt.value.path == str(tmp_path / SHARD2)


def test_pytorch_bin_shards_open_as_one_checkpoint(tmp_path: Path) -> None:
    """Hugging Face's older layout: pytorch_model.bin.index.json over torch-zip shards."""
    import numpy as np

    from ckptctl import save_checkpoint
    from tests.strategies import array_entry

    a = array_entry("embed.weight", np.arange(8, dtype="<f4").reshape(2, 4))
    b = array_entry("lm_head.weight", np.ones((2, 4), dtype="<f4"))
    save_checkpoint(tmp_path / "pytorch_model-00001-of-00002.bin", [a])
    save_checkpoint(tmp_path / "pytorch_model-00002-of-00002.bin", [b])
    index = tmp_path / "pytorch_model.bin.index.json"
    index.write_text(
        json.dumps(
            {
                "metadata": {"total_size": 64},
                "weight_map": {
                    "embed.weight": "pytorch_model-00001-of-00002.bin",
                    "lm_head.weight": "pytorch_model-00002-of-00002.bin",
                },
            }
        )
    )
    with open_checkpoint(index) as ckpt:
        assert ckpt.format == "pytorch-zip"
        assert list(ckpt) == ["embed.weight", "lm_head.weight"]
        assert ckpt["embed.weight"].load().tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert shmod.check_index(index) == []


def test_corrupt_shard_names_the_shard(tmp_path: Path) -> None:
    index = copy_model(tmp_path)
    blob = (tmp_path / SHARD1).read_bytes()
    (tmp_path / SHARD1).write_bytes(blob[:-8])
    with pytest.raises(CorruptCheckpointError, match="ends at byte") as info:
        open_checkpoint(index)
    assert info.value.path == str(tmp_path / SHARD1)
    assert shmod.check_index(index)[0].startswith(f"shard '{SHARD1}': tensor")


def test_json_without_weight_map_is_not_claimed(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"architectures": ["LlamaForCausalLM"]}')
    with pytest.raises(UnknownFormatError, match="JSON file"):
        open_checkpoint(path)


def test_index_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = copy_model(tmp_path)
    monkeypatch.setattr(shmod, "MAX_INDEX_BYTES", 64)
    with pytest.raises(CorruptCheckpointError, match="more than the limit of 64"):
        open_checkpoint(index)
    other = tmp_path / "big.json"
    other.write_text('{"x": "' + "y" * 100 + '"}')
    with pytest.raises(UnknownFormatError):
        open_checkpoint(other)  # too big to parse while sniffing, and no weight_map in the head


def test_invalid_utf8_index(tmp_path: Path) -> None:
    index = tmp_path / "model.safetensors.index.json"
    index.write_bytes(b'{"weight_map": {"\xff": "a.safetensors"}}')
    with pytest.raises(InputError):
        open_checkpoint(index)
    with pytest.raises(CorruptCheckpointError, match="not valid UTF-8"):
        shmod.check_index(index)


def test_empty_weight_map_opens_empty(tmp_path: Path) -> None:
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"metadata": {}, "weight_map": {}}')
    with open_checkpoint(index) as ckpt:
        assert len(ckpt) == 0
        assert ckpt.sharding is not None
        assert ckpt.sharding.shards == ()

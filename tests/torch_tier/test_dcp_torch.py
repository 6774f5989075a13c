"""DCP directories against torch 2.13 itself: ``convert`` writes the tensors
``dcp_to_torch_save`` returns, byte for byte, a ``.pt`` output loads in torch with the same
tensors, and ``.metadata`` files torch wrote but edited to break the tiling are refused."""

from __future__ import annotations

import pickle
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest

from ckptctl import CorruptCheckpointError, open_checkpoint
from tests.conftest import FIXTURES, VALID, load_module

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

pytestmark = pytest.mark.torch

DIST = VALID / "distributed"
make = load_module(FIXTURES / "make_distributed.py")
#: The cases torch's own reader can load (not the safetensors variant).
CASES = sorted(p.name for p in DIST.iterdir() if p.is_dir() and p.name not in make.SAFETENSORS)


def consolidated(directory: Path) -> dict[str, Any]:
    """torch's own answer: ``dcp_to_torch_save``, loaded, flattened as ``ls`` names it."""
    tensors: dict[str, Any] = make.flatten(make.consolidated(directory))
    return tensors


def _bytes(t: Any) -> bytes:
    return bytes(make.tensor_bytes(t))


@pytest.mark.parametrize("case", CASES)
def test_convert_equals_dcp_to_torch_save_then_save_file(
    case: str, tmp_path: Path, run_cli
) -> None:
    """Every tensor's bytes as torch consolidates them, read back by the safetensors library;
    the file is the one ``save_file`` writes except for the order of the tensors (ckptctl keeps
    the checkpoint's order, the reference writer sorts by dtype then name)."""
    want = consolidated(DIST / case)
    reference = tmp_path / "torch.safetensors"
    safetensors_torch.save_file({k: v.contiguous() for k, v in want.items()}, reference)
    got = tmp_path / "ckptctl.safetensors"
    assert run_cli("convert", DIST / case, got).code == 0
    loaded = safetensors_torch.load_file(got)
    assert list(loaded) == list(want)
    for name, tensor in want.items():
        assert loaded[name].dtype == tensor.dtype
        assert loaded[name].shape == tensor.shape
        assert _bytes(loaded[name]) == _bytes(tensor), name
    # The same tensors, so the reference writer makes the same file of them.
    assert safetensors_torch.save(loaded) == reference.read_bytes()


@pytest.mark.parametrize("case", ["dcp_single", "fsdp1", "dtensor_shard1", "dtensor_2d"])
def test_pt_output_loads_in_torch_with_the_same_tensors(case: str, tmp_path: Path, run_cli) -> None:
    out = tmp_path / "full.pt"
    assert run_cli("convert", DIST / case, out).code == 0
    loaded = torch.load(out, weights_only=True)
    want = consolidated(DIST / case)
    assert list(loaded) == list(want)
    for name, tensor in want.items():
        assert loaded[name].dtype == tensor.dtype
        assert torch.equal(loaded[name], tensor), name


def _edit_metadata(directory: Path, change: Any) -> None:
    path = directory / ".metadata"
    with path.open("rb") as f:
        metadata = pickle.load(f)  # our own fixture, written by torch
    change(metadata)
    with path.open("wb") as f:
        pickle.dump(metadata, f)


def _copy(tmp_path: Path, case: str) -> Path:
    target = tmp_path / case
    shutil.copytree(DIST / case, target)
    return target


def test_overlapping_chunks_are_refused(tmp_path: Path) -> None:
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata

    case = _copy(tmp_path, "dtensor_shard0")

    def overlap(metadata: Any) -> None:
        chunks = metadata.state_dict_metadata["weight"].chunks
        chunks[1] = ChunkStorageMetadata(torch.Size([8, 0]), chunks[1].sizes)

    _edit_metadata(case, overlap)
    with pytest.raises(CorruptCheckpointError, match="tensor 'weight'"):
        open_checkpoint(case)


def test_a_gap_between_chunks_is_refused(tmp_path: Path) -> None:
    case = _copy(tmp_path, "dtensor_shard1")

    def gap(metadata: Any) -> None:
        metadata.state_dict_metadata["weight"].chunks.pop()

    _edit_metadata(case, gap)
    with pytest.raises(CorruptCheckpointError, match=r"cover 96 of its 192 elements"):
        open_checkpoint(case)


def test_torch_reads_what_the_fixtures_say() -> None:
    """The fixtures' truth is still what this torch returns."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in CASES:
            with open_checkpoint(DIST / case) as ckpt:
                assert list(ckpt) == list(consolidated(DIST / case))


class _Evil:
    """Pickles as a call of os.system (never called: nothing here unpickles it)."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        import os

        return (os.system, ("echo pwned",))


def test_a_hostile_value_is_unsafe_naming_its_rank_file(tmp_path: Path, run_cli) -> None:
    import torch.distributed.checkpoint as dcp

    from ckptctl import UnsafePickleError

    target = tmp_path / "evil"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"w": torch.ones(2), "evil": _Evil()}, checkpoint_id=str(target))
    with pytest.raises(UnsafePickleError, match=r"system") as caught:
        open_checkpoint(target)
    assert caught.value.path == str(target / "__0_0.distcp")
    result = run_cli("verify", "--trust", target)
    assert result.code == 1
    assert "unsafe" in result.stdout


def test_zstd_items_read_as_torch_reads_them(tmp_path: Path, run_cli) -> None:
    """A save with torch's ZStandard extension (zstandard decodes it for torch): the tensors
    ``dcp_to_torch_save`` returns, byte for byte; a version torch does not know is exit 4."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._extension import ZStandard

    pytest.importorskip("zstandard")
    target = tmp_path / "zstd"
    state = {"w": torch.randn(64, 33), "b": torch.arange(7, dtype=torch.bfloat16), "step": 3}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, storage_writer=dcp.FileSystemWriter(str(target),
                                                            _extensions=[ZStandard()]))  # fmt: skip
    want = consolidated(target)
    with open_checkpoint(target) as ckpt:
        assert list(ckpt) == list(want)
        for name, tensor in want.items():
            assert bytes(ckpt[name].data.read()) == _bytes(tensor), name
        assert ckpt.objects["step"] == 3

    def future(metadata: Any) -> None:
        for info in metadata.storage_data.values():
            info.transform_descriptors = ["stream.zstd/2"]

    _edit_metadata(target, future)
    result = run_cli("ls", target)
    assert result.code == 4
    assert "'stream.zstd/2', which neither torch 2.13 nor ckptctl knows" in result.stderr
    assert "distcp" in result.stderr


def _cannot_load(directory: Path) -> str:
    """What torch's ``dcp_to_torch_save`` raises for ``directory`` (it must raise)."""
    from torch.distributed.checkpoint.api import CheckpointException

    with pytest.raises(CheckpointException) as caught:  # a BaseException, not an Exception
        consolidated(directory)
    return str(caught.value)


def test_safetensors_variant_read_as_saved_where_torch_cannot(tmp_path: Path, run_cli) -> None:
    """A live save with ``serialization_format=SAFETENSORS``: ckptctl's tensors and values are
    the state saved, byte for byte; torch 2.13's FileSystemReader fails on the directory, and its
    Hugging Face reader finds no tensors in it (what the ``ls`` note says)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader
    from torch.distributed.checkpoint.filesystem import SerializationFormat

    target = tmp_path / "variant"
    torch.manual_seed(3)
    state = {
        "model": {"w": torch.randn(64, 33), "b": torch.arange(7, dtype=torch.bfloat16)},
        "ids": torch.arange(5, dtype=torch.int64),
        "step": 3,
        "cfg": {"lr": 0.5},
    }
    writer = dcp.FileSystemWriter(str(target), serialization_format=SerializationFormat.SAFETENSORS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, storage_writer=writer)
    want = make.flatten(state)
    with open_checkpoint(target) as ckpt:
        assert sorted(ckpt) == sorted(want)
        for name, tensor in want.items():
            assert ckpt[name].dtype.value == make.describe_tensor(name, tensor)["dtype"]
            assert bytes(ckpt[name].data.read()) == _bytes(tensor), name
        assert ckpt.objects["step"] == 3
        assert ckpt.objects["cfg"] == {"lr": 0.5}
        assert any("torch 2.13's DCP reader cannot load" in note for note in ckpt.notes)
    # torch's own readers, as the note says
    message = _cannot_load(target)
    assert "Weights only load failed" in message
    assert "Unsupported operand" in message
    assert HuggingFaceStorageReader(str(target)).read_metadata().state_dict_metadata == {}
    result = run_cli("verify", "--trust", target)
    assert result.code == 0, result.stdout
    assert "every structural check passed" in result.stdout


@pytest.mark.parametrize("case", sorted(make.SAFETENSORS))
def test_torch_still_cannot_load_the_safetensors_fixtures(case: str) -> None:
    """The committed variant fixtures are still unreadable to this torch (else their truth
    should come from dcp_to_torch_save, as the other cases' does)."""
    assert "Weights only load failed" in _cannot_load(DIST / case)


def test_safetensors_variant_of_values_only_accounts_for_its_empty_blob(tmp_path: Path) -> None:
    """torch writes a blob even for a rank file without tensors (after the values)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.filesystem import SerializationFormat

    from ckptctl.formats import read_layout

    target = tmp_path / "values"
    writer = dcp.FileSystemWriter(str(target), serialization_format=SerializationFormat.SAFETENSORS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"step": 3, "name": "x"}, storage_writer=writer)
    layout = read_layout(target)
    (rank_file,) = layout.header["files"]
    assert rank_file["safetensors_blob"]["tensors"] == 0
    assert rank_file["unaccounted_bytes"] == 0
    with open_checkpoint(target) as ckpt:
        assert ckpt.objects == {"step": 3, "name": "x"}


@pytest.mark.slow
@pytest.mark.bounded
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_convert_of_a_1_gib_checkpoint_stays_within_64_mib_plus_the_largest_tensor(
    tmp_path: Path,
) -> None:
    """``dcp.save`` of 1 GiB in one process (16 tensors of 64 MiB, 16 items in one rank file):
    the consolidated output holds torch's tensors and ckptctl's peak memory (its own VmHWM)
    stays within the bound (each item's parse leaves no rank-file page mapped)."""
    import torch.distributed.checkpoint as dcp

    from tests.conftest import REPO, run_measured

    state = {f"layers.{i}.weight": torch.full((4096, 4096), float(i)) for i in range(16)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no process group": a one-process save
        dcp.save(state, checkpoint_id=str(tmp_path / "ckpt"))
    out = tmp_path / "model.safetensors"
    run = run_measured(["convert", str(tmp_path / "ckpt"), str(out), "--no-fsync"], REPO)
    assert run.code == 0, run.output
    peak_mib = run.peak_rss / (1 << 20)
    assert peak_mib <= 64 + 64, f"peak RSS {peak_mib:.0f} MiB"
    with safetensors_torch.safe_open(str(out), framework="pt") as f:
        assert list(f.keys()) == sorted(state)
        for name in ("layers.0.weight", "layers.7.weight", "layers.15.weight"):
            assert torch.equal(f.get_tensor(name), state[name]), name

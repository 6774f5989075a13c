"""Issue 26 against torch: ckptctl's consolidation of real DeepSpeed ZeRO saves, loaded back
with torch, equals what ``get_fp32_state_dict_from_zero_checkpoint`` returned for them (saved
by ``fixtures/make_deepspeed.py`` as ``truth/<case>.pt``), and torch refuses the rank files with
its default ``weights_only=True``, as ckptctl's report says.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptctl.ops.convert import convert
from tests.conftest import VALID

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

pytestmark = pytest.mark.torch

DEEPSPEED = VALID / "deepspeed"
CASES = sorted(p.name for p in DEEPSPEED.iterdir() if p.name.startswith("zero"))


def _reference(case: str) -> dict[str, object]:
    ref: dict[str, object] = torch.load(DEEPSPEED / "truth" / f"{case}.pt", weights_only=True)
    return ref


@pytest.mark.parametrize("case", CASES)
def test_converted_safetensors_equal_zero_to_fp32(case: str, tmp_path: Path) -> None:
    out = tmp_path / "model.safetensors"
    convert(DEEPSPEED / case, out)
    ours = safetensors_torch.load_file(str(out))
    ref = _reference(case)
    dropped = json.loads((DEEPSPEED / "truth" / f"{case}.json").read_text())["dropped"]
    assert set(ours) == set(ref) | set(dropped)
    for name, tensor in ref.items():
        assert isinstance(tensor, torch.Tensor)
        assert ours[name].dtype == tensor.dtype, name
        assert torch.equal(ours[name], tensor.contiguous()), name


@pytest.mark.parametrize("case", ["zero1_bf16_2rank", "zero2_fp32_2rank", "zero3_bf16_2rank"])
def test_converted_pt_loads_weights_only_with_tied_storage(case: str, tmp_path: Path) -> None:
    out = tmp_path / "model.pt"
    convert(DEEPSPEED / case, out)
    ours = torch.load(out, weights_only=True)  # ckptctl's output needs no trust
    ref = _reference(case)
    assert set(ours) >= set(ref)
    for name, tensor in ref.items():
        assert torch.equal(ours[name], tensor), name
    # the tied alias is one storage, as zero_to_fp32's state dict has it
    assert ours["head.weight"].data_ptr() == ours["embed.weight"].data_ptr()
    assert ref["head.weight"].data_ptr() == ref["embed.weight"].data_ptr()  # type: ignore[attr-defined]  # a tensor


def _torch_refuses(path: Path) -> bool:
    """Whether torch.load(weights_only=True) refuses the file, for deepspeed's globals."""
    try:
        torch.load(path, weights_only=True)
    except Exception as exc:  # torch's UnpicklingError, told by its message
        if "weights_only" not in str(exc) or "deepspeed" not in str(exc):
            raise
        return True
    return False


@pytest.mark.parametrize("case", CASES)
def test_torch_refuses_exactly_the_files_the_note_names(case: str) -> None:
    """torch.load(weights_only=True) fails on the files whose globals ckptctl's verdict names
    (deepspeed's classes, safe only for DeepSpeed's loader: issue #44), and loads the others;
    the note counts the same files."""
    from ckptctl import open_checkpoint

    files = sorted((DEEPSPEED / case / "global_step2").glob("*.pt"))
    refused = [p.name for p in files if _torch_refuses(p)]
    assert refused  # every save has optimizer states naming ZeroStageEnum
    with open_checkpoint(DEEPSPEED / case) as ckpt:
        assert ckpt.safety is not None
        judged = {g.where.split(":")[0] for g in ckpt.safety.produced()}
        assert judged == set(refused)
        note = next(n for n in ckpt.notes if "weights_only=True" in n)
        if len(refused) == len(files):
            assert "refuses every rank file" in note
        else:
            assert f"refuses {len(refused)} of the {len(files)} rank files" in note


#: Runs ckptctl and writes its own peak RSS (VmHWM after exec): ``wait4``'s ``ru_maxrss`` would
#: count the pytest process (with torch and the test's tensors) it forked from.
@pytest.mark.slow
@pytest.mark.bounded
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_convert_of_a_1_gib_save_stays_within_64_mib_plus_the_largest_tensor(
    tmp_path: Path,
) -> None:
    """A ZeRO-2 save of 2 ranks laid out as deepspeed writes it (built with torch alone: the
    classes deepspeed pickles are not needed to exercise the layout), 1 GiB of fp32 partitions:
    the consolidated output is right and ckptctl's peak memory stays within the bound."""
    import collections

    from tests.conftest import REPO, run_measured

    shapes = collections.OrderedDict(
        [(f"layers.{i}.weight", torch.Size([4096, 4096])) for i in range(16)]
    )
    shapes["head.bias"] = torch.Size([3])  # 16 * 2**24 + 3 elements: padded to 2 * world
    total = sum(s.numel() for s in shapes.values())
    padded = -(-total // 4) * 4
    step = tmp_path / "ckpt" / "global_step7"
    step.mkdir(parents=True)
    (tmp_path / "ckpt" / "latest").write_text("global_step7")
    model: dict[str, object] = {"module": collections.OrderedDict(), "buffer_names": [],
             "param_shapes": [shapes],
             "frozen_param_shapes": None, "shared_params": {}, "frozen_param_fragments": None,
             "ds_version": "0.19.8"}  # fmt: skip
    torch.save(model, step / "mp_rank_00_model_states.pt")
    flat = torch.arange(padded, dtype=torch.float32).mul_(1e-3)
    half = padded // 2
    for rank in range(2):
        optim = {"optimizer_state_dict": {"zero_stage": 2, "partition_count": [2],
                 "single_partition_of_fp32_groups": [flat[rank * half : (rank + 1) * half].clone()],
                 "base_optimizer_state": {"state": {}, "param_groups": []}}}  # fmt: skip
        torch.save(optim, step / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    out = tmp_path / "model.safetensors"
    run = run_measured(["convert", str(tmp_path / "ckpt"), str(out)], REPO)
    assert run.code == 0, run.output
    peak_mib = run.peak_rss / (1 << 20)
    largest_mib = 4096 * 4096 * 4 / (1 << 20)
    assert peak_mib <= 64 + largest_mib, f"peak RSS {peak_mib:.0f} MiB"
    offset = 0
    with safetensors_torch.safe_open(str(out), framework="pt") as f:
        assert list(f.keys()) == sorted(shapes)
        for name, shape in shapes.items():
            want = flat.narrow(0, offset, shape.numel()).view(shape)
            assert torch.equal(f.get_tensor(name), want), name
            offset += shape.numel()

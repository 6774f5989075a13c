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
    (deepspeed's classes), and loads the others; the note counts the same files."""
    from ckptctl import open_checkpoint

    files = sorted((DEEPSPEED / case / "global_step2").glob("*.pt"))
    refused = [p.name for p in files if _torch_refuses(p)]
    assert refused  # every save has optimizer states naming ZeroStageEnum
    with open_checkpoint(DEEPSPEED / case) as ckpt:
        assert ckpt.safety is not None
        judged = {g.where.split(":")[0] for g in ckpt.safety.untrusted()}
        assert judged == set(refused)
        note = next(n for n in ckpt.notes if "weights_only=True" in n)
        if len(refused) == len(files):
            assert "refuses every rank file" in note
        else:
            assert f"refuses {len(refused)} of the {len(files)} rank files" in note

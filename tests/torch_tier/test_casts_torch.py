"""Every float cast of ``convert`` against torch 2.13's ``.to(dtype)`` (issue 50).

The inputs are written by safetensors' torch API and cover every F16 and BF16 code, 4 Mi F32
bit patterns and 1 Mi F64 values after the edge cases of ``fixtures/make_casts.py`` (ties, one
ulp either side, target subnormals, F16 overflow, infinities, NaN payloads quiet and
signalling, both signs). ``ckptctl convert -a cast:DTYPE`` writes them (a range at a time on
the copy threads) and safetensors reads the result back. Every number must match torch bit for
bit; a NaN must stay a NaN of its sign (torch's own NaN bits vary with the tensor's length,
see the generator). F64 to F16/BF16 is compared with torch through F32: ckptctl rounds twice,
as Burn does.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.adapters.test_cast_golden import assert_cast_like_torch
from tests.conftest import FIXTURES, load_module

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

pytestmark = pytest.mark.torch

MAKE = load_module(FIXTURES / "make_casts.py")
COUNT = {"F32": 4 << 20, "F16": 1 << 17, "BF16": 1 << 17, "F64": 1 << 20}
TARGETS = ("F64", "F32", "F16", "BF16")
TORCH = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def _numpy(tensor):
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16)
    return tensor.numpy()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """One safetensors file per source dtype, written by safetensors from torch tensors."""
    root = tmp_path_factory.mktemp("casts")
    files = {}
    for dtype, count in COUNT.items():
        tensors = MAKE.torch_casts(dtype, MAKE.values(dtype, count, seed=1))
        path = root / f"{dtype}.safetensors"
        safetensors_torch.save_file({"w": tensors["input"].reshape(-1, 1024)}, str(path))
        files[dtype] = (path, tensors)
    return files


@pytest.mark.parametrize(("source", "target"), [(s, t) for s in COUNT for t in TARGETS if s != t])
def test_convert_casts_like_torch(tmp_path, run_cli, inputs, source, target):
    from ckptctl.dtypes import DType

    path, tensors = inputs[source]
    out = tmp_path / "out.safetensors"
    result = run_cli("convert", path, out, "-a", f"cast:{target.lower()}", "-q")
    assert result.code == 0, result.stderr
    got = safetensors_torch.load_file(str(out))["w"]
    assert got.dtype == TORCH[target]
    expected = tensors[f"to_{target.lower()}"]
    raw = _numpy(tensors["input"])
    assert_cast_like_torch(
        raw, DType(source), _numpy(got).reshape(-1), DType(target), _numpy(expected)
    )


@pytest.mark.parametrize("target", ["BF16", "F16"])
def test_transposed_and_cast_like_torch(tmp_path, run_cli, inputs, target):
    """pytorch-to-burn then a cast: torch's ``.t().contiguous().to(dtype)``."""
    from ckptctl.dtypes import DType

    source = inputs["F32"][1]["input"].reshape(-1, 1024)
    path = tmp_path / "in.safetensors"
    safetensors_torch.save_file({"fc.weight": source}, str(path))
    out = tmp_path / "out.safetensors"
    args = ["--module-type", "fc=Linear", "-a", "pytorch-to-burn", "-a", f"cast:{target.lower()}"]
    result = run_cli("convert", path, out, *args, "-q")
    assert result.code == 0, result.stderr
    got = safetensors_torch.load_file(str(out))["fc.weight"]
    expected = source.t().contiguous().to(TORCH[target])
    assert got.shape == expected.shape == (1024, source.shape[0])
    assert_cast_like_torch(
        _numpy(source.t().contiguous()).reshape(-1),
        DType.F32,
        _numpy(got).reshape(-1),
        DType(target),
        _numpy(expected).reshape(-1),
    )

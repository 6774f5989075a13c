"""ONNX models as torch's exporter writes them (issue #46): ``torch.onnx.export`` of small models.

torch 2.13's default exporter (``dynamo=True``) needs onnxscript; the TorchScript-based one
(``dynamo=False``) needs nothing beyond torch, and is what most exported models on the Hub were
made with. Ground truth: the model's own ``state_dict`` for the initializers the exporter keeps
under their parameter names, onnx's ``numpy_helper`` for the ones it makes (a BatchNorm folded
into the convolution before it, ``onnx::Conv_N``), and the model's output for the round trip.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
safetensors_torch = pytest.importorskip("safetensors.torch")

from ckptctl import open_checkpoint  # noqa: E402

pytestmark = pytest.mark.torch


def _mlp_conv() -> Any:
    """conv, fc1, fc2: a small CNN whose parameters the exporter keeps under their names."""
    nn = torch.nn
    layers = [
        ("conv", nn.Conv2d(3, 4, 3)), ("act1", nn.ReLU()), ("flat", nn.Flatten()),
        ("fc1", nn.Linear(4 * 6 * 6, 16)), ("act2", nn.ReLU()), ("fc2", nn.Linear(16, 3)),
    ]  # fmt: skip
    return nn.Sequential(OrderedDict(layers))


def _conv_bn() -> Any:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(4 * 6 * 6, 2),
    )  # fmt: skip


def _export(model: Any, path: Path) -> Any:
    """``model`` in eval mode with random BatchNorm statistics, exported to ``path``."""
    torch.manual_seed(46)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-1, 1)
            module.running_var.uniform_(0.5, 2)
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(model, (torch.randn(1, 3, 8, 8),), str(path), dynamo=False)
    return model


def _digest(t: Any) -> str:
    return "sha256:" + hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()


def test_exported_parameters_keep_their_names_and_values(tmp_path: Path, run_cli) -> None:
    model = _export(_mlp_conv(), tmp_path / "model.onnx")
    state = model.state_dict()
    result = run_cli("ls", "--json", "--state-key", "initializers", tmp_path / "model.onnx")
    assert result.code == 0, result.stderr
    listing = json.loads(result.stdout)
    assert listing["metadata"]["producer_name"] == "pytorch"
    listed = {t["name"]: (t["dtype"], t["shape"]) for t in listing["tensors"]}
    assert listed == {name: ("F32", list(t.shape)) for name, t in state.items()}
    result = run_cli("hash", "--state-key", "initializers", tmp_path / "model.onnx")
    assert result.code == 0, result.stderr
    digests = {m["name"]: m["digest"] for m in map(json.loads, result.stdout.splitlines())}
    assert digests == {name: _digest(t) for name, t in state.items()}


def test_folded_batchnorm_reads_as_onnx_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    model = _export(_conv_bn(), path)
    exported = onnx.load(str(path))
    made = [t.name for t in exported.graph.initializer if t.name not in model.state_dict()]
    assert made  # the exporter folded BatchNorm into the convolution: new initializers
    with open_checkpoint(path) as ckpt:
        for init in exported.graph.initializer:
            expected = onnx.numpy_helper.to_array(init)
            np.testing.assert_array_equal(ckpt[init.name].load(), expected)
        for name in ("4.weight", "4.bias"):  # the Linear keeps its state_dict name
            np.testing.assert_array_equal(ckpt[name].load(), model.state_dict()[name].numpy())


def test_convert_to_safetensors_loads_back_into_the_model(tmp_path: Path, run_cli) -> None:
    model = _export(_mlp_conv(), tmp_path / "model.onnx")
    out = tmp_path / "model.safetensors"
    result = run_cli("convert", tmp_path / "model.onnx", out, "--state-key", "initializers")
    assert result.code == 0, result.stderr
    fresh = _mlp_conv()
    fresh.load_state_dict(safetensors_torch.load_file(str(out)), strict=True)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(fresh.eval()(x), model(x), rtol=0, atol=0)


def test_convert_to_burn_transposes_the_exported_linears(tmp_path: Path, run_cli) -> None:
    model = _export(_mlp_conv(), tmp_path / "model.onnx")
    out = tmp_path / "model.bpk"
    result = run_cli(
        "convert", tmp_path / "model.onnx", out, "--state-key", "initializers",
        "-a", "pytorch-to-burn",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    state = model.state_dict()
    with open_checkpoint(out) as ckpt:
        for name in ("fc1.weight", "fc2.weight"):  # Burn's Linear stores [in, out]
            np.testing.assert_array_equal(ckpt[name].load(), state[name].numpy().T)
        np.testing.assert_array_equal(ckpt["conv.weight"].load(), state["conv.weight"].numpy())

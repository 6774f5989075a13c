"""Real files written by PyTorch for burn's reader tests, and the project's torch-made fixtures.

The corpus lives in ``shared/corpus/burn-pytorch-reader`` beside the repository checkout (the
tests skip when it is absent). Expected values come from burn's generator scripts
(``crates/burn-store/src/pytorch/tests/reader/*.py``, e.g. ``torch.tensor([1.0, 2.5, -3.7,
0.0])`` for ``float32.pt``), i.e. what ``torch.load`` returns.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from ckptctl.errors import InputError
from ckptctl.formats import open_checkpoint
from ckptctl.model import Structure

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / ".." / "shared" / "corpus" / "burn-pytorch-reader"
TRUTH = ROOT / "fixtures" / "valid" / "pytorch" / "truth.json"

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="shared corpus not present")

Z, L, T = "pytorch-zip", "pytorch-legacy", "pytorch-tar"
#: file -> (format, kind, [(name, dtype, shape)])
LISTINGS: dict[str, tuple[str, str, list[tuple[str, str, tuple[int, ...]]]]] = {
    "bfloat16.pt": (Z, "state_dict", [("tensor", "BF16", (3,))]),
    "bool.pt": (Z, "state_dict", [("tensor", "BOOL", (5,))]),
    "buffers.pt": (Z, "state_dict", [("buffer1", "I32", (3,)), ("buffer2", "BOOL", (2,))]),
    "checkpoint.pt": (Z, "nested", [
        ("model_state_dict.fc1.weight", "F32", (10, 5)),
        ("model_state_dict.fc1.bias", "F32", (10,)),
        ("model_state_dict.fc2.weight", "F32", (3, 10)), ("model_state_dict.fc2.bias", "F32", (3,)),
        ("optimizer_state_dict.state.0.momentum_buffer", "F32", (10, 5))]),
    "complex_structure.pt": (Z, "nested", [
        ("state.encoder.layer_0.weight", "F32", (4, 3)),
        ("state.encoder.layer_0.bias", "F32", (4,)),
        ("state.encoder.layer_1.weight", "F32", (2, 4)),
        ("state.encoder.layer_1.bias", "F32", (2,)),
        ("state.decoder.weight", "F32", (3, 2)), ("state.decoder.bias", "F32", (3,))]),
    "empty.pt": (Z, "state_dict", [("tensor", "F32", (0,))]),
    "extreme_values.pt": (Z, "state_dict", [("tensor", "F32", (4,))]),
    "float16.pt": (Z, "state_dict", [("tensor", "F16", (3,))]),
    "float32.pt": (Z, "state_dict", [("tensor", "F32", (4,))]),
    "float64.pt": (Z, "state_dict", [("tensor", "F64", (3,))]),
    "int16.pt": (Z, "state_dict", [("tensor", "I16", (3,))]),
    "int32.pt": (Z, "state_dict", [("tensor", "I32", (3,))]),
    "int64.pt": (Z, "state_dict", [("tensor", "I64", (4,))]),
    "int8.pt": (Z, "state_dict", [("tensor", "I8", (4,))]),
    "large_shape.pt": (Z, "state_dict", [("tensor", "F32", (100, 100))]),
    "legacy_shared_storage.pt": (L, "state_dict", [
        ("view1", "F32", (10,)), ("view2", "F32", (20,)), ("view3", "F32", (10,))]),
    "legacy_uncloned_views.pt": (L, "state_dict", [
        ("tensor1", "F32", (10,)), ("tensor2", "F32", (10,))]),
    "legacy_with_offsets.pt": (L, "state_dict", [
        ("tensor1", "F32", (10,)), ("tensor2", "F32", (5,)), ("tensor3", "F32", (5,))]),
    "mixed_types.pt": (Z, "state_dict", [
        ("float32", "F32", (2,)), ("int64", "I64", (2,)), ("bool", "BOOL", (2,)),
        ("float64", "F64", (2,))]),
    "nested_dict.pt": (Z, "nested", [
        ("layer1.weight", "F32", (2, 3)), ("layer1.bias", "F32", (2,)),
        ("layer2.weight", "F32", (4, 2)), ("layer2.bias", "F32", (4,))]),
    "parameter.pt": (Z, "state_dict", [("param", "F32", (3, 3))]),
    "scalar.pt": (Z, "state_dict", [("tensor", "F32", ())]),
    "simple_legacy.pt": (L, "state_dict", [
        ("weight", "F32", (2, 3)), ("bias", "F32", (2,)), ("running_mean", "F32", (2,))]),
    "special_values.pt": (Z, "state_dict", [("tensor", "F32", (5,))]),
    "state_dict.pt": (Z, "state_dict", [
        ("weight", "F32", (3, 4)), ("bias", "F32", (3,)), ("running_mean", "F32", (3,)),
        ("running_var", "F32", (3,))]),
    "tar_2d_tensor.tar": (T, "state_dict", [("matrix", "F32", (3, 4))]),
    "tar_float32.tar": (T, "state_dict", [("tensor", "F32", (4,))]),
    "tar_float64.tar": (T, "state_dict", [("tensor", "F64", (3,))]),
    "tar_int64.tar": (T, "state_dict", [("tensor", "I64", (4,))]),
    "tar_multi_dtype.tar": (T, "state_dict", [
        ("float_tensor", "F32", (3,)), ("double_tensor", "F64", (2,)),
        ("int_tensor", "I64", (4,))]),
    "tar_weight_bias.tar": (T, "state_dict", [("weight", "F32", (2, 3)), ("bias", "F32", (2,))]),
    "tensor_2d.pt": (Z, "state_dict", [("tensor", "F32", (3, 2))]),
    "tensor_3d.pt": (Z, "state_dict", [("tensor", "F32", (2, 3, 4))]),
    "tensor_4d.pt": (Z, "state_dict", [("tensor", "F32", (2, 3, 2, 2))]),
    "uint8.pt": (Z, "state_dict", [("tensor", "U8", (4,))]),
}  # fmt: skip

#: (file, tensor) -> values torch.load returns (flattened).
VALUES: dict[tuple[str, str], list[float]] = {
    ("float32.pt", "tensor"): [1.0, 2.5, -3.7, 0.0],
    ("float64.pt", "tensor"): [1.1, 2.2, 3.3],
    ("float16.pt", "tensor"): [1.5, -2.25, 3.125],
    ("int8.pt", "tensor"): [127, -128, 0, 50],
    ("int16.pt", "tensor"): [1000, -2000, 3000],
    ("int32.pt", "tensor"): [10, 20, -30],
    ("int64.pt", "tensor"): [100, -200, 300, 0],
    ("uint8.pt", "tensor"): [0, 128, 255, 42],
    ("bool.pt", "tensor"): [1, 0, 1, 1, 0],
    ("scalar.pt", "tensor"): [42.0],
    ("extreme_values.pt", "tensor"): [1e-30, 1e30, -1e-30, -1e30],
    ("buffers.pt", "buffer1"): [1, 2, 3],
    ("mixed_types.pt", "int64"): [100, 200],
    ("mixed_types.pt", "float64"): [1.1, 2.2],
    ("tensor_2d.pt", "tensor"): [1, 2, 3, 4, 5, 6],
    ("legacy_with_offsets.pt", "tensor2"): [2.0, 2.1, 2.2, 2.3, 2.4],
    ("legacy_with_offsets.pt", "tensor3"): [3.0, 3.1, 3.2, 3.3, 3.4],
    ("legacy_uncloned_views.pt", "tensor1"): [10, 11, 12, 13, 14, 15, 16, 17, 18, 19],
    ("legacy_uncloned_views.pt", "tensor2"): [50, 51, 52, 53, 54, 55, 56, 57, 58, 59],
    ("tar_2d_tensor.tar", "matrix"): list(range(1, 13)),
    ("tar_weight_bias.tar", "bias"): [0.01, 0.02],
    ("tar_multi_dtype.tar", "int_tensor"): [10, 20, 30, 40],
    ("tar_multi_dtype.tar", "double_tensor"): [1.111, 2.222],
}


@pytest.mark.corpus
@needs_corpus
@pytest.mark.parametrize("name", sorted(LISTINGS))
def test_corpus_listing(name: str) -> None:
    fmt, kind, tensors = LISTINGS[name]
    with open_checkpoint(CORPUS / name) as ckpt:
        assert (ckpt.format, ckpt.kind) == (fmt, kind)
        got = [(e.name, e.dtype.value, e.shape) for e in ckpt.entries()]
        assert got == tensors
        for entry in ckpt.entries():
            assert entry.load().shape == entry.shape  # every tensor loads


@pytest.mark.corpus
@needs_corpus
@pytest.mark.parametrize(("name", "tensor"), sorted(VALUES))
def test_corpus_values(name: str, tensor: str) -> None:
    dtype = np.float32 if name.endswith(("float32.pt", ".tar")) else np.float64
    with open_checkpoint(CORPUS / name) as ckpt:
        values = ckpt[tensor].load().ravel()
        np.testing.assert_allclose(
            values.astype(np.float64), np.array(VALUES[(name, tensor)], dtype)
        )


@pytest.mark.corpus
@needs_corpus
def test_corpus_bf16_and_special_values() -> None:
    with open_checkpoint(CORPUS / "bfloat16.pt") as ckpt:
        assert ckpt["tensor"].load().tolist() == [0x3FC0, 0xC020, 0x4060]  # 1.5, -2.5, 3.5
    with open_checkpoint(CORPUS / "special_values.pt") as ckpt:
        values = ckpt["tensor"].load()
        assert np.isnan(values[0])
        assert values[1:3].tolist() == [np.inf, -np.inf]


@pytest.mark.corpus
@needs_corpus
def test_corpus_nested_facts() -> None:
    with open_checkpoint(CORPUS / "checkpoint.pt") as ckpt:
        assert ckpt.structure == Structure(
            0,
            {"model_state_dict": 4, "optimizer_state_dict.state.0": 1},
            None,
            ("model_state_dict", "optimizer_state_dict", "epoch", "loss"),
        )
        assert ckpt.notes == [
            "nested checkpoint: tensors are under 'model_state_dict' (4), "
            "'optimizer_state_dict' (1)"
        ]


@pytest.mark.corpus
@needs_corpus
def test_corpus_broken_file() -> None:
    with pytest.raises(InputError):
        open_checkpoint(CORPUS / "broken.pt")


def _truth() -> dict[str, dict[str, object]]:
    if not TRUTH.is_file():
        return {}
    files: dict[str, dict[str, object]] = json.loads(TRUTH.read_text())["files"]
    return files


@pytest.mark.skipif(not TRUTH.is_file(), reason="fixtures/valid/pytorch/truth.json not present")
@pytest.mark.parametrize("name", sorted(_truth()))
def test_fixture_against_torch_truth(name: str) -> None:
    truth = _truth()[name]
    with open_checkpoint(TRUTH.parent / name) as ckpt:
        assert ckpt.format == truth["format"]
        assert ckpt.kind == truth["kind"]
        expected = truth["tensors"]
        assert isinstance(expected, list)
        got = [
            {
                "name": e.name,
                "dtype": e.dtype.value,
                "shape": list(e.shape),
                "sha256": hashlib.sha256(e.load().tobytes()).hexdigest(),
            }
            for e in ckpt.entries()
        ]
        assert got == [{k: t[k] for k in ("name", "dtype", "shape", "sha256")} for t in expected]

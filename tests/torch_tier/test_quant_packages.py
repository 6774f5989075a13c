"""Issue 27, item 3, against the quantization packages themselves.

The packages' own functions read the committed fixtures (``fixtures/valid/quantized/``, written
by those packages): bitsandbytes' ``QuantState.from_dict`` and ``dequantize_4bit`` /
``int8_vectorwise_dequant``, compressed-tensors' ``unpack_from_int32`` / ``pack_to_int32`` and
its compressor's ``decompress``. What they unpack must have the shape and parameter count
ckptctl reports from the tensors, and the bit width ckptctl infers must be the one that repacks
the stored words exactly.

Beyond the committed files, the fixture script's makers (the packages' packing) run over a
grid of bits, group and block sizes, and ckptctl must read every result back as the package
describes it. auto-gptq's ``QuantLinear`` (cuda-old, its CPU path) built from the bits, group
size and shape ckptctl reports must load the stored tensors (``load_state_dict`` refuses any
other shape) and unpack them; autoawq's ``dequantize_gemm`` must unpack at the reported bits
and group size.

Tier ``quant`` (with ``torch``): needs bitsandbytes, compressed-tensors, auto-gptq and autoawq
(``.ci/run`` installs them beside torch; the last two without their dependencies, as only
their packing modules are imported); each test skips alone when its package is missing, and
fails instead under ``CKPTCTL_REQUIRE_TIERS=torch,quant``.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest

from ckptctl.formats import open_checkpoint
from ckptctl.ops._quant import find_quantized
from tests.conftest import FIXTURES, VALID, load_module

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

pytestmark = [pytest.mark.torch, pytest.mark.quant]

QUANT = VALID / "quantized"


def _package(name: str) -> Any:
    with warnings.catch_warnings():  # their imports warn about missing GPUs and deprecations
        warnings.simplefilter("ignore")
        return pytest.importorskip(name)


def _packing_module(name: str) -> Any:
    """One module of auto-gptq or autoawq, imported without the package's ``__init__`` (which
    needs CUDA or a training stack), as ``fixtures/make_quantized.py`` imports it."""
    import importlib.util
    import sys

    top = name.split(".")[0]
    if top not in sys.modules and importlib.util.find_spec(top) is None:
        pytest.skip(f"{top} is not installed")
    maker = load_module(FIXTURES / "make_quantized.py")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return maker._load_without_package_init(name)


def _ours(filename: str) -> dict[str, Any]:
    with open_checkpoint(QUANT / filename) as ckpt:
        return {m.module: m for m in find_quantized(ckpt.entries())}


@pytest.mark.parametrize("filename", ["gptq-4bit.safetensors", "gptq-3bit.safetensors"])
def test_gptq_module_built_from_what_we_report_loads_and_unpacks_the_tensors(filename):
    qlinear = _packing_module("auto_gptq.nn_modules.qlinear.qlinear_cuda_old")
    tensors = safetensors_torch.load_file(str(QUANT / filename))
    for module, m in _ours(filename).items():
        out, inputs = m.shape
        q = qlinear.QuantLinear(m.bits, m.group_size, inputs, out, bias=True, trainable=True)
        state = {k.removeprefix(module + "."): v for k, v in tensors.items()
                 if k.startswith(module + ".")}  # fmt: skip
        q.load_state_dict(state, strict=True)  # torch refuses any tensor of another shape
        with torch.no_grad():
            y = q(torch.eye(inputs, dtype=torch.float16))  # row i: the weights of input i
        assert tuple(y.shape) == (inputs, out)
        assert bool(torch.isfinite(y).all())


def test_awq_dequantizes_at_the_bits_and_group_we_report():
    packing = _packing_module("awq.utils.packing_utils")
    tensors = safetensors_torch.load_file(str(QUANT / "awq-4bit.safetensors"))
    for module, m in _ours("awq-4bit.safetensors").items():
        weight = packing.dequantize_gemm(
            tensors[f"{module}.qweight"], tensors[f"{module}.qzeros"],
            tensors[f"{module}.scales"], m.bits, m.group_size,
        )  # fmt: skip
        assert tuple(weight.shape) == (m.shape[1], m.shape[0])  # AWQ's is [in, out]
        assert weight.numel() == m.parameters
        assert bool(torch.isfinite(weight).all())


@pytest.mark.parametrize("filename", ["bnb-nf4.safetensors", "bnb-fp4.safetensors"])
def test_bitsandbytes_4bit_unpacks_to_the_shape_and_block_we_report(filename):
    functional = _package("bitsandbytes.functional")
    tensors = safetensors_torch.load_file(str(QUANT / filename))
    ours = _ours(filename)
    assert ours
    for module, m in ours.items():
        prefix = f"{module}.weight."
        qs = {k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = functional.QuantState.from_dict(qs, device=torch.device("cpu"))
            weight = functional.dequantize_4bit(tensors[f"{module}.weight"], state)
        assert tuple(state.shape) == m.shape
        assert state.blocksize == m.group_size
        assert f"bnb-{state.quant_type}" == m.scheme.value
        assert tuple(weight.shape) == m.shape
        assert weight.numel() == m.parameters
        assert bool(torch.isfinite(weight).all())


def test_bitsandbytes_int8_dequantizes_row_by_row_as_we_report():
    functional = _package("bitsandbytes.functional")
    tensors = safetensors_torch.load_file(str(QUANT / "bnb-int8.safetensors"))
    for module, m in _ours("bnb-int8.safetensors").items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            weight = functional.int8_vectorwise_dequant(
                tensors[f"{module}.weight"], tensors[f"{module}.SCB"]
            )
        assert tuple(weight.shape) == m.shape
        assert m.group_size == m.shape[1]  # one SCB a row: the whole row shares it
        assert tensors[f"{module}.SCB"].numel() == m.shape[0]


@pytest.mark.parametrize("filename", ["ct-w4a16.safetensors", "ct-w4-asym.safetensors"])
def test_compressed_tensors_repacks_exactly_at_the_bits_we_infer(filename):
    helpers = _package("compressed_tensors.compressors.pack_quantized.helpers")
    tensors = safetensors_torch.load_file(str(QUANT / filename))
    for module, m in _ours(filename).items():
        packed = tensors[f"{module}.weight_packed"]
        shape = torch.Size(tensors[f"{module}.weight_shape"].tolist())
        values = helpers.unpack_from_int32(packed, m.bits, shape)
        assert tuple(values.shape) == m.shape
        assert values.numel() == m.parameters
        assert torch.equal(helpers.pack_to_int32(values, m.bits), packed)
        zero = tensors.get(f"{module}.weight_zero_point")
        if zero is not None:  # packed along the rows: [ceil(out * bits / 32), groups]
            groups = math.ceil(m.shape[1] / m.group_size)
            points = helpers.unpack_from_int32(zero, m.bits, (m.shape[0], groups), packed_dim=0)
            assert torch.equal(helpers.pack_to_int32(points, m.bits, packed_dim=0), zero)


def test_compressed_tensors_decompresses_with_the_scheme_we_report():
    base = _package("compressed_tensors.compressors.pack_quantized.base")
    quantization = _package("compressed_tensors.quantization")
    tensors = safetensors_torch.load_file(str(QUANT / "ct-w4a16.safetensors"))
    for module, m in _ours("ct-w4a16.safetensors").items():
        args = quantization.QuantizationArgs(
            num_bits=m.bits, type="int", symmetric=True, strategy="group", group_size=m.group_size
        )
        scheme = quantization.QuantizationScheme(targets=["Linear"], weights=args)
        state = {k.removeprefix(module + "."): v for k, v in tensors.items()
                 if k.startswith(module + ".")}  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = base.PackedQuantizationCompressor.decompress(state, scheme)
        assert tuple(out["weight"].shape) == m.shape
        assert bool(torch.isfinite(out["weight"]).all())


# --- beyond the committed fixtures: the packages' packing over a grid of bits and groups ---------


def _write(tmp_path: Any, made: tuple[dict[str, Any], dict[str, Any]]) -> tuple[Any, Any]:
    tensors, expected = made
    path = tmp_path / "grid.safetensors"
    safetensors_torch.save_file(tensors, str(path))
    with open_checkpoint(path) as ckpt:
        return {m.module: m for m in find_quantized(ckpt.entries())}, expected


def _same_grouping(m: Any, want: dict[str, Any]) -> None:
    """The package's group size and ours split the inputs into the same groups (one group of
    everything is ``channel`` to us, whatever size the package was given)."""
    inputs = want["shape"][1]
    assert math.ceil(inputs / m.group_size) == math.ceil(inputs / min(want["group_size"], inputs))


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_gptq_packing_of_any_bits_and_group_is_read_back(tmp_path, bits, group):
    _packing_module("auto_gptq.nn_modules.qlinear.qlinear_cuda_old")
    maker = load_module(FIXTURES / "make_quantized.py")
    ours, expected = _write(tmp_path, maker.gptq(bits, group))
    assert sorted(ours) == sorted(expected)
    for name, want in expected.items():
        m = ours[name]
        assert (m.scheme.value, m.bits, list(m.shape)) == ("gptq", bits, want["shape"])
        assert m.problems == ()
        _same_grouping(m, want)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("group", [16, 32])
@pytest.mark.parametrize("symmetric", [True, False])
def test_compressed_tensors_packing_of_any_bits_and_group_is_read_back(
    tmp_path, bits, group, symmetric
):
    _package("compressed_tensors")
    maker = load_module(FIXTURES / "make_quantized.py")
    ours, expected = _write(tmp_path, maker.ct_pack(bits, group, symmetric=symmetric))
    assert sorted(ours) == sorted(expected)
    for name, want in expected.items():
        m = ours[name]
        assert (m.bits, m.group_size, list(m.shape)) == (bits, group, want["shape"])
        assert m.problems == ()


@pytest.mark.parametrize("blocksize", [64, 128, 256])
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("nested", [True, False])
def test_bitsandbytes_4bit_of_any_block_is_read_back(tmp_path, blocksize, quant_type, nested):
    _package("bitsandbytes")
    maker = load_module(FIXTURES / "make_quantized.py")
    ours, expected = _write(tmp_path, maker.bnb_4bit(quant_type, nested, blocksize=blocksize))
    for name, want in expected.items():
        m = ours[name]
        assert (m.scheme.value, m.group_size, list(m.shape)) == (
            f"bnb-{quant_type}",
            blocksize,
            want["shape"],
        )
        assert m.problems == ()

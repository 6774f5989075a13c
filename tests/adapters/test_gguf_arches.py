"""``gguf-to-hf`` / ``hf-to-gguf`` on architectures beyond the llama family (issue 45).

Ground truth is the real producer: ``fixtures/valid/gguf/arches/NAME.gguf`` is what llama.cpp's
own ``convert_hf_to_gguf.py`` wrote from the tiny transformers model saved beside it
(``arches/NAME/model.safetensors`` + ``config.json``; ``fixtures/make_gguf_arches.py``). The GGUF
side is read with gguf-py's ``GGUFReader``, the Hugging Face side from the safetensors bytes.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from ckptctl import UnsupportedError
from ckptctl.ops.convert import ConvertOptions, convert
from tests.conftest import VALID

ARCHES = VALID / "gguf" / "arches"

#: (dtype, shape, bytes) of a tensor.
Raw = tuple[str, tuple[int, ...], bytes]


def _safetensors(path: Path) -> dict[str, Raw]:
    """Every tensor of a safetensors file, as its header and bytes say (BF16 stays raw)."""
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    header.pop("__metadata__", None)
    body = data[8 + size :]
    return {
        name: (info["dtype"], tuple(info["shape"]), body[slice(*info["data_offsets"])])
        for name, info in header.items()
    }


def _gguf(path: Path) -> dict[str, Raw]:
    """Every tensor of a GGUF file as gguf-py reads it (F32 here), in row-major shape."""
    reader = gguf.GGUFReader(path)
    out = {}
    for tensor in reader.tensors:
        assert tensor.tensor_type == gguf.GGMLQuantizationType.F32, tensor.name
        shape = tuple(int(n) for n in reversed(tensor.shape))
        out[tensor.name] = ("F32", shape, np.ascontiguousarray(tensor.data).tobytes())
    return out


def _converted(tmp_path: Path, src: Path, *adapters: str) -> dict[str, Raw]:
    out = tmp_path / f"{adapters[0]}.safetensors"
    report = convert(src, out, ConvertOptions(adapters=adapters))
    assert report.written
    return _safetensors(out)


def _write_safetensors(path: Path, tensors: dict[str, Raw]) -> None:
    header, offset = {}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(t[2] for t in tensors.values()))


def _f32(raw: Raw) -> np.ndarray:
    """A tensor's values widened to F32 (BF16 bits shifted into place)."""
    dtype, _, data = raw
    if dtype == "BF16":
        return (np.frombuffer(data, np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(data, {"F32": np.float32, "F16": np.float16}[dtype]).astype(np.float32)


def _gemma_folder(tmp_path: Path, dtype: str, values: np.ndarray) -> Path:
    """A Hugging Face Gemma folder whose only tensor is ``model.norm.weight`` = ``values``."""
    folder = tmp_path / f"gemma_{dtype}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["GemmaForCausalLM"]}))
    raw = (dtype, values.shape, values.tobytes())
    _write_safetensors(folder / "model.safetensors", {"model.norm.weight": raw})
    return folder / "model.safetensors"


def _round_trip(tmp_path: Path, src: Path) -> tuple[np.ndarray, np.ndarray]:
    """(hf-to-gguf's norm, then gguf-to-hf's) as F32 values."""
    there = src.parent / "g.safetensors"
    convert(src, there, ConvertOptions(adapters=("hf-to-gguf",)))
    back = _converted(tmp_path, there, "gguf-to-hf")["model.norm.weight"]
    stored = _safetensors(there)["output_norm.weight"]
    assert stored[0] == back[0] == "F32"
    return _f32(stored), _f32(back)


def _same(got: dict[str, Raw], want: dict[str, Raw]) -> None:
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name] == value, name


GEMMAS = ["gemma", "gemma2", "gemma3"]
MOES = ["mixtral", "qwen2moe", "qwen3moe"]


@pytest.mark.parametrize("name", ["qwen3", *MOES])
def test_gguf_to_hf_of_llama_cpp_output_is_the_transformers_model(
    tmp_path: Path, name: str
) -> None:
    got = _converted(tmp_path, ARCHES / f"{name}.gguf", "gguf-to-hf")
    _same(got, _safetensors(ARCHES / name / "model.safetensors"))


@pytest.mark.parametrize("name", ["qwen3", *GEMMAS, *MOES])
def test_hf_to_gguf_is_what_convert_hf_to_gguf_writes(tmp_path: Path, name: str) -> None:
    # the Gemma models are BF16 and llama.cpp wrote F32 (--outtype f32): cast:f32 does the same
    got = _converted(tmp_path, ARCHES / name / "model.safetensors", "hf-to-gguf", "cast:f32")
    _same(got, _gguf(ARCHES / f"{name}.gguf"))


@pytest.mark.parametrize("name", ["qwen3", *MOES])
def test_diff_reads_the_config_as_convert_does(run_cli, name: str) -> None:
    # diff of the HF model against llama.cpp's GGUF, through hf-to-gguf: the architecture comes
    # from the config.json beside the model (it was taken for llama, asking for head counts)
    result = run_cli("diff", ARCHES / name / "model.safetensors", ARCHES / f"{name}.gguf",
                     "-a", "hf-to-gguf", "--json")  # fmt: skip
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["identical"] is True
    assert report["counts"]["common"] == report["counts"]["tensors_b"] > 0


@pytest.mark.parametrize("name", GEMMAS)
def test_gguf_to_hf_of_gemma_is_the_bf16_model_with_its_norms_exact_from_2_to_the_minus_16(
    tmp_path: Path, name: str
) -> None:
    got = _converted(tmp_path, ARCHES / f"{name}.gguf", "gguf-to-hf")
    want = _safetensors(ARCHES / name / "model.safetensors")
    assert sorted(got) == sorted(want)
    norms = [n for n in want if n.endswith("norm.weight")]
    assert len(norms) >= 2 * 2 + 1  # input, post-attention (Gemma 2/3: two more) per layer, final
    for tensor, (dtype, shape, _) in want.items():
        assert dtype == "BF16"
        assert got[tensor][:2] == ("F32", shape), tensor
        w, back = _f32(want[tensor]), _f32(got[tensor])
        if tensor not in norms:
            assert back.tobytes() == w.tobytes(), tensor  # BF16 -> F32 widening only
            continue
        exact = (np.abs(w) >= 2.0**-16) | (w.view(np.uint32) == 0)
        assert back[exact].tobytes() == w[exact].tobytes(), tensor
        # the generator's 2**-17 + 2**-24 (element 1): its last bit is lost in w + 1
        assert not exact[1]
        assert back[1] == np.float32(2.0**-17), tensor
        assert back[~exact].tolist() == [np.float32(2.0**-17)], tensor


def test_gemma_output_is_tied_and_its_lm_head_is_not_written(tmp_path: Path) -> None:
    hf = _safetensors(ARCHES / "gemma2" / "model.safetensors")
    hf["lm_head.weight"] = hf["model.embed_tokens.weight"]
    _write_safetensors(tmp_path / "model.safetensors", hf)
    (tmp_path / "config.json").write_bytes((ARCHES / "gemma2" / "config.json").read_bytes())
    report = convert(tmp_path / "model.safetensors", tmp_path / "g.safetensors",
                     ConvertOptions(adapters=("hf-to-gguf",)))  # fmt: skip
    got = _safetensors(tmp_path / "g.safetensors")
    assert "lm_head.weight" not in got
    assert "output.weight" not in got
    assert {r.source for r in report.plan if r.target is None} == {"lm_head.weight"}


def test_norm_shift_over_every_bf16_code(tmp_path: Path) -> None:
    w = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
    bf16 = (w.view(np.uint32) >> 16).astype(np.uint16)
    stored, back = _round_trip(tmp_path, _gemma_folder(tmp_path, "BF16", bf16))
    with np.errstate(invalid="ignore"):
        assert stored.tobytes() == (w + np.float32(1)).tobytes()  # widened, then + 1 in F32
    finite, big = np.isfinite(w), np.abs(w)
    exact = finite & (big >= 2.0**-16) & (w != 2.0**24)
    assert back[exact].tobytes() == w[exact].tobytes()
    assert back[w == 2.0**24].tolist() == [2.0**24 - 1]
    assert np.isnan(back[np.isnan(w)]).all()
    assert back[np.isinf(w)].tobytes() == w[np.isinf(w)].tobytes()
    below = finite & (big < 2.0**-16)
    assert np.abs(back[below] - w[below]).max() == 2.0**-24  # within 2**-24, not always exact
    assert back[w.view(np.uint32) == 0x8000_0000].view(np.uint32).tolist() == [0]  # -0 -> +0


def test_norm_shift_over_every_f16_code(tmp_path: Path) -> None:
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    w = h.astype(np.float32)
    # an F16 checkpoint: llama.cpp adds 1 in F16 (prepare_tensors keeps F16), stores it as F32
    stored, _ = _round_trip(tmp_path, _gemma_folder(tmp_path, "F16", h))
    with np.errstate(invalid="ignore", over="ignore"):
        assert stored.tobytes() == (h + np.float16(1)).astype(np.float32).tobytes()
    # F16 values held in F32: (w + 1) - 1 in F32 is w for w < 0 or w >= 2**-13
    (tmp_path / "f32").mkdir()
    _, back = _round_trip(tmp_path / "f32", _gemma_folder(tmp_path / "f32", "F32", w))
    finite = np.isfinite(w)
    exact = finite & ((w < 0) | (w >= 2.0**-13))
    assert back[exact].tobytes() == w[exact].tobytes()
    below = finite & ~exact
    assert np.abs(back[below] - w[below]).max() == 2.0**-24


def test_qwen3_q_k_norms_are_named_and_its_rows_stay(tmp_path: Path) -> None:
    got = _converted(tmp_path, ARCHES / "qwen3.gguf", "gguf-to-hf")
    assert got["model.layers.1.self_attn.q_norm.weight"][1] == (8,)  # one norm per head dim
    gguf_side = _gguf(ARCHES / "qwen3.gguf")
    # no permute: the q rows are llama.cpp's bytes unchanged
    assert got["model.layers.0.self_attn.q_proj.weight"][2] == gguf_side["blk.0.attn_q.weight"][2]


@pytest.mark.parametrize("name", ["qwen3", *GEMMAS, *MOES])
def test_gguf_to_hf_then_hf_to_gguf_gives_llama_cpp_bytes_back(tmp_path: Path, name: str) -> None:
    # every stored Gemma norm g here is w + 1 of a BF16 w, and (g - 1) + 1 gives g back in F32
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_bytes((ARCHES / name / "config.json").read_bytes())
    convert(ARCHES / f"{name}.gguf", tmp_path / "hf" / "model.safetensors",
            ConvertOptions(adapters=("gguf-to-hf",)))  # fmt: skip
    got = _converted(tmp_path, tmp_path / "hf" / "model.safetensors", "hf-to-gguf")
    _same(got, _gguf(ARCHES / f"{name}.gguf"))


def test_the_report_says_how_exact_a_gemma_norm_is(tmp_path: Path) -> None:
    report = convert(ARCHES / "gemma3.gguf", tmp_path / "o.safetensors",
                     ConvertOptions(adapters=("gguf-to-hf",)))  # fmt: skip
    rows = {row.source: row for row in report.plan}
    assert any("2**-16" in a for a in rows["blk.0.attn_q_norm.weight"].actions)
    assert rows["blk.0.attn_q_norm.weight"].dtype_after == "F32"
    assert not any("2**-16" in a for a in rows["blk.0.attn_q.weight"].actions)


def _gguf_with(path: Path, arch: str, names: list[str]) -> Path:
    writer = gguf.GGUFWriter(path, arch)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    for name in names:
        writer.add_tensor(name, np.zeros((2, 4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_mixtral_s_stacked_experts_are_cut_into_transformers_experts(tmp_path: Path) -> None:
    report = convert(ARCHES / "mixtral.gguf", tmp_path / "o.safetensors",
                     ConvertOptions(adapters=("gguf-to-hf",)))  # fmt: skip
    rows = [row for row in report.plan if row.source == "blk.1.ffn_down_exps.weight"]
    assert [row.target for row in rows] == [
        f"model.layers.1.block_sparse_moe.experts.{xid}.w2.weight" for xid in range(3)
    ]
    assert all("split" in row.kinds for row in rows)
    got = _safetensors(tmp_path / "o.safetensors")
    stacked = _gguf(ARCHES / "mixtral.gguf")["blk.1.ffn_down_exps.weight"]
    assert stacked[1] == (3, 16, 24)  # [experts, hidden, ffn]
    for xid in range(3):
        piece = got[f"model.layers.1.block_sparse_moe.experts.{xid}.w2.weight"]
        assert piece[1] == (16, 24)
        assert piece[2] == stacked[2][xid * 16 * 24 * 4 : (xid + 1) * 16 * 24 * 4]


def test_quantized_stacked_experts_split_as_blocks(tmp_path: Path) -> None:
    values = np.random.default_rng(3).standard_normal((3, 8, 64)).astype(np.float32)
    q8 = gguf.GGMLQuantizationType.Q8_0
    blocks = gguf.quants.quantize(values, q8)
    writer = gguf.GGUFWriter(tmp_path / "m.gguf", "qwen3moe")
    writer.add_head_count(2)
    writer.add_tensor("blk.0.ffn_gate_exps.weight", blocks, raw_dtype=q8)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    out = tmp_path / "o.gguf"
    convert(tmp_path / "m.gguf", out, ConvertOptions(adapters=("gguf-to-hf",)))
    reader = gguf.GGUFReader(out)
    flat = blocks.reshape(-1)
    size = flat.size // 3
    assert len(reader.tensors) == 3
    for xid, tensor in enumerate(reader.tensors):
        assert tensor.name == f"model.layers.0.mlp.experts.{xid}.gate_proj.weight"
        assert tensor.tensor_type == q8  # still the file's blocks, undecoded
        assert tensor.data.tobytes() == flat[xid * size : (xid + 1) * size].tobytes()
        decoded = gguf.quants.dequantize(tensor.data, q8).reshape(8, 64)
        assert decoded.tobytes() == gguf.quants.dequantize(blocks, q8)[xid].tobytes()


def test_experts_not_numbered_from_0_are_refused(tmp_path: Path, run_cli) -> None:
    hf = _safetensors(ARCHES / "qwen3moe" / "model.safetensors")
    del hf["model.layers.0.mlp.experts.1.up_proj.weight"]
    _write_safetensors(tmp_path / "model.safetensors", hf)
    (tmp_path / "config.json").write_bytes((ARCHES / "qwen3moe" / "config.json").read_bytes())
    result = run_cli("convert", tmp_path / "model.safetensors", tmp_path / "o.safetensors",
                     "-a", "hf-to-gguf")  # fmt: skip
    assert result.code == 4
    assert "blk.0.ffn_up_exps.weight" in result.stderr
    assert str(tmp_path / "model.safetensors") in result.stderr  # the file, as every refusal
    assert not (tmp_path / "o.safetensors").exists()
    diffed = run_cli("diff", tmp_path / "model.safetensors", ARCHES / "qwen3moe.gguf",
                     "-a", "hf-to-gguf")  # fmt: skip
    assert diffed.code == 4
    assert str(tmp_path / "model.safetensors") in diffed.stderr


@pytest.mark.parametrize(
    ("src", "adapters"),
    [
        (ARCHES / "mixtral.gguf", ("cast:f32", "gguf-to-hf")),
        (ARCHES / "qwen3moe" / "model.safetensors", ("cast:f32", "hf-to-gguf")),
    ],
)
def test_experts_are_refused_where_the_gguf_adapter_does_not_head_the_list(
    tmp_path: Path, src: Path, adapters: tuple[str, ...]
) -> None:
    with pytest.raises(UnsupportedError, match="experts"):
        convert(src, tmp_path / "o.safetensors", ConvertOptions(adapters=adapters))
    assert not (tmp_path / "o.safetensors").exists()


def test_quantized_experts_are_stacked_only_once_decoded(tmp_path: Path) -> None:
    q8 = gguf.GGMLQuantizationType.Q8_0
    values = np.random.default_rng(5).standard_normal((2, 4, 32)).astype(np.float32)
    writer = gguf.GGUFWriter(tmp_path / "m.gguf", "qwen3moe")
    writer.add_head_count(2)
    for xid in range(2):  # Hugging Face names, Q8_0 blocks
        name = f"model.layers.0.mlp.experts.{xid}.up_proj.weight"
        writer.add_tensor(name, gguf.quants.quantize(values[xid], q8), raw_dtype=q8)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedError, match="quantized") as refused:
        convert(tmp_path / "m.gguf", tmp_path / "o.safetensors",
                ConvertOptions(adapters=("hf-to-gguf",)))  # fmt: skip
    assert "--dequantize" in str(refused.value.hint)
    from ckptctl.dtypes import DType

    opts = ConvertOptions(adapters=("hf-to-gguf",), dequantize=DType.F32)
    convert(tmp_path / "m.gguf", tmp_path / "o.safetensors", opts)
    got = _safetensors(tmp_path / "o.safetensors")["blk.0.ffn_up_exps.weight"]
    want = np.stack([gguf.quants.dequantize(gguf.quants.quantize(v, q8), q8) for v in values])
    assert got == ("F32", (2, 4, 32), want.astype(np.float32).tobytes())


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"architectures": ["Qwen3NextForCausalLM"]}, "Qwen3NextForCausalLM"),
        ({"model_type": "qwen3_next"}, "qwen3_next"),
    ],
)
def test_a_config_naming_an_unknown_model_is_refused_not_taken_for_llama(
    tmp_path: Path, run_cli, config: dict[str, object], named: str
) -> None:
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**config, "num_attention_heads": 4}))
    hf = _safetensors(ARCHES / "qwen3" / "model.safetensors")
    _write_safetensors(folder / "model.safetensors", hf)
    result = run_cli("convert", folder / "model.safetensors", tmp_path / "o.safetensors",
                     "-a", "hf-to-gguf")  # fmt: skip
    assert result.code == 4
    assert named in result.stderr
    assert not (tmp_path / "o.safetensors").exists()

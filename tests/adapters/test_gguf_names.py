"""``--adapter gguf-to-hf`` / ``hf-to-gguf``: llama.cpp's names and q/k row order (issue 45).

Ground truth, none of it from the adapter under test:

* names: gguf-py's own ``TensorNameMap`` (``gguf.get_tensor_name_map(arch, blocks)``), the
  table ``convert_hf_to_gguf.py`` renames with;
* the q/k rows: ``convert_hf_to_gguf.py``'s ``LlamaModel.permute``, written out below
  (``_llama_cpp_permute``), applied to q with ``n_head`` and to k with ``n_head_kv``; Qwen2 and
  Phi-3 leave values alone;
* ``ports_llama.gguf``: the ports' transformers llama written as llama.cpp writes it
  (``fixtures/make_gguf.py``), which must become llama-burn's record
  (``fixtures/valid/ports/llama_expected.safetensors``, ``tests/ops/test_ports.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from ckptctl import SelectionError, UnsupportedError, open_checkpoint
from ckptctl.adapters import AdapterContext, parse_adapter
from ckptctl.adapters.gguf import facts_from_gguf
from ckptctl.formats.gguf import dequantized
from ckptctl.ops.convert import ConvertOptions, convert
from tests.conftest import VALID

GGUF = VALID / "gguf"
PORTS = VALID / "ports"
HEADS, KV_HEADS, DIM, FFN, BLOCKS = 4, 2, 32, 24, 2  # head size 8: permute is no involution


def _llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py ``LlamaModel.permute(w, n_head, n_head_kv)``, with ``heads``
    already the count it ends up using (``n_head_kv`` for k)."""
    return (
        w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def _hf_llama(arch: str = "LlamaForCausalLM", bias: bool = False) -> dict[str, np.ndarray]:
    """A tiny transformers llama-family state dict (names as ``save_pretrained`` writes)."""
    rng = np.random.default_rng(7)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    head = DIM // HEADS
    sd = {"model.embed_tokens.weight": f32(40, DIM), "model.norm.weight": f32(DIM),
          "lm_head.weight": f32(40, DIM)}  # fmt: skip
    for b in range(BLOCKS):
        p = f"model.layers.{b}."
        sd |= {
            p + "input_layernorm.weight": f32(DIM),
            p + "post_attention_layernorm.weight": f32(DIM),
            p + "self_attn.q_proj.weight": f32(HEADS * head, DIM),
            p + "self_attn.k_proj.weight": f32(KV_HEADS * head, DIM),
            p + "self_attn.v_proj.weight": f32(KV_HEADS * head, DIM),
            p + "self_attn.o_proj.weight": f32(DIM, DIM),
            p + "mlp.down_proj.weight": f32(DIM, FFN),
        }
        if arch == "Phi3ForCausalLM":
            sd[p + "mlp.gate_up_proj.weight"] = f32(2 * FFN, DIM)
        else:
            sd[p + "mlp.gate_proj.weight"] = f32(FFN, DIM)
            sd[p + "mlp.up_proj.weight"] = f32(FFN, DIM)
        if bias:  # Qwen2's q/k/v biases
            for m, rows in (("q", HEADS), ("k", KV_HEADS), ("v", KV_HEADS)):
                sd[p + f"self_attn.{m}_proj.bias"] = f32(rows * head)
    return sd


def _hf_folder(tmp_path: Path, sd: dict[str, np.ndarray], config: dict[str, object]) -> Path:
    folder = tmp_path / "hf"
    folder.mkdir()
    save_file(sd, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder / "model.safetensors"


def _config(arch: str = "LlamaForCausalLM") -> dict[str, object]:
    return {"architectures": [arch], "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS}


def _expected_gguf(
    sd: dict[str, np.ndarray], arch: gguf.MODEL_ARCH, permute: bool
) -> dict[str, np.ndarray]:
    names = gguf.get_tensor_name_map(arch, BLOCKS)
    out = {}
    for name, value in sd.items():
        if permute and ".q_proj." in name:
            value = _llama_cpp_permute(value, HEADS)
        elif permute and ".k_proj." in name:
            value = _llama_cpp_permute(value, KV_HEADS)
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert new is not None, name
        out[new] = value
    return out


def _same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name].shape == value.shape, name
        assert got[name].tobytes() == np.ascontiguousarray(value).tobytes(), name


@pytest.mark.parametrize(
    ("hf_class", "arch", "permute", "bias"),
    [
        ("LlamaForCausalLM", gguf.MODEL_ARCH.LLAMA, True, False),
        ("MistralForCausalLM", gguf.MODEL_ARCH.LLAMA, True, False),
        ("LlamaForCausalLM", gguf.MODEL_ARCH.LLAMA, True, True),
        ("Qwen2ForCausalLM", gguf.MODEL_ARCH.QWEN2, False, True),
        ("Phi3ForCausalLM", gguf.MODEL_ARCH.PHI3, False, False),
    ],
)
def test_hf_to_gguf_is_convert_hf_to_gguf(
    tmp_path: Path, hf_class: str, arch: gguf.MODEL_ARCH, permute: bool, bias: bool
) -> None:
    sd = _hf_llama(hf_class, bias=bias)
    src = _hf_folder(tmp_path, sd, _config(hf_class))
    report = convert(src, tmp_path / "g.safetensors", ConvertOptions(adapters=("hf-to-gguf",)))
    assert report.written
    _same(load_file(str(tmp_path / "g.safetensors")), _expected_gguf(sd, arch, permute))


def test_gguf_to_hf_then_hf_to_gguf_is_the_identity(tmp_path: Path) -> None:
    src = _hf_folder(tmp_path, _hf_llama(bias=True), _config())
    convert(src, tmp_path / "hf" / "g.safetensors", ConvertOptions(adapters=("hf-to-gguf",)))
    back = ConvertOptions(adapters=(f"gguf-to-hf:{HEADS},{KV_HEADS}",))
    convert(tmp_path / "hf" / "g.safetensors", tmp_path / "back.safetensors", back)
    _same(load_file(str(tmp_path / "back.safetensors")), _hf_llama(bias=True))
    again = ConvertOptions(adapters=(f"hf-to-gguf:{HEADS},{KV_HEADS}",))
    convert(tmp_path / "back.safetensors", tmp_path / "again.safetensors", again)
    _same(load_file(str(tmp_path / "again.safetensors")),
          load_file(str(tmp_path / "hf" / "g.safetensors")))  # fmt: skip


def test_head_counts_come_from_the_gguf_metadata(tmp_path: Path) -> None:
    # ports_llama.gguf says llama.attention.head_count 2, head_count_kv 1
    convert(GGUF / "ports_llama.gguf", tmp_path / "hf.safetensors",
            ConvertOptions(adapters=("gguf-to-hf",)))  # fmt: skip
    want = load_file(str(PORTS / "llama.safetensors"))
    _same(load_file(str(tmp_path / "hf.safetensors")), want)


def test_a_gguf_llama_becomes_the_llama_burn_record(tmp_path: Path) -> None:
    adapters = ("gguf-to-hf", "pytorch-to-burn", "rope-interleaved:2,1")
    opts = ConvertOptions(adapters=adapters, target=str(PORTS / "llama_target.bpk"))
    report = convert(GGUF / "ports_llama.gguf", tmp_path / "o.bpk", opts)
    assert report.ok
    assert report.written
    with open_checkpoint(tmp_path / "o.bpk") as ckpt:
        got = {name: np.array(entry.load()) for name, entry in ckpt.items()}
    _same(got, load_file(str(PORTS / "llama_expected.safetensors")))


def test_without_the_rope_adapter_the_burn_record_is_refused_naming_wq(tmp_path: Path) -> None:
    opts = ConvertOptions(adapters=("gguf-to-hf", "pytorch-to-burn"),
                          target=str(PORTS / "llama_target.bpk"))  # fmt: skip
    report = convert(GGUF / "ports_llama.gguf", tmp_path / "o.bpk", opts)
    assert not report.ok
    assert not (tmp_path / "o.bpk").exists()
    assert report.summary is not None
    assert {a.name for a in report.summary.ambiguous} >= {"layers.0.attention.wq.weight"}


def test_quantized_q_k_rows_move_as_blocks_without_decoding() -> None:
    with open_checkpoint(GGUF / "tiny_llama.gguf") as ckpt:
        context = AdapterContext(facts=facts_from_gguf(ckpt.metadata))
        adapter = parse_adapter("gguf-to-hf", context)
        for name, heads in (("blk.0.attn_q.weight", 4), ("blk.0.attn_k.weight", 2)):
            entry = ckpt[name]
            out = adapter(entry)
            assert out is not None
            assert out.extra == entry.extra  # still Q8_0 blocks
            assert out.nbytes == entry.nbytes
            blocks = out.load()
            assert blocks.dtype == np.uint8
            assert blocks.tobytes() != entry.load().tobytes()
            values = dequantized(entry).load()
            inverse = values.reshape(heads, values.shape[0] // heads // 2, 2, -1).swapaxes(1, 2)
            want = inverse.reshape(values.shape)
            assert _llama_cpp_permute(want, heads).tobytes() == values.tobytes()
            assert dequantized(out).load().tobytes() == want.tobytes()


def test_dequantized_gguf_to_hf_matches_gguf_py(tmp_path: Path) -> None:
    opts = ConvertOptions(adapters=("gguf-to-hf",), dequantize=None)
    with pytest.raises(UnsupportedError, match="dequantize"):
        convert(GGUF / "tiny_llama.gguf", tmp_path / "x.safetensors", opts)
    from ckptctl.dtypes import DType

    opts = ConvertOptions(adapters=("gguf-to-hf",), dequantize=DType.F32)
    convert(GGUF / "tiny_llama.gguf", tmp_path / "x.safetensors", opts)
    got = load_file(str(tmp_path / "x.safetensors"))
    reader = gguf.GGUFReader(GGUF / "tiny_llama.gguf")
    q = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    values = gguf.quants.dequantize(q.data, q.tensor_type).reshape(32, 32)
    assert _llama_cpp_permute(got["model.layers.0.self_attn.q_proj.weight"], 4).tobytes() == (
        values.astype(np.float32).tobytes()
    )


def test_unknown_head_counts_are_a_usage_error_naming_the_parameter(
    tmp_path: Path, run_cli
) -> None:
    save_file(_hf_llama(), str(tmp_path / "m.safetensors"))  # no config.json beside it
    result = run_cli("convert", tmp_path / "m.safetensors", tmp_path / "o.safetensors",
                     "-a", "hf-to-gguf")  # fmt: skip
    assert result.code == 2
    assert "hf-to-gguf:HEADS,KV_HEADS" in result.stderr
    assert not (tmp_path / "o.safetensors").exists()
    ok = run_cli("convert", tmp_path / "m.safetensors", tmp_path / "o.safetensors",
                 "-a", f"hf-to-gguf:{HEADS},{KV_HEADS}")  # fmt: skip
    assert ok.code == 0, ok.stderr


def test_bad_head_counts_are_refused(tmp_path: Path) -> None:
    src = _hf_folder(tmp_path, _hf_llama(), _config())
    with pytest.raises(SelectionError, match="divide"):
        convert(src, tmp_path / "o.safetensors", ConvertOptions(adapters=("hf-to-gguf:4,3",)))
    with pytest.raises(SelectionError, match=r"self_attn\.[qk]_proj"):  # not 6 heads of 2k rows
        convert(src, tmp_path / "o.safetensors", ConvertOptions(adapters=("hf-to-gguf:6",)))


def test_a_quantized_gemma_norm_is_unsupported_unless_dequantized(tmp_path: Path, run_cli) -> None:
    values = np.linspace(-1, 3, 64, dtype=np.float32)
    writer = gguf.GGUFWriter(tmp_path / "g.gguf", "gemma")
    writer.add_head_count(2)
    q8 = gguf.GGMLQuantizationType.Q8_0
    writer.add_tensor("output_norm.weight", gguf.quants.quantize(values, q8), raw_dtype=q8)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    result = run_cli("convert", tmp_path / "g.gguf", tmp_path / "o.safetensors", "-a", "gguf-to-hf")
    assert result.code == 4
    assert "output_norm.weight" in result.stderr
    assert "--dequantize" in result.stderr
    assert not (tmp_path / "o.safetensors").exists()
    ok = run_cli("convert", tmp_path / "g.gguf", tmp_path / "o.safetensors", "-a", "gguf-to-hf",
                 "--dequantize")  # fmt: skip
    assert ok.code == 0, ok.stderr
    decoded = gguf.quants.dequantize(gguf.quants.quantize(values, q8), q8).astype(np.float32)
    got = load_file(str(tmp_path / "o.safetensors"))["model.norm.weight"]
    assert got.tobytes() == (decoded - np.float32(1)).tobytes()


def test_computed_rope_tensors_are_left_out_and_unknown_names_kept(tmp_path: Path) -> None:
    sd = _expected_gguf(_hf_llama(), gguf.MODEL_ARCH.LLAMA, permute=True)
    sd["rope_freqs.weight"] = np.ones(2, dtype=np.float32)
    sd["some.extra"] = np.zeros(3, dtype=np.float32)
    save_file(sd, str(tmp_path / "g.safetensors"))
    opts = ConvertOptions(adapters=(f"gguf-to-hf:{HEADS},{KV_HEADS}",))
    report = convert(tmp_path / "g.safetensors", tmp_path / "hf.safetensors", opts)
    got = load_file(str(tmp_path / "hf.safetensors"))
    assert "rope_freqs.weight" not in got
    assert "some.extra" in got
    assert {r.source for r in report.plan if r.target is None} == {"rope_freqs.weight"}


def test_remap_rules_see_the_renamed_names(tmp_path: Path) -> None:
    opts = ConvertOptions(adapters=("gguf-to-hf",), remap=(r"^model\.=base.",), strict=True)
    report = convert(GGUF / "ports_llama.gguf", tmp_path / "o.safetensors", opts)
    assert report.ok
    assert "base.layers.0.self_attn.q_proj.weight" in load_file(str(tmp_path / "o.safetensors"))

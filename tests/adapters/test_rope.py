"""The Llama RoPE adapters (issue 24, point 5): exact row orders, layouts, refusals.

The row orders are worked by hand from transformers' ``permute`` (``w.view(heads, d // heads //
2, 2, d_in).transpose(1, 2)``) and its inverse; ``tests/torch_tier/test_rope_torch.py`` checks
them against torch and against the rotary embeddings themselves.
"""

from __future__ import annotations

import numpy as np
import pytest

from ckptctl.adapters import AdapterContext, parse_adapter
from ckptctl.adapters.modules import Decision
from ckptctl.adapters.rope import RopePermute, needs_interleaving, permute_rows
from ckptctl.errors import SelectionError
from tests.strategies import array_entry

# one head of 8 features: Hugging Face pairs (i, i + 4), Meta pairs (2i, 2i + 1)
TO_INTERLEAVED = [0, 4, 1, 5, 2, 6, 3, 7]
TO_HALF_SPLIT = [0, 2, 4, 6, 1, 3, 5, 7]


def test_row_orders_of_one_head() -> None:
    rows = np.arange(8)
    assert permute_rows(rows, 1, interleave=True).tolist() == TO_INTERLEAVED
    assert permute_rows(rows, 1, interleave=False).tolist() == TO_HALF_SPLIT


def test_row_orders_of_two_heads_move_within_each_head() -> None:
    rows = np.arange(16)
    assert permute_rows(rows, 2, interleave=True).tolist() == [
        *TO_INTERLEAVED, *(8 + i for i in TO_INTERLEAVED)]  # fmt: skip
    matrix = np.arange(16 * 3).reshape(16, 3)
    out = permute_rows(matrix, 2, interleave=False)
    assert out[:, 0].tolist() == [3 * i for i in [*TO_HALF_SPLIT, *(8 + i for i in TO_HALF_SPLIT)]]
    np.testing.assert_array_equal(permute_rows(out, 2, interleave=True), matrix)  # inverse


def q_k(shape_q: tuple[int, int], shape_k: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return (rng.standard_normal(shape_q).astype("<f4"),
            rng.standard_normal(shape_k).astype("<f4"))  # fmt: skip


def test_query_uses_heads_and_key_the_kv_heads_on_pytorch_layout() -> None:
    q, k = q_k((16, 6), (8, 6))  # 2 heads of 8, 1 kv head of 8, d_model 6
    adapter = parse_adapter("rope-interleaved:2,1")
    out_q, actions = adapter.apply(array_entry("layers.0.self_attn.q_proj.weight", q))
    assert out_q is not None
    np.testing.assert_array_equal(out_q.load(), permute_rows(q, 2, interleave=True))
    assert [a.detail for a in actions] == ["16 features, 2 heads -> interleaved"]
    out_k, _ = adapter.apply(array_entry("layers.0.self_attn.k_proj.weight", k))
    assert out_k is not None
    np.testing.assert_array_equal(out_k.load(), k[TO_INTERLEAVED])
    v = array_entry("layers.0.self_attn.v_proj.weight", k)
    assert adapter.apply(v) == (v, ())  # untouched: the same entry


def test_after_pytorch_to_burn_the_columns_move() -> None:
    q, _ = q_k((6, 8), (1, 1))  # Burn's [in, out] wq of one head
    linear = {"attention.wq.weight": Decision("attention.wq.weight", "Linear", "rule")}
    ctx = AdapterContext(decisions=linear, before=("pytorch-to-burn",))
    out, _ = parse_adapter("rope-interleaved:1", ctx).apply(array_entry("attention.wq.weight", q))
    assert out is not None
    np.testing.assert_array_equal(out.load(), q[:, TO_INTERLEAVED])
    # and before burn-to-pytorch, which will transpose it
    ctx = AdapterContext(decisions=linear, after=("burn-to-pytorch",))
    out, _ = parse_adapter("rope-half-split:1", ctx).apply(array_entry("attention.wq.weight", q))
    assert out is not None
    np.testing.assert_array_equal(out.load(), q[:, TO_HALF_SPLIT])


def test_a_bias_moves_like_the_rows() -> None:
    bias = np.arange(8, dtype="<f4")
    out, _ = parse_adapter("rope-half-split:1").apply(array_entry("attn.wk.bias", bias))
    assert out is not None
    assert out.load().tolist() == TO_HALF_SPLIT


def test_describe_and_parse() -> None:
    assert parse_adapter("rope-interleaved:32,8").describe() == "rope-interleaved:32,8"
    assert parse_adapter("ROPE-HALF-SPLIT:4").describe() == "rope-half-split:4"
    adapter = parse_adapter("rope-interleaved:4")
    assert isinstance(adapter, RopePermute)
    assert (adapter.heads, adapter.kv_heads, adapter.interleave) == (4, 4, True)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("rope-interleaved", "adapter 'rope-interleaved' needs the attention head count"),
        ("rope-half-split:", "adapter 'rope-half-split' needs the attention head count"),
        ("rope-interleaved:0", "adapter 'rope-interleaved:0': the head counts must be one or "
         "two positive integers"),
        ("rope-interleaved:4,2,1", "adapter 'rope-interleaved:4,2,1': the head counts must be "
         "one or two positive integers"),
        ("rope-interleaved:x", "adapter 'rope-interleaved:x': the head counts must be one or "
         "two positive integers"),
        ("rope-interleaved:4,3", "adapter 'rope-interleaved:4,3': 3 key/value heads do not "
         "divide 4 heads"),
        ("rope-interleaved:2,4", "adapter 'rope-interleaved:2,4': 4 key/value heads do not "
         "divide 2 heads"),
    ],
)  # fmt: skip
def test_refused_without_a_valid_head_count(spec: str, message: str) -> None:
    with pytest.raises(SelectionError) as info:
        parse_adapter(spec)
    assert info.value.message == message
    name = spec.partition(":")[0].lower()
    assert info.value.hint == f"write {name}:HEADS or {name}:HEADS,KV_HEADS (e.g. {name}:32,8)"
    assert info.value.exit_code == 2


def test_features_that_are_not_whole_heads_are_refused() -> None:
    entry = array_entry("self_attn.q_proj.weight", np.zeros((12, 4), "<f4"))
    with pytest.raises(SelectionError) as info:
        parse_adapter("rope-interleaved:4").apply(entry)
    assert info.value.message == (
        "tensor 'self_attn.q_proj.weight': 12 output features are not 4 heads of an even size"
    )


def test_the_cli_refuses_a_missing_head_count(run_cli, tmp_path) -> None:
    from ckptctl import save_checkpoint

    src = tmp_path / "a.safetensors"
    save_checkpoint(src, [array_entry("q_proj.weight", np.zeros((4, 4), "<f4"))], {})
    result = run_cli("convert", src, tmp_path / "b.safetensors", "-a", "rope-interleaved")
    assert result.code == 2
    assert "adapter 'rope-interleaved' needs the attention head count" in result.stderr
    assert not (tmp_path / "b.safetensors").exists()


def test_the_rope_hint_counts_hugging_face_q_k_moved_to_meta_names() -> None:
    hf = "model.layers.0.self_attn."
    pairs = [(hf + "q_proj.weight", "layers.0.attention.wq.weight"),
             (hf + "k_proj.weight", "layers.0.attention.wk.weight"),
             (hf + "v_proj.weight", "layers.0.attention.wv.weight"),
             (hf + "q_proj.weight", hf + "q_proj.weight")]  # fmt: skip
    assert needs_interleaving(pairs, ("pytorch-to-burn",)) == pairs[:2]
    assert needs_interleaving(pairs, ("pytorch-to-burn", "rope-interleaved:2")) == []
    assert needs_interleaving(pairs, ("rope-half-split:2",)) == []

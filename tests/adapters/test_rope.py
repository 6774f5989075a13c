"""The Llama RoPE adapters (issue 24, point 5): exact row orders, layouts, refusals.

The row orders are worked by hand from transformers' ``permute`` (``w.view(heads, d // heads //
2, 2, d_in).transpose(1, 2)``) and its inverse; ``tests/torch_tier/test_rope_torch.py`` checks
them against torch and against the rotary embeddings themselves.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ckptctl.adapters import Action, ActionKind, AdapterContext, parse_adapter
from ckptctl.adapters.modules import Decision
from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
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
    ("spec", "keyword", "facts"),
    [
        ("rope-interleaved", "head count", []),
        ("rope-half-split:", "head count", []),
        ("rope-interleaved:0", "positive integers", []),
        ("rope-interleaved:4,2,1", "positive integers", []),
        ("rope-interleaved:x", "positive integers", []),
        ("rope-interleaved:4,3", "do not divide", ["3 key/value heads", "4 heads"]),
        ("rope-interleaved:2,4", "do not divide", ["4 key/value heads", "2 heads"]),
    ],
)
def test_refused_without_a_valid_head_count(spec: str, keyword: str, facts: list[str]) -> None:
    with pytest.raises(SelectionError, match=keyword) as info:
        parse_adapter(spec)
    assert info.value.message.startswith(f"adapter {spec.rstrip(':')!r}")
    for fact in facts:
        assert fact in info.value.message
    name = spec.partition(":")[0].lower()
    for form in (f"{name}:HEADS", f"{name}:HEADS,KV_HEADS", f"{name}:32,8"):
        assert form in str(info.value.hint)
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("name", "shape", "spec", "features", "heads"),
    [
        ("self_attn.q_proj.weight", (12, 4), "rope-interleaved:4", 12, 4),
        ("layers.0.self_attn.k_proj.weight", (6, 3), "rope-half-split:4,2", 6, 2),  # KV heads
    ],
)
def test_features_that_are_not_whole_heads_are_refused(
    name: str, shape: tuple[int, int], spec: str, features: int, heads: int
) -> None:
    entry = array_entry(name, np.zeros(shape, "<f4"))
    with pytest.raises(SelectionError, match="even size") as info:
        parse_adapter(spec).apply(entry)
    assert info.value.message.startswith(f"tensor {name!r}: {features} output features ")
    assert f"{heads} heads" in info.value.message
    assert spec in str(info.value.hint)  # the head counts to check


def test_the_cli_refuses_a_missing_head_count(run_cli, tmp_path) -> None:
    from ckptctl import save_checkpoint

    src = tmp_path / "a.safetensors"
    save_checkpoint(src, [array_entry("q_proj.weight", np.zeros((4, 4), "<f4"))], {})
    result = run_cli("convert", src, tmp_path / "b.safetensors", "-a", "rope-interleaved")
    assert result.code == 2
    assert "'rope-interleaved'" in result.stderr
    assert "head count" in result.stderr
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


@pytest.mark.parametrize(
    "spec", ["rope-interleaved", " ROPE-Half-Split:4 ", "rope-interleaved:32,8"]
)
def test_needs_interleaving_knows_a_rope_adapter_by_its_name(spec: str) -> None:
    # the name is what comes before the first ":", as parse_adapter reads it (a spec without
    # head counts names the RoPE adapter too: parse_adapter refuses it for the missing count)
    moved = [("model.layers.0.self_attn.q_proj.weight", "layers.0.attention.wq.weight")]
    assert needs_interleaving(moved, ("pytorch-to-burn",)) == moved
    assert needs_interleaving(moved, ("pytorch-to-burn", spec)) == []


def test_rope_leaves_other_parameters_and_ranks_alone() -> None:
    adapter = RopePermute(2, 2, interleave=True)
    scale = array_entry("attn.q_proj.scale", np.zeros(4, "<f4"))
    conv = array_entry("attn.q_proj.weight", np.zeros((4, 2, 2), "<f4"))
    assert adapter.apply(scale) == (scale, ())
    assert adapter.apply(conv) == (conv, ())


def test_rope_half_split_on_burn_columns() -> None:
    # Burn's [in, out] wq (3 inputs, 2 heads of 4 output features), read from a file
    name = "layers.0.attention.wq.weight"
    array = np.arange(24, dtype="<f4").reshape(3, 8)
    entry = replace(array_entry(name, array), offset=64)
    adapter = RopePermute(
        2,
        1,
        interleave=False,
        decisions={name: Decision(name, "Linear", "rule")},
        columns_if_linear=True,
    )
    out, actions = adapter.apply(entry)
    assert actions == (
        Action(
            ActionKind.CUSTOM,
            "8 features, 2 heads -> half-split",
            "RoPE q/k layout",
            "rope-half-split:2,1",
        ),
    )
    assert out is not None
    assert (out.name, out.shape, out.dtype, out.nbytes, out.offset) == (
        name,
        (3, 8),
        entry.dtype,
        96,
        None,
    )
    # half-split within each head of 4: even features first, then odd ones
    assert out.load().tobytes() == array[:, [0, 2, 1, 3, 4, 6, 5, 7]].tobytes()


@pytest.mark.parametrize(
    "adapters",
    [("rope-interleaved:2", "burn-to-pytorch"), ("burn-to-pytorch", "rope-interleaved:2")],
)
def test_the_pipeline_tells_rope_the_layout_at_its_place(adapters: tuple[str, ...]) -> None:
    # Burn's [in, out] wq: 6 inputs, 2 heads of 4 output features. Before burn-to-pytorch the
    # features are its columns, after it the rows: either order gives torch's [out, in] weight
    # with each head's half-split pairs (i, i + 2) interleaved: features 0, 2, 1, 3 per head.
    burn = array_entry(
        "layers.0.attention.wq.weight", np.arange(48, dtype=np.float32).reshape(6, 8)
    )
    options = PipelineOptions(adapters=adapters, module_types=("wq=Linear",))
    (item,), _ = run_pipeline([burn], options)
    assert item.entry is not None
    assert item.entry.shape == (8, 6)
    want = np.arange(48, dtype=np.float32).reshape(6, 8).T[[0, 2, 1, 3, 4, 6, 5, 7]]
    assert item.entry.load().tobytes() == np.ascontiguousarray(want).tobytes()

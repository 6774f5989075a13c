"""The RoPE adapters against torch (issue 24, point 5).

Ground truth: transformers' ``permute`` of ``convert_llama_weights_to_hf.py`` and its inverse
written with torch's own ops (the script is not in the installed wheel), llama-burn's
``permute_attention_weight`` the same way on Burn's ``[in, out]`` layout, and, the real test of
the direction, attention scores: Hugging Face's ``apply_rotary_pos_emb`` (``rotate_half``) on
q/k from the Hugging Face weights equal Meta's interleaved rotary embedding
(``torch.view_as_complex`` pairs, as Meta's ``llama/model.py`` ``apply_rotary_emb``) on q/k
from the weights ``rope-interleaved`` makes.
"""

from __future__ import annotations

import numpy as np
import pytest

from ckptctl.adapters import AdapterContext, parse_adapter
from ckptctl.adapters.modules import Decision
from tests.strategies import array_entry

torch = pytest.importorskip("torch")
modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")

pytestmark = pytest.mark.torch

HEADS, KV_HEADS, HEAD_DIM, D_MODEL = 4, 2, 8, 12


def hf_permute(w, n_heads: int):  # convert_llama_weights_to_hf.py permute (Meta -> HF)
    dim1, dim2 = w.shape
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def hf_unpermute(w, n_heads: int):  # its inverse (HF -> Meta)
    dim1, dim2 = w.shape
    return w.view(n_heads, 2, dim1 // n_heads // 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def burn_permute(w, n_heads: int):  # llama-burn permute_attention_weight on [in, out]
    dim1, dim2 = w.shape
    return w.reshape(dim1, n_heads, 2, dim2 // n_heads // 2).transpose(2, 3).reshape(dim1, dim2)


def adapt(spec: str, name: str, w, ctx: AdapterContext | None = None) -> np.ndarray:
    out, _ = parse_adapter(spec, ctx).apply(array_entry(name, w.numpy()))
    assert out is not None
    return np.asarray(out.load())


@pytest.fixture
def weights():
    torch.manual_seed(0)
    return (torch.randn(HEADS * HEAD_DIM, D_MODEL), torch.randn(KV_HEADS * HEAD_DIM, D_MODEL))


def test_half_split_is_transformers_permute(weights) -> None:
    q, k = weights
    spec = f"rope-half-split:{HEADS},{KV_HEADS}"
    np.testing.assert_array_equal(adapt(spec, "l.wq.weight", q), hf_permute(q, HEADS).numpy())
    np.testing.assert_array_equal(adapt(spec, "l.wk.weight", k), hf_permute(k, KV_HEADS).numpy())


def test_interleaved_is_its_inverse_and_llama_burns_load_step(weights) -> None:
    q, k = weights
    spec = f"rope-interleaved:{HEADS},{KV_HEADS}"
    got = adapt(spec, "l.q_proj.weight", q)
    np.testing.assert_array_equal(got, hf_unpermute(q, HEADS).numpy())
    np.testing.assert_array_equal(hf_permute(torch.from_numpy(got), HEADS).numpy(), q.numpy())
    # after pytorch-to-burn, on the [in, out] weight, as llama-burn does after loading
    burn = {"l.k_proj.weight": Decision("l.k_proj.weight", "Linear", "rule")}
    ctx = AdapterContext(decisions=burn, before=("pytorch-to-burn",))
    got = adapt(spec, "l.k_proj.weight", k.T.contiguous(), ctx)
    np.testing.assert_array_equal(got, burn_permute(k.T.contiguous(), KV_HEADS).numpy())


def meta_rotary(x, positions):  # Meta's llama/model.py precompute_freqs_cis + apply_rotary_emb
    freqs = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
    cis = torch.polar(torch.ones(len(positions), HEAD_DIM // 2),
                      torch.outer(positions.float(), freqs))  # fmt: skip
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * cis[:, None, :]).flatten(-2)


def test_attention_scores_agree_between_the_layouts(weights) -> None:
    q_hf, k_hf = weights
    spec = f"rope-interleaved:{HEADS},{KV_HEADS}"
    q_meta = torch.from_numpy(adapt(spec, "a.q_proj.weight", q_hf))
    k_meta = torch.from_numpy(adapt(spec, "a.k_proj.weight", k_hf))
    seq = 5
    x = torch.randn(seq, D_MODEL)
    positions = torch.arange(seq)
    config = modeling_llama.LlamaConfig(
        hidden_size=HEADS * HEAD_DIM,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
    )
    rotary = modeling_llama.LlamaRotaryEmbedding(config)
    cos, sin = rotary(x, positions[None])
    # [batch, heads, seq, head_dim] for Hugging Face; [seq, heads, head_dim] for Meta
    q = (x @ q_hf.T).view(seq, HEADS, HEAD_DIM).transpose(0, 1)[None]
    k = (x @ k_hf.T).view(seq, KV_HEADS, HEAD_DIM).transpose(0, 1)[None]
    q, k = modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)
    k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
    scores_hf = q[0] @ k[0].transpose(-1, -2)
    qm = meta_rotary((x @ q_meta.T).view(seq, HEADS, HEAD_DIM), positions).transpose(0, 1)
    km = meta_rotary((x @ k_meta.T).view(seq, KV_HEADS, HEAD_DIM), positions).transpose(0, 1)
    km = km.repeat_interleave(HEADS // KV_HEADS, dim=0)
    scores_meta = qm @ km.transpose(-1, -2)
    torch.testing.assert_close(scores_meta, scores_hf, rtol=1e-5, atol=1e-5)
    # and the untouched weights in Meta's rotary give other scores: the permutation matters
    qw = meta_rotary((x @ q_hf.T).view(seq, HEADS, HEAD_DIM), positions).transpose(0, 1)
    kw = meta_rotary((x @ k_hf.T).view(seq, KV_HEADS, HEAD_DIM), positions).transpose(0, 1)
    wrong = qw @ kw.repeat_interleave(HEADS // KV_HEADS, dim=0).transpose(-1, -2)
    assert not torch.allclose(wrong, scores_hf, atol=1e-3)

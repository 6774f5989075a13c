"""The names producers give one module role, as data (issue 49).

Each row is one role and the module-path endings that hold it, each with the source file that
defines it there (repository, path and commit, or the released package read). Meta's Llama
names the SwiGLU projections ``w1``/``w2``/``w3``, Hugging Face ``gate_proj``/``down_proj``/
``up_proj``, Burn's ``SwiGlu`` ``linear_inner`` (the gated branch) and ``linear_outer``; ``w1``
and ``w3`` have one shape, so only such a table tells them apart.

``_structure.match_modules`` consults it only between candidates of equal shapes that the
names and blocks leave open: a target module and exactly one of its candidates end in
spellings of one row. An ending is matched segment by segment (``mlp.gate_proj`` ends
``model.layers.0.mlp.gate_proj``, not ``model.layers.0.mlp.gate_proj2``). Where no row
decides, the pair stays ambiguous: the table is never a similarity guess.
"""

from __future__ import annotations

from dataclasses import dataclass

# where each spelling comes from
_META = "meta-llama/llama-models models/llama3/model.py (llama-models 0.3.0)"
_HF_LLAMA = "huggingface/transformers src/transformers/models/llama/modeling_llama.py@5dd4a63"
_HF_T5 = "huggingface/transformers src/transformers/models/t5/modeling_t5.py@6b8b757"
_HF_BERT = "huggingface/transformers src/transformers/models/bert/modeling_bert.py@8ec5810"
_BURN_SWIGLU = "tracel-ai/burn crates/burn-core/src/nn/swiglu.rs@205f544"
_BURN_MHA = "tracel-ai/burn crates/burn-core/src/nn/attention/mha.rs@9f14a16"
_LLAMA_BURN = "tracel-ai/models llama-burn/src/transformer.rs@16ee7e4"


@dataclass(frozen=True)
class RoleAlias:
    """One role and the module-path endings that hold it.

    Attributes:
        role: what the module does (``SwiGLU gated branch``).
        spellings: ``(ending, source file)`` for each producer's name of it.
    """

    role: str
    spellings: tuple[tuple[str, str], ...]


ROLE_ALIASES: tuple[RoleAlias, ...] = (
    # Meta FeedForward: w2(silu(w1(x)) * w3(x)); LlamaMLP: down_proj(act(gate_proj(x)) *
    # up_proj(x)); T5DenseGatedActDense: wo(act(wi_0(x)) * wi_1(x)); Burn SwiGlu:
    # silu(linear_inner(x)) * linear_outer(x), llama-burn FeedForward { swiglu, w2 }
    RoleAlias("SwiGLU gated branch", (
        ("feed_forward.w1", _META), ("mlp.gate_proj", _HF_LLAMA),
        ("DenseReluDense.wi_0", _HF_T5), ("swiglu.linear_inner", _BURN_SWIGLU),
    )),
    RoleAlias("SwiGLU linear branch", (
        ("feed_forward.w3", _META), ("mlp.up_proj", _HF_LLAMA),
        ("DenseReluDense.wi_1", _HF_T5), ("swiglu.linear_outer", _BURN_SWIGLU),
    )),
    RoleAlias("SwiGLU down projection", (
        ("feed_forward.w2", _META), ("mlp.down_proj", _HF_LLAMA),
        ("DenseReluDense.wo", _HF_T5), ("feed_forward.w2", _LLAMA_BURN),
    )),
    # Meta Attention { wq, wk, wv, wo }; LlamaAttention { q_proj, k_proj, v_proj, o_proj };
    # BertSelfAttention { query, key, value }, BertSelfOutput { dense }; Burn MultiHeadAttention
    # { query, key, value, output }; llama-burn MultiHeadAttention { wq, wk, wv, wo }
    RoleAlias("attention query", (
        ("attention.wq", _META), ("self_attn.q_proj", _HF_LLAMA),
        ("attention.self.query", _HF_BERT), ("mha.query", _BURN_MHA), ("attention.wq", _LLAMA_BURN),
    )),
    RoleAlias("attention key", (
        ("attention.wk", _META), ("self_attn.k_proj", _HF_LLAMA),
        ("attention.self.key", _HF_BERT), ("mha.key", _BURN_MHA), ("attention.wk", _LLAMA_BURN),
    )),
    RoleAlias("attention value", (
        ("attention.wv", _META), ("self_attn.v_proj", _HF_LLAMA),
        ("attention.self.value", _HF_BERT), ("mha.value", _BURN_MHA), ("attention.wv", _LLAMA_BURN),
    )),
    RoleAlias("attention output", (
        ("attention.wo", _META), ("self_attn.o_proj", _HF_LLAMA),
        ("attention.output.dense", _HF_BERT), ("mha.output", _BURN_MHA),
        ("attention.wo", _LLAMA_BURN),
    )),
    # Meta TransformerBlock: h = x + attention(attention_norm(x)); out = h +
    # feed_forward(ffn_norm(h)); LlamaDecoderLayer: input_layernorm before self_attn,
    # post_attention_layernorm before mlp; llama-burn TransformerBlock likewise
    RoleAlias("norm before attention", (
        ("attention_norm", _META), ("input_layernorm", _HF_LLAMA), ("attention_norm", _LLAMA_BURN),
    )),
    RoleAlias("norm before the feed-forward", (
        ("ffn_norm", _META), ("post_attention_layernorm", _HF_LLAMA), ("ffn_norm", _LLAMA_BURN),
    )),
)  # fmt: skip


def role_of(path: str) -> RoleAlias | None:
    """The row one of whose endings ends ``path`` segment by segment, or None."""
    for row in ROLE_ALIASES:
        if any(_ends(path, ending) for ending, _ in row.spellings):
            return row
    return None


def describe(row: RoleAlias, source: str, target: str) -> str:
    """Evidence for a pair the row decided: both endings, the role and their source files."""
    spelled = [(e, f) for e, f in row.spellings if _ends(source, e) or _ends(target, e)]
    files = sorted({f for _, f in spelled})
    endings = " and ".join(dict.fromkeys(f"'{e}'" for e, _ in spelled))
    return f"role table: {endings} are the {row.role} ({'; '.join(files)})"


def _ends(path: str, ending: str) -> bool:
    tail = ending.split(".")
    return path.split(".")[-len(tail) :] == tail

"""llama.cpp's GGUF tensor names against Hugging Face transformers' names, as data.

Rows are facts read from llama.cpp's own sources; ``ckptctl.adapters.gguf`` applies them.
``{bid}`` stands for the block number, as in gguf-py's ``TENSOR_NAMES``. A tensor's last
component (``.weight``, ``.bias``) is kept as it is, as ``TensorNameMap.get_name`` does with
``try_suffixes``.
"""

from __future__ import annotations

#: Every architecture the rows below support.
ALL = ("llama", "qwen2", "qwen3", "phi3")
#: Those with separate gate and up projections.
GATE_UP = ("llama", "qwen2", "qwen3")
#: Those with a per-head RMSNorm on q and k (``Qwen3Attention``: ``q_norm``, ``k_norm``).
QK_NORM = ("qwen3",)

#: (GGUF name, Hugging Face name, architectures). GGUF names: gguf-py 0.19.0
#: ``gguf/constants.py`` ``TENSOR_NAMES`` (restricted by ``MODEL_TENSORS[arch]``); the Hugging
#: Face name of each: the ``transformers`` spelling among its ``TensorNameMap`` variants
#: (``gguf/tensor_mapping.py`` ``mappings_cfg`` / ``block_mappings_cfg``), the one
#: ``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM`` and
#: ``Phi3ForCausalLM`` save. A GGUF name with two rows has a different Hugging Face name per
#: architecture.
NAME_ROWS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("token_embd", "model.embed_tokens", ALL),  # MODEL_TENSOR.TOKEN_EMBD
    ("output_norm", "model.norm", ALL),  # OUTPUT_NORM
    ("output", "lm_head", ALL),  # OUTPUT (absent when tied to token_embd)
    ("blk.{bid}.attn_norm", "model.layers.{bid}.input_layernorm", ALL),  # ATTN_NORM
    ("blk.{bid}.attn_q", "model.layers.{bid}.self_attn.q_proj", ALL),  # ATTN_Q
    ("blk.{bid}.attn_k", "model.layers.{bid}.self_attn.k_proj", ALL),  # ATTN_K
    ("blk.{bid}.attn_v", "model.layers.{bid}.self_attn.v_proj", ALL),  # ATTN_V
    ("blk.{bid}.attn_output", "model.layers.{bid}.self_attn.o_proj", ALL),  # ATTN_OUT
    ("blk.{bid}.attn_q_norm", "model.layers.{bid}.self_attn.q_norm", QK_NORM),  # ATTN_Q_NORM
    ("blk.{bid}.attn_k_norm", "model.layers.{bid}.self_attn.k_norm", QK_NORM),  # ATTN_K_NORM
    ("blk.{bid}.attn_qkv", "model.layers.{bid}.self_attn.qkv_proj", ("phi3",)),  # ATTN_QKV
    ("blk.{bid}.ffn_norm", "model.layers.{bid}.post_attention_layernorm", ALL),  # FFN_NORM
    ("blk.{bid}.ffn_gate", "model.layers.{bid}.mlp.gate_proj", GATE_UP),  # FFN_GATE
    ("blk.{bid}.ffn_up", "model.layers.{bid}.mlp.up_proj", GATE_UP),  # FFN_UP
    # Phi-3 keeps gate and up fused; GGUF stores the fused weight as ffn_up (no ffn_gate)
    ("blk.{bid}.ffn_up", "model.layers.{bid}.mlp.gate_up_proj", ("phi3",)),  # FFN_UP
    ("blk.{bid}.ffn_down", "model.layers.{bid}.mlp.down_proj", ALL),  # FFN_DOWN
)

#: GGUF tensors ``convert_hf_to_gguf.py`` computes from ``config.json`` and no Hugging Face
#: checkpoint holds (``LlamaModel.generate_extra_tensors``: ROPE_FREQS for Llama 3's rope
#: scaling; ``Phi3MiniModel.generate_extra_tensors``: ROPE_FACTORS_LONG/SHORT): ``gguf-to-hf``
#: leaves them out.
COMPUTED = (
    ("rope_freqs", ("llama",)),
    ("rope_factors_long", ("phi3",)),
    ("rope_factors_short", ("phi3",)),
)

#: Whether ``convert_hf_to_gguf.py`` reorders the q/k projection rows of an architecture:
#: ``LlamaModel`` has ``undo_permute = True`` and its ``modify_tensors`` applies
#: ``permute(data, n_head, n_head)`` to ``q_proj`` and ``permute(data, n_head, n_kv_head)`` to
#: ``k_proj`` (weights and biases); ``Qwen2Model``, ``Qwen3Model`` (a ``Qwen2Model``) and
#: ``Phi3MiniModel`` change no values (llama.cpp master, 2026: ``conversion/llama.py``,
#: ``conversion/qwen.py``, ``convert_hf_to_gguf.py``).
PERMUTES_QK = {"llama": True, "qwen2": False, "qwen3": False, "phi3": False}

#: Architectures of the family whose conversion changes values beyond a reordering:
#: ``GemmaModel``/``Gemma2Model``/``Gemma3Model.modify_tensors`` store every ``norm.weight``
#: plus 1 (Gemma's RMSNorm computes ``x * (1 + w)``), which is not exactly reversible in floats.
REFUSED = {
    "gemma": "stores every norm weight plus 1 (GemmaModel.modify_tensors)",
    "gemma2": "stores every norm weight plus 1 (Gemma2Model.modify_tensors)",
    "gemma3": "stores every norm weight plus 1 (Gemma3Model.modify_tensors)",
}

#: ``config.json`` ``architectures[0]`` -> GGUF architecture, from the ``ModelBase.register``
#: lists in ``convert_hf_to_gguf.py`` (``MistralForCausalLM`` converts as ``llama``).
ARCH_OF_HF_CLASS = {
    "LlamaForCausalLM": "llama",
    "LLaMAForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Phi3ForCausalLM": "phi3",
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
}

#: ``config.json`` ``model_type`` -> GGUF architecture, when ``architectures`` is absent.
ARCH_OF_MODEL_TYPE = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "phi3": "phi3",
    "gemma": "gemma",
    "gemma2": "gemma2",
    "gemma3_text": "gemma3",
}

"""llama.cpp's GGUF tensor names against Hugging Face transformers' names, as data.

Rows are facts read from llama.cpp's own sources; ``ckptctl.adapters.gguf`` applies them.
``{bid}`` stands for the block number, as in gguf-py's ``TENSOR_NAMES``. A tensor's last
component (``.weight``, ``.bias``) is kept as it is, as ``TensorNameMap.get_name`` does with
``try_suffixes``.
"""

from __future__ import annotations

#: Every architecture the rows below support (Mixtral converts as ``llama``).
ALL = ("llama", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3", "qwen2moe", "qwen3moe")
#: Those with a dense MLP (the mixtures of experts have experts instead).
DENSE = ("llama", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3")
#: Those with separate gate and up projections.
GATE_UP = ("llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3")
#: Those with a per-head RMSNorm on q and k (``Qwen3Attention``, ``Gemma3Attention``: ``q_norm``,
#: ``k_norm``).
QK_NORM = ("qwen3", "gemma3", "qwen3moe")
#: Those whose ``post_attention_layernorm`` is the norm before the MLP (FFN_NORM).
FFN_NORM_AFTER_ATTN = ("llama", "qwen2", "qwen3", "phi3", "gemma", "qwen2moe", "qwen3moe")
#: Gemma 2 and 3: a norm after attention and after the MLP (ATTN_POST_NORM, FFN_POST_NORM) and
#: ``pre_feedforward_layernorm`` before the MLP (FFN_PRE_NORM, whose GGUF name is ``ffn_norm``).
SANDWICH = ("gemma2", "gemma3")
#: Those whose ``lm_head`` llama.cpp writes as ``output``: ``GemmaModel`` and ``Gemma2Model``
#: skip ``lm_head.weight`` (``filter_tensors``; llama.cpp ties the output to ``token_embd``).
OUTPUT = ("llama", "qwen2", "qwen3", "phi3", "gemma3", "qwen2moe", "qwen3moe")
#: Qwen's mixtures of experts (``Qwen2MoeModel``, ``Qwen3MoeModel``: ``conversion/qwen.py``).
QWEN_MOE = ("qwen2moe", "qwen3moe")
#: Mixtral (``MixtralForCausalLM``), which ``convert_hf_to_gguf.py`` converts as ``llama``.
MIXTRAL = ("llama",)

NAME_ROWS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("token_embd", "model.embed_tokens", ALL),  # MODEL_TENSOR.TOKEN_EMBD
    ("output_norm", "model.norm", ALL),  # OUTPUT_NORM
    ("output", "lm_head", OUTPUT),  # OUTPUT (absent when tied to token_embd)
    ("blk.{bid}.attn_norm", "model.layers.{bid}.input_layernorm", ALL),  # ATTN_NORM
    ("blk.{bid}.attn_q", "model.layers.{bid}.self_attn.q_proj", ALL),  # ATTN_Q
    ("blk.{bid}.attn_k", "model.layers.{bid}.self_attn.k_proj", ALL),  # ATTN_K
    ("blk.{bid}.attn_v", "model.layers.{bid}.self_attn.v_proj", ALL),  # ATTN_V
    ("blk.{bid}.attn_output", "model.layers.{bid}.self_attn.o_proj", ALL),  # ATTN_OUT
    ("blk.{bid}.attn_q_norm", "model.layers.{bid}.self_attn.q_norm", QK_NORM),  # ATTN_Q_NORM
    ("blk.{bid}.attn_k_norm", "model.layers.{bid}.self_attn.k_norm", QK_NORM),  # ATTN_K_NORM
    ("blk.{bid}.attn_qkv", "model.layers.{bid}.self_attn.qkv_proj", ("phi3",)),  # ATTN_QKV
    # FFN_NORM; Gemma 2/3: FFN_PRE_NORM (same GGUF name), ATTN_POST_NORM, FFN_POST_NORM
    ("blk.{bid}.ffn_norm", "model.layers.{bid}.post_attention_layernorm", FFN_NORM_AFTER_ATTN),
    ("blk.{bid}.ffn_norm", "model.layers.{bid}.pre_feedforward_layernorm", SANDWICH),
    ("blk.{bid}.post_attention_norm", "model.layers.{bid}.post_attention_layernorm", SANDWICH),
    ("blk.{bid}.post_ffw_norm", "model.layers.{bid}.post_feedforward_layernorm", SANDWICH),
    ("blk.{bid}.ffn_gate", "model.layers.{bid}.mlp.gate_proj", GATE_UP),  # FFN_GATE
    ("blk.{bid}.ffn_up", "model.layers.{bid}.mlp.up_proj", GATE_UP),  # FFN_UP
    # Phi-3 keeps gate and up fused; GGUF stores the fused weight as ffn_up (no ffn_gate)
    ("blk.{bid}.ffn_up", "model.layers.{bid}.mlp.gate_up_proj", ("phi3",)),  # FFN_UP
    ("blk.{bid}.ffn_down", "model.layers.{bid}.mlp.down_proj", DENSE),  # FFN_DOWN
    # Mixtures of experts: the router (FFN_GATE_INP) and Qwen2-MoE's shared expert (*_SHEXP)
    ("blk.{bid}.ffn_gate_inp", "model.layers.{bid}.block_sparse_moe.gate", MIXTRAL),
    ("blk.{bid}.ffn_gate_inp", "model.layers.{bid}.mlp.gate", QWEN_MOE),
    ("blk.{bid}.ffn_gate_inp_shexp", "model.layers.{bid}.mlp.shared_expert_gate", ("qwen2moe",)),
    ("blk.{bid}.ffn_gate_shexp", "model.layers.{bid}.mlp.shared_expert.gate_proj", ("qwen2moe",)),
    ("blk.{bid}.ffn_up_shexp", "model.layers.{bid}.mlp.shared_expert.up_proj", ("qwen2moe",)),
    ("blk.{bid}.ffn_down_shexp", "model.layers.{bid}.mlp.shared_expert.down_proj", ("qwen2moe",)),
    # The experts (FFN_GATE_EXP, FFN_UP_EXP, FFN_DOWN_EXP): llama.cpp stacks a layer's experts
    # into one tensor whose first axis is the expert (``LlamaModel``/``Qwen2MoeModel``
    # ``.modify_tensors``: ``torch.stack(datas, dim=0)``, ``xid`` in order); ``{xid}`` is one
    # expert's slice of it, which ``gguf.split_experts`` cuts and ``gguf.stack_experts`` stacks.
    ("blk.{bid}.ffn_gate_exps.{xid}", "model.layers.{bid}.block_sparse_moe.experts.{xid}.w1",
     MIXTRAL),
    ("blk.{bid}.ffn_down_exps.{xid}", "model.layers.{bid}.block_sparse_moe.experts.{xid}.w2",
     MIXTRAL),
    ("blk.{bid}.ffn_up_exps.{xid}", "model.layers.{bid}.block_sparse_moe.experts.{xid}.w3",
     MIXTRAL),
    ("blk.{bid}.ffn_gate_exps.{xid}", "model.layers.{bid}.mlp.experts.{xid}.gate_proj", QWEN_MOE),
    ("blk.{bid}.ffn_up_exps.{xid}", "model.layers.{bid}.mlp.experts.{xid}.up_proj", QWEN_MOE),
    ("blk.{bid}.ffn_down_exps.{xid}", "model.layers.{bid}.mlp.experts.{xid}.down_proj", QWEN_MOE),
)  # fmt: skip

#: llama.cpp's stacked expert modules (first axis: the expert).
EXPERT_MODULES = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")

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
#: ``GemmaModel``, ``Gemma2Model``, ``Gemma3Model`` (``conversion/gemma.py``), ``Qwen2MoeModel``
#: and ``Qwen3MoeModel`` permute nothing; Mixtral is a ``LlamaModel`` and permutes.
PERMUTES_QK = {
    "llama": True,
    "qwen2": False,
    "qwen3": False,
    "phi3": False,
    "gemma": False,
    "gemma2": False,
    "gemma3": False,
    "qwen2moe": False,
    "qwen3moe": False,
}

#: Hugging Face tensors ``convert_hf_to_gguf.py`` skips (``filter_tensors``): ``hf-to-gguf``
#: leaves them out.
SKIPPED = (("lm_head", ("gemma", "gemma2")),)  # GemmaModel, Gemma2Model.filter_tensors

#: Architectures whose every Hugging Face ``*norm.weight`` llama.cpp stores plus 1 (Gemma's
#: RMSNorm computes ``x * (1 + w)``), and where: ``GemmaModel``/``Gemma2Model.modify_tensors``
#: (``data_torch + 1``), ``Gemma3Model.norm_shift`` (``conversion/gemma.py``). The sum is computed
#: in the tensor's torch dtype after ``prepare_tensors`` turned every dtype but F16 and F32 into
#: F32 (``conversion/base.py``), and written as F32 (``n_dims <= 1`` or a ``_norm.weight``).
NORM_PLUS_ONE = {
    "gemma": "GemmaModel.modify_tensors",
    "gemma2": "Gemma2Model.modify_tensors",
    "gemma3": "Gemma3Model.norm_shift",
}

#: ``config.json`` ``architectures[0]`` -> GGUF architecture, from the ``ModelBase.register``
#: lists in ``convert_hf_to_gguf.py`` (``MistralForCausalLM`` and ``MixtralForCausalLM`` convert
#: as ``llama``: ``conversion/llama.py``).
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
    "MixtralForCausalLM": "llama",
    "Qwen2MoeForCausalLM": "qwen2moe",
    "Qwen3MoeForCausalLM": "qwen3moe",
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
    "mixtral": "llama",
    "qwen2_moe": "qwen2moe",
    "qwen3_moe": "qwen3moe",
}

"""The model architectures llama.cpp knows, as data (``general.architecture`` values).

gguf-py 0.19.0, ``gguf/constants.py`` ``MODEL_ARCH_NAMES`` (the values), which mirrors
``LLM_ARCH_NAMES`` in llama.cpp's ``src/llama-arch.cpp``. ``verify``'s ``gguf-layout`` check
warns about a file whose architecture is not among them: llama.cpp refuses to load it
("unknown model architecture"). Regenerate from a newer gguf-py when llama.cpp adds models.
"""

from __future__ import annotations

#: Every ``general.architecture`` gguf-py 0.19.0 names (126).
KNOWN_ARCHITECTURES = frozenset({
    "afmoe", "apertus", "arcee", "arctic", "arwkv7", "baichuan", "bailingmoe", "bailingmoe2",
    "bert", "bitnet", "bloom", "chameleon", "chatglm", "clip", "codeshell", "cogvlm", "cohere2",
    "command-r", "dbrx", "deci", "deepseek", "deepseek2", "deepseek2-ocr", "dots1", "dream",
    "ernie4_5", "ernie4_5-moe", "eurobert", "exaone", "exaone-moe", "exaone4", "falcon",
    "falcon-h1", "gemma", "gemma-embedding", "gemma2", "gemma3", "gemma3n", "gemma4", "glm-dsa",
    "glm4", "glm4moe", "gpt-oss", "gpt2", "gptj", "gptneox", "granite", "granitehybrid",
    "granitemoe", "grok", "grovemoe", "hunyuan-dense", "hunyuan-moe", "hunyuan_vl", "internlm2",
    "jais", "jais2", "jamba", "jina-bert-v2", "jina-bert-v3", "kimi-linear", "lfm2", "lfm2moe",
    "llada", "llada-moe", "llama", "llama-embed", "llama4", "maincoder", "mamba", "mamba2",
    "mimo2", "minicpm", "minicpm3", "minimax-m2", "mistral3", "mistral4", "modern-bert", "mpt",
    "nemotron", "nemotron_h", "nemotron_h_moe", "neo-bert", "nomic-bert", "nomic-bert-moe", "olmo",
    "olmo2", "olmoe", "openelm", "orion", "paddleocr", "pangu-embedded", "phi2", "phi3", "phimoe",
    "plamo", "plamo2", "plamo3", "plm", "qwen", "qwen2", "qwen2moe", "qwen2vl", "qwen3", "qwen35",
    "qwen35moe", "qwen3moe", "qwen3next", "qwen3vl", "qwen3vlmoe", "refact", "rnd1", "rwkv6",
    "rwkv6qwen2", "rwkv7", "seed_oss", "smallthinker", "smollm3", "stablelm", "starcoder",
    "starcoder2", "step35", "t5", "t5encoder", "wavtokenizer-dec", "xverse",
})  # fmt: skip

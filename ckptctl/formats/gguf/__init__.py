"""llama.cpp's GGUF format (work in progress: the type tables in ``_ggml``; issue 45)."""

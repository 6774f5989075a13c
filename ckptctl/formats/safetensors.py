"""safetensors format (being written)."""

from __future__ import annotations

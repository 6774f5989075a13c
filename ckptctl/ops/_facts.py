"""What the GGUF name adapters need to know about a source model, read once per command.

``gguf-to-hf``/``hf-to-gguf`` (``ckptctl.adapters.gguf``) take the architecture and head counts
from a GGUF source's key/values, else from the ``config.json`` beside a local source (a
Hugging Face model folder). Adapters do no I/O: this module reads the file for them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ckptctl.adapters.gguf import GGUF_ADAPTERS, ModelFacts, facts_from_config, facts_from_gguf
from ckptctl.errors import InputError

if TYPE_CHECKING:
    from ckptctl.model import Checkpoint

#: A Hugging Face config.json is a few KiB; a larger one is not read.
MAX_CONFIG_BYTES = 1 << 20


def model_facts(
    ckpt: Checkpoint, src: str | os.PathLike[str], adapters: tuple[str, ...]
) -> ModelFacts | None:
    """The source's architecture and head counts when a GGUF name adapter is asked for.

    Raises:
        InputError: the ``config.json`` beside the source is too large or not a JSON object.
    """
    if not any(a.strip().lower().partition(":")[0] in GGUF_ADAPTERS for a in adapters):
        return None
    if ckpt.format == "gguf":
        return facts_from_gguf(ckpt.metadata, f"{os.fspath(src)} (GGUF metadata)")
    found = read_config(src)
    if found is None:
        return ModelFacts(origin=f"{os.fspath(src)} (no config.json beside it)")
    data, config = found
    return facts_from_config(data, config)


def read_config(src: str | os.PathLike[str]) -> tuple[dict[str, object], str] | None:
    """The ``config.json`` of a Hugging Face model folder ``src`` (or beside the file ``src``)
    and its path; None for a URL or when there is none.

    Raises:
        InputError: the file is too large or not a JSON object.
    """
    path = Path(src)
    config = (path if path.is_dir() else path.parent) / "config.json"
    if "://" in os.fspath(src) or not config.is_file():
        return None
    size = config.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise InputError(
            f"{size} bytes, more than the {MAX_CONFIG_BYTES} a config.json may have", path=config
        )
    try:
        data = json.loads(config.read_bytes())
    except (OSError, ValueError) as exc:
        raise InputError(f"not readable as JSON: {exc}", path=config) from None
    if not isinstance(data, dict):
        raise InputError("not a JSON object", path=config)
    return data, os.fspath(config)

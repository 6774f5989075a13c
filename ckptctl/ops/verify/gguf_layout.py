"""``gguf-layout``: GGUF files only, what gguf.cpp (llama.cpp's reader) would refuse in each
file, and the ``general.architecture`` key.

Sizes against types and shapes, alignment and overlaps are the reader's own checks
(``readable``); here are the rules only llama.cpp enforces.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ckptctl.formats import read_layout
from ckptctl.ops.verify._check import MESSAGE_LIMIT, Check, Phase, more
from ckptctl.report.verify import Finding, Status

if TYPE_CHECKING:
    from ckptctl.model import JSONValue
    from ckptctl.ops.verify._check import Subject


def gguf_layout(subject: Subject) -> Finding | None:
    """The layout as llama.cpp requires it (None: not a GGUF file)."""
    ckpt = subject.checkpoint
    if ckpt.format != "gguf":
        return None
    files = [ckpt.path]
    if ckpt.sharding is not None:
        folder = os.path.dirname(ckpt.sharding.index)
        files = [os.path.join(folder, name) for name in ckpt.sharding.shards]
    problems: list[str] = []
    alignment = None
    for name in files:
        facts = read_layout(name).facts
        alignment = facts["alignment"]
        prefix = f"{os.path.basename(name)}: " if len(files) > 1 else ""
        problems += [prefix + p for p in facts["llama_cpp_problems"]]
    details: dict[str, JSONValue] = {"problems": problems}
    if problems:
        return Finding(
            "gguf-layout",
            Status.FAIL,
            "llama.cpp would refuse it: " + "; ".join(problems[:MESSAGE_LIMIT])
            + more(len(problems)),
            "gguf-py reads it, llama.cpp does not; re-save it with llama.cpp's tools "
            "(gguf-py's GGUFWriter lays tensors out as gguf.cpp requires)",
            details=details,
        )  # fmt: skip
    arch = ckpt.metadata.get("general.architecture")
    details["architecture"] = arch
    if arch is None:
        return Finding(
            "gguf-layout",
            Status.WARN,
            "no general.architecture key: llama.cpp cannot load it as a model",
            details=details,
        )
    from ckptctl.formats.gguf._arches import KNOWN_ARCHITECTURES

    if arch not in KNOWN_ARCHITECTURES:
        return Finding(
            "gguf-layout",
            Status.WARN,
            f"architecture {arch!r} is not one llama.cpp knows (gguf-py 0.19.0's "
            "MODEL_ARCH_NAMES): llama.cpp refuses to load it as a model",
            "check general.architecture, or use a llama.cpp build that supports the model",
            details=details,
        )
    return Finding(
        "gguf-layout",
        Status.OK,
        f"architecture {arch!r}; tensors laid out as llama.cpp requires (offsets back to back, "
        f"{alignment}-byte alignment, sizes matching types and shapes)",
        details=details,
    )


CHECK = Check(
    "gguf-layout",
    80,
    Phase.CHECKPOINT,
    "llama.cpp's GGUF reader accepts the file's layout",
    "gguf.cpp requires every tensor offset to be the running padded size (tensors back to "
    "back in header order, each padded to general.alignment), known tensor types and names "
    "shorter than 64 bytes, where gguf-py is more lenient; a model also needs "
    "general.architecture.",
    run=gguf_layout,
)

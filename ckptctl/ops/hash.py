"""``ckptctl hash``: a checkpoint's manifest of tensor digests (``ops/manifest.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.formats import open_checkpoint
from ckptctl.ops._select import compile_regex, select_state_key
from ckptctl.ops.manifest import hash_entries
from ckptctl.report.manifest import HashReport

if TYPE_CHECKING:
    import os

    from ckptctl.model import Progress


def hash_tensors(
    path: str | os.PathLike[str],
    *,
    state_key: str | None = None,
    pattern: str | None = None,
    jobs: int = 1,
    progress: Progress | None = None,
) -> HashReport:
    """Digest every tensor of a checkpoint (below ``state_key``, matching ``pattern``).

    Args:
        path: the checkpoint (any format, a directory or a URL).
        state_key: descend into this dotted key and strip it from names.
        pattern: only tensors whose name matches this regex (Rust dialect, searched).
        jobs: tensors hashed at once.
        progress: called as ``progress(nbytes, total)`` as each tensor is hashed.

    Returns:
        A :class:`~ckptctl.report.manifest.HashReport`; its tensors are the manifest.

    Raises:
        InputError: unreadable, unknown, corrupt or unsafe input.
        SelectionError: bad regex or nothing under ``state_key``.

    Example:
        >>> report = hash_tensors("model.safetensors")  # doctest: +SKIP
        >>> report.tensors[0].digest  # doctest: +SKIP
        'sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef'
    """
    regex = compile_regex(pattern, "pattern") if pattern is not None else None
    with open_checkpoint(path) as ckpt:
        entries = select_state_key(ckpt.entries(), state_key, ckpt)
        if regex is not None:
            entries = [e for e in entries if regex.search(e.name)]
        return HashReport(ckpt.path, ckpt.format, tuple(hash_entries(entries, jobs, progress)))

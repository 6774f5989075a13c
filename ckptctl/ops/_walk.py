"""The files ``verify DIR`` checks: a directory's files, recursively, in sorted order (issue 28).

A directory that *is* a checkpoint keeps being one: a directory with one ``*.index.json`` at its
top opens as that sharded checkpoint (``formats.resolve_path``), as before, and so does a
torch.distributed.checkpoint directory (a ``.metadata`` file) and a DeepSpeed save (``latest``,
``global_step*/``); below a walked directory, the ``.distcp`` files beside a ``.metadata`` are
checked through it, and a DeepSpeed save found there is one checkpoint too (it comes after the
files of its parent). Any other directory is walked: every file below it, sorted by name at each
level, files before subdirectories.

Hidden directories (``.git``, ``.venv``, ...) are not entered and symbolic links to
directories are not followed (no cycles). In a walked directory that holds ``*.index.json``
files, the shards an index names are checked through the index, not one by one again.

Which walked files are checkpoints is decided by content, like everywhere else, and by name
(issue 44): a file whose name says checkpoint (``formats.CHECKPOINT_NAMES``: ``*.safetensors``,
``*.pt``, ``*.gguf``, ...) is always checked, so an empty one, random bytes or a git-lfs pointer
fails as it does when named; ``verify`` skips (and lists) only the files with other names that
no reader accepts and that hold no pickle (configs, tokenizers, READMEs).
"""

from __future__ import annotations

import json
import os
import re
from typing import NamedTuple

from ckptctl.formats import DCP_METADATA, is_checkpoint_name

#: Largest index file read to learn which shards it covers.
MAX_INDEX_BYTES = 64 << 20


class Target(NamedTuple):
    """One file to check; ``top``: the directory given whose walk found it (a file that is no
    checkpoint may then be skipped), None for a path checked as given."""

    path: str
    top: str | None = None

    @property
    def walked(self) -> bool:
        """Found by walking a directory."""
        return self.top is not None

    @property
    def skippable(self) -> bool:
        """Skipped, not failed, when no reader accepts it and it holds no pickle: found by a
        walk, under a name that does not say checkpoint."""
        return self.walked and not is_checkpoint_name(self.path)


def expand(paths: list[str]) -> list[Target]:
    """Every file to check, in order: a path as given, or the files of a walked directory (a
    directory with no file at all is checked as given: ``resolve_path`` says it is empty)."""
    out: list[Target] = []
    for path in paths:
        if "://" in path or not os.path.isdir(path) or _is_checkpoint_dir(path):
            out.append(Target(path))
        else:
            out.extend(_walk(path) or [Target(path)])
    return out


def _is_checkpoint_dir(path: str) -> bool:
    """A directory that opens as one checkpoint: sharded, DCP, or a DeepSpeed save."""
    from ckptctl.formats.deepspeed import is_deepspeed_dir

    return _is_sharded_dir(path) or is_deepspeed_dir(path)


def _is_sharded_dir(path: str) -> bool:
    try:
        names = os.listdir(path)
    except OSError:
        return True  # resolve_path says why it cannot be listed
    if DCP_METADATA in names and os.path.isfile(os.path.join(path, DCP_METADATA)):
        return True  # a torch.distributed.checkpoint directory opens as one checkpoint
    indexes = [n for n in names if n.endswith(".index.json")]
    return len(indexes) == 1 and os.path.isfile(os.path.join(path, indexes[0]))


def _walk(top: str) -> list[Target]:
    out: list[Target] = []

    def unreadable(exc: OSError) -> None:  # listed as given: verify reports why it failed
        out.append(Target(exc.filename or top))

    from ckptctl.formats.deepspeed import is_deepspeed_dir

    for root, dirs, files in os.walk(top, onerror=unreadable):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        saves = [d for d in dirs if is_deepspeed_dir(os.path.join(root, d))]
        dirs[:] = [d for d in dirs if d not in saves]  # a DeepSpeed save is one checkpoint
        names = sorted(files)
        covered: set[str] = set()
        if DCP_METADATA in names:  # a DCP directory below: its rank files through .metadata
            covered |= {os.path.normpath(os.path.join(root, n)) for n in names
                        if n.endswith(".distcp")}  # fmt: skip
        for name in names:
            if name.endswith(".index.json"):
                covered |= _shards_of(os.path.join(root, name))
        out.extend(
            Target(os.path.join(root, n), top)
            for n in names
            if os.path.normpath(os.path.join(root, n)) not in covered
        )
        out.extend(Target(os.path.join(root, d), top) for d in saves)
    return out


def _shards_of(index: str) -> set[str]:
    """The shard files an index names (normalised paths); empty when it cannot be read (then
    the index fails ``readable`` and its shards are checked one by one)."""
    try:
        if os.path.getsize(index) > MAX_INDEX_BYTES:
            return set()
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map")
    except (OSError, ValueError, AttributeError):
        return set()
    if not isinstance(weight_map, dict):
        return set()
    root = os.path.dirname(index)
    return {
        os.path.normpath(os.path.join(root, shard))
        for shard in weight_map.values()
        if isinstance(shard, str)
    }


# --- path globs -------------------------------------------------------------------------------


def glob_matches(pattern: str, path: str) -> bool:
    """Whether the ``/``-separated relative ``path`` matches ``pattern``: ``*`` and ``?``
    within one segment, ``**`` across any number of segments, ``[...]`` a character class."""
    return re.fullmatch(_glob_regex(pattern), path) is not None


def _glob_regex(pattern: str) -> str:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)

"""``readable``: the file opens and passes every structural check its reader has.

The runner (``_run.py``) makes this finding while opening the file: a file that cannot be read
fails it (or ``lfs-pointer``, see :mod:`.lfs_pointer`), and nothing else is checked then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.errors import LfsPointerError, UnknownFormatError
from ckptctl.ops.verify._check import Check, Phase, fail_from, plural
from ckptctl.ops.verify.lfs_pointer import lfs_pointer
from ckptctl.report.verify import FileVerdict, Finding, Status

if TYPE_CHECKING:
    from ckptctl.errors import CkptError
    from ckptctl.model import Checkpoint

CHECK = Check(
    "readable",
    10,
    Phase.OPEN,
    "The file opens and passes every structural check of its reader",
    "The file is a checkpoint ckptctl reads (PyTorch, safetensors, Burn) and is not "
    "empty, truncated or corrupt.",
    unskippable="every other check needs it",
    fails_as=FileVerdict.UNREADABLE,
)


def readable(ckpt: Checkpoint) -> Finding:
    """The passed finding: the format and what the file holds."""
    what = f"{ckpt.format}, {plural(len(ckpt), 'tensor')}"
    if ckpt.sharding is not None:
        what += f" in {plural(len(ckpt.sharding.shards), 'shard')}"
    if ckpt.scalars:
        what += f", {plural(len(ckpt.scalars), 'scalar')}"
    return Finding("readable", Status.OK, what + "; every structural check passed")


def unreadable(exc: CkptError) -> Finding:
    """The failed finding of a file that cannot be read: ``lfs-pointer`` for a git-lfs
    pointer (the file's or a shard's), else ``readable``."""
    if isinstance(exc, LfsPointerError):
        return lfs_pointer(exc)
    return fail_from("readable", exc)


def label(exc: CkptError) -> str | None:
    """What a file no reader accepts is (``a JSON file, not a checkpoint``), when known."""
    if isinstance(exc, LfsPointerError):
        return "a git-lfs pointer, not a checkpoint"
    return _not_a_checkpoint(exc.message) if isinstance(exc, UnknownFormatError) else None


def _not_a_checkpoint(diagnosis: str) -> str:
    """``a JSON file, not a checkpoint`` from "this is a JSON file, but not a checkpoint ..."."""
    if not diagnosis.startswith("this is "):
        return "not a checkpoint"
    what = diagnosis[len("this is ") :]
    for stop in (";", ", but", ", not", " ("):
        what = what.split(stop, 1)[0]
    return f"{what}, not a checkpoint"

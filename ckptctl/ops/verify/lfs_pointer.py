"""``lfs-pointer``: in ``readable``'s place when the file (or a part of it: a shard, a DCP rank
file, a DeepSpeed partition) is a git-lfs pointer, the text a clone without ``git lfs pull``
leaves where the weights should be (issue 44): its oid and size, and the hint to fetch it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.fix import hint_of
from ckptctl.ops.verify._check import Check, Phase
from ckptctl.report.verify import FileVerdict, Finding, Status

if TYPE_CHECKING:
    from ckptctl.errors import LfsPointerError
    from ckptctl.model import JSONValue

CHECK = Check(
    "lfs-pointer",
    20,
    Phase.OPEN,
    "The file is the weights, not a git-lfs pointer to them",
    "A clone without `git lfs pull` leaves a small text pointer (oid sha256:..., size N) "
    "where each large file should be; run `git lfs pull` to fetch the weights.",
    unskippable="it fails a git-lfs pointer in readable's place",
    fails_as=FileVerdict.UNREADABLE,
)


def lfs_pointer(exc: LfsPointerError) -> Finding:
    """The failed finding, with the pointer's oid and size (and which file it is)."""
    details: dict[str, JSONValue] = {"oid": exc.oid, "size": exc.size}
    if exc.path is not None:
        details["pointer"] = exc.path
    return Finding("lfs-pointer", Status.FAIL, exc.message, hint_of(exc), details=details)

"""``sharded-index``: a ``*.index.json`` (or the directory that holds one) against its shards
(:func:`ckptctl.formats.sharded.find_index_problems`); checked before the checkpoint is opened, so a
missing shard is named here as well as failing ``readable``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.errors import CkptError
from ckptctl.formats import resolve_path
from ckptctl.ops.verify._check import MESSAGE_LIMIT, Check, Phase, more, plural
from ckptctl.report.verify import Finding, Status

if TYPE_CHECKING:
    from ckptctl.ops.verify._check import Subject


def sharded_index(subject: Subject) -> Finding | None:
    """The index checked against its shards; None when the file is no index or the index
    itself is unreadable (``readable`` reports that once)."""
    from ckptctl.formats.sharded import find_index_problems

    if subject.fmt != "safetensors-index":
        return None
    try:
        problems = find_index_problems(resolve_path(subject.path))  # a directory: its index
    except CkptError:
        return None
    if not problems:
        return Finding("sharded-index", Status.OK, "the index and its shards agree on every tensor")
    return Finding(
        "sharded-index",
        Status.FAIL,
        f"{plural(len(problems), 'problem')}: "
        + "; ".join(problems.shown[:MESSAGE_LIMIT])
        + more(len(problems)),
        "re-download the checkpoint or regenerate its index",
        details={"problems": problems.sentences()},
    )


CHECK = Check(
    "sharded-index",
    50,
    Phase.INDEX,
    "The sharded-checkpoint index agrees with its shards",
    "Every tensor the *.index.json names is in the shard it names, and nothing else is.",
    run=sharded_index,
)

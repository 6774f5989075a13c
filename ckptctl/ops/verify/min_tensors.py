"""``min-tensors``: with ``min_tensors`` (``--min-tensors N``), the file (below ``state_key``)
holds at least that many tensors."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.ops.verify._check import Check, Phase, plural
from ckptctl.report.verify import Finding, Status

if TYPE_CHECKING:
    from ckptctl.model import JSONValue
    from ckptctl.ops.verify._check import Subject


def min_tensors(subject: Subject) -> Finding:
    """How many tensors there are against the minimum."""
    minimum, state_key = subject.opts.min_tensors, subject.opts.state_key
    if minimum is None:  # only run with min_tensors
        raise AssertionError("no minimum")
    n = len(subject.tensors)
    where = f" below state key {state_key!r}" if state_key is not None else ""
    details: dict[str, JSONValue] = {"tensors": n, "min_tensors": minimum}
    if n >= minimum:
        return Finding(
            "min-tensors",
            Status.OK,
            f"{plural(n, 'tensor')}{where} (at least {minimum:,})",
            details=details,
        )
    return Finding(
        "min-tensors",
        Status.FAIL,
        f"{plural(n, 'tensor')}{where}, fewer than the required {minimum:,}",
        "is this the right file (a partial save, or one shard of a sharded checkpoint)?",
        details=details,
    )


CHECK = Check(
    "min-tensors",
    90,
    Phase.ENTRIES,
    "The file holds at least the required number of tensors",
    run=min_tensors,
    option="min_tensors",
)

"""``convert`` and ``remap``: one pipeline from any readable checkpoint to any writable format.

select (``--state-key``) → write, streaming one tensor at a time; later stages (remap rules,
adapters, target matching) plug in between. Metadata work happens at once, data work stays lazy:
entries that need no change are copied as raw bytes.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ckptctl.formats import format_for_output, open_checkpoint, save_checkpoint
from ckptctl.ops.inspect import select_state_key
from ckptctl.report.model import ConvertReport, PlanRow

if TYPE_CHECKING:
    from ckptctl.model import TensorEntry

#: Formats whose metadata map is free-form user metadata (and so worth carrying over).
_USER_METADATA_FORMATS = frozenset({"safetensors", "burnpack"})


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    state_key: str | None = None,
    force: bool = False,
    dry_run: bool = False,
) -> ConvertReport:
    """Convert ``src`` to ``dst``; the extension of ``dst`` picks the output format.

    The output is written atomically: on any failure ``dst`` is left as it was.

    Args:
        src: any readable checkpoint (format detected from content).
        dst: ``.safetensors``, ``.bpk`` or ``.pt``/``.pth``/``.bin``.
        state_key: descend into this dotted key of a nested checkpoint first.
        force: overwrite ``dst`` if it exists.
        dry_run: plan only; write nothing.

    Returns:
        A :class:`~ckptctl.report.model.ConvertReport`.

    Raises:
        InputError: ``src`` is unreadable, corrupt or unsafe.
        UnsupportedError: ``src`` holds something the output format cannot (e.g. FP8 in .bpk).
        SelectionError: unknown output extension or state key.
        OutputError: ``dst`` exists (without ``force``), is ``src``, or cannot be written.

    Example:
        >>> convert("model.safetensors", "model.bpk")  # doctest: +SKIP
    """
    out_spec = format_for_output(dst)
    with open_checkpoint(src) as ckpt:
        entries = select_state_key(ckpt.entries(), state_key, ckpt)
        plan = tuple(_plan_row(e, e) for e in entries)
        metadata = dict(ckpt.metadata) if ckpt.format in _USER_METADATA_FORMATS else {}
        report = ConvertReport(
            source=os.fspath(src),
            destination=os.fspath(dst),
            source_format=ckpt.format,
            destination_format=out_spec.name,
            plan=plan,
            written=False,
            dry_run=dry_run,
        )
        if dry_run:
            return report
        save_checkpoint(
            dst, entries, metadata, scalars=ckpt.scalars, force=force, sources=_sources(src, ckpt)
        )
    return ConvertReport(
        source=report.source,
        destination=report.destination,
        source_format=report.source_format,
        destination_format=report.destination_format,
        plan=plan,
        written=True,
        dry_run=False,
        bytes_written=os.path.getsize(dst),
    )


def _sources(src: str | os.PathLike[str], ckpt: object) -> list[str]:
    paths = [os.fspath(src)]
    facts = getattr(ckpt, "facts", {})
    shards = facts.get("shards") if isinstance(facts, dict) else None
    if isinstance(shards, list):
        base = os.path.dirname(os.fspath(src))
        paths.extend(os.path.join(base, str(s)) for s in shards)
    return paths


def _plan_row(
    before: TensorEntry, after: TensorEntry | None, actions: tuple[str, ...] = ()
) -> PlanRow:
    return PlanRow(
        source=before.name,
        target=None if after is None else after.name,
        dtype_before=before.dtype.value,
        dtype_after=None if after is None else after.dtype.value,
        shape_before=before.shape,
        shape_after=None if after is None else after.shape,
        actions=actions,
    )

"""``ls`` and ``header``: what is in a checkpoint, and where every byte of it goes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.adapters.rename import compile_pattern
from ckptctl.errors import SelectionError, TruncatedError
from ckptctl.fix import Note, Option
from ckptctl.formats import open_checkpoint, read_layout, resolve_path
from ckptctl.model import describe_groups
from ckptctl.report.model import HeaderReport, LsReport, TensorRow

if TYPE_CHECKING:
    import os
    import re
    from collections.abc import Sequence

    from ckptctl.model import Checkpoint, TensorEntry
    from ckptctl.report.tree import TreeNode

#: Orders ``ls --sort`` accepts.
SORT_KEYS = ("file", "name", "size", "dtype", "shape")


def select_state_key(
    entries: Sequence[TensorEntry], key: str | None, ckpt: Checkpoint | None = None
) -> list[TensorEntry]:
    """Descend into ``key`` (a dotted path): keep the tensors below it, with the prefix stripped.

    Raises:
        SelectionError: nothing lies below ``key``; the message lists where tensors are.
    """
    if key is None:
        return list(entries)
    key = key.strip(".")
    prefix = key + "."
    out = [e.renamed(e.name[len(prefix) :]) for e in entries if e.name.startswith(prefix)]
    if out:
        return out
    tops = sorted({e.name.split(".", 1)[0] for e in entries if "." in e.name})
    where = ""
    if ckpt is not None and ckpt.structure is not None:
        where = describe_groups(ckpt.structure.groups)
    elif tops:
        where = ", ".join(repr(t) for t in tops[:10])
    raise SelectionError(
        f"no tensors under state key {key!r}",
        path=None if ckpt is None else ckpt.path,
        hint=f"tensors are under {where}" if where else "the file has no nested tensors",
    )


#: How many of the tensors left outside a state key a message names.
OUTSIDE_NAMES_SHOWN = 3


def outside_state_key(entries: Sequence[TensorEntry], key: str | None) -> list[str]:
    """The names of the tensors that :func:`select_state_key` leaves out (none without a key)."""
    if key is None:
        return []
    prefix = key.strip(".") + "."
    return [e.name for e in entries if not e.name.startswith(prefix)]


def describe_outside(names: Sequence[str], total: int, key: str) -> Note:
    """``1 of 21 tensors are outside state key 'model' (lm_head.weight)``: what a state key
    drops, counted, with the first names."""
    shown = ", ".join(names[:OUTSIDE_NAMES_SHOWN]) + (
        ", ..." if len(names) > OUTSIDE_NAMES_SHOWN else ""
    )
    verb = "is" if len(names) == 1 else "are"
    return Note(
        f"{len(names)} of {total} tensors {verb} outside {{fix0}} and not written ({shown})",
        (Option("state_key", key.strip(".")),),
    )


def tied_groups(entries: Sequence[TensorEntry]) -> list[list[TensorEntry]]:
    """Groups of two or more entries that are the same tensor (tied weights: one storage, same
    offset, shape, stride and dtype), each in file order."""
    groups: dict[tuple[str, ...], list[TensorEntry]] = {}
    for entry in entries:
        storage = entry.extra.get("storage")
        if storage is None:
            continue
        key = (storage, entry.extra.get("storage_offset", ""), entry.extra.get("stride", ""),
               str(entry.shape), entry.dtype.value)  # fmt: skip
        groups.setdefault(key, []).append(entry)
    return [g for g in groups.values() if len(g) > 1]


def stored_size(entries: Sequence[TensorEntry]) -> tuple[int, int]:
    """``(parameters, bytes)`` actually stored: a storage shared by several tensors (tied weights,
    views) counts once."""
    numel = nbytes = 0
    seen: set[str] = set()
    for entry in entries:
        storage = entry.extra.get("storage")
        if storage is None:
            numel, nbytes = numel + entry.numel, nbytes + entry.nbytes
        elif storage not in seen:
            seen.add(storage)
            size = int(entry.extra.get("storage_nbytes", entry.nbytes))
            numel, nbytes = numel + size // entry.dtype.itemsize, nbytes + size
    return numel, nbytes


def top_level_groups(ckpt: Checkpoint) -> dict[str, int]:
    """Tensors per top-level key of a nested checkpoint (``{"model": 4, "optimizer": 12}``),
    from its structure; empty for formats without containers."""
    return ckpt.structure.groups if ckpt.structure is not None else {}


def _row(entry: TensorEntry) -> TensorRow:
    return TensorRow(
        name=entry.name,
        dtype=entry.dtype.value,
        shape=entry.shape,
        nbytes=entry.nbytes,
        numel=entry.numel,
        param_id=entry.param_id,
        module_type=entry.module_type,
        offset=entry.offset,
    )


def list_tensors(
    path: str | os.PathLike[str],
    *,
    state_key: str | None = None,
    pattern: str | None = None,
    sort: str = "file",
    tree: bool = False,
    depth: int | None = None,
    expand: bool = False,
    stats: bool = False,
) -> LsReport:
    """List a checkpoint's tensors from its header alone.

    Args:
        path: the checkpoint file.
        state_key: descend into this dotted key and strip it from names.
        pattern: keep only tensors whose name matches this regex (Rust dialect, searched).
        sort: one of :data:`SORT_KEYS`.
        tree: also build the module tree (:attr:`LsReport.tree`): parameters and bytes per
            module, runs of identical numbered blocks collapsed, tied tensors counted once.
        depth: the tree's levels shown (None: all).
        expand: list every block of the tree instead of collapsing identical ones.
        stats: read every tensor (one at a time, in blocks) for its statistics
            (:attr:`TensorRow.stats`: min, max, mean, std, absmax, zeros, NaN, Inf).

    Returns:
        An :class:`~ckptctl.report.model.LsReport`.

    Raises:
        InputError: unreadable, unknown, corrupt or unsafe input.
        SelectionError: bad regex, unknown sort key, or nothing under ``state_key``.
    """
    if sort not in SORT_KEYS:
        raise SelectionError(
            f"unknown sort key {sort!r}", hint="use one of " + ", ".join(SORT_KEYS)
        )
    if depth is not None and depth < 1:
        raise SelectionError(f"tree depth {depth} is not positive", hint="use a depth of 1 or more")
    regex = compile_regex(pattern, "pattern") if pattern is not None else None
    with open_checkpoint(path) as ckpt:
        everything = ckpt.entries()
        entries = select_state_key(everything, state_key, ckpt)
        total = len(entries)
        outside = outside_state_key(everything, state_key)
        if regex is not None:
            entries = [e for e in entries if regex.search(e.name)]
        rows = [_row(e) for e in entries]
        if stats:
            from dataclasses import replace

            from ckptctl.ops.values import tensor_stats

            rows = [replace(r, stats=tensor_stats(e)) for r, e in zip(rows, entries, strict=True)]
        if sort == "name":
            rows.sort(key=lambda r: r.name)
        elif sort == "size":
            rows.sort(key=lambda r: (-r.nbytes, r.name))
        elif sort == "dtype":
            rows.sort(key=lambda r: (r.dtype, r.name))
        elif sort == "shape":
            rows.sort(key=lambda r: (len(r.shape), r.shape, r.name))
        return LsReport(
            path=ckpt.path,  # a directory given: the checkpoint found in it
            format=ckpt.format,
            tensors=tuple(rows),
            metadata=dict(ckpt.metadata),
            kind=ckpt.kind,
            notes=tuple(ckpt.notes),
            scalars=dict(ckpt.scalars),
            state_key=state_key,
            total_tensors=total,
            file_tensors=len(everything) if outside else None,
            outside_state_key=tuple(outside[:OUTSIDE_NAMES_SHOWN]),
            safety=ckpt.safety,
            objects=dict(ckpt.objects),
            stored=_stored(entries),
            tree=_tree(entries, rows, depth, expand) if tree else None,
            with_stats=stats,
        )


def _tree(
    entries: Sequence[TensorEntry], rows: Sequence[TensorRow], depth: int | None, expand: bool
) -> TreeNode:
    from ckptctl.ops._tree import build_tree

    tied = {e.name: group[0].name for group in tied_groups(entries) for e in group[1:]}
    return build_tree(rows, tied_to=tied, depth=depth, expand=expand)


def _stored(entries: Sequence[TensorEntry]) -> tuple[int, int] | None:
    """What is really stored, when sharing makes it less than the per-name sums."""
    numel, nbytes = stored_size(entries)
    if nbytes == sum(e.nbytes for e in entries):
        return None
    return numel, nbytes


def describe_header(path: str | os.PathLike[str]) -> HeaderReport:
    """Decode the raw header of ``path`` and account for every byte of the file.

    Raises:
        InputError: unreadable, unknown or corrupt input.
        UnsupportedError: the format has no byte-level view.
    """
    try:
        return HeaderReport(path=resolve_path(path), layout=read_layout(path))
    except TruncatedError as exc:
        if exc.layout is None:
            raise
        return HeaderReport(path=resolve_path(path), layout=exc.layout, damage=exc)


def compile_regex(pattern: str, option: str) -> re.Pattern[str]:
    """Compile a user regex in the one dialect every pattern option takes (Rust regex, as
    Burn's ``KeyRemapper``: :func:`~ckptctl.adapters.rename.compile_pattern`), turning errors
    into a ``SelectionError`` naming the option.

    ``option`` is the API parameter the pattern came from (``pattern``).
    """
    try:
        return compile_pattern(pattern, "filter")
    except SelectionError as exc:
        if exc.hint is None:
            exc.hint = Note("check {fix0}", (Option(option),))
        raise

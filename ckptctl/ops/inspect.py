"""``ls`` and ``header``: what is in a checkpoint, and where every byte of it goes."""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING

from ckptctl._gc import gc_paused
from ckptctl.errors import SelectionError, TruncatedError
from ckptctl.formats import open_checkpoint, read_layout, resolve_path
from ckptctl.model import damaged_layout, listed_dtype, listed_shape
from ckptctl.ops._quant import find_quantized
from ckptctl.ops._select import (
    OUTSIDE_NAMES_SHOWN,
    compile_regex,
    outside_state_key,
    select_state_key,
    stored_size,
    tied_groups,
)
from ckptctl.ops._tree import TREE_ORDERS
from ckptctl.report.model import HeaderReport, LsReport, TensorRow

if TYPE_CHECKING:
    import os
    import re
    from collections.abc import Sequence

    from ckptctl.model import Progress, TensorEntry
    from ckptctl.report.tree import TreeNode

#: Names of the tensors ``nn.BatchNorm`` registers as buffers, not parameters: ``ls`` counts
#: their elements apart (torchvision's resnet18 has 11,689,512 parameters, 9,620 of these).
BUFFER_NAMES = frozenset({"running_mean", "running_var", "num_batches_tracked"})

#: Orders ``ls --sort`` accepts.
SORT_KEYS = ("file", "name", "size", "dtype", "shape")


def _row(entry: TensorEntry) -> TensorRow:
    if entry.extra:  # a quantized GGUF tensor: its logical shape, stored bytes
        shape, dtype = listed_shape(entry), listed_dtype(entry)
    else:  # the usual tensor (20,000 rows of a big state dict: one call fewer each)
        shape, dtype = entry.shape, entry.dtype.value
    return TensorRow(
        name=entry.name,
        dtype=dtype,
        shape=shape,
        nbytes=entry.nbytes,
        numel=math.prod(shape),
        param_id=entry.param_id,
        module_type=entry.module_type,
        offset=entry.offset,
        buffer=entry.name.rsplit(".", 1)[-1] in BUFFER_NAMES,
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
    full_metadata: bool = False,
    progress: Progress | None = None,
) -> LsReport:
    """List a checkpoint's tensors from its header alone.

    Args:
        path: the checkpoint file.
        state_key: descend into this dotted key and strip it from names.
        pattern: keep only tensors whose name matches this regex (Rust dialect, searched).
        sort: one of :data:`SORT_KEYS`; with ``tree``, the siblings' order, one of
            :data:`~ckptctl.ops._tree.TREE_ORDERS` (file: as stored; name: natural; size).
        tree: also build the module tree (:attr:`LsReport.tree`): parameters and bytes per
            module, runs of identical numbered blocks collapsed, tied tensors counted once.
        depth: the tree's levels shown (None: all).
        expand: list every block of the tree instead of collapsing identical ones.
        stats: read every tensor (one at a time, in blocks) for its statistics
            (:attr:`TensorRow.stats`: min, max, mean, std, absmax, zeros, NaN, Inf).
        full_metadata: metadata values whole; else a long one (a GGUF array) is its summary
            (:attr:`Checkpoint.metadata_summary`: length and first items).
        progress: with ``stats``, called as ``progress(nbytes, total)`` as each tensor is read.

    Quantized modules (GPTQ, AWQ, bitsandbytes, FP8 with scales, compressed-tensors) are
    recognised by their tensor names (:attr:`LsReport.quantized`); for their layout
    descriptors (``weight_shape``, bitsandbytes' ``quant_state``, a few bytes each) the
    listing reads those bytes too.

    Returns:
        An :class:`~ckptctl.report.model.LsReport`.

    Raises:
        InputError: unreadable, unknown, corrupt or unsafe input.
        SelectionError: bad regex, unknown sort key (or one a tree cannot take), or nothing
            under ``state_key``.
    """
    _check_listing(sort, tree, depth)
    regex = compile_regex(pattern, "pattern") if pattern is not None else None
    # Header-only: the collector stays off until the parsed tree, entries and all, is freed.
    # With stats every tensor is read: that is the time, and the collector runs as usual.
    with contextlib.nullcontext() if stats else gc_paused():
        return _listing(path, state_key, regex, sort, (tree, depth, expand), stats,
                        full_metadata, progress)  # fmt: skip


def _listing(
    path: str | os.PathLike[str],
    state_key: str | None,
    regex: re.Pattern[str] | None,
    sort: str,
    tree_options: tuple[bool, int | None, bool],
    stats: bool,
    full_metadata: bool,
    progress: Progress | None,
) -> LsReport:
    """:func:`list_tensors` once its options are checked."""
    tree, depth, expand = tree_options
    with open_checkpoint(path) as ckpt:
        everything = ckpt.entries()
        entries = select_state_key(everything, state_key, ckpt)
        total = len(entries)
        outside = outside_state_key(everything, state_key, ckpt)
        quantized = find_quantized(entries)
        if regex is not None:
            entries = [e for e in entries if regex.search(e.name)]
            quantized = tuple(q for q in quantized if any(regex.search(n) for n in q.tensors))
        rows = [_row(e) for e in entries]
        if stats:
            from dataclasses import replace

            from ckptctl.ops._stream import tracked
            from ckptctl.ops.values import tensor_stats

            found = tracked(entries, (tensor_stats(e) for e in entries), progress)
            rows = [replace(r, stats=s) for r, s in zip(rows, found, strict=True)]
        module_tree = _tree(entries, rows, depth, expand, sort) if tree else None
        _sort_rows(rows, sort)
        return LsReport(
            path=ckpt.path,  # a directory given: the checkpoint found in it
            format=ckpt.format,
            tensors=tuple(rows),
            metadata=dict(ckpt.metadata)
            if full_metadata
            else {**ckpt.metadata, **ckpt.metadata_summary},
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
            tree=module_tree,
            with_stats=stats,
            quantized=quantized,
        )


def _check_listing(sort: str, tree: bool, depth: int | None) -> None:
    """Refuse a sort key ``ls`` does not know, one a tree cannot take, and a depth below 1.

    Raises:
        SelectionError: the option that is wrong.
    """
    if sort not in SORT_KEYS:
        raise SelectionError(
            f"unknown sort key {sort!r}", hint="use one of " + ", ".join(SORT_KEYS)
        )
    if tree and sort not in TREE_ORDERS:
        raise SelectionError(
            f"a module tree cannot be sorted by {sort}: that orders tensors, not modules",
            hint="sort it by " + ", ".join(TREE_ORDERS),
        )
    if depth is not None and depth < 1:
        raise SelectionError(f"tree depth {depth} is not positive", hint="use a depth of 1 or more")


def _sort_rows(rows: list[TensorRow], sort: str) -> None:
    """Sort the listing's rows in place (``file``: as the file has them)."""
    if sort == "name":
        rows.sort(key=lambda r: r.name)
    elif sort == "size":
        rows.sort(key=lambda r: (-r.nbytes, r.name))
    elif sort == "dtype":
        rows.sort(key=lambda r: (r.dtype, r.name))
    elif sort == "shape":
        rows.sort(key=lambda r: (len(r.shape), r.shape, r.name))


def _tree(
    entries: Sequence[TensorEntry],
    rows: Sequence[TensorRow],
    depth: int | None,
    expand: bool,
    order: str,
) -> TreeNode:
    from ckptctl.ops._tree import build_tree

    tied = {e.name: group[0].name for group in tied_groups(entries) for e in group[1:]}
    return build_tree(rows, tied_to=tied, depth=depth, expand=expand, order=order)


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
        layout = damaged_layout(exc)
        if layout is None:
            raise
        return HeaderReport(path=resolve_path(path), layout=layout, damage=exc)

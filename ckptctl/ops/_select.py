"""Selecting the tensors of a checkpoint that an op works on, shared by ``ls``, ``verify``, ``diff``
and ``convert``: a state key (a dotted path into a nested checkpoint), what it leaves out, tied
tensors and stored sizes. Below the command ops, which never import one another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.errors import SelectionError
from ckptctl.fix import Note, Option, closest
from ckptctl.model import describe_groups

if TYPE_CHECKING:
    import re
    from collections.abc import Sequence

    from ckptctl.model import Checkpoint, TensorEntry


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
    if ckpt is not None and key in ckpt.views:  # another tensor set (DeepSpeed's exp_avg ...)
        return ckpt.views[key]()
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


def outside_state_key(
    entries: Sequence[TensorEntry], key: str | None, ckpt: Checkpoint | None = None
) -> list[str]:
    """The names of the tensors that :func:`select_state_key` leaves out (none without a key,
    or when the key names one of ``ckpt.views``)."""
    if key is None or (ckpt is not None and key.strip(".") in ckpt.views):
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


def add_ties(entries: Sequence[TensorEntry], ties: Sequence[str]) -> list[TensorEntry]:
    """``entries`` plus a copy of each ``SOURCE`` tensor under ``NAME`` for each ``NAME=SOURCE``
    (a tied weight the file stores once, e.g. roberta's ``lm_head.decoder.weight``, which
    Hugging Face drops on save because it is the word embeddings). The copies go through the
    remap rules and adapters like any tensor.

    Raises:
        SelectionError: not ``NAME=SOURCE``, an unknown ``SOURCE``, or a ``NAME`` taken.
    """
    out = list(entries)
    by_name = {e.name: e for e in out}
    for text in ties:
        name, sep, source = (part.strip() for part in text.partition("="))
        if not sep or not name or not source:
            raise SelectionError(f"tie {text!r} is not NAME=SOURCE",
                                 hint="e.g. 'lm_head.weight=embed_tokens.weight'")  # fmt: skip
        if source not in by_name:
            guess = closest(source, list(by_name))
            raise SelectionError(
                f"tie {text!r}: no tensor {source!r} in the source"
                + (f"; did you mean {guess!r}?" if guess else "")
            )
        if name in by_name:
            raise SelectionError(f"tie {text!r}: the source already has a tensor {name!r}")
        by_name[name] = by_name[source].renamed(name)
        out.append(by_name[name])
    return out


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


def compile_regex(pattern: str, option: str) -> re.Pattern[str]:
    """Compile a user regex in the one dialect every pattern option takes (Rust regex, as
    Burn's ``KeyRemapper``: :func:`~ckptctl.adapters.rename.compile_pattern`), turning errors
    into a ``SelectionError`` naming the option.

    ``option`` is the API parameter the pattern came from (``pattern``).
    """
    from ckptctl.adapters.rename import compile_pattern

    try:
        return compile_pattern(pattern, "filter")
    except SelectionError as exc:
        if exc.hint is None:
            exc.hint = Note("check {fix0}", (Option(option),))
        raise

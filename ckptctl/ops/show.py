"""``ckptctl show``: tensor values as numpy prints them, with statistics (``ops/values.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.errors import SelectionError
from ckptctl.fix import Command, Note, Option
from ckptctl.formats import open_checkpoint
from ckptctl.model import listed_dtype, listed_shape
from ckptctl.ops._select import compile_regex, select_state_key
from ckptctl.ops._stream import tracked
from ckptctl.ops.values import preview, tensor_stats
from ckptctl.report.values import ShowReport, TensorValues

if TYPE_CHECKING:
    import os
    from collections.abc import Sequence

    from ckptctl.model import Progress, TensorEntry


def show_tensors(
    path: str | os.PathLike[str],
    names: Sequence[str] = (),
    *,
    pattern: str | None = None,
    state_key: str | None = None,
    stats: bool = True,
    progress: Progress | None = None,
) -> ShowReport:
    """Print-ready values and statistics of the named tensors (and those matching ``pattern``).

    Args:
        path: the checkpoint.
        names: tensor names, shown in this order.
        pattern: also every tensor whose name matches this regex (Rust dialect), in file order.
        state_key: descend into this dotted key and strip it from names.
        stats: compute the statistics and histogram (reads every byte of each tensor).
        progress: called as ``progress(nbytes, total)`` as each tensor is shown.

    Raises:
        SelectionError: a name that is not in the file (with the closest names), a bad
            regex, nothing matches, or nothing under ``state_key``.
        InputError: unreadable, unknown, corrupt or unsafe input.
    """
    regex = compile_regex(pattern, "pattern") if pattern is not None else None
    with open_checkpoint(path) as ckpt:
        entries = select_state_key(ckpt.entries(), state_key, ckpt)
        by_name = {e.name: e for e in entries}
        chosen: list[TensorEntry] = []
        for name in names:
            if name not in by_name:
                import difflib

                close = difflib.get_close_matches(name, list(by_name), n=3)
                raise SelectionError(
                    f"no tensor named {name!r}",
                    path=ckpt.path,
                    hint="did you mean " + ", ".join(repr(c) for c in close) + "?"
                    if close
                    else Note("list the names with: {fix0}", (Command("ls", (ckpt.path,)),)),
                )
            chosen.append(by_name[name])
        if regex is not None:
            chosen += [e for e in entries if regex.search(e.name) and e not in chosen]
        if not chosen:
            raise SelectionError(
                "no tensor matches" if regex is not None else "no tensor given",
                path=ckpt.path,
                hint=Note(
                    "give tensor names or {fix0}; list them with: {fix1}",
                    (Option("pattern", "REGEX"), Command("ls", (ckpt.path,))),
                ),
            )
        values = (
            TensorValues(
                e.name,
                listed_dtype(e),
                listed_shape(e),
                preview(e),
                tensor_stats(e, histogram=True) if stats else None,
            )
            for e in chosen
        )
        shown = tuple(tracked(chosen, values, progress))
        return ShowReport(ckpt.path, ckpt.format, shown)

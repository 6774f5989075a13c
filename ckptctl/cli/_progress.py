"""The one progress bar of every command that reads tensor data (stderr, terminals only).

``convert``, ``diff``, ``ls --stats``, ``show``, ``hash`` and ``verify`` show the same bar:
what it does, the bar, bytes done/total, speed and time left, on one line that fits the
terminal (a long description is shortened, the bar narrows), cleared when the work ends.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from ckptctl.cli._options import OutputFormat, make_console

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from rich.console import Console
    from rich.progress import ProgressColumn, Task
    from rich.table import Table

    from ckptctl.model import Progress

#: Columns of the fixed-width cells: done/total (``1021.1 MiB/1021.1 MiB``), speed
#: (``1021.1 MiB/s``), time left (``0:00:01``); one blank between cells.
BYTES_COLUMNS = 21
SPEED_COLUMNS = 12
ETA_COLUMNS = 7
_GAPS = 4
#: The bar's width: 40 when the line has room, never under 10 (the description shrinks first).
BAR_COLUMNS = (10, 40)
#: Least time between two frames of a bar its callback redraws (``thread=False``).
REDRAW_SECONDS = 0.1


@contextlib.contextmanager
def data_progress(
    description: str, fmt: OutputFormat, *, quiet: bool = False, thread: bool = True
) -> Iterator[Progress | None]:
    """The progress callback for work that reads tensor data, or None when no bar is shown:
    with ``quiet``, a format other than text (JSON, SARIF), or stderr not a terminal.

    Without ``thread``, the bar is redrawn by the callback itself (at most every
    ``REDRAW_SECONDS``) instead of by a thread, so the work may still fork worker processes
    (``verify -j``, which forks only while the process has a single thread)."""
    if quiet or fmt is not OutputFormat.TEXT:  # decided before rich is imported
        yield None
        return
    err = make_console(stderr=True)
    if not err.is_terminal:
        yield None
        return
    with byte_progress(err, description, thread=thread) as advance:
        yield advance


def file_name(path: str) -> str:
    """What a bar calls ``path``: its last component (of a URL too), or the path itself."""
    return os.path.basename(path.rstrip("/")) or path


@contextlib.contextmanager
def byte_progress(console: Console, description: str, *, thread: bool = True) -> Iterator[Progress]:
    """A transient progress bar (bytes, throughput, ETA) on ``console``, one line wide.

    Yields ``advance(nbytes, total=None)``; ``total`` (all bytes, when known) sets the bar's end.
    Without ``thread``, ``advance`` redraws the bar (see :func:`data_progress`).
    """
    import time

    from rich.progress import BarColumn, Progress, TimeRemainingColumn
    from rich.table import Column

    fit = _Fit()
    bar = BarColumn(bar_width=BAR_COLUMNS[1])

    class _Fitted(Progress):
        def make_tasks_table(self, tasks: Iterable[Task]) -> Table:
            tasks = list(tasks)
            room = console.width - BYTES_COLUMNS - SPEED_COLUMNS - ETA_COLUMNS - _GAPS - 1
            wanted = max((len(t.description) for t in tasks), default=0)
            bar.bar_width = max(BAR_COLUMNS[0], min(BAR_COLUMNS[1], room - wanted))
            fit.description = max(1, room - bar.bar_width)
            return super().make_tasks_table(tasks)

    label, done, speed = _columns(fit)
    progress = _Fitted(
        label,
        bar,
        done,
        speed,
        TimeRemainingColumn(table_column=Column(width=ETA_COLUMNS, no_wrap=True)),
        console=console,
        transient=True,
        auto_refresh=thread,
    )
    with progress:
        task = progress.add_task(description, total=None)
        drawn = [0.0]

        def advance(nbytes: int, total: int | None = None) -> None:
            progress.update(task, advance=nbytes, total=total)
            now = time.monotonic()
            if not thread and now - drawn[0] >= REDRAW_SECONDS:
                drawn[0] = now
                progress.refresh()

        yield advance


class _Fit:
    """The description's width on this terminal, set before each frame is drawn."""

    description = 80


def _columns(fit: _Fit) -> tuple[ProgressColumn, ProgressColumn, ProgressColumn]:
    """The description (plain text, shortened with "…" to fit), done/total and speed, both in
    the binary units (and spelling) of every other size we print: ``136.0 MiB/1021.1 MiB
    43.3 MiB/s``. Blank until the total is known, never ``0/?``."""
    from rich.progress import ProgressColumn
    from rich.table import Column
    from rich.text import Text

    from ckptctl.report.text import human_bytes

    class _Bytes(ProgressColumn):
        def render(self, task: Task) -> Text:
            if task.total is None:
                return Text("")
            return Text(f"{human_bytes(int(task.completed))}/{human_bytes(int(task.total))}")

    class _Speed(ProgressColumn):
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("" if speed is None else f"{human_bytes(int(speed))}/s")

    class _Description(ProgressColumn):
        def render(self, task: Task) -> Text:
            text = Text(task.description, no_wrap=True, overflow="ellipsis")
            text.truncate(fit.description, overflow="ellipsis")
            return text

    def fixed(width: int) -> Column:
        return Column(width=width, no_wrap=True, justify="right")

    return (
        _Description(Column(no_wrap=True)),
        _Bytes(fixed(BYTES_COLUMNS)),
        _Speed(fixed(SPEED_COLUMNS)),
    )

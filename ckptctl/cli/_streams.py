"""Standard streams that outlive their reader: ``ckptctl ... 2>&1 | head -1`` keeps its exit status.

A reader that closes the pipe early (``head``, ``grep -q``) makes the next write fail with
EPIPE. Raised from the middle of a command, that error ends it before it knows its verdict, and
raised from the error handler it replaces the error's exit code with 1. So, while the CLI runs,
``sys.stdout`` and ``sys.stderr`` write through :class:`_PipeSafeWriter`: on EPIPE it points
the descriptor at ``/dev/null`` and reports every write as done, the command runs to its end,
and its exit status is the one it would have had with nobody closing anything.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from _typeshed import ReadableBuffer


class _PipeSafeWriter(io.RawIOBase):
    """A raw writer on a descriptor it does not own; EPIPE sends the rest to ``/dev/null``."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data: ReadableBuffer, /) -> int:
        size = memoryview(data).nbytes
        try:
            return os.write(self._fd, data)
        except BrokenPipeError:
            discard(self._fd)
            return size


def discard(fd: int) -> None:
    """Point ``fd`` at ``/dev/null``: later writes (and flushes at exit) succeed silently."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(devnull, fd)
    except OSError:
        pass
    finally:
        os.close(devnull)


def _guarded(stream: io.TextIOWrapper) -> io.TextIOWrapper | None:
    """``stream`` (the process's own stdout or stderr) re-opened through a pipe-safe writer."""
    try:
        fd = stream.fileno()
        stream.flush()  # what was written before goes out first, in order
    except BrokenPipeError:
        discard(fd)
    except (OSError, ValueError, AttributeError):
        return None  # not a real descriptor (an embedding application's stream)
    return io.TextIOWrapper(
        io.BufferedWriter(_PipeSafeWriter(fd)),
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=stream.line_buffering,
        write_through=stream.write_through,
    )


@contextlib.contextmanager
def guard_closed_pipes() -> Iterator[None]:
    """While inside, a closed stdout or stderr swallows writes instead of raising EPIPE.

    Only the process's own streams are replaced (``sys.stdout is sys.__stdout__``): streams
    a caller or a test put in their place are left alone. They are restored on the way out.
    """
    saved: list[tuple[str, object, io.TextIOWrapper]] = []
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or stream is not getattr(sys, f"__{name}__"):
            continue
        if not isinstance(stream, io.TextIOWrapper):
            continue
        guarded = _guarded(stream)
        if guarded is not None:
            setattr(sys, name, guarded)
            saved.append((name, stream, guarded))
    try:
        yield
    finally:
        for name, stream, guarded in reversed(saved):
            with contextlib.suppress(OSError, ValueError):
                guarded.flush()
            setattr(sys, name, stream)

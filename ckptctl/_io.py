"""Atomic output.

``atomic_write`` writes a destination through a temporary file in the same directory and renames
it into place only when everything succeeded, so a failure leaves the destination exactly as it
was. Reading is ``ckptctl.sources``' business.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import sys
import tempfile
from typing import IO, TYPE_CHECKING

from ckptctl.errors import OutputError
from ckptctl.fix import Note, Option

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], *, force: bool = False, fsync: bool = True
) -> Iterator[IO[bytes]]:
    """Write ``path`` atomically: temp file in the same directory, fsync, ``os.replace``.

    On any exception (KeyboardInterrupt included) the temporary file is removed and ``path`` is
    left exactly as it was. ``fsync=False`` skips the flush to disk: still atomic for other
    processes, but a power loss right after may leave an empty or partial file.

    Raises:
        OutputError: ``path`` exists and ``force`` is false, or it cannot be written.
    """
    dest = os.fspath(path)
    if os.path.isdir(dest):
        raise OutputError("is a directory", path=dest)
    if os.path.exists(dest) and not stat.S_ISREG(os.stat(dest).st_mode):
        # os.replace would swap a device or FIFO (/dev/null, as root) for a regular file
        raise OutputError(
            "is not a regular file; ckptctl writes files by replacing them",
            path=dest,
            hint="write to a regular file",
        )
    if os.path.lexists(dest) and not force:
        raise OutputError(
            "already exists",
            path=dest,
            hint=Note("pass {fix0} to overwrite it", (Option("force"),)),
        )
    directory = os.path.dirname(os.path.abspath(dest))
    if not os.path.exists(directory):
        raise OutputError(
            f"cannot write: the directory '{os.path.dirname(dest)}' does not exist",
            path=dest,
            hint="create it first, or write somewhere else",
        )
    mode = _mode_for(dest)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".ckptctl-", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(f"cannot write: {exc.strerror or exc}", path=dest) from None
    try:
        os.fchmod(fd, mode)  # mkstemp makes 0600; teammates must read what we write
        if fsync:
            _WRITEBACK_FDS.add(fd)
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            if fsync:
                os.fsync(out.fileno())
        os.replace(tmp, dest)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise OutputError(f"cannot write: {exc.strerror or exc}", path=dest) from None
    except BaseException:
        _unlink_quietly(tmp)
        raise
    finally:
        _WRITEBACK_FDS.discard(fd)


#: Descriptors of outputs that :func:`atomic_write` will fsync when they are complete.
_WRITEBACK_FDS: set[int] = set()
_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback, do not wait for it


def start_writeback(out: IO[bytes], offset: int, length: int) -> None:
    """Start writing ``length`` bytes at ``offset`` of ``out`` to disk, without waiting.

    Only for outputs :func:`atomic_write` will ``fsync``: the disk then writes one tensor while
    the next is copied, and the final ``fsync`` has little left to do (1 GiB: copy + fsync
    0.66 s -> 0.43 s, benchmarks/RESULTS.md, round two). A no-op elsewhere, on other systems,
    and when ``sync_file_range(2)`` is missing: the ``fsync`` still makes the file durable.
    """
    try:
        fd = out.fileno()
    except (OSError, ValueError):  # BytesIO and friends
        return
    if fd not in _WRITEBACK_FDS or length <= 0:
        return
    call = _sync_file_range()
    if call is not None:
        call(fd, offset, length, _SYNC_FILE_RANGE_WRITE)  # errors: fsync reports what matters


@functools.cache
def _sync_file_range() -> Callable[..., int] | None:
    return libc_function("sync_file_range", "c_int", "c_int64", "c_int64", "c_uint")


def libc_function(name: str, *argtypes: str) -> Callable[..., int] | None:
    """The C library's ``name`` through ctypes (Linux only), returning an ``int``; None where it
    is missing. ``argtypes`` are ctypes type names (``"c_int64"``)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # 1.5 ms, only on the writing path

    try:
        call = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    call.argtypes = tuple(getattr(ctypes, kind) for kind in argtypes)
    call.restype = ctypes.c_int
    return call  # type: ignore[no-any-return]


def _mode_for(dest: str) -> int:
    """The mode a new file gets under the user's umask, or the mode of the file replaced."""
    try:
        return stat.S_IMODE(os.stat(dest).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """True when both paths name the same existing file (hard links and symlinks included)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def refuse_sources(
    targets: Sequence[str | os.PathLike[str]], sources: Sequence[str | os.PathLike[str]]
) -> None:
    """Refuse to write any of ``targets`` when it is one of the input files (or a link to one).

    Raises:
        OutputError: a target is a source; writing it would destroy the data being read.
    """
    for target in targets:
        for src in sources:
            if same_file(src, target):
                raise OutputError(
                    "is also an input; writing it would destroy the data being read",
                    path=os.fspath(target),
                    hint="write to a new file, then rename it",
                )

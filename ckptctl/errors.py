"""The error model: one exception tree, each class carrying its exit code.

The library raises these and never exits; ``ckptctl.cli.main`` is the only place that turns an
exception into a message on stderr and an exit code.

This module imports nothing of ckptctl's, so every other module can raise these. What an error
carries beyond text (a ``fix.Note`` hint, a ``safety.PickleSafety`` verdict, a damaged file's
``model.HeaderLayout``) travels as data; its type is checked where it is defined and read
(``safety.carried_safety``, ``model.damaged_layout``).
"""

from __future__ import annotations

import os
from enum import IntEnum


def quote(text: str) -> str:
    """``'model\\.(\\d+)'``: user text (a pattern, a rule) quoted as the user typed it.

    ``repr`` would double every backslash, so a message would show a regex the user never wrote.
    """
    return f"'{text}'" if "'" not in text else f'"{text}"'


class ExitCode(IntEnum):
    """Process exit codes: public interface, documented under EXIT STATUS in ckptctl(1)."""

    OK = 0
    CHECK_FAILED = 1
    USAGE = 2
    INPUT = 3
    UNSUPPORTED = 4
    OUTPUT = 5
    INTERNAL = 70
    INTERRUPTED = 130


class CkptError(Exception):
    """Base of every error ckptctl raises on purpose.

    Args:
        message: what went wrong, lower-case start, no trailing period.
        path: the file the error is about; shown before the message.
        hint: what to do next, printed on a second line (``str(hint)``): a ``str``, or a
            :class:`~ckptctl.fix.Note` when it names an option (spelled as flags by the CLI).
        safety: for pickle-based inputs, the :class:`~ckptctl.safety.PickleSafety` verdict of
            what was read before the error (``verify`` reports it even for a file it cannot
            read); read it with ``safety.carried_safety``.
    """

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(
        self,
        message: str,
        *,
        path: str | os.PathLike[str] | None = None,
        hint: object = None,
        safety: object = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = None if path is None else os.fspath(path)
        self.hint = hint
        self.safety = safety

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def with_path(self, path: str | os.PathLike[str]) -> CkptError:
        """Return this error with ``path`` set when it has none yet (for re-raising)."""
        if self.path is None:
            self.path = os.fspath(path)
        return self


class InputError(CkptError):
    """The input cannot be opened or read."""

    exit_code = ExitCode.INPUT


class UnknownFormatError(InputError):
    """The input is not a checkpoint format ckptctl knows."""


class LfsPointerError(UnknownFormatError):
    """The input is a git-lfs pointer, a small text file standing for the weights, which a clone
    without ``git lfs pull`` leaves in their place (``formats/_lfs.py``).

    ``oid`` (``sha256:<64 hex digits>``) and ``size`` (bytes) name the missing file, None when
    the pointer does not give them validly.
    """

    def __init__(
        self,
        message: str,
        *,
        oid: str | None = None,
        size: int | None = None,
        path: str | os.PathLike[str] | None = None,
        hint: object = None,
    ) -> None:
        super().__init__(message, path=path, hint=hint)
        self.oid = oid
        self.size = size


class CorruptCheckpointError(InputError):
    """Bad magic, header, offsets, or a limit exceeded."""


class TruncatedError(CorruptCheckpointError):
    """The file ends before the data its header describes.

    ``layout`` holds what could be read (header, metadata and the regions present: a
    ``model.HeaderLayout``, read with ``model.damaged_layout``), so that ``ckptctl header`` can
    still show it.
    """

    layout: object = None


class UnsafePickleError(InputError):
    """A pickle can run code when loaded: an unsafe global or construct (see ``ckptctl.safety``).

    ``safety`` holds the verdict with its evidence.
    """


class UnsupportedError(CkptError):
    """A valid file that uses a dtype, version or feature ckptctl cannot handle."""

    exit_code = ExitCode.UNSUPPORTED


class SelectionError(CkptError, KeyError):
    """Unknown tensor or adapter name, bad remap rule, bad option value."""

    exit_code = ExitCode.USAGE

    def __str__(self) -> str:  # KeyError would quote the message
        return CkptError.__str__(self)


class OutputError(CkptError):
    """The output cannot be written: it exists, is not writable, the disk is full."""

    exit_code = ExitCode.OUTPUT


class CkptWarning(UserWarning):
    """A non-fatal problem with an input; the CLI prints it on stderr."""

"""What every check module of ``verify`` shares: :class:`Check` (a check's registry entry),
:class:`Subject` (what a check looks at), :class:`Options` (the run's settings) and the
helpers that word findings alike."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from ckptctl.errors import SelectionError
from ckptctl.fix import hint_of
from ckptctl.ops._walk import glob_matches
from ckptctl.report.verify import Finding, Rule, Status

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ckptctl.dtypes import DType
    from ckptctl.errors import CkptError
    from ckptctl.model import Checkpoint, Progress, TensorEntry
    from ckptctl.ops._optimizer import OptimizerRecord
    from ckptctl.report.manifest import TensorHash
    from ckptctl.report.verify import FileVerdict

    Shape = tuple[int, ...]
    Specs = Mapping[str, tuple[DType, Shape]]

#: Names listed in a finding's message before "and N more".
MESSAGE_LIMIT = 5


class Phase(Enum):
    """When a check runs on a file, which is also where its finding stands.

    ``OPEN``: made while the file is opened (``readable``, ``lfs-pointer``, ``safe-pickle``);
    ``INDEX``: the file as named, before it is opened (its finding follows the ``OPEN`` ones,
    also when opening fails); ``CHECKPOINT``: the opened checkpoint; ``SELECT``: the
    ``flat-reader`` gate, which picks the entries below ``state_key``; ``ENTRIES``: those
    entries (skipped when there are none).
    """

    OPEN = 1
    INDEX = 2
    CHECKPOINT = 3
    SELECT = 4
    ENTRIES = 5


@dataclass(frozen=True)
class Options:
    """The settings of one :func:`~ckptctl.ops.verify.verify` run, with what it read once for
    every file (the ``expect`` reference's specs, the optimizer record, the manifest), and the
    ``progress`` callback of the checks that read tensor data (``no-nan``, ``hashes``): every
    pass over a file's tensors begins with ``progress(0, total)`` (:func:`ckptctl.ops._stream.
    tracked`)."""

    checks: frozenset[str]
    allow_globals: frozenset[str]
    trust: bool
    state_key: str | None
    no_nan: bool
    min_tensors: int | None
    expect: str | None
    expect_specs: Specs | CkptError | None
    optimizer: str | None
    record: OptimizerRecord | CkptError | None
    jobs: int = 1
    allow_for: tuple[tuple[str, frozenset[str]], ...] = ()
    glob_root: str | None = None
    hashes: str | None = None
    manifest: tuple[TensorHash, ...] | CkptError | None = None
    progress: Progress | None = field(default=None, compare=False)
    state_key_for: tuple[tuple[str, str], ...] = ()

    def allowed(self, path: str) -> frozenset[str]:
        """The globals trusted for ``path``: everywhere, and by the globs it matches."""
        matching = self._matching(path)
        extra = [names for glob, names in self.allow_for if glob in matching]
        return self.allow_globals.union(*extra)

    def state_key_of(self, path: str) -> str | None:
        """The state key for ``path``: the one of the ``state_key_for`` globs it matches, else
        ``state_key``.

        Raises:
            SelectionError: globs with different state keys match ``path``.
        """
        matching = self._matching(path)
        found = [(glob, key) for glob, key in self.state_key_for if glob in matching]
        if not found:
            return self.state_key
        (glob, key), other = found[0], next((f for f in found if f[1] != found[0][1]), None)
        if other is not None:
            raise SelectionError(
                f"matches the state-key globs {glob!r} ({key!r}) and {other[0]!r} ({other[1]!r})",
                path=path,
                hint="make the state-key globs match different files, or give --state-key",
            )
        return key

    def _matching(self, path: str) -> set[str]:
        """The globs of ``allow_for`` and ``state_key_for`` that ``path`` (relative to
        ``glob_root``; a remote path or one outside it matches none) matches."""
        if self.glob_root is None or "://" in path:
            return set()
        relative = os.path.relpath(os.path.abspath(path), self.glob_root).replace(os.sep, "/")
        if relative.startswith("../"):
            return set()
        globs = {g for g, _ in self.allow_for} | {g for g, _ in self.state_key_for}
        return {g for g in globs if glob_matches(g, relative)}


@dataclass(frozen=True)
class Subject:
    """What a check looks at: the file as named, its format, the run's options and, from the
    ``CHECKPOINT`` phase on, the open checkpoint; from the ``ENTRIES`` phase on, the entries
    below ``state_key``."""

    path: str
    fmt: str
    opts: Options
    ckpt: Checkpoint | None = None
    entries: list[TensorEntry] | None = None

    @property
    def checkpoint(self) -> Checkpoint:
        """The open checkpoint (``CHECKPOINT`` and ``ENTRIES`` checks only)."""
        if self.ckpt is None:
            raise AssertionError("a check before the checkpoint was opened asked for it")
        return self.ckpt

    @property
    def tensors(self) -> list[TensorEntry]:
        """The entries below ``state_key`` (``ENTRIES`` checks only)."""
        if self.entries is None:
            raise AssertionError("a check before flat-reader asked for the entries")
        return self.entries


@dataclass(frozen=True)
class Check:
    """One check of ``verify``: everything about it, in the module that implements it.

    Each public module of ``ckptctl/ops/verify/`` defines one as ``CHECK``; the registry
    (``_registry.py``) collects them, so a new check is one new module.

    Attributes:
        name: the check id (findings, ``--check``, JSON, the SARIF rule id).
        order: where the check stands in :data:`CHECKS` (``--check`` choices, SARIF rules).
        phase: when it runs, and so where its finding stands among a file's findings (within
            a phase, by ``order``).
        short: the SARIF rule's short description.
        full: the SARIF rule's full description (empty: the short one).
        run: the check (None: the runner makes its finding while opening the file, or it is
            the ``flat-reader`` gate); None from it: the check does not apply to this file.
            A ``CkptError`` it raises fails this check only.
        option: the :class:`Options` field that must be set for the check to run (the
            ``verify`` keyword, and the option and configuration key spelled with dashes).
        reported_only: run only when the check is reported (``checks``/``skip``); a check
            whose verdict counts for the file (``fails_as``) must not set it.
        unskippable: why ``skip`` may not name it (then it is always reported).
        fails_as: the file's verdict when this check fails (unsafe beats unreadable).
        security_severity: GitHub's severity of the SARIF rule (a security rule).
    """

    name: str
    order: int
    phase: Phase
    short: str
    full: str = ""
    run: Callable[[Subject], Finding | None] | None = None
    option: str | None = None
    reported_only: bool = False
    unskippable: str | None = None
    fails_as: FileVerdict | None = None
    security_severity: str | None = None

    @property
    def rule(self) -> Rule:
        """How SARIF describes the check."""
        return Rule(self.name, self.short, self.full, self.security_severity)


def plural(n: int, word: str) -> str:
    """``1 tensor``, ``1,234 tensors``."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def more(total: int, shown: int = MESSAGE_LIMIT) -> str:
    """``; and 3 more`` when ``total`` names were cut to ``shown``."""
    return f"; and {total - shown} more" if total > shown else ""


def fail_from(check: str, exc: CkptError, prefix: str = "") -> Finding:
    """The failed finding of ``check`` that says what ``exc`` says."""
    return Finding(check, Status.FAIL, prefix + exc.message, hint_of(exc))

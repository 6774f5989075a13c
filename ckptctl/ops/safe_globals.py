"""``verify --print-safe-globals``: what to allow so torch loads needs-trust files (issue 28).

A ``needs-trust`` file whose only obstacle is globals outside torch's weights-only allowlist
loads with ``torch.load(f, weights_only=True)`` once those globals are passed to
``torch.serialization.add_safe_globals``. The verdicts are :mod:`ckptctl.safety`'s; this only
collects them and refuses what allowing globals cannot or must not fix:

* an ``unsafe`` file (a global or construct that runs code): :class:`UnsafePickleError`;
* a file that needs trust for another reason (an opcode torch's loader does not know, a
  container torch refuses): :class:`UnsupportedError`, naming the reason.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ckptctl.errors import CkptError, UnknownFormatError, UnsafePickleError, UnsupportedError
from ckptctl.formats import open_checkpoint
from ckptctl.formats.pytorch._safety import first_unsafe
from ckptctl.ops._walk import expand
from ckptctl.report.safe_globals import SafeGlobalsReport
from ckptctl.safety import Verdict, carried_safety

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ckptctl.safety import PickleSafety

__all__ = ["SafeGlobalsReport", "safe_globals_for"]

_DO_NOT_LOAD = "do not load it; ask its author for safetensors or a weights-only state_dict"


def _safety_of(path: str, walked: bool) -> PickleSafety | None:
    """The file's verdict (None: no pickle); a file ckptctl cannot read but judged counts."""
    try:
        with open_checkpoint(path) as ckpt:
            return ckpt.safety
    except CkptError as exc:
        carried = carried_safety(exc)
        if carried is not None:
            return carried
        if walked and isinstance(exc, UnknownFormatError):
            return None
        raise


def safe_globals_for(paths: Iterable[str | os.PathLike[str]]) -> SafeGlobalsReport:
    """The globals to allow so ``torch.load(f, weights_only=True)`` loads every file.

    Args:
        paths: files (directories are walked, as by ``verify``).

    Raises:
        UnsafePickleError: a file is unsafe; allowing its globals would run code.
        UnsupportedError: a file needs trust for a reason other than globals.
        InputError: a file cannot be read.
    """
    targets = expand([os.fspath(p) for p in paths])
    names: dict[str, None] = {}
    for target in targets:
        safety = _safety_of(target.path, target.walked)
        if safety is None or safety.verdict is Verdict.SAFE:
            continue
        if safety.verdict is Verdict.UNSAFE:
            raise UnsafePickleError(
                f"refusing to allow globals of an unsafe file: {first_unsafe(safety)}",
                path=target.path,
                hint=_DO_NOT_LOAD,
            )
        problems = [p for p in safety.problems if p.reached and p.verdict is Verdict.NEEDS_TRUST]
        if problems:
            raise UnsupportedError(
                f"add_safe_globals cannot make torch load it: {problems[0].message}",
                path=target.path,
                hint="re-save it with torch.save (default protocol), or save safetensors",
            )
        names.update(dict.fromkeys(g.name for g in safety.untrusted()))
    return SafeGlobalsReport(tuple(t.path for t in targets), tuple(names))

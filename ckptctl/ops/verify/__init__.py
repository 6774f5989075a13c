"""``verify``: the CI gate. Every file gets a list of named findings; nothing raises.

Each check is one module of this package, its finding a :class:`Finding` with a ``check`` id
(the CLI contract and issue #5); the module's docstring says what it checks and its ``CHECK``
(:class:`~ckptctl.ops.verify._check.Check`) registers it, with its SARIF rule and the option
that turns it on. Every file gets ``readable`` (or ``lfs-pointer``), ``safe-pickle`` (pickles
only), ``sharded-index`` (indexes only), ``chat-template`` and ``gguf-layout`` (GGUF only),
``flat-reader`` and ``quant-layout`` (quantized modules only); ``min-tensors``, ``expect``,
``no-nan``, ``optimizer`` and ``hashes`` when asked for.

Bad files are findings, never exceptions: :func:`verify` catches ``CkptError`` per file and per
check, and any other exception per file (a failed ``readable`` finding naming it as a bug), so one
file never stops the others. ``report.ok`` is true when no finding failed; the CLI exits 1
otherwise. ``checks``/``skip`` choose which findings are reported (``readable`` and
``lfs-pointer`` always are).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ckptctl.errors import SelectionError
from ckptctl.ops._optimizer import load_record
from ckptctl.ops._walk import expand
from ckptctl.ops.verify._check import Options
from ckptctl.ops.verify._registry import ALWAYS_REPORTED, BY_NAME, CHECKS
from ckptctl.ops.verify._run import report_of
from ckptctl.ops.verify.expect import load_specs
from ckptctl.ops.verify.hashes import load_manifest
from ckptctl.report.optimizer import OptimizerCheck, Orphan
from ckptctl.report.verify import FileResult, FileVerdict, Finding, Status, VerifyReport

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ckptctl.model import Progress

__all__ = [
    "ALWAYS_REPORTED",
    "CHECKS",
    "FileResult",
    "FileVerdict",
    "Finding",
    "OptimizerCheck",
    "Orphan",
    "Status",
    "VerifyReport",
    "verify",
]


def verify(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    state_key: str | None = None,
    no_nan: bool = False,
    expect: str | os.PathLike[str] | None = None,
    min_tensors: int | None = None,
    optimizer: str | os.PathLike[str] | None = None,
    checks: Iterable[str] = (),
    skip: Iterable[str] = (),
    allow_globals: Iterable[str] = (),
    trust: bool = False,
    jobs: int = 1,
    allow_globals_for: Mapping[str, Iterable[str]] | None = None,
    globs_root: str | os.PathLike[str] | None = None,
    hashes: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    state_key_for: Mapping[str, str] | None = None,
) -> VerifyReport:
    """Check checkpoint files for CI; bad files become failed findings, never exceptions.

    Args:
        paths: one path or several, checked in the order given; a directory is walked
            (recursively, sorted), unless it is a sharded checkpoint (one ``*.index.json``):
            every file whose name says checkpoint is checked, and files with other names that
            are no checkpoint and hold no pickle are skipped (``report.skipped_paths``).
        state_key: apply the checks below this dotted key of nested checkpoints.
        no_nan: scan every float tensor for NaN and Inf (reads all tensor bytes, in chunks).
        expect: a reference checkpoint the files must match in tensor names and shapes.
        min_tensors: fail files with fewer tensors than this.
        optimizer: a Burn optimizer record (``optim-N.bpk``) that must attach to each file.
        checks: report only these checks (and ``readable``); empty: every check that runs.
        skip: do not report these checks.
        allow_globals: ``module.name`` globals to trust, as torch's ``add_safe_globals`` does.
        trust: accept needs-trust pickles (a warning, not a failure); unsafe ones still fail.
        allow_globals_for: path glob -> more globals to trust for the files it matches
            (``*`` within one segment, ``**`` across segments; see :mod:`ckptctl.ops.config`).
        state_key_for: path glob -> the state key for the files it matches (as
            ``allow_globals_for``); files matching none get ``state_key``.
        globs_root: the directory those globs are relative to (default: the current one).
        jobs: files checked at once (in worker processes) and tensors scanned at once for
            ``no_nan``; the report does not depend on it.
        hashes: a manifest written by ``ckptctl hash``: every tensor's name, dtype, shape and
            digest must match it (no tensor missing, none extra).
        progress: called as ``progress(nbytes, total)`` as ``no_nan`` and ``hashes`` read each
            tensor; ``total`` grows as files are opened (each pass over a file's tensors adds
            its bytes), and is None for files checked in worker processes (``jobs`` > 1),
            which are counted when done.

    Returns:
        A :class:`VerifyReport`; ``report.ok`` is true when every file passed every check.

    Raises:
        SelectionError: ``checks`` or ``skip`` names an unknown check, or ``skip`` one that is
            always reported, or ``state_key_for`` globs with different keys match one file.

    Example:
        >>> report = verify(["model.safetensors", "ckpt.pt"], state_key="model")  # doctest: +SKIP
        >>> report.ok, report.summary_line()  # doctest: +SKIP
        (False, '2 files: 1 passed, 1 failed')
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    chosen = set(checks) or set(CHECKS)
    unknown = (chosen | set(skip)) - set(CHECKS)
    if unknown:
        raise SelectionError(
            f"unknown check {sorted(unknown)[0]!r}", hint="checks: " + ", ".join(CHECKS)
        )
    for check in ALWAYS_REPORTED:
        if check in set(skip):
            why = BY_NAME[check].unskippable
            raise SelectionError(f"the {check} check cannot be skipped: {why}")
    options = Options(
        checks=frozenset(chosen - set(skip)) | set(ALWAYS_REPORTED),
        allow_globals=frozenset(allow_globals),
        trust=trust,
        state_key=state_key,
        no_nan=no_nan,
        min_tensors=min_tensors,
        expect=None if expect is None else os.fspath(expect),
        expect_specs=None if expect is None else load_specs(expect),
        optimizer=None if optimizer is None else os.fspath(optimizer),
        record=None if optimizer is None else load_record(optimizer),
        jobs=jobs,
        allow_for=tuple(
            (glob, frozenset(names)) for glob, names in (allow_globals_for or {}).items()
        ),
        glob_root=os.path.abspath(os.fspath(globs_root) if globs_root is not None else os.curdir),
        hashes=None if hashes is None else os.fspath(hashes),
        manifest=None if hashes is None else load_manifest(hashes),
        progress=progress,
        state_key_for=tuple((state_key_for or {}).items()),
    )
    targets = expand([os.fspath(p) for p in paths])
    for target in targets:
        options.state_key_of(target.path)  # two state keys for one file: refused before any
    return report_of(targets, options)

"""Running the checks: every file (in worker processes with ``jobs``), every phase of one
file, and the file's verdict. Bad files are findings, never exceptions: a ``CkptError`` fails
the check that met it, any other exception fails the file (a ``readable`` finding naming it as
a bug), so one file never stops the others."""

from __future__ import annotations

from dataclasses import replace
from itertools import groupby
from typing import TYPE_CHECKING

from ckptctl.errors import CkptError, UnknownFormatError, UnsafePickleError
from ckptctl.formats import detect_format, open_checkpoint
from ckptctl.ops._pickle_check import safe_pickle_finding
from ckptctl.ops.verify._check import Options, Phase, Subject, fail_from
from ckptctl.ops.verify._registry import BY_NAME, REGISTRY
from ckptctl.ops.verify.flat_reader import flat_reader
from ckptctl.ops.verify.readable import label, readable, unreadable
from ckptctl.report.verify import FileResult, FileVerdict, Finding, Status, VerifyReport
from ckptctl.safety import Verdict, carried_safety

if TYPE_CHECKING:
    from ckptctl.model import Checkpoint, Progress
    from ckptctl.ops._walk import Target
    from ckptctl.safety import PickleSafety

#: Files handed to a worker process at a time (amortises the round trip for small files).
_CHUNK_FILES = 8
_WORKER_OPTIONS: list[Options] = []


def report_of(targets: list[Target], opts: Options) -> VerifyReport:
    """The report over every target: a walked directory in which no file is a checkpoint
    fails as one file; skipped files are listed."""
    results = _check_all(targets, opts)
    kept: list[FileResult] = []
    for top, group in groupby(zip(targets, results, strict=True), key=lambda tr: tr[0].top):
        found = [r for _, r in group if r is not None]
        kept += found or ([] if top is None else [_no_checkpoint_in(top)])
    skipped = tuple(t.path for t, r in zip(targets, results, strict=True) if r is None)
    rules = tuple(c.rule for c in REGISTRY)
    return VerifyReport(tuple(kept), skipped_paths=skipped, rules=rules)


def _no_checkpoint_in(top: str) -> FileResult:
    """A walked directory in which no file is a checkpoint fails, as an empty one does: a gate
    must not pass because a path points at the wrong place."""
    finding = Finding(
        "readable",
        Status.FAIL,
        "is a directory with no checkpoint in it (no file is named as one, none is one, and none "
        "holds a pickle)",
        "name the checkpoint files or the directory that holds them",
    )
    return FileResult(top, None, None, None, (finding,), verdict=FileVerdict.UNREADABLE)


def _check_all(targets: list[Target], opts: Options) -> list[FileResult | None]:
    """Every target's result in order; with ``jobs`` > 1, in that many forked processes (the
    pickle walk is pure Python, so threads would share one core). ``progress`` is told of the
    tensor bytes read: here as they are read, toward an end that grows as files are opened;
    from worker processes, a file's bytes when it is done, with no end."""
    import multiprocessing
    import threading

    if (
        opts.jobs <= 1
        or len(targets) < 2
        or "fork" not in multiprocessing.get_all_start_methods()
        or threading.active_count() > 1  # forking a threaded process can deadlock the child
        or any("://" in t.path for t in targets)  # remote reads count their traffic here
    ):
        if opts.progress is not None:
            opts = replace(opts, progress=_growing(opts.progress))
        return [_verify_one(t, opts) for t in targets]
    from concurrent.futures import ProcessPoolExecutor

    workers = min(opts.jobs, len(targets))
    with ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("fork"),  # the options are inherited, not sent
        initializer=_WORKER_OPTIONS.append,
        initargs=(replace(opts, progress=None),),
    ) as pool:
        results = []
        for result, nbytes in pool.map(_verify_in_worker, targets, chunksize=_CHUNK_FILES):
            if opts.progress is not None and nbytes:
                opts.progress(nbytes, None)  # the bytes of a file once it is done; no end
            results.append(result)
        return results


def _verify_in_worker(target: Target) -> tuple[FileResult | None, int]:
    """One file's result in a worker process, with the tensor bytes its checks read."""
    read = [0]

    def count(nbytes: int, total: int | None) -> None:
        read[0] += nbytes

    result = _verify_one(target, replace(_WORKER_OPTIONS[-1], progress=count))
    return result, read[0]


def _growing(progress: Progress) -> Progress:
    """``progress`` told of every pass over every file as one: each pass's total (its first
    call, ``progress(0, total)``) is added to the end, which so grows as files are opened."""
    end = 0

    def report(nbytes: int, total: int | None) -> None:
        nonlocal end
        if nbytes == 0:
            end += total or 0
        progress(nbytes, end)

    return report


def _verify_one(target: Target, opts: Options) -> FileResult | None:
    """One file's result, whatever happens: a bug fails this file, not the whole run. None:
    a walked file that is no checkpoint and holds no pickle, and not named as one (skipped)."""
    path = target.path
    try:
        result = _verify_file(path, opts, target.skippable)
    except Exception as exc:  # one bad file must not stop a CI gate over many
        finding = Finding(
            "readable",
            Status.FAIL,
            f"internal error while checking this file: {type(exc).__name__}: {exc}",
            "this is a bug in ckptctl; please report it with the file if you can",
        )
        return FileResult(path, None, None, None, (finding,), verdict=FileVerdict.UNREADABLE)
    if result is None:
        return None
    findings = tuple(f for f in result.findings if f.check in opts.checks)
    return replace(result, findings=findings, verdict=_file_verdict(result.findings))


def _file_verdict(findings: tuple[Finding, ...]) -> FileVerdict:
    """The file's verdict from all its findings (before ``checks``/``skip`` choose): the
    pickle verdict, unless a failed check makes the file unsafe or unreadable."""
    pickle = next((f for f in findings if f.check == "safe-pickle"), None)
    verdict = None if pickle is None or pickle.safety is None else pickle.safety.verdict
    if verdict is Verdict.UNSAFE or (
        pickle is not None and verdict is None and pickle.status is Status.FAIL
    ):
        return FileVerdict.UNSAFE
    failed = {BY_NAME[f.check].fails_as for f in findings if f.status is Status.FAIL}
    for worst in (FileVerdict.UNSAFE, FileVerdict.UNREADABLE):
        if worst in failed:
            return worst
    return FileVerdict.NEEDS_TRUST if verdict is Verdict.NEEDS_TRUST else FileVerdict.SAFE


def _skip(exc: CkptError, skippable: bool) -> bool:
    """A walked file not named as a checkpoint that no reader accepts and that holds no pickle
    is skipped, not failed."""
    return skippable and isinstance(exc, UnknownFormatError) and exc.safety is None


def _verify_file(path: str, opts: Options, skippable: bool = False) -> FileResult | None:
    """Every finding about one file, phase by phase (None: a walked file skipped)."""
    try:
        fmt = detect_format(path).name
    except CkptError as exc:
        if _skip(exc, skippable):
            return None
        findings = _unreadable(path, exc, opts)
        return FileResult(path, None, None, None, tuple(findings), label=label(exc))
    subject = Subject(path, fmt, replace(opts, state_key=opts.state_key_of(path)))
    indexed = _run_phase(Phase.INDEX, subject)
    try:
        ckpt = open_checkpoint(path)
    except CkptError as exc:
        if _skip(exc, skippable):
            return None
        findings = _refused(path, exc, opts)
        return FileResult(path, fmt, None, None, (*findings, *indexed))
    with ckpt:
        return _verify_open(replace(subject, ckpt=ckpt), indexed)


def _unreadable(path: str, exc: CkptError, opts: Options) -> list[Finding]:
    """``readable`` (or ``lfs-pointer``) failed, then the verdict over the pickles judged
    before the reader gave up, if any (also in a file that is no checkpoint: issue 28)."""
    findings = [unreadable(exc)]
    carried = carried_safety(exc)
    if carried is not None:
        findings.append(_safe_pickle(carried, path, opts, readable=False))
    return findings


def _refused(path: str, exc: CkptError, opts: Options) -> list[Finding]:
    """The findings of a file its reader refused to open."""
    if not isinstance(exc, UnsafePickleError):
        return _unreadable(path, exc, opts)
    carried = carried_safety(exc)
    if carried is None:  # the unpickler's own refusal: its message and hint
        return [fail_from("safe-pickle", exc)]
    return [_safe_pickle(carried, path, opts)]


def _safe_pickle(
    safety: PickleSafety, path: str, opts: Options, *, readable: bool = True
) -> Finding:
    return safe_pickle_finding(
        safety, allow_globals=opts.allowed(path), trust=opts.trust, readable=readable
    )


def _verify_open(subject: Subject, indexed: list[Finding]) -> FileResult:
    """The findings of an open checkpoint: ``readable`` and ``safe-pickle`` over every part,
    the ``INDEX`` findings, then (when every part read) the checks on the checkpoint, the
    flat-reader gate and the checks on the entries it selects."""
    ckpt, path, opts = subject.checkpoint, subject.path, subject.opts
    safety, rest = _check_rest(ckpt)
    findings = [readable(ckpt) if rest is None else fail_from("readable", rest)]
    if safety is not None:
        findings.append(_safe_pickle(safety, path, opts, readable=rest is None))
    findings += indexed
    if rest is not None:  # a damaged part: the other checks would fail on it again
        return FileResult(path, ckpt.format, ckpt.kind, len(ckpt), tuple(findings))
    findings += _run_phase(Phase.CHECKPOINT, subject)
    flat, entries = flat_reader(ckpt, opts.state_key, path)
    findings.append(flat)
    if entries is None:  # nothing below --state-key: the other checks have nothing to see
        return FileResult(path, ckpt.format, ckpt.kind, 0, tuple(findings))
    findings += _run_phase(Phase.ENTRIES, replace(subject, entries=entries))
    return FileResult(path, ckpt.format, ckpt.kind, len(entries), tuple(findings))


def _check_rest(ckpt: Checkpoint) -> tuple[PickleSafety | None, CkptError | None]:
    """The verdict over the whole checkpoint once every part opened lazily (a DCP directory's
    tensor chunks) is opened too, and the error of a damaged part (with the verdict over what
    was judged before it)."""
    if ckpt.check_rest is None:
        return ckpt.safety, None
    try:
        return ckpt.check_rest(), None
    except CkptError as exc:
        return carried_safety(exc) or ckpt.safety, exc


def _run_phase(phase: Phase, subject: Subject) -> list[Finding]:
    """The findings of the checks of ``phase`` that run on this file, in check order; a
    ``CkptError`` (a tensor that cannot be read) fails that check only."""
    opts = subject.opts
    found: list[Finding] = []
    for check in REGISTRY:
        if check.phase is not phase or check.run is None:
            continue
        value = None if check.option is None else getattr(opts, check.option)
        if check.option is not None and (value is None or value is False):
            continue  # an optional check not asked for (min_tensors=0 is asked for)
        if check.reported_only and check.name not in opts.checks:
            continue
        try:
            finding = check.run(subject)
        except CkptError as exc:
            finding = fail_from(check.name, exc)
        if finding is not None:
            found.append(finding)
    return found

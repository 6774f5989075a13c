"""``verify``: the CI gate. Every file gets a list of named findings; nothing raises.

Checks, each a :class:`Finding` with a ``check`` id (the CLI contract and issue #5):

* ``readable`` -- the file opens and passes every structural check its reader has;
* ``lfs-pointer`` -- instead of ``readable`` when the file (or a part of it: a shard, a DCP rank
  file, a DeepSpeed partition) is a git-lfs pointer, the text a clone without ``git lfs pull``
  leaves where the weights should be (issue 44): its oid and size, and the hint to fetch it;
* ``safe-pickle`` -- pickle-based files only: the verdict of :mod:`ckptctl.safety`, with every
  global named and classified. ``unsafe`` always fails (and the file is never unpickled),
  ``needs-trust`` fails unless ``trust`` is set or every global at fault is in
  ``allow_globals``; streams ``torch.load`` would not read only warn;
* ``sharded-index`` -- ``*.index.json`` only: :func:`ckptctl.formats.sharded.check_index`;
* ``flat-reader`` -- a reader that expects a top-level name → tensor map (candle's
  ``from_pth``, ``safetensors``' ``load``) would find tensors: nested checkpoints, whole pickled
  models, TorchScript archives, bare tensors and empty files fail, saying where the tensors are
  and how to fix it; with ``state_key`` the gate applies below that key;
* ``min-tensors``, ``no-nan`` (chunked NaN/Inf scan), ``expect`` (Tensor Loading Summary against
  a reference) and ``optimizer`` (burn-store spec §7.5: will a Burn optimizer record attach to
  this model?) when asked for.

Bad files are findings, never exceptions: :func:`verify` catches ``CkptError`` per file and per
check, and any other exception per file (a failed ``readable`` finding naming it as a bug), so one
file never stops the others. ``report.ok`` is true when no finding failed; the CLI exits 1
otherwise. ``checks``/``skip`` choose which findings are reported (``readable`` and
``lfs-pointer`` always are).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, replace
from itertools import groupby
from typing import TYPE_CHECKING

import numpy as np

from ckptctl.dtypes import DType, to_float
from ckptctl.errors import (
    CkptError,
    LfsPointerError,
    SelectionError,
    UnknownFormatError,
    UnsafePickleError,
)
from ckptctl.fix import Command, Note, Option, hint_of
from ckptctl.formats import detect_format, open_checkpoint, read_layout, resolve_path
from ckptctl.formats._base import ranged_step
from ckptctl.model import CheckpointKind, StridedData, describe_groups
from ckptctl.ops._optimizer import OptimizerRecord, check_optimizer, load_record
from ckptctl.ops._pickle_check import safe_pickle_finding
from ckptctl.ops._quant import check_group_index, find_quantized
from ckptctl.ops._select import select_state_key, top_level_groups
from ckptctl.ops._walk import Target, expand, glob_matches
from ckptctl.ops.manifest import check_hashes, read_manifest
from ckptctl.ops.summary import specs_of, summarize
from ckptctl.report.optimizer import OptimizerCheck, Orphan
from ckptctl.report.verify import (
    ALWAYS_REPORTED,
    CHECKS,
    FileResult,
    FileVerdict,
    Finding,
    Status,
    VerifyReport,
)
from ckptctl.safety import Verdict, carried_safety
from ckptctl.sources import CHUNK_BYTES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from ckptctl.model import Checkpoint, JSONValue, TensorEntry
    from ckptctl.report.manifest import TensorHash
    from ckptctl.safety import PickleSafety

    Shape = tuple[int, ...]
    Specs = Mapping[str, tuple[DType, Shape]]

__all__ = [
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

#: Bytes read per ``os.pread`` call by the NaN/Inf scan (a multiple of every itemsize).
SCAN_CHUNK_BYTES = CHUNK_BYTES
#: Largest set of distinct elements of an expanded (stride-0) view scanned at once; each is
#: counted as often as the view repeats it, so a 1 KB file viewing 4 floats as 2**40 is judged
#: from its 4 floats (issue 25).
MAX_DISTINCT_SCAN_BYTES = 64 << 20
#: Names listed in a finding's message before "and N more".
MESSAGE_LIMIT = 5

_SCANNED = frozenset({DType.C64, DType.C128})
#: The checks :data:`ALWAYS_REPORTED`, and why each cannot be skipped.
_UNSKIPPABLE = {
    "readable": "every other check needs it",
    "lfs-pointer": "it fails a git-lfs pointer in readable's place",
}
assert tuple(_UNSKIPPABLE) == ALWAYS_REPORTED
_FLAT_READERS = "a flat name → tensor reader (candle's from_pth, safetensors' load)"
#: Checkpoints no flat reader opens (each read by its producer's loader), and what they are.
_NO_FLAT_READER = {
    "dcp": "torch.distributed.checkpoint directory",
    "deepspeed-zero": "DeepSpeed ZeRO save",
}


# --- entry point --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Options:
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

    def allowed(self, path: str) -> frozenset[str]:
        """The globals trusted for ``path``: everywhere, and by the globs it matches."""
        if not self.allow_for or self.glob_root is None or "://" in path:
            return self.allow_globals
        relative = os.path.relpath(os.path.abspath(path), self.glob_root).replace(os.sep, "/")
        if relative.startswith("../"):
            return self.allow_globals
        extra = [names for glob, names in self.allow_for if glob_matches(glob, relative)]
        return self.allow_globals.union(*extra)

    hashes: str | None = None
    manifest: tuple[TensorHash, ...] | CkptError | None = None


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
        globs_root: the directory those globs are relative to (default: the current one).
        jobs: files checked at once (in worker processes) and tensors scanned at once for
            ``no_nan``; the report does not depend on it.
        hashes: a manifest written by ``ckptctl hash``: every tensor's name, dtype, shape and
            digest must match it (no tensor missing, none extra).

    Returns:
        A :class:`VerifyReport`; ``report.ok`` is true when every file passed every check.

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
    for check, why in _UNSKIPPABLE.items():
        if check in set(skip):
            raise SelectionError(f"the {check} check cannot be skipped: {why}")
    options = _Options(
        checks=frozenset(chosen - set(skip)) | set(ALWAYS_REPORTED),
        allow_globals=frozenset(allow_globals),
        trust=trust,
        state_key=state_key,
        no_nan=no_nan,
        min_tensors=min_tensors,
        expect=None if expect is None else os.fspath(expect),
        expect_specs=None if expect is None else _load_specs(expect),
        optimizer=None if optimizer is None else os.fspath(optimizer),
        record=None if optimizer is None else load_record(optimizer),
        jobs=jobs,
        allow_for=tuple(
            (glob, frozenset(names)) for glob, names in (allow_globals_for or {}).items()
        ),
        glob_root=os.path.abspath(os.fspath(globs_root) if globs_root is not None else os.curdir),
        hashes=None if hashes is None else os.fspath(hashes),
        manifest=None if hashes is None else _load_manifest(hashes),
    )
    targets = expand([os.fspath(p) for p in paths])
    results = _check_all(targets, options)
    kept: list[FileResult] = []
    for top, group in groupby(zip(targets, results, strict=True), key=lambda tr: tr[0].top):
        found = [r for _, r in group if r is not None]
        kept += found or ([] if top is None else [_no_checkpoint_in(top)])
    skipped = tuple(t.path for t, r in zip(targets, results, strict=True) if r is None)
    return VerifyReport(tuple(kept), skipped_paths=skipped)


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


#: Files handed to a worker process at a time (amortises the round trip for small files).
_CHUNK_FILES = 8
_WORKER_OPTIONS: list[_Options] = []


def _check_all(targets: list[Target], opts: _Options) -> list[FileResult | None]:
    """Every target's result in order; with ``jobs`` > 1, in that many forked processes (the
    pickle walk is pure Python, so threads would share one core)."""
    import multiprocessing
    import threading

    if (
        opts.jobs <= 1
        or len(targets) < 2
        or "fork" not in multiprocessing.get_all_start_methods()
        or threading.active_count() > 1  # forking a threaded process can deadlock the child
        or any("://" in t.path for t in targets)  # remote reads count their traffic here
    ):
        return [_verify_one(t, opts) for t in targets]
    from concurrent.futures import ProcessPoolExecutor

    workers = min(opts.jobs, len(targets))
    with ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("fork"),  # the options are inherited, not sent
        initializer=_WORKER_OPTIONS.append,
        initargs=(opts,),
    ) as pool:
        return list(pool.map(_verify_in_worker, targets, chunksize=_CHUNK_FILES))


def _verify_in_worker(target: Target) -> FileResult | None:
    return _verify_one(target, _WORKER_OPTIONS[-1])


def _verify_one(target: Target, opts: _Options) -> FileResult | None:
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
    """The file's verdict from all its findings (before ``checks``/``skip`` choose)."""
    pickle = next((f for f in findings if f.check == "safe-pickle"), None)
    verdict = None if pickle is None or pickle.safety is None else pickle.safety.verdict
    if verdict is Verdict.UNSAFE or (
        pickle is not None and verdict is None and pickle.status is Status.FAIL
    ):
        return FileVerdict.UNSAFE
    if any(f.check == "chat-template" and f.status is Status.FAIL for f in findings):
        return FileVerdict.UNSAFE
    if any(f.check in ALWAYS_REPORTED and f.status is Status.FAIL for f in findings):
        return FileVerdict.UNREADABLE
    return FileVerdict.NEEDS_TRUST if verdict is Verdict.NEEDS_TRUST else FileVerdict.SAFE


def _load_specs(path: str | os.PathLike[str]) -> Specs | CkptError:
    try:
        with open_checkpoint(path) as ref:
            return specs_of(ref.values())
    except CkptError as exc:
        return exc


def _load_manifest(path: str | os.PathLike[str]) -> tuple[TensorHash, ...] | CkptError:
    try:
        return read_manifest(path)
    except CkptError as exc:
        return exc


def _fail_from(check: str, exc: CkptError, prefix: str = "") -> Finding:
    return Finding(check, Status.FAIL, prefix + exc.message, hint_of(exc))


def _not_a_checkpoint(diagnosis: str) -> str:
    """``a JSON file, not a checkpoint`` from "this is a JSON file, but not a checkpoint ..."."""
    if not diagnosis.startswith("this is "):
        return "not a checkpoint"
    what = diagnosis[len("this is ") :]
    for stop in (";", ", but", ", not", " ("):
        what = what.split(stop, 1)[0]
    return f"{what}, not a checkpoint"


def _skip(exc: CkptError, skippable: bool) -> bool:
    """A walked file not named as a checkpoint that no reader accepts and that holds no pickle
    is skipped, not failed."""
    return skippable and isinstance(exc, UnknownFormatError) and exc.safety is None


def _unreadable(exc: CkptError) -> Finding:
    """The failed finding of a file that cannot be read: ``lfs-pointer`` for a git-lfs
    pointer (the file's or a shard's), else ``readable``."""
    if not isinstance(exc, LfsPointerError):
        return _fail_from("readable", exc)
    details: dict[str, JSONValue] = {"oid": exc.oid, "size": exc.size}
    if exc.path is not None:
        details["pointer"] = exc.path
    return Finding("lfs-pointer", Status.FAIL, exc.message, hint_of(exc), details=details)


def _label(exc: CkptError) -> str | None:
    if isinstance(exc, LfsPointerError):
        return "a git-lfs pointer, not a checkpoint"
    return _not_a_checkpoint(exc.message) if isinstance(exc, UnknownFormatError) else None


def _verify_file(path: str, opts: _Options, skippable: bool = False) -> FileResult | None:
    findings: list[Finding] = []
    try:
        fmt = detect_format(path).name
    except CkptError as exc:
        if _skip(exc, skippable):
            return None
        label = _label(exc)
        findings = [_unreadable(exc)]
        carried = carried_safety(exc)
        if carried is not None:  # pickles in a file that is no checkpoint (issue 28)
            findings.append(
                safe_pickle_finding(
                    carried, allow_globals=opts.allowed(path), trust=opts.trust, readable=False
                )
            )
        return FileResult(path, None, None, None, tuple(findings), label=label)
    if fmt == "safetensors-index":
        index = _check_index(resolve_path(path))  # a directory: its index
        if index is not None:
            findings.append(index)
    try:
        ckpt = open_checkpoint(path)
    except UnsafePickleError as exc:
        carried = carried_safety(exc)
        finding = (
            _fail_from("safe-pickle", exc)
            if carried is None
            else safe_pickle_finding(carried, allow_globals=opts.allowed(path), trust=opts.trust)
        )
        findings.insert(0, finding)
        return FileResult(path, fmt, None, None, tuple(findings))
    except CkptError as exc:
        if _skip(exc, skippable):
            return None
        findings.insert(0, _unreadable(exc))
        carried = carried_safety(exc)
        if carried is not None:  # judged before the reader gave up
            findings.insert(
                1,
                safe_pickle_finding(
                    carried, allow_globals=opts.allowed(path), trust=opts.trust, readable=False
                ),
            )
        return FileResult(path, fmt, None, None, tuple(findings))
    with ckpt:
        safety, rest = _check_rest(ckpt)
        findings.insert(0, _readable(ckpt) if rest is None else _fail_from("readable", rest))
        if safety is not None:
            findings.insert(
                1,
                safe_pickle_finding(
                    safety, allow_globals=opts.allowed(path), trust=opts.trust,
                    readable=rest is None,
                ),
            )  # fmt: skip
        if rest is not None:  # a damaged part: the other checks would fail on it again
            return FileResult(path, ckpt.format, ckpt.kind, len(ckpt), tuple(findings))
        if ckpt.format == "gguf":
            findings.extend(_gguf_findings(ckpt))
        if ckpt.format == "onnx" and "onnx-checksum" in opts.checks:
            checksum = _onnx_checksum(ckpt)
            if checksum is not None:
                findings.append(checksum)
        flat, entries = _flat_reader(ckpt, opts.state_key, path)
        findings.append(flat)
        if entries is None:  # nothing below --state-key: the other checks have nothing to see
            return FileResult(path, ckpt.format, ckpt.kind, 0, tuple(findings))
        if "quant-layout" in opts.checks:
            try:
                quantized = _quantized(entries)
            except CkptError as exc:  # a layout descriptor that cannot be read
                quantized = _fail_from("quant-layout", exc)
            if quantized is not None:
                findings.append(quantized)
        if opts.min_tensors is not None:
            findings.append(_min_tensors(entries, opts.min_tensors, opts.state_key))
        if opts.expect is not None:
            findings.append(_expect(path, entries, opts, opts.expect))
        if opts.no_nan:
            findings.append(_guard("no-nan", lambda: _no_nan(entries, opts.jobs)))
        if opts.optimizer is not None:
            optim, record = opts.optimizer, opts.record
            findings.append(
                _guard(
                    "optimizer",
                    lambda: _optimizer(path, ckpt.format, entries, optim, record, opts.state_key),
                )
            )
        if opts.hashes is not None:
            manifest, where = opts.manifest, opts.hashes
            findings.append(_guard("hashes", lambda: _hashes(entries, manifest, where)))
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


def _guard(check: str, run: Callable[[], Finding]) -> Finding:
    """Run one check; a ``CkptError`` (a tensor that cannot be read) fails that check only."""
    try:
        return run()
    except CkptError as exc:
        return _fail_from(check, exc)


# --- readable, sharded-index --------------------------------------------------------------------


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def _readable(ckpt: Checkpoint) -> Finding:
    what = f"{ckpt.format}, {_plural(len(ckpt), 'tensor')}"
    if ckpt.sharding is not None:
        what += f" in {_plural(len(ckpt.sharding.shards), 'shard')}"
    if ckpt.scalars:
        what += f", {_plural(len(ckpt.scalars), 'scalar')}"
    return Finding("readable", Status.OK, what + "; every structural check passed")


def _check_index(path: str) -> Finding | None:
    """The index checked against its shards; None when the index itself is unreadable."""
    from ckptctl.formats.sharded import check_index

    try:
        problems = check_index(path)
    except CkptError:  # the index itself is bad: ``readable`` reports it once
        return None
    if not problems:
        return Finding("sharded-index", Status.OK, "the index and its shards agree on every tensor")
    return Finding(
        "sharded-index",
        Status.FAIL,
        f"{_plural(len(problems), 'problem')}: "
        + "; ".join(problems[:MESSAGE_LIMIT])
        + _more(len(problems)),
        "re-download the checkpoint or regenerate its index",
        details={"problems": list(problems)},
    )


def _more(total: int, shown: int = MESSAGE_LIMIT) -> str:
    return f"; and {total - shown} more" if total > shown else ""


# --- flat-reader ------------------------------------------------------------------------------


def _short_class(ckpt: Checkpoint) -> str:
    module_class = ckpt.structure.module_class if ckpt.structure is not None else None
    if not module_class:
        return "model"
    return module_class.rsplit(".", 1)[-1]


def _is_optimizer_key(key: str) -> bool:
    lower = key.lower()
    return "optim" in lower or "scheduler" in lower


def _best_key(groups: Mapping[str, int]) -> str:
    """The key most likely to hold the weights: the largest group that is not optimizer state."""
    weights = {k: n for k, n in groups.items() if not _is_optimizer_key(k)} or dict(groups)
    return max(weights, key=lambda k: weights[k])  # max keeps the first of equal counts


def _flat_reader(
    ckpt: Checkpoint, state_key: str | None, path: str | None = None
) -> tuple[Finding, list[TensorEntry] | None]:
    """The flat-reader gate, and the entries the other checks look at (None: none below key).

    ``path`` is the checkpoint as the user named it (a DCP directory rather than its
    ``.metadata``; default: the checkpoint's path): the commands suggested name it so.
    """
    path = ckpt.path if path is None else path
    entries = ckpt.entries()
    kind = ckpt.kind
    cls = _short_class(ckpt)
    convert = Command("convert", (path, "model.safetensors"))
    if not entries and kind in (CheckpointKind.MODULE, CheckpointKind.TORCHSCRIPT):
        what = "TorchScript archive" if kind is CheckpointKind.TORCHSCRIPT else "pickled object"
        return Finding(
            "flat-reader",
            Status.FAIL,
            f"a {what} of {cls} with no tensors: there are no weights to load",
            "was the wrong file saved? (re-saving its state_dict() would be empty too)",
        ), entries
    if kind is CheckpointKind.MODULE:
        return Finding(
            "flat-reader",
            Status.FAIL,
            f"a pickled {cls} object, not a state_dict: re-save model.state_dict() "
            "(or save safetensors)",
            Note(
                f"loading it needs {cls}'s code; {_FLAT_READERS} finds no tensors. "
                "Without torch: {fix0}",
                (convert,),
            ),
        ), entries
    if kind is CheckpointKind.TORCHSCRIPT:
        return Finding(
            "flat-reader",
            Status.FAIL,
            f"a TorchScript archive of {cls}, not a state_dict: re-save "
            "torch.jit.load(f).state_dict() (or save safetensors)",
            Note(f"{_FLAT_READERS} finds no tensors in it. Without torch: {{fix0}}", (convert,)),
        ), entries
    if kind is CheckpointKind.TENSOR:
        return Finding(
            "flat-reader",
            Status.FAIL,
            "a single bare tensor, not a name → tensor map: a flat reader finds no tensor names",
            "save a dict instead, e.g. torch.save({'weight': t}, path)",
        ), entries
    if state_key is not None:
        try:
            selected = select_state_key(entries, state_key, ckpt)
        except SelectionError as exc:
            return _fail_from("flat-reader", exc), None
        deeper = _deeper_than(ckpt, state_key)
        if deeper:
            best = max(deeper, key=lambda k: deeper[k])
            where = describe_groups(dict(list(deeper.items())[:MESSAGE_LIMIT]))
            return Finding(
                "flat-reader",
                Status.FAIL,
                f"no tensors directly under state key {state_key!r}: they are deeper, under "
                f"{where}; a flat reader given {state_key!r} finds none",
                Note("pass {fix0}", (Option("state_key", best),)),
                details={"state_key": state_key, "deeper": deeper},
            ), selected
        return Finding(
            "flat-reader",
            Status.OK,
            f"{_plural(len(selected), 'tensor')} below state key {state_key!r}",
        ), selected
    if not entries:
        scalars = f" (only {_plural(len(ckpt.scalars), 'scalar')})" if ckpt.scalars else ""
        return Finding(
            "flat-reader",
            Status.FAIL,
            f"the file holds no tensors{scalars}",
            "a weights file needs at least one tensor; was the wrong file saved?",
        ), entries
    if kind is CheckpointKind.NESTED and ckpt.format in _NO_FLAT_READER:
        return _nested_directory(ckpt, path), entries
    if kind is CheckpointKind.NESTED:
        return _nested(ckpt, entries, path), entries
    how = (
        "a flat name → tensor map" if kind is CheckpointKind.STATE_DICT else "flat by construction"
    )
    return Finding(
        "flat-reader", Status.OK, f"{_plural(len(entries), 'tensor')} at the top level ({how})"
    ), entries


def _deeper_than(ckpt: Checkpoint, state_key: str) -> dict[str, int]:
    """Containers below ``state_key`` when no tensor sits directly in it (a flat reader given
    the key would see only dicts); empty when some do, or the format has no containers."""
    if ckpt.structure is None:
        return {}
    key = state_key.strip(".")
    containers = ckpt.structure.containers
    if containers.get(key):
        return {}
    return {c: n for c, n in containers.items() if c.startswith(key + ".")}


def _nested_directory(ckpt: Checkpoint, path: str) -> Finding:
    """A nested DCP directory (``{model, optim, ...}``): healthy, since no flat reader opens it
    (issue #44); the hint says how to write one part of it as a flat file."""
    groups = top_level_groups(ckpt)
    where = describe_groups(groups)
    key = _best_key(groups) if groups else None
    details: dict[str, JSONValue] = {"groups": groups, "state_key": key}
    convert = Command(
        "convert", (path, "model.safetensors"), (Option("state_key", key),) if key else ()
    )
    return Finding(
        "flat-reader",
        Status.OK,
        f"tensors under {where}: no flat name → tensor reader opens a "
        f"{_NO_FLAT_READER[ckpt.format]}, so a nested one is as its loader expects",
        Note("a flat copy of one part without torch: {fix0}", (convert,)),
        details=details,
    )


def _nested(ckpt: Checkpoint, entries: list[TensorEntry], path: str) -> Finding:
    groups = top_level_groups(ckpt)
    top = ckpt.structure.top_level_tensors if ckpt.structure is not None else 0
    if not groups:  # facts missing: fall back on the names
        groups = dict(Counter(e.name.split(".", 1)[0] for e in entries if "." in e.name))
    # torch.save([t0, t1]): tensors nested in a list or tuple, under no key at all
    where = describe_groups(groups) or "no key (in a list or tuple)"
    keys = ckpt.structure.top_level_keys if ckpt.structure is not None else ()
    if {"state", "param_groups"} <= set(keys):
        return Finding(
            "flat-reader",
            Status.FAIL,
            "an optimizer state_dict (state, param_groups), not model weights: "
            f"{_FLAT_READERS} finds no tensors at the top level",
            Note(
                "to gate optimizer files on safety and readability alone: {fix0}",
                (Command("verify", (path,), (Option("checks", "safe-pickle"),)),),
            ),
            details={"top_level_tensors": top, "groups": groups, "state_key": None},
        )
    key = _best_key(groups) if groups else None
    fix: str | Note = "re-save model.state_dict()"
    if key:
        fix = Note("pass {fix0}, or re-save model.state_dict()", (Option("state_key", key),))
    details: dict[str, JSONValue] = {"top_level_tensors": top, "groups": groups, "state_key": key}
    if top:
        nested = len(entries) - top
        return Finding(
            "flat-reader",
            Status.WARN,
            f"{_plural(top, 'tensor')} at the top level, but {nested:,} more are nested under "
            f"{where}; a flat reader skips those",
            fix,
            details=details,
        )
    head = f"{_FLAT_READERS} finds no tensors at the top level: tensors are under {where}: "
    if not key:
        return Finding("flat-reader", Status.FAIL, head + str(fix), None, details=details)
    convert = Command("convert", (path, "model.safetensors"), (Option("state_key", key),))
    return Finding(
        "flat-reader",
        Status.FAIL,
        Note(head + "pass {fix0}, or re-save model.state_dict()", (Option("state_key", key),)),
        Note("a flat copy without torch: {fix0}", (convert,)),
        details=details,
    )


# --- min-tensors, expect ------------------------------------------------------------------------


def _min_tensors(entries: list[TensorEntry], minimum: int, state_key: str | None) -> Finding:
    n = len(entries)
    where = f" below state key {state_key!r}" if state_key is not None else ""
    details: dict[str, JSONValue] = {"tensors": n, "min_tensors": minimum}
    if n >= minimum:
        return Finding(
            "min-tensors",
            Status.OK,
            f"{_plural(n, 'tensor')}{where} (at least {minimum:,})",
            details=details,
        )
    return Finding(
        "min-tensors",
        Status.FAIL,
        f"{_plural(n, 'tensor')}{where}, fewer than the required {minimum:,}",
        "is this the right file (a partial save, or one shard of a sharded checkpoint)?",
        details=details,
    )


def _expect(path: str, entries: list[TensorEntry], opts: _Options, ref: str) -> Finding:
    specs = opts.expect_specs
    if isinstance(specs, CkptError) or specs is None:
        exc = specs if isinstance(specs, CkptError) else CkptError("cannot be read")
        return _fail_from("expect", exc, f"the reference {ref} cannot be read: ")
    summary = summarize(specs_of(entries), specs)
    counts = f"{len(summary.applied):,} of {len(specs):,} reference tensors match in name and shape"
    problems = []
    if summary.missing:
        problems.append(f"{len(summary.missing):,} missing")
    if summary.errors:
        n = len(summary.errors)
        problems.append(f"{n:,} shape mismatch{'es' if n != 1 else ''}")
    if summary.unused:
        problems.append(f"{len(summary.unused):,} not in the reference")
    text = f"against {ref}: {counts}" + (f" ({', '.join(problems)})" if problems else "")
    if not summary.ok:
        first = summary.missing[0] if summary.missing else None
        text_hint = "see the Tensor Loading Summary"
        if first is not None and first.suggestion is not None:
            text_hint = f"missing {first.name!r}: did you mean {first.suggestion!r}? " + text_hint
        hint: str | Note = text_hint
        if summary.fixes:  # a command that runs as printed: convert with the fixes applied
            options = [Option("state_key", opts.state_key)] if opts.state_key else []
            options += [*summary.fixes, Option("target", ref)]
            suffix = os.path.splitext(ref)[1] or ".safetensors"
            fitted = Command("convert", (path, "fitted" + suffix), tuple(options))
            hint = Note(f"{text_hint}; a copy that fits: {{fix0}}", (fitted,))
        return Finding("expect", Status.FAIL, text, hint, summary=summary)
    status = Status.WARN if summary.unused else Status.OK
    return Finding("expect", status, text, None, summary=summary)


# --- no-nan -------------------------------------------------------------------------------------


def _count_bad(raw: np.ndarray, dtype: DType) -> tuple[int, int]:
    values = to_float(raw, dtype)
    return int(np.count_nonzero(np.isnan(values))), int(np.count_nonzero(np.isinf(values)))


def _scan(entry: TensorEntry) -> tuple[int, int]:
    """NaN and Inf counts of one tensor, reading file-backed bytes with bounded ``pread`` calls.

    File-backed entries are read chunk by chunk through their ``ByteSource`` (``os.pread``), not
    through the memory map, so the resident set stays at one chunk however large the tensor.
    """
    if entry.nbytes == 0:
        return 0, 0
    located = entry.data.file_range()
    step = max(entry.dtype.itemsize, SCAN_CHUNK_BYTES - SCAN_CHUNK_BYTES % entry.dtype.itemsize)
    data = entry.data
    if located is None and isinstance(data, StridedData) and data.distinct is not None:
        # An expanded view (stride 0) repeats its distinct elements: count those once each.
        distinct_bytes = data.distinct_numel * entry.dtype.itemsize
        if data.distinct_numel < entry.numel and distinct_bytes <= MAX_DISTINCT_SCAN_BYTES:
            values, repeats = data.distinct()
            n, i = _count_bad(values, entry.dtype)
            return n * repeats, i * repeats
    if located is None and not data.is_ranged():
        # computed (adapter, compressed storage): its bytes are produced in memory anyway
        return _count_bad(entry.load().reshape(-1), entry.dtype)
    if located is None:
        step = ranged_step(entry)  # whole rows: a strided view gathers them as one slab
    nan = inf = 0
    for start in range(0, entry.nbytes, step):
        length = min(step, entry.nbytes - start)
        if located is None:
            chunk = data.read_range(start, length)
        else:
            chunk = located[0].read(located[1] + start, length)
        n, i = _count_bad(np.frombuffer(chunk, dtype=entry.dtype.numpy), entry.dtype)
        nan += n
        inf += i
    return nan, inf


def _scan_all(entries: list[TensorEntry], jobs: int) -> list[tuple[int, int]]:
    """``_scan`` of every entry, in order; with ``jobs`` > 1 on that many threads (``pread``
    and numpy's reductions release the GIL, so tensors of different shards scan in parallel)."""
    if jobs <= 1 or len(entries) < 2:
        return [_scan(entry) for entry in entries]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(jobs, len(entries))) as pool:
        return list(pool.map(_scan, entries))


def _no_nan(entries: list[TensorEntry], jobs: int = 1) -> Finding:
    scanned = 0
    elements = 0
    bad: list[dict[str, JSONValue]] = []
    floats = [e for e in entries if e.dtype.is_float or e.dtype in _SCANNED]
    for entry, (nan, inf) in zip(floats, _scan_all(floats, jobs), strict=True):
        scanned += 1
        elements += entry.numel
        if nan or inf:
            bad.append({"name": entry.name, "dtype": entry.dtype.value, "nan": nan, "inf": inf})
    details: dict[str, JSONValue] = {"scanned": scanned, "elements": elements, "tensors": bad}
    if not bad:
        return Finding(
            "no-nan",
            Status.OK,
            f"no NaN or Inf in {_plural(scanned, 'float tensor')} ({_plural(elements, 'value')})",
            details=details,
        )

    def describe(b: dict[str, JSONValue]) -> str:
        parts = [f"{b['nan']:,} NaN" if b["nan"] else "", f"{b['inf']:,} Inf" if b["inf"] else ""]
        return f"{b['name']!r} ({', '.join(p for p in parts if p)})"

    listed = ", ".join(describe(b) for b in bad[:MESSAGE_LIMIT]) + _more(len(bad))
    return Finding(
        "no-nan",
        Status.FAIL,
        f"NaN or Inf in {len(bad):,} of {_plural(scanned, 'float tensor')}: {listed}",
        "the training run diverged or the file was written from a broken state; "
        "use an earlier checkpoint",
        details=details,
    )


# --- gguf-layout, chat-template -------------------------------------------------------------


def _gguf_findings(ckpt: Checkpoint) -> list[Finding]:
    """The GGUF checks: the layout as llama.cpp requires it, then the chat templates."""
    findings = [_guard("gguf-layout", lambda: _gguf_layout(ckpt))]
    template = _chat_template(ckpt.metadata)
    if template is not None:
        findings.insert(0, template)
    return findings


def _gguf_layout(ckpt: Checkpoint) -> Finding:
    """What gguf.cpp (llama.cpp's reader) would refuse in each file, and the architecture key.

    Sizes against types and shapes, alignment and overlaps are the reader's own checks
    (``readable``); here are the rules only llama.cpp enforces."""
    files = [ckpt.path]
    if ckpt.sharding is not None:
        folder = os.path.dirname(ckpt.sharding.index)
        files = [os.path.join(folder, name) for name in ckpt.sharding.shards]
    problems: list[str] = []
    alignment = None
    for name in files:
        facts = read_layout(name).facts
        alignment = facts["alignment"]
        prefix = f"{os.path.basename(name)}: " if len(files) > 1 else ""
        problems += [prefix + p for p in facts["llama_cpp_problems"]]
    details: dict[str, JSONValue] = {"problems": problems}
    if problems:
        return Finding(
            "gguf-layout",
            Status.FAIL,
            "llama.cpp would refuse it: " + "; ".join(problems[:MESSAGE_LIMIT])
            + _more(len(problems)),
            "gguf-py reads it, llama.cpp does not; re-save it with llama.cpp's tools "
            "(gguf-py's GGUFWriter lays tensors out as gguf.cpp requires)",
            details=details,
        )  # fmt: skip
    arch = ckpt.metadata.get("general.architecture")
    details["architecture"] = arch
    if arch is None:
        return Finding(
            "gguf-layout",
            Status.WARN,
            "no general.architecture key: llama.cpp cannot load it as a model",
            details=details,
        )
    return Finding(
        "gguf-layout",
        Status.OK,
        f"architecture {arch!r}; tensors laid out as llama.cpp requires (offsets back to back, "
        f"{alignment}-byte alignment, sizes matching types and shapes)",
        details=details,
    )


def _onnx_checksum(ckpt: Checkpoint) -> Finding | None:
    """The external data files an ONNX model declares a checksum for, hashed (None: none)."""
    from ckptctl.ops._external_checksum import check_external_checksums

    try:
        return check_external_checksums(list(ckpt.values()))
    except CkptError as exc:
        return _fail_from("onnx-checksum", exc)


def _chat_template(metadata: Mapping[str, str]) -> Finding | None:
    """Each ``tokenizer.chat_template*`` scanned for Jinja constructs that reach Python
    internals (None: the file has no template)."""
    from ckptctl.ops._chat_template import unsafe_constructs

    keys = [k for k in metadata if k.split(".")[:2] == ["tokenizer", "chat_template"]]
    if not keys:
        return None
    bad = {key: found for key in keys if (found := unsafe_constructs(metadata[key]))}
    details: dict[str, JSONValue] = {"templates": keys, "unsafe": dict(bad)}
    if not bad:
        return Finding(
            "chat-template",
            Status.OK,
            f"{_plural(len(keys), 'chat template')}: no construct reaches Python internals",
            details=details,
        )
    key, found = next(iter(bad.items()))
    return Finding(
        "chat-template",
        Status.FAIL,
        f"unsafe: {key} reaches Python internals when rendered by Jinja: "
        + ", ".join(found[:MESSAGE_LIMIT])
        + _more(len(found)),
        "do not render it (transformers' apply_chat_template, llama-cpp-python's Jinja chat "
        "format); a real chat template needs none of these constructs",
        details=details,
    )


# --- quant-layout ---------------------------------------------------------------------------


def _quantized(entries: list[TensorEntry]) -> Finding | None:
    """Packed shapes, scales and group sizes of every quantized module agree (None: the file
    has none)."""
    by_name = {e.name: e for e in entries}
    modules = [check_group_index(q, by_name) for q in find_quantized(entries)]
    if not modules:
        return None
    kinds = ", ".join(
        dict.fromkeys(
            q.scheme.value + ("" if q.bits is None else f" {q.bits}-bit") for q in modules
        )
    )
    bad = [(q, p) for q in modules for p in q.problems]
    details: dict[str, JSONValue] = {
        "modules": len(modules),
        "schemes": list(dict.fromkeys(q.scheme.value for q in modules)),
        "problems": [{"module": q.module, "scheme": q.scheme.value, "problem": p} for q, p in bad],
    }
    if not bad:
        return Finding(
            "quant-layout",
            Status.OK,
            f"{_plural(len(modules), 'quantized module')} ({kinds}): packed shapes, scales and "
            "group sizes agree",
            details=details,
        )
    failing = len({q.module for q, _ in bad})
    listed = "; ".join(f"{q.module!r} ({q.scheme.value}): {p}" for q, p in bad[:MESSAGE_LIMIT])
    return Finding(
        "quant-layout",
        Status.FAIL,
        f"{_plural(failing, 'quantized module')} of {len(modules):,} with a broken layout: "
        + listed
        + _more(len(bad)),
        "the tensors of a quantized module no longer fit together (a damaged file, or a "
        "conversion that renamed, cast or reshaped part of them); re-download or re-quantize it",
        details=details,
    )


# --- hashes -------------------------------------------------------------------------------------


def _hashes(
    entries: list[TensorEntry], manifest: tuple[TensorHash, ...] | CkptError | None, where: str
) -> Finding:
    if isinstance(manifest, CkptError):
        return _fail_from("hashes", manifest, f"manifest {where!r}: ")
    if manifest is None:  # only called with --hashes, whose manifest has been read
        raise AssertionError("no manifest")
    check = check_hashes(entries, manifest, where)
    if check.ok:
        return Finding(
            "hashes",
            Status.OK,
            f"all {_plural(check.checked, 'tensor')} match the manifest {where!r}",
            hashes=check,
        )
    parts = []
    if check.mismatched:
        listed = ", ".join(
            f"{m.name!r} ({m.field})" for m in check.mismatched[:MESSAGE_LIMIT]
        ) + _more(len(check.mismatched))
        parts.append(f"{_plural(len(check.mismatched), 'tensor')} differ: {listed}")
    for names, what in (
        (check.missing, "missing from the file"),
        (check.extra, "not in the manifest"),
    ):
        if names:
            listed = ", ".join(repr(n) for n in names[:MESSAGE_LIMIT]) + _more(len(names))
            parts.append(f"{_plural(len(names), 'tensor')} {what}: {listed}")
    return Finding(
        "hashes",
        Status.FAIL,
        f"does not match the manifest {where!r}: " + "; ".join(parts),
        "the file is not the checkpoint the manifest was written from (or it was damaged on "
        "the way); compare it with the original, or re-download it",
        hashes=check,
    )


# --- optimizer ----------------------------------------------------------------------------------


def _optimizer(
    model_path: str,
    model_format: str,
    entries: list[TensorEntry],
    optim: str,
    record: OptimizerRecord | CkptError | None,
    state_key: str | None,
) -> Finding:
    if isinstance(record, CkptError) or record is None:
        exc = record if isinstance(record, CkptError) else CkptError("cannot be read")
        return _fail_from("optimizer", exc, f"{optim}: ")
    check = check_optimizer(model_path, model_format, entries, record, state_key)
    return _optimizer_finding(check)


def _optimizer_finding(check: OptimizerCheck) -> Finding:
    rate = check.match_rate
    pct = "" if rate is None else f" ({rate:.1%})"
    growth = (
        f"; the record holds {check.cohorts} cohorts of states for the same paths "
        "(an earlier failed resume was saved back)"
        if check.cohorts > 1
        else ""
    )
    if check.verdict == "no-ids":
        what = (
            f"the model is {check.model_format}, which carries no ParamIds"
            if check.model_format != "burnpack"
            else "the model burnpack carries no param_id (Burn gives such tensors random ids)"
        )
        message = (
            f"no-ids: {what}; resuming from it starts all {check.states:,} optimizer states "
            "from scratch (Adam moments reset, time = 1)"
        )
        hint: str | Note = (
            "resume from a burnpack written by ModuleRecord or BurnpackStore (it carries ParamIds)"
        )
        if check.repair:
            caveat = (
                ""
                if check.rebindable
                else " (some recorded paths or shapes do not match this model; check the result)"
            )
            hint = Note(
                "write a model with the optimizer's ParamIds: {fix0}" + caveat, (check.repair,)
            )
        return Finding("optimizer", Status.FAIL, message, hint, optimizer=check)
    if check.verdict == "ok":
        if not check.states:
            message = "ok: the optimizer record holds no parameter states"
        else:
            cov = check.coverage
            cover = "" if cov is None else f"; {cov:.1%} of trainable parameters have state"
            message = f"ok: all {check.states:,} optimizer states attach to their parameters{cover}"
        if check.without_ids:
            idless = len(check.without_ids)
            verbs = "carries no param_id and gets" if idless == 1 else "carry no param_id and get"
            return Finding(
                "optimizer",
                Status.WARN,
                f"{message}; {_plural(idless, 'trainable tensor')} {verbs} random ids on load",
                None,
                optimizer=check,
            )
        return Finding("optimizer", Status.OK, message, None, optimizer=check)
    if check.verdict == "lost":
        message = (
            f"lost: none of the {check.states:,} optimizer states attach (0.0%); resuming would "
            f"silently restart the optimizer (Adam moments reset, time = 1){growth}"
        )
    else:
        parts = [f"{check.matched:,} of {check.states:,} optimizer states attach{pct}"]
        if check.path_disagreements:
            parts.append(f"{_plural(len(check.path_disagreements), 'path disagreement')}")
        if check.shape_disagreements:
            parts.append(f"{_plural(len(check.shape_disagreements), 'shape disagreement')}")
        message = "partial: " + ", ".join(parts) + growth
    if check.repair:
        hint = Note(
            f"all {check.states:,} states can be re-keyed by path: {{fix0}}", (check.repair,)
        )
    elif check.shape_disagreements or check.path_disagreements:
        hint = "the record was taken from another model (other paths or shapes); is this the pair?"
    elif check.coverage == 1.0:
        orphans = len(check.reinitialized) + len(check.foreign)
        hint = (
            f"every trainable parameter has state, but {_plural(orphans, 'orphaned state')} "
            f"will never be used and {'is' if orphans == 1 else 'are'} saved again with every "
            "checkpoint (the file grows)"
        )
    else:
        hint = (
            "states without a matching ParamId start from scratch; resume from the model file "
            "saved together with this record"
        )
    return Finding("optimizer", Status.FAIL, message, hint, optimizer=check)

"""``optimizer``: with ``optimizer`` (``--optimizer OPTIM``), will a Burn optimizer record
attach to this model (``docs/formats/burn-store.md#optimizer-check``;
:mod:`ckptctl.ops._optimizer`)? States whose ParamId the model lacks start from scratch on
resume."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.errors import CkptError
from ckptctl.fix import Note
from ckptctl.ops._optimizer import check_optimizer
from ckptctl.ops.verify._check import Check, Phase, fail_from, plural
from ckptctl.report.verify import Finding, Status

if TYPE_CHECKING:
    from ckptctl.ops.verify._check import Subject
    from ckptctl.report.optimizer import OptimizerCheck


def optimizer(subject: Subject) -> Finding:
    """The record against the model's ParamIds (the Optimizer State Check)."""
    opts = subject.opts
    optim, record = opts.optimizer, opts.record
    if isinstance(record, CkptError) or record is None:
        exc = record if isinstance(record, CkptError) else CkptError("cannot be read")
        return fail_from("optimizer", exc, f"{optim}: ")
    fmt = subject.checkpoint.format
    return finding_of(check_optimizer(subject.path, fmt, subject.tensors, record, opts.state_key))


def finding_of(check: OptimizerCheck) -> Finding:
    """The finding that words an Optimizer State Check: its verdict, counts and the fix."""
    if check.verdict == "no-ids":
        return _no_ids(check)
    if check.verdict == "ok":
        return _attached(check)
    return Finding("optimizer", Status.FAIL, _detached(check), _hint(check), optimizer=check)


def _no_ids(check: OptimizerCheck) -> Finding:
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
        hint = Note("write a model with the optimizer's ParamIds: {fix0}" + caveat, (check.repair,))
    return Finding("optimizer", Status.FAIL, message, hint, optimizer=check)


def _attached(check: OptimizerCheck) -> Finding:
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
            f"{message}; {plural(idless, 'trainable tensor')} {verbs} random ids on load",
            None,
            optimizer=check,
        )
    return Finding("optimizer", Status.OK, message, None, optimizer=check)


def _detached(check: OptimizerCheck) -> str:
    """The message of a ``lost`` or ``partial`` record."""
    growth = (
        f"; the record holds {check.cohorts} cohorts of states for the same paths "
        "(an earlier failed resume was saved back)"
        if check.cohorts > 1
        else ""
    )
    if check.verdict == "lost":
        return (
            f"lost: none of the {check.states:,} optimizer states attach (0.0%); resuming would "
            f"silently restart the optimizer (Adam moments reset, time = 1){growth}"
        )
    rate = check.match_rate
    pct = "" if rate is None else f" ({rate:.1%})"
    parts = [f"{check.matched:,} of {check.states:,} optimizer states attach{pct}"]
    if check.path_disagreements:
        parts.append(f"{plural(len(check.path_disagreements), 'path disagreement')}")
    if check.shape_disagreements:
        parts.append(f"{plural(len(check.shape_disagreements), 'shape disagreement')}")
    return "partial: " + ", ".join(parts) + growth


def _hint(check: OptimizerCheck) -> str | Note:
    """What to do about a ``lost`` or ``partial`` record."""
    if check.repair:
        return Note(
            f"all {check.states:,} states can be re-keyed by path: {{fix0}}", (check.repair,)
        )
    if check.shape_disagreements or check.path_disagreements:
        return "the record was taken from another model (other paths or shapes); is this the pair?"
    if check.coverage == 1.0:
        orphans = len(check.reinitialized) + len(check.foreign)
        return (
            f"every trainable parameter has state, but {plural(orphans, 'orphaned state')} "
            f"will never be used and {'is' if orphans == 1 else 'are'} saved again with every "
            "checkpoint (the file grows)"
        )
    return (
        "states without a matching ParamId start from scratch; resume from the model file "
        "saved together with this record"
    )


CHECK = Check(
    "optimizer",
    120,
    Phase.ENTRIES,
    "The Burn optimizer record attaches to the model's ParamIds",
    "Optimizer states whose ParamId is not in the model start from scratch on resume.",
    run=optimizer,
    option="optimizer",
)

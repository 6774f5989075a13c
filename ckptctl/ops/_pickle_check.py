"""The ``safe-pickle`` check of ``verify``: a pickle verdict (``ckptctl.safety``) as a finding."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.fix import Command, Note, Option
from ckptctl.report.verify import Finding, Status
from ckptctl.safety import TORCH_REFUSES, Verdict

if TYPE_CHECKING:
    from collections.abc import Collection

    from ckptctl.safety import PickleSafety

#: Globals named in a safe-pickle message before "and N more".
GLOBALS_SHOWN = 6


def _names(names: list[str]) -> str:
    shown = ", ".join(dict.fromkeys(names[:GLOBALS_SHOWN]))
    return shown + (f" and {len(names) - GLOBALS_SHOWN} more" if len(names) > GLOBALS_SHOWN else "")


def safe_pickle_finding(
    safety: PickleSafety,
    *,
    allow_globals: Collection[str] = (),
    trust: bool = False,
    readable: bool = True,
) -> Finding:
    """The ``safe-pickle`` finding of a verdict: what was found, what it means, what to do.

    Args:
        safety: the verdict of every pickle stream of one file.
        allow_globals: globals to trust, as torch's ``add_safe_globals`` does.
        trust: a needs-trust verdict warns instead of failing.
        readable: ckptctl read the whole file; when not, a ``safe`` verdict covers what was
            read and does not claim torch loads the file.
    """
    needs_trust = {g.name for g in safety.untrusted()}
    safety = safety.allowing(allow_globals)
    verdict = safety.verdict
    reached = [g for g in safety.globals if g.reached]
    if verdict is Verdict.UNSAFE:
        bad = [g.name for g in reached if g.verdict is Verdict.UNSAFE]
        constructs = [p for p in safety.problems if p.reached and p.verdict is Verdict.UNSAFE]
        what = f"globals {_names(bad)}" if bad else constructs[0].message
        where = next((g.where for g in reached if g.verdict is Verdict.UNSAFE), None)
        where = where or constructs[0].where
        return Finding(
            "safe-pickle",
            Status.FAIL,
            f"unsafe: {what} in {where}: loading it with torch.load(weights_only=False) or pickle "
            "runs code",
            "do not load this file; ask its author for safetensors or a weights-only state_dict",
            safety=safety,
        )
    if verdict is Verdict.NEEDS_TRUST:
        return _needs_trust(safety, trust)
    count = f"{len(reached):,} global{'s' if len(reached) != 1 else ''}"
    found = f"{count}, all on its allowlist" if reached else "no globals"
    produced = safety.produced()
    if produced and safety.producer is not None:  # issue #44: judged for the producer's loader
        found = (
            f"{count}: {len({g.name for g in produced}):,} {safety.producer.name} "
            f"{safety.producer.what}, the rest on torch's weights-only allowlist"
        )
    unreached = safety.unreached_verdict
    if unreached is not None and unreached is not Verdict.SAFE:
        streams = sorted(
            {g.where for g in safety.globals if not g.reached and g.verdict is not Verdict.SAFE}
            | {p.where for p in safety.problems if not p.reached}
        )
        return Finding(
            "safe-pickle",
            Status.WARN,
            f"safe for torch.load ({found}), but {', '.join(streams)} is {unreached.value}",
            "torch.load does not read it, other tools may: remove it or re-save the file",
            safety=safety,
        )
    if produced and safety.producer is not None and readable:
        return Finding(
            "safe-pickle",
            Status.OK,
            f"safe for {safety.producer.loader}: only {safety.producer.what} beyond what "
            f"torch.load(weights_only=True) accepts ({found})",
            safety=safety,
        )
    if not readable:  # torch may well refuse what ckptctl could not read (issue 25)
        return Finding(
            "safe-pickle",
            Status.OK,
            f"safe as far as read ({found}): nothing torch.load(weights_only=True) refuses, but "
            "the file is unreadable, so torch may not load it either",
            safety=safety,
        )
    allowed = sorted(needs_trust - {g.name for g in safety.untrusted()})
    if allowed:  # torch loads it only once told the same (add_safe_globals)
        return Finding(
            "safe-pickle",
            Status.OK,
            f"safe with the allowed globals: torch.load(weights_only=True) loads it inside "
            f"torch.serialization.safe_globals([{_names(allowed)}]) ({count}, "
            f"{len(allowed):,} of them allowed)",
            safety=safety,
        )
    return Finding(
        "safe-pickle",
        Status.OK,
        f"safe: torch.load(weights_only=True) loads it ({found})",
        safety=safety,
    )


def _needs_trust(safety: PickleSafety, trust: bool) -> Finding:
    """The finding of a needs-trust verdict (``safety`` with the allowed globals applied)."""
    verdict = Verdict.NEEDS_TRUST
    producer = safety.producer
    untrusted = [g.name for g in safety.untrusted()]
    problems = [p.message for p in safety.problems if p.reached and p.verdict is verdict]
    beyond = "torch's weights-only allowlist"
    if producer is not None:  # a checkpoint its producer's loader reads (issue #44)
        beyond += f" and {producer.name}'s {producer.what}"
    what = f"globals outside {beyond}: {_names(untrusted)}" if untrusted else problems[0]
    hint: str | Note = (
        "re-save a state_dict with torch.save (or save safetensors)"
        if producer is None
        else "save the checkpoint without those objects (only tensors and plain values)"
    )
    refusals = [p for p in safety.problems if p.reached and p.torch_refuses]
    if refusals and not untrusted:
        # Not a question of trust: torch.load fails on it whatever weights_only says.
        message = refusals[0].message
        if message.startswith(TORCH_REFUSES):  # the container: torch never opens it
            message += (
                " (with weights_only=True or False); beyond torch, ckptctl reads it and its "
                "pickle holds only what the weights-only loader accepts"
            )
            fix = "re-save it with torch, or convert it with ckptctl to a file torch loads"
        else:
            message = f"needs trust: {message}"
            fix = "torch cannot load this file as it is; re-save it from the original checkpoint"
        return Finding(
            "safe-pickle", Status.WARN if trust else Status.FAIL, message, fix, safety=safety
        )
    if untrusted and not problems:
        allow = Command(
            options=tuple(
                Option("allow_globals", n) for n in dict.fromkeys(untrusted[:GLOBALS_SHOWN])
            )
        )
        hint = Note(f"{hint}; or if you trust its source: {{fix0}}", (allow,))
    consequence = (
        "weights_only=False would run that code"
        if untrusted
        else "weights_only=False would trust whatever else the file holds"
    )
    if producer is not None:
        consequence = (
            f"{producer.loader}, which unpickles fully, would run that code"
            if untrusted
            else f"{producer.loader}, which unpickles fully, would trust whatever else it holds"
        )
    return Finding(
        "safe-pickle",
        Status.WARN if trust else Status.FAIL,
        f"needs trust: {what}; torch.load(weights_only=True) refuses it and {consequence}",
        hint,
        safety=safety,
    )

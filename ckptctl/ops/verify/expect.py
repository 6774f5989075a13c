"""``expect``: with ``expect`` (``--expect REF``), the Tensor Loading Summary of the file's
tensor names and shapes against a reference checkpoint, with a ``convert`` command that writes
a copy that fits when remap rules can make one."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ckptctl.errors import CkptError
from ckptctl.fix import Command, Note, Option
from ckptctl.formats import open_checkpoint
from ckptctl.ops.summary import specs_of, summarize
from ckptctl.ops.verify._check import Check, Phase, fail_from
from ckptctl.report.verify import Finding, Status

if TYPE_CHECKING:
    from ckptctl.ops.verify._check import Specs, Subject
    from ckptctl.report.summary import LoadingSummary


def load_specs(path: str | os.PathLike[str]) -> Specs | CkptError:
    """The reference's names, dtypes and shapes, read once for every file (or why not)."""
    try:
        with open_checkpoint(path) as ref:
            return specs_of(ref.values())
    except CkptError as exc:
        return exc


def expect(subject: Subject) -> Finding:
    """The file against the reference: ok, warn (extra tensors only) or fail."""
    opts = subject.opts
    ref = opts.expect
    specs = opts.expect_specs
    if ref is None:  # only run with expect
        raise AssertionError("no reference")
    if isinstance(specs, CkptError) or specs is None:
        exc = specs if isinstance(specs, CkptError) else CkptError("cannot be read")
        return fail_from("expect", exc, f"the reference {ref} cannot be read: ")
    summary = summarize(specs_of(subject.tensors), specs)
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
        return Finding("expect", Status.FAIL, text, _hint(subject, summary, ref), summary=summary)
    status = Status.WARN if summary.unused else Status.OK
    return Finding("expect", status, text, None, summary=summary)


def _hint(subject: Subject, summary: LoadingSummary, ref: str) -> str | Note:
    """The first missing tensor's likely name, and a command that runs as printed: convert
    with the summary's fixes applied."""
    first = summary.missing[0] if summary.missing else None
    text_hint = "see the Tensor Loading Summary"
    if first is not None and first.suggestion is not None:
        text_hint = f"missing {first.name!r}: did you mean {first.suggestion!r}? " + text_hint
    if not summary.fixes:
        return text_hint
    state_key = subject.opts.state_key
    options = [Option("state_key", state_key)] if state_key else []
    options += [*summary.fixes, Option("target", ref)]
    suffix = os.path.splitext(ref)[1] or ".safetensors"
    fitted = Command("convert", (subject.path, "fitted" + suffix), tuple(options))
    return Note(f"{text_hint}; a copy that fits: {{fix0}}", (fitted,))


CHECK = Check(
    "expect",
    100,
    Phase.ENTRIES,
    "Tensor names and shapes match the reference checkpoint",
    "The Tensor Loading Summary against --expect REF: missing tensors or shape mismatches.",
    run=expect,
    option="expect",
)

"""Renderings of a ``verify`` report: text for people and CI logs, JSON for scripts.

Text: one ``PASS``/``WARN``/``FAIL`` line per file, its findings (``✓`` ok, ``!`` warn, ``✗``
fail) with hints, the Tensor Loading Summary for ``--expect`` and the Optimizer State Check box for
``--optimizer`` (``docs/formats/burn-store.md#optimizer-check``, in the Tensor Loading
Summary's box style), then one summary line (``3 files: 2 passed, 1 failed``); after several files,
the files by verdict come first (``by verdict: 2 safe, 1 needs-trust, 0 unsafe, 0 unreadable``),
with the files a directory walk skipped counted there and, when verbose, listed one per line
(``skipped: PATH``). Every string taken from a file or a path goes through ``report.sanitize`` and
into rich as ``Text``, never as markup.

JSON: one object, ``"schema_version": 1``, keys in a fixed order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from ckptctl.fix import spell
from ckptctl.report.render_summary import render_summary
from ckptctl.report.sanitize import sanitize
from ckptctl.report.summary import DISPLAY_LIMIT

if TYPE_CHECKING:
    from rich.console import Console

    from ckptctl.report.optimizer import OptimizerCheck, Orphan
    from ckptctl.report.verify import FileResult, VerifyReport


_MARK = {"ok": "✓", "warn": "!", "fail": "✗"}
_KIND = {
    "state_dict": "flat state_dict",
    "nested": "nested checkpoint",
    "module": "whole pickled model",
    "torchscript": "TorchScript archive",
    "tensor": "single bare tensor",
    "empty": "no tensors",
}


# --- JSON ---------------------------------------------------------------------------------------


# --- text ---------------------------------------------------------------------------------------


def _file_status(result: FileResult) -> str:
    if not result.ok:
        return "FAIL"
    if any(f.status.value == "warn" for f in result.findings):
        return "WARN"
    return "PASS"


#: Column where finding messages start ("✓ flat-reader   ").
_INDENT = 16


def _hanging(console: Console, head: str, body: Text, style: str = "") -> None:
    """Print ``head`` then ``body`` wrapped with a hanging indent and no trailing spaces.

    ``style`` colours the first character of ``head`` (the ✓ / ! / ✗ mark) on a terminal.
    """
    if console.soft_wrap:  # not a terminal: one line, never wrapped
        out = Text(head.ljust(_INDENT) if head else " " * _INDENT)
        out.append_text(body)
        out.rstrip()
        console.print(out, no_wrap=True, overflow="ignore", crop=False)
        return
    width = max(20, console.width - _INDENT)
    for i, line in enumerate(body.wrap(console, width, overflow="fold")):
        out = Text(head.ljust(_INDENT) if i == 0 else " " * _INDENT)
        if i == 0 and head and style:
            out.stylize(style, 0, 1)
        out.append_text(line)
        out.rstrip()
        console.print(out, no_wrap=True, overflow="ignore", crop=False)


_STYLE = {"PASS": "bold green", "WARN": "bold yellow", "FAIL": "bold red"}
_MARK_STYLE = {"ok": "green", "warn": "yellow", "fail": "red"}


def _print_findings(console: Console, result: FileResult) -> None:
    for finding in result.findings:
        _hanging(
            console,
            f"{_MARK[finding.status.value]} {finding.check}",
            Text(sanitize(str(finding.message))),
            style=_MARK_STYLE[finding.status.value],
        )
        if finding.hint:
            _hanging(console, "", Text(f"hint: {sanitize(str(finding.hint))}"))


def render_verify(
    report: VerifyReport, console: Console, *, quiet: bool = False, verbose: bool = False
) -> None:
    """Print a verify report: per file its findings and boxes, then the summary line.

    Args:
        report: what :func:`ckptctl.ops.verify.verify` returned.
        console: where to print (stdout).
        quiet: show only files that failed or warned, and the summary line.
        verbose: also list every file a directory walk skipped, after the count.
    """
    first = True
    for result in report.files:
        status = _file_status(result)
        if quiet and status == "PASS":
            continue
        if not first:
            console.print()
        first = False
        what = [result.format or result.label or "unreadable"]
        if result.kind in _KIND:
            what.append(_KIND[result.kind])
        line = Text(status, style=_STYLE[status])
        line.append(f" {sanitize(result.path)} ({', '.join(what)})")
        console.print(line)
        _print_findings(console, result)
        for finding in result.findings:
            if finding.summary is not None:
                _print_box(console, render_summary(finding.summary))
            if finding.optimizer is not None:
                _print_box(console, render_optimizer_box(finding.optimizer))
    if len(report.files) > 1 or report.skipped:  # a needs-trust file cannot hide in a long list
        console.print(Text(report.verdict_line()))
    if verbose:
        for path in report.skipped_paths:
            console.print(Text(f"skipped: {sanitize(path)}"), no_wrap=True, crop=False)
    console.print(Text(report.summary_line()))
    failed = [r.path for r in report.files if not r.ok]
    if failed and len(report.files) > 1:
        console.print(Text("failed: " + ", ".join(sanitize(p) for p in failed)))


def _print_box(console: Console, box: str) -> None:
    # The box lines are laid out by hand: never wrap or crop them to the console width.
    for line in box.split("\n"):
        console.print(Text(line), no_wrap=True, overflow="ignore", crop=False)


# --- the Optimizer State Check box (docs/formats/burn-store.md#optimizer-check) ------------------


def _row(mark: str, label: str, value: str) -> str:
    return f"│ {mark} {label.ljust(25)}{value}"


def _section(lines: list[str], title: str) -> None:
    lines += ["│", f"├─ {title}", "│"]


def _listed(lines: list[str], items: list[str], what: str) -> None:
    lines.append(f"│  First {DISPLAY_LIMIT} {what}:")
    lines += [f"│    • {item}" for item in items[:DISPLAY_LIMIT]]
    if len(items) > DISPLAY_LIMIT:
        lines.append(f"│    ... and {len(items) - DISPLAY_LIMIT} more")


def _orphan_text(orphan: Orphan) -> str:
    path = sanitize(orphan.path) if orphan.path is not None else "(no recorded path)"
    model = f" (model id {orphan.model_id})" if orphan.model_id is not None else ""
    return f"{orphan.param_id} → {path}{model}"


def _counters(check: OptimizerCheck) -> list[str]:
    if not check.model_has_ids:
        return [
            _row("✓", "Matched states:", "n/a (model file has no ParamIds)"),
            _row("✗", "Orphaned states:", f"{check.states} (every state, once the model loads)"),
            _row("?", "Params without state:", f"{check.trainable} of {check.trainable} trainable"),
            _row("!", "Path disagreements:", "n/a"),
            _row("!", "Shape disagreements:", "n/a"),
        ]
    rate = check.match_rate
    pct = f" ({rate * 100:.1f}%)" if rate is not None else ""
    orphans = len(check.reinitialized) + len(check.foreign)
    stats = f" ({check.running_stats} running stats ignored)" if check.running_stats else ""
    without = check.trainable - check.trainable_with_state
    return [
        _row("✓", "Matched states:", f"{check.matched} / {check.states}{pct}"),
        _row("✗", "Orphaned states:", f"{orphans} (ParamId not in model)"),
        _row("?", "Params without state:", f"{without} of {check.trainable} trainable{stats}"),
        _row("!", "Path disagreements:", str(len(check.path_disagreements))),
        _row("!", "Shape disagreements:", str(len(check.shape_disagreements))),
    ]


_VERDICT = {
    "ok": "✓ ok: every optimizer state attaches to its parameter",
    "lost": "✗ lost: resuming would silently restart the optimizer (Adam moments reset, time = 1)",
    "no-ids": "✗ no-ids: the model file carries no ParamIds; any resume from it starts the "
    "optimizer from scratch",
}


def render_optimizer_box(check: OptimizerCheck) -> str:
    """The "Optimizer State Check" box in the Tensor Loading Summary's style (no trailing newline).

    Title line padded with ``─`` to 51 characters, bottom line ``└`` + 51 ``─``; counters, then
    sections for orphans, disagreements and cohorts when there are any, then the verdict and the
    repair command.
    """
    lines = ["┌─ Optimizer State Check " + "─" * 26, "│", *_counters(check)]
    if check.without_ids and check.model_has_ids:
        _section(lines, "Trainable Tensors Without param_id (random ids on load)")
        _listed(lines, [sanitize(n) for n in check.without_ids], "tensors")
    if check.reinitialized:
        _section(lines, "Orphaned States (recorded path exists in model)")
        _listed(lines, [_orphan_text(o) for o in check.reinitialized], "orphaned states")
    if check.foreign:
        _section(lines, "Foreign States (recorded path not in model)")
        _listed(lines, [_orphan_text(o) for o in check.foreign], "foreign states")
    if check.path_disagreements:
        _section(lines, "Path Disagreements (same ParamId, other path)")
        items = [
            f"{pid}: recorded {sanitize(rec)}, model {sanitize(name)}"
            for pid, rec, name in check.path_disagreements
        ]
        _listed(lines, items, "path disagreements")
    if check.shape_disagreements:
        _section(lines, "Shape Disagreements")
        _listed(lines, [sanitize(s) for s in check.shape_disagreements], "shape disagreements")
    if check.cohorts > 1:
        _section(lines, "Cohorts (one path under several ParamIds: saved-back failed resumes)")
        lines.append(f"│  {check.cohorts} cohorts")
        for k, times in enumerate(check.cohort_times, 1):
            if times is None:
                span = "no momentum.time"
            elif times[0] == times[1]:
                span = f"momentum.time {times[0]}"
            else:
                span = f"momentum.time {times[0]}..{times[1]}"
            lines.append(f"│    • cohort {k}: {span}")
    _section(lines, "Verdict")
    verdict = _VERDICT.get(check.verdict, check.verdict)
    if check.verdict == "partial":
        rate = check.match_rate or 0.0
        verdict = (
            f"✗ partial: {check.matched} of {check.states} states attach ({rate * 100:.1f}%); "
            "the others are never used"
        )
    lines.append(f"│  {verdict}")
    if check.repair:
        how = (
            f"all {check.states} states can be re-keyed by path"
            if check.rebindable
            else "write a model burnpack with the optimizer's ParamIds"
        )
        lines.append(f"│  💡 {how}: {sanitize(spell(check.repair))}")
    elif check.verdict == "no-ids":
        lines.append("│  💡 resume from a burnpack written by ModuleRecord or BurnpackStore")
    lines += ["│", "└" + "─" * 51]
    return "\n".join(lines)

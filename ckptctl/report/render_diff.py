"""Text and JSON renderings of a ``diff`` report (``ckptctl.ops.diff.DiffReport``).

Text: a header naming both files, a table of the tensors that differ (all with ``show_all``),
the names found on one side only (first ten, with "Did you mean"), the suggested command and a
one-line verdict. JSON: the schema in ``ckptctl.ops.diff``'s docstring, keys in a fixed order.
Every string taken from a file (paths, tensor names) goes through ``report.sanitize`` and into
rich as ``Text``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING

from rich.text import Text

from ckptctl.fix import Command, Option, spell
from ckptctl.report.diff import STATUSES
from ckptctl.report.sanitize import sanitize
from ckptctl.report.summary import DISPLAY_LIMIT
from ckptctl.report.text import PlainTable, format_shape, print_table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from ckptctl.report.diff import DiffReport, OnlyIn, TensorDiff


def _pair(a: str, b: str) -> str:
    return a if a == b else f"{a} → {b}"


def _float(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) else f"{value:.3g}"


def _cosine(value: float | None) -> str:
    """Enough digits to tell a fine-tune (0.999987) from a copy (1)."""
    return "-" if value is None else f"{value:.6g}"


def _mismatch(row: TensorDiff) -> str:
    if row.mismatched is None:
        return "-"
    text = f"{row.mismatched:,} / {row.numel:,}"
    if row.nan_mismatched:
        text += f" ({row.nan_mismatched:,} NaN)"
    return text


def _table(rows: list[TensorDiff]) -> PlainTable:
    table = PlainTable()
    table.add_column("name")
    table.add_column("status")
    table.add_column("dtype")
    table.add_column("shape")
    table.add_column("max abs", justify="right")
    table.add_column("max rel", justify="right")
    table.add_column("rel change", justify="right")
    table.add_column("cosine", justify="right")
    table.add_column("mismatched", justify="right")
    for row in rows:
        table.add_row(
            sanitize(row.name),
            row.status,
            _pair(row.dtype_a, row.dtype_b),
            _pair(format_shape(row.shape_a), format_shape(row.shape_b)),
            _float(row.max_abs),
            _float(row.max_rel),
            _float(row.relative_change),
            _cosine(row.cosine),
            _mismatch(row),
        )
    return table


def _only_lines(title: str, rows: tuple[OnlyIn, ...]) -> list[Text]:
    lines = [Text(f"{title} ({len(rows):,}):")]
    for row in rows[:DISPLAY_LIMIT]:
        lines.append(Text(f"  • {sanitize(row.name)}"))
        if row.suggestion is not None:
            lines.append(Text(f"      Did you mean: '{sanitize(row.suggestion)}'?"))
    if len(rows) > DISPLAY_LIMIT:
        lines.append(Text(f"  ... and {len(rows) - DISPLAY_LIMIT:,} more"))
    return lines


def _by_status(rows: Sequence[TensorDiff]) -> str:
    """``6 identical, 1 close``: how many of ``rows`` have each status; they sum to
    ``len(rows)``."""
    counts = Counter(row.status for row in rows)
    return ", ".join(f"{counts[s]:,} {s}" for s in STATUSES if counts[s])


def verdict(report: DiffReport) -> str:
    """The one-line conclusion: ``identical: 3 tensors ...`` (the same bytes), ``match within
    rtol=..., atol=...: ...`` (values within the tolerance) or ``different: ...``."""
    opts = report.options
    tolerance = f"rtol={opts.rtol:g}, atol={opts.atol:g}"
    n = len(report.tensors)
    noun = "tensor" if n == 1 else "tensors"
    if report.identical:
        what = (
            "names, shapes and values" if opts.values_only else "names, dtypes, shapes and values"
        )
        return f"identical: {n:,} {noun}, same {what} ({tolerance})"
    if report.within_tolerance:
        what = "names and shapes" if opts.values_only else "names, dtypes and shapes"
        detail = _by_status(report.tensors)
        return f"match within {tolerance}: {n:,} {noun}, same {what} ({detail})"
    parts = []
    differing = len(report.differing)
    if differing:
        parts.append(f"{differing:,} of {n:,} common tensors differ ({tolerance})")
    if report.only_in_a:
        parts.append(f"{len(report.only_in_a):,} only in A")
    if report.only_in_b:
        parts.append(f"{len(report.only_in_b):,} only in B")
    return "different: " + "; ".join(parts)


def render_diff(report: DiffReport, console: Console, *, show_all: bool = False) -> None:
    """Print a diff report for people.

    Args:
        report: the report.
        console: where to print (stdout's console).
        show_all: list every common tensor, not only those that differ.
    """
    console.print(
        Text(f"A: {sanitize(report.a)} ({report.format_a}, {report.tensors_a:,} tensors)")
    )
    console.print(
        Text(f"B: {sanitize(report.b)} ({report.format_b}, {report.tensors_b:,} tensors)")
    )
    opts = report.options
    steps = [Option("state_key", o) for o in [opts.state_key] if o is not None]
    steps += [Option("remap", r) for r in opts.remap]
    steps += [Option("adapters", a) for a in opts.adapters]
    if steps:
        console.print(Text("A read with " + sanitize(spell(Command(options=tuple(steps))))))
    if opts.state_key_b is not None:
        b_key = spell(Option("state_key_b", opts.state_key_b))
        console.print(Text(f"B read with {sanitize(b_key)}"))
    rows = list(report.tensors) if show_all else list(report.differing)
    if rows:
        console.print()
        print_table(console, _table(rows))
    hidden = len(report.tensors) - len(rows)
    if hidden:
        shown = {id(row) for row in rows}
        detail = _by_status([row for row in report.tensors if id(row) not in shown])
        console.print()
        noun = "tensor matches" if hidden == 1 else "tensors match"
        console.print(Text(f"{hidden:,} {noun} ({detail}); {spell(Option('show_all'))} lists them"))
    for title, only in (("only in A", report.only_in_a), ("only in B", report.only_in_b)):
        if only:
            console.print()
            for line in _only_lines(title, only):
                console.print(line)
    if report.suggested_command is not None:
        console.print()
        console.print(Text("to reconcile the names and layouts, try:"))
        # never wrapped: the line is meant to be copied and pasted
        console.print(Text(f"  {sanitize(spell(report.suggested_command))}"), soft_wrap=True)
    if report.convert_command is not None:
        console.print(Text("to write A under B's names and layout:"))
        console.print(Text(f"  {sanitize(spell(report.convert_command))}"), soft_wrap=True)
    console.print()
    console.print(Text(verdict(report)))

"""Text of ``show``: numpy's printing of each tensor, its statistics and a histogram."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.text import Text

from ckptctl.report.sanitize import sanitize
from ckptctl.report.text import format_number, format_shape, print_lines

if TYPE_CHECKING:
    from rich.console import Console

    from ckptctl.report.values import Histogram, ShowReport, TensorStats

#: Bar heights, lowest to highest: Unicode block elements, or ASCII under NO_COLOR/non-UTF-8.
UNICODE_BARS = " ▁▂▃▄▅▆▇█"
ASCII_BARS = " .:-=+*#%@"


def describe_stats(stats: TensorStats) -> str:
    """``min -1  max 3  mean 0.5  std 1.2  absmax 3  zeros 1 (25.0%)  NaN 0  Inf 0``."""
    return (
        f"min {format_number(stats.min)}  max {format_number(stats.max)}  "
        f"mean {format_number(stats.mean)}  std {format_number(stats.std)}  "
        f"absmax {format_number(stats.absmax)}  "
        f"zeros {stats.zeros:,} ({100 * stats.zero_share:.1f}%)  NaN {stats.nan:,}  "
        f"Inf {stats.inf:,}"
    )


def draw_histogram(histogram: Histogram, *, ascii_only: bool) -> str:
    """One line of bars, each bin's height relative to the fullest; a non-empty bin is never
    drawn as blank."""
    bars = ASCII_BARS if ascii_only else UNICODE_BARS
    top = max(histogram.counts) or 1
    levels = len(bars) - 1
    line = "".join(bars[math.ceil(c * levels / top)] for c in histogram.counts)
    return f"{format_number(histogram.low)} {line} {format_number(histogram.high)}"


def render_show(report: ShowReport, console: Console, *, ascii_only: bool = False) -> None:
    """Print every tensor of a ``show`` report, a blank line between them."""
    encoding = (getattr(console.file, "encoding", None) or "utf-8").lower().replace("-", "")
    ascii_only = ascii_only or encoding not in ("utf8", "utf8sig")
    for i, tensor in enumerate(report.tensors):
        if i:
            console.print()
        console.print(Text(f"{sanitize(tensor.name)}  {tensor.dtype} {format_shape(tensor.shape)}"))
        print_lines(console, tensor.preview.splitlines())
        if tensor.stats is not None:
            print_lines(console, [describe_stats(tensor.stats)])
            if tensor.stats.histogram is not None:
                print_lines(
                    console, [draw_histogram(tensor.stats.histogram, ascii_only=ascii_only)]
                )

"""The one text path of every report: :func:`render` dispatches on the report type.

Each report type has its renderer (``report.text`` for ls, header and convert,
``report.render_diff``, ``report.render_verify``); options that only one renderer knows
(``all_regions``, ``show_all``, ``quiet``) are passed through by name.
"""

from __future__ import annotations

from functools import singledispatch
from typing import TYPE_CHECKING

from rich.text import Text

from ckptctl.report.config import ConfigReport
from ckptctl.report.diff import DiffReport
from ckptctl.report.json import manifest_line
from ckptctl.report.manifest import HashReport
from ckptctl.report.model import ConvertReport, HeaderReport, LsReport
from ckptctl.report.render_config import render_config
from ckptctl.report.render_diff import render_diff
from ckptctl.report.render_values import render_show
from ckptctl.report.render_verify import render_verify
from ckptctl.report.safe_globals import SafeGlobalsReport
from ckptctl.report.text import print_lines, render_convert, render_header, render_ls
from ckptctl.report.values import ShowReport
from ckptctl.report.verify import VerifyReport

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["render"]


@singledispatch
def render(report: object, console: Console, **options: bool) -> None:
    """Print ``report`` as text on ``console``.

    Raises:
        TypeError: no renderer for this type.
    """
    raise TypeError(f"no text rendering for {type(report).__name__}")


@render.register(LsReport)
def _ls(report: LsReport, console: Console, **options: bool) -> None:
    render_ls(report, console, exact_bytes=options.get("exact_bytes", False))


@render.register(HeaderReport)
def _header(report: HeaderReport, console: Console, **options: bool) -> None:
    render_header(report, console, all_regions=options.get("all_regions", False))


@render.register(ConvertReport)
def _convert(report: ConvertReport, console: Console, **options: bool) -> None:
    render_convert(report, console)


@render.register(DiffReport)
def _diff(report: DiffReport, console: Console, **options: bool) -> None:
    render_diff(report, console, show_all=options.get("show_all", False))


@render.register(VerifyReport)
def _verify(report: VerifyReport, console: Console, **options: bool) -> None:
    render_verify(report, console, quiet=options.get("quiet", False))


@render.register(ConfigReport)
def _config(report: ConfigReport, console: Console, **options: bool) -> None:
    render_config(report, console)


@render.register(SafeGlobalsReport)
def _safe_globals(report: SafeGlobalsReport, console: Console, **options: bool) -> None:
    # code to paste: printed as it is, never wrapped or cropped
    for line in report.code().splitlines():
        console.print(Text(line), no_wrap=True, overflow="ignore", crop=False)


@render.register(HashReport)
def _hash(report: HashReport, console: Console, **options: bool) -> None:
    # the manifest itself: JSON lines, escaped to ASCII, so they are safe on a terminal too
    print_lines(console, [manifest_line(row) for row in report.tensors])


@render.register(ShowReport)
def _show(report: ShowReport, console: Console, **options: bool) -> None:
    render_show(report, console, ascii_only=options.get("ascii_only", False))

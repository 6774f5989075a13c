"""The one text path of every report: :func:`render` dispatches on the report type.

Each report type has its renderer (``report.text`` for ls, header and convert,
``report.render_diff``, ``report.render_verify``); options that only one renderer knows
(``all_regions``, ``show_all``, ``quiet``) are passed through by name. The table is keyed by
each type's qualified name and every entry imports its renderer when called, so a command
imports only the renderer of the report it prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl._lazy import for_type

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from ckptctl.report.config import ConfigReport
    from ckptctl.report.diff import DiffReport
    from ckptctl.report.manifest import HashReport
    from ckptctl.report.model import ConvertReport, HeaderReport, LsReport
    from ckptctl.report.safe_globals import SafeGlobalsReport
    from ckptctl.report.values import ShowReport
    from ckptctl.report.verify import VerifyReport

__all__ = ["render"]


def render(report: object, console: Console, **options: bool) -> None:
    """Print ``report`` as text on ``console``.

    Raises:
        TypeError: no renderer for this type.
    """
    renderer = for_type(_RENDERERS, report)
    if renderer is None:
        raise TypeError(f"no text rendering for {type(report).__name__}")
    renderer(report, console, **options)


def _ls(report: LsReport, console: Console, **options: bool) -> None:
    from ckptctl.report.text import render_ls

    render_ls(report, console, exact_bytes=options.get("exact_bytes", False))


def _header(report: HeaderReport, console: Console, **options: bool) -> None:
    from ckptctl.report.text import render_header

    render_header(report, console, all_regions=options.get("all_regions", False))


def _convert(report: ConvertReport, console: Console, **options: bool) -> None:
    from ckptctl.report.text import render_convert

    render_convert(report, console)


def _diff(report: DiffReport, console: Console, **options: bool) -> None:
    from ckptctl.report.render_diff import render_diff

    render_diff(report, console, show_all=options.get("show_all", False))


def _verify(report: VerifyReport, console: Console, **options: bool) -> None:
    from ckptctl.report.render_verify import render_verify

    render_verify(
        report,
        console,
        quiet=options.get("quiet", False),
        verbose=options.get("verbose", False),
    )


def _config(report: ConfigReport, console: Console, **options: bool) -> None:
    from ckptctl.report.render_config import render_config

    render_config(report, console)


def _safe_globals(report: SafeGlobalsReport, console: Console, **options: bool) -> None:
    from rich.text import Text

    # code to paste: printed as it is, never wrapped or cropped
    for line in report.code().splitlines():
        console.print(Text(line), no_wrap=True, overflow="ignore", crop=False)


def _hash(report: HashReport, console: Console, **options: bool) -> None:
    from ckptctl.report.json import manifest_line
    from ckptctl.report.text import print_lines

    # the manifest itself: JSON lines, escaped to ASCII, so they are safe on a terminal too
    print_lines(console, [manifest_line(row) for row in report.tensors])


def _show(report: ShowReport, console: Console, **options: bool) -> None:
    from ckptctl.report.render_values import render_show

    render_show(report, console, ascii_only=options.get("ascii_only", False))


#: report type (``module.QualName``) -> its text renderer. Types are named, not imported, so
#: that rendering one report imports no other report's module.
_RENDERERS: dict[str, Callable[..., None]] = {
    "ckptctl.report.model.LsReport": _ls,
    "ckptctl.report.model.HeaderReport": _header,
    "ckptctl.report.model.ConvertReport": _convert,
    "ckptctl.report.diff.DiffReport": _diff,
    "ckptctl.report.verify.VerifyReport": _verify,
    "ckptctl.report.config.ConfigReport": _config,
    "ckptctl.report.safe_globals.SafeGlobalsReport": _safe_globals,
    "ckptctl.report.manifest.HashReport": _hash,
    "ckptctl.report.values.ShowReport": _show,
}

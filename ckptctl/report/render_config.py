"""Text of ``verify --show-config``: the file, then one line per setting with its source."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from rich.text import Text

from ckptctl.report.sanitize import sanitize

if TYPE_CHECKING:
    from rich.console import Console

    from ckptctl.report.config import ConfigReport, ConfigSetting


def _where(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _source(setting: ConfigSetting) -> str:
    if setting.line is None:
        return setting.source
    return f"{_where(setting.source)}:{setting.line}"


def render_config(report: ConfigReport, console: Console) -> None:
    """``configuration: FILE [TABLE]`` (or none found), then ``KEY  VALUE  SOURCE`` lines."""
    if report.path is None:
        head = (
            "configuration: none found (no .ckptctl.toml, nor pyproject.toml with "
            f"[tool.ckptctl.verify], in {sanitize(report.searched_from)} or above)"
        )
    else:
        head = f"configuration: {sanitize(report.path)} {report.table}"
    console.print(Text(head))
    width = max(len(s.key) for s in report.settings) + 2
    values = [sanitize(json.dumps(s.value, ensure_ascii=False)) for s in report.settings]
    value_width = max(len(v) for v in values) + 2
    for setting, value in zip(report.settings, values, strict=True):
        line = f"{setting.key.ljust(width)}{value.ljust(value_width)}{sanitize(_source(setting))}"
        console.print(Text(line), no_wrap=True, overflow="ignore", crop=False)

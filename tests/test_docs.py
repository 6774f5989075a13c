"""The docs cover the CLI: help text, man pages (not stale), README mentions, CHANGELOG form."""

from __future__ import annotations

import importlib.util
import re
import sys

import click
import pytest

from ckptctl.cli import COMMANDS, cli
from tests.conftest import REPO


def _load_generator():
    spec = importlib.util.spec_from_file_location("man_generate", REPO / "man" / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["man_generate"] = module
    spec.loader.exec_module(module)
    return module


def _commands() -> dict[str, click.Command]:
    ctx = click.Context(cli, info_name="ckptctl")
    out = {}
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        if command is not None:
            out[name] = command
    return out


def _options(command: click.Command) -> list[str]:
    names: list[str] = []
    for param in command.params:
        if isinstance(param, click.Option):
            names.extend(o for o in param.opts if o.startswith("--"))
    return names


def test_man_pages_are_current():
    generator = _load_generator()
    pages = generator.render_pages()
    on_disk = {p.name for p in (REPO / "man").glob("*.1")}
    assert on_disk == set(pages), "run: python man/generate.py"
    for name, text in pages.items():
        assert (REPO / "man" / name).read_text(encoding="utf-8") == text, (
            f"man/{name} is stale; run: python man/generate.py"
        )


@pytest.mark.parametrize("name", list(_commands()))
def test_command_is_documented(name, run_cli):
    command = _commands()[name]
    assert command.help, f"{name} has no help text"
    result = run_cli(name, "--help")
    assert result.code == 0
    page = (REPO / "man" / f"ckptctl-{name}.1").read_text(encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"ckptctl {name}" in readme
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "EXAMPLES"):
        assert f".SH {section}" in page, (name, section)
    for option in _options(command):
        assert option in result.stdout, (name, option)
        assert option.replace("-", "\\-") in page, (name, option)
        assert re.search(rf"`[^`]*{re.escape(option)}\b", readme), (
            f"README does not mention {name} {option}"
        )
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{name} {param.opts} has no help text"


def test_changelog_has_unreleased_section():
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in text
    assert "Keep a Changelog" in text


def test_readme_test_command_is_what_ci_runs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert ".venv/bin/python -m pytest -q" in readme
    assert "python -m pytest -q" in ci

"""Suggestions are data (``ckptctl.fix``); the CLI spells them as its own flags (issue 14).

Every option the library names must exist on a command, and a suggested command line must run
as printed.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from ckptctl.cli._spelling import flag_of, spell_cli
from ckptctl.fix import SPELLER, Command, Note, Option
from tests.conftest import REPO, VALID

PT = VALID / "pytorch"


def _option_names() -> set[str]:
    names: set[str] = set()
    for path in (REPO / "ckptctl").rglob("*.py"):
        names |= set(re.findall(r'\bOption\(\s*"([a-z_]+)"', path.read_text(encoding="utf-8")))
    return names


def test_the_library_names_options_not_flags() -> None:
    names = _option_names()
    assert {"state_key", "remap", "adapters", "allow_globals", "checks"} <= names
    for name in sorted(names):
        assert flag_of(None, name, strict=False).startswith("--"), name


def test_cli_spelling_of_options_and_commands() -> None:
    assert spell_cli(Option("remap", r"^fc\.=fc1.")) == r"--remap '^fc\.=fc1.'"
    assert spell_cli(Option("adapters", "cast:f32")) == "--adapter cast:f32"
    command = Command("convert", ("a b.pt", "out.safetensors"), (Option("state_key", "model"),))
    assert spell_cli(command) == "ckptctl convert 'a b.pt' out.safetensors --state-key model"
    with pytest.raises(LookupError):
        spell_cli(Command("verify", ("x",), (Option("remap", "a=b"),)))  # verify has no --remap


def test_notes_are_spelled_by_the_current_speller() -> None:
    note = Note("pass {fix0}", (Option("state_key", "model"),))
    assert str(note) == "pass state_key='model'"
    token = SPELLER.set(spell_cli)
    try:
        assert str(note) == "pass --state-key model"
    finally:
        SPELLER.reset(token)


def _hint(run_cli, *args: str | Path) -> str:
    report = json.loads(run_cli(*args, "--json").stdout)
    return " ".join(f["hint"] or "" for f in report["files"][0]["findings"])


def _run_printed(run_cli, line: str) -> int:
    argv = shlex.split(line)
    assert argv[0] == "ckptctl"
    code: int = run_cli(*argv[1:]).code
    return code


def test_suggested_command_lines_run_as_printed(run_cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    hint = _hint(run_cli, "verify", PT / "nested.pt")
    line = re.search(r"ckptctl convert .*--state-key \S+", hint)
    assert line is not None, hint
    assert _run_printed(run_cli, line.group(0)) == 0
    assert (tmp_path / "model.safetensors").exists()
    allow = _hint(run_cli, "verify", PT / "module.pt", "--check", "safe-pickle")
    flags = re.search(r"(--allow-global \S+ ?)+", allow)
    assert flags is not None, allow
    again = f"ckptctl verify {shlex.quote(str(PT / 'module.pt'))} --check safe-pickle {flags[0]}"
    assert _run_printed(run_cli, again) == 0


def test_verify_expect_suggests_a_convert_that_runs(run_cli, tmp_path, monkeypatch) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    monkeypatch.chdir(tmp_path)
    save_file(
        {"fc.weight": np.zeros((3, 4), "<f4"), "fc.bias": np.zeros(3, "<f4")}, "src.safetensors"
    )
    save_file(
        {"fc1.weight": np.zeros((3, 4), "<f4"), "fc1.bias": np.zeros(3, "<f4")}, "ref.safetensors"
    )
    hint = _hint(run_cli, "verify", "src.safetensors", "--expect", "ref.safetensors")
    line = re.search(r"ckptctl convert .*", hint)
    assert line is not None, hint
    assert _run_printed(run_cli, line.group(0)) == 0
    assert run_cli("verify", "fitted.safetensors", "--expect", "ref.safetensors").code == 0

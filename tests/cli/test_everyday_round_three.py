"""Everyday use, round three (issue 48): a bar for every long read, options that do something,
JSON a script can use, counts that add up, docs where people look. Each test drives the CLI the
way the issue's user did: on a pseudo-terminal for bars and widths, through pipes otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file

from tests.cli._terminal import run_on_terminal

#: The width the issue's user had.
COLUMNS = 80


@pytest.fixture
def eight(tmp_path):
    """Eight 64 KiB F32 tensors (512 KiB): enough for a bar with a total, speed and ETA."""
    rng = np.random.default_rng(48)
    tensors = {f"layer{i}.weight": rng.random((128, 128), dtype=np.float32) for i in range(8)}
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    return path


# --- item 1: every command that reads tensor data shows the same bar, one line wide ---------

READERS = {
    "ls --stats": ("ls", "{f}", "--stats"),
    "show": ("show", "{f}", "--filter", "weight"),
    "hash": ("hash", "{f}", "-o", "{out}.manifest"),
    "diff": ("diff", "{f}", "{f}"),
    "convert": ("convert", "{f}", "{out}"),
}


def _args(command: tuple[str, ...], file, out) -> list[str]:
    return [a.format(f=file, out=out) for a in command]


def _bar_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "━" in line or "MiB/" in line or "KiB/" in line]


@pytest.mark.parametrize("command", list(READERS))
def test_every_reading_command_shows_the_bar_on_one_line_of_an_80_column_terminal(
    command, eight, tmp_path
):
    out = tmp_path / "a-long-output-name-for-a-converted-checkpoint.safetensors"
    run = run_on_terminal(*_args(READERS[command], eight, out), columns=COLUMNS)
    assert run.code == 0, run.terminal
    bars = _bar_lines(run.lines())
    assert bars, run.terminal
    assert any("512.0 KiB/512.0 KiB" in line for line in bars), bars
    for line in bars:  # every frame is one whole line: nothing wraps onto a second
        assert len(line) < COLUMNS, line
        assert "━" in line, line
        assert line.split()[0] in ("reading", "hashing", "comparing", "writing"), line


@pytest.mark.parametrize("command", list(READERS))
def test_no_bar_in_a_pipe_or_with_json(command, eight, tmp_path, run_cli):
    args = _args(READERS[command], eight, tmp_path / "o.safetensors")
    piped = run_cli(*args)
    assert piped.code == 0, piped.stderr
    assert "━" not in piped.stderr
    assert "KiB/" not in piped.stderr
    again = ["--force"] if command in ("convert", "hash") else []  # the output exists now
    json_run = run_on_terminal(*args, "--json", *again)
    assert json_run.code == 0, json_run.terminal
    assert not _bar_lines(json_run.lines()), json_run.terminal

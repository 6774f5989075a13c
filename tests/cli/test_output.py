"""Output that behaves in pipes and terminals: EPIPE, NO_COLOR, shell completion, streams."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import HOSTILE, VALID

BIG_LISTING = HOSTILE / "limits" / "st_many_tensors.safetensors"  # thousands of rows


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_closed_pipe_exits_quietly(extra):
    """`ckptctl ls big | head -1`: no traceback, no message, exit 0, every time."""
    for _ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-m", "ckptctl", "ls", str(BIG_LISTING), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
        assert proc.wait(timeout=60) == 0
        assert err == b""


def test_no_color_and_plain_output_when_piped(tmp_path):
    env = {**os.environ, "FORCE_COLOR": "1", "NO_COLOR": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "ckptctl", "ls", str(VALID / "burnpack" / "net.bpk")],
        capture_output=True,
        env=env,
        check=True,
    )
    assert b"\x1b[" not in out.stdout
    env.pop("NO_COLOR")
    out = subprocess.run(
        [sys.executable, "-m", "ckptctl", "--no-color", "ls", str(VALID / "burnpack" / "net.bpk")],
        capture_output=True,
        env=env,
        check=True,
    )
    assert b"\x1b[" not in out.stdout


def test_make_console_respects_no_color_on_a_terminal(monkeypatch):
    from ckptctl.cli._options import make_console

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    import click

    from ckptctl.cli import cli

    with click.Context(cli, obj={"no_color": True}):
        console = make_console()
    assert console.no_color


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_shell_completion_scripts(shell):
    env = {**os.environ, "_CKPTCTL_COMPLETE": f"{shell}_source"}
    out = subprocess.run(
        [sys.executable, "-c", "from ckptctl.cli import main; main()"],
        capture_output=True,
        env=env,
        text=True,
        check=False,
    )
    assert out.returncode == 0
    assert "_CKPTCTL_COMPLETE" in out.stdout


def test_completion_lists_commands():
    env = {
        **os.environ,
        "_CKPTCTL_COMPLETE": "bash_complete",
        "COMP_WORDS": "ckptctl ",
        "COMP_CWORD": "1",
    }
    out = subprocess.run(
        [sys.executable, "-c", "from ckptctl.cli import main; main()"],
        capture_output=True,
        env=env,
        text=True,
        check=False,
    )
    words = {line.split(",", 1)[1] for line in out.stdout.splitlines() if "," in line}
    assert {"ls", "header", "convert", "remap", "diff", "verify"} <= words


def test_results_on_stdout_diagnostics_on_stderr(run_cli, tmp_path):
    result = run_cli("convert", VALID / "burnpack" / "net.bpk", tmp_path / "x.safetensors")
    assert result.code == 0
    assert result.stdout == ""
    assert "wrote" in result.stderr
    listing = run_cli("ls", tmp_path / "x.safetensors", "--json")
    assert listing.stderr == ""
    assert listing.stdout.startswith("{")

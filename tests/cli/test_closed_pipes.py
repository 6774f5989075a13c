"""A closed stdout or stderr never changes the exit status (issue 30, item 1).

Each case runs the real CLI in a subprocess whose stdout or stderr is a pipe closed before the
command writes a byte, like ``ckptctl ... 2>&1 | head -0`` under ``set -o pipefail``. Before
the fix, a closed stream turned failures into 0 (the command ended at its first write) or 1 (the
error message itself hit the closed pipe).
"""

from __future__ import annotations

import shlex
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import save_file


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipes")
    a = {f"layers.{i}.weight": np.full((2, 2), i, "<f4") for i in range(3)}
    save_file(a, str(root / "a.safetensors"))
    save_file(dict(a, **{"layers.0.weight": np.ones((2, 2), "<f4")}), str(root / "b.safetensors"))
    save_file(dict(a, extra=np.zeros(2, "<f4")), str(root / "ref.safetensors"))
    return root


CASES = {
    # command: (argv, the exit status when nothing is closed)
    "ls": (["ls", "a.safetensors", "nope.pt"], 3),
    "header": (["header", "a.safetensors", "nope.pt"], 3),
    "convert": (["convert", "a.safetensors", "out.bpk", "--target", "ref.safetensors"], 1),
    "remap": (["remap", "a.safetensors", "q.safetensors", "-r", "^x=y", "--strict"], 1),
    "diff": (["diff", "--all", "a.safetensors", "b.safetensors"], 1),
    "verify": (["verify", "a.safetensors", "nope.pt"], 1),
    "man": (["man", "nope"], 2),
    "hash": (["hash", "nope.pt"], 3),
    "show": (["show", "a.safetensors", "nope"], 2),
    "show-values": (["show", "a.safetensors", "layers.0.weight"], 0),
    "hash-lines": (["hash", "a.safetensors"], 0),
    "man-page": (["man", "verify", "--roff"], 0),
    "usage": (["verify", "a.safetensors", "--min-tensors", "-1"], 2),
    "missing": (["diff", "a.safetensors", "nope.pt"], 3),
}


def _run(files, argv, close):
    cmd = [sys.executable, "-m", "ckptctl", *argv]
    proc = subprocess.Popen(cmd, cwd=files, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    closed = proc.stdout if close == "stdout" else proc.stderr
    other = proc.stderr if close == "stdout" else proc.stdout
    assert closed is not None
    assert other is not None
    closed.close()  # before the command writes anything: `| head -0`
    rest = other.read()
    other.close()
    return proc.wait(timeout=60), rest


@pytest.mark.parametrize("name", list(CASES))
def test_the_exit_status_without_a_closed_pipe(files, name):
    argv, code = CASES[name]
    out = subprocess.run(
        [sys.executable, "-m", "ckptctl", *argv], cwd=files, capture_output=True, check=False
    )
    assert out.returncode == code, out.stderr
    assert out.stdout or out.stderr  # each case writes something that a closed pipe would lose


@pytest.mark.parametrize("close", ["stdout", "stderr"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_closed_pipe_keeps_the_exit_status(files, name, close):
    argv, code = CASES[name]
    status, rest = _run(files, argv, close)
    assert status == code, rest
    assert b"Traceback" not in rest
    assert b"Exception ignored" not in rest


def test_a_closed_pipe_keeps_success(files):
    for close in ("stdout", "stderr"):
        status, rest = _run(files, ["ls", "a.safetensors", "--json"], close)
        assert (status, rest if close == "stdout" else b"") == (0, b"")


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("pipe", ["2>&1 | head -0", "2>&1 | head -c 1", "2>/dev/null | head -0"])
def test_the_exit_status_under_pipefail(files, name, pipe):
    # the issue's own spelling: a shell pipeline with pipefail reports the command's status
    argv, code = CASES[name]
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "ckptctl", *argv])
    out = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {cmd} {pipe}"], cwd=files, capture_output=True,
        check=False, timeout=60,
    )  # fmt: skip
    assert out.returncode == code, (pipe, out.stderr[-400:])


def test_every_command_has_a_closed_pipe_case():
    from ckptctl.cli import COMMANDS

    covered = {argv[0] for argv, _ in CASES.values()}
    assert set(COMMANDS) <= covered, sorted(set(COMMANDS) - covered)

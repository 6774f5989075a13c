"""Unreadable inputs are input errors naming the file, never usage errors (issue 30, item 2).

Permission is simulated in-process (``os.access`` says no, ``open`` raises PermissionError for
the locked file), so the tests run as root too; one test uses a real ``chmod 000`` and skips
only where this user can read the file anyway.
"""

from __future__ import annotations

import builtins
import json
import os

import numpy as np
import pytest
from safetensors.numpy import save_file


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "good.safetensors"
    save_file({"w": np.zeros((2, 2), "<f4")}, str(path))
    return path


@pytest.fixture
def locked(tmp_path, good, monkeypatch):
    """A file this process may see but not read, as for another user's ``chmod 600`` file."""
    path = tmp_path / "locked.safetensors"
    path.write_bytes(good.read_bytes())
    real_open, real_access = builtins.open, os.access

    def is_locked(file: object) -> bool:
        return isinstance(file, str | os.PathLike) and os.path.abspath(file) == str(path)

    def fake_open(file, *args, **kwargs):
        if is_locked(file):
            raise PermissionError(13, "Permission denied", os.fspath(file))
        return real_open(file, *args, **kwargs)

    def fake_access(file, mode, *args, **kwargs):
        return False if is_locked(file) else real_access(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(os, "access", fake_access)
    return path


def test_verify_fails_the_unreadable_file_and_checks_the_others(run_cli, locked, good):
    result = run_cli("verify", locked, good)
    assert result.code == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"FAIL {locked} (unreadable)"
    assert "permission denied" in lines[1]
    assert f"PASS {good} (safetensors)" in lines
    assert "Usage:" not in result.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["ls", "{locked}"],
        ["header", "{locked}"],
        ["convert", "{locked}", "{tmp}/out.bpk"],
        ["remap", "{locked}", "{tmp}/out.bpk", "-r", "^=a."],
        ["diff", "{locked}", "{good}"],
        ["diff", "{good}", "{locked}"],
        ["convert", "{good}", "{tmp}/out.bpk", "--target", "{locked}"],
    ],
)
def test_an_unreadable_file_is_an_input_error_naming_it(run_cli, locked, good, tmp_path, argv):
    args = [a.format(locked=locked, good=good, tmp=tmp_path) for a in argv]
    result = run_cli(*args)
    assert result.code == 3, result.stderr
    assert result.stderr.startswith(f"ckptctl: error: {locked}: permission denied\n")
    assert "hint: check its permissions" in result.stderr
    as_json = run_cli(*args, "--json")
    assert as_json.code == 3
    error = json.loads(as_json.stdout)["error"]
    assert (error["type"], error["path"], error["exit_code"]) == ("InputError", str(locked), 3)


@pytest.mark.parametrize("command", ["convert", "diff", "remap"])
def test_a_directory_is_an_input_error_naming_it(run_cli, good, tmp_path, command):
    folder = tmp_path / "folder"
    folder.mkdir()
    extra = {"convert": [tmp_path / "o.bpk"], "diff": [good], "remap": [tmp_path / "o.bpk"]}
    rules = ["-r", "^=a."] if command == "remap" else []
    result = run_cli(command, folder, *extra[command], *rules)
    assert result.code == 3, result.stderr
    assert result.stderr.startswith(f"ckptctl: error: {folder}: is a directory")


def test_verify_names_directories_and_devices_and_checks_the_rest(run_cli, good, tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    result = run_cli("verify", folder, os.devnull, good)
    assert result.code == 1
    fails = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert fails == [f"FAIL {folder} (unreadable)", f"FAIL {os.devnull} (unreadable)"]
    assert "is a directory" in result.stdout
    assert "character device" in result.stdout
    assert f"PASS {good} (safetensors)" in result.stdout


def test_a_real_chmod_000_file(run_cli, good, tmp_path):
    path = tmp_path / "mode000.safetensors"
    path.write_bytes(good.read_bytes())
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("this user (root) reads a mode-000 file; the simulated tests cover it")
        result = run_cli("verify", path, good)
        assert result.code == 1
        assert "permission denied" in result.stdout
        assert run_cli("ls", path).code == 3
    finally:
        path.chmod(0o600)


def test_a_reference_file_that_cannot_be_read_is_named(run_cli, locked, good):
    result = run_cli("verify", good, "--expect", locked)
    assert result.code == 1, result.stderr  # verify: a failed check, not a usage error
    assert "permission denied" in result.stdout
    assert "Usage:" not in result.stderr


def test_a_directory_that_cannot_be_listed_is_named(run_cli, tmp_path, monkeypatch):
    folder = tmp_path / "private"
    folder.mkdir()
    real_listdir = os.listdir

    def fake_listdir(path="."):
        if os.fspath(path) == str(folder):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", fake_listdir)
    result = run_cli("ls", folder)
    assert result.code == 3, result.stderr
    assert result.stderr.startswith(
        f"ckptctl: error: {folder}: permission denied: the directory cannot be listed\n"
    )

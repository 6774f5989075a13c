"""Every bad input: one line on stderr naming the file and cause, the documented exit code."""

from __future__ import annotations

import pytest

from tests.conftest import HOSTILE


def assert_one_error(result, path, *fragments: str) -> None:
    lines = result.stderr.splitlines()
    assert 1 <= len(lines) <= 2, result.stderr
    assert lines[0].startswith(f"ckptctl: error: {path}: "), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("content", "code", "fragments"),
    [
        (b"", 3, ("the file is empty",)),
        (
            (HOSTILE / "lfs" / "model.safetensors").read_bytes(),  # written by git-lfs
            3,
            ("git-lfs pointer", "size 352", "git lfs pull"),
        ),
        (b"<!DOCTYPE html><html><body>404</body></html>", 3, ("HTML",)),
        (b"GGUF\x03\x00\x00\x00" + bytes(4), 3, ("GGUF", "24-byte header")),
        (b"\x1f\x8b\x08\x00" + bytes(40), 3, ("gzip", "decompress")),
        (b"abc", 3, ("only 3 bytes",)),
    ],
)
@pytest.mark.parametrize("command", ["ls", "header"])
def test_non_checkpoints(run_cli, tmp_path, command, content, code, fragments):
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    result = run_cli(command, path)
    assert result.code == code
    assert_one_error(result, path, *fragments)


def test_missing_file(run_cli, tmp_path):
    result = run_cli("ls", tmp_path / "nope.pt")
    assert result.code == 3
    assert_one_error(result, tmp_path / "nope.pt", "no such file")


def test_directory(run_cli, tmp_path):
    result = run_cli("ls", tmp_path)
    assert result.code in (2, 3)  # click may refuse the directory first (usage)
    assert "Traceback" not in result.stderr


def test_usage_error_is_2(run_cli):
    result = run_cli("ls")
    assert result.code == 2
    assert "Missing argument" in result.stderr


def test_unknown_command_is_2(run_cli):
    result = run_cli("frobnicate")
    assert result.code == 2


def test_help_and_version(run_cli):
    result = run_cli("--help")
    assert result.code == 0
    for name in ("ls", "header", "convert"):
        assert f"  {name} " in result.stdout
    version = run_cli("--version")
    assert version.code == 0
    from ckptctl import __version__

    assert version.stdout.strip() == f"ckptctl, version {__version__}"


def test_internal_error_is_70_without_traceback(run_cli, tmp_path, monkeypatch):
    import ckptctl.ops.inspect as inspect_mod

    def broken(*args, **kwargs):
        raise ZeroDivisionError("simulated bug")

    monkeypatch.setattr(inspect_mod, "list_tensors", broken)
    path = tmp_path / "x.bin"
    path.write_bytes(b"x")
    result = run_cli("ls", path)
    assert result.code == 70
    assert "internal error: ZeroDivisionError: simulated bug" in result.stderr
    assert "Traceback" not in result.stderr

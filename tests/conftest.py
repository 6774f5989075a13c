"""Shared fixtures: fixture paths, the CLI runner, golden files."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
VALID = FIXTURES / "valid"
HOSTILE = FIXTURES / "hostile"
GOLDEN = FIXTURES / "golden"
SHARED = REPO.parent / "shared"
CORPUS = SHARED / "corpus"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden", action="store_true", help="rewrite fixtures/golden from current output"
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
def corpus() -> Path:
    """The shared corpus of real files from other projects; skips when absent."""
    path = CORPUS / "burn-pytorch-reader"
    if not path.is_dir():
        pytest.skip("../shared/corpus is not available")
    return path


class CliResult:
    """What one ``ckptctl`` invocation did: exit code, stdout, stderr."""

    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.code = code
        self.stdout = stdout
        self.stderr = stderr

    def __repr__(self) -> str:
        return f"CliResult(code={self.code}, stdout={self.stdout!r}, stderr={self.stderr!r})"


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Run ``ckptctl.cli.main(args)`` in-process: the real error mapping, fixed width, no colour."""
    from ckptctl.cli import main

    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("CKPTCTL_DEBUG", raising=False)

    def invoke(*args: str | Path) -> CliResult:
        capsys.readouterr()
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        else:  # pragma: no cover - main always exits
            code = -1
        out = capsys.readouterr()
        return CliResult(code, out.out, out.err)

    return invoke


def check_golden(text: str, path: Path, update: bool) -> None:
    """Compare ``text`` with the golden file ``path`` (or rewrite it with --update-golden)."""
    if update or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if not update:
            pytest.fail(f"golden file {path} was missing and has been written; review and rerun")
    assert text == path.read_text(encoding="utf-8")

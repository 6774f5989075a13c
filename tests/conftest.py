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

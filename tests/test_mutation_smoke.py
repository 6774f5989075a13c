"""A bounded run of ``fuzz/mutation_smoke.py``: mutated fixtures through ``ls`` and ``convert``.

The full run (thousands of mutants) is the script itself; here a few mutants of every valid
fixture go through the in-process CLI, and a handful through real ``python -m ckptctl``
subprocesses. Only exit codes 0/1/3/4 are allowed, no traceback, every failure explained.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"


@pytest.fixture(scope="module")
def smoke() -> ModuleType:
    sys.path.insert(0, str(FUZZ))
    try:
        spec = importlib.util.spec_from_file_location("mutation_smoke", FUZZ / "mutation_smoke.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["mutation_smoke"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(FUZZ))
    return module


def test_in_process_smoke_run_has_only_allowed_exit_codes(smoke: ModuleType) -> None:
    summary = smoke.smoke(mutants=4, seed=7)
    assert summary.runs == 2 * 4 * len(smoke.fixtures())
    assert summary.problems == []
    codes = {code for _, code in summary.codes}
    assert codes <= {0, 1, 3, 4}
    assert {0, 3} <= codes, "mutants should both pass and fail; the mutator may be broken"
    table = summary.table()
    assert table.splitlines()[0].startswith("command")
    assert f"{summary.runs} runs, 0 problems" in table


def test_subprocess_smoke_run_has_only_allowed_exit_codes(
    smoke: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two fixtures only: each subprocess pays the interpreter start-up.
    two = sorted(smoke.fixtures(), key=lambda p: p.stat().st_size)[:2]
    monkeypatch.setattr(smoke, "fixtures", lambda: two)
    summary = smoke.smoke(mutants=2, seed=3, use_subprocess=True)
    assert summary.runs == 2 * 2 * 2
    assert summary.problems == []


def test_check_flags_tracebacks_and_unexplained_failures(smoke: ModuleType) -> None:
    summary = smoke.Summary()
    smoke.check(smoke.Outcome("ls", 70, "Traceback (most recent call last):", 0.1), "x", summary)
    smoke.check(smoke.Outcome("ls", 3, "", 0.1), "y", summary)
    smoke.check(smoke.Outcome("ls", 3, "ckptctl: error: bad", 9.0), "z", summary)
    smoke.check(smoke.Outcome("ls", 0, "", 0.1), "ok", summary)
    assert len(summary.problems) == 3
    assert "exit 70" in summary.problems[0]
    assert "traceback" in summary.problems[0]
    assert "without an error message" in summary.problems[1]
    assert "took 9.0 s" in summary.problems[2]

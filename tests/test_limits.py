"""Resource limits: small hostile files never take more than 5 s or 256 MiB.

Each file in fixtures/hostile/limits/ declares a huge size, count or depth. It is opened (every
tensor loaded, the header layout read) in-process under ``tracemalloc`` (which sees Python and
NumPy allocations) and a wall clock; only a ``CkptError`` may come out. Memory maps are not
allocations and are not counted.
"""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from tests.contract import exercise

LIMITS = Path(__file__).resolve().parents[1] / "fixtures" / "hostile" / "limits"
FILES = sorted(p for p in LIMITS.iterdir() if p.suffix in (".safetensors", ".bpk", ".pkl", ".pt"))
MAX_SECONDS = 5.0
MAX_BYTES = 256 << 20
#: Files a reader may open cleanly (their declared sizes are consistent and tiny).
MAY_OPEN = {"st_many_tensors.safetensors", "pkl_many_marks.pkl"}
#: Known failures, reported for a fix in files this suite's author does not own.
KNOWN: dict[str, str] = {}  # files whose bound is a known, open bug


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_hostile_limit_file_is_bounded(path: Path) -> None:
    if path.name in KNOWN:
        pytest.xfail(KNOWN[path.name])
    tracemalloc.start()
    start = time.monotonic()
    try:
        error = exercise(path)
        seconds = time.monotonic() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seconds < MAX_SECONDS, f"took {seconds:.1f} s"
    assert peak < MAX_BYTES, f"peak {peak >> 20} MiB"
    if path.name not in MAY_OPEN:
        assert error is not None, "a file declaring impossible sizes was accepted"
        assert error.path is not None
        assert error.message[:1].islower()


def test_every_limit_file_has_a_readme_line() -> None:
    readme = (LIMITS / "README.md").read_text(encoding="utf-8")
    assert FILES
    for path in FILES:
        assert f"`{path.name}`" in readme, path.name

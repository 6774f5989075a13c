"""benchmarks/bench_pt.py runs (torch tier: it times torch itself); numbers live in RESULTS.md."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, copy_benchmarks

pytest.importorskip("torch")

pytestmark = pytest.mark.torch


def test_bench_pt_quick_with_floor(tmp_path):
    scripts = copy_benchmarks(tmp_path)
    (tmp_path / "fixtures").symlink_to(REPO / "fixtures")  # the floor's 1-tensor .pt
    out = subprocess.run(
        [sys.executable, str(scripts / "bench_pt.py"), "--quick", "--floor"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        cwd=tmp_path,
    )
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ")]
    cases = [row.split(" | ")[0] for row in rows]
    assert "| ls --json, 500 tensors" in cases
    assert "| convert 32 MiB .pt → safetensors" in cases
    parts = [case for case in cases if case.startswith(("| start-up", "| bounds", "| safety"))]
    assert len(parts) == 3
    speedups = [float(row.split(" | ")[3].rstrip("x")) for row in rows[2:5]]
    assert all(s > 0 for s in speedups)

"""benchmarks/bench_dcp.py runs (torch tier: it writes its input with torchrun and times torch's
own dcp_to_torch_save); numbers live in RESULTS.md."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import copy_benchmarks

pytest.importorskip("torch")

pytestmark = pytest.mark.torch


def test_bench_dcp_quick(tmp_path):
    scripts = copy_benchmarks(tmp_path)
    out = subprocess.run(
        [sys.executable, str(scripts / "bench_dcp.py"), "--quick"],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ")]
    cases = [row.split(" | ")[0] for row in rows[2:]]
    assert cases == [
        "| convert → safetensors",
        "| convert → .pt",
        "| convert → safetensors, `--no-fsync`",
        "| convert → safetensors (fsync)",
    ]
    bound = float(re.search(r"bound (\d+) MiB", out.stdout).group(1))  # type: ignore[union-attr]
    assert bound == 64 + 16  # 64 MiB + the largest tensor
    for row in rows[2:]:
        ours_mib = float(row.split(" | ")[4].removesuffix(" MiB"))
        assert ours_mib <= bound, row

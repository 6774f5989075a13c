"""The benchmark scripts run (tiny inputs); the real numbers live in benchmarks/RESULTS.md."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO


def test_bench_smoke(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "bench.py"),
            "--quick",
            "--case",
            "st-bpk-nofsync",
            "--case",
            "st-bpk-transpose",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    report = json.loads(out.stdout)
    assert [r["case"] for r in report["results"]] == ["st-bpk-nofsync", "st-bpk-transpose"]
    for result in report["results"]:
        assert result["ckptctl_s"] > 0
        assert result["ckptctl_peak_rss_MiB"] > 0
        assert result["input_bytes"] >= 8 << 20

"""The benchmark scripts run (tiny inputs); the real numbers live in benchmarks/RESULTS.md."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from tests.conftest import REPO


def test_bench_smoke(tmp_path):
    # bench.py generates its inputs in _work/ beside itself: run a copy so they land in tmp_path.
    script = tmp_path / "benchmarks" / "bench.py"
    script.parent.mkdir()
    shutil.copy2(REPO / "benchmarks" / "bench.py", script)
    out = subprocess.run(
        [
            sys.executable,
            str(script),
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
        cwd=tmp_path,
    )
    report = json.loads(out.stdout)
    assert [r["case"] for r in report["results"]] == ["st-bpk-nofsync", "st-bpk-transpose"]
    for result in report["results"]:
        assert result["ckptctl_s"] > 0
        assert result["ckptctl_peak_rss_MiB"] > 0
        assert result["input_bytes"] >= 8 << 20

"""Benchmark: ``ckptctl verify DIR`` over many small ``.pt`` files, ``-j 1`` against ``-j 2``,
and picklescan on the same directory (issue 28).

Usage (from the repository root, with ckptctl installed)::

    python benchmarks/bench_verify.py                                # 1,000 files, 5 runs
    python benchmarks/bench_verify.py --picklescan /venv/bin/picklescan
    python benchmarks/bench_verify.py --files 20 --runs 1            # a smoke test

The files are PyTorch zip checkpoints written by ckptctl itself (``save_checkpoint``; torch is
not needed): flat state_dicts of 4 F32 tensors, about 2 KB each, in ``_work/verify_dir/``.
Each figure is the median wall time of ``--runs`` whole processes (interpreter start and
imports included). ``verify`` exits 0 (every file passes); picklescan's own exit code is
reported, not judged.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import CKPTCTL, WORK, child_env


def make_files(directory: Path, count: int) -> None:
    """``count`` small flat state_dicts as ``.pt`` zip files (reused when already there)."""
    import numpy as np

    from ckptctl import DType, save_checkpoint
    from ckptctl.model import ComputedData, TensorEntry

    marker = directory / f".{count}"
    if marker.exists():
        return
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        entries = []
        for k in range(4):
            raw = rng.standard_normal((4, 4)).astype("<f4").tobytes()
            data = ComputedData(lambda raw=raw: raw)
            entries.append(TensorEntry(f"layers.{k}.weight", DType.F32, (4, 4), 64, None, data))
        save_checkpoint(directory / f"model-{i:04d}.pt", entries, {}, fsync=False)
    marker.write_text("")


def timed(cmd: list[str], runs: int) -> tuple[float, int]:
    """Median seconds of ``runs`` runs of ``cmd``, and its exit code."""
    times = []
    code = 0
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, env=child_env(), check=False)
        times.append(time.perf_counter() - start)
        code = proc.returncode
    return statistics.median(times), code


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--picklescan", help="path of a picklescan executable to compare with")
    args = parser.parse_args(argv)
    directory = WORK / "verify_dir"
    make_files(directory, args.files)
    rows = []
    for jobs in (1, 2):
        seconds, code = timed(
            [*CKPTCTL, "verify", str(directory), "-q", "-j", str(jobs)], args.runs
        )
        if code != 0:
            raise SystemExit(f"ckptctl verify -j {jobs} exited {code}")
        rows.append({"case": f"ckptctl verify DIR -j {jobs}", "seconds": seconds, "exit": code})
    if args.picklescan:
        seconds, code = timed([args.picklescan, "--path", str(directory)], args.runs)
        rows.append({"case": "picklescan --path DIR", "seconds": seconds, "exit": code})
    for row in rows:
        per_file = row["seconds"] / args.files * 1000
        line = f"{row['case']:<28} {row['seconds']:7.2f} s  {per_file:6.2f} ms/file"
        print(f"{line}  exit {row['exit']}")
    print(json.dumps({"files": args.files, "runs": args.runs, "rows": rows}))


if __name__ == "__main__":
    main()

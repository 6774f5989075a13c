"""Reading ``.pt`` files: ckptctl against torch, side by side (issue #6). Not run in CI.

Usage (a Python with torch, safetensors and ckptctl installed)::

    python benchmarks/bench_pt.py                  # 20,000 small tensors; 1 GiB; 5 runs each
    python benchmarks/bench_pt.py --runs 7 --size-mib 2048
    python benchmarks/bench_pt.py --quick          # small inputs, 1 run: a smoke test
    python benchmarks/bench_pt.py --floor          # also the listing's floor (floor_pt.py)

Cases, each a whole child process (interpreter start and ``import torch`` included):

* ``ls``: ``ckptctl ls --json many.pt`` against ``torch.load(path, mmap=True, weights_only=True)``
  of a state_dict of 20,000 4x4 float32 tensors.
* ``convert``: ``ckptctl convert big.pt out.safetensors`` against ``torch.load(weights_only=True)``
  then ``safetensors.torch.save_file`` of a ~1 GiB state_dict (64 float32 tensors).

Wall time is the median of ``--runs`` runs; peak RSS is the child's ``ru_maxrss`` from
``os.wait4``. Inputs are written with torch into ``benchmarks/_work/`` and reused; each is read
once before timing so every command sees a warm page cache.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench import precompile, run  # the same timing, peak-RSS and bytecode set-up as bench.py
from floor_pt import floor

WORK = Path(__file__).resolve().parent / "_work"
CKPTCTL = [sys.executable, "-m", "ckptctl"]


_MAKE = """
import sys, torch
count, size_mib, many, big = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
torch.manual_seed(0)
if many != "-":
    torch.save({f"layers.{i // 4}.p{i % 4}.weight": torch.randn(4, 4) for i in range(count)}, many)
if big != "-":  # 16 MiB per tensor: 4096 x 1024 float32
    torch.save({f"block.{i}.weight": torch.randn(4096, 1024) for i in range(size_mib // 16)}, big)
"""


def make_inputs(count: int, size_mib: int) -> tuple[Path, Path]:
    """Write (if missing) the many-tensor and the big checkpoint with torch.

    torch runs in a child process: Linux carries a parent's peak RSS into every child it forks
    (``ru_maxrss`` survives ``exec``), so importing torch here would inflate every measurement.
    """
    WORK.mkdir(exist_ok=True)
    many = WORK / f"many_{count}.pt"
    big = WORK / f"big_{size_mib}mib.pt"
    todo = [str(p) if not p.exists() else "-" for p in (many, big)]
    if todo != ["-", "-"]:
        subprocess.run([sys.executable, "-c", _MAKE, str(count), str(size_mib), *todo], check=True)
    for path in (many, big):
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    return many, big


def measure(name: str, cmd: list[str], runs: int, cleanup: Path | None) -> tuple[float, int]:
    times, rss = [], []
    for _ in range(runs):
        if cleanup is not None and cleanup.exists():
            cleanup.unlink()
        os.sync()  # no dirty pages of the run before (bench.py does the same)
        timed = run(cmd)
        seconds, kib = timed.seconds, timed.max_rss_kib
        times.append(seconds)
        rss.append(kib)
    if cleanup is not None and cleanup.exists():
        cleanup.unlink()
    print(f"  {name}: {statistics.median(times):.2f} s, {max(rss) / 1024:.0f} MiB", file=sys.stderr)
    return statistics.median(times), max(rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per command (median)")
    parser.add_argument("--tensors", type=int, default=20_000, help="tensors in the ls input")
    parser.add_argument("--size-mib", type=int, default=1024, help="size of the convert input")
    parser.add_argument("--quick", action="store_true", help="small inputs, one run")
    parser.add_argument(
        "--floor", action="store_true", help="also time the parts no design can drop (floor_pt.py)"
    )
    args = parser.parse_args()
    if args.quick:
        args.runs, args.tensors, args.size_mib = 1, 500, 32
    many, big = make_inputs(args.tensors, args.size_mib)
    precompile()
    out = WORK / "out.safetensors"
    py = sys.executable
    rows = []
    ls_ours = measure("ckptctl ls", [*CKPTCTL, "ls", "--json", str(many)], args.runs, None)
    ls_torch = measure(
        "torch.load mmap",
        [py, "-c", f"import torch; torch.load({str(many)!r}, mmap=True, weights_only=True)"],
        args.runs,
        None,
    )
    rows.append((f"ls --json, {args.tensors:,} tensors", ls_ours, ls_torch,
                 "torch.load(mmap=True, weights_only=True)"))  # fmt: skip
    conv_ours = measure(
        "ckptctl convert", [*CKPTCTL, "convert", str(big), str(out), "--force"], args.runs, out
    )
    script = (
        "import torch, safetensors.torch as st; "
        f"st.save_file(torch.load({str(big)!r}, weights_only=True), {str(out)!r})"
    )
    conv_torch = measure("torch + save_file", [py, "-c", script], args.runs, out)
    rows.append((f"convert {args.size_mib} MiB .pt → safetensors", conv_ours, conv_torch,
                 "torch.load(weights_only=True) + safetensors save_file"))  # fmt: skip
    # save_file does not fsync; --no-fsync compares like with like
    conv_nofsync = measure(
        "ckptctl convert --no-fsync",
        [*CKPTCTL, "convert", str(big), str(out), "--force", "--no-fsync"],
        args.runs,
        out,
    )
    rows.append((f"convert {args.size_mib} MiB .pt → safetensors, --no-fsync", conv_nofsync,
                 conv_torch, "torch.load(weights_only=True) + safetensors save_file"))  # fmt: skip
    print(f"median of {args.runs} runs, whole process; peak RSS = ru_maxrss of the child\n")
    print("| case | ckptctl | baseline | speed-up | ckptctl RSS | baseline RSS | baseline |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for case, (t1, r1), (t2, r2), what in rows:
        print(
            f"| {case} | {t1:.2f} s | {t2:.2f} s | {t2 / t1:.1f}x | {r1 / 1024:.0f} MiB "
            f"| {r2 / 1024:.0f} MiB | {what} |"
        )
    if args.floor:
        small = Path(__file__).resolve().parent.parent / "fixtures/valid/pytorch/min_zip.pt"
        torch_s = ls_torch[0]
        print(f"\nfloor of ls --json ({args.tensors:,} tensors; torch {torch_s:.2f} s):\n")
        print("| part | seconds | torch / (running sum) |")
        print("| --- | ---: | ---: |")
        total = 0.0
        for part, seconds in floor(many, small, args.runs).items():
            if part != "floor (sum)":
                total += seconds
                print(f"| {part} | {seconds:.3f} | {torch_s / total:.1f}x |")


if __name__ == "__main__":
    main()

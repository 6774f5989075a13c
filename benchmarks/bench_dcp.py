"""Consolidating a torch.distributed.checkpoint directory: ckptctl against torch (issue 26).

Usage (a Python with torch, safetensors and ckptctl installed; not run in CI)::

    python benchmarks/bench_dcp.py                 # 1 GiB over 2 ranks, 3 runs each
    python benchmarks/bench_dcp.py --size-mib 2048 --runs 5
    python benchmarks/bench_dcp.py --quick         # 32 MiB, 1 run: a smoke test
    python benchmarks/bench_dcp.py --cp-only --jobs 1   # ckptctl copying on one thread

The input is written by ``torchrun --nproc_per_node=2`` with gloo: F32 DTensors of 4096 columns
(64 MiB each at 1 GiB), half ``Shard(0)`` (rows: one file range per chunk), half ``Shard(1)``
(columns: each row's part of every chunk). Cases, each a whole child process:

* ``convert DIR out.safetensors`` against ``dcp_to_torch_save`` then ``torch.load`` and
  ``safetensors.torch.save_file`` (torch's own way to a safetensors file);
* ``convert DIR out.pt`` against ``dcp_to_torch_save`` alone;
* ``convert --no-fsync`` against ``cp`` of the rank files (the same bytes, no fsync either);
* ``convert`` (fsync'd, the default) against ``cp && sync`` of the rank files.

Each case runs ckptctl and its baseline alternately, run by run; wall time is the median of
``--runs`` runs; peak RSS is the child's ``ru_maxrss`` (through GNU time, as in bench.py). The
input is read once before timing, so every command sees a warm page cache. The bound to meet:
peak RSS <= 64 MiB + the largest tensor.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from bench import precompile, run  # the same timing, peak-RSS and bytecode set-up as bench.py

WORK = Path(__file__).resolve().parent / "_work"
CKPTCTL = [sys.executable, "-m", "ckptctl"]
COLUMNS = 4096
TORCHRUN_TRIES = 3

_WORKER = """
import sys, torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
out, count, rows, columns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
state = {}
for i in range(count):
    full = torch.randn(rows, columns, generator=torch.Generator().manual_seed(i))
    state[f"layers.{i}.weight"] = distribute_tensor(full, mesh, [Shard(i % 2)])
    del full
dcp.save(state, checkpoint_id=out)
dist.destroy_process_group()
"""


def make_input(size_mib: int) -> tuple[Path, int]:
    """Write (if missing) the DCP directory with torch; returns it and its largest tensor."""
    WORK.mkdir(exist_ok=True)
    count = max(2, size_mib // 64)
    rows = max(2, size_mib * 2**20 // count // (4 * COLUMNS) // 2 * 2)
    target = WORK / f"dcp_{size_mib}mib"
    if not (target / ".metadata").exists():
        script = WORK / "make_dcp.py"
        script.write_text(_WORKER)
        torchrun = Path(sys.executable).with_name("torchrun")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        cmd = [str(torchrun), "--standalone", "--nproc_per_node=2", str(script), str(target),
               str(count), str(rows), str(COLUMNS)]  # fmt: skip
        for attempt in range(1, TORCHRUN_TRIES + 1):
            shutil.rmtree(target, ignore_errors=True)
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if done.returncode == 0:
                break
            # torchrun's rendezvous can lose its port to another process between choosing it and
            # binding it (pytorch/pytorch#126510): a failed start is tried again, then shown.
            print(f"torchrun failed (try {attempt} of {TORCHRUN_TRIES}, exit {done.returncode}):",
                  done.stderr[-4000:], sep="\n", file=sys.stderr)  # fmt: skip
        else:
            raise SystemExit(f"could not write {target} with torchrun")
    for path in target.iterdir():
        with path.open("rb") as f:
            while f.read(1 << 24):
                pass
    return target, rows * COLUMNS * 4


def _fresh(path: Path) -> None:
    """Remove a previous output (a file, or a directory made again empty) and flush the disk."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    if path.suffix == "":
        path.mkdir()
    os.sync()


def measure(
    names: tuple[str, str], cmds: tuple[list[str], list[str]], runs: int, cleanup: tuple[Path, Path]
) -> list[tuple[float, int]]:
    """Median wall time and max peak RSS of two commands, run alternately (ckptctl, then its
    baseline, ``runs`` times), so both see the same load on a shared machine."""
    times: list[list[float]] = [[], []]
    rss: list[list[int]] = [[], []]
    for _ in range(runs):
        for i in (0, 1):
            _fresh(cleanup[i])
            timed = run(cmds[i])
            times[i].append(timed.seconds)
            rss[i].append(timed.max_rss_kib)
    out = []
    for i in (0, 1):
        out.append((statistics.median(times[i]), max(rss[i])))
        print(f"  {names[i]}: {out[i][0]:.2f} s, {out[i][1] / 1024:.0f} MiB "
              f"({' '.join(f'{t:.2f}' for t in times[i])})", file=sys.stderr)  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per command (median)")
    parser.add_argument("--size-mib", type=int, default=1024, help="size of the checkpoint")
    parser.add_argument("--quick", action="store_true", help="32 MiB, one run")
    parser.add_argument(
        "--cp-only",
        action="store_true",
        help="only the rows against cp (torch's baselines take minutes)",
    )
    parser.add_argument(
        "--jobs", type=int, help="ckptctl's -j (copy threads; default: ckptctl's, the cores)"
    )
    args = parser.parse_args()
    if args.quick:
        args.runs, args.size_mib = 1, 32
    directory, largest = make_input(args.size_mib)
    total = sum(p.stat().st_size for p in directory.iterdir())
    precompile()
    py = sys.executable
    st_out, pt_out, tmp_pt, copy_dir = (WORK / n for n in ("out.safetensors", "out.pt",
                                                           "torch_tmp.pt", "copy"))  # fmt: skip
    consolidate = (
        "import sys, torch; from torch.distributed.checkpoint.format_utils import "
        f"dcp_to_torch_save; dcp_to_torch_save({str(directory)!r}, {str(tmp_pt)!r})"
    )
    to_safetensors = (
        consolidate + "; import safetensors.torch as st; "
        f"st.save_file(torch.load({str(tmp_pt)!r}, weights_only=True), {str(st_out)!r})"
    )
    jobs = [] if args.jobs is None else ["-j", str(args.jobs)]
    ckptctl_st = [*CKPTCTL, "convert", str(directory), str(st_out), "--force", *jobs]
    rank_files = " ".join(map(str, sorted(directory.glob("*.distcp"))))
    torch_rows = (
        [
            (
                "convert → safetensors",
                *measure(
                    ("ckptctl", "dcp_to_torch_save + save_file"),
                    (ckptctl_st, [py, "-c", to_safetensors]),
                    args.runs,
                    (st_out, st_out),
                ),
                "dcp_to_torch_save, torch.load, save_file",
            ),
            (
                "convert → .pt",
                *measure(
                    ("ckptctl .pt", "dcp_to_torch_save"),
                    (
                        [*CKPTCTL, "convert", str(directory), str(pt_out), "--force", *jobs],
                        [py, "-c", consolidate],
                    ),
                    args.runs,
                    (pt_out, tmp_pt),
                ),
                "dcp_to_torch_save",
            ),
        ]
        if not args.cp_only
        else []
    )
    rows = [*torch_rows,
        ("convert → safetensors, `--no-fsync`",
         *measure(("ckptctl --no-fsync", "cp"),
                  ([*ckptctl_st, "--no-fsync"], ["sh", "-c", f"cp {rank_files} {copy_dir}"]),
                  args.runs, (st_out, copy_dir)),
         "`cp` of the rank files"),
        ("convert → safetensors (fsync)",
         *measure(("ckptctl", "cp && sync"),
                  (ckptctl_st, ["sh", "-c", f"cp {rank_files} {copy_dir} && sync"]),
                  args.runs, (st_out, copy_dir)),
         "`cp && sync` of the rank files"),
    ]  # fmt: skip
    for path in (st_out, pt_out, tmp_pt):
        path.unlink(missing_ok=True)
    shutil.rmtree(copy_dir, ignore_errors=True)
    bound = 64 + largest / 2**20
    print(f"ckptctl {' '.join(jobs) or 'default -j'}: "
          f"{total / 2**20:.0f} MiB in 2 rank files, largest tensor {largest / 2**20:.0f} MiB "
          f"(bound {bound:.0f} MiB); median of {args.runs} runs, whole process; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")  # fmt: skip
    print("| case | ckptctl | baseline | speed | ckptctl RSS | baseline RSS | baseline |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for case, (t1, r1), (t2, r2), what in rows:
        print(f"| {case} | {t1:.2f} s | {t2:.2f} s | {t2 / t1:.2f}x | {r1 / 1024:.0f} MiB "
              f"| {r2 / 1024:.0f} MiB | {what} |")  # fmt: skip


if __name__ == "__main__":
    main()

"""Consolidating a torch.distributed.checkpoint directory: ckptctl against torch (issue 26).

Usage (a Python with torch, safetensors and ckptctl installed; not run in CI)::

    python benchmarks/bench_dcp.py                 # 1 GiB over 2 ranks, 3 runs each
    python benchmarks/bench_dcp.py --size-mib 2048 --runs 5
    python benchmarks/bench_dcp.py --quick         # 32 MiB, 1 run: a smoke test

The input is written by ``torchrun --nproc_per_node=2`` with gloo: F32 DTensors of 4096 columns
(64 MiB each at 1 GiB), half ``Shard(0)`` (rows: streamed a range at a time), half ``Shard(1)``
(columns: gathered into one tensor-sized buffer). Cases, each a whole child process:

* ``convert DIR out.safetensors`` against ``dcp_to_torch_save`` then ``torch.load`` and
  ``safetensors.torch.save_file`` (torch's own way to a safetensors file);
* ``convert DIR out.pt`` against ``dcp_to_torch_save`` alone;
* ``convert --no-fsync`` against ``cp`` of the rank files (the same bytes, no fsync either).

Wall time is the median of ``--runs`` runs; peak RSS is the child's ``ru_maxrss`` (through GNU
time, as in bench.py). The input is read once before timing, so every command sees a warm page
cache. The bound to meet: peak RSS <= 64 MiB + the largest tensor.
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
        subprocess.run(
            [str(torchrun), "--standalone", "--nproc_per_node=2", str(script), str(target),
             str(count), str(rows), str(COLUMNS)],
            check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    for path in target.iterdir():
        with path.open("rb") as f:
            while f.read(1 << 24):
                pass
    return target, rows * COLUMNS * 4


def measure(name: str, cmd: list[str], runs: int, cleanup: Path) -> tuple[float, int]:
    times, rss = [], []
    for _ in range(runs):
        if cleanup.is_dir():
            shutil.rmtree(cleanup)
        elif cleanup.exists():
            cleanup.unlink()
        if cleanup.suffix == "":
            cleanup.mkdir()
        os.sync()
        timed = run(cmd)
        times.append(timed.seconds)
        rss.append(timed.max_rss_kib)
    print(f"  {name}: {statistics.median(times):.2f} s, {max(rss) / 1024:.0f} MiB", file=sys.stderr)
    return statistics.median(times), max(rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per command (median)")
    parser.add_argument("--size-mib", type=int, default=1024, help="size of the checkpoint")
    parser.add_argument("--quick", action="store_true", help="32 MiB, one run")
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
    rows = [
        (
            "convert → safetensors",
            measure("ckptctl", [*CKPTCTL, "convert", str(directory), str(st_out), "--force"],
                    args.runs, st_out),
            measure("dcp_to_torch_save + save_file", [py, "-c", to_safetensors], args.runs,
                    st_out),
            "dcp_to_torch_save, torch.load, save_file",
        ),
        (
            "convert → .pt",
            measure("ckptctl .pt", [*CKPTCTL, "convert", str(directory), str(pt_out), "--force"],
                    args.runs, pt_out),
            measure("dcp_to_torch_save", [py, "-c", consolidate], args.runs, tmp_pt),
            "dcp_to_torch_save",
        ),
        (
            "convert → safetensors, --no-fsync",
            measure("ckptctl --no-fsync", [*CKPTCTL, "convert", str(directory), str(st_out),
                                           "--force", "--no-fsync"], args.runs, st_out),
            measure("cp", ["cp", *map(str, sorted(directory.glob("*.distcp"))), str(copy_dir)],
                    args.runs, copy_dir),
            "cp of the rank files",
        ),
    ]  # fmt: skip
    for path in (st_out, pt_out, tmp_pt):
        path.unlink(missing_ok=True)
    shutil.rmtree(copy_dir, ignore_errors=True)
    bound = 64 + largest / 2**20
    print(f"{total / 2**20:.0f} MiB in 2 rank files, largest tensor {largest / 2**20:.0f} MiB "
          f"(bound {bound:.0f} MiB); median of {args.runs} runs, whole process\n")  # fmt: skip
    print("| case | ckptctl | baseline | speed | ckptctl RSS | baseline RSS | baseline |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for case, (t1, r1), (t2, r2), what in rows:
        print(f"| {case} | {t1:.2f} s | {t2:.2f} s | {t2 / t1:.2f}x | {r1 / 1024:.0f} MiB "
              f"| {r2 / 1024:.0f} MiB | {what} |")  # fmt: skip


if __name__ == "__main__":
    main()

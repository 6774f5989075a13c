"""Consolidating a DeepSpeed ZeRO save: ckptctl against deepspeed's zero_to_fp32 (issue #26).

Not run in CI. Needs a Python with torch and deepspeed to write the input and run the baseline
(``--deepspeed-python``), and one with ckptctl for ckptctl's side (this script's own Python)::

    python benchmarks/bench_deepspeed.py --deepspeed-python /tmp/dsvenv/bin/python
    python benchmarks/bench_deepspeed.py --deepspeed-python ... --layers 2 --quick   # smoke

The input is a real ``engine.save_checkpoint`` of ZeRO stage 2 on 2 ranks (CPU, gloo, fp32,
client AdamW): ``--layers`` Linear(2048, 2048) layers (16 MiB of fp32 each), so 16 layers make
256 MiB of master weights and a 1 GiB save (model states + per-rank fp32 partitions, exp_avg
and exp_avg_sq). It is written once into ``benchmarks/_work/``.

Cases, each a whole child process, median of ``--runs`` runs, peak RSS from GNU time:

* ``zero_to_fp32``: ``convert_zero_checkpoint_to_fp32_state_dict(..., max_shard_size=None)``
  (``pytorch_model.bin`` through ``torch.save``);
* ``ckptctl convert DIR out.pt`` and ``DIR out.safetensors``;
* ``cp && sync`` of the consolidated output (the same bytes written), the speed floor.

The commands run in turn, round after round, so each sees the same load on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from bench import precompile, run

WORK = Path(__file__).resolve().parent / "_work"

_MAKE = """
import os, sys, torch, deepspeed
from torch import nn
layers, out = int(sys.argv[1]), sys.argv[2]
deepspeed.init_distributed(dist_backend="gloo")
torch.manual_seed(0)
net = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(layers)])
config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2},
          "zero_allow_untested_optimizer": True, "steps_per_print": 1000}
optim = torch.optim.AdamW(net.parameters(), lr=1e-4)
engine, _, _, _ = deepspeed.initialize(model=net, optimizer=optim, config=config)
loss = engine(torch.randn(1, 2048)).pow(2).mean()
engine.backward(loss)
engine.step()
engine.save_checkpoint(out)
"""

_BASELINE = """
import sys
from deepspeed.utils.zero_to_fp32 import convert_zero_checkpoint_to_fp32_state_dict
convert_zero_checkpoint_to_fp32_state_dict(sys.argv[1], sys.argv[2], max_shard_size=None)
"""


def make_input(python: str, layers: int) -> Path:
    """Write (if missing) the ZeRO-2 save on 2 ranks with deepspeed."""
    folder = WORK / f"zero2_{layers}x2048"
    if not (folder / "latest").exists():
        WORK.mkdir(exist_ok=True)
        script = WORK / "make_zero.py"
        script.write_text(_MAKE)
        env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
        subprocess.run(
            [python, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port",
             "29650", str(script), str(layers), str(folder)],
            check=True, env=env, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    for path in folder.rglob("*.pt"):  # warm page cache for every command alike
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    return folder


def measure(cmds: dict[str, list[str]], runs: int, clean: Path) -> dict[str, tuple[float, float]]:
    """Median wall time and max peak RSS (MiB) of each command, all run in turn, ``runs``
    rounds (so every command sees the same load on a shared machine)."""
    times: dict[str, list[float]] = {name: [] for name in cmds}
    rss: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, cmd in cmds.items():
            shutil.rmtree(clean, ignore_errors=True)
            clean.mkdir(parents=True)
            os.sync()
            timed = run(cmd)
            times[name].append(timed.seconds)
            rss[name].append(timed.max_rss_kib / 1024)
    out = {}
    for name in cmds:
        out[name] = (statistics.median(times[name]), max(rss[name]))
        print(f"  {name}: {out[name][0]:.2f} s, {out[name][1]:.0f} MiB "
              f"({' '.join(f'{t:.2f}' for t in times[name])})", file=sys.stderr)  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deepspeed-python", default=sys.executable)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one run each")
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="leave out zero_to_fp32 (half a minute a run at 64 layers)",
    )
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs
    precompile()
    folder = make_input(args.deepspeed_python, args.layers)
    size = sum(p.stat().st_size for p in folder.rglob("*.pt"))
    out = WORK / "ds_out"
    ckptctl = [sys.executable, "-m", "ckptctl", "convert", str(folder)]
    keep = WORK / "ds_cp_source.safetensors"
    subprocess.run([*ckptctl, str(keep), "--force"], check=True, stdout=subprocess.DEVNULL)
    cmds = {
        "deepspeed zero_to_fp32 → .bin": [args.deepspeed_python, "-c", _BASELINE, str(folder),
                                          str(out)],
        "ckptctl convert → .pt": [*ckptctl, str(out / "model.pt")],
        "ckptctl convert → .safetensors": [*ckptctl, str(out / "model.safetensors")],
        "cp && sync of the output": ["sh", "-c", f"cp {keep} {out}/copy && sync"],
        "ckptctl convert → .safetensors --no-fsync": [*ckptctl, str(out / "model.safetensors"),
                                                      "--no-fsync"],
        "cp of the output": ["cp", str(keep), f"{out}/copy"],
    }  # fmt: skip
    if args.no_baseline:
        del cmds["deepspeed zero_to_fp32 → .bin"]
    results = measure(cmds, runs, out)
    rows = [(name, *results[name]) for name in cmds]
    base = results.get("deepspeed zero_to_fp32 → .bin", (float("nan"), 0.0))
    cp = results["cp && sync of the output"]
    print(f"\ninput: {size / (1 << 20):.0f} MiB in {folder.name}; output "
          f"{keep.stat().st_size / (1 << 20):.0f} MiB; largest tensor 16 MiB; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")  # fmt: skip
    print("| case | wall | peak RSS | vs zero_to_fp32 | vs `cp && sync` (`cp` without fsync) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, seconds, mib in rows:
        floor = results["cp of the output"] if "fsync" in name or name == "cp of the output" else cp
        print(f"| {name} | {seconds:.2f} s | {mib:.0f} MiB | {base[0] / seconds:.2f}x | "
              f"{floor[0] / seconds:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()

"""ls --json of a .pt: an older ckptctl, this one and torch.load(mmap=True), interleaved (#47).

Usage (a Python with torch and this ckptctl installed)::

    git archive ae8e62c ckptctl | tar -x -C /tmp/before      # the ckptctl to compare with
    python benchmarks/bench_pt_walk.py benchmarks/_work/many_20000.pt /tmp/before 9

Each round runs the three commands one after the other, so all three see the same machine
load; wall and CPU seconds (user + system, from ``getrusage``) are medians over the rounds.

The warm-up run writes each ckptctl's bytecode caches (``__pycache__``), as ``pip install``
does and as torch's installed modules have them, even where ``PYTHONDONTWRITEBYTECODE`` is
set: without them every run compiles ckptctl's modules again (~0.09 s CPU). With
``--no-bytecode`` it writes none (delete the trees' ``__pycache__`` first to measure that).
"""

import os
import resource
import statistics
import subprocess
import sys
import time

NO_BYTECODE = "--no-bytecode" in sys.argv
ARGS = [a for a in sys.argv if a != "--no-bytecode"]
PT, BEFORE = ARGS[1], ARGS[2]
PY = sys.executable
LS = [PY, "-m", "ckptctl", "ls", "--json", PT]
TORCH = [PY, "-c", f"import torch; torch.load({PT!r}, mmap=True, weights_only=True)"]
CASES = {
    "ckptctl ls --json, before": (LS, {"PYTHONPATH": BEFORE}, BEFORE),
    "ckptctl ls --json, after": (LS, {}, "/"),
    "torch.load(mmap=True, weights_only=True)": (TORCH, {}, "/"),
}
runs = int(ARGS[3]) if len(ARGS) > 3 else 5
res = {k: ([], []) for k in CASES}
WARM = dict(os.environ)
if not NO_BYTECODE:
    WARM.pop("PYTHONDONTWRITEBYTECODE", None)
for cmd, env, cwd in CASES.values():  # warm-up (bytecode, page cache)
    subprocess.run(cmd, env={**WARM, **env}, cwd=cwd, stdout=subprocess.DEVNULL, check=True)
for _ in range(runs):  # interleaved: the same machine load for all three
    for name, (cmd, env, cwd) in CASES.items():
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(
            cmd, env={**os.environ, **env}, cwd=cwd, stdout=subprocess.DEVNULL, check=True
        )
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        res[name][0].append(wall)
        res[name][1].append(cpu)
print(
    f"median of {runs} runs (interleaved); load average {os.getloadavg()[0]:.1f}"
    f" on {os.cpu_count()} cores; bytecode caches {'not ' if NO_BYTECODE else ''}written"
)
print("| case | wall | CPU |")
print("| --- | ---: | ---: |")
for name, (w, c) in res.items():
    print(f"| {name} | {statistics.median(w):.2f} s | {statistics.median(c):.2f} s |")

"""Compare every command's ``--json`` output on every fixture between two revisions.

A refactoring that moves code (issue 29: the base layer, the registries) must leave behaviour
alone. This runs ``ls``, ``header`` and ``verify`` with ``--json`` on each checkpoint-like file
under ``fixtures/`` (and ``../shared/corpus`` when present) once with the working tree and once
with REV checked out in a temporary worktree, and reports every file whose exit code or output
differs (paths are the same in both runs, so outputs compare byte for byte).

    python benchmarks/json_parity.py 0909f1e            # against that commit
    python benchmarks/json_parity.py HEAD~1 --jobs 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".bpk", ".pkl", ".mpk", ".gz",
            ".json", ".npy", ".npz")  # fmt: skip
COMMANDS = (("ls", "--json"), ("header", "--json"), ("verify", "--json"))


def inputs() -> list[Path]:
    roots = [REPO / "fixtures", REPO.parent / "shared" / "corpus"]
    found = [p for root in roots if root.is_dir() for p in root.rglob("*") if p.is_file()]
    return sorted(p for p in found if p.name.endswith(SUFFIXES))


def run(tree: Path, args: list[str]) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "NO_COLOR": "1", "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-m", "ckptctl", *args], capture_output=True, text=True, env=env,
        cwd=tree, timeout=300, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the revision to compare the working tree with")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    opts = parser.parse_args()
    files = inputs()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(old), opts.rev],
                       cwd=REPO, check=True)  # fmt: skip
        try:
            jobs = [(cmd, path) for path in files for cmd in COMMANDS]

            def compare(job: tuple[tuple[str, str], Path]) -> str | None:
                (name, flag), path = job
                args = [name, str(path), flag]
                before, after = run(old, args), run(REPO, args)
                return None if before == after else f"{name} {path.relative_to(REPO.parent)}"

            with ThreadPoolExecutor(opts.jobs) as pool:
                differ = [d for d in pool.map(compare, jobs) if d]
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO,
                           check=False)  # fmt: skip
    print(f"{len(jobs)} runs ({len(files)} files x {len(COMMANDS)} commands): "
          f"{len(differ)} differ")  # fmt: skip
    for line in differ:
        print(f"  {line}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())

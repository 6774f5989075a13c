"""Mutation smoke run: thousands of mutated fixtures through ``ckptctl ls`` and ``convert``.

Every valid fixture is mutated (bit flips, overwritten integers, inserts, cuts, splices; see
``fuzz_readers.mutate``) and each mutant is run through the real CLI entry point,
``ckptctl.cli.main``, in-process (or as ``python -m ckptctl`` subprocesses with
``--subprocess``): ``ls FILE`` and ``convert FILE OUT`` with OUT cycling through ``.safetensors``,
``.bpk`` and ``.pt``. A run passes when every exit code is 0, 1, 3 or 4, stderr never holds a
traceback, every failure prints a ``ckptctl: error:`` line, and no input takes more than 5 s.
A summary table of exit codes per command is printed; the exit status is 1 on any finding.

Usage::

    .venv/bin/python fuzz/mutation_smoke.py [--mutants N] [--seed K] [--subprocess]

``N`` mutants per fixture (default 100: about 7,000 mutants, each run twice).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_readers import MAX_INPUT_BYTES, mutate  # noqa: E402

#: Exit codes a mutated input may produce (CLI contract): ok, check failed, input, unsupported.
ALLOWED = frozenset({0, 1, 3, 4})
OUTPUTS = (".safetensors", ".bpk", ".pt")
#: Slowest single command allowed.
MAX_SECONDS = 5.0


@dataclass
class Outcome:
    """One command on one mutant."""

    command: str
    code: int
    stderr: str
    seconds: float


@dataclass
class Summary:
    """Exit codes per command and the problems found."""

    codes: Counter[tuple[str, int]] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    runs: int = 0

    def table(self) -> str:
        """The summary table: one row per command, one column per exit code."""
        commands = sorted({c for c, _ in self.codes})
        codes = sorted({k for _, k in self.codes})
        head = f"{'command':<10}" + "".join(f"{'exit ' + str(k):>10}" for k in codes)
        rows = [head, "-" * len(head)]
        rows += [f"{c:<10}" + "".join(f"{self.codes[(c, k)]:>10}" for k in codes) for c in commands]
        rows.append(f"{self.runs} runs, {len(self.problems)} problems")
        return "\n".join(rows) + "\n"


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Timeout


def run_in_process(args: list[str]) -> tuple[int, str]:
    """``ckptctl ARGS`` through ``ckptctl.cli.main``; returns (exit code, stderr)."""
    from ckptctl.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        else:
            code = -1
    return code, err.getvalue()


def run_subprocess(args: list[str]) -> tuple[int, str]:
    """``python -m ckptctl ARGS`` as a real process."""
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    env.pop("CKPTCTL_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "ckptctl", *args],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    return proc.returncode, proc.stderr.decode("utf-8", "replace")


def check(outcome: Outcome, label: str, summary: Summary) -> None:
    """Record ``outcome`` and note a problem when it breaks the contract."""
    summary.runs += 1
    summary.codes[(outcome.command, outcome.code)] += 1
    why = []
    if outcome.code not in ALLOWED:
        why.append(f"exit {outcome.code}")
    if "Traceback" in outcome.stderr:
        why.append("traceback")
    if outcome.code != 0 and "ckptctl: error:" not in outcome.stderr and outcome.code != 1:
        why.append("failure without an error message")
    if outcome.seconds > MAX_SECONDS:
        why.append(f"took {outcome.seconds:.1f} s")
    if why:
        first = outcome.stderr.strip().splitlines()[:2]
        summary.problems.append(f"{label} {outcome.command}: {', '.join(why)}: {first}")


def fixtures() -> list[Path]:
    """Every valid single-file fixture, small enough to mutate quickly."""
    valid = ROOT / "fixtures" / "valid"
    paths = [
        p
        for p in sorted(valid.rglob("*"))
        if p.is_file()
        and p.suffix in (".safetensors", ".bpk", ".pt", ".ckpt")
        and p.stat().st_size <= MAX_INPUT_BYTES
        and "sharded" not in p.parts
        and "deepspeed" not in p.parts  # rank files of folder saves, like the shards above
    ]
    return paths


def smoke(mutants: int, seed: int, *, use_subprocess: bool = False) -> Summary:
    """Run ``mutants`` mutants of every fixture through ``ls`` and ``convert``."""
    run = run_subprocess if use_subprocess else run_in_process
    rng = random.Random(seed)
    pool = [p.read_bytes() for p in fixtures()]
    summary = Summary()
    work = Path(tempfile.mkdtemp(prefix="ckptctl-smoke-"))
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for index, data in enumerate(pool):
            for m in range(mutants):
                mutant = mutate(data, rng, pool)
                src = work / f"in{index}-{m}"
                src.write_bytes(mutant)
                dst = work / f"out{index}-{m}{OUTPUTS[m % len(OUTPUTS)]}"
                commands = (("ls", ["ls", str(src)]), ("convert", ["convert", str(src), str(dst)]))
                for command, args in commands:
                    start = time.monotonic()
                    signal.alarm(int(MAX_SECONDS * 4))
                    try:
                        code, stderr = run(args)
                    except _Timeout:
                        code, stderr = -9, "timed out"
                    finally:
                        signal.alarm(0)
                    outcome = Outcome(command, code, stderr, time.monotonic() - start)
                    check(outcome, f"{src.name} (seed {seed})", summary)
                src.unlink()
                if dst.exists():
                    dst.unlink()
    finally:
        signal.signal(signal.SIGALRM, previous)
        shutil.rmtree(work, ignore_errors=True)
    return summary


def main() -> None:
    """Command line: run the smoke test and print the summary table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", type=int, default=100, help="mutants per fixture")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--subprocess", action="store_true", help="run python -m ckptctl")
    args = parser.parse_args()
    summary = smoke(args.mutants, args.seed, use_subprocess=args.subprocess)
    sys.stdout.write(summary.table())
    for problem in summary.problems[:50]:
        sys.stdout.write(f"PROBLEM {problem}\n")
    sys.exit(1 if summary.problems else 0)


if __name__ == "__main__":
    main()

"""The floor of ``ckptctl ls --json`` of a ``.pt``: the parts no pure-Python design can drop.

Times, for one ``.pt`` written by torch.save (a zip whose ``data.pkl`` is the pickle):

* start-up: the whole ``ckptctl ls --json`` process for a 1-tensor ``.pt``;
* the bounds pass (``_walker.scan_pickle``): the C unpickler trusts memo indices (a
  ``LONG_BINPUT`` sizes the memo), declared lengths and nesting, so hostile bytes must be walked
  once in Python before it sees them; this pass is already one tight opcode loop;
* the safety walk (``_verdict.assess_pickle``): the allowlist verdict, judged before unpickling;
* the C unpickler alone, with callbacks that do nothing but return their arguments;
* ``json.dumps`` of the report ckptctl prints for the file.

No entries, no names, no checks: the sum is a lower bound for any design that keeps the bounds
pass and prints the same JSON. ``bench_pt.py --floor`` prints it next to torch (issue #15).

    python benchmarks/floor_pt.py MANY.pt SMALL.pt [--runs N]
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import pickle
import statistics
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from bench import child_env, timings

from ckptctl.formats.pytorch._verdict import assess_pickle
from ckptctl.formats.pytorch._walker import scan_pickle


def _data_pkl(path: Path) -> bytes:
    with zipfile.ZipFile(path) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))


class _Bare(pickle.Unpickler):
    """The C unpickler with callbacks that build nothing."""

    def find_class(self, module: str, name: str) -> object:
        if name == "OrderedDict":
            return collections.OrderedDict
        return lambda *args: args

    def persistent_load(self, pid: object) -> object:
        return pid


def _median(fn: Callable[[], object], runs: int) -> float:
    return statistics.median(timings(fn, runs))


def floor(many: Path, small: Path, runs: int) -> dict[str, float]:
    """Seconds per part (medians of ``runs``), and their sum as ``floor``."""
    data = _data_pkl(many)
    cmd = [sys.executable, "-m", "ckptctl", "ls", "--json"]
    report = json.loads(subprocess.run([*cmd, str(many)], check=True, capture_output=True).stdout)

    def start() -> None:
        subprocess.run([*cmd, str(small)], check=True, env=child_env(), capture_output=True)

    parts = {
        "start-up (ls --json of a 1-tensor .pt, whole process)": _median(start, runs),
        "bounds pass over data.pkl": _median(lambda: scan_pickle(data, 0, "data.pkl"), runs),
        "safety walk over data.pkl": _median(lambda: assess_pickle(data, "data.pkl"), runs),
        "C unpickler, callbacks that do nothing": _median(
            lambda: _Bare(io.BytesIO(data)).load(), runs
        ),
        "json.dumps of the report": _median(lambda: json.dumps(report), runs),
    }
    parts["floor (sum)"] = sum(parts.values())
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("many", type=Path)
    parser.add_argument("small", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for name, seconds in floor(args.many, args.small, args.runs).items():
        print(f"{name:<56} {seconds:.3f} s")


if __name__ == "__main__":
    main()

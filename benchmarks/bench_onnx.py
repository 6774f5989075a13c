"""Benchmark: an ONNX model with external data, ckptctl against onnx (issue #46).

Usage (from the repository root, with the dev extra installed: it has onnx and safetensors)::

    python benchmarks/bench_onnx.py                      # 40 tensors of 64 MiB (2.5 GiB), 3 runs
    python benchmarks/bench_onnx.py --tensors 4 --tensor-mib 1 --runs 1 --json   # a smoke test

The input is a model written into ``_work/onnx/``: a chain of ``MatMul`` nodes whose weights
are ``--tensors`` float32 initializers of ``--tensor-mib`` MiB each (random normal values), all
in one external data file ``model.onnx.data`` at 4096-aligned offsets, as
``onnx.save_model(save_as_external_data=True)`` lays them out. The data file is written tensor
by tensor and the ``TensorProto`` entries point into it (``data_location`` EXTERNAL with
``location``/``offset``/``length``), so making a 2.5 GiB model needs no 2.5 GiB of memory. It
is reused when one of the same size is there.

Cases, each a whole child process (interpreter start and imports included), the median of
``--runs`` runs:

* ``ls``: ``ckptctl ls model.onnx``.
* ``hash``: ``ckptctl hash model.onnx`` (reads every tensor byte) against ``onnx.load(path,
  load_external_data=True)`` then ``numpy_helper.to_array`` of every initializer (what reading
  the values costs with onnx).
* ``convert``: ``ckptctl convert model.onnx out.safetensors`` (and ``--no-fsync``) against the
  same onnx load followed by ``safetensors.numpy.save_file`` of the arrays (no fsync).

Peak RSS is the child's ``ru_maxrss`` through GNU time (``bench.run``). The data file is read
once before timing so every command sees a warm page cache. The target (issue #46): peak RSS at
most 64 MiB + the largest tensor.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from bench import CKPTCTL, WORK, precompile, run  # the same timing and peak-RSS set-up

ALIGN = 4096

_ONNX_READ = """
import sys
import onnx
from onnx import numpy_helper
model = onnx.load(sys.argv[1], load_external_data=True)
arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
if len(sys.argv) > 2:
    from safetensors.numpy import save_file
    save_file(arrays, sys.argv[2])
"""


def make_model(folder: Path, tensors: int, tensor_mib: int) -> Path:
    """Write (if missing) the model and its external data; returns the model's path."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    path = folder / "model.onnx"
    marker = folder / f"made.{tensors}x{tensor_mib}"
    if path.exists() and marker.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.iterdir():
        stale.unlink()
    side = max(1, int(((tensor_mib << 20) // 4) ** 0.5))
    rng = np.random.default_rng(46)
    initializers, nodes, offset = [], [], 0
    with open(folder / "model.onnx.data", "wb") as data:
        for i in range(tensors):
            array = rng.standard_normal((side, side), dtype=np.float32)
            data.write(array.tobytes())
            init = TensorProto(name=f"layers.{i}.weight", data_type=TensorProto.FLOAT)
            init.dims.extend(array.shape)
            init.data_location = TensorProto.EXTERNAL
            for key, value in (("location", "model.onnx.data"), ("offset", str(offset)),
                               ("length", str(array.nbytes))):  # fmt: skip
                entry = init.external_data.add()
                entry.key, entry.value = key, value
            offset += array.nbytes
            pad = -offset % ALIGN
            data.write(b"\0" * pad)
            offset += pad
            initializers.append(init)
            x = "x" if i == 0 else f"h{i}"
            nodes.append(helper.make_node("MatMul", [x, init.name], [f"h{i + 1}"]))
    shape = [1, side]
    graph = helper.make_graph(
        nodes, "bench", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(f"h{tensors}", TensorProto.FLOAT, shape)],
        initializer=initializers,
    )  # fmt: skip
    model = helper.make_model(graph, producer_name="ckptctl-bench")
    path.write_bytes(model.SerializeToString())
    onnx.checker.check_model(str(path))  # external data files checked from the model's folder
    marker.write_text("")
    return path


def warm(folder: Path) -> None:
    for name in ("model.onnx", "model.onnx.data"):
        with open(folder / name, "rb") as f:
            while f.read(1 << 24):
                pass


def measure(cmd: list[str], runs: int, out: Path | None = None) -> dict[str, float]:
    times, cpu, rss = [], [], []
    for _ in range(runs):
        if out is not None and out.exists():
            out.unlink()
        os.sync()  # no dirty pages of the run before (bench.py does the same)
        timed = run(cmd)
        times.append(timed.seconds)
        cpu.append(timed.cpu_seconds)
        rss.append(timed.max_rss_kib)
    if out is not None and out.exists():
        out.unlink()
    return {
        "wall_s": statistics.median(times),
        "cpu_s": statistics.median(cpu),
        "peak_rss_MiB": max(rss) / 1024,
    }


def check_equal(path: Path, out: Path) -> None:
    """ckptctl's output holds onnx's values, bit for bit (checked once, before timing)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from safetensors import safe_open

    run([*CKPTCTL, "convert", str(path), str(out), "--force", "--no-fsync"])
    model = onnx.load(str(path), load_external_data=False)
    with safe_open(str(out), "numpy") as ours:  # one tensor at a time
        if sorted(ours.keys()) != sorted(t.name for t in model.graph.initializer):
            raise SystemExit("ckptctl and onnx list different tensors")
        for init in model.graph.initializer:
            expected = numpy_helper.to_array(init, str(path.parent))
            if not np.array_equal(ours.get_tensor(init.name), expected):
                raise SystemExit(f"{init.name}: ckptctl and onnx read different values")
    out.unlink()


def bench(args: argparse.Namespace) -> dict[str, Any]:
    folder = WORK / "onnx"
    path = make_model(folder, args.tensors, args.tensor_mib)
    out = WORK / "onnx_out.safetensors"
    precompile()
    check_equal(path, out)
    warm(folder)
    model, runs, py = str(path), args.runs, sys.executable
    rows: dict[str, dict[str, float]] = {
        "ckptctl ls": measure([*CKPTCTL, "ls", model], runs),
        "ckptctl hash": measure([*CKPTCTL, "hash", model], runs),
        "onnx.load + to_array": measure([py, "-c", _ONNX_READ, model], runs),
        "ckptctl convert": measure([*CKPTCTL, "convert", model, str(out)], runs, out),
        "ckptctl convert --no-fsync": measure(
            [*CKPTCTL, "convert", model, str(out), "--no-fsync"], runs, out
        ),
        "onnx.load + to_array + save_file": measure(
            [py, "-c", _ONNX_READ, model, str(out)], runs, out
        ),
    }
    side = max(1, int(((args.tensor_mib << 20) // 4) ** 0.5))
    largest = side * side * 4 / 2**20
    return {
        "tensors": args.tensors,
        "largest_tensor_MiB": largest,
        "data_bytes": (folder / "model.onnx.data").stat().st_size,
        "model_bytes": path.stat().st_size,
        "runs": runs,
        "rows": rows,
        "target_peak_rss_MiB": 64 + largest,
    }


def print_table(report: dict[str, Any]) -> None:
    print(
        f"{report['tensors']} tensors, {report['data_bytes'] / 2**30:.2f} GiB of external data, "
        f"model.onnx {report['model_bytes']:,} bytes; median of {report['runs']} runs; target "
        f"peak RSS <= {report['target_peak_rss_MiB']:.0f} MiB\n"
    )
    print("| command | wall s | CPU s | peak RSS |")
    print("| --- | ---: | ---: | ---: |")
    for name, row in report["rows"].items():
        print(
            f"| {name} | {row['wall_s']:.2f} | {row['cpu_s']:.2f} | {row['peak_rss_MiB']:.0f} MiB |"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensors", type=int, default=40, help="initializers in the model")
    parser.add_argument("--tensor-mib", type=int, default=64, help="size of each (MiB)")
    parser.add_argument("--runs", type=int, default=3, help="runs per command (median)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    report = bench(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)


if __name__ == "__main__":
    main()

"""Benchmark: dequantizing GGUF tensors, ckptctl's numpy kernels against gguf-py (issue 45).

Usage (from the repository root, with the dev extra installed: it has gguf)::

    python benchmarks/bench_gguf.py                       # 1 GiB of input, 3 runs
    python benchmarks/bench_gguf.py --size-mib 24 --runs 1  # a smoke test
    python benchmarks/bench_gguf.py --listing             # ls against GGUFReader, 1 GiB model

``--listing`` times listing instead: a llama-shaped file (``--size-mib`` of F16 tensor data in
291 tensors: 32 blocks of 9, the embeddings, the output norm and head) with a 32,000-token
tokenizer (``tokenizer.ggml.tokens``, ``scores``, ``token_type`` arrays, 61,000 merges) and a
chat template, as a 7B llama GGUF has. Each child times one call after its imports: ckptctl's
``ls`` (``cli.main``, text to ``/dev/null``), ``ls --json``, and gguf-py's ``GGUFReader(path)``
construction (which parses every key/value and builds a numpy view per tensor).

The input is a real ``.gguf`` file written by gguf-py's ``GGUFWriter`` into ``_work/``:
``--size-mib`` MiB of *input* (quantized bytes), a third each of Q4_K, Q6_K and Q8_0, as
4096 x 4096 tensors (64 MiB of float32 each once decoded; 1 GiB of input decodes to about
5.4 GiB). The blocks are random bytes with sane scales: every f16 scale is set to a normal
number in [1e-4, 1e-2), so no NaN or infinity takes a shortcut through the arithmetic.

Every figure comes from a child process that decodes every tensor of one type, timed inside
the child around the decoding loop alone (imports and the file's parse excluded): the median of
``--runs`` children of its wall time and of its CPU time (``process_time``: what it costs on
one core however busy the shared machine is). ckptctl's and gguf-py's children alternate.
``gguf.quants.dequantize`` gets each tensor as gguf-py's own reader gives it (a ``(rows, row
bytes)`` view of the memory map); ckptctl's ``dequantize`` the same view. Peak memory is the
child's ``VmHWM`` (its own high-water mark: a new process after ``exec`` starts from zero).
The streamed pass (``dequantize_blocks``, 8 MiB pieces) reads the file with ``preadv`` and
never holds a whole tensor. Before timing, the first tensor of each type is checked to be
equal bit for bit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WORK = Path(__file__).resolve().parent / "_work"
TYPES = ("Q4_K", "Q6_K", "Q8_0")
#: Byte offsets of each type's f16 scales in its block (ggml-common.h: block_q4_K d, dmin;
#: block_q6_K d; block_q8_0 d).
HALF_AT = {"Q4_K": (0, 2), "Q6_K": (208,), "Q8_0": (0,)}
COLS = 4096


def make_input(path: Path, size_mib: int, rows: int) -> None:
    """Write the benchmark's ``.gguf`` (reused when one of the same size is there)."""
    import numpy as np
    from gguf import GGUFWriter
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    marker = path.with_suffix(f".{size_mib}x{rows}")
    if path.exists() and marker.exists():
        return
    rng = np.random.default_rng(45)
    writer = GGUFWriter(path, arch="bench")
    budget = (size_mib << 20) // len(TYPES)
    for name in TYPES:
        qtype = GGMLQuantizationType[name]
        block, size = GGML_QUANT_SIZES[qtype]
        row_bytes = COLS // block * size
        count = max(1, budget // (rows * row_bytes))
        for i in range(count):
            raw = rng.integers(0, 256, size=(rows * COLS // block, size), dtype=np.uint8)
            for offset in HALF_AT[name]:
                scales = rng.uniform(1e-4, 1e-2, len(raw)).astype(np.float16)
                raw[:, offset : offset + 2] = scales.view(np.uint8).reshape(-1, 2)
            writer.add_tensor(f"{name.lower()}.{i}", raw.reshape(rows, row_bytes), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    marker.write_text("")


#: The listing file's llama shape: blocks, and (name, rows, columns) per block.
BLOCKS, VOCAB, MERGES = 32, 32000, 61000
PER_BLOCK = (
    ("attn_norm", 1, 1), ("attn_q", 4, 4), ("attn_k", 4, 4), ("attn_v", 4, 4),
    ("attn_output", 4, 4), ("ffn_norm", 1, 1), ("ffn_gate", 11, 4), ("ffn_up", 11, 4),
    ("ffn_down", 4, 11),
)  # fmt: skip


def make_listing_input(path: Path, size_mib: int) -> None:
    """Write the listing benchmark's llama-shaped ``.gguf`` (reused when already there)."""
    import numpy as np
    from gguf import GGUFWriter

    marker = path.with_suffix(f".{size_mib}")
    if path.exists() and marker.exists():
        return
    area = BLOCKS * sum(r * c for _, r, c in PER_BLOCK if r > 1) + 2 * 8 * 4
    side = max(1, int(((size_mib << 20) / 2 / area) ** 0.5))  # F16: 2 bytes a value
    writer = GGUFWriter(path, arch="llama")
    writer.add_block_count(BLOCKS)
    writer.add_head_count(32)
    writer.add_head_count_kv(8)
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"tok{i}" for i in range(VOCAB)])
    writer.add_token_scores([float(-i) for i in range(VOCAB)])
    writer.add_token_types([1] * VOCAB)
    writer.add_token_merges([f"t{i} k{i}" for i in range(MERGES)])
    writer.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")

    def zeros(rows: int, cols: int) -> np.ndarray:
        shape = (side * rows, side * cols) if rows > 1 else (side * 4,)
        return np.zeros(shape, dtype=np.float16)

    writer.add_tensor("token_embd.weight", zeros(8, 4))
    for b in range(BLOCKS):
        for name, rows, cols in PER_BLOCK:
            writer.add_tensor(f"blk.{b}.{name}.weight", zeros(rows, cols))
    writer.add_tensor("output_norm.weight", zeros(1, 1))
    writer.add_tensor("output.weight", zeros(8, 4))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    marker.write_text("")


def list_child(mode: str, path: Path) -> dict[str, float]:
    """List ``path`` one way; time the call alone (imports done first)."""
    import contextlib
    import os

    from gguf import GGUFReader

    from ckptctl.cli import main

    devnull = open(os.devnull, "w")  # noqa: SIM115  # open for the whole child
    start, cpu = time.perf_counter(), time.process_time()
    if mode == "reader":
        tensors = len(GGUFReader(path).tensors)
    else:
        args = ["ls", str(path), *(["--json"] if mode == "ls-json" else [])]
        with contextlib.redirect_stdout(devnull), contextlib.suppress(SystemExit):
            main(args)
        tensors = 0
    return {
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu,
        "tensors": tensors,
        "peak_rss_MiB": _hwm_kib() / 1024,
    }


def listing(size_mib: int, runs: int) -> dict[str, Any]:
    """The listing rows: each mode's median over ``runs`` children (modes alternate)."""
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / "listing.gguf"
    for stale in WORK.glob("listing.*"):
        if stale.suffix not in (".gguf", f".{size_mib}"):
            stale.unlink()
    make_listing_input(path, size_mib)
    modes = ("ls", "ls-json", "reader")
    got: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for _ in range(runs):
        for mode in modes:
            cmd = [sys.executable, __file__, "--list-child", mode, str(path)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            got[mode].append(json.loads(out.stdout))
    rows = [
        {
            "case": mode,
            "wall_s": statistics.median(r["wall_s"] for r in got[mode]),
            "cpu_s": statistics.median(r["cpu_s"] for r in got[mode]),
            "peak_rss_MiB": max(r["peak_rss_MiB"] for r in got[mode]),
        }
        for mode in modes
    ]
    return {"input_bytes": path.stat().st_size, "tensors": got["reader"][0]["tensors"],
            "rows": rows}  # fmt: skip


def _hwm_kib() -> int:
    """This process's peak resident memory (``VmHWM``), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def child(mode: str, type_name: str, path: Path) -> dict[str, float]:
    """Decode every tensor of ``type_name`` in ``path`` one way; time the loop alone."""
    import numpy as np
    from gguf import GGUFReader
    from gguf import quants as gguf_quants

    from ckptctl.formats.gguf._ggml import GGML_TYPES_BY_NAME
    from ckptctl.formats.gguf._quants import dequantize, dequantize_blocks
    from ckptctl.sources import ByteSource

    reader = GGUFReader(path)
    tensors = [t for t in reader.tensors if type_name in ("all", t.tensor_type.name)]
    values = 0
    source = ByteSource(path)
    start, cpu = time.perf_counter(), time.process_time()
    for tensor in tensors:
        count = int(tensor.n_elements)
        ggml_type = GGML_TYPES_BY_NAME[tensor.tensor_type.name]
        if mode == "gguf":  # each result is dropped at once: one tensor alive at a time
            with np.errstate(all="ignore"):
                values += gguf_quants.dequantize(tensor.data, tensor.tensor_type).size
        elif mode == "ours":
            values += dequantize(tensor.data, ggml_type, count).size
        else:  # stream: the file read in pieces, never a whole tensor
            for piece in dequantize_blocks(source, int(tensor.data_offset), ggml_type, count):
                values += piece.size
    return {
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu,
        "values": values,
        "peak_rss_MiB": _hwm_kib() / 1024,
    }


def run_child(mode: str, type_name: str, path: Path) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", mode, "--type", type_name, str(path)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout)
    return result


def check_equal(path: Path) -> None:
    """The first tensor of each type decodes to the same bits both ways."""
    import numpy as np
    from gguf import GGUFReader
    from gguf import quants as gguf_quants

    from ckptctl.formats.gguf._ggml import GGML_TYPES_BY_NAME
    from ckptctl.formats.gguf._quants import dequantize

    seen = set()
    for tensor in GGUFReader(path).tensors:
        name = tensor.tensor_type.name
        if name in seen:
            continue
        seen.add(name)
        ours = dequantize(tensor.data, GGML_TYPES_BY_NAME[name], int(tensor.n_elements))
        theirs = gguf_quants.dequantize(tensor.data, tensor.tensor_type).reshape(-1)
        if not np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)):
            raise SystemExit(f"{name}: ckptctl and gguf-py decode different bits")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="input bytes (MiB)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=4096, help="rows of 4096 values a tensor")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--listing", action="store_true", help="time ls against GGUFReader")
    parser.add_argument("--child", choices=("ours", "gguf", "stream"), help=argparse.SUPPRESS)
    parser.add_argument("--list-child", choices=("ls", "ls-json", "reader"), help=argparse.SUPPRESS)
    parser.add_argument("--type", default="all", help=argparse.SUPPRESS)
    parser.add_argument("path", nargs="?", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.type, args.path)))
        return
    if args.list_child:
        print(json.dumps(list_child(args.list_child, args.path)))
        return
    if args.listing:
        report = listing(args.size_mib, args.runs)
        if args.json:
            print(json.dumps(report, indent=2))
            return
        print(f"input: {report['input_bytes'] / 2**20:.0f} MiB, {report['tensors']} tensors")
        for r in report["rows"]:
            print(f"| {r['case']} | {r['wall_s']:.3f} s | {r['cpu_s']:.3f} s "
                  f"| {r['peak_rss_MiB']:.0f} MiB |")  # fmt: skip
        return
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / "bench.gguf"
    for stale in WORK.glob("bench.*"):
        if stale.suffix not in (".gguf", f".{args.size_mib}x{args.rows}"):
            stale.unlink()
    make_input(path, args.size_mib, args.rows)
    check_equal(path)
    results = []
    for name in TYPES:
        runs: dict[str, list[dict[str, float]]] = {"gguf": [], "ours": []}
        for _ in range(args.runs):
            for mode in ("gguf", "ours"):
                runs[mode].append(run_child(mode, name, path))
        row: dict[str, object] = {"type": name, "values": runs["ours"][0]["values"]}
        for mode, got in runs.items():
            row[f"{mode}_wall_s"] = statistics.median(r["wall_s"] for r in got)
            row[f"{mode}_cpu_s"] = statistics.median(r["cpu_s"] for r in got)
            row[f"{mode}_peak_rss_MiB"] = max(r["peak_rss_MiB"] for r in got)
        results.append(row)
    stream = run_child("stream", "all", path)
    report: dict[str, Any] = {
        "input_bytes": path.stat().st_size,
        "types": results,
        "stream": stream,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print_table(report)


def print_table(report: dict[str, Any]) -> None:
    print(f"input: {report['input_bytes'] / 2**20:.0f} MiB")
    print(
        "| type | gguf-py CPU s | ckptctl CPU s | CPU ratio | gguf-py wall s | ckptctl wall s "
        "| wall ratio | ckptctl MiB/s out | peak RSS gguf-py / ckptctl |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in report["types"]:
        out_mib = r["values"] * 4 / 2**20
        print(
            f"| {r['type']} | {r['gguf_cpu_s']:.2f} | {r['ours_cpu_s']:.2f} "
            f"| {r['gguf_cpu_s'] / r['ours_cpu_s']:.2f}x | {r['gguf_wall_s']:.2f} "
            f"| {r['ours_wall_s']:.2f} | {r['gguf_wall_s'] / r['ours_wall_s']:.2f}x "
            f"| {out_mib / r['ours_wall_s']:.0f} "
            f"| {r['gguf_peak_rss_MiB']:.0f} / {r['ours_peak_rss_MiB']:.0f} MiB |"
        )
    s = report["stream"]
    print(
        f"streamed pass over every tensor (dequantize_blocks): {s['wall_s']:.2f} s wall, "
        f"{s['cpu_s']:.2f} s CPU, peak RSS {s['peak_rss_MiB']:.0f} MiB"
    )


if __name__ == "__main__":
    main()

"""ckptctl benchmarks: throughput and peak memory against baselines, side by side.

Usage (from the repository root, with ckptctl installed)::

    python benchmarks/bench.py                 # all cases, 1 GiB inputs, 5 runs each
    python benchmarks/bench.py --size-mib 2048 --runs 7 --case convert-st-bpk
    python benchmarks/bench.py --quick         # tiny inputs, 1 run: a smoke test

Inputs are generated into ``benchmarks/_work/`` (seeded, reproducible) and reused. Each case runs
a command as a child process; wall time is the median of ``--runs`` runs, peak RSS is the child's
``ru_maxrss`` from ``os.wait4`` (the OS's accounting, not tracemalloc), CPU time its user +
system seconds. The page cache is warm for every command alike (the input is read before each
run), or cold for both in the ``*-cold`` cases (the input evicted before each run).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from floor_copy import copy_pieces  # the floor's copy loop, the same two ways

WORK = Path(__file__).resolve().parent / "_work"
CKPTCTL = [sys.executable, "-m", "ckptctl"]


@dataclass(frozen=True)
class Run:
    """One timed child process."""

    seconds: float
    max_rss_kib: int
    #: user + system CPU seconds of the command (and its children): what it costs on one core
    #: however busy the shared VM is, unlike its wall time
    cpu_seconds: float = 0.0


GNU_TIME = "/usr/bin/time"


def child_env() -> dict[str, str]:
    """The children's environment: Python with its bytecode cache, as an installed package runs.

    With ``PYTHONDONTWRITEBYTECODE`` set (as in some CI and sandbox shells) every run would
    compile ckptctl's ~100 modules from source: 50-60 ms that no installed copy pays. The cache
    goes to ``_work/pycache`` so the source tree stays clean; :func:`precompile` fills it.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(WORK / "pycache")
    return env


def precompile(older: Path | None = None) -> None:
    """Compile ckptctl (and what it imports; ``older``'s ckptctl too) into the benchmark's
    bytecode cache once."""
    WORK.mkdir(parents=True, exist_ok=True)
    code = "import ckptctl.cli, ckptctl.ops.convert, ckptctl.ops.diff, ckptctl.ops.verify"
    subprocess.run([sys.executable, "-c", code], env=child_env(), check=True)
    spec = importlib.util.find_spec("ckptctl")
    packages = [str(older / "ckptctl")] if older else []
    if spec is not None and spec.origin is not None:
        packages.append(str(Path(spec.origin).parent))
    for package in packages:
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", package],
            env=child_env(),
            check=True,
            stdout=subprocess.DEVNULL,
        )


def run(cmd: list[str], cwd: Path | None = None) -> Run:
    """Run ``cmd`` and return its wall time and peak RSS; raise if it fails.

    Peak RSS is the kernel's ``ru_maxrss`` of the child. It is read through GNU time where
    present: a child forked from this (large) Python process would otherwise inherit this
    process's RSS as its high-water mark before it execs.
    """
    timed = os.path.exists(GNU_TIME)
    full = [GNU_TIME, "-f", "@@%M", *cmd] if timed else cmd
    start = time.perf_counter()
    proc = subprocess.Popen(
        full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=child_env(), cwd=cwd
    )
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {code}: {stderr.strip()}")
    max_rss = int(usage.ru_maxrss)
    if timed:
        max_rss = int(stderr.rsplit("@@", 1)[1].split()[0])
    return Run(elapsed, max_rss, usage.ru_utime + usage.ru_stime)


def write_safetensors(path: Path, size_mib: int, *, seed: int = 0, dtype: str = "F32") -> int:
    """A safetensors file of about ``size_mib`` MiB of ``dtype`` (F32 or F16) tensors; returns
    the largest tensor."""
    rng = np.random.default_rng(seed)
    itemsize = {"F32": 4, "F16": 2}[dtype]
    # A realistic mix: a few big matrices, many small vectors.
    shapes: list[tuple[int, ...]] = []
    remaining = size_mib * (1 << 20) // itemsize
    big = max(1, min(remaining // 8, 4096 * 4096))
    while remaining > 0:
        n = min(big, remaining)
        rows = max(1, n // 1024)
        shapes.append((rows, n // rows))
        shapes.append((min(1024, n // rows),))
        remaining -= rows * (n // rows) + min(1024, n // rows)
    header: dict[str, object] = {}
    offset = 0
    for i, shape in enumerate(shapes):
        nbytes = int(np.prod(shape)) * itemsize
        header[f"layers.{i // 2}.{'weight' if len(shape) == 2 else 'bias'}"] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-(8 + len(blob)) % 8)
    largest = 0
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(blob)) + blob)
        for shape in shapes:
            array = rng.standard_normal(shape, dtype=np.float32).astype(f"<f{itemsize}")
            largest = max(largest, array.nbytes)
            out.write(array.tobytes())
    return largest


#: Tensors per block of the 20,000-tensor listing input (``ls --tree`` against ``ls``).
_BLOCK_TENSORS = ("q", "k", "v", "o", "gate", "up", "down", "ln1", "ln2", "ln3")


def write_many(path: Path, count: int = 20_000) -> None:
    """A safetensors file of ``count`` small F32 tensors named like a transformer's layers
    (``model.layers.N.q.weight`` ...): a header-bound listing, as for a 70B model's index."""
    per_block = 2 * len(_BLOCK_TENSORS)
    header: dict[str, object] = {}
    offset = 0
    for i in range(count):
        block, k = divmod(i, per_block)
        part = "weight" if k % 2 == 0 else "bias"
        shape = [8, 8] if part == "weight" else [8]
        nbytes = 4 * (64 if part == "weight" else 8)
        header[f"model.layers.{block}.{_BLOCK_TENSORS[k // 2]}.{part}"] = {
            "dtype": "F32", "shape": shape, "data_offsets": [offset, offset + nbytes],
        }  # fmt: skip
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-(8 + len(blob)) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(blob)) + blob + bytes(offset))


def write_fused(path: Path, size_mib: int, *, seed: int = 0, d: int = 1024) -> int:
    """About ``size_mib`` MiB of F32 PyTorch ``MultiheadAttention`` and ``LSTM`` tensors
    (``blocks.N.attn.in_proj_weight [3d, d]`` ..., ``blocks.N.lstm.weight_ih_l0 [4d, d]`` ...),
    which ``pytorch-to-burn`` splits into Burn's Linears; returns the largest output tensor."""
    rng = np.random.default_rng(seed)
    block = {
        "attn.in_proj_weight": (3 * d, d), "attn.in_proj_bias": (3 * d,),
        "attn.out_proj.weight": (d, d), "attn.out_proj.bias": (d,),
        "lstm.weight_ih_l0": (4 * d, d), "lstm.weight_hh_l0": (4 * d, d),
        "lstm.bias_ih_l0": (4 * d,), "lstm.bias_hh_l0": (4 * d,),
    }  # fmt: skip
    per_block = sum(int(np.prod(s)) * 4 for s in block.values())
    count = max(1, size_mib * (1 << 20) // per_block)
    header: dict[str, object] = {}
    offset = 0
    for i in range(count):
        for name, shape in block.items():
            nbytes = int(np.prod(shape)) * 4
            header[f"blocks.{i}.{name}"] = {
                "dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + nbytes],
            }  # fmt: skip
            offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-(8 + len(blob)) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(blob)) + blob)
        for _ in range(count):
            for shape in block.values():
                out.write(rng.standard_normal(shape, dtype=np.float32).tobytes())
    return d * d * 4  # every split piece and out_proj is [d, d]


def warm(path: Path) -> None:
    """Read a file once so every command starts with the same warm page cache."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def evict(path: Path) -> None:
    """Drop one file's pages from the page cache (this file only, not the machine's cache), so
    the next command reads it from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Case:
    """A benchmark: ckptctl's command against a baseline on the same input."""

    name: str
    describe: str
    prepare: Callable[[int], Path]
    ours: Callable[[Path, Path], list[str]]
    baseline_name: str
    baseline: Callable[[Path, Path], list[str]]
    out_ext: str
    #: every run of both commands starts with the input out of the page cache (:func:`evict`)
    cold: bool = False


def _st_input(size_mib: int) -> Path:
    path = WORK / f"input-{size_mib}m.safetensors"
    meta = path.with_suffix(".largest")
    if not path.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        meta.write_text(str(write_safetensors(path, size_mib)))
    return path


def _f16_input(size_mib: int) -> Path:
    path = WORK / f"input16-{size_mib}m.safetensors"
    meta = path.with_suffix(".largest")
    if not path.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        meta.write_text(str(write_safetensors(path, size_mib, dtype="F16")))
    return path


def _fused_input(size_mib: int) -> Path:
    path = WORK / f"fused-{size_mib}m.safetensors"
    meta = WORK / f"fused-{size_mib}m.largest"
    if not path.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        meta.write_text(str(write_fused(path, size_mib)))
    return path


def _bpk_input(size_mib: int) -> Path:
    path = WORK / f"input-{size_mib}m.bpk"
    if not path.exists():
        src = _st_input(size_mib)
        subprocess.run([*CKPTCTL, "convert", str(src), str(path), "--force"], check=True)
        (WORK / f"input-{size_mib}m.largest").write_text(src.with_suffix(".largest").read_text())
    return path


def _pt_input(size_mib: int) -> Path:
    path = WORK / f"input-{size_mib}m.pt"
    if not path.exists():
        src = _st_input(size_mib)
        subprocess.run([*CKPTCTL, "convert", str(src), str(path), "--force"], check=True)
    return path


def _st_with_bpk_input(size_mib: int) -> Path:
    """The safetensors input, with its burnpack twin beside it (for ``diff``)."""
    _bpk_input(size_mib)
    return _st_input(size_mib)


def _many_input(size_mib: int) -> Path:
    del size_mib  # the listing's cost is its 20,000 names, not its bytes
    path = WORK / "many-20000.safetensors"
    if not path.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        write_many(path)
    return path


def _largest_of(src: Path) -> int:
    meta = WORK / (src.name.split(".", 1)[0] + ".largest")
    return int(meta.read_text()) if meta.exists() else 0


def _diff(src: Path, dst: Path) -> list[str]:
    del dst  # compares the two inputs; writes nothing
    return [*CKPTCTL, "diff", str(src), str(src.with_suffix(".bpk"))]


def _verify_no_nan(src: Path, dst: Path) -> list[str]:
    del dst
    return [*CKPTCTL, "verify", "--no-nan", str(src)]


def _hash(src: Path, dst: Path) -> list[str]:
    return [*CKPTCTL, "hash", str(src), "-o", str(dst), "--force", "-j", "1"]


def _hash_default(src: Path, dst: Path) -> list[str]:
    return [*CKPTCTL, "hash", str(src), "-o", str(dst), "--force"]


def _dd_direct(src: Path, dst: Path) -> list[str]:
    del dst  # the disk's own speed: O_DIRECT, no page cache, 16 MiB requests
    return ["dd", f"if={src}", "of=/dev/null", "bs=16M", "iflag=direct", "status=none"]


def _sha256sum(src: Path, dst: Path) -> list[str]:
    del dst
    return ["sha256sum", str(src)]


def _ls(src: Path, dst: Path) -> list[str]:
    del dst
    return [*CKPTCTL, "ls", str(src)]


def _ls_tree(src: Path, dst: Path) -> list[str]:
    return [*_ls(src, dst), "--tree"]


def _ls_stats(src: Path, dst: Path) -> list[str]:
    return [*_ls(src, dst), "--stats"]


def _cat(src: Path, dst: Path) -> list[str]:
    del dst
    return ["sh", "-c", 'cat "$1" > /dev/null', "cat", str(src)]


def _cat_twice(src: Path, dst: Path) -> list[str]:
    del dst  # reads the input twice, as a diff of two files of its size does (``cmp`` of a
    # file with itself returns at once)
    return ["sh", "-c", 'cat "$1" "$1" > /dev/null', "cat", str(src)]


def _convert(src: Path, dst: Path) -> list[str]:
    return [*CKPTCTL, "convert", str(src), str(dst), "--force"]


def _convert_no_fsync(src: Path, dst: Path) -> list[str]:
    return [*_convert(src, dst), "--no-fsync"]


def _convert_transpose(src: Path, dst: Path) -> list[str]:
    return [*_convert_no_fsync(src, dst), "--module-type", ".*=Linear", "-a", "pytorch-to-burn"]


def _convert_split(src: Path, dst: Path) -> list[str]:
    return [*_convert_no_fsync(src, dst), "-a", "pytorch-to-burn"]


def _convert_bf16(src: Path, dst: Path) -> list[str]:
    return [*_convert_no_fsync(src, dst), "-a", "cast:bf16"]


def _convert_f16(src: Path, dst: Path) -> list[str]:
    return [*_convert_no_fsync(src, dst), "-a", "cast:f16"]


def _convert_f32(src: Path, dst: Path) -> list[str]:
    return [*_convert_no_fsync(src, dst), "-a", "cast:f32"]


def _convert_half(src: Path, dst: Path) -> list[str]:
    return [*_convert_no_fsync(src, dst), "--module-type", ".*=Linear", "-a", "half"]


def _convert_transpose_bf16(src: Path, dst: Path) -> list[str]:
    return [*_convert_transpose(src, dst), "-a", "cast:bf16"]


def _cp_sync(src: Path, dst: Path) -> list[str]:
    return ["sh", "-c", 'cp "$1" "$2" && sync "$2"', "cp+sync", str(src), str(dst)]


def _cp(src: Path, dst: Path) -> list[str]:
    return ["cp", str(src), str(dst)]


def _floor_copy(src: Path, dst: Path, *flags: str) -> list[str]:
    script = Path(__file__).with_name("floor_copy.py")
    return [sys.executable, str(script), str(src), str(dst), *flags]


def _floor_bare(src: Path, dst: Path) -> list[str]:
    return _floor_copy(src, dst, "--bare")


def _floor_same_bare(src: Path, dst: Path) -> list[str]:
    return _floor_copy(src, dst, "--bare", "--same-offsets")


CASES = [
    Case("st-bpk", "safetensors → burnpack", _st_input, _convert, "cp+sync", _cp_sync, ".bpk"),
    Case("bpk-st", "burnpack → safetensors", _bpk_input, _convert, "cp+sync", _cp_sync,
         ".safetensors"),
    Case("st-bpk-nofsync", "safetensors → burnpack, --no-fsync", _st_input, _convert_no_fsync,
         "cp", _cp, ".bpk"),
    Case("floor-nofsync", "floor of st-bpk-nofsync: Python + click + rich + the same copy",
         _st_input, _floor_copy, "cp", _cp, ".bpk"),
    Case("floor-bare", "the floor without click and rich: Python + the copy", _st_input,
         _floor_bare, "cp", _cp, ".bpk"),
    Case("floor-same-bare", "Python + the copy at the source's offsets, as cp copies",
         _st_input, _floor_same_bare, "cp", _cp, ".bpk"),
    Case("bpk-st-nofsync", "burnpack → safetensors, --no-fsync", _bpk_input, _convert_no_fsync,
         "cp", _cp, ".safetensors"),
    Case("st-bpk-transpose", "every 2-D weight transposed (pytorch-to-burn), --no-fsync",
         _st_input, _convert_transpose, "cp", _cp, ".bpk"),
    Case("fused-bpk-split", "MHA/LSTM weights split into Burn's Linears (pytorch-to-burn), "
         "--no-fsync", _fused_input, _convert_split, "cp", _cp, ".bpk"),
    Case("st-bpk-bf16", "every tensor cast F32 → BF16, --no-fsync", _st_input, _convert_bf16,
         "cp", _cp, ".bpk"),
    Case("st-bpk-f16", "every tensor cast F32 → F16, --no-fsync", _st_input, _convert_f16,
         "cp", _cp, ".bpk"),
    Case("f16-bpk-f32", "every tensor cast F16 → F32 (an F16 input), --no-fsync", _f16_input,
         _convert_f32, "cp", _cp, ".bpk"),
    Case("st-bpk-half", "every tensor F32 → F16 by Burn's half (-a half, all Linear), "
         "--no-fsync", _st_input, _convert_half, "cp", _cp, ".bpk"),
    Case("st-bpk-t-bf16", "2-D weights transposed, then every tensor cast F32 → BF16, "
         "--no-fsync", _st_input, _convert_transpose_bf16, "cp", _cp, ".bpk"),
    Case("st-pt-nofsync", "safetensors → .pt (zip, CRC per record), --no-fsync", _st_input,
         _convert_no_fsync, "cp", _cp, ".pt"),
    Case("pt-st-nofsync", ".pt → safetensors, --no-fsync", _pt_input, _convert_no_fsync, "cp",
         _cp, ".safetensors"),
    Case("st-pt-bf16", "every tensor cast F32 → BF16 into a .pt, --no-fsync", _st_input,
         _convert_bf16, "cp", _cp, ".pt"),
    Case("diff", "diff safetensors against its burnpack twin (every byte compared)",
         _st_with_bpk_input, _diff, "cat x2", _cat_twice, ".none"),
    Case("verify-nonan", "verify --no-nan (every float scanned)", _st_input, _verify_no_nan,
         "cat", _cat, ".none"),
    Case("ls-tree", "ls --tree of 20,000 tensors against ls (target: within 1.5x)", _many_input,
         _ls_tree, "ls", _ls, ".none"),
    Case("ls-stats", "ls --stats: statistics of every F32 tensor, one core", _st_input,
         _ls_stats, "cat", _cat, ".none"),
    Case("hash", "hash: sha256 of every tensor, one core (-j 1)", _st_input, _hash, "sha256sum",
         _sha256sum, ".none"),
    Case("hash-default", "hash as run by default (-j: the number of cores)", _st_input,
         _hash_default, "cat", _cat, ".none"),
    Case("hash-cold", "hash by default from a cold page cache, against cat reading the disk",
         _st_input, _hash_default, "cat", _cat, ".none", cold=True),
    Case("hash-cold-j1", "hash -j 1 from a cold page cache, against the disk read with O_DIRECT",
         _st_input, _hash, "dd", _dd_direct, ".none", cold=True),
]  # fmt: skip


#: ``--casts``: every cast path (issue #50); ``--transposes``: every transpose path.
CAST_CASES = ("st-bpk-bf16", "st-bpk-f16", "f16-bpk-f32", "st-bpk-half", "st-pt-bf16")
TRANSPOSE_CASES = ("st-bpk-transpose", "st-bpk-t-bf16")


def startup(runs: int) -> list[dict[str, object]]:
    """Median wall time of ``ckptctl --help`` / ``--version`` (target: 150 ms) and bare Python."""
    script = Path(sys.executable).with_name("ckptctl")
    commands = {
        "ckptctl --help": [str(script), "--help"],
        "ckptctl --version": [str(script), "--version"],
        "python -c pass": [sys.executable, "-c", "pass"],
    }
    out = []
    for name, cmd in commands.items():
        times = [run(cmd).seconds for _ in range(max(runs, 15))]
        out.append({"command": name, "median_ms": statistics.median(times) * 1000})
    return out


def timings(
    fn: Callable[[], object], runs: int, before: Callable[[], object] = lambda: None
) -> list[float]:
    """Wall seconds of ``runs`` calls of ``fn`` in this process, each after an untimed
    ``before()``."""
    times = []
    for _ in range(runs):
        before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def micro(size_mib: int, runs: int) -> list[dict[str, object]]:
    """In-process throughput of the transpose and cast kernels against a plain memory copy:
    the compiled kernels where they are built, numpy's with ``CKPTCTL_NO_CKERNELS=1``."""
    from ckptctl.adapters.cast import convert_float
    from ckptctl.adapters.layout import transpose_2d
    from ckptctl.dtypes import DType, ckernels

    n = int((size_mib * (1 << 20) // 4) ** 0.5)
    array = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    half = array.astype(np.float16)
    kernels = {
        "memory copy": lambda: array.copy(),
        "transpose (strips)": lambda: transpose_2d(array),
        "transpose (numpy .T copy)": lambda: np.ascontiguousarray(array.T),
        "cast F32 → F16": lambda: convert_float(array, DType.F32, DType.F16),
        "cast F32 → BF16": lambda: convert_float(array, DType.F32, DType.BF16),
        "cast F16 → F32": lambda: convert_float(half, DType.F16, DType.F32),
    }
    path = "compiled" if ckernels() is not None else "numpy"
    results = []
    for name, kernel in kernels.items():
        kernel()  # warm up: first-touch page faults are not the kernel's cost
        seconds = statistics.median(timings(kernel, runs))
        gib_s = array.nbytes / seconds / (1 << 30)
        ours = name.startswith(("transpose (strips)", "cast"))  # ckptctl's kernels
        label = f"{name} ({path})" if ours else name
        results.append({"kernel": label, "MiB": array.nbytes / (1 << 20), "seconds": seconds,
                        "GiB_s": gib_s})  # fmt: skip
    return results


def copies(size_mib: int, runs: int) -> list[dict[str, object]]:
    """In-process: copying a file's bytes to another place in a new file, several ways.

    ``copy_range`` chooses between the first two (page-congruent offsets keep
    ``copy_file_range``) and a buffer (any other offsets, e.g. safetensors -> burnpack);
    ``sources.copy_ranges`` as ckptctl runs it (256 KiB buffer, the copy threads). The last
    two bound any copy from below (issue 26): writing 1 GiB from a buffer already in the
    cache (no read at all), and one copy straight into a memory-mapped output on two threads
    (the page cache to the page cache, no buffer and no per-file write lock).
    """
    src = _st_input(size_mib)
    warm(src)
    dst = WORK / "copy-micro.bin"
    size = src.stat().st_size - 4096

    def copy(gap: int, *, kernel: bool) -> None:
        with open(src, "rb") as fin, open(dst, "wb") as fout:
            copy_pieces(fin.fileno(), fout.fileno(), [(0, gap, size)], kernel=kernel)

    def fresh() -> None:
        dst.unlink(missing_ok=True)
        os.sync()

    def copy_ranges() -> None:
        from ckptctl.sources import ByteSource
        from ckptctl.sources.local import copy_ranges

        with ByteSource(src) as source, open(dst, "wb") as fout:
            fout.seek(248)
            copy_ranges([(source, 0, size)], fout)

    ways = {
        "copy_file_range, page-congruent": lambda: copy(0, kernel=True),
        "copy_file_range, 248 bytes off": lambda: copy(248, kernel=True),
        "preadv + pwrite, one 8 MiB buffer, 248 bytes off": lambda: copy(248, kernel=False),
        "ckptctl copy_ranges, 248 bytes off": copy_ranges,
        "pwrite of one 256 KiB buffer, nothing read (the write alone)": lambda: _write_only(
            dst, size
        ),
        "preadv into a mapped output, 2 threads, 248 bytes off": lambda: _mapped_copy(
            src, dst, 248, size
        ),
    }
    results = []
    for name, way in ways.items():
        times = timings(way, runs, before=fresh)
        results.append({"copy": name, "MiB": size / (1 << 20), "median_s": statistics.median(times),
                        "best_s": min(times)})  # fmt: skip
    dst.unlink(missing_ok=True)
    return results


def _write_only(dst: Path, size: int) -> None:
    """``size`` bytes written from one 256 KiB buffer that stays in the cache."""
    buffer = memoryview(bytearray(256 << 10))
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for at in range(0, size, len(buffer)):
            os.pwrite(fd, buffer[: min(len(buffer), size - at)], at)
    finally:
        os.close(fd)


def _mapped_copy(src: Path, dst: Path, gap: int, size: int, threads: int = 2) -> None:
    """``size`` bytes of ``src`` read with ``preadv`` straight into 8 MiB windows of a shared
    memory map of ``dst`` at ``gap``: one copy, each thread its half."""
    import mmap
    import threading

    window = 8 << 20
    fd_in = os.open(src, os.O_RDONLY)
    fd_out = os.open(dst, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

    def half(first: int, stop: int) -> None:
        for at in range(first, stop, window):
            n = min(window, stop - at)
            place = gap + at
            page = place - place % mmap.PAGESIZE
            with mmap.mmap(fd_out, place + n - page, offset=page) as out:
                view = memoryview(out)
                os.preadv(fd_in, [view[place - page : place - page + n]], at)
                view.release()

    try:
        os.ftruncate(fd_out, gap + size)
        step = -(-size // threads // window) * window
        workers = [threading.Thread(target=half, args=(k, min(k + step, size)))
                   for k in range(0, size, step)]  # fmt: skip
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        os.close(fd_in)
        os.close(fd_out)


def measure(case: Case, size_mib: int, runs: int, before: Path | None = None) -> dict[str, object]:
    """Median time and max peak RSS of ckptctl and the baseline, interleaved run by run; with
    ``before`` (a directory holding another ``ckptctl`` package, e.g. ``git archive`` of an
    older commit), that ckptctl's too, in the same rounds."""
    src = case.prepare(size_mib)
    prime = evict if case.cold else warm
    ours: list[Run] = []
    base: list[Run] = []
    old: list[Run] = []
    out = WORK / f"out{case.out_ext}"
    copy = WORK / f"copy{src.suffix}"
    for _ in range(runs):
        # Both commands write a new file: deleting a 1 GiB previous output costs the
        # filesystem up to 0.7 s here, and it is not what is being measured.
        # Each command starts with no dirty pages of the one before: without the (untimed)
        # sync, a --no-fsync run paid for the writeback of the previous run's gigabyte.
        copy.unlink(missing_ok=True)
        os.sync()
        prime(src)
        base.append(run(case.baseline(src, copy)))
        out.unlink(missing_ok=True)
        os.sync()
        prime(src)
        ours.append(run(case.ours(src, out)))
        if before is not None:  # ``python -m`` puts the working directory first on the path
            out.unlink(missing_ok=True)
            os.sync()
            prime(src)
            old.append(run(case.ours(src, out), cwd=before))
    largest = _largest_of(src)
    t_ours = statistics.median(r.seconds for r in ours)
    t_base = statistics.median(r.seconds for r in base)
    size = src.stat().st_size
    return {
        "case": case.name,
        "what": case.describe,
        "input_bytes": size,
        "largest_tensor_bytes": largest,
        "ckptctl_s": t_ours,
        "baseline": case.baseline_name,
        "baseline_s": t_base,
        "throughput_ratio": t_base / t_ours if t_ours else float("inf"),
        # the fastest run of each: this VM has random system-time stalls of up to ~1.5 s in
        # page and block allocation (benchmarks/RESULTS.md, round two, continued)
        "ckptctl_best_s": min(r.seconds for r in ours),
        "baseline_best_s": min(r.seconds for r in base),
        "best_ratio": min(r.seconds for r in base) / min(r.seconds for r in ours),
        "ckptctl_MiB_s": size / t_ours / (1 << 20),
        "ckptctl_cpu_s": statistics.median(r.cpu_seconds for r in ours),
        "baseline_cpu_s": statistics.median(r.cpu_seconds for r in base),
        # bytes per second of one core's time: the input over the command's CPU seconds
        "ckptctl_MB_per_cpu_s": size / statistics.median(r.cpu_seconds for r in ours) / 1e6,
        "load_average": os.getloadavg()[0],
        "ckptctl_peak_rss_MiB": max(r.max_rss_kib for r in ours) / 1024,
        "baseline_peak_rss_MiB": max(r.max_rss_kib for r in base) / 1024,
        # the memory goal of issues #6 and #15: 64 MiB plus the largest tensor
        "rss_budget_MiB": 64 + largest / (1 << 20),
        **(_before(old, t_base) if old else {}),
    }


def _before(old: list[Run], t_base: float) -> dict[str, object]:
    """The ``--before`` ckptctl's figures, as ``measure`` reports ckptctl's."""
    t_old = statistics.median(r.seconds for r in old)
    return {
        "before_s": t_old,
        "before_ratio": t_base / t_old if t_old else float("inf"),
        "before_best_s": min(r.seconds for r in old),
        "before_cpu_s": statistics.median(r.cpu_seconds for r in old),
        "before_peak_rss_MiB": max(r.max_rss_kib for r in old) / 1024,
    }


def machine() -> str:
    """One line describing this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, Python {platform.python_version()}"


def main() -> None:
    """Parse options, run the cases, print a table (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="input size (default 1024)")
    parser.add_argument("--runs", type=int, default=5, help="runs per command (default 5)")
    parser.add_argument("--case", action="append", help="run only these cases")
    parser.add_argument(
        "--casts", action="store_true", help="run the cast cases (with any --case given)"
    )
    parser.add_argument(
        "--transposes", action="store_true", help="run the transpose cases (with any --case)"
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="also run the ckptctl package in this directory (e.g. `git archive` of an older "
        "commit) in the same rounds",
    )
    parser.add_argument("--quick", action="store_true", help="8 MiB, 1 run: a smoke test")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument(
        "--micro",
        action="store_true",
        help="also time the transpose/cast kernels in-process and the start-up of --help",
    )
    parser.add_argument(
        "--copies",
        action="store_true",
        help="also time in-process file copies: copy_file_range against one buffer",
    )
    args = parser.parse_args()
    size, runs = (8, 1) if args.quick else (args.size_mib, args.runs)
    before = os.getloadavg()
    older = args.before.resolve() if args.before else None
    precompile(older)
    chosen = set(args.case or ())
    chosen |= set(CAST_CASES) if args.casts else set()
    chosen |= set(TRANSPOSE_CASES) if args.transposes else set()
    results = [measure(c, size, runs, older) for c in CASES if not chosen or c.name in chosen]
    kernels = micro(min(size, 256), runs) if args.micro else []
    copied = copies(size, runs) if args.copies else []
    starts = startup(runs) if args.micro else []
    after = os.getloadavg()
    load = f"{before[0]:.2f} before, {after[0]:.2f} after (1-minute)"
    if args.json:
        report = {
            "machine": machine(),
            "load_average": load,
            "runs": runs,
            "results": results,
            "kernels": kernels,
            "startup": starts,
            "copies": copied,
        }
        print(json.dumps(report, indent=2))
        return
    print(f"machine: {machine()}; medians of {runs} runs; load average {load}")
    print(f"{'case':<16} {'input':>9} {'ckptctl':>9} {'baseline':>15} {'ratio':>6} "
          f"{'best':>13} {'ratio':>6} {'MiB/s':>7} {'cpu':>7} {'MB/cpu-s':>8} "
          f"{'peak RSS':>9} {'budget':>9}")  # fmt: skip
    for r in results:
        print(
            f"{r['case']:<16} {r['input_bytes'] / (1 << 20):>7.0f}Mi "
            f"{r['ckptctl_s']:>8.3f}s {r['baseline']:>7} {r['baseline_s']:>6.3f}s "
            f"{r['throughput_ratio']:>5.2f}x "
            f"{r['ckptctl_best_s']:>5.3f}/{r['baseline_best_s']:.3f}s {r['best_ratio']:>5.2f}x "
            f"{r['ckptctl_MiB_s']:>7.0f} {r['ckptctl_cpu_s']:>6.3f}s "
            f"{r['ckptctl_MB_per_cpu_s']:>8.0f} "
            f"{r['ckptctl_peak_rss_MiB']:>6.0f}MiB {r['rss_budget_MiB']:>6.0f}MiB"
        )
        if "before_s" in r:
            print(f"{'  before':<16} {'':>9} {r['before_s']:>8.3f}s {'':>15} "
                  f"{r['before_ratio']:>5.2f}x {r['before_best_s']:>5.3f}s {'':>21} "
                  f"{r['before_cpu_s']:>6.3f}s {'':>8} "
                  f"{r['before_peak_rss_MiB']:>6.0f}MiB")  # fmt: skip
    for st in starts:
        print(f"startup {st['command']:<20} {st['median_ms']:>6.0f} ms")
    for c in copied:
        print(f"copy {c['copy']:<50} {c['MiB']:>6.0f} MiB median {c['median_s']:.3f}s "
              f"best {c['best_s']:.3f}s")  # fmt: skip
    for k in kernels:
        print(f"kernel {k['kernel']:<28} {k['MiB']:>6.0f} MiB {k['seconds']:>7.3f}s "
              f"{k['GiB_s']:>6.2f} GiB/s")  # fmt: skip


if __name__ == "__main__":
    main()

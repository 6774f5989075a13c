"""Benchmark: migrating an old Burn record (``.mpk``, ``.mpk.gz``) to burnpack, against ``cp``.

Usage (from the repository root, with ckptctl installed)::

    python benchmarks/bench_mpk.py                   # 1 GiB .mpk, 256 MiB .mpk.gz, 3 runs
    python benchmarks/bench_mpk.py --size-mib 64 --runs 1    # a smoke test

The input is a NamedMpkFileRecorder model record written here, streamed (64 F32 parameters,
the largest 64 MiB for 1 GiB, shrinking with ``--size-mib``). Wall time is the median of
``--runs`` child processes; peak RSS is the child's ``ru_maxrss`` (see ``bench.py:run``). The
target (issue #12) is peak RSS <= 64 MiB + the largest tensor.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import os
import shutil
import statistics
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import CKPTCTL, WORK, Run, run

MIB = 1024 * 1024


def _str(text: str) -> bytes:
    raw = text.encode()
    return (bytes([0xA0 | len(raw)]) if len(raw) < 32 else bytes([0xD9, len(raw)])) + raw


def _uint(n: int) -> bytes:
    return bytes([n]) if n < 128 else b"\xcd" + struct.pack(">H", n)


def sizes(total_mib: int) -> list[int]:
    """64 tensor sizes in bytes summing to about ``total_mib``; the largest is 1/16 of it."""
    largest = total_mib * MIB // 16
    rest = (total_mib * MIB - largest) // 63 // 4 * 4
    return [largest] + [rest] * 63


def write_record(path: Path, total_mib: int) -> int:
    """Stream a model record of ``total_mib`` to ``path``; return the largest tensor's bytes."""
    import numpy as np

    rng = np.random.default_rng(0)
    lens = sizes(total_mib)
    settings = "FullPrecisionSettings"
    meta = {
        "float": "f32",
        "int": "i64",
        "format": f"burn_core::record::file::NamedMpkFileRecorder<{settings}>",
        "version": "0.17.0",
        "settings": settings,
    }
    with open(path, "wb") as out:
        out.write(b"\x83" + _str("metadata") + bytes([0x80 | len(meta)]))
        for key, value in meta.items():
            out.write(_str(key) + _str(value))
        out.write(_str("item") + b"\xde" + struct.pack(">H", len(lens)))
        for i, length in enumerate(lens):
            pid = base64.b32hexencode(struct.pack("<Q", 1000 + i)).decode().lower().rstrip("=")
            out.write(_str(f"layer{i}") + b"\x82" + _str("id") + _str(pid) + _str("param"))
            out.write(b"\x83" + _str("bytes") + b"\xc6" + struct.pack(">I", length))
            for done in range(0, length, 16 * MIB):
                n = min(16 * MIB, length - done)
                out.write(rng.integers(0, 256, size=n, dtype=np.uint8).tobytes())
            out.write(_str("shape") + b"\x91" + b"\xce" + struct.pack(">I", length // 4))
            out.write(_str("dtype") + _str("F32"))
        out.write(_str("_b") + b"\x90")
    return lens[0]


def median(cmd: list[str], runs: int, cleanup: Path) -> Run:
    results = []
    for _ in range(runs):
        cleanup.unlink(missing_ok=True)
        results.append(run(cmd))
    return Run(
        statistics.median(r.seconds for r in results),
        int(statistics.median(r.max_rss_kib for r in results)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--gz-size-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    mpk = WORK / f"record-{args.size_mib}m.mpk"
    largest = write_record(mpk, args.size_mib)
    gz_src = WORK / f"record-{args.gz_size_mib}m.mpk"
    gz_largest = write_record(gz_src, args.gz_size_mib)
    mpk_gz = WORK / f"record-{args.gz_size_mib}m.mpk.gz"
    with open(gz_src, "rb") as f, gzip.open(mpk_gz, "wb", compresslevel=1) as g:
        shutil.copyfileobj(f, g, 16 * MIB)
    out, copy = WORK / "mpk-out.bpk", WORK / "mpk-copy.mpk"
    size = mpk.stat().st_size
    cases = [
        ("mpk → bpk", [*CKPTCTL, "convert", str(mpk), str(out), "--force", "-q"],
         ["sh", "-c", f"cp {mpk} {copy} && sync"], "cp+sync", size, largest),
        ("mpk → bpk, --no-fsync",
         [*CKPTCTL, "convert", str(mpk), str(out), "--force", "-q", "--no-fsync"],
         ["cp", str(mpk), str(copy)], "cp", size, largest),
        ("mpk.gz → bpk, --no-fsync",
         [*CKPTCTL, "convert", str(mpk_gz), str(out), "--force", "-q", "--no-fsync"],
         ["sh", "-c", f"gzip -dc {mpk_gz} > {copy}"], "gzip -dc", gz_src.stat().st_size,
         gz_largest),
        ("ls mpk", [*CKPTCTL, "ls", str(mpk)], ["true"], "true", size, largest),
    ]  # fmt: skip
    print(f"input {size / MIB:.0f} MiB .mpk, largest tensor {largest / MIB:.0f} MiB")
    print("| case | ckptctl | baseline | ratio | ckptctl MiB/s | peak RSS | budget |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, cmd, base, base_name, nbytes, big in cases:
        mine = median(cmd, args.runs, out)
        theirs = median(base, args.runs, copy)
        budget = 64 + big / MIB
        print(
            f"| {name} | {mine.seconds:.2f} s | {base_name} {theirs.seconds:.2f} s | "
            f"{theirs.seconds / mine.seconds:.2f}x | {nbytes / MIB / mine.seconds:.0f} | "
            f"{mine.max_rss_kib / 1024:.0f} MiB | {budget:.0f} MiB |"
        )
    for path in (out, copy):
        path.unlink(missing_ok=True)
    os.sync()


if __name__ == "__main__":
    main()

"""Remote reads (issue #16): requests and bytes fetched by ``ckptctl ls`` of a URL, per format.

Usage (ckptctl with the ``remote`` extra installed)::

    python benchmarks/bench_remote.py               # 1 GiB inputs
    python benchmarks/bench_remote.py --size-mib 64 # smaller inputs
    python benchmarks/bench_remote.py --quick       # 8 MiB inputs: a smoke test

Inputs go to ``benchmarks/_work/remote/``: a sparse safetensors of ``--size-mib`` (64 F32
tensors), and from it with ``ckptctl convert`` a burnpack, a PyTorch zip ``.pt`` and a sharded
safetensors (4 shards + ``model.safetensors.index.json``). ``tests/loopback.py`` serves them on
127.0.0.1 (Range, ETag), and ``ckptctl ls --json URL`` runs in-process; the table shows the
``remote`` counts of its JSON report (the server's own request log agrees), the wall time and the
file size. Nothing touches the internet.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.loopback import serve  # noqa: E402  # the repository's test server

WORK = Path(__file__).resolve().parent / "_work" / "remote"


def _sparse_safetensors(path: Path, total: int, tensors: int = 64) -> None:
    each = (total - 65536) // tensors // 4 * 4
    header = {
        f"layers.{i}.weight": {
            "dtype": "F32",
            "shape": [each // 4],
            "data_offsets": [i * each, (i + 1) * each],
        }
        for i in range(tensors)
    }
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + each * tensors)


def _ckptctl(*args: str) -> tuple[int, str]:
    from ckptctl.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(list(args))
        except SystemExit as exc:
            return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()  # pragma: no cover - main always exits


def _make(size: int) -> dict[str, str]:
    WORK.mkdir(parents=True, exist_ok=True)
    stamp = WORK / f".size-{size}"
    names = {
        "safetensors": "model.safetensors",
        "burnpack": "model.bpk",
        "pytorch-zip": "model.pt",
        "sharded (4 shards)": "sharded/model.safetensors.index.json",
    }
    if stamp.exists():
        return names
    for old in WORK.glob("**/*"):
        if old.is_file():
            old.unlink()
    src = WORK / "model.safetensors"
    _sparse_safetensors(src, size)
    for dst in ("model.bpk", "model.pt"):
        code, _ = _ckptctl("convert", str(src), str(WORK / dst), "-q", "--no-fsync", "--force")
        assert code == 0, dst
    (WORK / "sharded").mkdir(exist_ok=True)
    shard = str(size // 4 + (1 << 20))
    code, _ = _ckptctl(
        "convert", str(src), str(WORK / "sharded" / "model.safetensors"), "-q", "--no-fsync",
        "--max-shard-size", shard, "--force",
    )  # fmt: skip
    assert code == 0, "sharded"
    stamp.touch()
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--quick", action="store_true", help="8 MiB inputs")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    size = (8 if args.quick else args.size_mib) << 20
    names = _make(size)
    results = []
    with serve(WORK) as server:
        for fmt, name in names.items():
            server.log.clear()
            start = time.perf_counter()
            code, out = _ckptctl("ls", "--json", f"{server.url}/{name}")
            elapsed = time.perf_counter() - start
            assert code == 0, (name, out)
            report = json.loads(out)
            results.append(
                {
                    "format": fmt,
                    "file": name,
                    "bytes": sum(p.stat().st_size for p in (WORK / name).parent.glob("*"))
                    if "index" in name
                    else (WORK / name).stat().st_size,
                    "tensors": len(report["tensors"]),
                    "requests": report["remote"]["requests"],
                    "server_requests": len(server.log),
                    "bytes_fetched": report["remote"]["bytes_fetched"],
                    "seconds": round(elapsed, 3),
                }
            )
    if args.json:
        print(json.dumps({"size_bytes": size, "results": results}, indent=1))
        return
    print("| format | file | size | tensors | requests | bytes fetched | wall |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(
            f"| {r['format']} | `{r['file']}` | {r['bytes'] / 2**20:.0f} MiB | {r['tensors']} | "
            f"{r['requests']} | {r['bytes_fetched'] / 1024:.0f} KiB | {r['seconds']:.2f} s |"
        )


if __name__ == "__main__":
    main()

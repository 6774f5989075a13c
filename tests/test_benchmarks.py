"""The benchmark scripts run (tiny inputs); the real numbers live in benchmarks/RESULTS.md."""

from __future__ import annotations

import importlib
import json
import os
import struct
import subprocess
import sys

import pytest

from tests.conftest import REPO, VALID, copy_benchmarks

BENCHMARKS = REPO / "benchmarks"


def test_bench_smoke(tmp_path):
    script = copy_benchmarks(tmp_path) / "bench.py"
    out = subprocess.run(
        [
            sys.executable,
            str(script),
            "--quick",
            "--case",
            "st-bpk-nofsync",
            "--case",
            "st-bpk-transpose",
            "--case",
            "floor-nofsync",
            "--copies",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=tmp_path,
    )
    report = json.loads(out.stdout)
    assert [c["copy"] for c in report["copies"]] == [
        "copy_file_range, page-congruent",
        "copy_file_range, 248 bytes off",
        "preadv + pwrite, one 8 MiB buffer, 248 bytes off",
        "ckptctl copy_ranges, 248 bytes off",
        "pwrite of one 256 KiB buffer, nothing read (the write alone)",
        "preadv into a mapped output, 2 threads, 248 bytes off",
    ]
    assert all(0 < c["best_s"] <= c["median_s"] for c in report["copies"])
    cases = [r["case"] for r in report["results"]]
    assert cases == ["st-bpk-nofsync", "floor-nofsync", "st-bpk-transpose"]
    for result in report["results"]:
        assert result["ckptctl_s"] > 0
        assert result["ckptctl_peak_rss_MiB"] > 0
        assert result["input_bytes"] >= 8 << 20


def test_bench_casts_with_an_older_ckptctl_in_the_same_rounds(tmp_path):
    """``--casts``/``--transposes`` select their rows; ``--before DIR`` times DIR's ckptctl."""
    script = copy_benchmarks(tmp_path) / "bench.py"
    out = subprocess.run(
        [sys.executable, str(script), "--quick", "--casts", "--transposes", "--before", str(REPO),
         "--json"],
        capture_output=True, text=True, check=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    report = json.loads(out.stdout)
    cases = [r["case"] for r in report["results"]]
    assert cases == ["st-bpk-transpose", "st-bpk-bf16", "st-bpk-f16", "f16-bpk-f32",
                     "st-bpk-half", "st-bpk-t-bf16", "st-pt-bf16"]  # fmt: skip
    for result in report["results"]:
        assert result["before_s"] > 0
        assert result["before_peak_rss_MiB"] > 0
    f16 = next(r for r in report["results"] if r["case"] == "f16-bpk-f32")
    assert f16["input_bytes"] >= 8 << 20  # an F16 input of the size asked for


def test_floor_copy_puts_every_tensor_at_its_aligned_offset(tmp_path):
    src = VALID / "safetensors" / "dtypes.safetensors"
    out = tmp_path / "floor.bin"
    subprocess.run(
        [sys.executable, str(BENCHMARKS / "floor_copy.py"), str(src), str(out)],
        check=True,
        timeout=60,
    )
    raw, data = src.read_bytes(), out.read_bytes()
    (length,) = struct.unpack_from("<Q", raw)
    header = json.loads(raw[8 : 8 + length])
    ranges = sorted(v["data_offsets"] for k, v in header.items() if k != "__metadata__")
    assert len(ranges) > 3
    # the floor's layout: a header's room after the source header, then 256-byte alignment
    pos = (8 + length + 511) // 256 * 256
    for start, end in ranges:
        assert data[pos : pos + end - start] == raw[8 + length + start : 8 + length + end]
        pos = (pos + end - start + 255) // 256 * 256
    assert len(data) == pos  # pre-sized to the aligned end


def test_mapped_copy_puts_the_bytes_at_the_gap_on_every_thread(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    bench = importlib.import_module("bench")
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    data = os.urandom(3 * (8 << 20) + 12345)  # windows of 8 MiB, a last partial one
    src.write_bytes(data)
    for threads in (1, 2, 3):
        bench._mapped_copy(src, dst, 248, len(data), threads)
        assert dst.read_bytes() == bytes(248) + data, threads
    bench._write_only(dst, 1000)
    assert dst.stat().st_size == 1000


def test_floor_pt_times_every_part(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # floor_pt imports bench, as bench_pt does
    floor = importlib.import_module("floor_pt").floor

    small = VALID / "pytorch" / "min_zip.pt"
    parts = floor(small, small, runs=1)
    assert list(parts) == [
        "start-up (ls --json of a 1-tensor .pt, whole process)",
        "bounds pass over data.pkl",
        "safety walk over data.pkl",
        "C unpickler, callbacks that do nothing",
        "json.dumps of the report",
        "floor (sum)",
    ]
    assert all(seconds > 0 for seconds in parts.values())
    assert parts["floor (sum)"] == sum(v for k, v in parts.items() if k != "floor (sum)")


def _child_env(**extra: str) -> dict[str, str]:
    """This environment for a child that imports ckptctl from the tree, never under a mutant:
    mutmut's trampolines work only inside mutmut's own processes."""
    env = {k: v for k, v in os.environ.items() if k != "MUTANT_UNDER_TEST"}
    return env | extra


MPK_SMALL = ["--size-mib", "4", "--gz-size-mib", "2", "--runs", "1"]


def test_bench_mpk_smoke(tmp_path):
    scripts = copy_benchmarks(tmp_path)
    out = subprocess.run(
        [sys.executable, str(scripts / "bench_mpk.py"), *MPK_SMALL],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=tmp_path,
    )
    rows = [line.split(" | ") for line in out.stdout.splitlines() if line.startswith("| m")]
    rows += [line.split(" | ") for line in out.stdout.splitlines() if line.startswith("| ls")]
    assert [r[0] for r in rows] == [
        "| mpk → bpk",
        "| mpk → bpk, --no-fsync",
        "| mpk.gz → bpk, --no-fsync",
        "| ls mpk",
    ]
    for row in rows:
        rss, budget = (int(cell.split()[0]) for cell in row[5:7])
        assert 0 < rss <= budget  # the issue #12 memory goal holds even at this size


def test_bench_remote_smoke(tmp_path):
    scripts = copy_benchmarks(tmp_path)
    out = subprocess.run(
        [sys.executable, str(scripts / "bench_remote.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=tmp_path,
        env=_child_env(PYTHONPATH=str(REPO)),  # it serves files with tests/loopback.py
    )
    results = {r["format"]: r for r in json.loads(out.stdout)["results"]}
    assert {"safetensors", "burnpack", "pytorch-zip"} <= set(results)
    for result in results.values():
        assert result["tensors"] == 64
        assert result["requests"] == result["server_requests"]
    # header-only over the network (issue #16): a few requests, a small part of the file
    assert results["safetensors"]["requests"] <= 2
    assert results["pytorch-zip"]["requests"] <= 3
    assert results["safetensors"]["bytes_fetched"] < results["safetensors"]["bytes"] // 8


def test_bench_verify_smoke(tmp_path):
    scripts = copy_benchmarks(tmp_path)
    out = subprocess.run(
        [sys.executable, str(scripts / "bench_verify.py"), "--files", "6", "--runs", "1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=tmp_path,
        env=_child_env(),
    )
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["files"] == 6
    assert [r["case"] for r in result["rows"]] == [
        "ckptctl verify DIR -j 1",
        "ckptctl verify DIR -j 2",
    ]
    assert all(r["exit"] == 0 and r["seconds"] > 0 for r in result["rows"])
    assert len(list((scripts / "_work" / "verify_dir").glob("*.pt"))) == 6


def test_bench_gguf_smoke(tmp_path):
    script = copy_benchmarks(tmp_path) / "bench_gguf.py"
    cmd = [sys.executable, str(script), "--size-mib", "1", "--rows", "8", "--runs", "1", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    report = json.loads(out.stdout)
    assert [r["type"] for r in report["types"]] == ["Q4_K", "Q6_K", "Q8_0"]
    for row in report["types"]:
        assert row["values"] > 0
        assert row["ours_cpu_s"] > 0
        assert row["gguf_cpu_s"] > 0
    assert report["stream"]["values"] == sum(r["values"] for r in report["types"])
    assert report["stream"]["peak_rss_MiB"] > 0


def test_bench_gguf_listing_smoke(tmp_path):
    script = copy_benchmarks(tmp_path) / "bench_gguf.py"
    cmd = [sys.executable, str(script), "--listing", "--size-mib", "1", "--runs", "1", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    report = json.loads(out.stdout)
    assert report["tensors"] == 291
    assert [r["case"] for r in report["rows"]] == ["ls", "ls-json", "reader"]
    assert all(r["wall_s"] > 0 for r in report["rows"])


@pytest.mark.bounded  # the peak-RSS bound
def test_bench_onnx_smoke(tmp_path):
    script = copy_benchmarks(tmp_path) / "bench_onnx.py"
    cmd = [sys.executable, str(script), "--tensors", "3", "--tensor-mib", "1", "--runs", "1"]
    out = subprocess.run([*cmd, "--json"], capture_output=True, text=True, check=True, timeout=300)
    report = json.loads(out.stdout)
    assert report["tensors"] == 3
    assert report["data_bytes"] >= 3 << 20
    assert list(report["rows"]) == [
        "ckptctl ls",
        "ckptctl hash",
        "onnx.load + to_array",
        "ckptctl convert",
        "ckptctl convert --no-fsync",
        "onnx.load + to_array + save_file",
    ]
    for name, row in report["rows"].items():
        assert row["wall_s"] > 0, name
        assert row["peak_rss_MiB"] > 0, name
        if name.startswith("ckptctl"):  # the bound: 64 MiB + the largest tensor
            assert row["peak_rss_MiB"] <= report["target_peak_rss_MiB"], name

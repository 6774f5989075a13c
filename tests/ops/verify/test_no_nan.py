"""``no-nan``: every float and complex tensor scanned for NaN and Inf, each bad tensor named
with its counts; file-backed tensors in bounded reads, ``jobs`` tensors at once."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from ckptctl import save_checkpoint
from ckptctl.dtypes import DType
from ckptctl.formats import open_checkpoint
from ckptctl.model import ComputedData, TensorEntry
from ckptctl.ops.verify import Status
from ckptctl.sources import CHUNK_BYTES, ByteSource
from tests.ops.test_verify import finding, one
from tests.ops.verify.test_flat_reader import PT, truth_tensors
from tests.ops.verify.test_run import deflated


def entry(name: str, values: np.ndarray, dtype: DType) -> TensorEntry:
    raw = values.tobytes()
    return TensorEntry(name, dtype, values.shape, len(raw), None, ComputedData(lambda: raw))


def _bad_values(tmp_path: Path) -> Path:
    path = tmp_path / "nan.safetensors"
    save_file(
        {
            "a_clean": np.arange(6, dtype="<f4"),
            "b_nan": np.array([np.nan, 1.0, np.nan], "<f4"),
            "c_inf": np.array([np.inf, -np.inf], "<f4"),
            "d_both": np.array([np.nan, np.inf], "<f4"),
            "e_ints": np.array([1, 2], "<i8"),
        },
        str(path),
    )
    return path


def test_no_nan_names_each_tensor_with_what_it_holds(tmp_path):
    nan = finding(one(_bad_values(tmp_path), no_nan=True), "no-nan")
    assert nan.status is Status.FAIL
    assert nan.details == {
        "scanned": 4,
        "elements": 6 + 3 + 2 + 2,
        "tensors": [
            {"name": "b_nan", "dtype": "F32", "nan": 2, "inf": 0},
            {"name": "c_inf", "dtype": "F32", "nan": 0, "inf": 2},
            {"name": "d_both", "dtype": "F32", "nan": 1, "inf": 1},
        ],
    }
    message = str(nan.message)
    assert "3 of 4 float tensors" in message
    for named in ("'b_nan' (2 NaN)", "'c_inf' (2 Inf)", "'d_both' (1 NaN, 1 Inf)"):
        assert named in message
    assert "earlier checkpoint" in str(nan.hint)


@pytest.mark.parametrize(("count", "more"), [(5, ""), (6, "; and 1 more")])
def test_no_nan_lists_tensors_up_to_the_limit(tmp_path, count, more):
    path = tmp_path / "many.safetensors"
    save_file({f"t{i}": np.full(1, np.nan, "<f4") for i in range(count)}, str(path))
    nan = finding(one(path, no_nan=True), "no-nan")
    listed = ", ".join(f"'t{i}' (1 NaN)" for i in range(5))
    assert str(nan.message).endswith(f"{count} float tensors: {listed}{more}")
    assert len(nan.details["tensors"]) == count


def test_no_nan_singular_and_clean(tmp_path):
    path = tmp_path / "one.safetensors"
    save_file({"w": np.array([np.inf], "<f4")}, str(path))
    assert "1 of 1 float tensor: 'w' (1 Inf)" in str(
        finding(one(path, no_nan=True), "no-nan").message
    )
    save_file({"w": np.array([0.5], "<f4")}, str(path))
    clean = finding(one(path, no_nan=True), "no-nan")
    assert clean.status is Status.OK
    assert "1 float tensor (1 value)" in str(clean.message)
    assert clean.details == {"scanned": 1, "elements": 1, "tensors": []}


def test_no_nan_scans_floats_and_complex_but_not_integers():
    # truth.json: 17 tensors of shape (2, 3); F64 F32 F16 BF16 F8_E4M3 F8_E5M2 C64 C128 scanned
    floats = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "C64", "C128"}
    scanned = [t for t in truth_tensors("dtypes.pt") if t["dtype"] in floats]
    assert len(scanned) == 8
    elements = sum(int(np.prod(t["shape"])) for t in scanned)
    nan = finding(one(PT / "dtypes.pt", no_nan=True), "no-nan")
    assert nan.status is Status.OK
    assert nan.details == {"scanned": 8, "elements": elements, "tensors": []}


def _written(tmp_path: Path, entries: list[TensorEntry]) -> Path:
    path = tmp_path / "w.safetensors"
    save_checkpoint(path, entries)
    return path


def test_no_nan_finds_nan_in_complex_tensors(tmp_path):
    values = np.array([1 + 1j, complex(np.nan, 0), complex(0, np.inf)], "<c8")
    path = _written(tmp_path, [entry("c", values, DType.C64)])
    nan = finding(one(path, no_nan=True), "no-nan")
    assert nan.details["tensors"] == [{"name": "c", "dtype": "C64", "nan": 1, "inf": 1}]


def test_no_nan_one_byte_tensor_is_scanned(tmp_path):
    # F8_E4M3 (OCP FP8): 0x7F is NaN; a one-byte tensor is not empty
    path = _written(tmp_path, [entry("f8", np.array([0x7F], "u1"), DType.F8_E4M3)])
    nan = finding(one(path, no_nan=True), "no-nan")
    assert nan.details == {
        "scanned": 1,
        "elements": 1,
        "tensors": [{"name": "f8", "dtype": "F8_E4M3", "nan": 1, "inf": 0}],
    }


def test_no_nan_empty_tensor_is_clean(tmp_path):
    path = tmp_path / "empty.safetensors"
    save_file({"e": np.zeros(0, "<f4"), "w": np.ones(2, "<f4")}, str(path))
    nan = finding(one(path, no_nan=True), "no-nan")
    assert nan.status is Status.OK
    assert nan.details == {"scanned": 2, "elements": 2, "tensors": []}


def test_no_nan_scans_tensors_produced_in_memory_whole(tmp_path):
    # a deflate-compressed storage record is inflated on load, not read in file ranges
    values = np.array([np.nan, 1.0, np.inf, np.nan, -np.inf, 2.0], "<f4")
    nan = finding(one(deflated(tmp_path, values, corrupt=False), no_nan=True), "no-nan")
    assert nan.details == {
        "scanned": 1,
        "elements": 6,
        "tensors": [{"name": "w", "dtype": "F32", "nan": 2, "inf": 2}],
    }


def test_no_nan_in_strided_views_from_torch():
    # conj_neg.pt: 'plain' C64 (2,), 'conj' C64 (2,) computed, 'neg_imag' F32 (1,) computed
    nan = finding(one(PT / "conj_neg.pt", no_nan=True), "no-nan")
    assert nan.status is Status.OK
    assert nan.details == {"scanned": 3, "elements": 5, "tensors": []}


def _spy_reads(monkeypatch) -> list[tuple[int, int]]:
    """Every ``ByteSource.read``: (length, thread)."""
    reads: list[tuple[int, int]] = []
    real_read = ByteSource.read

    def spy(self, offset, length):
        reads.append((length, threading.get_ident()))
        return real_read(self, offset, length)

    monkeypatch.setattr(ByteSource, "read", spy)
    return reads


def test_no_nan_chunks_stop_at_the_end_of_each_tensor(tmp_path, monkeypatch):
    path = tmp_path / "two.safetensors"
    # "a" (one chunk and 8 bytes) is clean and lies just before "b", which is all NaN
    a = np.zeros(CHUNK_BYTES // 4 + 2, "<f4")
    save_file({"a": a, "b": np.full(4, np.nan, "<f4")}, str(path))
    with open_checkpoint(path) as ckpt:
        assert ckpt["b"].offset == (ckpt["a"].offset or 0) + a.nbytes
    reads = _spy_reads(monkeypatch)
    nan = finding(one(path, no_nan=True), "no-nan")
    assert nan.details["tensors"] == [{"name": "b", "dtype": "F32", "nan": 4, "inf": 0}]
    assert [length for length, _ in reads[-3:]] == [CHUNK_BYTES, 8, 16]


def _pool_sizes(monkeypatch) -> list[int | None]:
    import concurrent.futures

    sizes: list[int | None] = []
    real = concurrent.futures.ThreadPoolExecutor

    class Spy(real):  # type: ignore[misc, valid-type]  # a subclass of the real pool, recording
        def __init__(self, max_workers=None, *args, **kwargs):
            sizes.append(max_workers)
            super().__init__(max_workers, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", Spy)
    return sizes


@pytest.mark.parametrize(
    ("jobs", "tensors", "pool"),
    [(1, 4, None), (0, 4, None), (2, 1, None), (2, 2, 2), (3, 2, 2), (2, 4, 2)],
)
def test_no_nan_jobs_scan_on_that_many_threads(tmp_path, monkeypatch, jobs, tensors, pool):
    path = tmp_path / "many.safetensors"
    arrays = {f"t{i}": np.full(i + 1, np.nan if i % 2 else 0.0, "<f4") for i in range(tensors)}
    save_file(arrays, str(path))
    sizes = _pool_sizes(monkeypatch)
    reads = _spy_reads(monkeypatch)
    nan = finding(one(path, no_nan=True, jobs=jobs), "no-nan")
    # the report does not depend on jobs: odd tensors are all NaN, in file order
    assert nan.details["tensors"] == [
        {"name": f"t{i}", "dtype": "F32", "nan": i + 1, "inf": 0} for i in range(1, tensors, 2)
    ]
    assert nan.details["scanned"] == tensors
    scanned_on = {thread for _, thread in reads[-tensors:]}
    if pool is None:
        assert sizes == []
        assert scanned_on == {threading.get_ident()}
    else:
        assert sizes == [pool]
        assert threading.get_ident() not in scanned_on

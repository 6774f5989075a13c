"""NumPy ``.npy``/``.npz`` (issue 46): every file here is written by numpy itself, and every value
is compared with what ``np.load`` reads from the same file."""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ckptctl import (
    CorruptCheckpointError,
    DType,
    InputError,
    UnsafePickleError,
    UnsupportedError,
    open_checkpoint,
    read_layout,
)
from ckptctl.formats import get_format
from ckptctl.model import TensorEntry
from tests.contract import FormatContract, assert_header_only, list_spied

#: numpy dtype -> the dtype code ckptctl lists.
CODES = {
    "f8": "F64", "f4": "F32", "f2": "F16", "i8": "I64", "i4": "I32", "i2": "I16", "i1": "I8",
    "u8": "U64", "u4": "U32", "u2": "U16", "u1": "U8", "b1": "BOOL", "c8": "C64", "c16": "C128",
}  # fmt: skip


def sample(dtype: np.dtype, shape: tuple[int, ...] = (3, 4)):
    values = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) - 5
    if dtype.kind == "b":
        return (values % 3 == 0).astype(dtype)
    if dtype.kind == "c":
        return (values + 1j * values[::-1]).astype(dtype)
    if dtype.kind == "u":
        return (values + 5).astype(dtype)
    return (values * (1.5 if dtype.kind == "f" else 1)).astype(dtype)


def assert_matches_numpy(path: Path, name: str, entry: TensorEntry) -> None:
    """``entry`` holds what ``np.load`` reads, as canonical (little-endian, C-order) bytes."""
    loaded = np.load(path)
    expected = loaded if isinstance(loaded, np.ndarray) else loaded[name]
    assert entry.dtype.value == CODES[expected.dtype.str[1:]]
    assert entry.shape == expected.shape
    canonical = np.ascontiguousarray(expected, dtype=expected.dtype.newbyteorder("<"))
    assert bytes(entry.data.read()) == canonical.tobytes()
    np.testing.assert_array_equal(entry.load(), expected)


@pytest.mark.parametrize("code", sorted(CODES))
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("byteorder", ["<", ">"])
def test_npy_every_dtype_order_and_byte_order(tmp_path, code, order, byteorder):
    dtype = np.dtype(code).newbyteorder(byteorder)
    array = np.asarray(sample(dtype), order=order)
    path = tmp_path / "weights.npy"
    np.save(path, array)
    with open_checkpoint(path) as ckpt:
        assert ckpt.format == "npy"
        assert list(ckpt) == ["weights"]
        assert_matches_numpy(path, "weights", ckpt["weights"])


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_format_versions(tmp_path, version):
    path = tmp_path / "v.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array(f, sample(np.dtype("<f4")), version=version)
    with open_checkpoint(path) as ckpt:
        assert_matches_numpy(path, "v", ckpt["v"])


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2)])
def test_npy_scalar_and_empty_arrays(tmp_path, shape):
    path = tmp_path / "s.npy"
    np.save(path, np.full(shape, 2.5, dtype="<f8"))
    with open_checkpoint(path) as ckpt:
        assert ckpt["s"].nbytes == 8 * int(np.prod(shape))
        assert_matches_numpy(path, "s", ckpt["s"])


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_npz_members_stored_and_deflated(tmp_path, save):
    path = tmp_path / "params.npz"
    arrays = {
        "params/dense/kernel": sample(np.dtype("<f4"), (4, 3)),
        "params/dense/bias": sample(np.dtype(">f2"), (3,)),
        "step": np.array(7, dtype="<i8"),
        "fortran": np.asfortranarray(sample(np.dtype("<i2"), (2, 5))),
    }
    save(path, **arrays)
    with open_checkpoint(path) as ckpt:
        assert ckpt.format == "npz"
        assert list(ckpt) == list(arrays)  # the archive's order, Flax-style paths kept
        for name in arrays:
            assert_matches_numpy(path, name, ckpt[name])


def test_stored_member_is_a_range_of_the_archive(tmp_path):
    path = tmp_path / "a.npz"
    np.savez(path, w=sample(np.dtype("<f4")))
    with open_checkpoint(path) as ckpt:
        entry = ckpt["w"]
        assert entry.offset is not None
        raw = path.read_bytes()[entry.offset : entry.offset + entry.nbytes]
        assert raw == sample(np.dtype("<f4")).tobytes()


def test_header_regions_tile_the_npy_at_numpys_data_offset(tmp_path, run_cli):
    path = tmp_path / "w.npy"
    np.save(path, sample(np.dtype("<f4")))
    offset = np.load(path, mmap_mode="r").offset
    result = run_cli("header", path, "--json")
    assert result.code == 0
    layout = json.loads(result.stdout)
    regions = layout["regions"]
    assert [r["start"] for r in regions[1:]] == [r["end"] for r in regions[:-1]]
    assert (regions[0]["start"], regions[-1]["end"]) == (0, path.stat().st_size)
    (tensor,) = [r for r in regions if r["kind"] == "tensor"]
    assert (tensor["name"], tensor["start"], tensor["end"]) == ("w", offset, offset + 48)
    assert layout["header"]["shape"] == [3, 4]


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_header_regions_tile_the_npz(tmp_path, save):
    path = tmp_path / "a.npz"
    save(path, a=sample(np.dtype("<f4")), b=sample(np.dtype("<i8"), (2,)))
    layout = read_layout(path)
    ends = [r.end for r in layout.regions]
    assert [r.start for r in layout.regions] == [0, *ends[:-1]]
    assert ends[-1] == path.stat().st_size
    assert [r.name for r in layout.regions if r.kind == "tensor"] == ["a", "b"]
    with open_checkpoint(path) as ckpt:
        tensors = [(r.name, r.start, r.size) for r in layout.regions if r.kind == "tensor"]
        if save is np.savez:  # stored: the regions are the entries' byte ranges
            assert tensors == [(e.name, e.offset, e.nbytes) for e in ckpt.values()]


def _npy_bytes(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["safetensors", "bpk"])
def test_convert_keeps_every_digest(tmp_path, run_cli, fmt):
    src = tmp_path / "src.npz"
    np.savez_compressed(src, w=sample(np.dtype(">f4")), m=sample(np.dtype("b1"), (5,)))
    dst = tmp_path / f"out.{fmt}"
    assert run_cli("convert", src, dst).code == 0
    digests = [run_cli("hash", path).stdout for path in (src, dst)]
    assert digests[0] == digests[1]
    assert len(digests[0].splitlines()) == 2


def test_ls_json_names_the_format(tmp_path, run_cli):
    path = tmp_path / "emb.npy"
    np.save(path, sample(np.dtype("<f2"), (2, 2)))
    result = run_cli("ls", path, "--json")
    listing = json.loads(result.stdout)
    assert (result.code, listing["format"]) == (0, "npy")
    assert listing["tensors"][0] | {"nbytes": 8} == {
        **listing["tensors"][0], "name": "emb", "dtype": "F16", "shape": [2, 2], "nbytes": 8
    }  # fmt: skip


# --- object arrays: pickles, judged and never run -----------------------------------------------


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def _object_array(marker: Path) -> np.ndarray:
    return np.array([_Payload(marker), 1], dtype=object)


def test_object_npy_is_unsafe_and_never_run(tmp_path, run_cli):
    marker = tmp_path / "ran"
    path = tmp_path / "obj.npy"
    np.save(path, _object_array(marker), allow_pickle=True)
    with pytest.raises(UnsafePickleError, match="object array"):
        open_checkpoint(path)
    result = run_cli("verify", path, "--json")
    (finding,) = json.loads(result.stdout)["files"][0]["findings"]
    assert result.code == 1
    assert (finding["check"], finding["details"]["verdict"]) == ("safe-pickle", "unsafe")
    assert "posix.mkdir" in {g["name"] for g in finding["details"]["globals"]}
    assert run_cli("ls", path).code == 3
    assert not marker.exists()


def test_object_npz_member_is_named(tmp_path, run_cli):
    marker = tmp_path / "ran"
    path = tmp_path / "obj.npz"
    np.savez(path, fine=np.ones(2), payload=_object_array(marker))
    result = run_cli("verify", path, "--json")
    report = json.loads(result.stdout)["files"][0]
    assert (result.code, report["verdict"]) == (1, "unsafe")
    assert "'payload'" in report["findings"][0]["message"]
    assert not marker.exists()


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "array",
    [
        np.array(["a", "bc"]),
        np.zeros(2, dtype=[("x", "<f4"), ("y", "<i4")]),
        np.array(["2024-01-01"], dtype="datetime64[D]"),
        np.zeros(2, dtype=np.longdouble),
    ],
    ids=["str", "structured", "datetime", "longdouble"],
)
def test_dtypes_without_a_tensor_dtype_are_unsupported(tmp_path, run_cli, array):
    path = tmp_path / "x.npy"
    np.save(path, array)
    with pytest.raises(UnsupportedError, match="dtype") as info:
        open_checkpoint(path)
    assert array.dtype.str in str(info.value)
    assert run_cli("ls", path).code == 4


def _npy_with_header(text: bytes, data: bytes = b"", version: int = 1) -> bytes:
    length = struct.pack("<H" if version == 1 else "<I", len(text))
    return b"\x93NUMPY" + bytes([version, 0]) + length + text + data


@pytest.mark.parametrize(
    ("blob", "keyword"),
    [
        (
            _npy_with_header(
                b"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\n", b"\0" * 8
            ),
            "4 bytes|16 bytes|truncated|bytes end",
        ),
        (
            _npy_with_header(b"{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }\n"),
            "shape",
        ),
        (
            _npy_with_header(
                b"{'descr': '<f4', 'fortran_order': False, "
                b"'shape': (1099511627776, 1099511627776), }\n"
            ),
            "bytes",
        ),
        (
            _npy_with_header(
                b"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': __import__('os')}\n"
            ),
            "header",
        ),
        (_npy_with_header(b"not a dict\n"), "header"),
        (_npy_with_header(b"{" + b" " * 20_000 + b"}\n", version=2), "20003 bytes"),
        (b"\x93NUMPY\x01\x00\xff\x00{'descr'", "cut short"),
    ],
    ids=[
        "short-data",
        "negative-dim",
        "huge-shape",
        "code-in-header",
        "not-a-dict",
        "huge-header",
        "cut-header",
    ],
)
def test_corrupt_npy_is_one_line_exit_3(tmp_path, run_cli, blob, keyword):
    path = tmp_path / "bad.npy"
    path.write_bytes(blob)
    with pytest.raises(CorruptCheckpointError, match=keyword):
        open_checkpoint(path)
    result = run_cli("ls", path)
    assert result.code == 3
    assert result.stderr.count("\n") <= 2
    assert str(path) in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_npy_version_is_unsupported(tmp_path):
    path = tmp_path / "v9.npy"
    path.write_bytes(_npy_with_header(b"{}\n").replace(b"NUMPY\x01", b"NUMPY\x09"))
    with pytest.raises(UnsupportedError, match=r"version 9\.0"):
        open_checkpoint(path)


def test_npz_with_another_record_is_refused(tmp_path):
    path = tmp_path / "mixed.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("w.npy", _npy_bytes(np.ones(2)))
        archive.writestr("notes.txt", b"hello")
    with pytest.raises(UnsupportedError, match=r"notes\.txt"):
        open_checkpoint(path)


# --- the format contract (numpy writes the files) ---------------------------------------------


class TestNpzContract(FormatContract):
    """np.savez writes the files; ckptctl reads them (it writes no .npz)."""

    fmt = "npz"
    ext = ".npz"
    dtypes = (
        DType.F64,
        DType.F32,
        DType.F16,
        DType.I64,
        DType.I32,
        DType.I16,
        DType.I8,
        DType.U64,
        DType.U32,
        DType.U16,
        DType.U8,
        DType.BOOL,
        DType.C64,
        DType.C128,
    )  # fmt: skip (the dtypes numpy itself has: BF16 and FP8 are not numpy dtypes)
    keeps_metadata = False

    def write(self, tmp_path: Path, entries: list[TensorEntry], **kw: object) -> Path:
        path = tmp_path / "out.npz"
        arrays = {e.name: e.load() for e in entries}
        np.savez(path, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as bool
        return path

    def make_unknown_dtype_file(self, path: Path) -> None:
        np.savez(path, ok=np.ones(2), text=np.array(["a"]))

    def test_writer_is_registered_for_extension(self) -> None:
        spec = get_format(self.fmt)
        assert spec.write is None  # read only: np.savez writes .npz
        assert get_format("npy").write is None

    def test_header_only_listing(self, tmp_path: Path) -> None:
        """A deflated first member keeps the stored ones past the sniffed prefix (numpy's own
        headers are too short to push them there)."""
        path = tmp_path / "big.npz"
        with zipfile.ZipFile(path, "w") as archive:
            noise = np.random.default_rng(0).integers(0, 255, 8192, dtype="u1")
            archive.writestr("pad.npy", _npy_bytes(noise), zipfile.ZIP_DEFLATED)
            for name, array in {"w": sample(np.dtype("<f4")), "big": np.ones(4096, "<f4")}.items():
                archive.writestr(f"{name}.npy", _npy_bytes(array), zipfile.ZIP_STORED)
        listing = list_spied(path)
        assert sorted(name for name, _, _ in listing.entries) == ["big", "pad", "w"]
        assert_header_only(listing)


def test_truncated_npy_is_an_input_error(tmp_path):
    full = _npy_bytes(sample(np.dtype("<f8")))
    for size in (7, 9, 40, len(full) - 1):
        path = tmp_path / "cut.npy"
        path.write_bytes(full[:size])
        with pytest.raises(InputError, match="cut"), open_checkpoint(path) as ckpt:
            ckpt["cut"].load()


def test_diff_and_show_read_npz_like_any_checkpoint(tmp_path, run_cli):
    src = tmp_path / "a.npz"
    np.savez_compressed(src, w=sample(np.dtype(">f4")), b=sample(np.dtype("<i8"), (2,)))
    out = tmp_path / "a.safetensors"
    assert run_cli("convert", src, out).code == 0
    same = run_cli("diff", src, out, "--json")
    assert (same.code, json.loads(same.stdout)["identical"]) == (0, True)
    shown = run_cli("show", src, "w", "--json")
    stats = json.loads(shown.stdout)["tensors"][0]["stats"]
    values = sample(np.dtype("<f4"))
    assert (stats["min"], stats["max"], stats["count"]) == (values.min(), values.max(), 12)

"""The PyTorch zip writer: torch's exact container, checked against torch-written fixtures.

Ground truth: fixtures/valid/pytorch/*.pt written by torch 2.13 (``make_fixtures.py``) and their
truth.json. Without torch we rebuild those files from their own records and expect the same
bytes (bar the serialization id's name hash, which depends on libstdc++ internals); with torch we
also ``torch.load`` what we wrote.
"""

from __future__ import annotations

import collections
import io
import json
import pickletools
import struct
import zipfile
from hashlib import sha256
from pathlib import Path

import numpy as np
import pytest

from ckptctl.dtypes import TORCH_NAMES, DType
from ckptctl.errors import CorruptCheckpointError, OutputError
from ckptctl.formats.pytorch import _writer
from ckptctl.formats.pytorch._writer import archive_prefix, write_zip
from ckptctl.model import ComputedData, FileData, TensorEntry
from ckptctl.sources import ByteSource

PYTORCH = Path(__file__).resolve().parents[2] / "fixtures" / "valid" / "pytorch"
TRUTH = json.loads((PYTORCH / "truth.json").read_text())["files"]
ID_RECORD = ".data/serialization_id"


def entry(name, array, dtype=None, extra=None):
    """A TensorEntry over a numpy array (raw bits for BF16/FP8 when ``dtype`` says so)."""
    array = np.asarray(array)
    dtype = dtype or DType.parse(array.dtype.name if array.dtype != np.bool_ else "bool")
    data = np.ascontiguousarray(array)
    return TensorEntry(
        name,
        dtype,
        tuple(array.shape),
        data.nbytes,
        None,
        ComputedData(lambda: data),
        extra=extra or {},
    )


def write(entries, prefix="model"):
    out = io.BytesIO()
    write_zip(out, entries, {}, {}, prefix=prefix)
    return out.getvalue()


def data_offset(blob, info):
    name_len, extra_len = struct.unpack_from("<HH", blob, info.header_offset + 26)
    return info.header_offset + 30 + name_len + extra_len


def entries_from_fixture(file):
    """Rebuild a fixture's tensors from its own storage records (one storage per tensor)."""
    tensors = TRUTH[file]["tensors"]
    with zipfile.ZipFile(PYTORCH / file) as archive:
        prefix = archive.namelist()[0].split("/")[0]
        result = []
        for index, facts in enumerate(tensors):
            raw = archive.read(f"{prefix}/data/{index}")
            assert sha256(raw).hexdigest() == facts["sha256"]
            dtype = DType(facts["dtype"])
            array = np.frombuffer(raw, dtype=dtype.numpy).reshape(facts["shape"])
            result.append(entry(facts["name"], array, dtype))
    return prefix, result


def assert_same_as_torch(mine, theirs):
    """Byte-identical archives except the serialization id's first 20 digits (and its CRC)."""
    assert len(mine) == len(theirs)
    a, b = zipfile.ZipFile(io.BytesIO(mine)), zipfile.ZipFile(io.BytesIO(theirs))
    assert a.namelist() == b.namelist()
    for ours, torch_info in zip(a.infolist(), b.infolist(), strict=True):
        assert ours.header_offset == torch_info.header_offset, ours.filename
        if ours.filename.endswith(ID_RECORD):
            assert a.read(ours)[20:] == b.read(torch_info)[20:]  # torch's combined CRC
            continue
        assert ours.CRC == torch_info.CRC, ours.filename
        assert ours.flag_bits == torch_info.flag_bits, ours.filename
        start = ours.header_offset
        end = data_offset(mine, ours) + ours.file_size
        assert mine[start:end] == theirs[start:end], ours.filename


# --- byte-identical to torch.save -------------------------------------------------------------


@pytest.mark.parametrize("file", ["min_zip.pt", "dtypes.pt"])
def test_same_bytes_as_torch_save(file):
    # These fixtures are OrderedDicts, as our output is (torch pickles a plain dict as `}`).
    prefix, entries = entries_from_fixture(file)
    assert_same_as_torch(write(entries, prefix), (PYTORCH / file).read_bytes())


@pytest.mark.parametrize("file", ["scalar.pt", "empty_tensor.pt"])
def test_records_match_torch_for_plain_dict_fixtures(file):
    prefix, entries = entries_from_fixture(file)
    mine = zipfile.ZipFile(io.BytesIO(write(entries, prefix)))
    theirs = zipfile.ZipFile(PYTORCH / file)
    assert mine.namelist() == theirs.namelist()
    for ours, torch_info in zip(mine.infolist(), theirs.infolist(), strict=True):
        if not ours.filename.endswith(("data.pkl", ID_RECORD)):
            assert mine.read(ours) == theirs.read(torch_info)
            assert (ours.CRC, ours.flag_bits) == (torch_info.CRC, torch_info.flag_bits)


def test_empty_record_has_no_data_descriptor():
    # miniz clears flag bit 3 and writes no descriptor for a zero-byte record (empty_tensor.pt).
    for blob in (
        write([entry("e", np.zeros((0, 5), np.float32))]),
        (PYTORCH / "empty_tensor.pt").read_bytes(),
    ):
        archive = zipfile.ZipFile(io.BytesIO(blob))
        infos = archive.infolist()
        empty = next(i for i in infos if i.filename.endswith("/data/0"))
        after = infos[infos.index(empty) + 1]
        assert empty.flag_bits == 0x0800
        assert data_offset(blob, empty) == after.header_offset


# --- container structure ----------------------------------------------------------------------


def test_records_stored_aligned_with_valid_crcs():
    _, entries = entries_from_fixture("dtypes.pt")
    blob = write(entries)
    archive = zipfile.ZipFile(io.BytesIO(blob))
    names = [n.removeprefix("model/") for n in archive.namelist()]
    storages = [f"data/{i}" for i in range(17)]
    head = ["data.pkl", ".format_version", ".storage_alignment", "byteorder"]
    assert names == [*head, *storages, "version", ID_RECORD]
    assert archive.testzip() is None  # every CRC checks out
    for info in archive.infolist():
        assert info.compress_type == zipfile.ZIP_STORED
        assert data_offset(blob, info) % 64 == 0, info.filename
    assert archive.read("model/byteorder") == b"little"
    assert archive.read("model/version") == b"3\n"
    assert archive.read("model/.storage_alignment") == b"64"
    for i, e in enumerate(entries):
        assert archive.read(f"model/data/{i}") == bytes(e.data.read())


def pickle_ops(blob, prefix="model"):
    data = zipfile.ZipFile(io.BytesIO(blob)).read(f"{prefix}/data.pkl")
    return [(op.name, arg) for op, arg, _ in pickletools.genops(data)]


def test_pickle_uses_torch_rebuild_globals():
    blob = write(
        [
            entry("w", np.ones((2, 2), np.float32)),
            entry("u", np.arange(3, dtype=np.uint16)),
            entry("f8", np.zeros(2, np.uint8), DType.F8_E5M2),
        ]
    )
    ops = pickle_ops(blob)
    globals_ = {arg for name, arg in ops if name == "GLOBAL"}
    assert globals_ == {
        "collections OrderedDict",
        "torch._utils _rebuild_tensor_v2",
        "torch._utils _rebuild_tensor_v3",
        "torch FloatStorage",
        "torch.storage UntypedStorage",
        "torch uint16",
        "torch float8_e5m2",
    }
    assert ops[0] == ("PROTO", 2)
    assert [name for name, _ in ops].count("BINPERSID") == 3


def test_shared_storage_is_written_once_with_offsets():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    shared = [
        entry("base", base, extra={"storage": "7", "storage_offset": "0", "stride": "(4, 1)"}),
        entry("t", base.T, extra={"storage": "7", "storage_offset": "0", "stride": "(1, 4)"}),
        entry("row", base[2], extra={"storage": "7", "storage_offset": "8", "stride": "(1,)"}),
        entry("alone", np.ones(2, np.float32), extra={"storage": "9", "stride": "(1,)"}),
    ]
    blob = write(shared)
    archive = zipfile.ZipFile(io.BytesIO(blob))
    assert archive.read("model/data/0") == base.tobytes()
    assert archive.read("model/data/1") == np.ones(2, np.float32).tobytes()
    assert "model/data/2" not in archive.namelist()
    ops = pickle_ops(blob)
    # each tensor: BINPERSID, then offset and the size/stride tuples' ints
    after_pid = [ops[i + 1] for i, (name, _) in enumerate(ops) if name == "BINPERSID"]
    assert [arg for _, arg in after_pid] == [0, 0, 8, 0]


def test_conflicting_views_are_not_shared():
    a = np.zeros(4, np.float32)
    b = np.ones(4, np.float32)
    facts = {"storage": "0", "storage_offset": "0", "stride": "(1,)"}
    blob = write([entry("a", a, extra=facts), entry("b", b, extra=facts)])
    archive = zipfile.ZipFile(io.BytesIO(blob))
    assert archive.read("model/data/0") == a.tobytes()
    assert archive.read("model/data/1") == b.tobytes()


def test_stale_view_facts_and_sparse_storages_get_own_storage():
    big = np.arange(100, dtype=np.float32)
    entries = [
        entry("a", big[10:20], extra={"storage": "0", "storage_offset": "10", "stride": "(1,)"}),
        entry("b", big[50:60], extra={"storage": "0", "storage_offset": "50", "stride": "(1,)"}),
        # the stride has the wrong rank for the shape: an adapter reshaped it
        entry("c", np.ones((2, 2), np.float32), extra={"storage": "1", "stride": "(1,)"}),
        entry("d", np.ones((2, 2), np.float32), extra={"storage": "1", "stride": "(1,)"}),
    ]
    archive = zipfile.ZipFile(io.BytesIO(write(entries)))
    assert archive.read("model/data/0") == big[10:20].tobytes()  # shrunk, not 100 elements
    assert archive.read("model/data/1") == big[50:60].tobytes()
    assert len([n for n in archive.namelist() if "/data/" in n]) == 4


def test_streams_file_ranges(tmp_path):
    payload = np.arange(1000, dtype=np.int64)
    path = tmp_path / "src.bin"
    path.write_bytes(b"\x00" * 3 + payload.tobytes())
    with ByteSource(path) as source:
        data = FileData(source, 3, payload.nbytes)
        e = TensorEntry("x", DType.I64, (1000,), payload.nbytes, 3, data)
        with (tmp_path / "out.pt").open("wb") as out:
            write_zip(out, [e], {}, {})
    archive = zipfile.ZipFile(tmp_path / "out.pt")
    assert archive.namelist()[0] == "out/data.pkl"  # prefix from the file name
    assert archive.read("out/data/0") == payload.tobytes()


def test_zip64_fields_when_past_the_limit(monkeypatch):
    # Lower the 4 GiB threshold so small records take miniz's zip64 path; zipfile must agree.
    monkeypatch.setattr(_writer, "ZIP64_LIMIT", 100)
    values = np.arange(64, dtype=np.float32)  # 256 bytes >= limit, and offsets past it
    blob = write([entry("big", values), entry("small", np.ones(1, np.float32))])
    archive = zipfile.ZipFile(io.BytesIO(blob))
    assert archive.testzip() is None
    assert archive.read("model/data/0") == values.tobytes()
    info = archive.getinfo("model/data/0")
    assert info.header_offset > 100
    assert data_offset(blob, info) % 64 == 0
    local_extra = blob[info.header_offset + 30 + len(info.filename) :]
    assert local_extra[:4] == struct.pack("<HH", 1, 24)  # sizes + offset
    descriptor = data_offset(blob, info) + info.file_size
    assert struct.unpack_from("<IIQQ", blob, descriptor) == (0x08074B50, info.CRC, 256, 256)


def test_duplicate_names_are_refused():
    with pytest.raises(OutputError, match="appears twice"):
        write([entry("a", np.ones(1, np.float32)), entry("a", np.ones(1, np.float32))])


def test_short_tensor_bytes_are_an_error():
    bad = TensorEntry("x", DType.F32, (4,), 16, None, ComputedData(lambda: b"\x00" * 8))
    with pytest.raises(CorruptCheckpointError, match="has 8 bytes, expected 16"):
        write([bad])


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        ("/tmp/x/min_zip.pt", "min_zip"),
        ("model.ckpt.pt", "model.ckpt"),
        ("noext", "noext"),
        ("/tmp/.ckptctl-abc123.tmp", "archive"),
        (7, "archive"),
    ],
)
def test_archive_prefix_follows_torch(name, prefix):
    class Named(io.BytesIO):
        pass

    out = Named()
    out.name = name  # BytesIO has no name; files do
    assert archive_prefix(out) == prefix


def test_archive_prefix_of_buffer_is_archive():
    assert archive_prefix(io.BytesIO()) == "archive"


@pytest.mark.torch
def test_empty_checkpoint_like_torch(tmp_path):
    torch = pytest.importorskip("torch")
    torch.save(collections.OrderedDict(), tmp_path / "none.pt")
    assert_same_as_torch(write([], "none"), (tmp_path / "none.pt").read_bytes())


# --- torch reads what we write ----------------------------------------------------------------


@pytest.mark.torch
def test_torch_loads_every_dtype(tmp_path):
    torch = pytest.importorskip("torch")
    _, entries = entries_from_fixture("dtypes.pt")
    path = tmp_path / "dtypes.pt"
    path.write_bytes(write(entries, "dtypes"))
    loaded = torch.load(path, weights_only=True)
    assert list(loaded) == [e.name for e in entries]
    for e in entries:
        tensor = loaded[e.name]
        assert str(tensor.dtype) == f"torch.{TORCH_NAMES[e.dtype]}"
        assert tuple(tensor.shape) == e.shape
        raw = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
        assert raw == bytes(e.data.read()), e.name


@pytest.mark.torch
def test_torch_sees_shared_storage_again(tmp_path):
    torch = pytest.importorskip("torch")
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    expand = np.broadcast_to(np.arange(3, dtype=np.float32)[:, None], (3, 4))
    entries = [
        entry("base", base, extra={"storage": "0", "storage_offset": "0", "stride": "(4, 1)"}),
        entry("t", base.T, extra={"storage": "0", "storage_offset": "0", "stride": "(1, 4)"}),
        entry(
            "tail",
            base.reshape(-1)[5:],
            extra={"storage": "0", "storage_offset": "5", "stride": "(1,)"},
        ),
        entry("e", expand, extra={"storage": "1", "storage_offset": "0", "stride": "(1, 0)"}),
        entry("e2", expand[:, 0], extra={"storage": "1", "storage_offset": "0", "stride": "(1,)"}),
    ]
    path = tmp_path / "shared.pt"
    path.write_bytes(write(entries))
    loaded = torch.load(path, weights_only=True)
    ptr = loaded["base"].untyped_storage().data_ptr()
    assert loaded["t"].untyped_storage().data_ptr() == ptr
    assert loaded["tail"].untyped_storage().data_ptr() == ptr
    assert loaded["t"].stride() == (1, 4)
    assert loaded["tail"].storage_offset() == 5
    assert loaded["e"].stride() == (1, 0)
    assert loaded["e"].untyped_storage().nbytes() == 12  # 3 floats, not the expanded 12
    for e in entries:
        assert np.array_equal(loaded[e.name].numpy(), e.load()), e.name


@pytest.mark.torch
def test_same_bytes_as_torch_save_live(tmp_path):
    torch = pytest.importorskip("torch")
    weight = torch.arange(6.0).reshape(2, 3)
    state = collections.OrderedDict(
        weight=weight, t=weight.t(), half=torch.ones(3, dtype=torch.float16)
    )
    torch.save(state, tmp_path / "live.pt")
    entries = [
        entry(
            "weight",
            weight.numpy(),
            extra={"storage": "0", "storage_offset": "0", "stride": "(3, 1)"},
        ),
        entry(
            "t",
            weight.t().numpy(),
            extra={"storage": "0", "storage_offset": "0", "stride": "(1, 3)"},
        ),
        entry("half", np.ones(3, np.float16)),
    ]
    assert_same_as_torch(write(entries, "live"), (tmp_path / "live.pt").read_bytes())

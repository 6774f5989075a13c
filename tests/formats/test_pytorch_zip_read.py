"""Reading ZIP checkpoints and TorchScript archives (``docs/formats/pytorch.md``: zip container,
pickle, TorchScript): the archive's prefix, its metadata records, storage persistent ids, and
records whose headers lie.

Archives are written with the stdlib ``zipfile`` and the helpers of ``test_pytorch_reader``;
header fields are patched in place (APPNOTE 4.3) to reach the encrypted, unknown-method, bad-CRC
and wrong-size records, and what torch's miniz does with each is stated where we follow it.
Refusals are checked by class, a keyword and the facts the message must carry (the record, the
storage key, the byte counts); hints by a keyword.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ckptctl.errors import CkptError, CorruptCheckpointError, UnknownFormatError, UnsupportedError
from ckptctl.formats import open_checkpoint
from ckptctl.formats.pytorch import _containers, _zipdir
from ckptctl.formats.pytorch._containers import Parsed
from ckptctl.safety import Problem, Verdict
from ckptctl.sources import ByteSource
from tests.formats.test_pytorch_reader import (
    _zip_with_last_record,
    f32,
    glob,
    lit,
    pkl,
    storage_pid,
    tensor_v2,
    write_zip,
)
from tests.formats.test_pytorch_safety_walk import Says

STUB_CALL = glob("builtins", "int") + b")R"
#: the storage record every one_tensor_zip archive holds
RECORD = "'archive/data/0'"


# --- ZIP records ------------------------------------------------------------------------------


def patch_record(raw: bytearray, name: str, **fields: int) -> None:
    """Set header fields of one record in both its local and its central header (APPNOTE 4.3)."""
    local = {"flags": (6, "<H"), "method": (8, "<H"), "crc": (14, "<I"), "size": (22, "<I")}
    central = {"flags": (8, "<H"), "method": (10, "<H"), "crc": (16, "<I"), "size": (24, "<I")}
    for sig, layout, name_at in ((b"PK\x03\x04", local, 30), (b"PK\x01\x02", central, 46)):
        pos = raw.find(sig)
        while pos >= 0:
            if raw[pos + name_at : pos + name_at + len(name)] == name.encode():
                for field_, value in fields.items():
                    at, fmt = layout[field_]
                    struct.pack_into(fmt, raw, pos + at, value)
            pos = raw.find(sig, pos + 4)


def one_tensor_zip(
    tmp_path: Path, blob: bytes, numel: int, compression: int = zipfile.ZIP_DEFLATED,
    extra: dict[str, bytes] | None = None, **fields: int,
) -> Path:  # fmt: skip
    body = pkl(b"}(" + lit("w") + tensor_v2(storage_pid("FloatStorage", "0", numel), 0,
                                           (numel,), (1,)) + b"u")  # fmt: skip
    path = write_zip(tmp_path / "z.pt", body, {"0": blob}, compression=compression, extra=extra)
    if fields:
        raw = bytearray(path.read_bytes())
        patch_record(raw, "archive/data/0", **fields)
        path.write_bytes(bytes(raw))
    return path


def compressed_size(path: Path, name: str = "archive/data/0") -> int:
    with zipfile.ZipFile(path) as zf:
        return zf.getinfo(name).compress_size


def load_error(path: Path, error: type[CkptError] = CorruptCheckpointError) -> Any:
    with open_checkpoint(path) as ckpt, pytest.raises(error) as info:
        ckpt["w"].load()
    assert type(info.value) is error
    return info.value


def test_record_at_the_bomb_floor_loads(tmp_path: Path) -> None:
    # 1 MiB of zeros: LZMA gets far below 1/1100 of it, but 1 MiB is never refused.
    n = (1 << 20) // 4
    path = one_tensor_zip(tmp_path, bytes(4 * n), n, zipfile.ZIP_LZMA)
    assert compressed_size(path) * 1100 < 1 << 20
    with open_checkpoint(path) as ckpt:
        assert not ckpt["w"].load().any()


def test_record_past_the_bomb_floor_is_refused(tmp_path: Path) -> None:
    n = (1 << 20) // 4 + 1
    path = one_tensor_zip(tmp_path, bytes(4 * n), n, zipfile.ZIP_LZMA)
    size = compressed_size(path)
    err = load_error(path)
    assert err.message == Says(RECORD, f"{4 * n} bytes", f"{size} compressed", "1100:1", "bomb")
    assert err.hint == Says("1032:1", "crafted")


def test_big_deflated_record_under_the_ratio_loads(tmp_path: Path) -> None:
    n = (2 << 20) // 4
    path = one_tensor_zip(tmp_path, bytes(4 * n), n)
    assert (1 << 20) < 4 * n <= 1100 * compressed_size(path)
    with open_checkpoint(path) as ckpt:
        assert ckpt["w"].load().shape == (n,)


def test_deflated_record_with_a_wrong_crc(tmp_path: Path) -> None:
    # torch's miniz is built without CRC checks: it loads the bytes as they are, and so do we
    path = one_tensor_zip(tmp_path, f32(1, 2, 3), 3, crc=0x12345678)
    with open_checkpoint(path) as ckpt:
        np.testing.assert_array_equal(ckpt["w"].load(), [1, 2, 3])


def test_deflated_record_without_a_crc(tmp_path: Path) -> None:
    path = one_tensor_zip(tmp_path, f32(1, 2, 3), 3, crc=0)
    with open_checkpoint(path) as ckpt:
        np.testing.assert_array_equal(ckpt["w"].load(), [1, 2, 3])


def test_unsupported_compression_method(tmp_path: Path) -> None:
    path = one_tensor_zip(tmp_path, f32(1, 2, 3), 3, method=99)
    err = load_error(path, UnsupportedError)
    assert err.message == Says(RECORD, "compression method (99)")
    assert err.hint == Says("re-zip", "deflate")


def test_other_pickles_are_judged_even_after_an_unreadable_one(tmp_path: Path) -> None:
    extra = {"extra.pkl": pkl(lit(1)), "more.pkl": pkl(STUB_CALL)}
    path = one_tensor_zip(tmp_path, f32(1), 1, extra=extra)
    raw = bytearray(path.read_bytes())
    patch_record(raw, "archive/extra.pkl", flags=1)
    path.write_bytes(bytes(raw))
    with ByteSource(path) as source:
        parsed = _containers.read_zip(source)
    unread = Says("archive/extra.pkl", "not read")
    assert list(parsed.ledger.safety.problems) == [
        Problem(Says("cannot read", "'archive/extra.pkl'", "encrypted"), Verdict.NEEDS_TRUST,
                unread, False),
    ]  # fmt: skip
    found = [(g.name, g.where, g.reached) for g in parsed.ledger.safety.globals]
    assert ("builtins.int", Says("archive/more.pkl", "not read"), False) in found


def test_record_shorter_than_its_header_says(tmp_path: Path) -> None:
    body = pkl(b"}(" + lit("w") + tensor_v2(storage_pid("FloatStorage", "0", 4), 0, (4,), (1,))
               + b"u")  # fmt: skip
    path = write_zip(tmp_path / "z.pt", body, {"0": f32(1, 2, 3)}, compression=zipfile.ZIP_DEFLATED)
    raw = bytearray(path.read_bytes())
    patch_record(raw, "archive/data/0", size=16, crc=0)
    path.write_bytes(bytes(raw))
    err = load_error(path)
    assert err.message == Says(RECORD, "12 bytes", "expected 16")


def test_record_longer_than_its_header_says(tmp_path: Path) -> None:
    """Inflating stops one byte past the stated size: the message does not quote that byte count
    as the record's size (the record holds 64 bytes here, its header says 16)."""
    body = pkl(b"}(" + lit("w") + tensor_v2(storage_pid("FloatStorage", "0", 4), 0, (4,), (1,))
               + b"u")  # fmt: skip
    path = write_zip(tmp_path / "z.pt", body, {"0": f32(*range(16))},
                     compression=zipfile.ZIP_DEFLATED)  # fmt: skip
    raw = bytearray(path.read_bytes())
    patch_record(raw, "archive/data/0", size=16, crc=0)
    path.write_bytes(bytes(raw))
    err = load_error(path)
    assert err.message == Says(RECORD, "inflates", "16 bytes")
    assert "17" not in err.message


# --- TorchScript code records (docs/formats/pytorch.md#torchscript) ------------------------------


def script_members(tmp_path: Path, records: dict[str, bytes], *, encrypt: str | None = None
                   ) -> dict[str, tuple[list[str], list[str]]]:  # fmt: skip
    path = tmp_path / "ts.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for name, blob in records.items():
            zf.writestr(name, blob)
    if encrypt is not None:
        raw = bytearray(path.read_bytes())
        patch_record(raw, encrypt, flags=1)
        path.write_bytes(bytes(raw))
    with ByteSource(path) as source:
        return _containers._script_members(_zipdir.ZipRecords(source), "m/")


def members_of(name: str, params: list[str] | None, buffers: list[str] | None) -> bytes:
    text = f"class {name}(Module):\n"
    if params is not None:
        text += "  __parameters__ = [" + "".join(f'"{p}", ' for p in params) + "]\n"
    if buffers is not None:
        text += "  __buffers__ = [" + "".join(f'"{b}", ' for b in buffers) + "]\n"
    text += "  training : bool\n  def forward(self):\n    return None\n"
    return text.encode()


def test_classes_get_only_their_own_lists(tmp_path: Path) -> None:
    code = members_of("A", None, None) + members_of("B", ["b"], None) \
        + members_of("C", ["c1", "c2"], ["cb"]) + members_of("D", None, ["db"])  # fmt: skip
    found = script_members(tmp_path, {"m/code/__torch__/pkg/mod.py": code})
    assert found == {
        "__torch__.pkg.mod.A": ([], []),
        "__torch__.pkg.mod.B": (["b"], []),
        "__torch__.pkg.mod.C": (["c1", "c2"], ["cb"]),
        "__torch__.pkg.mod.D": ([], ["db"]),
    }


def test_only_python_records_under_code_are_read(tmp_path: Path) -> None:
    found = script_members(tmp_path, {
        "m/code/__torch__/x.py.debug_pkl": members_of("X", ["x"], None),
        "m/other/y.py": members_of("Y", ["y"], None),
        "m/code/__torch__.py": members_of("Z", ["z"], None),
    })  # fmt: skip
    assert found == {"__torch__.Z": (["z"], [])}


def test_code_with_invalid_utf8_is_read(tmp_path: Path) -> None:
    code = b"# \xff\xfe\n" + members_of("A", ["w"], None)
    assert script_members(tmp_path, {"m/code/a.py": code}) == {"a.A": (["w"], [])}


def test_unreadable_code_record_is_skipped(tmp_path: Path) -> None:
    records = {
        "m/code/a.py": members_of("A", ["a"], None),
        "m/code/b.py": members_of("B", ["b"], None),
    }
    found = script_members(tmp_path, records, encrypt="m/code/a.py")
    assert found == {"b.B": (["b"], [])}


# --- ZIP: the archive's prefix and records (docs/formats/pytorch.md#zip-container) ---------------


@pytest.mark.parametrize(
    ("names", "says", "hint"),
    [
        (["x.npy", "y.npy"], Says("NumPy .npz"), None),
        (["model.weights.h5"], Says("Keras"), None),
        (["config.json", "metadata.json"], Says("Keras"), None),
        (["config.json"], Says("without a data.pkl"), Says("<name>/data.pkl")),
        (["metadata.json", "x.h5"], Says("without a data.pkl"), Says("<name>/data.pkl")),
        (["a/b/data.pkl"], Says("without a data.pkl"), Says("<name>/data.pkl")),
    ],
)
def test_archive_of_no_checkpoint_is_named(
    tmp_path: Path, names: list[str], says: Says, hint: Says | None
) -> None:
    """Other zip-based formats are named (an .npz, a Keras model); an archive without a
    ``<name>/data.pkl`` record one level down is no PyTorch checkpoint, and the hint says what
    one holds."""
    err = zip_error(zip_file(tmp_path, dict.fromkeys(names, b"")), UnknownFormatError)
    assert (err.message, err.hint) == (says, hint)


def test_archive_of_several_checkpoints_names_them(tmp_path: Path) -> None:
    records = {"b/data.pkl": pkl(b"}"), "a/data.pkl": pkl(b"}"), "a/data/0": b""}
    err = zip_error(zip_file(tmp_path, records))
    assert err.message == Says("several checkpoints", "a/data.pkl, b/data.pkl")


def zpid(key: str, numel: object, *, stype: str = "FloatStorage", location: str = "cpu") -> bytes:
    """A ZIP storage persistent id: ('storage', type, key, location, numel)
    (docs/formats/pytorch.md#pickle)."""
    return b"(" + lit("storage") + glob("torch", stype) + lit(key) + lit(location) + lit(numel) \
        + b"tQ"  # fmt: skip


def zip_file(
    tmp_path: Path, records: dict[str, bytes], compression: int = zipfile.ZIP_STORED
) -> Path:
    path = tmp_path / "a.pt"
    with zipfile.ZipFile(path, "w", compression=compression) as zf:
        for name, blob in records.items():
            zf.writestr(name, blob)
    return path


def read_zip_file(path: Path) -> Parsed:
    with ByteSource(path) as source:
        return _containers.read_zip(source)


def zip_error(path: Path, error: type[CkptError] = CorruptCheckpointError) -> Any:
    with pytest.raises(error) as info:
        read_zip_file(path)
    assert type(info.value) is error
    return info.value


def test_zip_at_the_archive_root_and_metadata(tmp_path: Path) -> None:
    records = {
        "data.pkl": pkl(zpid("0", 2)),
        "data/0": f32(1, 2),
        "byteorder": b"little\n",
        "version": b"3\n",
        ".data/version": b"1\n",
    }
    parsed = read_zip_file(zip_file(tmp_path, records))
    refusal = Says("torch.load refuses", "'data.pkl'", "not in a folder")
    assert parsed.notes == [Says("archive root", "torch", "refuse")]
    assert parsed.metadata == {"byteorder": "little", "version": "1"}
    assert parsed.format == "pytorch-zip"
    assert parsed.ledger.safety.problems == (
        Problem(refusal, Verdict.NEEDS_TRUST, "the archive", torch_refuses=True),
    )


def test_big_endian_zip(tmp_path: Path) -> None:
    records = {"a/data.pkl": pkl(zpid("0", 2)), "a/data/0": f32(1, 2), "a/byteorder": b"big",
               "a/version": b"3\n"}  # fmt: skip
    parsed = read_zip_file(zip_file(tmp_path, records))
    assert parsed.byteorder == "big"
    assert parsed.notes == []
    assert parsed.metadata == {"byteorder": "big", "version": "3"}


def test_unknown_byteorder(tmp_path: Path) -> None:
    records = {"a/data.pkl": pkl(lit(None)), "a/byteorder": b"middle"}
    err = zip_error(zip_file(tmp_path, records))
    assert err.message == Says("byteorder", "'middle'")


@pytest.mark.parametrize(("size", "ok"), [(256, True), (257, False)])
def test_text_record_size_limit_inclusive(tmp_path: Path, size: int, ok: bool) -> None:
    records = {"a/data.pkl": pkl(lit(None)), "a/version": b"3".ljust(size)}
    path = zip_file(tmp_path, records)
    if ok:
        assert read_zip_file(path).metadata == {"version": "3"}
    else:
        err = zip_error(path)
        assert err.message == Says("'a/version'", "larger than 256 bytes")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (lit(("storagX", 1, "0", "cpu", 2)) + b"Q", Says("unexpected persistent id", "data.pkl")),
        (b"(" + lit("storagX") + glob("torch", "FloatStorage") + lit("0") + lit("cpu") + lit(2)
         + b"tQ", Says("unexpected persistent id", "data.pkl")),
        (lit(5) + b"Q", Says("unexpected persistent id", "data.pkl")),
        (b"P0\n", Says("text persistent id", "data.pkl", "protocol 0")),
        (b"(" + lit("storage") + lit("FloatStorage") + lit("0") + lit("cpu") + lit(2) + b"tQ",
         Says("malformed storage persistent id", "data.pkl")),
        (b"(" + lit("storage") + glob("torch", "FloatStorage") + lit(None) + lit("cpu") + lit(2)
         + b"tQ", Says("malformed storage persistent id", "data.pkl")),
        (zpid("0", -1), Says("malformed storage '0'", "data.pkl")),
        (zpid("0", "2"), Says("malformed storage '0'", "data.pkl")),
        (zpid("k" * 65, 2), Says(f"malformed storage {'k' * 65!r}", "data.pkl")),
        (zpid("5", 2), Says("'a/data/5'", "missing")),
        (b"(" + zpid("0", 2) + zpid("0", 1, stype="IntStorage") + b"t",
         Says("'0'", "two different types")),
    ],
)  # fmt: skip
def test_zip_persistent_id_errors(tmp_path: Path, value: bytes, says: Says) -> None:
    records = {"a/data.pkl": pkl(value), "a/data/0": f32(1, 2)}
    assert zip_error(zip_file(tmp_path, records)).message == says


def test_zip_storage_refs(tmp_path: Path) -> None:
    key = "k" * 64
    root = b"(" + zpid("0", 2, location="cuda:0") + zpid("0", 2) + zpid(key, 0) \
        + zpid("sub/1", 1) + b"t"  # fmt: skip
    # torch reads storage KEY from data/KEY, a KEY with a "/" too (never from <prefix>/KEY)
    records = {"a/data.pkl": pkl(root), "a/data/0": f32(1, 2), f"a/data/{key}": b"",
               "a/data/sub/1": f32(3), "a/sub/1": f32(4, 5), "a/version": b"3"}  # fmt: skip
    parsed = read_zip_file(zip_file(tmp_path, records))
    assert isinstance(parsed.root, tuple)
    first, again, empty, sub = parsed.root
    assert again is first  # one StorageRef per key
    assert (first.key, first.numel, first.location) == ("0", 2, "cuda:0")
    assert (empty.key, empty.numel) == (key, 0)
    assert sub.key == "sub/1"
    assert sorted(parsed.storages) == ["0", key, "sub/1"]
    assert parsed.storages["sub/1"].nbytes == 4
    assert parsed.ledger.safety.problems == ()
    with ByteSource(zip_file(tmp_path, records)) as source:
        assert bytes(_containers.read_zip(source).storages["sub/1"].load()) == f32(3)


def test_compressed_storage_records_are_noted(tmp_path: Path) -> None:
    records = {"a/data.pkl": pkl(b"(" + zpid("0", 2) + zpid("1", 1) + b"t"),
               "a/data/0": f32(1, 2), "a/data/1": f32(3), "a/version": b"3"}  # fmt: skip
    parsed = read_zip_file(zip_file(tmp_path, records, zipfile.ZIP_DEFLATED))
    assert parsed.notes == [Says("2 storage record(s)", "compressed", "mmap=True")]
    assert (parsed.storages["0"].note, parsed.storages["0"].file_offset) == ("compressed", None)


def test_torchscript_archive_note(tmp_path: Path) -> None:
    records = {"a/data.pkl": pkl(lit(None)), "a/constants.pkl": pkl(b")"), "a/version": b"3"}
    parsed = read_zip_file(zip_file(tmp_path, records))
    assert parsed.format == "torchscript"
    assert parsed.ledger.safety.problems == (
        Problem(
            Says("TorchScript", "weights_only=True", "torch.jit.load runs"),
            Verdict.NEEDS_TRUST,
            "the archive",
        ),
    )


def test_directory_entries_are_not_records(tmp_path: Path) -> None:
    path = tmp_path / "d.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("a/data.pkl", pkl(lit(None)))
        zf.mkdir("a/data")
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.mkdir("a/data")
    assert read_zip_file(path).root is None


@pytest.mark.parametrize("second", [lit(None), lit(1)])
def test_duplicate_record_names(tmp_path: Path, second: bytes) -> None:
    # torch reads one of two equal names (miniz's sorted search); only different bytes matter
    path = tmp_path / "d.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("a/data.pkl", pkl(lit(None)))
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr("a/data.pkl", pkl(second))
        zf.writestr("a/version", b"3")
    parsed = read_zip_file(path)
    problems = [p for p in parsed.ledger.safety.problems if p.verdict is Verdict.UNSAFE]
    if second == lit(None):
        assert problems == []
    else:
        assert [p.message for p in problems] == [Says("different pickles")]


@pytest.mark.parametrize(
    ("other", "same"),
    [
        (lambda r, size: r["a/data.pkl"], True),  # the record itself
        (lambda r, size: r["a/x"], True),  # another record, equal bytes
        (lambda r, size: r["a/y"], False),  # other bytes
        # the same place but another size or method: not the same record's bytes
        (lambda r, size: r["a/data.pkl"]._replace(file_size=r["a/data.pkl"].file_size + 1), False),
        (lambda r, size: r["a/data.pkl"]._replace(method=8), False),
        (lambda r, size: r["a/data.pkl"]._replace(compress_size=r["a/x"].compress_size + 1), False),
        (lambda r, size: r["a/x"]._replace(header_offset=size - 2), False),  # unreadable
    ],
)
def test_same_bytes_of_two_records(tmp_path: Path, other: Any, same: bool) -> None:
    """Whether two directory entries (twins of one name, or two directories) give one data."""
    path = tmp_path / "d.pt"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in (("a/data.pkl", pkl(lit(None))), ("a/x", pkl(lit(None))),
                           ("a/y", pkl(lit(1)))):  # fmt: skip
            zf.writestr(name, data)
    with ByteSource(path) as source:
        records = _zipdir.ZipRecords(source)
        main = records.infos["a/data.pkl"]
        view = _containers._ZipView(records, "a/", main, None)
        assert _containers._same_bytes(view, main, other(records.infos, source.size)) is same


def test_encrypted_storage_record(tmp_path: Path) -> None:
    path = one_tensor_zip(tmp_path, f32(1, 2, 3), 3, zipfile.ZIP_STORED, flags=1)
    with pytest.raises(UnsupportedError) as info:
        open_checkpoint(path)
    assert info.value.message == Says(RECORD, "encrypted")


def test_stored_record_with_a_wrong_size_is_not_zero_copy(tmp_path: Path) -> None:
    # method 0 but compressed size != size: read through zipfile, which finds 12 bytes.
    path = one_tensor_zip(tmp_path, f32(1, 2, 3), 4, zipfile.ZIP_STORED, size=16)
    err = load_error(path)
    assert err.message == Says(RECORD, "12 bytes", "expected 16")


def test_record_past_the_central_directory_hint(tmp_path: Path) -> None:
    path = _zip_with_last_record(tmp_path, 4)
    err = zip_error(path)
    assert err.message == Says(RECORD, "runs past", "central directory")
    assert err.hint == Says("truncated or damaged")

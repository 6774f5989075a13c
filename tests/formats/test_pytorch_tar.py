"""Reading a TAR checkpoint (torch < 0.1.10, docs/formats/pytorch.md#tar), member by member.

Checkpoints are built here with the stdlib ``tarfile`` and hand-assembled protocol-2 pickles
(``sys_info``, ``pickle``, ``tensors``, ``storages``) and checked against the research notes' worked
example (its bytes and the values torch loads from it). Every check of the reader is probed on
both sides of its limit; refusals are checked by class, exit code, a keyword and the facts the
message must carry (the member, the storage or tensor key, the byte position).
"""

from __future__ import annotations

import gzip
import io
import pickle
import struct
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ckptctl.dtypes import DType
from ckptctl.errors import CkptError, CorruptCheckpointError, ExitCode, UnsupportedError
from ckptctl.formats import open_checkpoint
from ckptctl.formats.pytorch._containers import (
    MAX_STORAGES,
    MAX_TAR_MEMBERS,
    Parsed,
    ViewReader,
    read_tar,
)
from ckptctl.formats.pytorch._scan import PickleTruncatedError
from ckptctl.formats.pytorch._unpickler import MAX_RANK, StorageRef, Stub, TensorRef
from ckptctl.formats.pytorch._verdict import Ledger
from ckptctl.safety import Verdict
from ckptctl.sources import ByteSource
from tests.formats.test_pytorch_reader import f32, glob, lit, pkl, tensor_v2
from tests.formats.test_pytorch_safety_walk import Says


def assert_tar_note(ledger: Ledger) -> None:
    """The one problem of a TAR checkpoint: torch's safe loader refuses the format."""
    [note] = ledger.safety.problems
    assert (note.verdict, note.where) == (Verdict.NEEDS_TRUST, "the archive")
    assert note.message == Says("TAR format", "weights_only=True")


# --- a TAR checkpoint builder (docs/formats/pytorch.md#tar) ------------------------------------

#: The research notes' worked example, member by member ("Minimal faithful example").
SPEC_PICKLE = bytes.fromhex(
    "80027d710028580100000077710158040000003230303151580100000062710258040000003230303251752e"
)
SPEC_TENSOR_HEAD = bytes.fromhex("8002284dd1074de90363746f7263680a466c6f617454656e736f720a742e")
SPEC_STORAGE_HEAD = bytes.fromhex(
    "8002284de9035803000000637075710063746f7263680a466c6f617453746f726167650a742e"
)
SPEC_OFFSETS = {"sys_info": 512, "pickle": 1536, "tensors": 2560, "storages": 3584}
SPEC_SIZES = {"sys_info": 116, "pickle": 44, "tensors": 145, "storages": 81}

SYS_INFO = pickle.dumps(
    {"protocol_version": 1000, "little_endian": True,
     "type_sizes": {"short": 2, "int": 4, "long": 8}},
    protocol=2,
)  # fmt: skip

FLOAT_TENSOR = glob("torch", "FloatTensor")


def count(n: object) -> bytes:
    return pickle.dumps(n, protocol=2)


def storage(
    key: object, numel: int, data: bytes, *, stype: bytes = glob("torch", "FloatStorage"),
    location: str = "cpu",
) -> bytes:  # fmt: skip
    """One storage record: the ``(key, location, type)`` pickle, an i64 count, the elements."""
    return pkl(b"(" + lit(key) + lit(location) + stype + b"t") + struct.pack("<q", numel) + data


def tensor(
    key: object, skey: object, size: tuple[int, ...], stride: tuple[int, ...], offset: int,
    cls: bytes = FLOAT_TENSOR,
) -> bytes:  # fmt: skip
    """One tensor record: the ``(key, storage key, class)`` pickle, i32 ndim + 4 pad bytes,
    the sizes, the strides and the storage offset (all i64)."""
    ndim = len(size)
    head = pkl(b"(" + lit(key) + lit(skey) + cls + b"t")
    return head + struct.pack(f"<i4x{2 * ndim + 1}q", ndim, *size, *stride, offset)


NO_VIEWS = object()


def storages(*records: bytes, views: object = (), n: object = None) -> bytes:
    """The ``storages`` member: N, the records, then the view list (omitted for NO_VIEWS)."""
    out = count(len(records) if n is None else n) + b"".join(records)
    if views is not NO_VIEWS:
        out += pickle.dumps(list(views) if isinstance(views, tuple) else views, protocol=2)
    return out


def tensors(*records: bytes, n: object = None) -> bytes:
    return count(len(records) if n is None else n) + b"".join(records)


def pid(key: str) -> bytes:
    """A string persistent id (``BINPERSID``), as the TAR writer pickles tensors."""
    return lit(key) + b"Q"


def main(**items: bytes) -> bytes:
    """The ``pickle`` member: a dict of name -> the opcodes of its value."""
    body = b"}"
    if items:
        body += b"(" + b"".join(lit(k) + v for k, v in items.items()) + b"u"
    return pkl(body)


SPEC_TENSORS = tensors(
    tensor(2001, 1001, (2, 3), (3, 1), 0),
    tensor(2002, 1001, (2,), (1,), 4),
)
SPEC_STORAGES = storages(storage(1001, 6, f32(1, 2, 3, 4, 5, 6)))


def build(
    members: Sequence[tuple[str, bytes | None]] | None = None,
    *,
    pickle_: bytes | None = SPEC_PICKLE,
    tensors_: bytes | None = SPEC_TENSORS,
    storages_: bytes | None = SPEC_STORAGES,
    sys_info: bytes | None = SYS_INFO,
) -> bytes:
    """A tar checkpoint: the four members in the writer's order (None leaves one out), or
    exactly ``members`` when given (a None payload makes a directory member)."""
    if members is None:
        members = [
            (name, data)
            for name, data in [
                ("sys_info", sys_info), ("pickle", pickle_), ("tensors", tensors_),
                ("storages", storages_),
            ]
            if data is not None
        ]  # fmt: skip
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write(tmp_path: Path, data: bytes, name: str = "t.pt") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def offset_of(data: bytes, name: str) -> int:
    """Where a member's data starts, as the stdlib's tarfile finds it."""
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return archive.getmember(name).offset_data


def parse(tmp_path: Path, data: bytes) -> Parsed:
    with ByteSource(write(tmp_path, data)) as source:
        return read_tar(source)


def tar_error(tmp_path: Path, data: bytes, error: type[CkptError] = CorruptCheckpointError) -> Any:
    with pytest.raises(error) as info:
        parse(tmp_path, data)
    assert type(info.value) is error
    if isinstance(info.value, CorruptCheckpointError):
        assert info.value.exit_code == ExitCode.INPUT
    return info.value


def ref(parsed: Parsed, name: str) -> TensorRef:
    assert isinstance(parsed.root, dict)
    found = parsed.root[name]
    assert isinstance(found, TensorRef)
    return found


def assert_tensor(
    t: TensorRef, key: str, size: tuple[int, ...], stride: tuple[int, ...], offset: int,
    dtype: str = "float32",
) -> None:  # fmt: skip
    assert (t.size, t.stride, t.offset, t.dtype) == (size, stride, offset, dtype)
    assert t.storage is not None
    assert t.storage.key == key


# --- the research notes' example ---------------------------------------------------------------


def test_builder_writes_the_spec_example() -> None:
    data = build()
    assert data[257:262] == b"ustar"
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        found = {m.name: (m.offset_data, m.size) for m in archive}
    assert found == {name: (SPEC_OFFSETS[name], SPEC_SIZES[name]) for name in SPEC_OFFSETS}
    assert SPEC_TENSORS[5:].startswith(SPEC_TENSOR_HEAD)
    assert SPEC_STORAGES[5:].startswith(SPEC_STORAGE_HEAD)
    assert SPEC_STORAGES.endswith(bytes.fromhex("80025d71002e"))  # views: []


def test_spec_example_loads_what_torch_loads(tmp_path: Path) -> None:
    path = write(tmp_path, build())
    # The first element sits after N, the storage header and the i64 count
    # (docs/formats/pytorch.md#tar).
    first = SPEC_OFFSETS["storages"] + 5 + len(SPEC_STORAGE_HEAD) + 8
    with open_checkpoint(path) as ckpt:
        assert ckpt.format == "pytorch-tar"
        assert list(ckpt) == ["w", "b"]
        w, b = ckpt["w"], ckpt["b"]
        assert (w.dtype, w.shape, w.nbytes, w.offset) == (DType.F32, (2, 3), 24, first)
        assert (b.dtype, b.shape, b.nbytes, b.offset) == (DType.F32, (2,), 8, first + 16)
        np.testing.assert_array_equal(w.load(), [[1, 2, 3], [4, 5, 6]])
        np.testing.assert_array_equal(b.load(), [5, 6])


def test_spec_example_parsed(tmp_path: Path) -> None:
    parsed = parse(tmp_path, build())
    assert parsed.format == "pytorch-tar"
    assert_tensor(ref(parsed, "w"), "1001", (2, 3), (3, 1), 0)
    assert_tensor(ref(parsed, "b"), "1001", (2,), (1,), 4)
    root = ref(parsed, "w").storage
    assert root is not None
    assert (root.numel, root.location, root.view, root.stype.qualname) == (
        6, "cpu", None, "torch.FloatStorage",
    )  # fmt: skip
    assert ref(parsed, "b").storage is root
    first = SPEC_OFFSETS["storages"] + 5 + len(SPEC_STORAGE_HEAD) + 8
    assert list(parsed.storages) == ["1001"]
    stored = parsed.storages["1001"]
    assert (stored.nbytes, stored.file_offset, stored.note) == (24, first, None)
    assert_tar_note(parsed.ledger)
    assert [(g.name, g.where) for g in parsed.ledger.safety.globals] == [
        ("torch.FloatStorage", "the tar storages member"),
        ("torch.FloatTensor", "the tar tensors member"),
        ("torch.FloatTensor", "the tar tensors member"),
    ]
    assert parsed.ledger.safety.verdict is Verdict.NEEDS_TRUST


def test_tar_note_is_added_to_a_given_ledger(tmp_path: Path) -> None:
    ledger = Ledger()
    with ByteSource(write(tmp_path, build())) as source:
        parsed = read_tar(source, ledger)
    assert parsed.ledger is ledger
    assert_tar_note(ledger)


# --- read_tar: the archive --------------------------------------------------------------------


def test_sixteen_members_are_read_and_a_seventeenth_is_refused(tmp_path: Path) -> None:
    # Members may repeat (the last one wins); only their number is limited.
    extra = [("sys_info", SYS_INFO)] * (MAX_TAR_MEMBERS - 3)
    rest = [("pickle", SPEC_PICKLE), ("tensors", SPEC_TENSORS), ("storages", SPEC_STORAGES)]
    parsed = parse(tmp_path, build(extra + rest))
    assert list(parsed.root) == ["w", "b"]  # type: ignore[call-overload]
    err = tar_error(tmp_path, build([*extra, ("sys_info", SYS_INFO), *rest]))
    assert err.message == Says("too many members")
    assert err.hint is None


@pytest.mark.parametrize(
    ("name", "payload"),
    [
        ("weights", b"x"),  # a regular file with a foreign name
        ("pickle", None),  # a directory with a member's name
        ("./pickle", SPEC_PICKLE),
    ],
)
def test_unexpected_member_is_refused(tmp_path: Path, name: str, payload: bytes | None) -> None:
    members = [("sys_info", SYS_INFO), (name, payload), ("pickle", SPEC_PICKLE),
               ("tensors", SPEC_TENSORS), ("storages", SPEC_STORAGES)]  # fmt: skip
    err = tar_error(tmp_path, build(members))
    assert err.message == Says("unexpected tar member", repr(name))


def test_corrupt_tar_names_the_tarfile_error(tmp_path: Path) -> None:
    data = bytearray(build())
    data[148] ^= 1  # the first header's checksum
    with pytest.raises(tarfile.TarError) as truth:  # the stdlib's own words
        tarfile.open(fileobj=io.BytesIO(bytes(data)), mode="r:").close()
    err = tar_error(tmp_path, bytes(data))
    assert err.message == Says("corrupt tar", str(truth.value))
    assert "bad checksum" in err.message


def test_compressed_tar_is_not_read(tmp_path: Path) -> None:
    # Only an uncompressed tar is a torch checkpoint ("r:", not tarfile's transparent "r").
    data = gzip.compress(build())
    with pytest.raises(tarfile.TarError) as truth:  # the stdlib's own words
        tarfile.open(fileobj=io.BytesIO(data), mode="r:").close()
    err = tar_error(tmp_path, data)
    assert err.message == Says("corrupt tar", str(truth.value))


@pytest.mark.parametrize("left_out", ["pickle", "storages"])
def test_pickle_and_storages_members_are_required(tmp_path: Path, left_out: str) -> None:
    members = [("sys_info", SYS_INFO), ("pickle", SPEC_PICKLE), ("tensors", SPEC_TENSORS),
               ("storages", SPEC_STORAGES)]  # fmt: skip
    err = tar_error(tmp_path, build([m for m in members if m[0] != left_out]))
    assert err.message == Says("lacks", left_out)


def test_members_are_found_by_name_not_by_position(tmp_path: Path) -> None:
    members = [("storages", SPEC_STORAGES), ("tensors", SPEC_TENSORS), ("pickle", SPEC_PICKLE)]
    parsed = parse(tmp_path, build(members))
    assert_tensor(ref(parsed, "b"), "1001", (2,), (1,), 4)


def test_main_pickle_errors_name_the_tar_pickle(tmp_path: Path) -> None:
    err = tar_error(tmp_path, build(pickle_=b"\x80\x02}"), PickleTruncatedError)
    assert err.message == Says("the tar pickle", "byte 3", "no STOP")


def test_main_pickle_ends_at_its_member(tmp_path: Path) -> None:
    # The pickle member holds no STOP: the reader must not run on into the padding/next member.
    cut = SPEC_PICKLE[:-1]
    err = tar_error(tmp_path, build(pickle_=cut), PickleTruncatedError)
    assert err.message == Says("the tar pickle", f"byte {len(cut)}", "no STOP")


# --- read_tar: persistent ids in the main pickle ----------------------------------------------


def test_tensor_keys_as_str_and_bytes(tmp_path: Path) -> None:
    # BINBYTES persistent ids (a bytes key) name the same objects as str ones.
    body = main(w=pid("2001"), b=b"C\x042002Q")
    parsed = parse(tmp_path, build(pickle_=body))
    assert_tensor(ref(parsed, "w"), "1001", (2, 3), (3, 1), 0)
    assert_tensor(ref(parsed, "b"), "1001", (2,), (1,), 4)


@pytest.mark.parametrize(
    ("value", "key"),
    [(pid("9"), "9"), (b"C\x02\xff9Q", "\ufffd9"), (b"C\x0520019Q", "20019")],
)
def test_unknown_key_is_refused(tmp_path: Path, value: bytes, key: str) -> None:
    err = tar_error(tmp_path, build(pickle_=main(w=value)))
    assert err.message == Says("tar pickle", "unknown object", repr(key))


def test_storage_key_without_tensors_member(tmp_path: Path) -> None:
    parsed = parse(tmp_path, build(pickle_=main(s=pid("1001"), t=b"C\x041001Q"), tensors_=None))
    assert isinstance(parsed.root, dict)
    s, t = parsed.root["s"], parsed.root["t"]
    assert isinstance(s, StorageRef)
    assert s is t
    assert (s.key, s.numel, s.stype.dtype) == ("1001", 6, "float32")


def test_storage_key_with_tensors_member_is_the_root_storage(tmp_path: Path) -> None:
    parsed = parse(tmp_path, build(pickle_=main(s=pid("1001"), w=pid("2001"))))
    assert isinstance(parsed.root, dict)
    assert parsed.root["s"] is ref(parsed, "w").storage


def test_module_class_persistent_id(tmp_path: Path) -> None:
    # nn.Module classes: (class, source file, source text); the class itself is the value.
    module = (
        b"(" + glob("torch.nn.modules.linear", "Linear") + lit("linear.py") + lit("src") + b"tQ"
    )
    parsed = parse(tmp_path, build(pickle_=main(m=module)))
    assert isinstance(parsed.root, dict)
    cls = parsed.root["m"]
    assert isinstance(cls, type)
    assert issubclass(cls, Stub)
    assert cls.qualname == "torch.nn.modules.linear.Linear"


@pytest.mark.parametrize(
    "value",
    [
        lit(("a", "b", "c")) + b"Q",  # three elements, the first no class
        b"(" + glob("torch.nn", "Linear") + lit("f") + b"tQ",  # a class, but two elements
        b"(" + glob("torch.nn", "Linear") + lit("f") + lit("s") + lit("x") + b"tQ",
        lit(7) + b"Q",
        lit(("storag", 1, "1001", "cpu", 6)) + b"Q",
        lit(("x", "storage", "1001", "cpu", 6)) + b"Q",
        lit(("storage", 1, "1001", "cpu", 6, None)) + b"Q",
    ],
)
def test_unexpected_persistent_id(tmp_path: Path, value: bytes) -> None:
    err = tar_error(tmp_path, build(pickle_=main(w=value)))
    assert err.message == Says("unexpected persistent id", "tar pickle")


def burn_storage(key: str, numel: int = 6, stype: str = "FloatStorage") -> bytes:
    return b"(" + lit("storage") + glob("torch", stype) + lit(key) + lit("cpu") + lit(numel) + b"t"


def test_burn_variant_storage_tuples(tmp_path: Path) -> None:
    # burn's synthetic files: no tensors member, ('storage', ...) tuples passed straight to
    # _rebuild_tensor_v2 or as a persistent id.
    body = main(
        w=tensor_v2(burn_storage("1001"), 0, (2, 3), (3, 1)),
        b=tensor_v2(burn_storage("1001") + b"Q", 4, (2,), (1,)),
        s=burn_storage("1001") + b"Q",
    )
    path = write(tmp_path, build(pickle_=body, tensors_=None))
    with ByteSource(path) as source:
        parsed = read_tar(source)
    assert_tensor(ref(parsed, "w"), "1001", (2, 3), (3, 1), 0)
    assert_tensor(ref(parsed, "b"), "1001", (2,), (1,), 4)
    assert isinstance(parsed.root, dict)
    assert parsed.root["s"] is ref(parsed, "w").storage
    with open_checkpoint(path) as ckpt:
        np.testing.assert_array_equal(ckpt["w"].load(), [[1, 2, 3], [4, 5, 6]])
        np.testing.assert_array_equal(ckpt["b"].load(), [5, 6])


def test_rebuild_over_a_string_persistent_id(tmp_path: Path) -> None:
    body = main(w=tensor_v2(pid("1001"), 1, (5,), (1,)))
    parsed = parse(tmp_path, build(pickle_=body, tensors_=None))
    assert_tensor(ref(parsed, "w"), "1001", (5,), (1,), 1)


@pytest.mark.parametrize("as_pid", [False, True])
def test_burn_variant_unknown_storage(tmp_path: Path, as_pid: bool) -> None:
    value = burn_storage("cpu") + (b"Q" if as_pid else b"")
    body = main(w=tensor_v2(value, 0, (1,), (1,)))
    err = tar_error(tmp_path, build(pickle_=body, tensors_=None))
    assert err.message == Says("unknown storage", "'cpu'")


def test_other_tuples_reach_rebuild_unchanged(tmp_path: Path) -> None:
    # Only a 5-tuple starting with 'storage' is a storage: others are refused by the rebuild.
    for value in (lit(("storage", 1, "1001", "cpu")), lit(("storagE", 1, "1001", "cpu", 6))):
        err = tar_error(
            tmp_path, build(pickle_=main(w=tensor_v2(value, 0, (1,), (1,))), tensors_=None)
        )
        assert err.message == Says("not a storage")


def ledger_globals(data: bytes, tmp_path: Path) -> list[tuple[str, str]]:
    """(global, stream) of everything the reader judged, also when it then refuses the file."""
    ledger = Ledger()
    with ByteSource(write(tmp_path, data)) as source, pytest.raises(CkptError):
        read_tar(source, ledger)
    return [(g.name, g.where) for g in ledger.safety.globals]


def test_main_pickle_is_judged(tmp_path: Path) -> None:
    body = main(w=tensor_v2(burn_storage("1001"), 0, (2, 3), (3, 1)))
    parsed = parse(tmp_path, build(pickle_=body, tensors_=None))
    assert [(g.name, g.where) for g in parsed.ledger.safety.globals] == [
        ("torch.FloatStorage", "the tar storages member"),
        ("torch._utils._rebuild_tensor_v2", "the tar pickle"),
        ("torch.FloatStorage", "the tar pickle"),
        ("collections.OrderedDict", "the tar pickle"),
    ]


# --- _tar_storages ----------------------------------------------------------------------------

STUB_INT = pkl(glob("builtins", "int") + b")R")  # an object the pickle makes, not an int


@pytest.mark.parametrize("n", [-1, MAX_STORAGES + 1, True, "1", 1.0])
def test_bad_storage_count(tmp_path: Path, n: object) -> None:
    err = tar_error(tmp_path, build(storages_=storages(n=n)))
    assert err.message == Says("storages member", "storage count")


def test_storage_count_at_the_limit_is_read(tmp_path: Path) -> None:
    # MAX_STORAGES passes the count check; the member then ends before the first header.
    data = count(MAX_STORAGES)
    err = tar_error(tmp_path, build(storages_=data), PickleTruncatedError)
    assert err.message == Says("storages member", "byte 0", "no STOP")


def test_storage_count_pickle_is_judged(tmp_path: Path) -> None:
    found = ledger_globals(build(storages_=STUB_INT + SPEC_STORAGES[5:]), tmp_path)
    assert found == [("builtins.int", "the tar storages member")]


def test_no_storages(tmp_path: Path) -> None:
    parsed = parse(tmp_path, build(pickle_=main(), tensors_=tensors(), storages_=storages()))
    assert parsed.root == {}
    assert parsed.storages == {}


@pytest.mark.parametrize(
    "head",
    [
        lit(5),
        b"(" + lit(1001) + lit("cpu") + b"t",
        b"(" + lit(1001) + lit("cpu") + glob("torch", "FloatStorage") + lit(6) + b"t",
        b"(" + lit(1001) + lit("cpu") + lit("FloatStorage") + b"t",
        b"(" + glob("torch", "FloatStorage") + lit(1001) + lit("cpu") + b"t",
        b"](" + lit(1001) + lit("cpu") + glob("torch", "FloatStorage") + b"e",
    ],
)
def test_malformed_storage_header(tmp_path: Path, head: bytes) -> None:
    data = count(1) + pkl(head) + struct.pack("<q", 0) + count([])
    err = tar_error(tmp_path, build(storages_=data))
    assert err.message == Says("storages member", "malformed storage header")


def test_storage_key_location_and_type(tmp_path: Path) -> None:
    rec = storage(7, 2, struct.pack("<2d", 1.5, -2.0), stype=glob("torch", "DoubleStorage"),
                  location="cuda:1")  # fmt: skip
    data = build(pickle_=main(s=pid("7")), tensors_=None, storages_=storages(rec))
    parsed = parse(tmp_path, data)
    start = offset_of(data, "storages") + len(count(1)) + len(rec) - 16
    assert isinstance(parsed.root, dict)
    s = parsed.root["s"]
    assert isinstance(s, StorageRef)
    assert (s.key, s.location, s.numel, s.view, s.inline) == ("7", "cuda:1", 2, None, None)
    assert (s.stype.qualname, s.stype.dtype) == ("torch.DoubleStorage", "float64")
    stored = parsed.storages["7"]
    assert (stored.nbytes, stored.file_offset) == (16, start)
    assert data[start : start + 16] == struct.pack("<2d", 1.5, -2.0)


def test_two_storages_follow_each_other(tmp_path: Path) -> None:
    first = storage(1, 3, f32(1, 2, 3))
    second = storage(2, 2, b"\x05\x06", stype=glob("torch.storage", "UntypedStorage"))
    data = build(pickle_=main(a=pid("1"), b=pid("2")), tensors_=None,
                 storages_=storages(first, second))  # fmt: skip
    parsed = parse(tmp_path, data)
    base = offset_of(data, "storages") + len(count(2))
    a, b = parsed.storages["1"], parsed.storages["2"]
    assert (a.nbytes, a.file_offset) == (12, base + len(first) - 12)
    assert (b.nbytes, b.file_offset) == (2, base + len(first) + len(second) - 2)
    assert data[b.file_offset : b.file_offset + 2] == b"\x05\x06"  # type: ignore[operator]


@pytest.mark.parametrize("left", range(8))
def test_storage_count_cut_short(tmp_path: Path, left: int) -> None:
    data = count(1) + pkl(b"(" + lit(1001) + lit("cpu") + glob("torch", "FloatStorage") + b"t")
    err = tar_error(tmp_path, build(storages_=data + b"\0" * left))
    assert err.message == Says("storages member", "truncated")


def test_empty_storage_ends_the_member(tmp_path: Path) -> None:
    # The count's last byte is the member's last byte: no view list follows.
    data = storages(storage(1001, 0, b""), views=NO_VIEWS)
    tar = build(pickle_=main(s=pid("1001")), tensors_=None, storages_=data)
    parsed = parse(tmp_path, tar)
    assert parsed.storages["1001"].nbytes == 0
    assert parsed.storages["1001"].file_offset == offset_of(tar, "storages") + len(data)


def test_storage_bytes_end_the_member(tmp_path: Path) -> None:
    data = storages(storage(1001, 6, f32(1, 2, 3, 4, 5, 6)), views=NO_VIEWS)
    parsed = parse(tmp_path, build(storages_=data))
    assert parsed.storages["1001"].nbytes == 24
    assert parsed.storages["1001"].file_offset == SPEC_OFFSETS["storages"] + len(data) - 24


@pytest.mark.parametrize(("numel", "blob"), [(6, f32(1, 2, 3, 4, 5)[:-1] + b"\0" * 3),
                                             (-1, b""), (-(1 << 62), b"")])  # fmt: skip
def test_storage_past_its_member(tmp_path: Path, numel: int, blob: bytes) -> None:
    data = storages(storage(1001, numel, blob), views=NO_VIEWS)
    err = tar_error(tmp_path, build(storages_=data))
    assert err.message == Says("'1001'", "runs past")


def test_unknown_storage_type(tmp_path: Path) -> None:
    data = storages(storage(1001, 1, b"\0", stype=glob("torch", "FooStorage")))
    err = tar_error(tmp_path, build(storages_=data), UnsupportedError)
    assert err.message == Says("unknown storage type", "torch.FooStorage")


@pytest.mark.parametrize("views", [None, {}, ((1, 2, 3),)])
def test_view_list_that_is_no_list_is_ignored(tmp_path: Path, views: object) -> None:
    data = storages(storage(1001, 6, f32(1, 2, 3, 4, 5, 6)))[:-6] + pickle.dumps(views, 2)
    parsed = parse(tmp_path, build(storages_=data))
    assert_tensor(ref(parsed, "b"), "1001", (2,), (1,), 4)


def test_view_list_pickle_is_judged(tmp_path: Path) -> None:
    views = pkl(glob("builtins", "int") + b")R")
    data = storages(storage(1001, 6, f32(1, 2, 3, 4, 5, 6)), views=NO_VIEWS) + views
    found = ledger_globals(build(storages_=data, tensors_=tensors(n="x")), tmp_path)
    assert found == [
        ("torch.FloatStorage", "the tar storages member"),
        ("builtins.int", "the tar storages member"),
    ]


# --- _tar_tensors: storage views -------------------------------------------------------------

ROOT = storage(1001, 6, f32(1, 2, 3, 4, 5, 6))


def with_views(*views: object, tensor_: bytes | None = None) -> bytes:
    recs = tensors(tensor_ if tensor_ is not None else tensor(2001, 1002, (2,), (1,), 1))
    return build(pickle_=main(w=pid("2001")), tensors_=recs, storages_=storages(ROOT, views=views))


def test_tensor_over_a_storage_view(tmp_path: Path) -> None:
    data = with_views((1002, 1001, 2, 3))
    parsed = parse(tmp_path, data)
    t = ref(parsed, "w")
    assert_tensor(t, "1001", (2,), (1,), 1)
    assert t.storage is not None
    assert (t.storage.view, t.storage.numel, t.storage.stype.qualname) == (
        ("1002", 2, 3), 6, "torch.FloatStorage",
    )  # fmt: skip
    with open_checkpoint(write(tmp_path, data, "v.pt")) as ckpt:
        np.testing.assert_array_equal(ckpt["w"].load(), [4, 5])  # view offset 2 + offset 1


@pytest.mark.parametrize(("offset", "size"), [(0, 0), (0, 6), (6, 0), (3, 3)])
def test_view_bounds_inclusive(tmp_path: Path, offset: int, size: int) -> None:
    t = tensor(2001, 1002, (0,), (1,), 0)
    parsed = parse(tmp_path, with_views((1002, 1001, offset, size), tensor_=t))
    storage_ = ref(parsed, "w").storage
    assert storage_ is not None
    assert storage_.view == ("1002", offset, size)


@pytest.mark.parametrize(("offset", "size"), [(-1, 2), (0, -1), (3, 4), (0, 7), (7, 0)])
def test_view_past_its_storage(tmp_path: Path, offset: int, size: int) -> None:
    err = tar_error(tmp_path, with_views((1002, 1001, offset, size)))
    assert err.message == Says("view", "exceeds")


@pytest.mark.parametrize(
    "view",
    [(1002, 1003, 0, 1), (1002, 1001, "0", 1), (1002, 1001, 0, 1.0), (1002, 1001, True, 1),
     (1002, 1001, 0, None)],
)  # fmt: skip
def test_view_of_unknown_storage_or_bad_numbers(tmp_path: Path, view: tuple[object, ...]) -> None:
    err = tar_error(tmp_path, with_views(view))
    assert err.message == Says("view", "unknown storage")


@pytest.mark.parametrize("view", [[1002, 1001, 0, 1], (1002, 1001, 0), (1002, 1001, 0, 1, 0), 5])
def test_malformed_view(tmp_path: Path, view: object) -> None:
    err = tar_error(tmp_path, with_views(view))
    assert err.message == Says("storages member", "malformed view")


# --- _tar_tensors: tensor records -------------------------------------------------------------


@pytest.mark.parametrize("n", [-1, MAX_STORAGES + 1, True, "2"])
def test_bad_tensor_count(tmp_path: Path, n: object) -> None:
    err = tar_error(tmp_path, build(tensors_=tensors(n=n)))
    assert err.message == Says("tensors member", "tensor count")


def test_tensor_count_at_the_limit_is_read(tmp_path: Path) -> None:
    data = count(MAX_STORAGES)
    err = tar_error(tmp_path, build(tensors_=data), PickleTruncatedError)
    assert err.message == Says("tensors member", "byte 0", "no STOP")


def test_tensor_count_pickle_is_judged(tmp_path: Path) -> None:
    found = ledger_globals(build(tensors_=STUB_INT + SPEC_TENSORS[5:]), tmp_path)
    assert found == [("torch.FloatStorage", "the tar storages member"),
                     ("builtins.int", "the tar tensors member")]  # fmt: skip


def test_no_tensors(tmp_path: Path) -> None:
    parsed = parse(tmp_path, build(pickle_=main(s=pid("1001")), tensors_=tensors()))
    assert isinstance(parsed.root, dict)
    assert isinstance(parsed.root["s"], StorageRef)


@pytest.mark.parametrize(
    "head",
    [
        lit(5),
        b"(" + lit(2001) + lit(1001) + b"t",
        b"(" + lit(2001) + lit(1001) + FLOAT_TENSOR + lit(0) + b"t",
        b"](" + lit(2001) + lit(1001) + FLOAT_TENSOR + b"e",
    ],
)
def test_malformed_tensor_header(tmp_path: Path, head: bytes) -> None:
    data = count(1) + pkl(head) + struct.pack("<i4xq", 0, 0)
    err = tar_error(tmp_path, build(tensors_=data))
    assert err.message == Says("tensors member", "malformed tensor header")


HEAD = pkl(b"(" + lit(2001) + lit(1001) + FLOAT_TENSOR + b"t")


@pytest.mark.parametrize("left", range(8))
def test_tensor_rank_cut_short(tmp_path: Path, left: int) -> None:
    err = tar_error(tmp_path, build(tensors_=count(1) + HEAD + b"\0" * left))
    assert err.message == Says("tensors member", "truncated")


@pytest.mark.parametrize(
    "tail",
    [
        struct.pack("<i4x", 0),  # a scalar needs its storage offset too
        struct.pack("<i4x", 0) + b"\0" * 7,
        struct.pack("<i4x4q", 2, 2, 3, 3, 1) + b"\0" * 7,
        struct.pack("<i4x", -1) + b"\0" * 8,
        struct.pack("<i4x", MAX_RANK + 1) + b"\0" * (16 * MAX_RANK + 24),
    ],
)
def test_bad_rank(tmp_path: Path, tail: bytes) -> None:
    err = tar_error(tmp_path, build(tensors_=count(1) + HEAD + tail))
    assert err.message == Says("bad rank")


@pytest.mark.parametrize("ndim", [0, 1, MAX_RANK])
def test_rank_limits_inclusive(tmp_path: Path, ndim: int) -> None:
    # The tensor's numbers end the member exactly.
    t = tensor(2001, 1001, (1,) * ndim, (1,) * ndim, 5)
    parsed = parse(tmp_path, build(pickle_=main(w=pid("2001")), tensors_=tensors(t)))
    assert_tensor(ref(parsed, "w"), "1001", (1,) * ndim, (1,) * ndim, 5)


def test_tensors_follow_each_other(tmp_path: Path) -> None:
    recs = tensors(
        tensor(2001, 1001, (), (), 3),
        tensor(2002, 1001, (2, 1, 3), (3, 3, 1), 0),
        tensor(2003, 1001, (3,), (2,), 1),
    )
    parsed = parse(tmp_path, build(pickle_=main(a=pid("2001"), b=pid("2002"), c=pid("2003")),
                                   tensors_=recs))  # fmt: skip
    assert_tensor(ref(parsed, "a"), "1001", (), (), 3)
    assert_tensor(ref(parsed, "b"), "1001", (2, 1, 3), (3, 3, 1), 0)
    assert_tensor(ref(parsed, "c"), "1001", (3,), (2,), 1)


def test_tensor_of_unknown_storage(tmp_path: Path) -> None:
    err = tar_error(tmp_path, build(tensors_=tensors(tensor(2001, 1003, (1,), (1,), 0))))
    assert err.message == Says("'2001'", "unknown storage")


@pytest.mark.parametrize(
    ("size", "stride", "offset"), [((-1,), (1,), 0), ((1,), (-1,), 0), ((1,), (1,), -1)]
)
def test_negative_size_stride_or_offset(
    tmp_path: Path, size: tuple[int, ...], stride: tuple[int, ...], offset: int
) -> None:
    err = tar_error(tmp_path, build(tensors_=tensors(tensor(2001, 1001, size, stride, offset))))
    assert err.message == Says("'2001'", "negative size or stride")


@pytest.mark.parametrize(
    ("cls", "stype", "numel", "dtype"),
    [
        (glob("torch", "DoubleTensor"), glob("torch", "FloatStorage"), 2, "float64"),
        (lit(None), glob("torch", "FloatStorage"), 2, "float32"),
        (lit(None), glob("torch.storage", "UntypedStorage"), 8, "uint8"),
        (glob("torch", "LongTensor"), glob("torch.storage", "UntypedStorage"), 8, "int64"),
    ],
)
def test_tensor_dtype_from_class_else_storage(
    tmp_path: Path, cls: bytes, stype: bytes, numel: int, dtype: str
) -> None:
    recs = tensors(tensor(2001, 1001, (1,), (1,), 0, cls=cls))
    data = build(pickle_=main(w=pid("2001")), tensors_=recs,
                 storages_=storages(storage(1001, numel, b"\0" * 8, stype=stype)))  # fmt: skip
    assert ref(parse(tmp_path, data), "w").dtype == dtype


# --- the byte view tarfile reads the archive through ------------------------------------------


def test_view_reader_is_a_readable_seekable_raw_stream() -> None:
    raw = ViewReader(memoryview(b"abcdefgh"))
    assert (raw.readable(), raw.seekable(), raw.tell()) == (True, True, 0)
    buffered = io.BufferedReader(raw)  # refuses an unreadable raw stream
    assert buffered.read(3) == b"abc"
    assert buffered.seek(-2, io.SEEK_END) == 6
    assert buffered.read() == b"gh"
    # back to the start, and before it (clamped at the start)
    assert (raw.seek(0), raw.read(2)) == (0, b"ab")
    assert (raw.seek(-5, io.SEEK_CUR), raw.read(1)) == (0, b"a")

"""Edge cases of ``formats.pytorch._containers`` that mutation testing found untested (issue 17).

The TAR format (torch < 0.1.10, spec section 7) had no fast test at all: its checkpoints are
built here with the stdlib ``tarfile`` and hand-assembled protocol-2 pickles, member by member
(``sys_info``, ``pickle``, ``tensors``, ``storages``), and checked against the spec's own worked
example (its bytes and the values torch loads from it). Every check of the readers is probed on
both sides of its limit, with the exact message ``ckptctl`` prints (``ckptctl: error: PATH:
MESSAGE`` then a ``hint:`` line): a changed word is a changed interface. Legacy streams (section
6), plain pickles (section 8) and ZIP/TorchScript archives (sections 2, 10) are assembled with the
helpers of ``test_pytorch_reader``, ``pickle`` and ``zipfile``; ZIP header fields are patched in
place (APPNOTE 4.3) to reach the encrypted, unknown-method and bad-CRC branches.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import pickle
import struct
import tarfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ckptctl.dtypes import DType
from ckptctl.errors import (
    CkptError,
    CorruptCheckpointError,
    ExitCode,
    UnknownFormatError,
    UnsafePickleError,
    UnsupportedError,
)
from ckptctl.formats import open_checkpoint
from ckptctl.formats.pytorch import _containers, _zipdir
from ckptctl.formats.pytorch._containers import (
    MAX_STORAGES,
    MAX_TAR_MEMBERS,
    Parsed,
    read_tar,
)
from ckptctl.formats.pytorch._read import _is_legacy
from ckptctl.formats.pytorch._safety import Ledger
from ckptctl.formats.pytorch._scan import PickleBudgetError, PickleTruncatedError
from ckptctl.formats.pytorch._unpickler import MAX_RANK, StorageRef, Stub, TensorRef
from ckptctl.safety import Problem, Verdict
from ckptctl.sources import ByteSource
from tests.formats.test_pytorch_reader import (
    _zip_with_last_record,
    f32,
    frame,
    glob,
    lit,
    pkl,
    storage_pid,
    tensor_v2,
    write_zip,
)

TRUNCATED_HINT = "the file looks truncated; re-download or re-save it"
TAR_NOTE = Problem(
    "the TAR format (torch < 0.1.10): torch.load(weights_only=True) refuses it",
    Verdict.NEEDS_TRUST,
    "the archive",
)


# --- a TAR checkpoint builder (spec section 7) ------------------------------------------------

#: The spec's worked example, member by member (section 7, "Minimal faithful example").
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


# --- the spec's example -----------------------------------------------------------------------


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
    # The first element sits after N, the storage header and the i64 count (spec section 7).
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
    assert parsed.ledger.safety.problems == (TAR_NOTE,)
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
    assert ledger.safety.problems == (TAR_NOTE,)


# --- read_tar: the archive --------------------------------------------------------------------


def test_sixteen_members_are_read_and_a_seventeenth_is_refused(tmp_path: Path) -> None:
    # Members may repeat (the last one wins); only their number is limited.
    extra = [("sys_info", SYS_INFO)] * (MAX_TAR_MEMBERS - 3)
    rest = [("pickle", SPEC_PICKLE), ("tensors", SPEC_TENSORS), ("storages", SPEC_STORAGES)]
    parsed = parse(tmp_path, build(extra + rest))
    assert list(parsed.root) == ["w", "b"]  # type: ignore[call-overload]
    err = tar_error(tmp_path, build([*extra, ("sys_info", SYS_INFO), *rest]))
    assert err.message == "tar archive has too many members for a checkpoint"
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
    assert err.message == f"unexpected tar member {name!r} in a torch tar checkpoint"


def test_corrupt_tar_names_the_tarfile_error(tmp_path: Path) -> None:
    data = bytearray(build())
    data[148] ^= 1  # the first header's checksum
    with pytest.raises(tarfile.TarError) as truth:  # the stdlib's own words
        tarfile.open(fileobj=io.BytesIO(bytes(data)), mode="r:").close()
    err = tar_error(tmp_path, bytes(data))
    assert err.message == f"corrupt tar archive: {truth.value}"
    assert err.message == "corrupt tar archive: bad checksum"


def test_compressed_tar_is_not_read(tmp_path: Path) -> None:
    # Only an uncompressed tar is a torch checkpoint ("r:", not tarfile's transparent "r").
    data = gzip.compress(build())
    with pytest.raises(tarfile.TarError) as truth:  # the stdlib's own words
        tarfile.open(fileobj=io.BytesIO(data), mode="r:").close()
    err = tar_error(tmp_path, data)
    assert err.message == f"corrupt tar archive: {truth.value}"


@pytest.mark.parametrize("left_out", ["pickle", "storages"])
def test_pickle_and_storages_members_are_required(tmp_path: Path, left_out: str) -> None:
    members = [("sys_info", SYS_INFO), ("pickle", SPEC_PICKLE), ("tensors", SPEC_TENSORS),
               ("storages", SPEC_STORAGES)]  # fmt: skip
    err = tar_error(tmp_path, build([m for m in members if m[0] != left_out]))
    assert err.message == "tar checkpoint lacks its pickle or storages member"


def test_members_are_found_by_name_not_by_position(tmp_path: Path) -> None:
    members = [("storages", SPEC_STORAGES), ("tensors", SPEC_TENSORS), ("pickle", SPEC_PICKLE)]
    parsed = parse(tmp_path, build(members))
    assert_tensor(ref(parsed, "b"), "1001", (2,), (1,), 4)


def test_main_pickle_errors_name_the_tar_pickle(tmp_path: Path) -> None:
    err = tar_error(tmp_path, build(pickle_=b"\x80\x02}"), PickleTruncatedError)
    assert err.message == (
        "malformed pickle in the tar pickle at byte 3: no STOP opcode before the end of the data"
    )


def test_main_pickle_ends_at_its_member(tmp_path: Path) -> None:
    # The pickle member holds no STOP: the reader must not run on into the padding/next member.
    cut = SPEC_PICKLE[:-1]
    err = tar_error(tmp_path, build(pickle_=cut), PickleTruncatedError)
    assert err.message == (
        f"malformed pickle in the tar pickle at byte {len(cut)}: "
        "no STOP opcode before the end of the data"
    )


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
    assert err.message == f"tar pickle references unknown object {key!r}"


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
    assert err.message == "unexpected persistent id in the tar pickle"


def burn_storage(key: str, numel: int = 6, stype: str = "FloatStorage") -> bytes:
    return b"(" + lit("storage") + glob("torch", stype) + lit(key) + lit("cpu") + lit(numel) + b"t"


def rebuild(
    storage_arg: bytes, offset: int, size: tuple[int, ...], stride: tuple[int, ...]
) -> bytes:
    hooks = glob("collections", "OrderedDict") + b")R"
    return (glob("torch._utils", "_rebuild_tensor_v2") + b"(" + storage_arg + lit(offset)
            + lit(size) + lit(stride) + b"\x89" + hooks + b"tR")  # fmt: skip


def test_burn_variant_storage_tuples(tmp_path: Path) -> None:
    # burn's synthetic files: no tensors member, ('storage', ...) tuples passed straight to
    # _rebuild_tensor_v2 or as a persistent id (spec section 7, note).
    body = main(
        w=rebuild(burn_storage("1001"), 0, (2, 3), (3, 1)),
        b=rebuild(burn_storage("1001") + b"Q", 4, (2,), (1,)),
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
    body = main(w=rebuild(pid("1001"), 1, (5,), (1,)))
    parsed = parse(tmp_path, build(pickle_=body, tensors_=None))
    assert_tensor(ref(parsed, "w"), "1001", (5,), (1,), 1)


@pytest.mark.parametrize("as_pid", [False, True])
def test_burn_variant_unknown_storage(tmp_path: Path, as_pid: bool) -> None:
    value = burn_storage("cpu") + (b"Q" if as_pid else b"")
    body = main(w=rebuild(value, 0, (1,), (1,)))
    err = tar_error(tmp_path, build(pickle_=body, tensors_=None))
    assert err.message == "tar pickle references unknown storage 'cpu'"


def test_other_tuples_reach_rebuild_unchanged(tmp_path: Path) -> None:
    # Only a 5-tuple starting with 'storage' is a storage: others are refused by the rebuild.
    for value in (lit(("storage", 1, "1001", "cpu")), lit(("storagE", 1, "1001", "cpu", 6))):
        err = tar_error(
            tmp_path, build(pickle_=main(w=rebuild(value, 0, (1,), (1,))), tensors_=None)
        )
        assert err.message == "tensor storage is not a storage from a persistent id"


def ledger_globals(data: bytes, tmp_path: Path) -> list[tuple[str, str]]:
    """(global, stream) of everything the reader judged, also when it then refuses the file."""
    ledger = Ledger()
    with ByteSource(write(tmp_path, data)) as source, pytest.raises(CkptError):
        read_tar(source, ledger)
    return [(g.name, g.where) for g in ledger.safety.globals]


def test_main_pickle_is_judged(tmp_path: Path) -> None:
    body = main(w=rebuild(burn_storage("1001"), 0, (2, 3), (3, 1)))
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
    assert err.message == "tar storages member has a bad storage count"


def test_storage_count_at_the_limit_is_read(tmp_path: Path) -> None:
    # MAX_STORAGES passes the count check; the member then ends before the first header.
    data = count(MAX_STORAGES)
    err = tar_error(tmp_path, build(storages_=data), PickleTruncatedError)
    assert err.message == (
        "malformed pickle in the tar storages member at byte 0: "
        "no STOP opcode before the end of the data"
    )


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
    assert err.message == "tar storages member has a malformed storage header"


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
    assert err.message == "tar storages member is truncated"


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
    assert err.message == "tar storage '1001' runs past its member"


def test_unknown_storage_type(tmp_path: Path) -> None:
    data = storages(storage(1001, 1, b"\0", stype=glob("torch", "FooStorage")))
    err = tar_error(tmp_path, build(storages_=data), UnsupportedError)
    assert err.message == "unknown storage type torch.FooStorage"


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
    assert err.message == "tar storage view exceeds its storage"


@pytest.mark.parametrize(
    "view",
    [(1002, 1003, 0, 1), (1002, 1001, "0", 1), (1002, 1001, 0, 1.0), (1002, 1001, True, 1),
     (1002, 1001, 0, None)],
)  # fmt: skip
def test_view_of_unknown_storage_or_bad_numbers(tmp_path: Path, view: tuple[object, ...]) -> None:
    err = tar_error(tmp_path, with_views(view))
    assert err.message == "tar storage view of an unknown storage"


@pytest.mark.parametrize("view", [[1002, 1001, 0, 1], (1002, 1001, 0), (1002, 1001, 0, 1, 0), 5])
def test_malformed_view(tmp_path: Path, view: object) -> None:
    err = tar_error(tmp_path, with_views(view))
    assert err.message == "tar storages member has a malformed view"


# --- _tar_tensors: tensor records -------------------------------------------------------------


@pytest.mark.parametrize("n", [-1, MAX_STORAGES + 1, True, "2"])
def test_bad_tensor_count(tmp_path: Path, n: object) -> None:
    err = tar_error(tmp_path, build(tensors_=tensors(n=n)))
    assert err.message == "tar tensors member has a bad tensor count"


def test_tensor_count_at_the_limit_is_read(tmp_path: Path) -> None:
    data = count(MAX_STORAGES)
    err = tar_error(tmp_path, build(tensors_=data), PickleTruncatedError)
    assert err.message == (
        "malformed pickle in the tar tensors member at byte 0: "
        "no STOP opcode before the end of the data"
    )


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
    assert err.message == "tar tensors member has a malformed tensor header"


HEAD = pkl(b"(" + lit(2001) + lit(1001) + FLOAT_TENSOR + b"t")


@pytest.mark.parametrize("left", range(8))
def test_tensor_rank_cut_short(tmp_path: Path, left: int) -> None:
    err = tar_error(tmp_path, build(tensors_=count(1) + HEAD + b"\0" * left))
    assert err.message == "tar tensors member is truncated"


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
    assert err.message == "tar tensor has a bad rank"


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
    assert err.message == "tar tensor '2001' uses an unknown storage"


@pytest.mark.parametrize(
    ("size", "stride", "offset"), [((-1,), (1,), 0), ((1,), (-1,), 0), ((1,), (1,), -1)]
)
def test_negative_size_stride_or_offset(
    tmp_path: Path, size: tuple[int, ...], stride: tuple[int, ...], offset: int
) -> None:
    err = tar_error(tmp_path, build(tensors_=tensors(tensor(2001, 1001, size, stride, offset))))
    assert err.message == "tar tensor '2001' has a negative size or stride"


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


# --- legacy streams (spec section 6) ----------------------------------------------------------

LEGACY_SYS_INFO = pickle.dumps(
    {"protocol_version": 1001, "little_endian": True,
     "type_sizes": {"short": 2, "int": 4, "long": 4}},
    protocol=2,
)  # fmt: skip


def legacy(
    root: bytes,
    keys: list[Any] | bytes,
    data: bytes,
    *,
    magic: bytes = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2),
    version: bytes = pickle.dumps(1001, protocol=2),
    sys_info: bytes = LEGACY_SYS_INFO,
) -> bytes:
    """The five pickles of a legacy stream, then the storage data (spec 6.1)."""
    keys_pkl = keys if isinstance(keys, bytes) else pickle.dumps(keys, protocol=2)
    return magic + version + sys_info + pkl(root) + keys_pkl + data


def lpid(key: bytes | str, numel: object = 6, view: bytes = b"N", *, location: str = "cpu",
         stype: bytes = glob("torch", "FloatStorage")) -> bytes:  # fmt: skip
    """A legacy 6-tuple storage persistent id (``view`` is the opcodes of its last element)."""
    key_op = b"C" + bytes([len(key)]) + key if isinstance(key, bytes) else lit(key)
    return b"(" + lit("storage") + stype + key_op + lit(location) + lit(numel) + view + b"tQ"


def v2(storage_: bytes, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> bytes:
    return rebuild(storage_, offset, size, stride)


def counted(numel: int, blob: bytes) -> bytes:
    return struct.pack("<q", numel) + blob


SIX = counted(6, f32(0, 1, 2, 3, 4, 5))


def read_legacy_bytes(tmp_path: Path, data: bytes, ledger: Any = None) -> Parsed:
    with ByteSource(write(tmp_path, data, "l.pt")) as source:
        return _containers.read_legacy(source, ledger)


def legacy_error(
    tmp_path: Path, data: bytes, error: type[CkptError] = CorruptCheckpointError
) -> Any:
    with pytest.raises(error) as info:
        read_legacy_bytes(tmp_path, data)
    assert type(info.value) is error
    return info.value


def dict_root(parsed: Parsed) -> dict[str, Any]:
    assert isinstance(parsed.root, dict)
    return parsed.root


def test_legacy_stream_metadata_and_no_notes(tmp_path: Path) -> None:
    data = legacy(v2(lpid("1"), 0, (6,), (1,)), ["1"], SIX)
    parsed = read_legacy_bytes(tmp_path, data)
    assert parsed.format == "pytorch-legacy"
    assert parsed.metadata == {"version": "1001"}
    assert parsed.notes == []
    assert parsed.byteorder == "little"
    stored = parsed.storages["1"]
    assert (stored.nbytes, stored.file_offset) == (24, len(data) - 24)


def test_legacy_storage_loads_its_bytes(tmp_path: Path) -> None:
    data = legacy(v2(lpid("1"), 0, (6,), (1,)), ["1"], SIX)
    with ByteSource(write(tmp_path, data)) as source:
        parsed = _containers.read_legacy(source)
        assert bytes(parsed.storages["1"].load()) == f32(0, 1, 2, 3, 4, 5)


@pytest.mark.parametrize(("flag", "notes"), [
    (False, ["the legacy stream says it was written on a big-endian machine"]),
    (True, []), (None, []),
])  # fmt: skip
def test_big_endian_sys_info_is_noted(tmp_path: Path, flag: object, notes: list[str]) -> None:
    sys_info = pickle.dumps({"little_endian": flag}, protocol=2)
    data = legacy(v2(lpid("1"), 0, (6,), (1,)), ["1"], SIX, sys_info=sys_info)
    assert read_legacy_bytes(tmp_path, data).notes == notes


def test_sys_info_that_is_no_dict_means_little_endian(tmp_path: Path) -> None:
    data = legacy(v2(lpid("1"), 0, (6,), (1,)), ["1"], SIX, sys_info=pickle.dumps(False, 2))
    assert read_legacy_bytes(tmp_path, data).notes == []


def test_trailing_bytes_after_a_legacy_stream(tmp_path: Path) -> None:
    data = legacy(v2(lpid("1"), 0, (6,), (1,)), ["1"], SIX) + b"junk!"
    parsed = read_legacy_bytes(tmp_path, data)
    assert parsed.notes == ["5 bytes after the end of the stream were ignored"]
    where = "5 bytes after the end of the checkpoint (not read by torch.load)"
    assert parsed.ledger.safety.problems == (
        Problem("unexplained trailing data", Verdict.NEEDS_TRUST, where, False),
    )


def test_wrong_magic(tmp_path: Path) -> None:
    data = legacy(lit(None), [], b"", magic=pickle.dumps(0x1950A86A20F9469CFC6D, protocol=2))
    err = legacy_error(tmp_path, data)
    assert err.message == "not a legacy torch.save stream (wrong magic number)"


def test_wrong_protocol_version(tmp_path: Path) -> None:
    data = legacy(lit(None), [], b"", version=pickle.dumps(1000, protocol=2))
    err = legacy_error(tmp_path, data, UnsupportedError)
    assert err.message == "legacy stream protocol version 1000 (expected 1001)"


STUB_CALL = glob("builtins", "int") + b")R"


@pytest.mark.parametrize("part", ["version", "sys_info", "root", "keys"])
def test_every_legacy_pickle_is_judged(tmp_path: Path, part: str) -> None:
    stub = pkl(STUB_CALL)
    parts: dict[str, Any] = {part: stub} if part != "root" else {}
    root = STUB_CALL if part == "root" else lit(None)
    keys = parts.pop("keys", [])
    data = legacy(root, keys, b"", **parts)
    ledger = Ledger()
    with contextlib.suppress(CkptError):
        read_legacy_bytes(tmp_path, data, ledger)
    assert [(g.name, g.where) for g in ledger.safety.globals] == [
        ("builtins.int", "the legacy stream")
    ]


def test_keys_pickle_errors_name_the_stream(tmp_path: Path) -> None:
    data = legacy(lit(None), b"\x80\x02]", b"")
    err = legacy_error(tmp_path, data, PickleTruncatedError)
    assert err.message == (
        "malformed pickle in the legacy stream at byte 3: no STOP opcode before the end of the data"
    )


# --- legacy persistent ids --------------------------------------------------------------------


def test_module_persistent_id_is_its_class(tmp_path: Path) -> None:
    module = b"(" + lit("module") + glob("torch.nn.modules.linear", "Linear") + lit("f.py") \
        + lit("src") + b"tQ"  # fmt: skip
    root = dict_root(read_legacy_bytes(tmp_path, legacy(b"}(" + lit("m") + module + b"u", [], b"")))
    assert isinstance(root["m"], type)
    assert issubclass(root["m"], Stub)
    assert root["m"].qualname == "torch.nn.modules.linear.Linear"


@pytest.mark.parametrize("cls", [lit("Linear"), lit(None), glob("torch", "FloatStorage")])
def test_module_persistent_id_without_a_class(tmp_path: Path, cls: bytes) -> None:
    module = b"(" + lit("module") + cls + lit("f.py") + lit("src") + b"tQ"
    err = legacy_error(tmp_path, legacy(module, [], b""))
    assert err.message == "malformed module persistent id"


@pytest.mark.parametrize(
    "value",
    [
        b"(" + lit("storage") + glob("torch.nn", "Linear") + lit("f.py") + lit("s") + b"tQ",
        b"("
        + lit("storagX")
        + glob("torch", "FloatStorage")
        + lit("1")
        + lit("cpu")
        + lit(6)
        + b"NtQ",
        b"("
        + lit("storage")
        + glob("torch", "FloatStorage")
        + lit("1")
        + lit("cpu")
        + lit(6)
        + b"tQ",
        lit(5) + b"Q",
        lit(("module", 1, 2)) + b"Q",
    ],
)
def test_unexpected_legacy_persistent_id(tmp_path: Path, value: bytes) -> None:
    err = legacy_error(tmp_path, legacy(value, [], b""))
    assert err.message == "unexpected persistent id in the legacy stream"
    assert err.hint is None


def test_text_persistent_id(tmp_path: Path) -> None:
    err = legacy_error(tmp_path, legacy(b"P1234\n", [], b""))
    assert err.message == "text persistent id in the legacy stream (saved with pickle protocol 0)"
    assert err.hint == (
        "torch.load cannot read this file either; re-save it with the default protocol"
    )


@pytest.mark.parametrize(
    "value",
    [
        b"(" + lit("storage") + lit("FloatStorage") + lit("1") + lit("cpu") + lit(6) + b"NtQ",
        b"("
        + lit("storage")
        + glob("torch", "FloatStorage")
        + lit(1)
        + lit("cpu")
        + lit(6)
        + b"NtQ",
    ],
)
def test_malformed_storage_persistent_id(tmp_path: Path, value: bytes) -> None:
    err = legacy_error(tmp_path, legacy(value, [], b""))
    assert err.message == "malformed storage persistent id"


def test_bytes_storage_keys(tmp_path: Path) -> None:
    # Python 2 files: keys are bytes; a non-ASCII byte is replaced, in the pid and the key list.
    data = legacy(v2(lpid(b"\xff1"), 0, (6,), (1,)), [b"\xff1"], SIX)
    parsed = read_legacy_bytes(tmp_path, data)
    assert list(parsed.storages) == ["\ufffd1"]
    assert isinstance(parsed.root, TensorRef)
    assert parsed.root.storage is not None
    assert parsed.root.storage.key == "\ufffd1"


@pytest.mark.parametrize(("numel", "key"), [(-1, "1"), ("6", "1"), (6, "k" * 65)])
def test_malformed_storage(tmp_path: Path, numel: object, key: str) -> None:
    err = legacy_error(tmp_path, legacy(lpid(key, numel), [], b""))
    assert err.message == f"malformed storage {key!r}"


def test_storage_limits_inclusive(tmp_path: Path) -> None:
    key = "k" * 64
    data = legacy(v2(lpid(key, 0), 0, (0,), (1,)), [key], counted(0, b""))
    parsed = read_legacy_bytes(tmp_path, data)
    assert parsed.storages[key].nbytes == 0


def test_storage_ref_fields(tmp_path: Path) -> None:
    root = b"(" + v2(lpid("1", location="cuda:0"), 0, (6,), (1,)) \
        + v2(lpid("1", view=lit(("2", 1, 3)), location="cuda:0"), 0, (3,), (1,)) \
        + v2(lpid("1", location="cuda:0"), 1, (5,), (1,)) + b"t"  # fmt: skip
    parsed = read_legacy_bytes(tmp_path, legacy(root, ["1"], SIX))
    assert isinstance(parsed.root, tuple)
    whole, part, again = parsed.root
    s = whole.storage
    assert (s.key, s.numel, s.location, s.view) == ("1", 6, "cuda:0", None)
    assert (part.storage.key, part.storage.numel, part.storage.location, part.storage.view) == (
        "1", 6, "cuda:0", ("2", 1, 3),
    )  # fmt: skip
    assert again.storage is s  # one StorageRef per (key, view)
    assert part.storage is not s


@pytest.mark.parametrize(
    ("first", "second"),
    [((6, glob("torch", "FloatStorage")), (5, glob("torch", "FloatStorage"))),
     ((6, glob("torch", "FloatStorage")), (6, glob("torch", "IntStorage")))],
)  # fmt: skip
def test_storage_declared_twice_differently(
    tmp_path: Path, first: tuple[int, bytes], second: tuple[int, bytes]
) -> None:
    root = b"(" + lpid("1", first[0], stype=first[1]) + lpid("1", second[0], stype=second[1]) + b"t"
    err = legacy_error(tmp_path, legacy(root, ["1"], SIX))
    assert err.message == "storage '1' is declared twice differently"


@pytest.mark.parametrize(
    ("view", "message"),
    [
        (lit(["2", 0, 1]), "malformed storage view"),
        (lit(("2", 0)), "malformed storage view"),
        (lit(("2", -1, 2)), "malformed storage view"),
        (lit(("2", 0, -1)), "malformed storage view"),
        (lit(("2", "0", 1)), "malformed storage view"),
        (lit(("2", 0, "1")), "malformed storage view"),
        (lit(("2", 3, 4)), "storage view of '1' exceeds its storage"),
    ],
)
def test_bad_storage_view(tmp_path: Path, view: bytes, message: str) -> None:
    err = legacy_error(tmp_path, legacy(lpid("1", 6, view), ["1"], SIX))
    assert err.message == message


@pytest.mark.parametrize(("offset", "size"), [(0, 0), (0, 6), (6, 0)])
def test_storage_view_limits_inclusive(tmp_path: Path, offset: int, size: int) -> None:
    parsed = read_legacy_bytes(tmp_path, legacy(lpid("1", 6, lit(("2", offset, size))), ["1"], SIX))
    assert isinstance(parsed.root, StorageRef)
    assert parsed.root.view == ("2", offset, size)


def test_too_many_storages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_containers, "MAX_STORAGES", 2)
    two = b"(" + lpid("1") + lpid("2") + b"t"
    parsed = read_legacy_bytes(tmp_path, legacy(two, ["1", "2"], SIX + SIX))
    assert list(parsed.storages) == ["1", "2"]
    three = b"(" + lpid("1") + lpid("2") + lpid("3") + b"t"
    err = legacy_error(tmp_path, legacy(three, [], b""))
    assert err.message == "too many storages"


# --- legacy storage keys and data --------------------------------------------------------------


@pytest.mark.parametrize("keys", [("1",), ["1", 1], "1", [None]])
def test_malformed_key_list(keys: object) -> None:
    with pytest.raises(CorruptCheckpointError) as info:
        _containers._keys(keys)
    assert info.value.message == "legacy stream storage key list is malformed"


def test_key_list_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_containers, "MAX_STORAGES", 2)
    assert _containers._keys(["1", b"2"]) == ["1", "2"]
    with pytest.raises(CorruptCheckpointError) as info:
        _containers._keys(["1", "2", "3"])
    assert info.value.message == "too many storages"


def test_key_list_decodes_bytes() -> None:
    assert _containers._keys([b"a\xffb", "c"]) == ["a\ufffdb", "c"]


def test_unreferenced_storage(tmp_path: Path) -> None:
    err = legacy_error(tmp_path, legacy(v2(lpid("1"), 0, (6,), (1,)), ["1", "2"], SIX + SIX))
    assert err.message == "legacy stream stores an unreferenced storage '2'"


@pytest.mark.parametrize("left", range(8))
def test_storage_count_cut_short_in_a_legacy_stream(tmp_path: Path, left: int) -> None:
    data = legacy(lpid("1", 0), ["1"], b"\0" * left)
    err = legacy_error(tmp_path, data)
    assert err.message == "legacy stream is truncated in its storage data"
    assert err.hint == TRUNCATED_HINT


def test_storage_count_mismatch(tmp_path: Path) -> None:
    err = legacy_error(tmp_path, legacy(lpid("1"), ["1"], counted(-1, b"")))
    assert err.message == "storage '1' has -1 elements, the pickle says 6"


def test_storage_data_cut_short(tmp_path: Path) -> None:
    data = legacy(lpid("1"), ["1"], SIX[:-1])
    err = legacy_error(tmp_path, data)
    assert (
        err.message
        == f"storage '1' ends at byte {len(data) + 1} but the data has {len(data)} bytes"
    )
    assert err.hint == TRUNCATED_HINT


def test_big_main_pickle_is_read_in_growing_chunks(tmp_path: Path) -> None:
    # A main pickle longer than the first 64 KiB read: retried whole, judged once.
    root = b"(" + lit("x" * 200_000) + v2(lpid("1"), 0, (6,), (1,)) + b"t"
    ledger = Ledger()
    parsed = read_legacy_bytes(tmp_path, legacy(root, ["1"], SIX), ledger)
    assert isinstance(parsed.root, tuple)
    assert parsed.root[0] == "x" * 200_000
    assert ledger.safety.problems == ()
    assert [g.name for g in ledger.safety.globals] == [
        "torch._utils._rebuild_tensor_v2", "torch.FloatStorage", "collections.OrderedDict",
    ]  # fmt: skip


def test_truncated_last_pickle_is_judged(tmp_path: Path) -> None:
    data = legacy(lit(None), [], b"").split(pkl(lit(None)))[0] + pkl(STUB_CALL)[:-1]
    ledger = Ledger()
    with pytest.raises(PickleTruncatedError):
        read_legacy_bytes(tmp_path, data, ledger)
    assert [(g.name, g.where) for g in ledger.safety.globals] == [
        ("builtins.int", "the legacy stream")
    ]
    assert [(p.verdict, p.where, p.reached) for p in ledger.safety.problems] == [
        (Verdict.NEEDS_TRUST, "the legacy stream", True)
    ]


# --- plain pickles and storages by value (spec section 8) --------------------------------------

PLAIN_NOTE = Problem(
    "a plain pickle, not a torch.save file: torch.load cannot read it, pickle.load runs it "
    "unrestricted",
    Verdict.NEEDS_TRUST,
    "the pickle",
)


def from_bytes(blob: bytes) -> bytes:
    """``_load_from_bytes(_codecs.encode(text, 'latin1'))``: a storage pickled by value, as
    protocol 2 spells bytes."""
    encoded = glob("_codecs", "encode") + b"(" + lit(blob.decode("latin-1")) + lit("latin1")
    return glob("torch.storage", "_load_from_bytes") + b"(" + encoded + b"tRtR"


def read_plain_bytes(tmp_path: Path, data: bytes, ledger: Any = None) -> Parsed:
    with ByteSource(write(tmp_path, data, "p.pkl")) as source:
        return _containers.read_plain(source, ledger)


def plain_error(tmp_path: Path, data: bytes) -> Any:
    with pytest.raises(CorruptCheckpointError) as info:
        read_plain_bytes(tmp_path, data)
    assert type(info.value) is CorruptCheckpointError
    return info.value


def test_storage_by_value(tmp_path: Path) -> None:
    inner = legacy(lpid("7", 6, lit(("8", 2, 3))), ["7"], SIX)
    data = pkl(b"}(" + lit("w") + v2(from_bytes(inner), 1, (2,), (1,)) + b"u")
    parsed = read_plain_bytes(tmp_path, data)
    assert parsed.format == "pickle"
    t = dict_root(parsed)["w"]
    s = t.storage
    assert (s.key, s.numel, s.view, s.inline) == ("7", 6, ("8", 2, 3), f32(0, 1, 2, 3, 4, 5))
    assert s.stype.qualname == "torch.FloatStorage"
    assert parsed.notes == []
    assert parsed.ledger.safety.problems == (PLAIN_NOTE,)
    with open_checkpoint(write(tmp_path, data, "q.pkl")) as ckpt:
        np.testing.assert_array_equal(ckpt["w"].load(), [3, 4])


def test_storage_by_value_of_an_untyped_storage(tmp_path: Path) -> None:
    blob = legacy(lpid("7", 3, stype=glob("torch.storage", "UntypedStorage")), ["7"],
                  counted(3, b"abc"))  # fmt: skip
    root, storages_, little, end = _containers.parse_legacy(_containers._Reader(blob=blob), "x")
    assert isinstance(root, StorageRef)
    assert (little, end) == (True, len(blob))
    assert (storages_["7"].nbytes, storages_["7"].file_offset) == (3, None)
    assert bytes(storages_["7"].load()) == b"abc"


UNTYPED = glob("torch.storage", "UntypedStorage")


@pytest.mark.parametrize(
    ("data", "message", "torch_says"),
    [
        (
            counted(3, b"ab"),
            "storage '7' ends at byte {size_plus_1} but the data has {size} bytes",
            "it runs out of data or memory",
        ),
        (
            counted(3, b"")[:5],
            "legacy stream is truncated in its storage data",
            "it runs out of data or memory",
        ),
        (
            counted(4, b"abcd"),
            "storage '7' has 4 elements, the pickle says 3",
            "storage has wrong byte size",
        ),
    ],
)
def test_storage_data_torch_refuses_too_is_noted_and_refused(
    data: bytes, message: str, torch_says: str
) -> None:
    """torch.load fails on these whatever weights_only says (too little data, or an element
    count that disagrees with the pickle's): the ledger says so (the verdict is not safe), and
    the read fails, with or without a ledger (an embedded storage has none)."""
    blob = legacy(lpid("7", 3, stype=UNTYPED), ["7"], data)
    message = message.format(size=len(blob), size_plus_1=len(blob) + 1)
    ledger = Ledger()
    with pytest.raises(CorruptCheckpointError) as info:
        _containers.parse_legacy(_containers._Reader(blob=blob), "the stream", ledger)
    assert info.value.message == message
    refusal = f"{message}: torch.load refuses it with weights_only=True or False ({torch_says})"
    assert ledger.safety.problems == (
        Problem(refusal, Verdict.NEEDS_TRUST, "the stream", True, True),
    )
    assert ledger.safety.torch_refusal == refusal  # what verify reports as torch's refusal
    with pytest.raises(CorruptCheckpointError) as info:
        _containers.parse_legacy(_containers._Reader(blob=blob), "an embedded storage")
    assert info.value.message == message


def test_load_from_bytes_needs_bytes() -> None:
    # The safety judge refuses such a pickle first; the function still checks its argument.
    for value in ("abc", bytearray(b"abc"), None):
        with pytest.raises(CorruptCheckpointError) as info:
            _containers._load_from_bytes(value)
        assert info.value.message == "_load_from_bytes argument is not bytes"


@pytest.mark.parametrize(
    "inner",
    [legacy(lit(5), [], b""), legacy(lpid("7", 0), [], b""), legacy(lit(None), [], b"")],
)
def test_embedded_stream_without_one_storage(tmp_path: Path, inner: bytes) -> None:
    err = plain_error(tmp_path, pkl(from_bytes(inner)))
    assert err.message == "embedded storage stream does not hold one storage"


def test_embedded_stream_errors_name_it(tmp_path: Path) -> None:
    err = plain_error(tmp_path, pkl(from_bytes(legacy(lit(5) + b"Q", [], b""))))
    assert err.message == "unexpected persistent id in an embedded storage"


def test_plain_pickle_errors_name_it(tmp_path: Path) -> None:
    err = plain_error(tmp_path, pkl(lit(5) + b"Q"))
    assert err.message == "unexpected persistent id in the pickle"


def test_plain_pickle_uses_a_given_ledger(tmp_path: Path) -> None:
    ledger = Ledger()
    parsed = read_plain_bytes(tmp_path, pkl(lit(None)), ledger)
    assert parsed.ledger is ledger
    assert ledger.safety.problems == (PLAIN_NOTE,)


def trailing_where(n: int) -> str:
    return f"{n} bytes after the end of the checkpoint (not read by torch.load)"


@pytest.mark.parametrize(
    ("tail", "problem"),
    [
        (b"PK\x03\x04rest", "a zip archive is appended"),
        (b"PK\x03", "unexplained trailing data"),
        (b"junk", "unexplained trailing data"),
        (b"\0", "unexplained trailing data"),
        (b"}.", None),
        (b"].", None),
        (b"(t.", None),
        (b"\x80\x02}.", None),
    ],
)
def test_trailing_data_after_a_plain_pickle(
    tmp_path: Path, tail: bytes, problem: str | None
) -> None:
    parsed = read_plain_bytes(tmp_path, pkl(lit(None)) + tail)
    assert parsed.notes == [f"{len(tail)} bytes after the end of the pickle were ignored"]
    expected = [PLAIN_NOTE]
    if problem is not None:
        expected.append(Problem(problem, Verdict.NEEDS_TRUST, trailing_where(len(tail)), False))
    assert list(parsed.ledger.safety.problems) == expected


def test_trailing_text_pickle_is_judged_unreached(tmp_path: Path) -> None:
    tail = b"cos\nsystem\n(S'ls'\ntR."
    parsed = read_plain_bytes(tmp_path, pkl(lit(None)) + tail)
    assert [(g.name, g.verdict, g.where, g.reached) for g in parsed.ledger.safety.globals] == [
        ("os.system", Verdict.UNSAFE, trailing_where(len(tail)), False)
    ]
    assert parsed.ledger.safety.verdict is Verdict.NEEDS_TRUST  # the trailing data is not read


def test_trailing_pickle_size_limit_inclusive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_containers, "MAX_TRAILING_BYTES", 4)
    at_limit = read_plain_bytes(tmp_path, pkl(lit(None)) + b"}.\0\0")
    assert at_limit.ledger.safety.problems == (PLAIN_NOTE,)
    past = read_plain_bytes(tmp_path, pkl(lit(None)) + b"}.\0\0\0")
    assert past.ledger.safety.problems == (
        PLAIN_NOTE,
        Problem("unexplained trailing data", Verdict.NEEDS_TRUST, trailing_where(5), False),
    )


def framed_magic(left: int) -> bytes:
    """The legacy magic number as a protocol-4 pickle whose frame runs ``left`` bytes past its
    STOP (``N``: NONE opcodes the C unpickler skips with the rest of the frame)."""
    body = lit(_containers.LEGACY_MAGIC) + b"."
    return b"\x80\x04" + frame(len(body) + left) + body + b"N" * left


@pytest.mark.parametrize("rest", [pkl(lit(1001)), b"N"])
def test_a_legacy_magic_past_the_sniffed_head_has_its_left_over_frame_refused(
    tmp_path: Path, rest: bytes
) -> None:
    # The frame is longer than the 64 bytes sniffed for a legacy stream, so the file is read as
    # a plain pickle; torch.load still reads on after the magic, from the frame's end.
    data = framed_magic(80) + rest
    with ByteSource(write(tmp_path, data, "p.pkl")) as source:
        assert not _is_legacy(source)
        with pytest.raises(UnsafePickleError) as info:
            _containers.read_plain(source)
    assert info.value.message == (
        "unsafe pickle: frames that hide a second pickle: a frame has bytes left after the "
        "pickle's STOP, so the C unpickler torch.load(weights_only=False) uses skips the rest "
        "of the frame and reads different opcodes than the ones judged here in the pickle"
    )


def test_a_legacy_magic_whose_frame_ends_the_file_hides_nothing(tmp_path: Path) -> None:
    parsed = read_plain_bytes(tmp_path, framed_magic(80))
    assert parsed.root == _containers.LEGACY_MAGIC
    assert parsed.ledger.safety.verdict is Verdict.NEEDS_TRUST


def test_a_plain_pickle_may_spend_by_its_file_size_not_by_the_bytes_read(
    tmp_path: Path,
) -> None:
    # 150,000 empty dicts (240 bytes of work each: 36 MB) fit the budget of a 350 kB file, not
    # the 32 MiB floor a 256 KiB read alone would give.
    body = b"(" + b"}" * 150_000 + b"l"
    padded = read_plain_bytes(tmp_path, pkl(body) + b"\0" * 200_000)
    assert padded.root == [{}] * 150_000
    with pytest.raises(PickleBudgetError):
        read_plain_bytes(tmp_path, pkl(body))


# --- byte access helpers ----------------------------------------------------------------------


def test_view_reader_is_a_readable_seekable_raw_stream() -> None:
    raw = _containers.ViewReader(memoryview(b"abcdefgh"))
    assert (raw.readable(), raw.seekable(), raw.tell()) == (True, True, 0)
    buffered = io.BufferedReader(raw)  # refuses an unreadable raw stream
    assert buffered.read(3) == b"abc"
    assert buffered.seek(-2, io.SEEK_END) == 6
    assert buffered.read() == b"gh"
    # back to the start, and before it (clamped at the start)
    assert (raw.seek(0), raw.read(2)) == (0, b"ab")
    assert (raw.seek(-5, io.SEEK_CUR), raw.read(1)) == (0, b"a")


def test_blob_reader_bounds() -> None:
    reader = _containers._Reader(blob=b"abcdef")
    assert reader.size == 6
    assert reader.read(2, 4) == b"cdef"
    for offset, length in [(3, 4), (-1, 1), (6, 1)]:
        with pytest.raises(CorruptCheckpointError) as info:
            reader.read(offset, length)
        assert info.value.message == "embedded storage stream is truncated"
    assert _containers._Reader().size == 0


def test_file_reader_storage_loads_its_range(tmp_path: Path) -> None:
    with ByteSource(write(tmp_path, b"0123456789")) as source:
        stored = _containers._Reader(source).storage(3, 4)
        assert (stored.nbytes, stored.file_offset) == (4, 3)
        assert bytes(stored.load()) == b"3456"


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
    assert err.message == (
        f"zip record 'archive/data/0' claims {4 * n} bytes from {size} compressed bytes, "
        "a ratio over 1100:1 (a zip bomb?)"
    )
    assert err.hint == "deflate never compresses more than about 1032:1; the file is crafted"


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
    assert err.message == (
        "zip record 'archive/data/0' uses an unsupported compression method (99)"
    )
    assert err.hint == "re-zip the archive with store or deflate"


def test_other_pickles_are_judged_even_after_an_unreadable_one(tmp_path: Path) -> None:
    extra = {"extra.pkl": pkl(lit(1)), "more.pkl": pkl(STUB_CALL)}
    path = one_tensor_zip(tmp_path, f32(1), 1, extra=extra)
    raw = bytearray(path.read_bytes())
    patch_record(raw, "archive/extra.pkl", flags=1)
    path.write_bytes(bytes(raw))
    with ByteSource(path) as source:
        parsed = _containers.read_zip(source)
    assert list(parsed.ledger.safety.problems) == [
        Problem("cannot read it: zip record 'archive/extra.pkl' is encrypted",
                Verdict.NEEDS_TRUST, "archive/extra.pkl (not read by torch.load)", False),
    ]  # fmt: skip
    found = [(g.name, g.where, g.reached) for g in parsed.ledger.safety.globals]
    assert ("builtins.int", "archive/more.pkl (not read by torch.load)", False) in found


def test_record_shorter_than_its_header_says(tmp_path: Path) -> None:
    body = pkl(b"}(" + lit("w") + tensor_v2(storage_pid("FloatStorage", "0", 4), 0, (4,), (1,))
               + b"u")  # fmt: skip
    path = write_zip(tmp_path / "z.pt", body, {"0": f32(1, 2, 3)}, compression=zipfile.ZIP_DEFLATED)
    raw = bytearray(path.read_bytes())
    patch_record(raw, "archive/data/0", size=16, crc=0)
    path.write_bytes(bytes(raw))
    err = load_error(path)
    assert err.message == "zip record 'archive/data/0' has 12 bytes, expected 16"


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
    assert err.message == (
        "zip record 'archive/data/0' inflates to more than the 16 bytes its header states"
    )


# --- TorchScript code records (spec section 10) -----------------------------------------------


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


# --- ZIP: the archive's prefix and records (spec section 2) ------------------------------------


def test_zip_prefix_messages() -> None:
    assert _containers._zip_prefix(["a/data.pkl", "a/data/0", "__MACOSX/a/data.pkl"]) == "a/"
    assert _containers._zip_prefix(["data.pkl"]) == ""
    cases = [
        (["x.npy", "y.npy"], "this is a NumPy .npz archive, not a PyTorch checkpoint", None),
        (["model.weights.h5"], KERAS, None),
        (["config.json", "metadata.json"], KERAS, None),
        (["config.json"], NO_DATA_PKL, NO_DATA_PKL_HINT),
        (["metadata.json", "x.h5"], NO_DATA_PKL, NO_DATA_PKL_HINT),
        (["a/b/data.pkl"], NO_DATA_PKL, NO_DATA_PKL_HINT),
    ]
    for names, message, hint in cases:
        with pytest.raises(UnknownFormatError) as info:
            _containers._zip_prefix(names)
        assert (info.value.message, info.value.hint) == (message, hint), names
    with pytest.raises(CorruptCheckpointError) as corrupt:
        _containers._zip_prefix(["b/data.pkl", "a/data.pkl", "a/data/0"])
    assert corrupt.value.message == "zip archive holds several checkpoints: a/data.pkl, b/data.pkl"


KERAS = "this is a Keras .keras model; ckptctl reads PyTorch, safetensors and Burn files"
NO_DATA_PKL = "zip archive without a data.pkl record: not a PyTorch checkpoint"
NO_DATA_PKL_HINT = "torch.save archives hold <name>/data.pkl and <name>/data/<key> records"


def zpid(key: str, numel: object, *, stype: str = "FloatStorage", location: str = "cpu") -> bytes:
    """A ZIP storage persistent id: ('storage', type, key, location, numel) (spec 3.2)."""
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
    refusal = "torch.load refuses this file: its first record 'data.pkl' is not in a folder"
    assert parsed.notes == ["data.pkl is at the archive root (torch itself would refuse this)"]
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
    assert err.message == "unknown byteorder record 'middle'"


@pytest.mark.parametrize(("size", "ok"), [(256, True), (257, False)])
def test_text_record_size_limit_inclusive(tmp_path: Path, size: int, ok: bool) -> None:
    records = {"a/data.pkl": pkl(lit(None)), "a/version": b"3".ljust(size)}
    path = zip_file(tmp_path, records)
    if ok:
        assert read_zip_file(path).metadata == {"version": "3"}
    else:
        err = zip_error(path)
        assert err.message == "zip record 'a/version' is larger than 256 bytes"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (lit(("storagX", 1, "0", "cpu", 2)) + b"Q", "unexpected persistent id in data.pkl"),
        (b"(" + lit("storagX") + glob("torch", "FloatStorage") + lit("0") + lit("cpu") + lit(2)
         + b"tQ", "unexpected persistent id in data.pkl"),
        (lit(5) + b"Q", "unexpected persistent id in data.pkl"),
        (b"P0\n", "text persistent id in data.pkl (saved with pickle protocol 0)"),
        (b"(" + lit("storage") + lit("FloatStorage") + lit("0") + lit("cpu") + lit(2) + b"tQ",
         "malformed storage persistent id in data.pkl"),
        (b"(" + lit("storage") + glob("torch", "FloatStorage") + lit(None) + lit("cpu") + lit(2)
         + b"tQ", "malformed storage persistent id in data.pkl"),
        (zpid("0", -1), "malformed storage '0' in data.pkl"),
        (zpid("0", "2"), "malformed storage '0' in data.pkl"),
        (zpid("k" * 65, 2), f"malformed storage {'k' * 65!r} in data.pkl"),
        (zpid("5", 2), "storage record 'a/data/5' is missing from the archive"),
        (b"(" + zpid("0", 2) + zpid("0", 1, stype="IntStorage") + b"t",
         "storage '0' is used with two different types"),
    ],
)  # fmt: skip
def test_zip_persistent_id_errors(tmp_path: Path, value: bytes, message: str) -> None:
    records = {"a/data.pkl": pkl(value), "a/data/0": f32(1, 2)}
    assert zip_error(zip_file(tmp_path, records)).message == message


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
    assert parsed.notes == [
        "2 storage record(s) are compressed: they are decompressed into memory on load "
        "(torch.load(mmap=True) would return garbage for them)"
    ]
    assert (parsed.storages["0"].note, parsed.storages["0"].file_offset) == ("compressed", None)


def test_torchscript_archive_note(tmp_path: Path) -> None:
    records = {"a/data.pkl": pkl(lit(None)), "a/constants.pkl": pkl(b")"), "a/version": b"3"}
    parsed = read_zip_file(zip_file(tmp_path, records))
    assert parsed.format == "torchscript"
    assert parsed.ledger.safety.problems == (
        Problem(
            "a TorchScript archive: torch.load(weights_only=True) refuses it, and "
            "torch.jit.load runs the archive's code",
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
        assert [p.message.split(":")[0] for p in problems] == ["two readers see different pickles"]


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
    assert info.value.message == "zip record 'archive/data/0' is encrypted"


def test_stored_record_with_a_wrong_size_is_not_zero_copy(tmp_path: Path) -> None:
    # method 0 but compressed size != size: read through zipfile, which finds 12 bytes.
    path = one_tensor_zip(tmp_path, f32(1, 2, 3), 4, zipfile.ZIP_STORED, size=16)
    err = load_error(path)
    assert err.message == "zip record 'archive/data/0' has 12 bytes, expected 16"


def test_record_past_the_central_directory_hint(tmp_path: Path) -> None:
    path = _zip_with_last_record(tmp_path, 4)
    err = zip_error(path)
    assert err.message == (
        "zip record 'archive/data/0' runs past the start of the central directory"
    )
    assert err.hint == "the file looks truncated or damaged"

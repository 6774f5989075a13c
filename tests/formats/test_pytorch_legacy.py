"""Reading legacy torch.save streams (docs/formats/pytorch.md#legacy-stream) and plain pickles with
storages pickled by value (docs/formats/pytorch.md#plain-pickles).

Streams are assembled pickle by pickle (magic, version, sys_info, the main pickle, the storage
keys, then the storages' bytes) with the helpers of ``test_pytorch_reader``; what torch.load
would do with each is stated where it matters (torch refuses, reads on, or ignores). Refusals
are checked by class, a keyword and the facts the message must carry (the storage key, the
element counts, the byte positions); hints by a keyword.
"""

from __future__ import annotations

import contextlib
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ckptctl.errors import (
    CkptError,
    CorruptCheckpointError,
    ExitCode,
    UnsafePickleError,
    UnsupportedError,
)
from ckptctl.formats import open_checkpoint
from ckptctl.formats.pytorch import _containers
from ckptctl.formats.pytorch._containers import Parsed
from ckptctl.formats.pytorch._read import _is_legacy
from ckptctl.formats.pytorch._scan import PickleBudgetError, PickleTruncatedError
from ckptctl.formats.pytorch._unpickler import StorageRef, Stub, TensorRef
from ckptctl.formats.pytorch._verdict import Ledger
from ckptctl.safety import Problem, Verdict
from ckptctl.sources import ByteSource
from tests.formats.test_pytorch_reader import f32, frame, glob, lit, pkl, tensor_v2
from tests.formats.test_pytorch_safety_walk import Says

#: what a storage cut short is told to do, by a keyword
TRUNCATED = Says("truncated", "re-download")


def write(tmp_path: Path, data: bytes, name: str = "t.pt") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# --- legacy streams (docs/formats/pytorch.md#legacy-stream) ---------------------------------------

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
    """The five pickles of a legacy stream, then the storage data
    (docs/formats/pytorch.md#legacy-stream)."""
    keys_pkl = keys if isinstance(keys, bytes) else pickle.dumps(keys, protocol=2)
    return magic + version + sys_info + pkl(root) + keys_pkl + data


def lpid(key: bytes | str, numel: object = 6, view: bytes = b"N", *, location: str = "cpu",
         stype: bytes = glob("torch", "FloatStorage")) -> bytes:  # fmt: skip
    """A legacy 6-tuple storage persistent id (``view`` is the opcodes of its last element)."""
    key_op = b"C" + bytes([len(key)]) + key if isinstance(key, bytes) else lit(key)
    return b"(" + lit("storage") + stype + key_op + lit(location) + lit(numel) + view + b"tQ"


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
    data = legacy(tensor_v2(lpid("1"), 0, (6,), (1,)), ["1"], SIX)
    parsed = read_legacy_bytes(tmp_path, data)
    assert parsed.format == "pytorch-legacy"
    assert parsed.metadata == {"version": "1001"}
    assert parsed.notes == []
    assert parsed.byteorder == "little"
    stored = parsed.storages["1"]
    assert (stored.nbytes, stored.file_offset) == (24, len(data) - 24)


def test_legacy_storage_loads_its_bytes(tmp_path: Path) -> None:
    data = legacy(tensor_v2(lpid("1"), 0, (6,), (1,)), ["1"], SIX)
    with ByteSource(write(tmp_path, data)) as source:
        parsed = _containers.read_legacy(source)
        assert bytes(parsed.storages["1"].load()) == f32(0, 1, 2, 3, 4, 5)


@pytest.mark.parametrize(("flag", "big"), [(False, True), (True, False), (None, False)])
def test_big_endian_sys_info_is_noted(tmp_path: Path, flag: object, big: bool) -> None:
    sys_info = pickle.dumps({"little_endian": flag}, protocol=2)
    data = legacy(tensor_v2(lpid("1"), 0, (6,), (1,)), ["1"], SIX, sys_info=sys_info)
    assert read_legacy_bytes(tmp_path, data).notes == ([Says("big-endian")] if big else [])


def test_sys_info_that_is_no_dict_means_little_endian(tmp_path: Path) -> None:
    data = legacy(tensor_v2(lpid("1"), 0, (6,), (1,)), ["1"], SIX, sys_info=pickle.dumps(False, 2))
    assert read_legacy_bytes(tmp_path, data).notes == []


def test_trailing_bytes_after_a_legacy_stream(tmp_path: Path) -> None:
    data = legacy(tensor_v2(lpid("1"), 0, (6,), (1,)), ["1"], SIX) + b"junk!"
    parsed = read_legacy_bytes(tmp_path, data)
    assert parsed.notes == [Says("5 bytes", "ignored")]
    assert parsed.ledger.safety.problems == (
        Problem("unexplained trailing data", Verdict.NEEDS_TRUST, trailing_where(5), False),
    )


def test_wrong_magic(tmp_path: Path) -> None:
    data = legacy(lit(None), [], b"", magic=pickle.dumps(0x1950A86A20F9469CFC6D, protocol=2))
    err = legacy_error(tmp_path, data)
    assert err.message == Says("wrong magic")


def test_wrong_protocol_version(tmp_path: Path) -> None:
    data = legacy(lit(None), [], b"", version=pickle.dumps(1000, protocol=2))
    err = legacy_error(tmp_path, data, UnsupportedError)
    assert err.message == Says("protocol version 1000", "1001")


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
    assert err.message == Says("the legacy stream", "byte 3", "no STOP")


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
    assert err.message == Says("malformed module")


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
    assert err.message == Says("unexpected persistent id", "legacy stream")
    assert err.hint is None


def test_text_persistent_id(tmp_path: Path) -> None:
    err = legacy_error(tmp_path, legacy(b"P1234\n", [], b""))
    assert err.message == Says("text persistent id", "legacy stream", "protocol 0")
    assert err.hint == Says("re-save")


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
    assert err.message == Says("malformed storage persistent id")


def test_bytes_storage_keys(tmp_path: Path) -> None:
    # Python 2 files: keys are bytes; a non-ASCII byte is replaced, in the pid and the key list.
    data = legacy(tensor_v2(lpid(b"\xff1"), 0, (6,), (1,)), [b"\xff1"], SIX)
    parsed = read_legacy_bytes(tmp_path, data)
    assert list(parsed.storages) == ["\ufffd1"]
    assert isinstance(parsed.root, TensorRef)
    assert parsed.root.storage is not None
    assert parsed.root.storage.key == "\ufffd1"


@pytest.mark.parametrize(("numel", "key"), [(-1, "1"), ("6", "1"), (6, "k" * 65)])
def test_malformed_storage(tmp_path: Path, numel: object, key: str) -> None:
    err = legacy_error(tmp_path, legacy(lpid(key, numel), [], b""))
    assert err.message == Says("malformed storage", repr(key))


def test_storage_limits_inclusive(tmp_path: Path) -> None:
    key = "k" * 64
    data = legacy(tensor_v2(lpid(key, 0), 0, (0,), (1,)), [key], counted(0, b""))
    parsed = read_legacy_bytes(tmp_path, data)
    assert parsed.storages[key].nbytes == 0


def test_storage_ref_fields(tmp_path: Path) -> None:
    root = b"(" + tensor_v2(lpid("1", location="cuda:0"), 0, (6,), (1,)) \
        + tensor_v2(lpid("1", view=lit(("2", 1, 3)), location="cuda:0"), 0, (3,), (1,)) \
        + tensor_v2(lpid("1", location="cuda:0"), 1, (5,), (1,)) + b"t"  # fmt: skip
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
    assert err.message == Says("'1'", "declared twice")


@pytest.mark.parametrize(
    ("view", "says"),
    [
        (lit(["2", 0, 1]), Says("malformed storage view")),
        (lit(("2", 0)), Says("malformed storage view")),
        (lit(("2", -1, 2)), Says("malformed storage view")),
        (lit(("2", 0, -1)), Says("malformed storage view")),
        (lit(("2", "0", 1)), Says("malformed storage view")),
        (lit(("2", 0, "1")), Says("malformed storage view")),
        (lit(("2", 3, 4)), Says("view of '1'", "exceeds")),
    ],
)
def test_bad_storage_view(tmp_path: Path, view: bytes, says: Says) -> None:
    err = legacy_error(tmp_path, legacy(lpid("1", 6, view), ["1"], SIX))
    assert err.message == says


@pytest.mark.parametrize(("offset", "size"), [(0, 0), (0, 6), (6, 0)])
def test_storage_view_limits_inclusive(tmp_path: Path, offset: int, size: int) -> None:
    parsed = read_legacy_bytes(tmp_path, legacy(lpid("1", 6, lit(("2", offset, size))), ["1"], SIX))
    assert isinstance(parsed.root, StorageRef)
    assert parsed.root.view == ("2", offset, size)


def test_too_many_storages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The limit holds for the storages the pickle names and for the key list alike.
    monkeypatch.setattr(_containers, "MAX_STORAGES", 2)
    two = b"(" + lpid("1") + lpid("2") + b"t"
    parsed = read_legacy_bytes(tmp_path, legacy(two, ["1", b"2"], SIX + SIX))
    assert list(parsed.storages) == ["1", "2"]
    three = b"(" + lpid("1") + lpid("2") + lpid("3") + b"t"
    for data in (legacy(three, [], b""), legacy(lit(None), ["1", "2", "3"], b"")):
        assert legacy_error(tmp_path, data).message == Says("too many storages")


# --- legacy storage keys and data --------------------------------------------------------------


@pytest.mark.parametrize("keys", [("1",), ["1", 1], "1", [None]])
def test_malformed_key_list(tmp_path: Path, keys: object) -> None:
    err = legacy_error(tmp_path, legacy(lit(None), pickle.dumps(keys, protocol=2), b""))
    assert err.message == Says("key list", "malformed")


def test_unreferenced_storage(tmp_path: Path) -> None:
    err = legacy_error(tmp_path, legacy(tensor_v2(lpid("1"), 0, (6,), (1,)), ["1", "2"], SIX + SIX))
    assert err.message == Says("unreferenced storage", "'2'")


@pytest.mark.parametrize("left", range(8))
def test_storage_count_cut_short_in_a_legacy_stream(tmp_path: Path, left: int) -> None:
    data = legacy(lpid("1", 0), ["1"], b"\0" * left)
    err = legacy_error(tmp_path, data)
    assert err.message == Says("truncated", "storage data")
    assert err.hint == TRUNCATED


def test_storage_count_mismatch(tmp_path: Path) -> None:
    err = legacy_error(tmp_path, legacy(lpid("1"), ["1"], counted(-1, b"")))
    assert err.message == Says("'1'", "-1 elements", "says 6")


def test_storage_data_cut_short(tmp_path: Path) -> None:
    data = legacy(lpid("1"), ["1"], SIX[:-1])
    err = legacy_error(tmp_path, data)
    assert err.message == Says("'1'", f"byte {len(data) + 1}", f"{len(data)} bytes")
    assert err.hint == TRUNCATED


def test_big_main_pickle_is_read_in_growing_chunks(tmp_path: Path) -> None:
    # A main pickle longer than the first 64 KiB read: retried whole, judged once.
    root = b"(" + lit("x" * 200_000) + tensor_v2(lpid("1"), 0, (6,), (1,)) + b"t"
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


# --- plain pickles and storages by value (docs/formats/pytorch.md#plain-pickles) ------------------

#: the one problem of every plain pickle: torch.load cannot read it, pickle.load runs it
PLAIN_NOTE = Problem(Says("plain pickle", "unrestricted"), Verdict.NEEDS_TRUST, "the pickle")


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
    data = pkl(b"}(" + lit("w") + tensor_v2(from_bytes(inner), 1, (2,), (1,)) + b"u")
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


UNTYPED = glob("torch.storage", "UntypedStorage")


def test_storage_by_value_of_an_untyped_storage(tmp_path: Path) -> None:
    blob = legacy(lpid("7", 3, stype=UNTYPED), ["7"], counted(3, b"abc"))
    root = read_plain_bytes(tmp_path, pkl(from_bytes(blob))).root
    assert isinstance(root, StorageRef)
    assert (root.key, root.numel, root.inline) == ("7", 3, b"abc")
    assert (root.stype.qualname, root.stype.dtype) == ("torch.storage.UntypedStorage", None)


@pytest.mark.parametrize(
    ("data", "facts", "torch_says"),
    [
        (counted(3, b"ab"), lambda n: ("'7'", f"byte {n + 1}", f"has {n} bytes"), "out of data"),
        (counted(3, b"")[:5], lambda n: ("truncated", "storage data"), "out of data"),
        (counted(4, b"abcd"), lambda n: ("'7'", "4 elements", "says 3"), "wrong byte size"),
    ],
)
def test_storage_data_torch_refuses_too_is_noted_and_refused(
    tmp_path: Path, data: bytes, facts: Any, torch_says: str
) -> None:
    """torch.load fails on these whatever weights_only says (too little data, or an element
    count that disagrees with the pickle's): the ledger says so (the verdict is not safe), and
    the read fails, as a stream of its own or embedded as a storage by value."""
    blob = legacy(lpid("7", 3, stype=UNTYPED), ["7"], data)
    says = Says(*facts(len(blob)))
    ledger = Ledger()
    with pytest.raises(CorruptCheckpointError) as info:
        read_legacy_bytes(tmp_path, blob, ledger)
    assert info.value.message == says
    [problem] = ledger.safety.problems
    assert problem == Problem(
        Says(*says.facts, "torch.load refuses", "weights_only=True or False", torch_says),
        Verdict.NEEDS_TRUST, "the legacy stream", True, True,
    )  # fmt: skip
    assert ledger.safety.torch_refusal == problem.message  # what verify reports as torch's
    assert plain_error(tmp_path, pkl(from_bytes(blob))).message == says


@pytest.mark.parametrize(
    "inner",
    [legacy(lit(5), [], b""), legacy(lpid("7", 0), [], b""), legacy(lit(None), [], b"")],
)
def test_embedded_stream_without_one_storage(tmp_path: Path, inner: bytes) -> None:
    err = plain_error(tmp_path, pkl(from_bytes(inner)))
    assert err.message == Says("embedded storage", "one storage")


def test_embedded_stream_errors_name_it(tmp_path: Path) -> None:
    err = plain_error(tmp_path, pkl(from_bytes(legacy(lit(5) + b"Q", [], b""))))
    assert err.message == Says("unexpected persistent id", "embedded storage")


def test_plain_pickle_errors_name_it(tmp_path: Path) -> None:
    err = plain_error(tmp_path, pkl(lit(5) + b"Q"))
    assert err.message == Says("unexpected persistent id", "the pickle")


def test_plain_pickle_uses_a_given_ledger(tmp_path: Path) -> None:
    ledger = Ledger()
    parsed = read_plain_bytes(tmp_path, pkl(lit(None)), ledger)
    assert parsed.ledger is ledger
    assert ledger.safety.problems == (PLAIN_NOTE,)


def trailing_where(n: int) -> Says:
    """Where trailing data is, by its facts: its size, and that torch.load does not read it."""
    return Says(f"{n} bytes", "not read")


@pytest.mark.parametrize(
    ("tail", "problem"),
    [
        (b"PK\x03\x04rest", "zip archive is appended"),
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
    assert parsed.notes == [Says(f"{len(tail)} bytes", "ignored")]
    expected = [PLAIN_NOTE]
    if problem is not None:
        expected.append(
            Problem(Says(problem), Verdict.NEEDS_TRUST, trailing_where(len(tail)), False)
        )
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
    assert info.value.message == Says("unsafe", "hide a second pickle", "STOP")


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


def test_embedded_stream_cut_anywhere_is_refused(tmp_path: Path) -> None:
    inner = legacy(lpid("7", 6), ["7"], SIX)
    for cut in range(0, len(inner), 3):
        with pytest.raises(CorruptCheckpointError) as info:
            read_plain_bytes(tmp_path, pkl(from_bytes(inner[:cut])))
        assert info.value.exit_code == ExitCode.INPUT, cut

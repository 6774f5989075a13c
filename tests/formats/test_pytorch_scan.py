"""The pickle scan (``scan_pickle``): where each pickle ends, and what it refuses, where.

Every PyTorch reader path checks a pickle with ``scan_pickle`` before unpickling it. It is
checked here on hand-assembled pickles (opcodes spelled with the constants of the stdlib
``pickle`` module) against ``pickletools.genops``, the ground truth for where a pickle ends;
refusals by class (cut short or corrupt), the byte position, the stream's name and a keyword.
Nesting is probed on both sides of ``MAX_PICKLE_DEPTH`` for every opcode that builds a container.
"""

from __future__ import annotations

import mmap
import pickle
import pickletools
import re
import runpy
import struct
import zipfile
from collections import OrderedDict
from pathlib import Path

# Opcodes, from the stdlib's own table.
from pickle import (
    ADDITEMS,
    APPEND,
    APPENDS,
    BINGET,
    BINPERSID,
    BINPUT,
    BUILD,
    DICT,
    DUP,
    EMPTY_DICT,
    EMPTY_LIST,
    EMPTY_SET,
    FROZENSET,
    GET,
    GLOBAL,
    INST,
    LIST,
    LONG_BINGET,
    LONG_BINPUT,
    MARK,
    MEMOIZE,
    NEWOBJ,
    NEWOBJ_EX,
    NONE,
    OBJ,
    POP,
    POP_MARK,
    PUT,
    REDUCE,
    SETITEM,
    SETITEMS,
    STACK_GLOBAL,
    STOP,
    TUPLE,
    TUPLE1,
    TUPLE2,
    TUPLE3,
)  # fmt: skip
from typing import cast

import pytest

from ckptctl.errors import CorruptCheckpointError, ExitCode
from ckptctl.formats.pytorch import _scan
from ckptctl.formats.pytorch._scan import MAX_PICKLE_DEPTH, PickleTruncatedError
from ckptctl.formats.pytorch._walker import scan_pickle
from tests import conftest

WHERE = "data.pkl"
VALID = conftest.VALID / "pytorch"

PROTO2 = pickle.PROTO + b"\x02"
FRAME = pickle.FRAME


def u32(n: int) -> bytes:
    return struct.pack("<I", n)


def u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def genops_end(data: bytes, start: int = 0) -> int:
    """Ground truth: the offset just past the STOP of the pickle at ``start`` (pickletools)."""
    last = None
    for _op, _arg, pos in pickletools.genops(data[start:]):
        last = pos
    assert last is not None
    return start + last + 1


def scan_error(data: bytes, start: int = 0) -> CorruptCheckpointError:
    """What ``scan_pickle`` raises for ``data``: exit 3, with a hint that the file is damaged."""
    with pytest.raises(CorruptCheckpointError) as info:
        scan_pickle(data, start, WHERE)
    assert "damaged" in str(info.value.hint)
    assert info.value.exit_code == ExitCode.INPUT
    return info.value


def assert_error(err: CorruptCheckpointError, pos: int, why: str, *, cut: bool) -> None:
    """``err`` names the stream, the byte ``pos`` and says ``why``; ``cut``: a truncation."""
    assert re.search(rf"\b{WHERE} at byte {pos}: .*{re.escape(why)}", err.message), err.message
    assert str(err) == err.message
    assert type(err) is (PickleTruncatedError if cut else CorruptCheckpointError)


def both_end(data: bytes, start: int = 0) -> int:
    """Where ``scan_pickle`` says the pickle at ``start`` ends."""
    return scan_pickle(data, start, WHERE)


# --- the opcode table (built at import time) ------------------------------------------------


def _expected_arg_table() -> dict[int, tuple[int, int]]:
    """Argument kind and size of every opcode, from ``pickletools.opcodes``."""
    kinds = {
        pickletools.TAKEN_FROM_ARGUMENT1: _scan._LEN1,
        pickletools.TAKEN_FROM_ARGUMENT4: _scan._LEN4,
        pickletools.TAKEN_FROM_ARGUMENT4U: _scan._LEN4,
        pickletools.TAKEN_FROM_ARGUMENT8U: _scan._LEN8,
    }
    table = {}
    for op in pickletools.opcodes:
        code = ord(op.code.encode("latin-1"))
        if op.arg is None:
            table[code] = (_scan._FIXED, 0)
        elif op.arg.n >= 0:
            table[code] = (_scan._FIXED, op.arg.n)
        elif op.arg.n == pickletools.UP_TO_NEWLINE:
            pair = op.arg.name == "stringnl_noescape_pair"  # GLOBAL, INST: two lines
            table[code] = (_scan._LINE2 if pair else _scan._LINE, 0)
        else:
            table[code] = (kinds[op.arg.n], 0)
    return table


def test_argument_table_matches_pickletools() -> None:
    """Re-run the module so a mutant of the import-time table builder takes effect.

    Under its own name: mutmut's trampolines pick the active mutant by module name.
    """
    expected = _expected_arg_table()
    fresh = runpy.run_path(_scan.__file__, run_name=_scan.__name__)["_ARG"]
    assert fresh == expected
    assert expected == _scan._ARG


def test_unknown_opcodes_are_those_pickletools_does_not_know() -> None:
    known = {ord(op.code.encode("latin-1")) for op in pickletools.opcodes}
    for code in range(256):
        if code in known:
            continue
        data = PROTO2 + bytes([code]) + STOP
        assert_error(scan_error(data), 2, f"unknown opcode 0x{code:02x}", cut=False)


# --- whole pickles ---------------------------------------------------------------------------


def _objects() -> list[object]:
    return [
        None, True, False, 0, 1, 255, 256, 65535, 65536, -1, 2**31, -(2**31) - 1, 2**64, -(2**300),
        1.5, "", "a", "é" * 300, b"", b"x" * 300, bytearray(b"ab"), (), (1,), (1, 2), (1, 2, 3),
        (1, 2, 3, 4), [], [1], list(range(1200)), {}, {"a": 1}, {i: str(i) for i in range(1200)},
        set(), {1, 2}, frozenset(), frozenset({1}), OrderedDict(a=[1, (2, {"b": b"c"})]),
        [[1, 2]] * 3, ("s", "s", "s"), complex(1, 2), range(3), slice(1, 2),
    ]  # fmt: skip


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_stdlib_pickles_end_at_their_stop(protocol: int) -> None:
    for obj in _objects():
        data = pickle.dumps(obj, protocol=protocol)
        assert both_end(data) == len(data) == genops_end(data)
        framed = b"JUNK" + data + data + b"trailing"  # back to back, as in the legacy format
        first = both_end(framed, 4)
        assert first == 4 + len(data)
        assert both_end(framed, first) == 4 + 2 * len(data)


def _fixture_pickles() -> list[tuple[str, bytes]]:
    out = []
    for path in sorted(VALID.glob("*.pt")):
        if not zipfile.is_zipfile(path) or path.name == "no_crc.pt":  # CRCs zeroed on purpose
            continue
        with zipfile.ZipFile(path) as zf:
            out += [(f"{path.name}:{n}", zf.read(n)) for n in zf.namelist() if n.endswith(".pkl")]
    return out


def test_torch_written_pickles_pass_both() -> None:
    pickles = _fixture_pickles()
    assert len(pickles) >= 15
    for name, data in pickles:
        assert both_end(data) == len(data) == genops_end(data), name


@pytest.mark.parametrize("name", ["min_legacy.pt", "dtypes_legacy.pt"])
def test_legacy_files_are_cut_into_their_pickles(name: str) -> None:
    """The legacy format writes magic, protocol, sys info and the object as four pickles."""
    data = (VALID / name).read_bytes()
    pos = 0
    for _ in range(4):
        end = genops_end(data, pos)
        assert both_end(data, pos) == end
        pos = end


# --- the scan's messages ------------------------------------------------------------------

CAREFUL_ERRORS = [
    # (pickle after PROTO 2, position of the error past PROTO 2, message, truncated?)
    (b"\xff", 0, "unknown opcode 0xff", False),
    (b"N\x05.", 1, "unknown opcode 0x05", False),
    (b"K", 0, "truncated", True),
    (b"NJ\x00\x00\x00", 1, "truncated", True),
    (b"G" + bytes(7), 0, "truncated", True),
    (b"r\x00\x00\x00", 0, "truncated", True),
    (b"h", 0, "truncated", True),
    (FRAME + bytes(7), 0, "truncated", True),
    (FRAME + u64(3) + b"N.", 0, "frame longer", True),
    (FRAME + u64(2**63) + b"N.", 0, "frame longer", True),
    (FRAME + u64(2**64 - 1) + b"N.", 0, "frame longer", True),
    (b"N" + FRAME + u64(3) + b"N.", 1, "frame longer", True),
    (b"I12", 0, "text argument without newline", True),
    (b"N" + GLOBAL + b"mod\nname", 1, "text argument without newline", True),
    (GLOBAL + b"mod", 0, "text argument without newline", True),
    (b"pabc\n", 0, "bad memo index", False),
    (b"N" + GET + b"x\n", 1, "bad memo index", False),
    (b"N" + PUT + b"\n", 1, "bad memo index", False),
    (b"N" + PUT + b"-1\n.", 1, "memo index -1 out of range", False),
    (b"N" + LONG_BINPUT + u32(2**32 - 1) + b".", 1, "memo index 4294967295 out of range", False),
    (b"U", 0, "truncated", True),
    (b"NX\x00\x00\x00", 1, "truncated", True),
    (b"\x8e" + bytes(7), 0, "truncated", True),
    (b"U\x05abc", 0, "declared length 5 ", True),
    (b"NX" + u32(4) + b"abc", 1, "declared length 4 ", True),
    (b"\x8d" + u64(2**64 - 1) + b"abc", 0,
     "declared length 18446744073709551615 ", True),
    # An 8-byte length is unsigned: read as signed, this one would jump back onto the STOP
    # inside the SHORT_BINSTRING.
    (b"U\x01.\x8d" + u64(2**64 - 10), 3,
     "declared length 18446744073709551606 ", True),
    (b"N", 1, "no STOP", True),
    (b"", 0, "no STOP", True),
    (b"K\x01", 2, "no STOP", True),
    (b"U\x00", 2, "no STOP", True),
    (b"X" + u32(0), 5, "no STOP", True),
    (b"U\x03abc", 5, "no STOP", True),
    (FRAME + u64(1) + b"N", 10, "no STOP", True),
    (b"N" + GET + b"0\n", 4, "no STOP", True),
    (b"Nt", 1, "no MARK", False),
    (b"N(0t", 3, "no MARK", False),
    (b"(N1" + POP_MARK, 3, "no MARK", False),
    (b"Ne", 1, "no MARK", False),
    (b"Nu", 1, "no MARK", False),
    (b"N\x90", 1, "no MARK", False),
    (b"Nl", 1, "no MARK", False),
    (b"Nd", 1, "no MARK", False),
    (b"N\x91", 1, "no MARK", False),
    (b"No", 1, "no MARK", False),
    (b"Nimod\nname\n", 1, "no MARK", False),
    (b"\x85", 0, "stack underflow", False),
    (b"N\x86", 1, "stack underflow", False),
    (b"NN\x87", 2, "stack underflow", False),
    (b"(N\x86", 2, "stack underflow", False),
    (b"a", 0, "stack underflow", False),
    (b"Na", 1, "stack underflow", False),
    (b"Nb", 1, "stack underflow", False),
    (b"(Ne", 2, "stack underflow", False),
    (b"(NNu", 3, "stack underflow", False),
    (b"(N\x90", 2, "stack underflow", False),
    (b"NNs", 2, "stack underflow", False),
    (b"NR", 1, "stack underflow", False),
    (b"N\x81", 1, "stack underflow", False),
    (b"NN\x92", 2, "stack underflow", False),
    (b"N\x93", 1, "stack underflow", False),
    (b"Q", 0, "stack underflow", False),
    (b"0", 0, "stack underflow", False),
    (b"N00", 2, "stack underflow", False),
    (b"2", 0, "stack underflow", False),
    (b"(NN10", 4, "stack underflow", False),
    (b"NN\x8600", 4, "stack underflow", False),
    (b"NNN\x8700", 5, "stack underflow", False),
    (b"}NNs00", 5, "stack underflow", False),
    (b"NNR00", 4, "stack underflow", False),
    (b"NNN\x9200", 5, "stack underflow", False),
    (b"NN\x9300", 4, "stack underflow", False),
    (b"NQ00", 3, "stack underflow", False),
    (b"Na", 1, "stack underflow", False),
    (b"]Na00", 4, "stack underflow", False),
]  # fmt: skip


@pytest.mark.parametrize(("body", "at", "why", "cut"), CAREFUL_ERRORS)
def test_scan_messages(body: bytes, at: int, why: str, cut: bool) -> None:
    data = PROTO2 + body
    assert_error(scan_error(data), 2 + at, why, cut=cut)
    # The same stream later in a buffer: positions are absolute.
    shifted = b"..." + data
    assert_error(scan_error(shifted, 3), 5 + at, why, cut=cut)


def test_a_start_past_the_end_finds_no_stop_at_the_end() -> None:
    data = PROTO2 + b"N."
    for start in (len(data), len(data) + 1, len(data) + 100):
        assert_error(scan_error(data, start), len(data), "no STOP", cut=True)


def test_the_scan_accepts_what_the_error_cases_miss_by_one() -> None:
    binary = [
        b"K\x01.", b"G" + bytes(8) + b".", b"U\x00.", b"X" + u32(0) + b".", b"U\x03abc.",
        b"\x8e" + u64(1) + b"x.", FRAME + u64(2) + b"N.", FRAME + u64(0) + b"N.",
        b"cmod\nname\n.", b"c\n\n.", b"c\nname\n.", b"cmod\n\n.", b"(N0t.", b"(N1N.", b"N(0.",
        b"\x97\x98.", b"N\x98.", b"NN2\x86\x85.", b"N(Nt\x86.", b"N(N0N1\x85.",
        b"cmod\nname\ncmod\nname\n\x86.",
        b"I12\n.", b"N" + PUT + b"7\n" + GET + b"7\n.", b"(Vab\nimod\nname\n.",
    ]  # fmt: skip
    for body in binary:
        data = PROTO2 + body
        assert both_end(data) == len(data) == genops_end(data)
        assert both_end(b"xy" + data + b"zz", 2) == 2 + len(data)


def test_memo_index_limit_is_the_stream_length() -> None:
    """A memo index is refused only past the number of bytes in the stream (inclusive limit)."""
    for put, index in ((LONG_BINPUT, u32), (BINPUT, lambda n: bytes([n]))):
        length = len(b"N" + put + index(0) + STOP)
        at_limit = b"N" + put + index(length) + STOP
        assert both_end(at_limit) == length
        over = b"N" + put + index(length + 1) + STOP
        assert_error(scan_error(over), 1, f"memo index {length + 1} out of range", cut=False)
        framed = b"abcd" + over  # the limit is the whole buffer, not what follows ``start``
        assert both_end(framed, 4) == len(framed)
    text_ok = b"N" + PUT + b"5\n."
    assert scan_pickle(text_ok, 0, WHERE) == len(text_ok) == 5
    text_over = b"N" + PUT + b"6\n."
    assert_error(scan_error(text_over), 1, "memo index 6 out of range", cut=False)


def test_memo_put_on_an_empty_stack_is_ignored() -> None:
    for body in (BINPUT + b"\x00", LONG_BINPUT + u32(0), MEMOIZE):
        data = PROTO2 + body + BINGET + b"\x00" + STOP
        assert both_end(data) == len(data)
    data = PROTO2 + PUT + b"0\n" + GET + b"0\n" + STOP
    assert scan_pickle(data, 0, WHERE) == len(data)


# --- nesting depth ---------------------------------------------------------------------------

# One level of nesting: prefix + inner object + suffix; the opcode at ``suffix[at]`` makes it.
WRAPS = {
    "TUPLE": (MARK, TUPLE, 0),
    "LIST": (MARK, LIST, 0),
    "DICT": (MARK + NONE, DICT, 0),
    "DICT key": (MARK, NONE + DICT, 1),
    "FROZENSET": (MARK, FROZENSET, 0),
    "OBJ": (MARK, OBJ, 0),
    "TUPLE1": (b"", TUPLE1, 0),
    "TUPLE2": (NONE, TUPLE2, 0),
    "TUPLE2 first": (b"", NONE + TUPLE2, 1),
    "TUPLE3": (NONE + NONE, TUPLE3, 0),
    "TUPLE3 first": (b"", NONE + NONE + TUPLE3, 2),
    "APPEND": (EMPTY_LIST, APPEND, 0),
    "BUILD": (NONE, BUILD, 0),
    "APPENDS": (EMPTY_LIST + MARK, APPENDS, 0),
    "SETITEMS": (EMPTY_DICT + MARK + NONE, SETITEMS, 0),
    "SETITEMS key": (EMPTY_DICT + MARK, NONE + SETITEMS, 1),
    "ADDITEMS": (EMPTY_SET + MARK, ADDITEMS, 0),
    "SETITEM": (EMPTY_DICT + NONE, SETITEM, 0),
    "SETITEM key": (EMPTY_DICT, NONE + SETITEM, 1),
    "REDUCE": (NONE, REDUCE, 0),
    "REDUCE callable": (b"", NONE + REDUCE, 1),
    "NEWOBJ": (NONE, NEWOBJ, 0),
    "NEWOBJ class": (b"", NONE + NEWOBJ, 1),
    "NEWOBJ_EX": (NONE + NONE, NEWOBJ_EX, 0),
    "NEWOBJ_EX args": (NONE, NONE + NEWOBJ_EX, 1),
    "NEWOBJ_EX class": (b"", NONE + NONE + NEWOBJ_EX, 2),
    "BINPERSID": (b"", BINPERSID, 0),
}
TEXT_WRAPS = {"INST": (MARK, INST + b"mod\nname\n", 0)}


def nest(prefix: bytes, suffix: bytes, levels: int, core: bytes = NONE) -> bytes:
    return prefix * levels + core + suffix * levels


def depth_error_at(prefix: bytes, suffix: bytes, at: int, levels: int, head: int) -> int:
    """Position of the opcode that makes the outermost level."""
    return head + len(nest(prefix, suffix, levels)) - len(suffix) + at


DEEP = f"nested deeper than {MAX_PICKLE_DEPTH}"


def test_depth_limit_is_a_thousand() -> None:
    assert MAX_PICKLE_DEPTH == 1000


@pytest.mark.parametrize("name", sorted(WRAPS))
def test_depth_limit_per_opcode(name: str) -> None:
    prefix, suffix, at = WRAPS[name]
    ok = PROTO2 + nest(prefix, suffix, MAX_PICKLE_DEPTH) + STOP
    assert both_end(ok) == len(ok)
    deep = PROTO2 + nest(prefix, suffix, MAX_PICKLE_DEPTH + 1) + STOP
    pos = depth_error_at(prefix, suffix, at, MAX_PICKLE_DEPTH + 1, 2)
    assert_error(scan_error(deep), pos, DEEP, cut=False)


def test_depth_limit_inst() -> None:
    prefix, suffix, at = TEXT_WRAPS["INST"]
    ok = PROTO2 + nest(prefix, suffix, MAX_PICKLE_DEPTH) + STOP
    assert scan_pickle(ok, 0, WHERE) == len(ok)
    empty = PROTO2 + nest(prefix, suffix, MAX_PICKLE_DEPTH, core=b"") + STOP  # INST of nothing
    assert scan_pickle(empty, 0, WHERE) == len(empty)
    deep = PROTO2 + nest(prefix, suffix, MAX_PICKLE_DEPTH + 1) + STOP
    pos = depth_error_at(prefix, suffix, at, MAX_PICKLE_DEPTH + 1, 2)
    assert_error(scan_error(deep), pos, DEEP, cut=False)


@pytest.mark.parametrize("name", ["TUPLE", "LIST", "FROZENSET", "OBJ", "APPENDS", "ADDITEMS"])
def test_empty_marked_containers_are_one_level(name: str) -> None:
    """A container of nothing is as deep as one of leaves."""
    prefix, suffix, _ = WRAPS[name]
    inner = (MARK + suffix) if name not in ("APPENDS", "ADDITEMS") else (prefix + suffix)
    ok = PROTO2 + nest(*WRAPS["TUPLE1"][:2], MAX_PICKLE_DEPTH - 1, core=inner) + STOP
    assert both_end(ok) == len(ok)
    deep = PROTO2 + nest(*WRAPS["TUPLE1"][:2], MAX_PICKLE_DEPTH, core=inner) + STOP
    assert_error(scan_error(deep), len(deep) - 2, DEEP, cut=False)


LEAVES = [
    b"K\x01", b"M\x01\x02", b"J" + u32(7), b"G" + bytes(8), b"N", b"\x88", b"\x89",
    b"\x8a\x01\x05", b"\x8b" + u32(1) + b"\x05", b"U\x01a", b"C\x01a", b"X" + u32(1) + b"a",
    b"B" + u32(1) + b"a", b"T" + u32(1) + b"a", b"\x8c\x01a", b"\x8d" + u64(1) + b"a",
    b"\x8e" + u64(1) + b"a", b"\x96" + u64(1) + b"a", b")", b"]", b"}", b"\x8f",
    b"\x82\x01", b"\x83\x01\x00", b"\x84" + u32(1), b"cmod\nname\n", b"NN\x93",
    b"N" + BINPUT + b"\x00" + POP + BINGET + b"\x00",
    b"N" + BINPUT + b"\x00" + POP + BINGET + b"\x01",
    b"N" + LONG_BINPUT + u32(300) + POP + LONG_BINGET + u32(300),
    b"N" + LONG_BINPUT + u32(0) + POP + LONG_BINGET + u32(7),
    b"\x97\x98",
]  # fmt: skip
TEXT_LEAVES = [b"I1\n", b"F1.5\n", b"L1\n", b"S'a'\n", b"Va\n", b"Pkey\n", b"N" + PUT + b"0\n0g0\n"]


@pytest.mark.parametrize("leaf", LEAVES + TEXT_LEAVES)
def test_leaves_are_depth_zero(leaf: bytes) -> None:
    prefix, suffix, _ = WRAPS["TUPLE1"]
    ok = PROTO2 + nest(prefix, suffix, MAX_PICKLE_DEPTH, core=leaf) + STOP
    assert scan_pickle(ok, 0, WHERE) == len(ok)
    deep = PROTO2 + nest(prefix, suffix, MAX_PICKLE_DEPTH + 1, core=leaf) + STOP
    assert_error(scan_error(deep), len(deep) - 2, DEEP, cut=False)


def deep_object(levels: int) -> bytes:
    return nest(MARK, TUPLE, levels)


# Operations that keep the object below them (a container, a callable) at its depth or deeper.
KEEP = {
    "APPEND": NONE + APPEND,
    "BUILD": NONE + BUILD,
    "APPENDS": MARK + NONE + APPENDS,
    "APPENDS empty": MARK + APPENDS,
    "SETITEMS": MARK + NONE + NONE + SETITEMS,
    "SETITEMS empty": MARK + SETITEMS,
    "ADDITEMS": MARK + NONE + ADDITEMS,
    "SETITEM": NONE + NONE + SETITEM,
    "DUP POP": DUP + POP,
    "MARK POP": MARK + POP,
    "MARK POP_MARK": MARK + NONE + NONE + POP_MARK,
    "PUT GET": BINPUT + b"\x03" + POP + NONE + POP + BINGET + b"\x03",
    "LONG PUT GET": LONG_BINPUT + u32(600) + POP + LONG_BINGET + u32(600),
    "MEMOIZE GET": MEMOIZE + POP + BINGET + b"\x00",
    "PUT MEMOIZE GET": BINPUT + b"\x05" + MEMOIZE + POP + BINGET + b"\x01",
    "PUT twice": BINPUT + b"\x00" + NONE + BINPUT + b"\x01" + POP + POP + BINGET + b"\x00",
    "GET by index": BINPUT + b"\x01" + NONE + BINPUT + b"\x00" + POP + BINGET + b"\x01",
    "LONG GET by index": (LONG_BINPUT + u32(1) + NONE + LONG_BINPUT + u32(0) + POP
                          + LONG_BINGET + u32(1)),
    "FRAME PROTO": FRAME + u64(3) + PROTO2 + NONE + POP,
    "text PUT GET": PUT + b"4\n" + POP + GET + b"4\n",
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(KEEP))
def test_depth_is_kept_by(name: str) -> None:
    """``deep`` then the operation then TUPLE1: fine at the limit, refused one past it."""
    ok = PROTO2 + deep_object(MAX_PICKLE_DEPTH - 1) + KEEP[name] + TUPLE1 + STOP
    assert both_end(ok) == len(ok)
    assert both_end(b"abc" + ok, 3) == 3 + len(ok)
    deep = PROTO2 + deep_object(MAX_PICKLE_DEPTH) + KEEP[name] + TUPLE1 + STOP
    assert_error(scan_error(deep), len(deep) - 2, DEEP, cut=False)
    assert_error(scan_error(b"abc" + deep, 3), len(deep) + 1, DEEP, cut=False)


def test_dup_copies_the_top_only() -> None:
    """DUP of a deep top, below two leaves: the copy is deep (not the first or second item)."""
    base = PROTO2 + NONE + NONE + deep_object(MAX_PICKLE_DEPTH) + DUP
    data = base + TUPLE1 + STOP
    assert_error(scan_error(data), len(data) - 2, DEEP, cut=False)
    shallow = PROTO2 + deep_object(MAX_PICKLE_DEPTH) + NONE + NONE + DUP + TUPLE1 + STOP
    assert both_end(shallow) == len(shallow)


def test_pop_takes_the_top_not_a_mark_below_it() -> None:
    # POP with a MARK below the top item pops the item; the MARK is still there for TUPLE.
    data = PROTO2 + MARK + NONE + NONE + POP + TUPLE + STOP
    assert both_end(data) == len(data)
    # POP right after MARK drops the mark: the TUPLE then has none.
    data = PROTO2 + NONE + MARK + POP + TUPLE + STOP
    assert_error(scan_error(data), 5, "no MARK", cut=False)


def test_stack_global_result_is_a_leaf() -> None:
    # STACK_GLOBAL takes the two strings only: TUPLE2 of (deep, global) is one level deeper.
    pair = PROTO2 + deep_object(MAX_PICKLE_DEPTH) + NONE + NONE + STACK_GLOBAL + TUPLE2 + STOP
    assert_error(scan_error(pair), len(pair) - 2, DEEP, cut=False)
    leaf = PROTO2 + nest(b"", TUPLE1, MAX_PICKLE_DEPTH, core=NONE + NONE + STACK_GLOBAL) + STOP
    assert both_end(leaf) == len(leaf)
    deep = PROTO2 + nest(b"", TUPLE1, MAX_PICKLE_DEPTH + 1, core=NONE + NONE + STACK_GLOBAL) + STOP
    assert_error(scan_error(deep), len(deep) - 2, DEEP, cut=False)


def test_marks_and_stack_after_containers() -> None:
    """What a container opcode leaves: one item, and the marks below its own."""
    cases = [
        MARK + MARK + NONE + TUPLE + TUPLE,
        MARK + NONE + NONE + NONE + TUPLE3 + TUPLE,
        NONE + NONE + TUPLE2 + POP,
        MARK + NONE + NONE + POP_MARK + NONE,
        EMPTY_LIST + MARK + NONE + NONE + APPENDS + POP + NONE,
    ]
    for body in cases:
        data = PROTO2 + body + STOP
        assert both_end(data) == len(data)
        under = PROTO2 + body + POP + POP + STOP
        with pytest.raises(CorruptCheckpointError, match="stack underflow"):
            scan_pickle(under, 0, WHERE)


def test_long_memo_indices_are_unsigned_past_two_gib(tmp_path: Path) -> None:
    """A LONG_BINGET index of 2**31 or more names the entry LONG_BINPUT stored there.

    Memo indices are capped at the buffer's length, so such an index needs a buffer over
    2 GiB: a sparse file, memory-mapped, costs no disk and no memory.
    """
    index = 2**31
    body = (PROTO2 + deep_object(MAX_PICKLE_DEPTH) + LONG_BINPUT + u32(index) + POP
            + LONG_BINGET + u32(index) + TUPLE1 + STOP)  # fmt: skip
    path = tmp_path / "big.pkl"
    with path.open("wb") as out:
        out.write(body)
        out.truncate(index + 16)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        data = cast(bytes, mapped)  # only len, indexing, find and the buffer protocol are used
        assert len(data) > index
        assert_error(scan_error(data), len(body) - 2, DEEP, cut=False)


def test_a_finished_walk_is_freed_without_the_cyclic_collector() -> None:
    # the walker's handler table holds bound methods: kept after the walk, it made the walker,
    # its memo and its copy of the pickle wait for a collection (0.03 s of every ls of a big .pt)
    import gc
    import weakref

    from ckptctl.formats.pytorch._walker import walk_pickle

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        walker = walk_pickle(PROTO2 + b"}q\x00.", 0, "x.pkl", judge=None, budget=None)
        ref = weakref.ref(walker)
        del walker
        assert ref() is None
    finally:
        if was_enabled:
            gc.enable()

"""The safety walk (``assess_pickle``, ``Ledger``): what ``torch.load`` would do with a pickle.

The walk reads a pickle's opcodes symbolically and judges what ``torch.load`` would do with
them. The tests compare the walk's whole answer (each ``GlobalUse`` and ``Problem``, in order)
with an expected one, so a changed verdict, reason, stream name or fact is caught; a problem's
message is matched by its facts (``Says``: the opcode, the byte, the global), not its sentence:

* the walk keeps in step with the stdlib's own decoder (``pickletools.genops``) for every opcode,
  checked by the byte position it reports for an unknown opcode put right after the one tested;
* damaged streams (truncated arguments, stack underflow, missing MARK) are reported with the
  byte where the walk stopped, and what precedes the damage is still judged;
* the rules of torch's weights-only unpickler: which calls, BUILDs, APPENDs and SETITEMs need
  trust or are unsafe, which opcodes it refuses (named as ``pickletools`` names them);
* nested ``_load_from_bytes`` streams, on both sides of the depth and count limits;
* the one-line account in ``UnsafePickleError`` and the ledger a container reader keeps.

Globals are classified by ``_allowlist.classify`` (another unit), so expected uses are built with
it; what is checked here is how the walk uses that classification.
"""

from __future__ import annotations

import pickle
import pickletools
import struct

import pytest

from ckptctl.errors import ExitCode, UnsafePickleError
from ckptctl.formats.pytorch import _safety
from ckptctl.formats.pytorch._allowlist import WEIGHTS_ONLY_OPCODES, classify
from ckptctl.formats.pytorch._safety import MAX_NESTED_STREAMS, first_unsafe
from ckptctl.formats.pytorch._verdict import Ledger, assess_pickle, assess_stream
from ckptctl.safety import GlobalUse, PickleSafety, Problem, Verdict

SAFE, TRUST, UNSAFE = Verdict.SAFE, Verdict.NEEDS_TRUST, Verdict.UNSAFE
W = "data.pkl"
P2 = pickle.PROTO + b"\x02"


class Says(str):
    """Equal to any text that contains each of its facts (a message matched by what it says)."""

    facts: tuple[str, ...]

    def __new__(cls, *facts: str) -> Says:
        says = super().__new__(cls, " ... ".join(facts))
        says.facts = facts
        return says

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and all(fact in other for fact in self.facts)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = str.__hash__


EXT_REASON = Says("copyreg")
TOO_DEEP = Says("too many nested _load_from_bytes")
COMPUTED_BYTES = Says("_load_from_bytes", "computed by")
BUILT = "value built by"
LFB = ("torch.storage", "_load_from_bytes")

# --- opcode helpers ----------------------------------------------------------------------------


def g(module: str, name: str) -> bytes:
    """GLOBAL module name."""
    return pickle.GLOBAL + module.encode() + b"\n" + name.encode() + b"\n"


def u(text: str) -> bytes:
    """BINUNICODE text."""
    raw = text.encode("utf-8", "surrogatepass")
    return pickle.BINUNICODE + struct.pack("<I", len(raw)) + raw


def su(text: str) -> bytes:
    """SHORT_BINUNICODE text."""
    raw = text.encode()
    return pickle.SHORT_BINUNICODE + bytes([len(raw)]) + raw


def call(module: str, name: str, *args: str) -> bytes:
    """module.name(*args), the arguments strings."""
    return g(module, name) + pickle.MARK + b"".join(u(a) for a in args) + pickle.TUPLE + b"R"


def bb(blob: bytes) -> bytes:
    """BINBYTES blob."""
    return pickle.BINBYTES + struct.pack("<I", len(blob)) + blob


def judge(data: bytes, where: str = W, *, reached: bool = True) -> PickleSafety:
    """The walk's answer, less the opcodes torch refuses (checked on their own below)."""
    return strip(assess_pickle(data, where, reached=reached))


def strip(safety: PickleSafety) -> PickleSafety:
    """``safety`` less the opcodes torch refuses."""
    kept = tuple(p for p in safety.problems if not p.weights_only)
    return PickleSafety(safety.globals, kept)


def use(
    module: str, name: str, *, called: bool = False, where: str = W, reached: bool = True
) -> GlobalUse:
    """What the walk should record for ``module.name``, classified by the allowlist."""
    verdict, reason = classify(module, name, called=called)
    return GlobalUse(f"{module}.{name}", verdict, where, reason, called, reached)


def ext(code: int, *, called: bool = False, where: str = W) -> GlobalUse:
    return GlobalUse(f"<copyreg extension {code}>", UNSAFE, where, EXT_REASON, called, True)


def ext_problem(code: int, where: str = W) -> Problem:
    return Problem(Says(f"extension code {code}:", "copyreg"), UNSAFE, where)


def refused(name: str, where: str = W, reached: bool = True) -> Problem:
    """The problem for an opcode torch's weights-only unpickler does not know."""
    return Problem(Says(f"opcode {name},", "refuses"), TRUST, where, reached, weights_only=True)


def malformed(detail: str, where: str = W) -> Problem:
    return Problem(Says("malformed", f"{detail})", "judged on what precedes"), TRUST, where)


def chain_problem(how: str, what: str, where: str = W) -> Problem:
    return Problem(Says(f"{how} calls the result of ", what, "call chain"), UNSAFE, where)


def legacy_stream(main: bytes) -> bytes:
    """A legacy (torch < 1.6) stream: magic, protocol, sys_info, ``main``, storage keys."""
    magic = P2 + b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little") + b"."
    return magic + P2 + b"M\xe9\x03." + P2 + b"}." + main + P2 + b"]."


def load_from_bytes(blob: bytes) -> bytes:
    """``torch.storage._load_from_bytes(blob)`` (a value on the stack, no STOP)."""
    return g(*LFB) + bb(blob) + pickle.TUPLE1 + pickle.REDUCE


def lfb_use(where: str = W) -> GlobalUse:
    return use(*LFB, called=True, where=where)


def nested_where(*counts: int) -> str:
    """The stream name of a main pickle reached through ``_load_from_bytes`` #counts..."""
    return W + "".join(f" > _load_from_bytes #{c} (pickle 4)" for c in counts)


# --- the walk stays in step with pickletools ---------------------------------------------------

Q = struct.Struct("<Q").pack
I4 = struct.Struct("<I").pack
OD = g("collections", "OrderedDict")

#: One sample of every opcode (after what it needs on the stack), as the stdlib writes it.
STEP_SAMPLES = {
    "PROTO": P2,
    "FRAME": pickle.FRAME + Q(0),
    "BININT1": b"K\x05",
    "BININT2": b"M\x05\x01",
    "BININT": b"J\x05\x00\x00\x01",
    "BINFLOAT": b"G" + struct.pack(">d", 1.5),
    "INT": b"I05\n",
    "LONG": b"L5L\n",
    "FLOAT": b"F1.5\n",
    "LONG1": b"\x8a\x02\x01\x02",
    "LONG4": b"\x8b" + struct.pack("<i", 2) + b"\x01\x02",
    "NONE": b"N",
    "NEWTRUE": b"\x88",
    "NEWFALSE": b"\x89",
    "EMPTY_TUPLE": b")",
    "EMPTY_LIST": b"]",
    "EMPTY_DICT": b"}",
    "EMPTY_SET": b"\x8f",
    "SHORT_BINUNICODE": su("ab"),
    "BINUNICODE": u("ab"),
    "BINUNICODE8": b"\x8d" + Q(2) + b"ab",
    "UNICODE": b"Vab\n",
    "STRING": b"S'ab'\n",
    "BINSTRING": b"T" + struct.pack("<i", 2) + b"ab",
    "SHORT_BINSTRING": b"U\x02ab",
    "BINBYTES": b"B" + I4(2) + b"ab",
    "SHORT_BINBYTES": b"C\x02ab",
    "BINBYTES8": b"\x8e" + Q(2) + b"ab",
    "BYTEARRAY8": b"\x96" + Q(2) + b"ab",
    "TUPLE": b"(NNt",
    "TUPLE1": b"N\x85",
    "TUPLE2": b"NN\x86",
    "TUPLE3": b"NNN\x87",
    "LIST": b"(Nl",
    "DICT": b"(NNd",
    "FROZENSET": b"(N\x91",
    "APPEND": b"]Na",
    "APPENDS": b"](NNe",
    "SETITEM": b"}NNs",
    "SETITEMS": b"}(NNu",
    "ADDITEMS": b"\x8f(N\x90",
    "BINPUT": b"Nq\x01",
    "LONG_BINPUT": b"Nr\x01\x00\x00\x00",
    "MEMOIZE": b"N\x94",
    "PUT": b"Np1\n",
    "BINGET": b"h\x01",
    "LONG_BINGET": b"j\x01\x00\x00\x00",
    "GET": b"g1\n",
    "POP": b"N0",
    "POP_MARK": b"(N1",
    "DUP": b"N2",
    "GLOBAL": OD,
    "STACK_GLOBAL": su("collections") + su("OrderedDict") + b"\x93",
    "REDUCE": OD + b")R",
    "NEWOBJ": OD + b")\x81",
    "NEWOBJ_EX": OD + b")}\x92",
    "OBJ": b"(" + OD + b"o",
    "INST": b"(icollections\nOrderedDict\n",
    "BUILD": OD + b")R}b",
    "PERSID": b"Pabc\n",
    "BINPERSID": u("0") + b"Q",
    "EXT1": b"\x82\x01",
    "EXT2": b"\x83\x01\x02",
    "EXT4": b"\x84\x01\x02\x03\x04",
    "NEXT_BUFFER": b"\x97",
    "READONLY_BUFFER": b"\x97\x98",
}


def test_the_samples_cover_every_opcode_but_mark_and_stop() -> None:
    names = {op.name for op in pickletools.opcodes}
    assert names - set(STEP_SAMPLES) == {"MARK", "STOP"}


def _ops(sample: bytes) -> list[str]:
    """The opcodes of ``sample`` as pickletools decodes them (it checks every argument)."""
    return [op.name for op, _, _ in pickletools.genops(sample + pickle.STOP)][:-1]


@pytest.mark.parametrize("name", sorted(STEP_SAMPLES))
def test_the_walk_reads_each_opcode_as_wide_as_pickletools(name: str) -> None:
    sample = STEP_SAMPLES[name]
    ops = _ops(sample)
    assert ops[-1] == name
    stop = [pos for _, _, pos in pickletools.genops(sample + pickle.STOP)][-1]
    refusals = [
        refused(op.name)
        for op in dict.fromkeys(op for op, _, _ in pickletools.genops(sample + pickle.STOP))
        if op.code.encode("latin-1")[0] not in WEIGHTS_ONLY_OPCODES
    ]
    # an unknown opcode right after the sample is reported at the byte pickletools puts it
    damaged = assess_pickle(sample + b"\xff", W)
    assert damaged.problems[-2:] == (
        refused("0xff"),
        malformed(f"unknown opcode 0xff at byte {stop}"),
    )
    complete = assess_pickle(sample + pickle.STOP, W)
    assert [p for p in complete.problems if p.verdict is TRUST] == refusals
    assert judge(sample).problems[-1] == malformed("no STOP opcode")


def test_data_after_stop_is_not_read() -> None:
    assert judge(P2 + b"N." + call("timeit", "timeit", "x") + b".") == PickleSafety()


@pytest.mark.parametrize(
    ("code", "name"),
    sorted((op.code.encode("latin-1")[0], op.name) for op in pickletools.opcodes),
)
def test_refused_opcodes_are_named_as_pickletools_names_them(code: int, name: str) -> None:
    assert _safety._OPNAMES.get(code, name) == name
    if code not in WEIGHTS_ONLY_OPCODES:
        assert code in _safety._OPNAMES


def test_each_refused_opcode_is_reported_once() -> None:
    data = P2 + b"N\x94N\x94N2\x940."
    assert assess_pickle(data, W).problems == (refused("MEMOIZE"), refused("DUP"), refused("POP"))


def test_every_byte_is_judged_without_raising() -> None:
    for code in range(256):
        for tail in (b"", b".", b"\x00\x00\x00\x00\x00\x00\x00\x00.", b"x\nx\n."):
            safety = judge(P2 + b"NN" + bytes([code]) + tail)
            assert safety.verdict in (TRUST, UNSAFE, SAFE)


# --- damaged streams -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        # truncated arguments: the byte named is the opcode's
        (P2 + b"M\x05", "truncated at byte 2"),
        (P2 + b"J\x05\x00\x00", "truncated at byte 2"),
        (P2 + b"G" + b"\x00" * 7, "truncated at byte 2"),
        (P2 + pickle.FRAME + b"\x00" * 7, "truncated at byte 2"),
        (b"\x80", "truncated at byte 0"),
        (P2 + b"\x8a", "truncated at byte 2"),
        (P2 + b"\x8a\x02\x01", "truncated at byte 2"),
        (P2 + b"\x8b\x02\x00\x00", "truncated at byte 2"),
        (P2 + b"\x8b\x02\x00\x00\x00\x01", "truncated at byte 2"),
        (P2 + b"\x8b\xff\xff\xff\xff", "negative length at byte 2"),
        (P2 + b"\x8c", "truncated at byte 2"),
        (P2 + b"\x8c\x02a", "truncated at byte 2"),
        (P2 + b"\x8d" + b"\x00" * 7, "truncated at byte 2"),
        (P2 + b"\x8d" + Q(2) + b"a", "truncated at byte 2"),
        (P2 + b"T\x00\x00\x00", "truncated at byte 2"),
        (P2 + b"T\xff\xff\xff\xff", "negative length at byte 2"),
        (P2 + b"T\x02\x00\x00\x00a", "truncated at byte 2"),
        (P2 + b"U", "truncated at byte 2"),
        (P2 + b"U\x02a", "truncated at byte 2"),
        (P2 + b"B\x00\x00\x00", "truncated at byte 2"),
        (P2 + b"B\xff\xff\xff\xff", "truncated at byte 2"),
        (P2 + b"C\xff" + b"a" * 200, "truncated at byte 2"),
        (P2 + b"\x8e" + b"\xff" * 8, "truncated at byte 2"),
        (P2 + b"\x96" + b"\xff" * 8, "truncated at byte 2"),
        (P2 + b"\x8d" + b"\xff" * 8, "truncated at byte 2"),
        (P2 + b"\x8a\xff" + b"\x00" * 200, "truncated at byte 2"),
        (P2 + b"N\x82", "truncated at byte 3"),
        (P2 + b"N\x83\x01", "truncated at byte 3"),
        (P2 + b"N\x84\x01\x00\x00", "truncated at byte 3"),
        (P2 + b"Nq", "truncated at byte 3"),
        (P2 + b"j\x01\x00\x00", "truncated at byte 2"),
        (P2 + b"X\x03\x00\x00\x00ab", "truncated at byte 2"),
        # the fast path reads fixed-width arguments without a bounds check
        (P2 + b"X\x03\x00\x00", "error"),
        (P2 + b"Nr\x01\x00\x00", "error"),
        (P2 + b"h", "IndexError"),
        (P2 + b"X\x02\x00\x00\x00\xff\xfe.", "UnicodeDecodeError"),
        # text arguments
        (P2 + b"Iabc", "without newline at byte 3"),
        (P2 + b"Vabc", "without newline at byte 3"),
        (P2 + b"S'abc'", "without newline at byte 3"),
        (P2 + b"cmod\nname", "without newline at byte 7"),
        (P2 + b"Npx\n", "memo index at byte 3"),
        (P2 + b"gx\n", "memo index at byte 2"),
        (P2 + b"S'\\x4'\n", "bad STRING at byte 2"),
        # stack and marks
        (P2 + b"\x85", "stack underflow at byte 2"),
        (P2 + b"N(\x85", "stack underflow at byte 4"),
        (P2 + b"\x86", "stack underflow at byte 2"),
        (P2 + b"N\x86", "stack underflow at byte 3"),
        (P2 + b"N(N\x86", "stack underflow at byte 5"),
        (P2 + b"NN(N\x87", "stack underflow at byte 6"),
        (P2 + b"t", "no MARK at byte 2"),
        (P2 + b"l", "no MARK at byte 2"),
        (P2 + b"d", "no MARK at byte 2"),
        (P2 + b"\x91", "no MARK at byte 2"),
        (P2 + b"1", "no MARK at byte 2"),
        (P2 + b"]e", "no MARK at byte 3"),
        (P2 + b"}u", "no MARK at byte 3"),
        (P2 + b"\x8f\x90", "no MARK at byte 3"),
        (P2 + b"o", "no MARK at byte 2"),
        (P2 + b"(o", "a class at byte 3"),
        (P2 + b"icollections\nOrderedDict\n", "no MARK at byte 2"),
        (P2 + b"R", "stack underflow at byte 2"),
        (P2 + b"NR", "stack underflow at byte 3"),
        (P2 + b"(NR", "stack underflow at byte 4"),
        (P2 + b"N(NR", "stack underflow at byte 5"),
        (P2 + b"r\x00\x00\x00\x00", "stack underflow at byte 2"),
        (P2 + b"N(r\x00\x00\x00\x00", "stack underflow at byte 4"),
        (P2 + b"Q", "stack underflow at byte 2"),
        (P2 + b"N(Q", "stack underflow at byte 4"),
        (P2 + b"q\x00", "stack underflow at byte 2"),
        (P2 + b"\x94", "stack underflow at byte 2"),
        (P2 + b"p0\n", "stack underflow at byte 2"),
        (P2 + b"2", "stack underflow at byte 2"),
        (P2 + b"\x98", "stack underflow at byte 2"),
        (P2 + b"0", "stack underflow at byte 2"),
        (P2 + b"a", "stack underflow at byte 2"),
        (P2 + b"Na", "stack underflow at byte 3"),
        (P2 + b"(Na", "stack underflow at byte 4"),
        (P2 + b"(e", "stack underflow at byte 3"),
        (P2 + b"Ns", "stack underflow at byte 3"),
        (P2 + b"NNs", "stack underflow at byte 4"),
        (P2 + b"(u", "stack underflow at byte 3"),
        (P2 + b"(\x90", "stack underflow at byte 3"),
        (P2 + b"b", "stack underflow at byte 2"),
        (P2 + b"Nb", "stack underflow at byte 3"),
        (P2 + b"N\x81", "stack underflow at byte 3"),
        (P2 + b"NN\x92", "stack underflow at byte 4"),
        (P2 + b"N\x93", "stack underflow at byte 3"),
    ],
)
def test_damage_is_reported_at_the_byte_where_it_is(data: bytes, detail: str) -> None:
    assert judge(data).problems[-1] == malformed(detail)


@pytest.mark.parametrize(
    "data",
    [
        P2 + b"M\x05\x00",
        P2 + b"\x8c\x02ab",
        P2 + u("ab"),
        P2 + b"N\x82\x01",
        P2 + b"Vx\n",
        P2 + b"Nq\x00",
        P2 + b"Nr\x00\x00\x00\x00",
        P2 + b"h\x01",
        P2 + b"j\x01\x00\x00\x00",
        P2 + b"K\x01",
        P2 + b"\x8a\x01\x01",
    ],
)
def test_an_argument_that_ends_the_data_exactly_is_not_truncated(data: bytes) -> None:
    assert judge(data).problems[-1:] == (malformed("no STOP opcode"),)
    assert all("malformed" not in p.message for p in judge(data).problems[:-1])


def test_bytes_that_are_no_opcode_are_reported_where_they_are() -> None:
    known = {op.code.encode("latin-1")[0] for op in pickletools.opcodes}
    for code in sorted(set(range(256)) - known):
        safety = assess_pickle(P2 + b"N" + bytes([code]) + b"N.", W)
        assert safety.problems == (
            refused(f"0x{code:02x}"),
            malformed(f"unknown opcode 0x{code:02x} at byte 3"),
        )


def test_damage_after_a_call_keeps_the_call() -> None:
    data = P2 + call("timeit", "timeit", "x") + b"\x86"
    assert judge(data) == PickleSafety(
        (use("timeit", "timeit", called=True),),
        (malformed(f"stack underflow at byte {len(data) - 1}"),),
    )


def test_a_recursion_error_is_judged_unsafe(monkeypatch: pytest.MonkeyPatch) -> None:
    # the walk is iterative; should a RecursionError escape anyway (a fault injected into the
    # classification here), the stream is refused rather than passed
    def deep(module: str, name: str) -> tuple[str, str]:
        raise RecursionError

    monkeypatch.setattr(_safety, "canonical", deep)
    safety = assess_pickle(P2 + b"N" + OD + b".", "x.pkl", reached=False)
    assert safety == PickleSafety((), (Problem(Says("too deeply"), UNSAFE, "x.pkl", False),))


def test_a_memoryview_is_judged_like_its_bytes() -> None:
    data = P2 + call("timeit", "timeit", "x") + b"."
    assert assess_pickle(memoryview(data), W) == judge(data)


# --- stack and memo bookkeeping ----------------------------------------------------------------


def test_pop_on_a_mark_removes_the_mark() -> None:
    # POP with nothing above the last MARK pops the MARK (pickle's load_pop)
    assert judge(P2 + b"N(0\x85.") == PickleSafety()
    assert judge(P2 + b"NN0\x85.") == PickleSafety()
    assert judge(P2 + b"N0\x85.").problems == (malformed("stack underflow at byte 4"),)


def test_memo_keeps_the_item_put() -> None:
    net = g("mypkg", "run_command")
    for put, get in (
        (b"q\x07", b"h\x07"),
        (b"r\x07\x01\x00\x00", b"j\x07\x01\x00\x00"),
        (b"p7\n", b"g7\n"),
        (b"\x94", b"h\x00"),
        (b"r\x07\x00\x00\x00", b"h\x07"),
    ):
        data = P2 + net + put + b"0" + get + b")R."
        assert judge(data).globals == (use("mypkg", "run_command", called=True),), put
    # a memo index never put is a plain value: calling it is a call chain
    data = P2 + g("mypkg", "run_command") + b"q\x01" + b"0h\x02)R."
    assert judge(data).problems == (chain_problem("REDUCE", BUILT),)


def test_long_memo_indexes_are_unsigned() -> None:
    data = P2 + g("mypkg", "run_command") + b"r\xff\xff\xff\xff" + b"0j\xff\xff\xff\xff)R."
    assert judge(data).globals == (use("mypkg", "run_command", called=True),)


def test_memoize_numbers_entries_by_memo_size() -> None:
    # MEMOIZE stores at len(memo): the second one lands at 1
    data = P2 + g("mypkg", "Net") + b"\x94" + g("mypkg", "run_command") + b"\x940h\x01)R."
    assert judge(data).globals == (use("mypkg", "Net"), use("mypkg", "run_command", called=True))


def test_dup_copies_the_global() -> None:
    data = P2 + g("mypkg", "run_command") + b"2)R0)R."
    assert assess_pickle(data, W) == PickleSafety(
        (use("mypkg", "run_command", called=True),), (refused("DUP"), refused("POP"))
    )


def test_proto_and_frame_push_nothing() -> None:
    assert judge(P2 + b"\x85").problems == (malformed("stack underflow at byte 2"),)
    data = P2 + pickle.FRAME + Q(1) + b"\x85"
    assert assess_pickle(data, W).problems == (
        refused("FRAME"),
        malformed("stack underflow at byte 11"),
    )


def test_tuples_keep_their_items_in_order() -> None:
    helper = g("mypkg", "helper")
    tensor = g("torch", "Tensor")
    rebuild = g("torch._tensor", "_rebuild_from_type_v2")
    expected = (
        use("torch._tensor", "_rebuild_from_type_v2", called=True),
        use("mypkg", "helper", called=True),
        use("torch", "Tensor"),
    )
    for args in (
        helper + tensor + b"\x86",
        helper + tensor + b")\x87",
        b"(" + helper + tensor + b"t",
    ):
        assert judge(P2 + rebuild + args + b"R.").globals == expected, args
    one = judge(P2 + rebuild + helper + b"\x85R.")
    assert one.globals == expected[:2]


# --- strings: how each opcode decodes its argument --------------------------------------------


def stack_global(module: bytes, name: bytes = su("x")) -> bytes:
    """STACK_GLOBAL of two pushed strings, then STOP."""
    return b"\x80\x04" + module + name + b"\x93."


@pytest.mark.parametrize(
    "pushed",
    [
        su("mypkg"),
        u("my\udc80pkg"),  # a lone surrogate: pickle reads UTF-8 with surrogatepass
        b"\x8c\x05my\xed\xb2\x80",
        b"\x8d" + Q(5) + b"mypkg",
        b"T\x05\x00\x00\x00myp\xe9g",  # Python 2 str: one byte, one character (latin-1)
        b"U\x05myp\xe9g",
        b"Vmy\\u00e9pkg\n",  # raw-unicode-escape
        b"S'mypkg'\n",
        b'S"mypkg"\n',
        b"S'my\\x41pkg'\n",
        b"S'my\\xe9'\n",
        b"S''\n",
    ],
)
def test_string_opcodes_decode_as_pickle_does(pushed: bytes) -> None:
    # what pickle itself makes of the string (torch.load reads Python 2 strings as latin-1)
    module = pickle.loads(pushed + pickle.STOP, encoding="latin1")
    assert isinstance(module, str)
    safety = judge(stack_global(pushed))
    assert [x.name for x in safety.globals] == [f"{module}.x"]
    assert all("malformed" not in p.message for p in safety.problems)


@pytest.mark.parametrize(
    ("pushed", "module"),
    [(b"S'mypkg\"\n", "'mypkg\""), (b"S'\n", "'"), (b"Smypkg\n", "mypkg")],
)
def test_an_unquoted_string_is_read_as_it_stands(pushed: bytes, module: str) -> None:
    # pickle refuses a STRING argument without matching quotes; the walk reads on (judging
    # more of the stream, never less), taking the argument as written
    with pytest.raises(pickle.UnpicklingError, match="must be quoted"):
        pickle.loads(pushed + pickle.STOP)
    assert [x.name for x in judge(stack_global(pushed)).globals] == [f"{module}.x"]


@pytest.mark.parametrize(
    "pushed",
    [
        b"B\x05\x00\x00\x00mypkg",
        b"C\x05mypkg",
        b"\x8e" + Q(5) + b"mypkg",
        b"\x96" + Q(5) + b"mypkg",
        b"N",
        b"K\x01",
    ],
)
def test_stack_global_of_anything_but_strings_is_unsafe(pushed: bytes) -> None:
    safety = judge(stack_global(pushed))
    assert safety.globals == ()
    assert safety.problems[-1] == Problem(Says("STACK_GLOBAL", "computed by"), UNSAFE, W)
    named = judge(stack_global(su("mypkg"), pushed))
    assert named.globals == ()
    assert named.problems[-1] == safety.problems[-1]


def test_stack_global_takes_module_then_name() -> None:
    data = b"\x80\x04" + su("timeit") + su("timeit") + b"\x93" + su("mypkg") + su("Net") + b"\x93."
    assert judge(data).globals == (use("timeit", "timeit"), use("mypkg", "Net"))


def test_empty_strings_are_not_negative() -> None:
    for empty in (b"T\x00\x00\x00\x00", b"U\x00", b"\x8c\x00", b"X\x00\x00\x00\x00", b"B" + I4(0)):
        assert judge(P2 + empty + b"0.") == PickleSafety(), empty


def test_one_byte_lengths_are_unsigned() -> None:
    # LONG1, SHORT_BINUNICODE, SHORT_BINSTRING, SHORT_BINBYTES: a length byte of 0x80 or more
    module = "m" * 200
    for pushed, op in (
        (b"\x8c\xc8" + module.encode(), "SHORT_BINUNICODE"),
        (b"U\xc8" + module.encode(), "SHORT_BINSTRING"),
    ):
        assert _ops(pushed) == [op]  # the stdlib reads 200 characters too
        assert [x.name for x in judge(stack_global(pushed)).globals] == [f"{module}.x"]
    for value in (b"\x8a\x80" + b"\x01" * 0x80, b"C\xc8" + b"m" * 200):
        assert judge(P2 + value + b"\x85.") == PickleSafety()


def test_a_long_of_no_bytes_is_zero() -> None:
    # pickle writes 0 as LONG1 with a length of 0 (protocol 2 ``encode_long(0) == b""``)
    assert pickle.loads(P2 + b"\x8a\x00.") == 0
    assert assess_pickle(P2 + b"\x8a\x00.", W) == PickleSafety()
    assert assess_pickle(P2 + b"\x8b\x00\x00\x00\x00.", W) == PickleSafety((), (refused("LONG4"),))


def test_ext_codes_are_read_little_endian_and_ext4_signed() -> None:
    for data, code in (
        (b"\x82\xfe", 254),
        (b"\x83\x01\x02", 0x0201),
        (b"\x83\xff\xff", 0xFFFF),
        (b"\x84\x01\x02\x03\x04", 0x04030201),
        (b"\x84\xff\xff\xff\xff", -1),
    ):
        assert judge(P2 + data + b".") == PickleSafety((ext(code),), (ext_problem(code),))


# --- globals and calls -------------------------------------------------------------------------


def test_a_global_named_twice_is_one_use() -> None:
    data = P2 + g("timeit", "timeit") + g("timeit", "timeit") + b"00."
    assert judge(data) == PickleSafety((use("timeit", "timeit"),))


def test_python_2_names_are_mapped() -> None:
    data = P2 + g("__builtin__", "set") + b")R" + g("copy_reg", "_reconstructor") + b"00."
    assert judge(data).globals == (
        use("builtins", "set", called=True),
        use("copyreg", "_reconstructor"),
    )


def test_a_call_is_judged_as_a_call_of_the_right_global() -> None:
    data = (
        P2 + g("timeit", "timeit") + g("mypkg", "run_command") + b"0)R" + g("mypkg", "Net") + b"0."
    )
    assert judge(data) == PickleSafety(
        (
            use("timeit", "timeit", called=True),
            use("mypkg", "run_command"),
            use("mypkg", "Net"),
        )
    )


def test_an_allowed_call_stays_safe() -> None:
    assert judge(P2 + OD + b")R.") == PickleSafety(
        (use("collections", "OrderedDict", called=True),)
    )


def test_uses_carry_the_stream_and_reached() -> None:
    data = P2 + call("timeit", "timeit", "x") + g("mypkg", "Net") + b"0."
    assert judge(data, "s", reached=False) == PickleSafety(
        (
            use("timeit", "timeit", called=True, where="s", reached=False),
            use("mypkg", "Net", where="s", reached=False),
        )
    )


@pytest.mark.parametrize(
    ("how", "op"),
    [("REDUCE", b")R"), ("NEWOBJ", b")\x81"), ("NEWOBJ_EX", b")}\x92"), ("OBJ", None)],
)
def test_each_call_opcode_calls_the_global(how: str, op: bytes | None) -> None:
    net = g("mypkg", "run_command")
    data = P2 + (b"(" + net + b"o" if op is None else net + op) + b"."
    expected = (use("mypkg", "run_command", called=True),)
    assert judge(data).globals == expected
    value = P2 + (b"(" + u("x") + b"o" if op is None else u("x") + op) + b"."
    assert judge(value).problems[-1] == chain_problem(how, BUILT)
    result = P2 + (b"(" + OD + b")Ro" if op is None else OD + b")R" + op) + b"."
    assert judge(result).problems[-1] == chain_problem(how, "collections.OrderedDict")


def test_inst_calls_the_global() -> None:
    data = P2 + b"(" + u("x") + b"imypkg\nrun_command\n."
    assert assess_pickle(data, W) == PickleSafety(
        (use("mypkg", "run_command", called=True),), (refused("INST"),)
    )


def test_calling_a_call_result_is_a_chain_and_yields_a_plain_value() -> None:
    locate = call("mypkg", "Locator", "os.system")
    data = P2 + locate + b")R" + b")R."
    assert judge(data).problems == (
        chain_problem("REDUCE", "mypkg.Locator"),
        chain_problem("REDUCE", BUILT),
    )


def test_a_global_called_again_gives_the_same_kind_of_result() -> None:
    # the second call takes the walk's fast path; its result is still a call of mypkg.Net
    net = g("mypkg", "Net") + b"q\x00"
    twice = P2 + net + b")R0h\x00)R"
    assert judge(twice + b"}b.") == PickleSafety((use("mypkg", "Net", called=True),))
    assert judge(twice + b"]a.").problems == ()  # APPEND to an untrusted call: judged by it
    assert judge(twice + b")R.").problems == (chain_problem("REDUCE", "mypkg.Net"),)
    od = P2 + OD + b"q\x00)R0h\x00)R"
    assert judge(od + b"NNs.").problems == ()
    assert judge(od + b"Na.").problems == (Problem(Says("APPEND", "not a list"), TRUST, W),)


def test_calling_an_extension_code_stays_unsafe_for_its_own_reason() -> None:
    data = P2 + b"\x82\x05)R" + b"\x82\x05)R" + b")R."
    assert judge(data) == PickleSafety(
        (ext(5, called=True),),
        (ext_problem(5), chain_problem("REDUCE", "<copyreg extension>.5")),
    )


def test_an_extension_code_in_an_unread_stream_is_not_reached() -> None:
    assert judge(P2 + b"\x82\x05.", "x.pkl", reached=False) == PickleSafety(
        (GlobalUse("<copyreg extension 5>", UNSAFE, "x.pkl", EXT_REASON, False, False),),
        (Problem(Says("extension code 5:", "copyreg"), UNSAFE, "x.pkl", False),),
    )


def test_two_extension_codes_are_two_uses() -> None:
    data = P2 + b"\x82\x05\x82\x06\x82\x05" + b"000."
    assert judge(data) == PickleSafety((ext(5), ext(6)), (ext_problem(5), ext_problem(6)))


def test_an_unsafe_named_global_called_keeps_the_called_reason() -> None:
    # builtins.eval is unsafe when only named; a call records the call
    data = P2 + g("builtins", "eval") + g("builtins", "eval") + b"0" + u("1") + b"\x85R."
    assert judge(data).globals == (use("builtins", "eval", called=True),)


# --- torch's rules for BUILD, APPEND, SETITEM ----------------------------------------------------


def test_build_on_a_class_is_unsafe_and_on_a_plain_value_needs_trust() -> None:
    data = P2 + g("collections", "Counter") + b"N}" + u("x") + b"K\x01s\x86b."
    assert judge(data) == PickleSafety(
        (use("collections", "Counter"),),
        (
            Problem(
                Says("BUILD", "collections.Counter itself"),
                UNSAFE,
                W,
            ),
        ),
    )
    assert judge(P2 + b"]}b.").problems == (Problem(Says("BUILD", "not an object"), TRUST, W),)
    assert judge(P2 + OD + b")R}b.").problems == ()


@pytest.mark.parametrize(
    ("target", "ok"),
    [
        (b"]", True),
        (b"(l", True),
        (g("mypkg", "Net") + b")R", True),  # the untrusted call already needs trust
        (g("collections", "OrderedDict") + b")R", False),
        (b"}", False),
        (b"N", False),
        (g("mypkg", "Net"), False),
    ],
)
def test_append_only_to_lists(target: bytes, ok: bool) -> None:
    expected = () if ok else (Problem(Says("APPEND", "not a list"), TRUST, W),)
    assert judge(P2 + target + b"Na.").problems == expected
    assert judge(P2 + target + b"(NNe.").problems == expected


@pytest.mark.parametrize(
    ("target", "ok"),
    [
        (b"}", True),
        (b"(d", True),
        (g("collections", "OrderedDict") + b")R", True),
        (g("collections", "Counter") + b")R", True),
        (g("mypkg", "Net") + b")R", True),
        (g("torch", "Size") + b")R", False),  # allowed, but not a dict
        (b"]", False),
        (b"N", False),
        (g("collections", "OrderedDict"), False),
    ],
)
def test_setitem_only_on_dicts(target: bytes, ok: bool) -> None:
    expected = () if ok else (Problem(Says("SETITEM", "not a dict"), TRUST, W),)
    assert judge(P2 + target + b"NNs.").problems == expected
    assert judge(P2 + target + b"(NNNNu.").problems == expected


def test_additems_and_frozenset_are_refused_opcodes_only() -> None:
    assert assess_pickle(P2 + b"\x8f(NN\x90(N\x91.", W).problems == (
        refused("ADDITEMS"),
        refused("FROZENSET"),
    )


# --- calls that call their arguments -----------------------------------------------------------


def test_rebuild_from_type_v2_calls_its_first_argument_only_when_a_global() -> None:
    rebuild = g("torch._tensor", "_rebuild_from_type_v2")
    data = P2 + rebuild + b"(" + u("x") + g("mypkg", "helper") + b"tR."
    assert judge(data) == PickleSafety(
        (use("torch._tensor", "_rebuild_from_type_v2", called=True), use("mypkg", "helper"))
    )
    assert judge(P2 + rebuild + b"NR.").globals == (
        use("torch._tensor", "_rebuild_from_type_v2", called=True),
    )


def test_reconstructor_calls_its_second_argument() -> None:
    recon = g("copyreg", "_reconstructor")
    data = P2 + recon + b"(" + g("mypkg", "Net") + g("mypkg", "helper") + b"NtR."
    assert judge(data) == PickleSafety(
        (
            use("copyreg", "_reconstructor", called=True),
            use("mypkg", "Net"),
            use("mypkg", "helper", called=True),
        )
    )
    # one argument: nothing at index 1 to call
    short = P2 + recon + g("mypkg", "helper") + b"\x85R."
    assert judge(short) == PickleSafety(
        (use("copyreg", "_reconstructor", called=True), use("mypkg", "helper"))
    )


def test_a_special_call_is_judged_again_every_time() -> None:
    # _rebuild_from_type_v2 called twice through the memo: the second call's argument counts
    rebuild = g("torch._tensor", "_rebuild_from_type_v2") + b"q\x00"
    data = P2 + rebuild + u("x") + b"\x85R0h\x00" + g("mypkg", "helper") + b"\x85R."
    assert judge(data).globals == (
        use("torch._tensor", "_rebuild_from_type_v2", called=True),
        use("mypkg", "helper", called=True),
    )


# --- nested _load_from_bytes streams -------------------------------------------------------------


def payload() -> bytes:
    return P2 + call("timeit", "timeit", "x") + b"."


def outer(inner: bytes) -> bytes:
    return P2 + load_from_bytes(inner) + b"."


def nest(main: bytes, levels: int) -> bytes:
    """``main`` as the main pickle of a legacy stream ``levels`` deep in data.pkl."""
    data = main
    for _ in range(levels):
        data = outer(legacy_stream(data))
    return data


def test_a_nested_stream_is_judged_under_its_own_name() -> None:
    safety = judge(outer(legacy_stream(payload())))
    inner = nested_where(1)
    assert safety == PickleSafety((lfb_use(), use("timeit", "timeit", called=True, where=inner)))


def test_each_of_the_five_pickles_is_named() -> None:
    streams = [payload()] * 6
    blob = b"".join(streams)
    safety = assess_stream(blob, "s")
    assert safety.globals == tuple(
        use("timeit", "timeit", called=True, where=f"s (pickle {n})") for n in range(1, 6)
    )
    two = assess_stream(blob, "s", pickles=2)
    assert [x.where for x in two.globals] == ["s (pickle 1)", "s (pickle 2)"]
    one = assess_stream(blob, "s", pickles=1)
    assert one.globals == (use("timeit", "timeit", called=True, where="s"),)


def test_a_stream_shorter_than_five_pickles_ends_cleanly() -> None:
    safety = assess_stream(payload() * 2, "s", reached=False)
    assert safety == PickleSafety(
        tuple(
            use("timeit", "timeit", called=True, where=f"s (pickle {n})", reached=False)
            for n in (1, 2)
        )
    )
    assert assess_stream(b"", "s") == PickleSafety()


def test_a_damaged_pickle_ends_the_stream() -> None:
    damaged = P2 + call("timeit", "timeit", "x") + b"\xff"
    safety = assess_stream(P2 + b"N." + damaged + payload(), "s")
    assert safety == PickleSafety(
        (use("timeit", "timeit", called=True, where="s (pickle 2)"),),
        (
            refused("0xff", "s (pickle 2)"),
            malformed(f"unknown opcode 0xff at byte {len(damaged) - 1}", "s (pickle 2)"),
        ),
    )


def test_nested_streams_are_numbered_and_inherit_reached() -> None:
    twice = P2 + load_from_bytes(legacy_stream(payload())) + b"0"
    twice += load_from_bytes(legacy_stream(P2 + g("mypkg", "Net") + b".")) + b"."
    safety = judge(twice, reached=False)
    assert safety == PickleSafety(
        (
            use(*LFB, called=True, reached=False),
            use("timeit", "timeit", called=True, where=nested_where(1), reached=False),
            use("mypkg", "Net", where=nested_where(2), reached=False),
        )
    )


def test_the_same_loader_called_twice_judges_both_streams() -> None:
    # _load_from_bytes memoized and called again must not reuse the first call's verdict
    lfb = g(*LFB) + b"q\x00"
    data = P2 + lfb + bb(legacy_stream(P2 + b"N.")) + b"\x85R0"
    data += b"h\x00" + bb(legacy_stream(payload())) + b"\x85R."
    assert judge(data).globals == (
        lfb_use(),
        use("timeit", "timeit", called=True, where=nested_where(2)),
    )


def test_streams_are_followed_down_to_the_depth_limit() -> None:
    assert MAX_NESTED_STREAMS == 4
    deepest = nested_where(1, 1, 1, 1)
    safety = judge(nest(payload(), 4))
    assert safety.globals[-1] == use("timeit", "timeit", called=True, where=deepest)
    assert safety.problems == ()
    too_deep = judge(nest(payload(), 5))
    assert too_deep.problems == (Problem(TOO_DEEP, UNSAFE, deepest),)
    assert [x.name for x in too_deep.globals] == [f"{LFB[0]}.{LFB[1]}"] * 5
    # assess_stream starts at depth 0 too: four levels inside a stream are followed
    stream = strip(assess_stream(legacy_stream(nest(payload(), 4)), "s"))
    assert stream.problems == ()
    assert stream.globals[-1].name == "timeit.timeit"


def test_the_stream_budget_is_shared_and_exact() -> None:
    two = P2 + load_from_bytes(legacy_stream(payload())) + b"0"
    two += load_from_bytes(legacy_stream(payload())) + b"."
    inner = use("timeit", "timeit", called=True, where=nested_where(1))
    assert strip(assess_pickle(two, W, _budget=[1])) == PickleSafety(
        (lfb_use(), inner), (Problem(TOO_DEEP, UNSAFE, W),)
    )
    budget = [2]
    both = strip(assess_pickle(two, W, _budget=budget))
    assert both.problems == ()
    assert budget == [0]
    assert strip(assess_pickle(two, W, _budget=[0])).problems == (
        Problem(TOO_DEEP, UNSAFE, W),
        Problem(TOO_DEEP, UNSAFE, W),
    )
    # nested walks draw from the same budget
    deep = nest(payload(), 2)
    assert strip(assess_pickle(deep, W, _budget=[1])).problems == (
        Problem(TOO_DEEP, UNSAFE, nested_where(1)),
    )
    assert strip(assess_stream(legacy_stream(deep), "s", budget=[1])).problems == (
        Problem(TOO_DEEP, UNSAFE, "s (pickle 4)" + nested_where(1)[len(W) :]),
    )


@pytest.mark.parametrize(
    "args",
    [
        b"N\x85",  # not bytes
        u("x") + b"\x85",  # a str is not bytes
        bb(b"x") + bb(b"y") + b"\x86",  # two arguments
        bb(legacy_stream(payload())),  # not a tuple
        b"\x96" + Q(1) + b".\x85",  # a bytearray built by the pickle
    ],
)
def test_load_from_bytes_of_anything_but_one_bytes_is_unsafe(args: bytes) -> None:
    safety = judge(P2 + g(*LFB) + args + b"R.")
    assert safety.globals == (lfb_use(),)
    assert safety.problems[-1] == Problem(COMPUTED_BYTES, UNSAFE, W)


def test_codecs_encode_yields_the_latin1_bytes() -> None:
    blob = legacy_stream(payload())
    encode = g("_codecs", "encode") + b"(" + u(blob.decode("latin-1")) + u("latin1") + b"tR"
    safety = judge(P2 + g(*LFB) + encode + b"\x85R.")
    assert safety == PickleSafety(
        (
            lfb_use(),
            use("_codecs", "encode", called=True),
            use("timeit", "timeit", called=True, where=nested_where(1)),
        )
    )
    wide = g("_codecs", "encode") + b"(" + u("\u0100") + u("latin1") + b"tR"
    assert judge(P2 + g(*LFB) + wide + b"\x85R.").problems == (Problem(COMPUTED_BYTES, UNSAFE, W),)
    for args in (b")", b"N\x85", bb(b"x") + b"\x85"):
        data = P2 + g(*LFB) + g("_codecs", "encode") + args + b"R\x85R."
        assert judge(data).problems == (Problem(COMPUTED_BYTES, UNSAFE, W),), args


# --- the one-line account and the ledger --------------------------------------------------------


def test_first_unsafe_names_the_unsafe_globals_of_the_first_stream() -> None:
    one = judge(P2 + call("timeit", "timeit", "x") + b".")
    assert first_unsafe(one) == "global 'timeit.timeit' in data.pkl"
    two = judge(P2 + call("timeit", "timeit", "x") + b"0" + call("cProfile", "run", "x") + b".")
    assert first_unsafe(two) == "globals 'timeit.timeit', 'cProfile.run' in data.pkl"
    # the stream named is the first one naming the first unsafe global
    mixed = judge(P2 + OD + b"0.", "a.pkl").merge(
        judge(P2 + call("timeit", "timeit") + b".", "b.pkl")
    )
    assert first_unsafe(mixed) == "global 'timeit.timeit' in b.pkl"
    # one global called in two streams is still one global
    twice = judge(P2 + call("timeit", "timeit", "x") + b".", "c.pkl").merge(
        judge(P2 + call("timeit", "timeit", "y") + b".", "d.pkl")
    )
    assert [g.name for g in twice.globals if g.verdict is UNSAFE] == ["timeit.timeit"] * 2
    assert first_unsafe(twice) == "global 'timeit.timeit' in c.pkl"


def test_first_unsafe_skips_what_torch_does_not_read() -> None:
    unread = judge(P2 + call("timeit", "timeit") + b".", "x.pkl", reached=False)
    build = judge(P2 + g("collections", "Counter") + b"Nb.", "d.pkl")
    both = unread.merge(build)
    assert first_unsafe(both) == Says("BUILD", "collections.Counter itself")
    assert first_unsafe(both).endswith(" in d.pkl")
    unread_build = judge(P2 + g("mypkg", "Net") + b"Nb.", "u.pkl", reached=False)
    assert first_unsafe(unread_build.merge(build)).endswith(" in d.pkl")
    # a needs-trust problem before the unsafe one is skipped
    trust_first = judge(P2 + b"N\x94" + g("collections", "Counter") + b"Nb.")
    assert first_unsafe(trust_first) == Says("BUILD", "collections.Counter itself")


def test_ledger_refuses_a_reached_unsafe_stream_with_everything_seen() -> None:
    ledger = Ledger()
    assert ledger.safety == PickleSafety()
    ledger.judge(P2 + b"}.", "a/data.pkl")
    ledger.judge(P2 + call("timeit", "timeit") + b".", "a/extra.pkl", reached=False)
    assert ledger.safety == PickleSafety(
        (use("timeit", "timeit", called=True, where="a/extra.pkl", reached=False),)
    )
    bad = P2 + call("cProfile", "run", "x") + b"."
    with pytest.raises(UnsafePickleError) as info:
        ledger.judge(memoryview(bad), "a/data.pkl")
    error = info.value
    assert error.message == Says("unsafe", "global 'cProfile.run' in a/data.pkl")
    assert error.hint == Says("runs code", "do not load")
    assert error.exit_code is ExitCode.INPUT
    assert int(error.exit_code) == 3
    assert (
        error.safety
        == ledger.safety
        == PickleSafety(
            (
                use("timeit", "timeit", called=True, where="a/extra.pkl", reached=False),
                use("cProfile", "run", called=True, where="a/data.pkl"),
            )
        )
    )


def test_ledger_keeps_needs_trust_streams_without_raising() -> None:
    ledger = Ledger()
    ledger.judge(P2 + g("mypkg", "Net") + b")R.", "d.pkl")
    assert ledger.safety == PickleSafety((use("mypkg", "Net", called=True, where="d.pkl"),))


def test_ledger_notes_container_problems() -> None:
    ledger = Ledger()
    ledger.note("an appended archive", TRUST, "x (unread)", reached=False)
    ledger.note("TorchScript archive", UNSAFE, "m.pt")
    assert ledger.safety == PickleSafety(
        (),
        (
            Problem("an appended archive", TRUST, "x (unread)", False),
            Problem("TorchScript archive", UNSAFE, "m.pt", True),
        ),
    )

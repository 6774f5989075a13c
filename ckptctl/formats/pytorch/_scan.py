"""A bounds pre-scan of a pickle stream, run before the C unpickler sees any byte.

The C unpickler trusts several numbers in the stream: a ``LONG_BINPUT`` index sizes the memo
(``idx * 2`` pointers, zero-filled), a ``BINBYTES8`` length is allocated before the bytes are
read, and nothing limits nesting (hashing a tuple nested a million deep overflows the C stack).
This scan walks the opcodes once, simulating only the nesting depth of each stack item, and
refuses the stream before any of that can happen. It also finds where the pickle ends, so
several pickles written back to back (the legacy format) can be cut apart.

See the spec, section 12 rule 4.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ckptctl.errors import CorruptCheckpointError

if TYPE_CHECKING:
    from collections.abc import Callable

#: Deepest container nesting accepted (real checkpoints stay far below 100).
MAX_PICKLE_DEPTH = 1000
#: The work a pickle may ask for is bounded by the size of the file holding it (issue 25): a
#: stored pickle has at most one opcode per byte, but a compressed one (torch.save never
#: compresses data.pkl) inflates up to 1032:1, and 64 KiB of deflated repeated opcodes took
#: the scan, the safety walk and the unpickler 55 s and 160 MiB. Each opcode is charged the
#: bytes it makes the three passes allocate (``_COST``, at least ``MIN_OPCODE_COST``, which
#: also stands for its time: 1 to 2 us in all), and a pickle may spend at most
#: ``max(MIN_PICKLE_BUDGET_BYTES, PICKLE_BUDGET_PER_FILE_BYTE * file bytes)``, or, compressed,
#: ``COMPRESSED_PICKLE_BUDGET_PER_FILE_BYTE`` per file byte: 512 Ki opcodes or 32 MiB of objects
#: for any file up to 256 KiB. torch's own pickles spend 30 to 46 per pickle byte (a legacy
#: optimizer state is nearly all pickle); 1 MiB of EMPTY_SET + APPEND would make 250 MiB of sets.
MIN_PICKLE_BUDGET_BYTES = 32 << 20
PICKLE_BUDGET_PER_FILE_BYTE = 128
COMPRESSED_PICKLE_BUDGET_PER_FILE_BYTE = 32
MIN_OPCODE_COST = 64

# Opcode argument kinds.
_FIXED, _LEN1, _LEN4, _LEN8, _LINE, _LINE2 = range(6)

_ARG: dict[int, tuple[int, int]] = {}


def _op(codes: bytes, kind: int, size: int = 0) -> None:
    for code in codes:
        _ARG[code] = (kind, size)


# No argument.
_op(b"(.0", _FIXED)  # MARK STOP POP
_op(b"12NRabdeltsu)]}" + bytes(range(0x81, 0x95)) + b"\x97\x98", _FIXED)
_op(b"Q", _FIXED)  # BINPERSID
_op(b"2", _FIXED)  # DUP
_op(b"o", _FIXED)  # OBJ
# Fixed-size arguments.
_op(b"K", _FIXED, 1)  # BININT1
_op(b"M", _FIXED, 2)  # BININT2
_op(b"J", _FIXED, 4)  # BININT
_op(b"G", _FIXED, 8)  # BINFLOAT
_op(b"hq", _FIXED, 1)  # BINGET BINPUT
_op(b"jr", _FIXED, 4)  # LONG_BINGET LONG_BINPUT
_op(b"\x80", _FIXED, 1)  # PROTO
_op(b"\x82", _FIXED, 1)  # EXT1
_op(b"\x83", _FIXED, 2)  # EXT2
_op(b"\x84", _FIXED, 4)  # EXT4
_op(b"\x95", _FIXED, 8)  # FRAME (length checked separately)
# Length-prefixed arguments.
_op(b"\x8aUC\x8c", _LEN1)  # LONG1 SHORT_BINSTRING SHORT_BINBYTES SHORT_BINUNICODE
_op(b"\x8bTXB", _LEN4)  # LONG4 BINSTRING BINUNICODE BINBYTES
_op(b"\x8d\x8e\x96", _LEN8)  # BINUNICODE8 BINBYTES8 BYTEARRAY8
# Newline-terminated arguments.
_op(b"IFLSVPpg", _LINE)  # INT FLOAT LONG STRING UNICODE PERSID PUT GET
_op(b"ci", _LINE2)  # GLOBAL INST

# Stack effect of each opcode for the depth simulation: pushes a leaf.
_PUSH_LEAF = frozenset(b"KMJGIFLSVUCXBTN\x88\x89\x8a\x8b\x8c\x8d\x8e\x96)]}\x8f\x82\x83\x84cP\x97")

# Estimated bytes each opcode makes the scan, the safety walk and the unpickler allocate
# (CPython 3.11, 64-bit): a stack slot in each by default; length-prefixed data adds its length.
_COST = [MIN_OPCODE_COST] * 256
for _code, _bytes in (
    (0x5D, 96), (0x7D, 240), (0x8F, 240), (0x91, 240), (0x6C, 96), (0x64, 240),  # ] } set ...
    (0x74, 64), (0x85, 64), (0x86, 72), (0x87, 80), (0x29, 16),  # tuples (items counted)
    (0x71, 128), (0x72, 128), (0x70, 128), (0x94, 128),  # memo entries in all three passes
    (0x52, 512), (0x81, 512), (0x92, 512), (0x6F, 512), (0x69, 512),  # emulated calls: stubs
    (0x62, 64), (0x51, 128), (0x50, 128), (0x73, 48), (0x75, 48), (0x61, 16), (0x65, 16),
    (0x47, 40), (0x4A, 40), (0x4D, 40), (0x8A, 48), (0x8B, 48), (0x63, 128), (0x93, 128),
    (0x8C, 64), (0x58, 64), (0x8D, 64), (0x55, 64), (0x54, 64), (0x43, 48), (0x42, 48),
    (0x8E, 48), (0x96, 72), (0x53, 64), (0x56, 64), (0x4C, 48), (0x49, 40), (0x46, 40),
):  # fmt: skip
    _COST[_code] = max(MIN_OPCODE_COST, _bytes)


class PickleTruncatedError(CorruptCheckpointError):
    """The pickle runs past the end of the bytes given (a reader may retry with more)."""


class PickleBudgetError(CorruptCheckpointError):
    """The pickle asks for more work or memory than its file's size allows.

    Attributes:
        pos: the offset of the first opcode over the budget (everything before is within it).
    """

    def __init__(self, message: str, pos: int, *, hint: str) -> None:
        super().__init__(message, hint=hint)
        self.pos = pos


def pickle_budget(file_bytes: int, *, compressed: bool = False) -> int:
    """The most a pickle in a file of ``file_bytes`` bytes may spend (see ``_COST``)."""
    rate = COMPRESSED_PICKLE_BUDGET_PER_FILE_BYTE if compressed else PICKLE_BUDGET_PER_FILE_BYTE
    return max(MIN_PICKLE_BUDGET_BYTES, rate * file_bytes)


def _over_budget(where: str, pos: int, budget: int) -> PickleBudgetError:
    return PickleBudgetError(
        f"the pickle in {where} asks for more than {budget} bytes of objects and work by byte "
        f"{pos} (a pickle may spend max({MIN_PICKLE_BUDGET_BYTES}, "
        f"{PICKLE_BUDGET_PER_FILE_BYTE} x its file's size; {COMPRESSED_PICKLE_BUDGET_PER_FILE_BYTE}"
        f" x if compressed), each opcode at least {MIN_OPCODE_COST})",
        pos,
        hint="no torch.save pickle comes close: the file is crafted (a decompression bomb?)",
    )


def _fail(where: str, pos: int, why: str, *, cut: bool = False) -> CorruptCheckpointError:
    cls = PickleTruncatedError if cut else CorruptCheckpointError
    return cls(
        f"malformed pickle in {where} at byte {pos}: {why}",
        hint="the file is damaged or was not written by torch.save",
    )


_DEEP = f"objects nested deeper than {MAX_PICKLE_DEPTH} levels"
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def scan_pickle(
    data: bytes, start: int, where: str, file_bytes: int | None = None, *, compressed: bool = False
) -> int:
    """Check one pickle starting at ``start`` and return the offset just past its STOP.

    One pass, with a handler per opcode (a table, so that no opcode costs a long if-chain: a
    2 MB pickle of any one opcode is scanned in about half a second, issue 25).

    Args:
        file_bytes: the size of the file the pickle came from, which bounds its work
            (``pickle_budget``); ``len(data)`` when not given.
        compressed: the pickle was inflated from a compressed record (a stricter budget).

    Raises:
        PickleBudgetError: more opcodes or objects than ``pickle_budget`` allows.
        CorruptCheckpointError: unknown opcode, a length or memo index beyond the data, nesting
            deeper than ``MAX_PICKLE_DEPTH``, or no STOP before the end of the data.
    """
    budget = pickle_budget(len(data) if file_bytes is None else file_bytes, compressed=compressed)
    return _scan_ops(data, start, where, budget)


# Opcodes the loop handles itself (torch's own pickles are nearly all of these); every other
# opcode of ``_ARG`` has a handler in ``_scan_ops``'s table.
_A_OTHER, _A_LEAF, _A_PUT4, _A_GET1, _A_MARK, _A_TEXT4, _A_STOP, _A_UNKNOWN = range(8)
_ACTION = [_A_UNKNOWN] * 256
_SIZE = [0] * 256
for _code, (_kind, _size) in _ARG.items():
    _SIZE[_code] = _size
    _ACTION[_code] = _A_LEAF if _kind == _FIXED and _code in _PUSH_LEAF else _A_OTHER
for _code in b"XTB\x8b":  # BINUNICODE BINSTRING BINBYTES LONG4
    _ACTION[_code] = _A_TEXT4
_ACTION[0x72], _ACTION[0x68] = _A_PUT4, _A_GET1  # LONG_BINPUT BINGET
_ACTION[0x28], _ACTION[0x2E] = _A_MARK, _A_STOP


def _scan_ops(data: bytes, start: int, where: str, budget: int | None = None) -> int:
    limit = pickle_budget(len(data)) if budget is None else budget
    end = len(data)
    memo_cap = end  # a real memo never has more entries than the stream has bytes
    stack: list[int] = []
    marks: list[int] = []
    memo: dict[int, int] = {}
    push = stack.append
    spent = 0
    here = start

    def fail(why: str, *, cut: bool = False) -> CorruptCheckpointError:
        return _fail(where, here, why, cut=cut)

    def fixed(at: int, size: int) -> int:
        if at + size > end:
            raise fail("truncated", cut=True)
        return at + size

    def deeper(depth: int) -> None:
        if depth > MAX_PICKLE_DEPTH:
            raise fail(_DEEP)
        push(depth)

    def take(n: int) -> list[int]:
        if len(stack) < n:
            raise fail("stack underflow")
        items = stack[len(stack) - n :]
        del stack[len(stack) - n :]
        return items

    def pop_mark() -> list[int]:
        if not marks:
            raise fail("no MARK on the stack")
        at = marks.pop()
        items = stack[at:]
        del stack[at:]
        return items

    def put(index: int) -> None:
        if index < 0 or index > memo_cap:
            raise fail(f"memo index {index} out of range")
        if stack:
            memo[index] = stack[-1]

    def line(at: int) -> tuple[bytes, int]:
        nonlocal spent
        nl = data.find(b"\n", at) - at  # lines may be long: a protocol-0 dict key
        if nl < 0:
            raise fail("text argument without newline", cut=True)
        spent += nl
        return data[at : at + nl], at + nl + 1

    def memo_index(raw: bytes) -> int:
        try:
            return int(raw)
        except ValueError:
            raise fail("bad memo index") from None

    def handlers() -> list[Callable[[int], int]]:
        # (A function of its own, so that ``_scan_ops``'s code stays short: tracemalloc looks up
        # the line of every allocation by scanning the code object's line table from its start.)
        # Handlers: given the offset after the opcode byte, return the offset of the next opcode.
        def no_effect(size: int) -> Callable[[int], int]:  # PROTO READONLY_BUFFER
            return lambda at: fixed(at, size)

        def frame(at: int) -> int:
            if at + 8 > end:
                raise fail("truncated", cut=True)
            if _U64.unpack_from(data, at)[0] > end - at - 8:
                raise fail("frame longer than the data", cut=True)
            return at + 8

        def counted(fmt: str) -> Callable[[int], int]:  # a length-prefixed leaf
            unpack = struct.Struct(fmt).unpack_from
            width = struct.calcsize(fmt)

            def handler(at: int) -> int:
                nonlocal spent
                at = fixed(at, width)
                length: int = unpack(data, at - width)[0]
                if length > end - at:
                    raise fail(f"declared length {length} is past the end of the data", cut=True)
                spent += length
                push(0)
                return at + length

            return handler

        def text_leaf(lines: int) -> Callable[[int], int]:  # INT FLOAT ... GLOBAL
            def handler(at: int) -> int:
                for _ in range(lines):
                    _, at = line(at)
                push(0)
                return at

            return handler

        def binput(at: int) -> int:
            put(data[fixed(at, 1) - 1])
            return at + 1

        def long_binget(at: int) -> int:
            push(memo.get(_U32.unpack_from(data, fixed(at, 4) - 4)[0], 0))
            return at + 4

        def put_text(at: int) -> int:
            raw, at = line(at)
            put(memo_index(raw))
            return at

        def get_text(at: int) -> int:
            raw, at = line(at)
            push(memo.get(memo_index(raw), 0))
            return at

        def memoize(at: int) -> int:
            if stack:
                memo[len(memo)] = stack[-1]
            return at

        # The hot handlers below inline ``pop_mark``, ``take`` and ``deeper``: a call costs more
        # than the work, and a pickle of one opcode repeated makes every handler hot.
        def marked(at: int) -> int:  # TUPLE LIST DICT FROZENSET OBJ
            if not marks:
                raise fail("no MARK on the stack")
            first = marks.pop()
            depth = 1
            if first < len(stack):
                depth = max(stack[first:]) + 1
                del stack[first:]
                if depth > MAX_PICKLE_DEPTH:
                    raise fail(_DEEP)
            push(depth)
            return at

        def inst(at: int) -> int:  # also pushed the class from its text argument
            for _ in range(2):
                _, at = line(at)
            deeper(max([*pop_mark(), 0]) + 1)
            return at

        def tuple_n(n: int) -> Callable[[int], int]:  # TUPLE1..3 REDUCE NEWOBJ (2) NEWOBJ_EX (3)
            def handler(at: int) -> int:
                if len(stack) < n:
                    raise fail("stack underflow")
                depth = max(stack[-n:]) + 1
                del stack[-n:]
                if depth > MAX_PICKLE_DEPTH:
                    raise fail(_DEEP)
                push(depth)
                return at

            return handler

        def merge1(at: int) -> int:  # APPEND BUILD
            if len(stack) < 2:
                raise fail("stack underflow")
            item = stack.pop() + 1
            depth = stack.pop()
            if item > depth:
                depth = item
                if depth > MAX_PICKLE_DEPTH:
                    raise fail(_DEEP)
            push(depth)
            return at

        def merge_marked(at: int) -> int:  # APPENDS SETITEMS ADDITEMS
            if not marks:
                raise fail("no MARK on the stack")
            first = marks.pop()
            items = 1
            if first < len(stack):
                items = max(stack[first:]) + 1
                del stack[first:]
            if not stack:
                raise fail("stack underflow")
            depth = stack.pop()
            if items > depth:
                depth = items
                if depth > MAX_PICKLE_DEPTH:
                    raise fail(_DEEP)
            push(depth)
            return at

        def setitem(at: int) -> int:
            items = take(3)
            deeper(max(items[0], items[1] + 1, items[2] + 1))
            return at

        def stack_global(at: int) -> int:
            take(2)
            push(0)
            return at

        def binpersid(at: int) -> int:
            deeper(take(1)[0] + 1)
            return at

        def pop(at: int) -> int:
            if marks and marks[-1] == len(stack):
                marks.pop()
            elif stack:
                stack.pop()
            else:
                raise fail("stack underflow")
            return at

        def pop_mark_(at: int) -> int:
            pop_mark()
            return at

        def dup(at: int) -> int:
            if not stack:
                raise fail("stack underflow")
            push(stack[-1])
            return at

        def unknown(at: int) -> int:  # pragma: no cover - every opcode of ``_ARG`` has a handler
            raise fail(f"unknown opcode 0x{data[here]:02x}")

        table: list[Callable[[int], int]] = [unknown] * 256
        for codes, handler in (
            (b"\x80", no_effect(1)), (b"\x95", frame), (b"\x98", no_effect(0)),
            (b"\x8aUC\x8c", counted("<B")), (b"\x8d\x8e\x96", counted("<Q")),
            (b"IFLSVP", text_leaf(1)), (b"c", text_leaf(2)),
            (b"q", binput), (b"j", long_binget), (b"p", put_text), (b"g", get_text),
            (b"\x94", memoize), (b"tld\x91o", marked), (b"i", inst), (b"\x85", tuple_n(1)),
            (b"\x86", tuple_n(2)), (b"\x87", tuple_n(3)), (b"ab", merge1),
            (b"eu\x90", merge_marked), (b"s", setitem), (b"R\x81", tuple_n(2)),
            (b"\x92", tuple_n(3)), (b"\x93", stack_global), (b"Q", binpersid), (b"0", pop),
            (b"1", pop_mark_), (b"2", dup),
        ):  # fmt: skip
            for code in codes:
                table[code] = handler
        return table

    table = handlers()

    cost = _COST
    action = _ACTION
    size = _SIZE
    u32 = _U32.unpack_from
    pos = start
    while pos < end:
        here = pos
        code = data[pos]
        act = action[code]
        if act == _A_UNKNOWN:
            raise fail(f"unknown opcode 0x{code:02x}")
        spent += cost[code]
        if spent > limit:
            raise _over_budget(where, here, limit)
        pos += 1
        if act == _A_LEAF:
            pos += size[code]
            if pos > end:
                raise fail("truncated", cut=True)
            push(0)
        elif act == _A_PUT4:
            if pos + 4 > end:
                raise fail("truncated", cut=True)
            put(u32(data, pos)[0])
            pos += 4
        elif act == _A_GET1:
            if pos >= end:
                raise fail("truncated", cut=True)
            push(memo.get(data[pos], 0))
            pos += 1
        elif act == _A_MARK:
            marks.append(len(stack))
        elif act == _A_TEXT4:
            if pos + 4 > end:
                raise fail("truncated", cut=True)
            length = u32(data, pos)[0]
            pos += 4
            if length > end - pos:
                raise fail(f"declared length {length} is past the end of the data", cut=True)
            pos += length
            spent += length
            push(0)
        elif act == _A_STOP:
            return pos
        else:
            pos = table[code](pos)
    raise _fail(where, end, "no STOP opcode before the end of the data", cut=True)

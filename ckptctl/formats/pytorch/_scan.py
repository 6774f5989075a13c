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

from ckptctl.errors import CorruptCheckpointError

#: Deepest container nesting accepted (real checkpoints stay far below 100).
MAX_PICKLE_DEPTH = 1000
#: The work a pickle may ask for is bounded by the size of the file holding it (issue 25): a
#: stored pickle has at most one opcode per byte, but a compressed one (torch.save never
#: compresses data.pkl) inflates up to 1032:1, and 64 KiB of deflated repeated opcodes took
#: the scan, the safety walk and the unpickler 55 s and 160 MiB. Each opcode is charged the
#: bytes it makes the three passes allocate (``_COST``, at least ``MIN_OPCODE_COST``, which
#: also stands for its time: 3 to 5 us in all), and a pickle may spend at most
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
_LEN_STRUCT = {_LEN1: ("<B", 1), _LEN4: ("<I", 4), _LEN8: ("<Q", 8)}

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


def scan_pickle(
    data: bytes, start: int, where: str, file_bytes: int | None = None, *, compressed: bool = False
) -> int:
    """Check one pickle starting at ``start`` and return the offset just past its STOP.

    A fast pass accepts well-formed pickles; on anything doubtful it defers to the careful
    pass, which says exactly what is wrong.

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
    try:
        return _scan_fast(data, start, budget, where)
    except _Doubt:
        return _scan_careful(data, start, where, budget)


def _scan_careful(data: bytes, start: int, where: str, budget: int | None = None) -> int:
    limit = pickle_budget(len(data)) if budget is None else budget
    spent = 0
    cost = _COST
    end = len(data)
    memo_cap = end  # a real memo never has more entries than the stream has bytes
    pos = start
    stack: list[int] = []
    marks: list[int] = []
    memo: dict[int, int] = {}
    unpack_from = struct.unpack_from
    while pos < end:
        code = data[pos]
        arg = _ARG.get(code)
        if arg is None:
            raise _fail(where, pos, f"unknown opcode 0x{code:02x}")
        kind, size = arg
        here = pos
        spent += cost[code]
        if spent > limit:
            raise _over_budget(where, here, limit)
        pos += 1
        index = -1
        if kind == _FIXED:
            if pos + size > end:
                raise _fail(where, here, "truncated", cut=True)
            if code in (0x68, 0x71):  # BINGET BINPUT
                index = data[pos]
            elif code in (0x6A, 0x72):  # LONG_BINGET LONG_BINPUT
                index = unpack_from("<I", data, pos)[0]
            elif code == 0x95 and unpack_from("<Q", data, pos)[0] > end - pos - size:  # FRAME
                raise _fail(where, here, "frame longer than the data", cut=True)
            pos += size
        elif kind in (_LINE, _LINE2):
            for _ in range(kind - _LINE + 1):
                nl = data.find(b"\n", pos) - pos  # lines may be long: a protocol-0 dict key
                if nl < 0:
                    raise _fail(where, here, "text argument without newline", cut=True)
                if code in (0x70, 0x67):  # PUT GET
                    try:
                        index = int(data[pos : pos + nl])
                    except ValueError:
                        raise _fail(where, here, "bad memo index") from None
                pos += nl + 1
                spent += nl
        else:
            fmt, width = _LEN_STRUCT[kind]
            if pos + width > end:
                raise _fail(where, here, "truncated", cut=True)
            length = unpack_from(fmt, data, pos)[0]
            pos += width
            if length > end - pos:
                raise _fail(
                    where, here, f"declared length {length} is past the end of the data", cut=True
                )
            pos += length
            spent += length
        # Depth simulation.
        if code in _PUSH_LEAF:
            stack.append(0)
        elif code == 0x28:  # MARK
            marks.append(len(stack))
        elif code == 0x2E:  # STOP
            return pos
        elif code in (0x71, 0x72, 0x70):  # PUT
            if index < 0 or index > memo_cap:
                raise _fail(where, here, f"memo index {index} out of range")
            if stack:
                memo[index] = stack[-1]
        elif code == 0x94:  # MEMOIZE
            if stack:
                memo[len(memo)] = stack[-1]
        elif code in (0x68, 0x6A, 0x67):  # GET
            stack.append(memo.get(index, 0))
        else:
            _simulate(code, stack, marks, where, here)
    raise _fail(where, end, "no STOP opcode before the end of the data", cut=True)


def _pop_mark(stack: list[int], marks: list[int], where: str, here: int) -> list[int]:
    if not marks:
        raise _fail(where, here, "no MARK on the stack")
    at = marks.pop()
    items = stack[at:]
    del stack[at:]
    return items


def _push(stack: list[int], depth: int, where: str, here: int) -> None:
    if depth > MAX_PICKLE_DEPTH:
        raise _fail(where, here, f"objects nested deeper than {MAX_PICKLE_DEPTH} levels")
    stack.append(depth)


def _take(stack: list[int], n: int, where: str, here: int) -> list[int]:
    if len(stack) < n:
        raise _fail(where, here, "stack underflow")
    items = stack[len(stack) - n :]
    del stack[len(stack) - n :]
    return items


def _simulate(code: int, stack: list[int], marks: list[int], where: str, here: int) -> None:
    """Apply one opcode's stack effect on the depth of each item."""
    if code in (0x74, 0x6C, 0x64, 0x91, 0x6F, 0x69):  # TUPLE LIST DICT FROZENSET OBJ INST
        items = _pop_mark(stack, marks, where, here)
        if code == 0x69:  # INST also pushed the class from its text argument
            items.append(0)
        _push(stack, max(items, default=0) + 1, where, here)
    elif code in (0x85, 0x86, 0x87):  # TUPLE1..3
        items = _take(stack, code - 0x84, where, here)
        _push(stack, max(items) + 1, where, here)
    elif code in (0x61, 0x62):  # APPEND BUILD
        (item,) = _take(stack, 1, where, here)
        if not stack:
            raise _fail(where, here, "stack underflow")
        _push(stack, max(stack.pop(), item + 1), where, here)
    elif code in (0x65, 0x75, 0x90):  # APPENDS SETITEMS ADDITEMS
        items = _pop_mark(stack, marks, where, here)
        if not stack:
            raise _fail(where, here, "stack underflow")
        _push(stack, max(stack.pop(), max(items, default=0) + 1), where, here)
    elif code == 0x73:  # SETITEM
        items = _take(stack, 3, where, here)
        _push(stack, max(items[0], items[1] + 1, items[2] + 1), where, here)
    elif code in (0x52, 0x81):  # REDUCE NEWOBJ
        items = _take(stack, 2, where, here)
        _push(stack, max(items) + 1, where, here)
    elif code == 0x92:  # NEWOBJ_EX
        items = _take(stack, 3, where, here)
        _push(stack, max(items) + 1, where, here)
    elif code == 0x93:  # STACK_GLOBAL
        _take(stack, 2, where, here)
        stack.append(0)
    elif code == 0x51:  # BINPERSID
        items = _take(stack, 1, where, here)
        _push(stack, items[0] + 1, where, here)
    elif code == 0x30:  # POP
        if marks and marks[-1] == len(stack):
            marks.pop()
        else:
            _take(stack, 1, where, here)
    elif code == 0x31:  # POP_MARK
        _pop_mark(stack, marks, where, here)
    elif code == 0x32:  # DUP
        if not stack:
            raise _fail(where, here, "stack underflow")
        stack.append(stack[-1])
    # PROTO and FRAME have no stack effect.


# --- the fast pass ------------------------------------------------------------------------------


_U32 = struct.Struct("<I")


class _Doubt(Exception):
    """The fast pass saw something it does not accept; the careful pass decides."""


# Actions of the fast pass, one per opcode; anything unlisted is a doubt.
(_A_LEAF, _A_PUT1, _A_GET1, _A_TEXT4, _A_TEXT1, _A_MARK, _A_TUPLE_N, _A_MARKED, _A_MERGE1,
 _A_MERGE_MARKED, _A_SETITEM, _A_REDUCE, _A_PERSID, _A_STOP, _A_PUT4, _A_GET4, _A_MEMOIZE,
 _A_NONE, _A_TEXT8, _A_GLOBAL, _A_POP, _A_DUP, _A_STACK_GLOBAL, _A_NEWOBJ_EX, _A_FRAME,
 _A_POP_MARK) = range(1, 27)  # fmt: skip
_ACTION = [0] * 256
_SIZE = [0] * 256
for _code in _PUSH_LEAF:
    _ACTION[_code] = _A_LEAF
for _code, (_kind, _size) in _ARG.items():
    _SIZE[_code] = _size
_ACTION[0x71], _ACTION[0x68] = _A_PUT1, _A_GET1  # BINPUT BINGET
_ACTION[0x72], _ACTION[0x6A] = _A_PUT4, _A_GET4  # LONG_BINPUT LONG_BINGET
for _code in b"XTB\x8b":
    _ACTION[_code] = _A_TEXT4
for _code in b"UC\x8c\x8a":
    _ACTION[_code] = _A_TEXT1
for _code in b"\x8d\x8e\x96":
    _ACTION[_code] = _A_TEXT8
_ACTION[0x28] = _A_MARK
for _code in b"\x85\x86\x87":
    _ACTION[_code] = _A_TUPLE_N
for _code in b"tld\x91o":
    _ACTION[_code] = _A_MARKED
for _code in b"ab":
    _ACTION[_code] = _A_MERGE1
for _code in b"eu\x90":
    _ACTION[_code] = _A_MERGE_MARKED
_ACTION[0x73] = _A_SETITEM
_ACTION[0x52] = _ACTION[0x81] = _A_REDUCE
_ACTION[0x51] = _A_PERSID
_ACTION[0x2E] = _A_STOP
_ACTION[0x94] = _A_MEMOIZE
_ACTION[0x80] = _ACTION[0x98] = _A_NONE  # PROTO, READONLY_BUFFER: no stack effect
_ACTION[0x30] = _A_POP
_ACTION[0x31] = _A_POP_MARK
_ACTION[0x32] = _A_DUP
_ACTION[0x93] = _A_STACK_GLOBAL
_ACTION[0x92] = _A_NEWOBJ_EX
_ACTION[0x95] = _A_FRAME
_ACTION[0x63] = _A_GLOBAL
for _code in b"iIFLSVPpg":  # other text-argument opcodes (protocols 0, 1): the careful pass
    _ACTION[_code] = 0


def _scan_fast(
    data: bytes, start: int, budget: int | None = None, where: str = "the pickle"
) -> int:
    """The careful pass's depth simulation, for well-formed binary pickles only.

    Raises ``_Doubt`` on anything the careful pass might refuse, and on text-argument opcodes
    (protocols 0 and 1), which are rare in checkpoints; its only ``CorruptCheckpointError`` is
    ``PickleBudgetError``, which the careful pass would raise at the same opcode.
    """
    limit_cost = pickle_budget(len(data)) if budget is None else budget
    spent = 0
    cost = _COST
    end = len(data)
    cap = end
    stack: list[int] = []
    marks: list[int] = []
    memo: dict[int, int] = {}
    push = stack.append
    pop = stack.pop
    action = _ACTION
    size = _SIZE
    limit = MAX_PICKLE_DEPTH
    unpack_from = struct.unpack_from
    u32 = _U32.unpack_from
    pos = start
    try:
        while pos < end:
            code = data[pos]
            act = action[code]
            spent += cost[code]
            if spent > limit_cost:
                raise _over_budget(where, pos, limit_cost)
            if act == _A_LEAF:
                push(0)
                pos += 1 + size[code]
            elif act == _A_PUT4:
                (index,) = u32(data, pos + 1)
                if index > cap:
                    raise _Doubt
                if stack:
                    memo[index] = stack[-1]
                pos += 5
            elif act == _A_GET1:
                push(memo.get(data[pos + 1], 0))
                pos += 2
            elif act == _A_MARK:
                marks.append(len(stack))
                pos += 1
            elif act == _A_TEXT4:
                (n,) = u32(data, pos + 1)
                pos += 5 + n
                spent += n
                push(0)
            elif act in (_A_MARKED, _A_MERGE_MARKED):
                at = marks.pop()
                items = stack[at:]
                del stack[at:]
                if act == _A_MARKED:
                    depth = max(items, default=0) + 1
                else:
                    depth = max(pop(), max(items, default=0) + 1)
                if depth > limit:
                    raise _Doubt
                push(depth)
                pos += 1
            elif act == _A_TUPLE_N:
                n = code - 0x84
                if len(stack) < n:
                    raise _Doubt
                depth = max(stack[-n:]) + 1
                del stack[-n:]
                if depth > limit:
                    raise _Doubt
                push(depth)
                pos += 1
            elif act == _A_REDUCE:
                b = pop()
                depth = max(pop(), b) + 1
                if depth > limit:
                    raise _Doubt
                push(depth)
                pos += 1
            elif act == _A_PERSID:
                depth = pop() + 1
                if depth > limit:
                    raise _Doubt
                push(depth)
                pos += 1
            elif act == _A_PUT1:
                if data[pos + 1] > cap:
                    raise _Doubt
                if stack:
                    memo[data[pos + 1]] = stack[-1]
                pos += 2
            elif act == _A_SETITEM:
                v = pop()
                k = pop()
                depth = max(pop(), k + 1, v + 1)
                if depth > limit:
                    raise _Doubt
                push(depth)
                pos += 1
            elif act == _A_MERGE1:
                item = pop()
                depth = max(pop(), item + 1)
                if depth > limit:
                    raise _Doubt
                push(depth)
                pos += 1
            elif act == _A_TEXT1:
                spent += data[pos + 1]
                pos += 2 + data[pos + 1]
                push(0)
            elif act == _A_GET4:
                (index,) = unpack_from("<I", data, pos + 1)
                push(memo.get(index, 0))
                pos += 5
            elif act == _A_MEMOIZE:
                if stack:
                    memo[len(memo)] = stack[-1]
                pos += 1
            elif act == _A_NONE:
                pos += 1 + size[code]
            elif act == _A_STOP:
                return pos + 1
            elif act == _A_GLOBAL:
                for _ in range(2):
                    nl = data.find(b"\n", pos + 1)
                    if nl < 0:
                        raise _Doubt
                    spent += nl - pos
                    pos = nl
                pos += 1
                push(0)
            elif act == _A_TEXT8:
                (n,) = unpack_from("<Q", data, pos + 1)
                pos += 9 + n
                spent += n
                push(0)
            elif act == _A_FRAME:
                (n,) = unpack_from("<Q", data, pos + 1)
                if n > end - pos - 9:
                    raise _Doubt
                pos += 9
            elif act == _A_POP:
                if marks and marks[-1] == len(stack):
                    marks.pop()
                else:
                    pop()
                pos += 1
            elif act == _A_POP_MARK:
                del stack[marks.pop() :]
                pos += 1
            elif act == _A_DUP:
                push(stack[-1])
                pos += 1
            elif act == _A_STACK_GLOBAL:
                pop()
                pop()
                push(0)
                pos += 1
            elif act == _A_NEWOBJ_EX:
                c = pop()
                b = pop()
                depth = max(pop(), b, c) + 1
                if depth > limit:
                    raise _Doubt
                push(depth)
                pos += 1
            else:
                raise _Doubt
    except (IndexError, struct.error):
        raise _Doubt from None
    raise _Doubt

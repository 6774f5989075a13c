"""One walk over a pickle: its bounds and its safety verdict in a single opcode pass.

See ``docs/formats/pytorch.md#bounds`` and ``docs/formats/pytorch.md#safety``.

Design (issue #47: the bounds pre-scan and the symbolic safety walk were two walkers over the
same opcodes, a third being the C unpickler):

* :class:`PickleWalker` decodes each opcode once. Its handlers are its own methods, gathered at
  construction into a table indexed by the opcode byte (a bound method per opcode, no closures);
  the opcodes of torch's own pickles (600,000 of them in a 20,000-tensor state dict) are handled
  in the loop itself, without a call.
* The walker keeps two stacks side by side, always of the same length: the *depth* of each item
  (the bounds: nesting at most ``MAX_PICKLE_DEPTH``, memo indices within the data, lengths
  within the data, the work within ``pickle_budget``; errors and byte offsets exactly as
  ``scan_pickle`` has always raised them) and what each item *is* (a global, a string,
  the result of a call ...: the symbolic values of ``_safety``, judged by its ``_Walk`` with
  exactly its rules, problems and tolerance of malformed streams).
* The two parts can stop at different bytes, and each must keep its own answer: a pickle nested
  too deep is out of bounds at the first level too many, yet judged to its STOP (the verdict of
  a pickle refused for its bounds still names its unsafe globals); a stream the verdict finds
  malformed (stack underflow across a MARK, undecodable text) is judged on what precedes, while
  its bounds are checked to the end. So a failure of the bounds is recorded (the first one
  wins) and the walk goes on while the verdict needs it; a malformed stream blinds the verdict
  (its judge becomes ``_Blind``, which notes nothing) and the walk goes on while the bounds
  need it. Errors both parts share (truncated data, an unknown opcode, an underflow of the
  whole stack) stop both at once, each with its own message.
* ``limit``: with a budget (``load_pickle``), going over it stops the walk, and the verdict is
  that of the bytes before that opcode, as it always was; ``assess_stream`` walks on past it
  (``budget_stops`` False: the budget then only says where the next pickle cannot be found);
  without one (``assess_pickle``) nothing limits the work but the data.
* Callers that need one answer (``scan_pickle``: the bounds, ``judge=None``; ``assess_pickle``:
  the verdict) still walk both stacks: one loop, at the price of a slower pass for them.
* Objects are still built by the C unpickler (``_unpickler.py``), which sees only a pickle this
  walk found within bounds and judged: its opcode dispatch is C, where building the objects in
  this walk would add Python work to each opcode (benchmarks/RESULTS.md, issue #47).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ckptctl.formats.pytorch._allowlist import WEIGHTS_ONLY_OPCODES
from ckptctl.formats.pytorch._safety import (
    _DICT_TYPES,
    _LIST,
    _NO_FRAME,
    _NONE,
    _OTHER,
    _build,
    _Call,
    _Dict,
    _frame,
    _frame_straddled,
    _Global,
    _python2_str,
    _quoted,
    _read_splits,
    _reduce,
    _untrusted_call,
    _Walk,
)
from ckptctl.formats.pytorch._scan import (
    _ARG,
    _COST,
    _DEEP,
    MAX_PICKLE_DEPTH,
    _fail,
    _over_budget,
    pickle_budget,
)
from ckptctl.safety import PickleSafety, Verdict

if TYPE_CHECKING:
    from collections.abc import Callable

    from ckptctl.errors import CorruptCheckpointError

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_NO_LIMIT = 1 << 62
#: ``_scan._COST`` of every opcode; 0 for an unknown one (refused before it costs anything).
_KNOWN_COST = [_COST[code] if code in _ARG else 0 for code in range(256)]


def walk_pickle(
    data: bytes,
    start: int,
    where: str,
    *,
    judge: _Walk | None,
    budget: int | None,
    budget_stops: bool = True,
) -> PickleWalker:
    """Walk the pickle at ``data[start]`` (see :class:`PickleWalker`; ``budget`` None: none)."""
    start = min(start, len(data))  # (past the end: no STOP at the end of the data)
    chunk = data[start:] if start else data
    walker = PickleWalker(
        chunk,
        where,
        judge,
        base=start,
        limit=budget,
        memo_cap=len(data),
        budget_stops=budget_stops,
    )
    return walker.run()


def scan_pickle(
    data: bytes, start: int, where: str, file_bytes: int | None = None, *, compressed: bool = False
) -> int:
    """Check one pickle starting at ``start`` and return the offset just past its STOP.

    The bounds part of the one walk over a pickle (``_walker.PickleWalker``), alone.

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
    return walk_pickle(data, start, where, judge=None, budget=budget).stop()


class _Fatal(Exception):
    """Both parts stop here: ``why`` for the bounds, ``judged`` for the verdict."""

    def __init__(self, why: str, judged: str, *, cut: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.judged = judged
        self.cut = cut


class _Stop(Exception):
    """Neither part needs another opcode."""


def _follows_nothing(*_args: object) -> PickleSafety:
    return PickleSafety()  # a blind judge follows no nested stream (``_safety._nested``)


class _Blind(_Walk):
    """The judge of a stream already found malformed: the verdict stands, nothing is noted."""

    blind = True

    def __init__(self) -> None:
        super().__init__("", False, 0, [0, 0], follow=_follows_nothing)

    def problem(self, *_args: object, **_kwargs: object) -> None:
        pass

    def refused(self, *_args: object, **_kwargs: object) -> None:
        pass

    def named(self, module: str, name: str) -> _Global:
        return _Global("<blind>", "<blind>", 0)

    def extension(self, code: int) -> _Global:
        return _Global("<blind>", "<blind>", 0)

    def called(self, item: object, how: str) -> object:  # type: ignore[override]
        return _OTHER

    def op(self, code: int) -> None:
        pass


_BLIND = _Blind()


class PickleWalker:
    """One pass over the pickle at the start of ``data``: bounds and verdict (see above).

    Args:
        data: the bytes from the pickle's first opcode on (bytes after its STOP are not read).
        where: the stream's name in messages.
        judge: the verdict's notes; None checks the bounds only.
        base: the offset of ``data[0]`` in the bytes the caller has (bounds errors count from
            there, the verdict's messages from the pickle's start).
        limit: the budget (``_scan.pickle_budget``); None: no limit.
        memo_cap: the highest memo index accepted (the length of the caller's bytes).
        budget_stops: going over the budget stops the verdict too (else it is only an error).

    After :meth:`run`: ``end`` (the caller's offset just past STOP, None if not reached),
    ``error`` (the first bounds error, or None), :meth:`safety` and ``frame_left``.
    """

    def __init__(
        self,
        data: bytes,
        where: str,
        judge: _Walk | None,
        *,
        base: int = 0,
        limit: int | None = None,
        memo_cap: int | None = None,
        budget_stops: bool = True,
    ) -> None:
        self.data = data
        self.where = where
        self.walk = judge
        self.judge: _Walk = _BLIND if judge is None else judge
        self.base = base
        self.limit = _NO_LIMIT if limit is None else limit
        self.budget_stops = budget_stops
        self.memo_cap = base + len(data) if memo_cap is None else memo_cap
        self.end: int | None = None
        self.error: CorruptCheckpointError | None = None
        self.frame_left: int | None = None
        self.spent = 0
        self.here = 0
        self.stack: list[object] = []
        self.depths: list[int] = []
        self.marks: list[int] = []
        self.memo: dict[int, object] = {}
        self.mdepth: dict[int, int] = {}
        self.table = self._handlers()

    # --- results -------------------------------------------------------------------------

    def safety(self) -> PickleSafety:
        """The verdict (of what precedes the damage, for a malformed stream)."""
        walk = self.walk
        if walk is None:
            return PickleSafety()
        out = PickleSafety(tuple(walk.uses), tuple(walk.problems))
        for nested in walk.nested:
            out = out.merge(nested)
        return out

    def run(self) -> PickleWalker:
        """Walk to the STOP, or until neither part can or need go on."""
        try:
            self._loop()
        except _Fatal as exc:
            if self.error is None:
                self.error = _fail(self.where, self.base + self.here, exc.why, cut=exc.cut)
            self._malformed(exc.judged, stop=False)
        except _Stop:
            pass
        except RecursionError:  # pragma: no cover - the walk is iterative
            self.judge.problem("the pickle nests too deeply to judge", Verdict.UNSAFE)
        finally:
            # the table's bound methods point back at the walker: without this the walker, its
            # memo and its copy of the pickle would wait for the cyclic collector
            self.table = []
        return self

    def stop(self) -> int:
        """Where the pickle ends (the caller's offset just past its STOP).

        Raises:
            CorruptCheckpointError: the first bounds error (``PickleBudgetError``,
                ``PickleTruncatedError`` ...).
        """
        if self.error is not None:
            raise self.error
        if self.end is None:  # pragma: no cover - no error means the walk reached the STOP
            raise _fail(self.where, self.base + len(self.data), "no STOP opcode")
        return self.end

    # --- the two parts' failures ---------------------------------------------------------

    def _bounds(self, why: str, *, cut: bool = False) -> None:
        """A bounds failure the verdict does not share: noted; the walk goes on if judging."""
        if self.error is None:
            self.error = _fail(self.where, self.base + self.here, why, cut=cut)
        if self.judge is _BLIND:
            raise _Stop

    def _deep(self) -> None:
        self._bounds(_DEEP)

    def _malformed(self, why: str, *, stop: bool = True) -> None:
        """The verdict cannot go on (it stands on what precedes); the bounds may."""
        if self.judge is not _BLIND:
            self.judge.problem(
                f"the pickle is malformed ({why}); judged on what precedes", Verdict.NEEDS_TRUST
            )
            self.judge = _BLIND
        if stop and self.error is not None:
            raise _Stop

    def _over_budget(self, here: int) -> None:
        """Over the budget: the verdict is that of the bytes before ``here`` (or of them all,
        when the budget only bounds the work of a later unpickling: ``budget_stops`` False)."""
        self.here = here
        self.error = _over_budget(self.where, self.base + here, self.limit)
        if self.budget_stops or self.judge is _BLIND:
            self._malformed("no STOP opcode", stop=False)
            raise _Stop

    def _fatal(self, why: str, judged: str | None = None, *, cut: bool = False) -> _Fatal:
        return _Fatal(why, judged or f"{why} at byte {self.here}", cut=cut)

    # --- the loop ------------------------------------------------------------------------

    def _loop(self) -> None:  # one dispatch loop
        data = self.data
        end = len(data)
        stack, depths, marks, memo, mdepth = (
            self.stack, self.depths, self.marks, self.memo, self.mdepth,
        )  # fmt: skip
        push, dpush = stack.append, depths.append
        table, cost, limit, u32 = self.table, _KNOWN_COST, self.limit, _U32.unpack_from
        cap = self.memo_cap
        known = WEIGHTS_ONLY_OPCODES
        seen = self.judge.seen_ops
        spent = self.spent
        pos = here = 0
        fend = _NO_FRAME  # where the current FRAME ends (see _safety's frames section)
        while pos < end:
            code = data[pos]
            spent += cost[code]
            if spent > limit and self.error is None:
                self._over_budget(pos)
            if pos >= fend:  # the opcode at ``here`` reached the end of the frame
                if pos > fend and here < fend and fend not in _read_splits(data, here):
                    _frame_straddled(self.judge, here)
                fend = _NO_FRAME
            here = pos
            pos += 1
            if code == 0x72:  # LONG_BINPUT
                if pos + 4 > end:
                    self._cut_binput(here)
                index = u32(data, pos)[0]
                if len(stack) <= (marks[-1] if marks else 0) or index > cap:
                    self.here = here
                    self._put(index)
                else:
                    memo[index] = stack[-1]
                    if depths[-1]:
                        mdepth[index] = depths[-1]
                    elif mdepth:
                        mdepth.pop(index, None)
                pos += 4
            elif code == 0x4B:  # BININT1
                pos += 1
                if pos > end:  # (the verdict reads past the end, then finds no STOP)
                    self.here = here
                    raise self._fatal("truncated", "no STOP opcode", cut=True)
                push(_OTHER)
                dpush(0)
            elif code == 0x68:  # BINGET
                if pos >= end:
                    self.here = here
                    raise self._fatal("truncated", "IndexError", cut=True)
                index = data[pos]
                push(memo.get(index, _OTHER))
                dpush(mdepth.get(index, 0))
                pos += 1
            elif code == 0x28:  # MARK
                marks.append(len(stack))
            elif code == 0x58:  # BINUNICODE
                self.here = here
                length = u32(data, pos)[0] if pos + 4 <= end else end
                if pos + 4 + length > end:
                    self.spent = spent
                    pos = self.counted(pos, 4, 0x58)  # (raises)
                spent += length
                pos = self.binunicode(pos + 4, length)
            elif code == 0x74 or code == 0x86 or code == 0x52:  # TUPLE TUPLE2 REDUCE
                # (allocating: in methods, as tracemalloc finds the line of each allocation by
                # scanning its function's line table from the start)
                self.here = here
                table[code](pos)
            elif code == 0x51:  # BINPERSID
                self.here = here
                self.binpersid(pos)
            elif code == 0x89 or code == 0x29:  # NEWFALSE EMPTY_TUPLE
                push(_OTHER if code == 0x89 else ())
                dpush(0)
            elif code == 0x2E:  # STOP
                self._stop(pos, fend)
                return
            else:
                if code not in known and code not in seen:
                    self.judge.op(code)
                self.here, self.spent = here, spent
                if code == 0x95:  # FRAME
                    pos, fend = self.frame(pos, fend)
                else:
                    pos = table[code](pos)
                spent = self.spent
        self.here = end
        raise _Fatal("no STOP opcode before the end of the data", "no STOP opcode", cut=True)

    def _stop(self, pos: int, fend: int) -> None:
        """STOP (known to torch's weights-only unpickler), ``pos`` just past it.

        Where the frame ends is the verdict's: a stream it found malformed before its STOP has
        none (and ``_BLIND``, shared by every walk, is never written to).
        """
        if self.judge is not _BLIND:
            left = fend if fend != _NO_FRAME and pos < fend else None
            self.frame_left = self.judge.frame_left = left
        self.end = self.base + pos if self.error is None else None

    def _cut_binput(self, here: int) -> None:
        """A LONG_BINPUT cut short (the verdict checks the stack, then reads the index)."""
        self.here = here
        stack, marks = self.stack, self.marks
        under = len(stack) <= (marks[-1] if marks else 0)
        why = f"stack underflow at byte {here}" if under else "error"
        raise self._fatal("truncated", why, cut=True)

    # --- handlers: given the offset after the opcode, return the next opcode's -----------

    def _handlers(self) -> list[Callable[[int], int]]:
        table: list[Callable[[int], int]] = [self.unknown] * 256
        for codes, handler in (
            (b"\x80", self.proto), (b"\x98", self.readonly_buffer),
            (b"\x8aUC\x8c", self.counted1), (b"\x8d\x8e\x96", self.counted8),
            (b"XTB\x8b", self.counted4),
            (b"KMJG", self.fixed_leaf), (b"N\x88\x89)]}\x8f\x97", self.leaf),
            (b"\x82\x83\x84", self.ext),
            (b"IFLP", self.text_line), (b"V", self.unicode), (b"S", self.string),
            (b"c", self.global_), (b"i", self.inst), (b"\x93", self.stack_global),
            (b"qr", self.binput), (b"hj", self.binget), (b"p", self.put), (b"g", self.get),
            (b"\x94", self.memoize), (b"(", self.mark),
            (b"t", self.tuple_), (b"\x85", self.tuple1), (b"\x86", self.tuple2),
            (b"\x87", self.tuple3), (b"l", self.list_), (b"d", self.dict_),
            (b"\x91", self.frozenset_), (b"o", self.obj),
            (b"a", self.append), (b"e", self.appends), (b"s", self.setitem),
            (b"u", self.setitems), (b"\x90", self.additems), (b"b", self.build),
            (b"R", self.reduce), (b"\x81", self.newobj), (b"\x92", self.newobj_ex),
            (b"Q", self.binpersid), (b"0", self.pop), (b"1", self.pop_mark), (b"2", self.dup),
        ):  # fmt: skip
            for code in codes:
                table[code] = handler
        return table

    def unknown(self, at: int) -> int:
        code = self.data[self.here]
        raise self._fatal(f"unknown opcode 0x{code:02x}")

    def need(self, at: int, size: int) -> int:
        """``at + size``, if within the data."""
        if at + size > len(self.data):
            raise self._fatal("truncated", cut=True)
        return at + size

    def push(self, value: object, depth: int = 0) -> None:
        self.stack.append(value)
        self.depths.append(depth)

    def proto(self, at: int) -> int:
        return self.need(at, 1)

    def frame(self, at: int, fend: int) -> tuple[int, int]:
        data = self.data
        at = self.need(at, 8)
        if _U64.unpack_from(data, at - 8)[0] > len(data) - at:
            self._bounds("frame longer than the data", cut=True)
        return at, _frame(data, self.here, at, fend, self.judge)

    def readonly_buffer(self, at: int) -> int:
        if not self.stack:
            self._malformed(f"stack underflow at byte {self.here}")
        return at

    def fixed_leaf(self, at: int) -> int:  # BININT1 BININT2 BININT BINFLOAT
        at = self.need(at, {0x4B: 1, 0x4D: 2, 0x4A: 4, 0x47: 8}[self.data[self.here]])
        self.push(_OTHER)
        return at

    def leaf(self, at: int) -> int:  # NONE NEWTRUE NEWFALSE EMPTY_* NEXT_BUFFER
        code = self.data[self.here]
        if code == 0x4E:
            self.push(_NONE)
        elif code == 0x5D:
            self.push(_LIST)
        elif code == 0x7D:
            self.push(_Dict())
        elif code == 0x29:
            self.push(())
        else:
            self.push(_OTHER)
        return at

    def counted1(self, at: int) -> int:
        return self.counted(at, 1, self.data[self.here])

    def counted4(self, at: int) -> int:
        return self.counted(at, 4, self.data[self.here])

    def counted8(self, at: int) -> int:
        return self.counted(at, 8, self.data[self.here])

    def binunicode(self, at: int, length: int) -> int:
        """BINUNICODE's text (its length read and checked by the loop)."""
        end = at + length
        try:  # (the bounds alone need no text)
            text = (
                _OTHER
                if self.judge is _BLIND
                else self.data[at:end].decode("utf-8", "surrogatepass")
            )
            self.stack.append(text)
        except UnicodeDecodeError:
            self._malformed("UnicodeDecodeError")
            self.stack.append(_OTHER)
        self.depths.append(0)
        return end

    def counted(self, at: int, width: int, code: int) -> int:
        """A length-prefixed argument; its value (decoded as pickle would) is pushed."""
        data = self.data
        if code == 0x58 and at + width > len(data):  # (the verdict's struct.error)
            raise self._fatal("truncated", "error", cut=True)
        at = self.need(at, width)
        length = int.from_bytes(data[at - width : at], "little")
        if length > len(data) - at:
            signed = code in (0x54, 0x8B) and length >= 1 << 31  # BINSTRING LONG4: "<i"
            raise self._fatal(
                f"declared length {length} is past the end of the data",
                f"{'negative length' if signed else 'truncated'} at byte {self.here}",
                cut=True,
            )
        self.spent += length
        raw = data[at : at + length]
        value: object = _OTHER
        try:
            if code in (0x58, 0x8C, 0x8D):  # BINUNICODE SHORT_BINUNICODE BINUNICODE8
                value = raw.decode("utf-8", "surrogatepass")
            elif code in (0x42, 0x43, 0x8E):  # BINBYTES SHORT_BINBYTES BINBYTES8
                value = raw
            elif code in (0x54, 0x55):  # BINSTRING SHORT_BINSTRING
                value = _python2_str(raw, code, self.here, self.judge)
        except UnicodeDecodeError:
            self._malformed("UnicodeDecodeError")
        self.push(value)
        return at + length

    def ext(self, at: int) -> int:  # EXT1 EXT2 EXT4
        code = self.data[self.here]
        width = {0x82: 1, 0x83: 2, 0x84: 4}[code]
        at = self.need(at, width)
        number = int.from_bytes(self.data[at - width : at], "little", signed=code == 0x84)
        self.push(self.judge.extension(number))
        return at

    def line(self, at: int) -> tuple[bytes, int]:
        """A newline-terminated argument."""
        data = self.data
        nl = data.find(b"\n", at) - at
        if nl < 0:
            raise self._fatal(
                "text argument without newline",
                f"text argument without newline at byte {at}",
                cut=True,
            )
        self.spent += nl
        return data[at : at + nl], at + nl + 1

    def text_line(self, at: int) -> int:  # INT FLOAT LONG PERSID
        _, at = self.line(at)
        self.push(_OTHER)
        return at

    def unicode(self, at: int) -> int:
        raw, at = self.line(at)
        value: object = _OTHER
        try:
            value = raw.decode("raw-unicode-escape")
        except UnicodeDecodeError:
            self._malformed("UnicodeDecodeError")
        self.push(value)
        return at

    def string(self, at: int) -> int:
        raw, at = self.line(at)
        value: object = _OTHER
        try:
            value = _quoted(raw)
        except ValueError:
            self._malformed(f"bad STRING at byte {self.here}")
        self.push(value)
        return at

    def named_line(self, at: int) -> tuple[object, int]:
        """GLOBAL's and INST's two lines: the global they name."""
        raw_module, at = self.line(at)
        raw_name, at = self.line(at)
        try:
            module = raw_module.decode("utf-8", "surrogatepass")
            name = raw_name.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            self._malformed("UnicodeDecodeError")
            return _OTHER, at
        return self.judge.named(module, name), at

    def global_(self, at: int) -> int:
        item, at = self.named_line(at)
        self.push(item)
        return at

    def inst(self, at: int) -> int:
        item, at = self.named_line(at)
        _, depth = self.pop_marked()
        self.push(self.judge.called(item, "INST"), depth)
        self.check(depth)
        return at

    def stack_global(self, at: int) -> int:
        name_item, module_item = self.take(2)
        if isinstance(module_item, str) and isinstance(name_item, str):
            self.push(self.judge.named(module_item, name_item))
        else:
            self.judge.problem(
                "STACK_GLOBAL with a module or name computed by the pickle", Verdict.UNSAFE
            )
            self.push(_OTHER)
        return at

    # --- the memo ------------------------------------------------------------------------

    def _put(self, index: int, *, checked_mark: bool = True) -> None:
        """Memoize the top of the stack (the slow path: each part's own checks)."""
        if index < 0 or index > self.memo_cap:
            self._bounds(f"memo index {index} out of range")
        stack = self.stack
        if not stack or (checked_mark and len(stack) <= (self.marks[-1] if self.marks else 0)):
            self._malformed(f"stack underflow at byte {self.here}")
        if stack:
            self.memo[index] = stack[-1]
            self._put_depth(index)

    def _put_depth(self, index: int) -> None:
        """The memo's depths, of containers only: a memo of leaves (a hostile MEMOIZE after
        MEMOIZE) costs one dict, as it did in the verdict's walk alone."""
        depth = self.depths[-1]
        if depth:
            self.mdepth[index] = depth
        elif self.mdepth:
            self.mdepth.pop(index, None)

    def binput(self, at: int) -> int:  # BINPUT LONG_BINPUT
        width = 1 if self.data[self.here] == 0x71 else 4
        at = self.need(at, width)
        self._put(int.from_bytes(self.data[at - width : at], "little"), checked_mark=width == 4)
        return at

    def binget(self, at: int) -> int:  # BINGET LONG_BINGET
        width = 1 if self.data[self.here] == 0x68 else 4
        at = self.need(at, width)
        index = int.from_bytes(self.data[at - width : at], "little")
        self.push(self.memo.get(index, _OTHER), self.mdepth.get(index, 0))
        return at

    def memo_index(self, raw: bytes) -> int:
        try:
            return int(raw)
        except ValueError:
            raise self._fatal("bad memo index") from None

    def put(self, at: int) -> int:
        raw, at = self.line(at)
        self._put(self.memo_index(raw), checked_mark=False)
        return at

    def get(self, at: int) -> int:
        raw, at = self.line(at)
        index = self.memo_index(raw)
        self.push(self.memo.get(index, _OTHER), self.mdepth.get(index, 0))
        return at

    def memoize(self, at: int) -> int:
        self._put(len(self.memo), checked_mark=False)
        return at

    # --- the stack -----------------------------------------------------------------------

    def mark(self, at: int) -> int:
        self.marks.append(len(self.stack))
        return at

    def check(self, depth: int) -> None:
        if depth > MAX_PICKLE_DEPTH:
            self._deep()

    def take(self, n: int) -> list[object]:
        """Pop ``n`` items, last on top last (an underflow across a MARK: malformed)."""
        stack = self.stack
        if len(stack) < n:
            raise self._fatal("stack underflow")
        if self.marks and len(stack) - n < self.marks[-1]:
            self._malformed(f"stack underflow at byte {self.here}")
        items = stack[len(stack) - n :][::-1]
        del stack[len(stack) - n :], self.depths[len(self.depths) - n :]
        return items

    def take_depth(self, n: int) -> tuple[list[object], int]:
        """:meth:`take`, and the depth of a container holding the items."""
        depth = max(self.depths[-n:], default=0) + 1 if len(self.depths) >= n else 0
        return self.take(n), depth

    def pop_marked(self) -> tuple[list[object], int]:
        """The items above the last MARK, and the depth of a container holding them."""
        if not self.marks:
            raise self._fatal("no MARK on the stack", f"no MARK at byte {self.here}")
        first = self.marks.pop()
        items = self.stack[first:]
        depth = max(self.depths[first:], default=0) + 1
        del self.stack[first:], self.depths[first:]
        return items, depth

    def top(self) -> object:
        """The top item, which must exist (for the verdict: it is malformed otherwise)."""
        if not self.stack:
            self._malformed(f"stack underflow at byte {self.here}")
            return _OTHER
        return self.stack[-1]

    def tuple_(self, at: int) -> int:
        marks = self.marks
        if not marks:
            return self.tuple_n(at, 0)
        first = marks.pop()
        stack, depths = self.stack, self.depths
        built = tuple(stack[first:])
        depth = max(depths[first:], default=0) + 1
        del stack[first:], depths[first:]
        stack.append(built)
        depths.append(depth)
        if depth > MAX_PICKLE_DEPTH:
            self._deep()
        return at

    def tuple1(self, at: int) -> int:
        return self.tuple_n(at, 1)

    def tuple2(self, at: int) -> int:
        stack, depths, marks = self.stack, self.depths, self.marks
        if len(stack) - 2 < (marks[-1] if marks else 0):
            return self.tuple_n(at, 2)
        second, depth = stack.pop(), depths.pop()
        stack[-1] = (stack[-1], second)
        depth = max(depth, depths[-1]) + 1
        depths[-1] = depth
        if depth > MAX_PICKLE_DEPTH:
            self._deep()
        return at

    def tuple3(self, at: int) -> int:
        return self.tuple_n(at, 3)

    def tuple_n(self, at: int, n: int) -> int:
        """TUPLE (``n`` 0: the items above the MARK), TUPLE1..3."""
        if n:
            items, depth = self.take_depth(n)
            items.reverse()
        else:
            items, depth = self.pop_marked()
        self.push(tuple(items), depth)
        self.check(depth)
        return at

    def list_(self, at: int) -> int:
        _, depth = self.pop_marked()
        self.push(_LIST, depth)
        self.check(depth)
        return at

    def dict_(self, at: int) -> int:
        items, depth = self.pop_marked()
        self.push(_Dict(bool(items)), depth)
        self.check(depth)
        return at

    def frozenset_(self, at: int) -> int:
        _, depth = self.pop_marked()
        self.push(_OTHER, depth)
        self.check(depth)
        return at

    def obj(self, at: int) -> int:
        items, depth = self.pop_marked()
        result: object = _OTHER
        if not items:
            self._malformed(f"OBJ without a class at byte {self.here}")
        else:
            result = self.judge.called(items[0], "OBJ")
        self.push(result, depth)
        self.check(depth)
        return at

    def merged(self, item_depth: int) -> None:
        """The top item (a container) now holds items ``item_depth`` deep."""
        if item_depth > self.depths[-1]:
            self.depths[-1] = item_depth
            self.check(item_depth)

    def merge1(self) -> tuple[object, object]:
        """APPEND BUILD: the item popped, and the container (or object) below it."""
        stack = self.stack
        if len(stack) < 2:
            raise self._fatal("stack underflow")
        if self.marks and len(stack) <= self.marks[-1]:
            self._malformed(f"stack underflow at byte {self.here}")
        item = stack.pop()
        self.merged(self.depths.pop() + 1)
        return item, stack[-1]

    def append(self, at: int) -> int:
        _, target = self.merge1()
        if target is not _LIST and not _untrusted_call(target):
            self.judge.problem("APPEND to something that is not a list", Verdict.NEEDS_TRUST)
        return at

    def marked_items(self) -> tuple[list[object], object]:
        """APPENDS SETITEMS ADDITEMS: the items above the MARK, and the container below."""
        items, depth = self.pop_marked()
        if not self.stack:
            raise self._fatal("stack underflow")
        self.merged(depth if items else 1)
        return items, self.stack[-1]

    def appends(self, at: int) -> int:
        _, target = self.marked_items()
        if target is not _LIST and not _untrusted_call(target):
            self.judge.problem("APPEND to something that is not a list", Verdict.NEEDS_TRUST)
        return at

    def set_in(self, target: object, added: bool) -> None:
        if isinstance(target, _Dict):
            target.filled = target.filled or added
        elif not (
            _untrusted_call(target) or (isinstance(target, _Call) and target.name in _DICT_TYPES)
        ):
            self.judge.problem("SETITEM on something that is not a dict", Verdict.NEEDS_TRUST)

    def setitem(self, at: int) -> int:
        stack, depths = self.stack, self.depths
        if len(stack) < 3:
            raise self._fatal("stack underflow")
        if self.marks and len(stack) - 2 < self.marks[-1]:
            self._malformed(f"stack underflow at byte {self.here}")
        inner = max(depths[-1], depths[-2]) + 1
        del stack[-2:], depths[-2:]
        self.merged(inner)
        self.set_in(stack[-1], True)
        return at

    def setitems(self, at: int) -> int:
        items, target = self.marked_items()
        self.set_in(target, bool(items))
        return at

    def additems(self, at: int) -> int:
        self.marked_items()
        return at

    def build(self, at: int) -> int:
        state, target = self.merge1()
        _build(target, state, self.judge)
        return at

    def reduce(self, at: int) -> int:
        stack, depths, marks = self.stack, self.depths, self.marks
        if len(stack) - 2 >= (marks[-1] if marks else 0):  # the common case, without take()
            args = stack.pop()
            depth = max(depths.pop(), depths[-1]) + 1
            func = stack[-1]
            if type(func) is _Global and func.call is not None:
                stack[-1] = func.call
            else:
                stack[-1] = _reduce(func, args, self.judge)
            depths[-1] = depth
            if depth > MAX_PICKLE_DEPTH:
                self._deep()
            return at
        (args, func), depth = self.take_depth(2)
        if type(func) is _Global and func.call is not None:
            result: object = func.call
        else:
            result = _reduce(func, args, self.judge)
        self.push(result, depth)
        self.check(depth)
        return at

    def newobj(self, at: int) -> int:
        (_, cls), depth = self.take_depth(2)
        self.push(self.judge.called(cls, "NEWOBJ"), depth)
        self.check(depth)
        return at

    def newobj_ex(self, at: int) -> int:
        (_, _, cls), depth = self.take_depth(3)
        self.push(self.judge.called(cls, "NEWOBJ_EX"), depth)
        self.check(depth)
        return at

    def binpersid(self, at: int) -> int:
        stack, depths, marks = self.stack, self.depths, self.marks
        if len(stack) > (marks[-1] if marks else 0):  # the common case, without take()
            stack[-1] = _OTHER
            depth = depths[-1] = depths[-1] + 1
            if depth > MAX_PICKLE_DEPTH:
                self._deep()
            return at
        _, depth = self.take_depth(1)
        self.push(_OTHER, depth)
        self.check(depth)
        return at

    def pop(self, at: int) -> int:
        stack, marks = self.stack, self.marks
        if marks and marks[-1] == len(stack):
            marks.pop()
        elif stack:
            self.take(1)
        else:
            raise self._fatal("stack underflow")
        return at

    def pop_mark(self, at: int) -> int:
        self.pop_marked()
        return at

    def dup(self, at: int) -> int:
        if not self.stack:
            raise self._fatal("stack underflow")
        self.push(self.stack[-1], self.depths[-1])
        return at

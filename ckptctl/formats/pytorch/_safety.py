"""The safety verdict of one pickle stream, from its opcodes alone (see ``ckptctl.safety``).

A symbolic walk over the opcodes: the stack holds what each item *is* (a global, a string, the
result of calling some global, a list, a dict, a tuple of items, anything else), never a real
object, so nothing is imported or called. That is enough to see every global the pickle names
and how it is used, to apply the rules of torch 2.13's weights-only unpickler
(``torch/_weights_only_unpickler.py``: the globals it allows by default, the opcodes it knows,
REDUCE/NEWOBJ only on allowed globals, BUILD only on tensors, ``Parameter``, ``OrderedDict`` and
allowed types, APPEND only on lists, SETITEM only on dicts), and to follow the nested legacy
streams that ``torch.storage._load_from_bytes`` hands to an unrestricted ``torch.load``.

The walk tolerates malformed streams: it stops at the first byte it cannot decode, keeping what
it saw, because ``pickle.load`` runs every opcode before the bad one. The opcodes are decoded
by the one walk over a pickle (``_walker.py``), which checks the bounds for the C unpickler in
the same pass; this module holds the verdict's rules. See ``docs/formats/pytorch.md#safety``.

How each global is classified is ``_allowlist.py``'s business.
"""

from __future__ import annotations

import codecs
import struct
from typing import TYPE_CHECKING

from ckptctl.formats.pytorch._allowlist import (
    CALLS_ARGUMENT,
    LOAD_FROM_BYTES,
    SPECIAL_CALLS,
    WEIGHTS_ONLY_GLOBALS,
    WEIGHTS_ONLY_NON_CLASSES,
    WEIGHTS_ONLY_NOT_CALLABLE,
    WEIGHTS_ONLY_OPCODES,
    canonical,
    classify,
)
from ckptctl.safety import GlobalUse, PickleSafety, Problem, Verdict

if TYPE_CHECKING:
    from collections.abc import Callable

    #: ``(blob, where, reached, depth, budget) -> verdict`` of a nested ``_load_from_bytes``
    Follow = Callable[[bytes, str, bool, int, list[int]], PickleSafety]

#: Deepest chain of ``_load_from_bytes`` streams followed inside one another.
MAX_NESTED_STREAMS = 4
#: Most nested streams scanned in one pickle (a plain pickle has one per storage).
MAX_STREAMS = 100_000
#: Most bytes of nested zip records (decompressed) judged for one pickle (one record's:
#: ``_verdict.MAX_NESTED_RECORD_BYTES``).
MAX_NESTED_ZIP_BYTES = 256 << 20
#: Problems kept as they come before repeats of one message are dropped.
MAX_REPEATED_PROBLEMS = 100

# --- the symbolic walk -----------------------------------------------------------------------


class _Global:
    """A global on the stack (``index`` into the walk's list of uses)."""

    __slots__ = ("call", "index", "module", "name")

    def __init__(self, module: str, name: str, index: int) -> None:
        self.module = module
        self.name = f"{module}.{name}"
        self.index = index
        #: the result of calling it, once judged (the walk's fast path reuses it)
        self.call: _Call | None = None


class _Call:
    """The result of calling (or instantiating) the global ``name``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class _Kind:
    """A value of a kind that matters to torch's rules (list, None) or of no interest."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind


class _Dict:
    """A dict the pickle builds (one per EMPTY_DICT/DICT): BUILD rules care if it is empty."""

    __slots__ = ("filled",)

    def __init__(self, filled: bool = False) -> None:
        self.filled = filled


_LIST, _NONE, _OTHER = _Kind("list"), _Kind("None"), _Kind("value")
_DICT_TYPES = frozenset({"collections.OrderedDict", "collections.Counter"})

_OPNAMES = {
    0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", 0x93: "STACK_GLOBAL", 0x95: "FRAME",
    0x94: "MEMOIZE", 0x8C: "SHORT_BINUNICODE", 0x8D: "BINUNICODE8", 0x8E: "BINBYTES8",
    0x42: "BINBYTES", 0x43: "SHORT_BINBYTES", 0x96: "BYTEARRAY8", 0x97: "NEXT_BUFFER",
    0x98: "READONLY_BUFFER", 0x90: "ADDITEMS", 0x91: "FROZENSET", 0x92: "NEWOBJ_EX",
    0x69: "INST", 0x6F: "OBJ", 0x30: "POP", 0x31: "POP_MARK", 0x32: "DUP", 0x49: "INT",
    0x4C: "LONG", 0x46: "FLOAT", 0x53: "STRING", 0x56: "UNICODE", 0x54: "BINSTRING",
    0x50: "PERSID", 0x70: "PUT", 0x67: "GET", 0x8B: "LONG4", 0x6C: "LIST", 0x64: "DICT",
    0x74: "TUPLE",
}  # fmt: skip


class _Walk:
    """One stream's symbolic walk; results in ``uses`` and ``problems``."""

    #: notes nothing (a malformed stream's judge after the damage: ``_walker._Blind``)
    blind = False

    def __init__(
        self, where: str, reached: bool, depth: int, budget: list[int], follow: Follow
    ) -> None:
        self.where = where
        #: judges a stream handed to ``_load_from_bytes`` (``_verdict.follow``: it walks it)
        self.follow = follow
        self.reached = reached
        self.depth = depth
        self.budget = budget  # shared count of nested streams left
        self.uses: list[GlobalUse] = []
        self.problems: list[Problem] = []
        self.nested: list[PickleSafety] = []
        self._index: dict[str, int] = {}
        self._named: dict[tuple[str, str], tuple[str, str, int]] = {}  # as spelled -> canonical
        self.seen_ops: set[int] = set()
        self._said: set[str] = set()
        self._seen_problems: set[tuple[str, Verdict]] = set()
        #: where the frame ends when the pickle's STOP leaves bytes of it (see assess_stream)
        self.frame_left: int | None = None

    def problem(
        self,
        message: str,
        verdict: Verdict,
        *,
        torch_refuses: bool = False,
        weights_only: bool = False,
    ) -> None:
        # Past the first few, once per message: a million APPENDs to a dict are not a million
        # problems (#25); every distinct one is kept, so the verdict is the same.
        key = (message, verdict)
        if len(self.problems) < MAX_REPEATED_PROBLEMS or key not in self._seen_problems:
            self._seen_problems.add(key)
            self.problems.append(
                Problem(message, verdict, self.where, self.reached, torch_refuses, weights_only)
            )

    def refused(self, message: str, *, torch_refuses: bool = False) -> None:
        """A construct torch's weights-only loader refuses (needs trust), said once per stream."""
        if message not in self._said:
            self._said.add(message)
            self.problem(message, Verdict.NEEDS_TRUST, torch_refuses=torch_refuses)

    def named(self, module: str, name: str) -> _Global:
        seen = self._named.get((module, name))
        if seen is None:
            seen = self._named[module, name] = self._use(*canonical(module, name))
        return _Global(*seen)

    def _use(self, module: str, name: str) -> tuple[str, str, int]:
        qualname = f"{module}.{name}"
        index = self._index.get(qualname)
        if index is None:
            verdict, reason = classify(module, name, called=False)
            index = self._index[qualname] = len(self.uses)
            self.uses.append(GlobalUse(qualname, verdict, self.where, reason, False, self.reached))
        return module, name, index

    def extension(self, code: int) -> _Global:
        """An EXT1/2/4 code: a global from the loading process's copyreg registry."""
        qualname = f"<copyreg extension {code}>"
        index = self._index.get(qualname)
        if index is None:
            index = self._index[qualname] = len(self.uses)
            reason = "resolves to whatever global the loading process registered with copyreg"
            self.uses.append(
                GlobalUse(qualname, Verdict.UNSAFE, self.where, reason, False, self.reached)
            )
            self.problem(f"extension code {code}: {reason}", Verdict.UNSAFE)
        return _Global("<copyreg extension>", str(code), index)

    def called(self, item: object, how: str) -> _Call | _Kind:
        """Record a call of ``item``; calling anything but a global is unsafe."""
        if isinstance(item, _Global):
            if how.startswith("NEWOBJ") and item.name in WEIGHTS_ONLY_NON_CLASSES:
                # torch/_weights_only_unpickler.py, Unpickler.load, NEWOBJ: cls.__new__(cls,
                # *args) raises for a function or a dtype; pickle's NEWOBJ refuses a non-type.
                self.refused(
                    f"{how} on {item.name}, which is not a class: torch.load refuses it with "
                    "weights_only=True or False (cls.__new__ fails)",
                    torch_refuses=True,
                )
            elif how == "REDUCE" and item.name in WEIGHTS_ONLY_NOT_CALLABLE:
                self.refused(
                    f"REDUCE calls {item.name}, which is not callable in torch: torch.load "
                    "refuses it with weights_only=True or False",
                    torch_refuses=True,
                )
            use = self.uses[item.index]
            if not use.called:
                name = item.name[len(item.module) + 1 :]
                verdict, reason = classify(item.module, name, called=True)
                if use.verdict is Verdict.UNSAFE:  # an extension code stays unsafe
                    verdict, reason = use.verdict, use.reason
                self.uses[item.index] = GlobalUse(
                    use.name, verdict, use.where, reason, True, use.reached
                )
            result = _Call(item.name)
            if item.name not in SPECIAL_CALLS:
                item.call = result
            return result
        what = item.name if isinstance(item, _Call) else "a value built by the pickle"
        self.problem(
            f"{how} calls the result of {what}: a call chain such as pydoc.locate(...)(...)",
            Verdict.UNSAFE,
        )
        return _OTHER

    def op(self, code: int) -> None:
        """Note an opcode torch's weights-only unpickler does not know (once per opcode)."""
        if code not in WEIGHTS_ONLY_OPCODES and code not in self.seen_ops:
            self.seen_ops.add(code)
            name = _OPNAMES.get(code, f"0x{code:02x}")
            self.problem(
                f"opcode {name}, which torch.load(weights_only=True) refuses",
                Verdict.NEEDS_TRUST,
                weights_only=True,  # pickle.load knows every opcode (an unknown one: malformed)
            )


def _new_budget() -> list[int]:
    """Shared by every stream nested in one pickle: [streams left, nested zip bytes left]."""
    return [MAX_STREAMS, MAX_NESTED_ZIP_BYTES]


def _quoted(raw: bytes) -> str | bytes:
    """A protocol-0 ``STRING`` argument (``'...'`` with escapes), as pickle decodes it."""
    if len(raw) >= 2 and raw[:1] == raw[-1:] and raw[:1] in (b"'", b'"'):
        raw = raw[1:-1]
    value = codecs.escape_decode(raw)[0]
    return value.decode("latin-1")


def _untrusted_call(item: object) -> bool:
    """The result of calling a global outside the allowlist (that global already needs trust)."""
    return isinstance(item, _Call) and item.name not in WEIGHTS_ONLY_GLOBALS


#: Results of allowlisted calls whose type has no ``__dict__`` and no ``__setstate__``: torch's
#: BUILD (``torch/_weights_only_unpickler.py``, ``Unpickler.load``, BUILD, "mimics load_build")
#: only accepts a state it need not apply. The types of ``_get_layout`` (``torch.layout``) and
#: ``_codecs.encode`` (``bytes``) are not allowlisted at all: BUILD on them is always refused.
_NO_DICT_RESULTS = {
    "torch.device": "a torch.device",
    "torch.Size": "a torch.Size",
    "builtins.set": "a set",
    "builtins.bytearray": "a bytearray",
    "builtins.complex": "a complex",
}
_UNBUILDABLE_RESULTS = {
    "torch.serialization._get_layout": "a torch.layout",
    "_codecs.encode": "bytes",
}
#: Calls returning a plain ``torch.Tensor``: BUILD is ``inst.set_(*state)``, which takes no
#: arguments or the legacy ``(storage, offset, size, stride)``.
_TENSOR_RESULTS = frozenset(
    {
        *(f"torch._utils._rebuild_{n}" for n in (
            "tensor", "tensor_v2", "tensor_v3", "device_tensor_from_cpu_tensor",
            "device_tensor_from_numpy", "meta_tensor_no_storage", "qtensor", "sparse_tensor",
            "nested_tensor",
        )),
        *(n for n in WEIGHTS_ONLY_GLOBALS if n.endswith("Tensor")),
    }
)  # fmt: skip
#: Calls returning a ``Parameter``: BUILD is ``Tensor.__setstate__``, which unpacks a 3-, 4- or
#: 5-tuple (``torch/_tensor.py``).
_PARAMETER_RESULTS = frozenset(
    {
        "torch._utils._rebuild_parameter",
        "torch._utils._rebuild_parameter_with_state",
        "torch.nn.parameter.Parameter",
    }
)


def _is_empty(item: object) -> bool | None:
    """Whether ``item`` is falsy, when the walk knows (None, (), '', b'', an empty dict)."""
    if item is _NONE:
        return True
    if isinstance(item, _Dict):
        return not item.filled
    if isinstance(item, tuple | str | bytes):
        return not item
    return None


def _updates_a_dict(state: object) -> bool:
    """``dict.update(state)`` surely succeeds: a dict, or a tuple of pairs (not None)."""
    if isinstance(state, _Dict) or (state is not _NONE and _is_empty(state)):
        return True
    if isinstance(state, _Call):
        return state.name in _DICT_TYPES
    return isinstance(state, tuple) and all(isinstance(i, tuple) and len(i) == 2 for i in state)


def _build(target: object, state: object, walk: _Walk) -> None:
    # torch builds tensors, Parameter, OrderedDict and instances of allowed types; BUILD on any
    # call result is judged by the called global, so only classes and plain values remain.
    if isinstance(target, _Global):
        walk.problem(
            f"BUILD changes the attributes of {target.name} itself (the class or function, for "
            "every later user in the loading process)",
            Verdict.UNSAFE,
        )
    elif not isinstance(target, _Call):
        walk.problem("BUILD on a value that is not an object", Verdict.NEEDS_TRUST)
    elif target.name == "collections.OrderedDict":
        # weights-only: ``inst.__dict__.update(state)`` whatever the state is.
        if not _updates_a_dict(state):
            walk.refused(
                "BUILD on an OrderedDict with a state that is not a dict (such as (None, "
                "{...})), which torch's weights-only loader applies with __dict__.update and "
                "fails on"
            )
    elif target.name in _TENSOR_RESULTS:
        empty = state is not _NONE and _is_empty(state)
        if not (empty or (isinstance(state, tuple) and len(state) == 4)):
            walk.refused(
                "BUILD on a tensor with a state Tensor.set_(*state) cannot take: torch.load "
                "refuses it"
            )
    elif target.name in _PARAMETER_RESULTS:
        if not (isinstance(state, tuple) and len(state) in (3, 4, 5)):
            walk.refused(
                "BUILD on a Parameter with a state Tensor.__setstate__ cannot unpack: torch.load "
                "refuses it"
            )
    elif target.name in _UNBUILDABLE_RESULTS:
        walk.refused(
            f"BUILD on {_UNBUILDABLE_RESULTS[target.name]}, a type torch's weights-only loader "
            "does not build"
        )
    elif target.name in _NO_DICT_RESULTS or target.name == "collections.Counter":
        # Neither has __setstate__: a 2-tuple is (state, slotstate); a non-empty state goes to
        # inst.__dict__.update, a non-empty slotstate to setattr.
        main, slots = state if isinstance(state, tuple) and len(state) == 2 else (state, _NONE)
        if target.name == "collections.Counter":  # has a __dict__: any dict state applies
            fits = bool(_is_empty(main) or _updates_a_dict(main)) and bool(
                _is_empty(slots) or isinstance(slots, _Dict)
            )
        else:
            fits = bool(_is_empty(main)) and bool(_is_empty(slots))
        if not fits:
            what = _NO_DICT_RESULTS.get(target.name, "a Counter")
            walk.refused(
                f"BUILD on {what} with a state it cannot take (it has no __dict__ or the state "
                "is not a dict): torch.load refuses it",
                torch_refuses=target.name != "collections.Counter",
            )


def _python2_str(raw: bytes, code: int, here: int, walk: _Walk) -> str:
    """A SHORT_BINSTRING/BINSTRING value; torch decodes it strictly as UTF-8.

    ``torch.load`` sets ``pickle_load_args["encoding"] = "utf-8"`` (``torch/serialization.py``,
    ``load``) and the weights-only SHORT_BINSTRING does ``strdata.decode(self.encoding,
    "strict")`` (``_weights_only_unpickler.py``), as pickle does with ``errors='strict'``.
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        name = "SHORT_BINSTRING" if code == 0x55 else "BINSTRING"
        walk.refused(
            f"a {name} of invalid UTF-8 (first at byte {here}): torch.load decodes Python 2 "
            "strings as UTF-8 and fails, with weights_only=True or False",
            torch_refuses=True,
        )
        return raw.decode("latin-1")


# --- frames ---------------------------------------------------------------------------------
#
# The C unpickler reading from a file object (torch reads data.pkl, and every _load_from_bytes
# stream, from an io.BytesIO) loads a FRAME's bytes into its buffer and serves each read from
# there only when it fits in what is left; a read that does not fit is taken whole from the file
# after the frame, and the frame's last bytes are skipped (_pickle.c: _Unpickler_ReadImpl ->
# _Unpickler_ReadFromFile, _Unpickler_Readline; load_frame). A FRAME that fits in the current
# frame is only checked. pickle.loads, pickletools and this walk read sequentially instead, so
# a frame whose length ends inside a read makes the C unpickler read another pickle.

_NO_FRAME = 1 << 62
_LEN_WIDTH = {0x8A: 1, 0x55: 1, 0x43: 1, 0x8C: 1, 0x8B: 4, 0x54: 4, 0x58: 4, 0x42: 4,
              0x8D: 8, 0x8E: 8, 0x96: 8}  # fmt: skip
_HIDDEN = (
    "frames that hide a second pickle: {what}, so the C unpickler torch.load(weights_only=False) "
    "uses skips the rest of the frame and reads different opcodes than the ones judged here"
)


def _read_splits(data: bytes, here: int) -> set[int]:
    """Where the C unpickler's separate reads of the opcode at ``here`` begin."""
    code = data[here]
    splits = {here + 1}
    width = _LEN_WIDTH.get(code)
    if width is not None:
        splits.add(here + 1 + width)
    elif code in (0x63, 0x69):  # GLOBAL INST: two readline() calls
        splits.add(data.find(b"\n", here + 1) + 1)
    return splits


def _frame_straddled(walk: _Walk, here: int) -> None:
    walk.problem(
        _HIDDEN.format(what=f"a FRAME ends inside the opcode at byte {here}"), Verdict.UNSAFE
    )


def _frame(data: bytes, here: int, pos: int, fend: int, walk: _Walk) -> int:
    """The frame end after the FRAME at ``here`` (its length read, ``pos`` just past it)."""
    length: int = struct.unpack_from("<Q", data, here + 1)[0]
    if fend == _NO_FRAME or pos == fend:
        return pos + length
    if pos + length <= fend:  # fits in the current frame: the C unpickler only checks it
        return fend
    walk.problem(
        _HIDDEN.format(what=f"the FRAME at byte {here} starts before the current frame ends"),
        Verdict.UNSAFE,
    )
    return _NO_FRAME


def _reduce(func: object, args: object, walk: _Walk) -> object:
    result = walk.called(func, "REDUCE")
    if not isinstance(func, _Global):
        return result
    name = func.name
    argument = CALLS_ARGUMENT.get(name)
    if argument is not None and isinstance(args, tuple) and len(args) > argument:
        inner = args[argument]
        if isinstance(inner, _Global):
            walk.called(inner, name)
    if name == "_codecs.encode" and isinstance(args, tuple) and args and isinstance(args[0], str):
        try:
            return args[0].encode("latin-1")
        except UnicodeEncodeError:
            return _OTHER
    if name == LOAD_FROM_BYTES:
        _nested(args, walk)
    return result


def _nested(args: object, walk: _Walk) -> None:
    """Follow a ``_load_from_bytes`` argument, which torch loads unrestricted.

    ``torch.storage._load_from_bytes(b)`` is ``torch.load(io.BytesIO(b), weights_only=False)``
    (``torch/storage.py``): a zip archive when ``b`` starts with a local header
    (``serialization.py``, ``_is_zipfile``), else a legacy stream; never a TAR, which
    ``_legacy_load`` tries only for real files (``_should_read_directly``).
    """
    if walk.blind:
        return
    blob = args[0] if isinstance(args, tuple) and len(args) == 1 else None
    if not isinstance(blob, bytes):
        walk.problem("_load_from_bytes of bytes computed by the pickle", Verdict.UNSAFE)
        return
    if walk.depth >= MAX_NESTED_STREAMS or walk.budget[0] <= 0:
        walk.problem("too many nested _load_from_bytes streams to judge", Verdict.UNSAFE)
        return
    walk.budget[0] -= 1
    count = sum(1 for p in walk.nested) + 1
    where = f"{walk.where} > _load_from_bytes #{count}"
    walk.nested.append(walk.follow(blob, where, walk.reached, walk.depth + 1, walk.budget))


def first_unsafe(safety: PickleSafety) -> str:
    """A one-line account of why ``safety`` is unsafe: the globals, else the first construct."""
    names = [g.name for g in safety.globals if g.reached and g.verdict is Verdict.UNSAFE]
    if names:
        distinct = list(dict.fromkeys(names))  # one global used in two streams is one global
        shown = ", ".join(f"'{n}'" for n in distinct)
        where = next(g.where for g in safety.globals if g.name == names[0])
        return f"global {shown} in {where}" if len(distinct) == 1 else f"globals {shown} in {where}"
    problem = next(p for p in safety.problems if p.reached and p.verdict is Verdict.UNSAFE)
    return f"{problem.message} in {problem.where}"

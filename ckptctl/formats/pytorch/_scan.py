"""The bounds of a pickle stream, checked before the C unpickler sees any byte.

The C unpickler trusts several numbers in the stream: a ``LONG_BINPUT`` index sizes the memo
(``idx * 2`` pointers, zero-filled), a ``BINBYTES8`` length is allocated before the bytes are
read, and nothing limits nesting (hashing a tuple nested a million deep overflows the C stack).
The one walk over a pickle (``_walker.py``) simulates the nesting depth of each stack item and
refuses the stream before any of that can happen; this module holds its limits, its opcode
tables and its errors, and :func:`scan_pickle`, the bounds part alone, which also finds where
the pickle ends, so several pickles written back to back (the legacy format) can be cut apart.

See ``docs/formats/pytorch.md#bounds``."""

from __future__ import annotations

from ckptctl.errors import CorruptCheckpointError

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

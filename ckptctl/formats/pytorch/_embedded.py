"""Pickles inside files that are not checkpoints: judged all the same (issue 28).

A file no reader accepts can still run code under a plain loader:

* a NumPy ``.npy`` of an object array (``descr`` holding ``O``): ``np.save`` writes the array's
  pickle after the header, and ``np.load(allow_pickle=True)`` unpickles it;
* an ``.npz`` (a zip of ``.npy`` records) holding such an array;
* any other zip whose pickle sits under a name torch does not look for (``data.txt``,
  ``DATA.PKL``): a script that unzips and unpickles every record runs it.

:func:`embedded_pickles` finds every such pickle and judges it with the same symbolic walk as a
checkpoint's (``_verdict.assess_pickle``); nothing is unpickled. A zip record counts as a pickle
when it starts with a ``PROTO`` opcode (protocol 2 and later), or is exactly one well-formed
protocol 0/1 pickle to its ``STOP`` (the bounds scan of ``_scan.py``), so text files, images
and the like are not judged as pickles.

``.npy`` layout (numpy/lib/format.py): magic ``\\x93NUMPY``, major and minor version bytes, the
header length (u16 for version 1, u32 for 2 and 3), the header (a Python dict literal with
``descr``, ``fortran_order`` and ``shape``), then the data.
"""

from __future__ import annotations

import ast
import struct
from typing import TYPE_CHECKING

from ckptctl.errors import CkptError
from ckptctl.formats.pytorch._read import TEXT_PICKLE_STARTS
from ckptctl.formats.pytorch._verdict import MAX_NESTED_RECORD_BYTES, assess_pickle
from ckptctl.formats.pytorch._walker import scan_pickle
from ckptctl.formats.pytorch._zipdir import ZipRecords, inflate
from ckptctl.safety import PickleSafety, Problem, Verdict

if TYPE_CHECKING:
    from ckptctl.sources import ByteSource

__all__ = ["embedded_pickles", "judge_npy"]

NPY_MAGIC = b"\x93NUMPY"
#: Longest ``.npy`` header parsed (numpy's own ``_MAX_HEADER_SIZE`` default is 10,000).
MAX_NPY_HEADER_BYTES = 10_000
#: Most bytes of one pickle (a ``.npy``'s data or a zip record) read to judge it.
MAX_EMBEDDED_BYTES = MAX_NESTED_RECORD_BYTES
#: Most zip records looked at in one file.
MAX_EMBEDDED_RECORDS = 100_000
#: Bytes of a record inflated to tell whether it is a pickle or a ``.npy``.
_HEAD_BYTES = 16


def embedded_pickles(source: ByteSource) -> PickleSafety | None:
    """The verdict of every pickle in a file no reader accepts; None when it holds none.

    Never raises for a damaged file: what cannot be read is not judged (the file is reported
    unreadable anyway).
    """
    head = source.read(0, min(source.size, _HEAD_BYTES))
    try:
        if head.startswith(NPY_MAGIC):
            return judge_npy(source.read(0, min(source.size, MAX_EMBEDDED_BYTES)), "the array data")
        if head.startswith(b"PK"):
            return _zip(source)
    except CkptError:
        return None
    return None


def judge_npy(data: bytes, where: str) -> PickleSafety | None:
    """The verdict of a ``.npy`` file's pickle, None when its dtype holds no objects."""
    if len(data) < 10:
        return None
    major = data[6]
    if major == 1:
        (length,), start = struct.unpack_from("<H", data, 8), 10
    elif major in (2, 3):
        if len(data) < 12:
            return None
        (length,), start = struct.unpack_from("<I", data, 8), 12
    else:
        return None
    if length > MAX_NPY_HEADER_BYTES or start + length > len(data):
        return None
    try:
        header = ast.literal_eval(data[start : start + length].decode("latin-1"))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(header, dict) or "O" not in repr(header.get("descr")):
        return None
    return assess_pickle(data[start + length :], where)


def _is_pickle(data: bytes) -> bool:
    if len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= 5:
        return True
    try:
        return scan_pickle(data, 0, "a zip record") == len(data)
    except CkptError:
        return False


def _zip(source: ByteSource) -> PickleSafety | None:
    records = ZipRecords(source)
    out = PickleSafety()
    found = False
    budget = max(MAX_EMBEDDED_BYTES, source.size)  # bytes inflated in all, as for .pkl records
    for info in list(records.infos.values())[:MAX_EMBEDDED_RECORDS]:
        if info.flags & 0x1 or info.file_size == 0:  # encrypted: nothing to judge without a key
            continue
        try:
            offset = records.data_offset(info)
            head = bytes(inflate(info.method, source.view(offset, info.compress_size), 2))
        except (CkptError, NotImplementedError, OSError, EOFError, ValueError):
            continue
        npy = head == NPY_MAGIC[:2]
        proto = len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5
        if not (npy or proto or (head and head[0] in TEXT_PICKLE_STARTS)):
            continue  # neither a .npy nor a pickle: not read further
        if info.file_size > min(MAX_EMBEDDED_BYTES, budget):
            if npy or proto:
                found = True
                message = f"zip record {info.name!r} is too large to judge ({info.file_size} bytes)"
                verdict = (
                    Verdict.UNSAFE if info.file_size > MAX_EMBEDDED_BYTES else Verdict.NEEDS_TRUST
                )
                out = out.merge(PickleSafety((), (Problem(message, verdict, info.name),)))
            continue
        budget -= info.file_size
        try:
            data = records.read(info, MAX_EMBEDDED_BYTES)
        except CkptError:
            continue
        judged = judge_npy(data, info.name) if data.startswith(NPY_MAGIC) else None
        if judged is None and _is_pickle(data):
            judged = assess_pickle(data, info.name)
        if judged is not None:
            found = True
            out = out.merge(judged)
    return out if found else None

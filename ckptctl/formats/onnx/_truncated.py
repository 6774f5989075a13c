"""Where a truncated ONNX file was cut.

A protobuf message has no length of its own, so a model file cut short is seen only as a field
of the ModelProto that runs past the end of the file: its key or length cut, or a length (the
graph's, usually) that declares more bytes than are left. Inside a cut graph the same holds for
the graph's own fields, which lets ``header`` show every graph field that is still whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptctl.errors import CorruptCheckpointError
from ckptctl.formats.onnx._wire import I32, I64, LEN, MAX_FIELD_NUMBER, MAX_VARINT_BYTES, VARINT

if TYPE_CHECKING:
    from ckptctl.formats.onnx._wire import WireReader

#: What to do about a truncated model.
TRUNCATED_HINT = "the file looks truncated; re-download or re-export it"
_FIXED = {I64: 8, I32: 4}


@dataclass(frozen=True)
class Cut:
    """A field the file (or the message ``end`` stands for) ends inside.

    Attributes:
        key_start: where the field begins.
        number: its field number (None: the file ends inside its key).
        start: where its value begins (None: the file ends before it does).
        declared_end: where it would end (None: the file ends inside its key or length).
    """

    key_start: int
    number: int | None = None
    start: int | None = None
    declared_end: int | None = None

    def present(self, end: int) -> str:
        """``truncated: N of M bytes present`` (M unknown when its length is cut)."""
        if self.declared_end is None:
            return f"truncated: its first {end - self.key_start} bytes present"
        whole = self.declared_end - self.key_start
        return f"truncated: {end - self.key_start} of {whole} bytes present"


def _varint(buf: bytes, pos: int) -> tuple[int, int] | None:
    """The varint at ``pos`` and the position after it; None when ``buf`` ends inside it."""
    value = shift = 0
    for i in range(pos, min(len(buf), pos + MAX_VARINT_BYTES)):
        value |= (buf[i] & 0x7F) << shift
        if buf[i] < 0x80:
            return value, i + 1
        shift += 7
    return None


def _cut_at(wire: WireReader, pos: int, end: int) -> Cut | None:
    """The field at ``pos`` as a cut one, or None when it is malformed rather than cut."""
    buf = wire.source.read(pos, min(2 * MAX_VARINT_BYTES, end - pos))
    key = _varint(buf, 0)
    if key is None:  # cut inside its key, unless the key is too long to be one
        return Cut(pos) if len(buf) < MAX_VARINT_BYTES else None
    number, kind, at = key[0] >> 3, key[0] & 7, key[1]
    if not 0 < number <= MAX_FIELD_NUMBER:
        return None
    value = _varint(buf, at)
    if kind == VARINT:
        return Cut(pos, number) if value is None and len(buf) - at < MAX_VARINT_BYTES else None
    if kind == LEN:
        if value is None:
            return Cut(pos, number) if len(buf) - at < MAX_VARINT_BYTES else None
        length, start = value
        if pos + start + length <= end:
            return None
        return Cut(pos, number, pos + start, pos + start + length)
    size = _FIXED.get(kind)
    if size is None or pos + at + size <= end:
        return None
    return Cut(pos, number, pos + at, pos + at + size)


def find_cut(wire: WireReader, start: int, end: int) -> Cut | None:
    """The field of the message ``[start, end)`` that runs past ``end``, after the whole ones.

    Returns:
        None when every field is whole.

    Raises:
        CorruptCheckpointError: a field before ``end`` is malformed (not merely cut).
    """
    pos = start
    try:
        while pos < end:
            pos = wire.field(pos, end).end
    except CorruptCheckpointError:
        cut = _cut_at(wire, pos, end)
        if cut is None:
            raise
        return cut
    return None

"""What a format module provides: a ``FormatSpec`` with sniff, open, layout and write functions."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from ckptctl._io import ByteSource
    from ckptctl.model import Checkpoint, JSONValue, TensorEntry

#: Bytes read from the start of a file to detect its format.
SNIFF_BYTES = 4096


@dataclass(frozen=True)
class Region:
    """A byte range of a file, ``end`` exclusive.

    ``kind`` is one of ``header``, ``metadata``, ``padding``, ``tensor``, ``other``. ``name`` is the
    tensor name for tensor regions; ``note`` says why (padding's reason, what "other" holds).
    """

    kind: str
    start: int
    end: int
    name: str | None = None
    note: str | None = None

    @property
    def size(self) -> int:
        """Length in bytes."""
        return self.end - self.start


@dataclass(frozen=True)
class HeaderLayout:
    """A file's raw header, decoded, and the region every byte of the file belongs to."""

    format: str
    file_size: int
    header: JSONValue
    regions: tuple[Region, ...]
    facts: Mapping[str, JSONValue] = field(default_factory=dict)


Sniff = Callable[[bytes, "ByteSource"], bool]
Opener = Callable[["ByteSource"], "Checkpoint"]
LayoutFn = Callable[["ByteSource"], HeaderLayout]
WriteFn = Callable[
    [IO[bytes], Sequence["TensorEntry"], Mapping[str, str], Mapping[str, "JSONValue"]], None
]


@dataclass(frozen=True)
class FormatSpec:
    """One checkpoint format.

    Attributes:
        name: the format's name in reports (``safetensors``, ``burnpack``, ``pytorch``).
        extensions: output extensions that select this format (``.safetensors``).
        sniff: ``(head, source) -> bool``: is this file in this format? ``head`` holds the first
            ``SNIFF_BYTES`` bytes. Must not raise for any input.
        open: parse the header and return a lazy checkpoint.
        layout: decode the raw header and account for every byte (``ckptctl header``).
        write: ``(out, entries, metadata, scalars)``: write a file to ``out``, streaming.
    """

    name: str
    extensions: tuple[str, ...]
    sniff: Sniff
    open: Opener
    layout: LayoutFn | None = None
    write: WriteFn | None = None

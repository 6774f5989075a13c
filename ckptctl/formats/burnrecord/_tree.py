"""The decoded shape of a record: plain Python values, with payloads left where they lie.

A scanner turns a record into nested ``dict`` (string keys, file order), ``list``, ``None``,
``bool``, ``int``, ``float`` and ``str`` values. Tensor payloads are never decoded while scanning:
a MessagePack byte string becomes a :class:`Blob` and a long JSON array of integers a
:class:`Numbers`, both holding only where the bytes are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from ckptctl.errors import CorruptCheckpointError

#: Values nested deeper than this are refused (real records nest about 12 levels).
MAX_DEPTH = 128
#: Values (map entries, array items, scalars) outside tensor payloads; bounds scan time.
MAX_NODES = 2_000_000
#: Longest string a record may hold (names, ids, metadata).
MAX_STRING_BYTES = 1024 * 1024
#: Dimensions of a tensor shape.
MAX_NDIM = 64


@dataclass(frozen=True)
class Blob:
    """A MessagePack byte string: ``length`` bytes at stream offset ``start``."""

    start: int
    length: int

    @property
    def end(self) -> int:
        """Offset one past the last byte."""
        return self.start + self.length


@dataclass(frozen=True)
class Numbers:
    """A JSON array of numbers left undecoded: the text ``[start, end)`` including brackets.

    ``count`` is the number of elements; ``integers`` is True when the text holds only digits,
    commas and whitespace (what a byte array looks like).
    """

    start: int
    end: int
    count: int
    integers: bool


Node: TypeAlias = "dict[str, Node] | list[Node] | Blob | Numbers | str | int | float | bool | None"


@dataclass
class Scan:
    """What a scanner found: the top-level value and where its parts lie in the stream.

    Attributes:
        root: the decoded top-level value.
        end: stream offset just after it.
        metadata_span: ``[start, end)`` of the value of the top-level ``metadata`` key.
        nodes: values decoded (for the limit).
    """

    root: Node = None
    end: int = 0
    metadata_span: tuple[int, int] | None = None
    nodes: int = 0
    payloads: list[Blob | Numbers] = field(default_factory=list)

    def enter(self, depth: int, pos: int) -> None:
        """Count one more value at ``depth``; refuse past ``MAX_NODES`` or ``MAX_DEPTH``.

        Raises:
            CorruptCheckpointError: too many values, or nested too deep.
        """
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise CorruptCheckpointError(
                f"the record holds more than {MAX_NODES} values outside tensor payloads"
            )
        if depth > MAX_DEPTH:
            raise CorruptCheckpointError(
                f"values are nested deeper than {MAX_DEPTH} levels at byte {pos}"
            )

"""What ``diff`` found: the options it ran with and every tensor's status (types only).

:func:`ckptctl.ops.diff.diff_checkpoints` computes it; ``report.render_diff`` prints it and
``report.json`` gives its JSON.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.model import StrEnum

if TYPE_CHECKING:
    from ckptctl.fix import Command, Note, Option
    from ckptctl.model import Progress

DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-8


class DiffStatus(StrEnum):
    """How one common tensor compares (see ``ckptctl.ops.diff``)."""

    IDENTICAL = "identical"
    EQUAL = "equal"
    CLOSE = "close"
    DTYPE = "dtype"
    DIFFERENT = "different"
    TRANSPOSED = "transposed"
    SHAPE = "shape"


#: Every status, in the order counts and tables list them.
STATUSES: tuple[DiffStatus, ...] = tuple(DiffStatus)
#: Statuses that leave two checkpoints identical.
PASSING: frozenset[DiffStatus] = frozenset(
    {DiffStatus.IDENTICAL, DiffStatus.EQUAL, DiffStatus.CLOSE}
)
DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-8


@dataclass(frozen=True)
class DiffOptions:
    """What to do to A before comparing, and how close values must be.

    Attributes:
        state_key: descend into this dotted key of A.
        state_key_b: descend into this dotted key of B.
        remap: ordered ``PATTERN=REPLACEMENT`` rules applied to A's names (as ``convert``).
        adapters: adapter names applied to A after the rules (as ``convert``).
        module_types: ``REGEX=Type`` rules for the layout adapters (as ``convert``).
        rtol: relative tolerance (of B's value).
        atol: absolute tolerance.
        values_only: a tensor whose dtype differs but whose values are close passes.
        pattern: compare only tensors whose name matches this regex (Rust dialect, searched),
            on both sides (A's names after the rules and adapters).
        progress: called as ``progress(nbytes, total)`` once each tensor is compared, with A's
            byte count of it and of every tensor to compare.
    """

    state_key: str | None = None
    state_key_b: str | None = None
    remap: tuple[str, ...] = ()
    adapters: tuple[str, ...] = ()
    module_types: tuple[str, ...] = ()
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    values_only: bool = False
    pattern: str | None = None
    progress: Progress | None = field(default=None, compare=False)


@dataclass(frozen=True)
class TensorDiff:
    """One tensor present on both sides.

    ``max_abs``, ``max_rel``, ``mismatched``, ``nan_mismatched``, ``relative_change``
    (``‖a - b‖ / ‖a‖``) and ``cosine`` (cosine similarity) are None when the values were not
    compared (status ``shape``); ``cosine`` also when either tensor is all zeros.
    """

    name: str
    status: DiffStatus
    dtype_a: str
    dtype_b: str
    shape_a: tuple[int, ...]
    shape_b: tuple[int, ...]
    numel: int
    max_abs: float | None = None
    max_rel: float | None = None
    mismatched: int | None = None
    nan_mismatched: int | None = None
    relative_change: float | None = None
    cosine: float | None = None


@dataclass(frozen=True)
class OnlyIn:
    """A tensor name on one side only, with the most similar name only on the other side."""

    name: str
    suggestion: str | None = None


@dataclass(frozen=True)
class DiffReport:
    """What ``ckptctl diff`` found; ``report.render_diff`` prints it."""

    a: str
    b: str
    format_a: str
    format_b: str
    tensors_a: int
    tensors_b: int
    tensors: tuple[TensorDiff, ...]
    only_in_a: tuple[OnlyIn, ...]
    only_in_b: tuple[OnlyIn, ...]
    options: DiffOptions
    fixes: tuple[Option, ...] = ()
    suggested_command: Command | None = None
    warnings: tuple[str | Note, ...] = ()
    #: The ``convert`` that writes A under B's names and layout (when the fixes make B's names).
    convert_command: Command | None = None

    def passes(self, row: TensorDiff) -> bool:
        """True when ``row`` does not make the checkpoints differ."""
        return row.status in PASSING or (
            self.options.values_only and row.status is DiffStatus.DTYPE
        )

    @property
    def within_tolerance(self) -> bool:
        """Same names and every common tensor passes: identical bytes, equal values or values
        within ``rtol``/``atol`` (any dtypes with ``values_only``). The CLI exits 0 exactly then.
        """
        return not self.only_in_a and not self.only_in_b and all(map(self.passes, self.tensors))

    @property
    def identical(self) -> bool:
        """Same names and every common tensor byte for byte the same (status ``identical``);
        values that only match within the tolerance are :attr:`within_tolerance`, not this."""
        return self.within_tolerance and all(t.status is DiffStatus.IDENTICAL for t in self.tensors)

    @property
    def ok(self) -> bool:
        """Alias of :attr:`within_tolerance` (the CLI exits 1 when false)."""
        return self.within_tolerance

    @property
    def differing(self) -> tuple[TensorDiff, ...]:
        """The common tensors that do not pass."""
        return tuple(t for t in self.tensors if not self.passes(t))

    def counts(self) -> dict[str, int]:
        """Tensor counts, per side and per status, in a fixed key order."""
        by_status = Counter(t.status for t in self.tensors)
        out = {
            "tensors_a": self.tensors_a,
            "tensors_b": self.tensors_b,
            "common": len(self.tensors),
            "only_in_a": len(self.only_in_a),
            "only_in_b": len(self.only_in_b),
        }
        out.update({status: by_status[status] for status in STATUSES})
        return out

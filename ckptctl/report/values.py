"""What ``ckptctl show`` and ``ls --stats`` compute from tensor values (types only)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Histogram:
    """Counts of the finite values in ``bins`` equal-width bins over ``[low, high]``."""

    low: float
    high: float
    counts: tuple[int, ...]


@dataclass(frozen=True)
class TensorStats:
    """Statistics of one tensor's values, decoded exactly (BF16, FP8, F16 widened to F32).

    ``min``, ``max``, ``mean``, ``std`` and ``absmax`` are over the finite values (NaN and
    ±Inf are counted, not included), None when there are none (or for complex tensors).
    ``std`` is the sample standard deviation (``torch.std``'s default, correction 1); the
    mean and the deviation are accumulated in float64.
    """

    count: int
    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    absmax: float | None
    zeros: int
    nan: int
    inf: int
    histogram: Histogram | None = None

    @property
    def zero_share(self) -> float:
        """The share of elements that are zero (``-0.0`` included), 0.0 for an empty tensor."""
        return self.zeros / self.count if self.count else 0.0


@dataclass(frozen=True)
class TensorValues:
    """One tensor as ``show`` prints it: numpy's printing of its values and its statistics."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    preview: str
    stats: TensorStats | None


@dataclass(frozen=True)
class ShowReport:
    """The tensors ``show`` was asked for, in the order asked."""

    path: str
    format: str
    tensors: tuple[TensorValues, ...]

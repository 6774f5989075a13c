"""Float casts: ``cast:DTYPE`` (``FloatCastAdapter``) and ``half`` (``HalfPrecisionAdapter``).

Both round to nearest even (``ckptctl.dtypes.from_float``). Like Burn, F64 goes to F16/BF16
through F32 (two roundings, burn-store spec §2.1), so results match Burn bit for bit.

* ``cast:DTYPE`` (§2.2) converts every float tensor not already in DTYPE, whatever its module.
* ``half`` (§2.1) converts F32 -> F16 and F16 -> F32 (direction follows each tensor's dtype),
  only for tensors whose module type is in :data:`HALF_PRECISION_MODULES`. BatchNorm is
  excluded entirely (``running_var`` can underflow in F16); tensors without a module type,
  user structs, F64, BF16 and non-floats are untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from ckptctl.adapters._base import Action, ActionKind, Adapted, BaseAdapter
from ckptctl.adapters.modules import Decision, resolve
from ckptctl.dtypes import DType, from_float, to_float
from ckptctl.errors import SelectionError
from ckptctl.model import ComputedData, expected_nbytes, iter_row_blocks

if TYPE_CHECKING:
    from collections.abc import Mapping

    from numpy.typing import NDArray

    from ckptctl.model import TensorEntry

#: Burn's default half-precision module set (14 types; BatchNorm deliberately absent).
HALF_PRECISION_MODULES = frozenset(
    {
        "Linear", "Embedding", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
        "ConvTranspose2d", "ConvTranspose3d", "DeformConv2d", "LayerNorm", "GroupNorm",
        "InstanceNorm", "RmsNorm", "PRelu",
    }
)  # fmt: skip
#: Dtypes a cast may produce (FP8 casts are not supported by ``from_float``).
CAST_TARGETS = (DType.F64, DType.F32, DType.F16, DType.BF16)


def convert_float(raw: NDArray[Any], source: DType, target: DType) -> NDArray[Any]:
    """Convert an array stored as ``source`` (raw bits for BF16/FP8) to ``target`` storage.

    Rounds to nearest even; F64 reaches F16/BF16 through F32, as Burn does.
    """
    # overflow to +-inf is the intended result (half crate semantics), not a warning
    with np.errstate(over="ignore"):
        values = to_float(raw, source)
        if target in (DType.F16, DType.BF16) and values.dtype == np.float64:
            values = values.astype(np.float32)
        return from_float(values, target)


def _load_converted(entry: TensorEntry, target: DType) -> NDArray[Any]:
    """Convert block by block of rows: memory is the output plus one input block."""
    out = np.empty(entry.shape, dtype=target.numpy)
    for first, block in iter_row_blocks(entry):
        converted = convert_float(block, entry.dtype, target)
        if out.ndim:
            out[first : first + block.shape[0]] = converted
        else:
            out[()] = converted
    return out


def cast_entry(entry: TensorEntry, target: DType) -> TensorEntry:
    """A new entry with ``target`` dtype whose data converts lazily."""
    return replace(
        entry,
        dtype=target,
        nbytes=expected_nbytes(target, entry.shape),
        offset=None,
        source_dtype=None,
        data=ComputedData(partial(_load_converted, entry, target)),
    )


@dataclass(frozen=True)
class Cast(BaseAdapter):
    """Cast every float tensor (BF16 and FP8 included) to ``to``; others pass through.

    Raises:
        SelectionError: ``to`` is not F64, F32, F16 or BF16.
    """

    to: DType

    def __post_init__(self) -> None:
        if self.to not in CAST_TARGETS:
            raise SelectionError(
                f"cannot cast to {self.to.value}",
                hint="cast targets: " + ", ".join(f"cast:{d.value.lower()}" for d in CAST_TARGETS),
            )

    @classmethod
    def parse(cls, text: str) -> Cast:
        """``Cast.parse("bf16")``; any ``DType.parse`` spelling.

        Raises:
            SelectionError: unknown dtype or not a cast target.
        """
        try:
            dtype = DType.parse(text)
        except ValueError:
            raise SelectionError(
                f"unknown dtype {text!r} in cast:{text}",
                hint="e.g. cast:f32, cast:f16, cast:bf16, cast:f64",
            ) from None
        return cls(dtype)

    def apply(self, entry: TensorEntry) -> Adapted:
        if not entry.dtype.is_float or entry.dtype is self.to:
            return entry, ()
        detail = f"{entry.dtype.value} -> {self.to.value}"
        action = Action(ActionKind.CAST, detail, "every float tensor is cast", self.describe())
        return cast_entry(entry, self.to), (action,)

    def describe(self) -> str:
        return f"cast:{self.to.value}"


@dataclass(frozen=True)
class HalfPrecision(BaseAdapter):
    """Burn's ``HalfPrecisionAdapter``: F32 <-> F16 for tensors of the listed module types.

    Attributes:
        decisions: module-type decisions by tensor name (else ``entry.module_type`` is used).
        modules: the module types converted (default: Burn's 14, without BatchNorm).
    """

    decisions: Mapping[str, Decision] = field(default_factory=dict)
    modules: frozenset[str] = HALF_PRECISION_MODULES

    def apply(self, entry: TensorEntry) -> Adapted:
        if entry.dtype not in (DType.F32, DType.F16):
            return entry, ()
        decision = resolve(entry, self.decisions)
        if decision is None or decision.module_type not in self.modules:
            return entry, ()
        target = DType.F16 if entry.dtype is DType.F32 else DType.F32
        detail = f"{entry.dtype.value} -> {target.value}"
        reason = f"{decision.module_type} is in the half-precision set ({decision.evidence})"
        return cast_entry(entry, target), (
            Action(ActionKind.CAST, detail, reason, self.describe()),
        )

    def describe(self) -> str:
        return "half"

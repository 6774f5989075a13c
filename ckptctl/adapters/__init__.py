"""Adapters: per-tensor transformations applied while converting a checkpoint.

An adapter is a callable ``(TensorEntry) -> TensorEntry | None`` (``None`` drops the entry). It
changes metadata (name, dtype, shape) at once and defers data work by wrapping the old loader in
:class:`ckptctl.model.ComputedData`; it does no I/O and prints nothing. Entries that need no
change come back unchanged (the same object), so raw copies stay zero-copy.

Every adapter here also has ``apply(entry) -> (entry | None, actions)``: the :class:`Action`
tuple says what was done and *why* (which evidence decided the module type), so ``--dry-run``
can print a plan. :func:`plan` runs an adapter over all entries and refuses two inputs that end
up with the same name (Burn silently keeps one of them,
docs/formats/burn-store.md#collisions).

Named adapters (CLI ``--adapter NAME``): ``pytorch-to-burn``, ``burn-to-pytorch``, ``half``,
``cast:DTYPE``, the Llama RoPE layouts ``rope-interleaved:HEADS[,KV]`` /
``rope-half-split:HEADS[,KV]`` and llama.cpp's names ``gguf-to-hf[:HEADS[,KV]]`` /
``hf-to-gguf[:HEADS[,KV]]``; see :func:`parse_adapter`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.adapters._base import (
    Action,
    ActionKind,
    Adapted,
    Adapter,
    BaseAdapter,
    Chain,
    FunctionAdapter,
    PlanItem,
    as_adapter,
    chain,
    plan,
    unique_names,
)
from ckptctl.errors import SelectionError
from ckptctl.fix import closest

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ckptctl.adapters.gguf import ModelFacts
    from ckptctl.adapters.modules import Decision


@dataclass(frozen=True)
class AdapterContext:
    """What named adapters need beyond their name.

    Attributes:
        decisions: module-type decisions by tensor name (``ckptctl.adapters.modules``), taken
            on the names the adapter will see (after ``--remap``).
        rename_rmsnorm: rename RmsNorm ``weight``/``gamma`` (Burn 0.22+; False for Burn 0.21).
        before: the adapter names earlier in the chain.
        after: the adapter names later in the chain (the RoPE adapters need both to know a
            Linear weight's layout at their place).
        facts: the architecture and head counts read from the source (``gguf-to-hf``,
            ``hf-to-gguf``).
    """

    decisions: Mapping[str, Decision] = field(default_factory=dict)
    rename_rmsnorm: bool = True
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    facts: ModelFacts | None = None


ADAPTER_NAMES = (
    "pytorch-to-burn", "burn-to-pytorch", "half", "cast:DTYPE", "rope-interleaved:HEADS[,KV]",
    "rope-half-split:HEADS[,KV]", "gguf-to-hf[:HEADS[,KV]]", "hf-to-gguf[:HEADS[,KV]]",
)  # fmt: skip


def parse_adapter(spec: str, context: AdapterContext | None = None) -> Adapter:
    """Build a named adapter (CLI ``--adapter NAME``).

    Args:
        spec: ``pytorch-to-burn``, ``burn-to-pytorch``, ``half``, ``cast:DTYPE`` (``cast:f16``,
            ``cast:bf16``, ``cast:float32`` ... any ``DType.parse`` spelling of a float dtype),
            ``rope-interleaved:HEADS[,KV_HEADS]`` or ``rope-half-split:HEADS[,KV_HEADS]``
            (``ckptctl.adapters.rope``; the head count is required), ``gguf-to-hf`` or
            ``hf-to-gguf`` (``ckptctl.adapters.gguf``; ``:HEADS[,KV_HEADS]`` when the source
            does not give the head counts).
        context: module-type decisions for the layout and half adapters, the source's facts
            for the GGUF name adapters.

    Returns:
        The adapter.

    Raises:
        SelectionError: unknown adapter name, bad cast target or missing head count.
        UnsupportedError: ``gguf-to-hf``/``hf-to-gguf`` for an architecture they do not rename.

    Example:
        >>> parse_adapter("cast:bf16").describe()
        'cast:BF16'
    """
    # imported here: they import numpy, which listing and raw copies never need
    from ckptctl.adapters.cast import Cast, HalfPrecision
    from ckptctl.adapters.layout import BurnToPyTorch, PyTorchToBurn

    ctx = context or AdapterContext()
    name = spec.strip().lower()
    if name == "pytorch-to-burn":
        return PyTorchToBurn(dict(ctx.decisions), rename_rmsnorm=ctx.rename_rmsnorm)
    if name == "burn-to-pytorch":
        return BurnToPyTorch(dict(ctx.decisions), rename_rmsnorm=ctx.rename_rmsnorm)
    if name == "half":
        return HalfPrecision(dict(ctx.decisions))
    if name.startswith("cast:"):
        return Cast.parse(spec.strip()[5:])
    if name.partition(":")[0] in ("rope-interleaved", "rope-half-split"):
        from ckptctl.adapters.rope import RopePermute

        before = [a.strip().lower() for a in ctx.before]
        after = [a.strip().lower() for a in ctx.after]
        columns = "pytorch-to-burn" in before or "burn-to-pytorch" in after
        return RopePermute.parse(spec, decisions=dict(ctx.decisions), columns_if_linear=columns)
    if name.partition(":")[0] in ("gguf-to-hf", "hf-to-gguf"):
        from ckptctl.adapters.gguf import GGUF_ADAPTERS, GGUFNames

        leading = all(b.strip().lower().partition(":")[0] in GGUF_ADAPTERS for b in ctx.before)
        return GGUFNames.parse(spec, ctx.facts, experts=leading)
    guess = closest(name, ADAPTER_NAMES)
    raise SelectionError(
        f"unknown adapter {spec!r}" + (f"; did you mean {guess!r}?" if guess else ""),
        hint="valid adapters: " + ", ".join(ADAPTER_NAMES),
    )


__all__ = [
    "ADAPTER_NAMES",
    "Action",
    "ActionKind",
    "Adapted",
    "Adapter",
    "AdapterContext",
    "BaseAdapter",
    "Chain",
    "FunctionAdapter",
    "PlanItem",
    "as_adapter",
    "chain",
    "parse_adapter",
    "plan",
    "unique_names",
]

"""Adapters: per-tensor transformations applied while converting a checkpoint.

An adapter is a callable ``(TensorEntry) -> TensorEntry | None`` (``None`` drops the entry). It
changes metadata (name, dtype, shape) at once and defers data work by wrapping the old loader in
:class:`ckptctl.model.ComputedData`; it does no I/O and prints nothing. Entries that need no
change come back unchanged (the same object), so raw copies stay zero-copy.

Every adapter here also has ``apply(entry) -> (entry | None, actions)``: the :class:`Action`
tuple says what was done and *why* (which evidence decided the module type), so ``--dry-run``
can print a plan. :func:`plan` runs an adapter over all entries and refuses two inputs that end
up with the same name (Burn silently keeps one of them, burn-store spec §3.5).

Named adapters (CLI ``--adapter NAME``): ``pytorch-to-burn``, ``burn-to-pytorch``, ``half`` and
``cast:DTYPE``; see :func:`parse_adapter`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

from ckptctl.errors import SelectionError
from ckptctl.fix import Note, Option, closest
from ckptctl.model import StrEnum

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

    from ckptctl.adapters.modules import Decision
    from ckptctl.model import TensorEntry


class ActionKind(StrEnum):
    """What an adapter did to a tensor."""

    TRANSPOSE = "transpose"
    SPLIT = "split"
    FUSE = "fuse"
    RENAME = "rename"
    CAST = "cast"
    DROP = "drop"
    KEEP = "keep"
    CUSTOM = "custom"


@dataclass(frozen=True)
class Action:
    """One thing an adapter did (or deliberately did not do) to one tensor.

    Attributes:
        kind: what was done (a ``keep`` records a deliberate non-change, with its reason).
        detail: what changed, e.g. ``[3, 4] -> [4, 3]`` or ``norm.weight -> norm.gamma``.
        reason: why, naming the evidence, e.g. ``Linear (class Linear from file)``.
        adapter: the ``describe()`` text of the adapter that acted.
    """

    kind: ActionKind
    detail: str
    reason: str
    adapter: str

    def describe(self) -> str:
        """One line for a plan: ``transpose [3, 4] -> [4, 3]: Linear (pattern fc)``."""
        return f"{self.kind} {self.detail}: {self.reason}" if self.reason else self.kind


#: What ``apply`` returns: the output entry (None = dropped) and the actions taken.
Adapted: TypeAlias = "tuple[TensorEntry | None, tuple[Action, ...]]"


@runtime_checkable
class Adapter(Protocol):
    """The adapter protocol: callable, with ``apply`` for plans and ``describe`` for humans."""

    def __call__(self, entry: TensorEntry) -> TensorEntry | None: ...

    def apply(self, entry: TensorEntry) -> Adapted: ...

    def describe(self) -> str: ...


class BaseAdapter:
    """Mixin: ``__call__`` is ``apply`` without the actions. Subclasses implement ``apply``."""

    def __call__(self, entry: TensorEntry) -> TensorEntry | None:
        return self.apply(entry)[0]

    def apply(self, entry: TensorEntry) -> Adapted:
        """Adapt one entry; return it (or None) with the actions taken."""
        raise NotImplementedError

    def describe(self) -> str:
        """A short description for ``--dry-run``."""
        return type(self).__name__


@dataclass(frozen=True)
class FunctionAdapter(BaseAdapter):
    """Wraps a plain callable so it fits the protocol; reports a ``custom`` action on change."""

    function: Callable[[TensorEntry], TensorEntry | None]
    label: str = "custom"

    def apply(self, entry: TensorEntry) -> Adapted:
        out = self.function(entry)
        if out is entry:
            return entry, ()
        detail = "dropped" if out is None else f"{entry.name} -> {out.name}"
        return out, (Action(ActionKind.CUSTOM, detail, "custom adapter", self.label),)

    def describe(self) -> str:
        return self.label


def as_adapter(adapter: Callable[[TensorEntry], TensorEntry | None]) -> Adapter:
    """Return ``adapter`` itself when it follows the protocol, else wrap it."""
    if isinstance(adapter, Adapter):
        return adapter
    return FunctionAdapter(adapter)


@dataclass(frozen=True)
class Chain(BaseAdapter):
    """Adapters applied left to right; a dropped entry stops the chain."""

    adapters: tuple[Adapter, ...]

    def apply(self, entry: TensorEntry) -> Adapted:
        actions: list[Action] = []
        current: TensorEntry | None = entry
        for adapter in self.adapters:
            if current is None:
                break
            current, done = adapter.apply(current)
            actions.extend(done)
        return current, tuple(actions)

    def describe(self) -> str:
        return " -> ".join(a.describe() for a in self.adapters) or "identity"


def chain(*adapters: Callable[[TensorEntry], TensorEntry | None]) -> Chain:
    """Chain adapters: ``chain(a, b)(x) == b(a(x))`` (Burn's ``a.chain(b)``, spec §2.3).

    Args:
        *adapters: adapters or plain callables, applied in the order given.

    Returns:
        One adapter; with no arguments, the identity.
    """
    flat: list[Adapter] = []
    for adapter in adapters:
        wrapped = as_adapter(adapter)
        flat.extend(wrapped.adapters if isinstance(wrapped, Chain) else (wrapped,))
    return Chain(tuple(flat))


@dataclass(frozen=True)
class PlanItem:
    """The fate of one input entry: its output (None = dropped) and the actions taken."""

    source: str
    entry: TensorEntry | None
    actions: tuple[Action, ...]


def plan(
    entries: Iterable[TensorEntry], adapter: Adapter, *, unique: bool = True
) -> list[PlanItem]:
    """Run ``adapter`` over every entry (metadata only; data stays lazy).

    Args:
        entries: input entries, in file order.
        adapter: the adapter (or chain) to apply.
        unique: refuse two outputs with one name (off: the caller checks, naming its sources).

    Returns:
        One item per input entry, in input order.

    Raises:
        SelectionError: two input tensors end up with the same output name (Burn keeps an
            arbitrary one silently; ckptctl refuses and names both).
    """
    items: Iterator[PlanItem] = (PlanItem(entry.name, *adapter.apply(entry)) for entry in entries)
    if unique:
        remap = Note(
            "change the {fix0} rules so that every tensor keeps a unique name",
            (Option("remap", takes_value=True),),
        )
        items = unique_names(items, remap)
    return list(items)


def unique_names(items: Iterable[PlanItem], hint: Note) -> Iterator[PlanItem]:
    """Pass ``items`` on, refusing the first whose output name an earlier item already took.

    Raises:
        SelectionError: two input tensors end up with the same output name (Burn keeps an
            arbitrary one silently; ckptctl refuses, names both inputs, and gives ``hint``).
    """
    seen: dict[str, str] = {}
    for item in items:
        if item.entry is not None:
            first = seen.setdefault(item.entry.name, item.source)
            if first != item.source:
                raise SelectionError(
                    f"tensors {first!r} and {item.source!r} would both be named "
                    f"{item.entry.name!r}",
                    hint=hint,
                )
        yield item


@dataclass(frozen=True)
class AdapterContext:
    """What named adapters need beyond their name.

    Attributes:
        decisions: module-type decisions by tensor name (``ckptctl.adapters.modules``), taken
            on the names the adapter will see (after ``--remap``).
        rename_rmsnorm: rename RmsNorm ``weight``/``gamma`` (Burn 0.22+; False for Burn 0.21).
    """

    decisions: Mapping[str, Decision] = field(default_factory=dict)
    rename_rmsnorm: bool = True


ADAPTER_NAMES = ("pytorch-to-burn", "burn-to-pytorch", "half", "cast:DTYPE")


def parse_adapter(spec: str, context: AdapterContext | None = None) -> Adapter:
    """Build a named adapter (CLI ``--adapter NAME``).

    Args:
        spec: ``pytorch-to-burn``, ``burn-to-pytorch``, ``half`` or ``cast:DTYPE`` (``cast:f16``,
            ``cast:bf16``, ``cast:float32`` ... any ``DType.parse`` spelling of a float dtype).
        context: module-type decisions for the layout and half adapters.

    Returns:
        The adapter.

    Raises:
        SelectionError: unknown adapter name or bad cast target.

    Example:
        >>> parse_adapter("cast:bf16").describe()
        'cast:BF16'
    """
    # imported here: those modules import this one for Action/BaseAdapter
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
    guess = closest(name, ADAPTER_NAMES)
    raise SelectionError(
        f"unknown adapter {spec!r}" + (f"; did you mean {guess!r}?" if guess else ""),
        hint="valid adapters: " + ", ".join(ADAPTER_NAMES),
    )


__all__ = [
    "ADAPTER_NAMES",
    "Action",
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

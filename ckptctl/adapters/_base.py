"""The adapter interface: ``Action``, ``BaseAdapter``, chains and plans (see ``ckptctl.adapters``).

Every adapter module imports this one, never the package: the package's ``parse_adapter``
imports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

from ckptctl.errors import SelectionError
from ckptctl.fix import Note, Option
from ckptctl.model import StrEnum

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

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
        unproven: nothing decided it (a square rank-2 weight of no known module type kept as
            is): a target check must not count the tensor as applied.
    """

    kind: ActionKind
    detail: str
    reason: str
    adapter: str
    unproven: bool = False

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
    """Chain adapters: ``chain(a, b)(x) == b(a(x))`` (Burn's ``a.chain(b)``,
    docs/formats/burn-store.md#chaining).

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

"""Include/exclude filtering by regex (docs/formats/burn-store.md#filters).

Patterns are Rust-dialect regexes (:func:`ckptctl.adapters.rename.compile_pattern`), found
anywhere in the tensor name (unanchored search). A tensor is kept when it matches any include
pattern (no include patterns: every tensor) and no exclude pattern. Burn's ``PathFilter`` has no
exclude list -- ``exclude`` is a ckptctl extension -- and Burn silently drops a pattern that does
not compile; ckptctl refuses it instead, because a dropped pattern flips the filter's meaning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.adapters._base import Action, ActionKind, Adapted, BaseAdapter
from ckptctl.adapters.rename import compile_pattern
from ckptctl.errors import quote

if TYPE_CHECKING:
    import re

    from ckptctl.model import TensorEntry


@dataclass(frozen=True)
class Select(BaseAdapter):
    """Keep tensors matching an include pattern (or all) and no exclude pattern.

    Raises:
        SelectionError: a pattern does not compile (named as ``include #2`` / ``exclude #1``).
    """

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    _include: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _exclude: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled_in = tuple(
            compile_pattern(p, f"include #{i}") for i, p in enumerate(self.include, start=1)
        )
        compiled_ex = tuple(
            compile_pattern(p, f"exclude #{i}") for i, p in enumerate(self.exclude, start=1)
        )
        object.__setattr__(self, "_include", compiled_in)
        object.__setattr__(self, "_exclude", compiled_ex)

    def matches(self, name: str) -> bool:
        """True when ``name`` is kept."""
        return self.reason_dropped(name) is None

    def reason_dropped(self, name: str) -> str | None:
        """Why ``name`` is dropped, or None when it is kept."""
        if self._include and not any(r.search(name) for r in self._include):
            return "matches no include pattern"
        for pattern, regex in zip(self.exclude, self._exclude, strict=True):
            if regex.search(name):
                return f"matches exclude pattern {quote(pattern)}"
        return None

    def apply(self, entry: TensorEntry) -> Adapted:
        reason = self.reason_dropped(entry.name)
        if reason is None:
            return entry, ()
        return None, (Action(ActionKind.DROP, entry.name, reason, self.describe()),)

    def describe(self) -> str:
        parts = [f"include {p}" for p in self.include] + [f"exclude {p}" for p in self.exclude]
        return "select " + ", ".join(parts) if parts else "select all"

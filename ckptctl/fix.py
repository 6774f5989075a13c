"""Advice as data: which option to set to which value, spelled by whoever shows it.

The library never writes a command-line flag into a message. A suggestion is an
:class:`Option` (an API parameter name such as ``state_key`` or ``remap``, and its value) or a
:class:`Command` (another ``ckptctl`` command with arguments and options); text that embeds
suggestions is a :class:`Note` with ``{fix0}``, ``{fix1}`` ... placeholders. ``str()`` spells it
with the current speller: Python keyword style by default (``state_key='model'``), and the
command line's flags inside ``ckptctl`` (the CLI installs its speller with :data:`SPELLER`).
"""

from __future__ import annotations

from collections.abc import Callable  # noqa: TC003  # the ContextVar's type, at runtime
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ckptctl.errors import CkptError

__all__ = ["SPELLER", "Command", "Note", "Option", "closest", "spell"]


@dataclass(frozen=True)
class Option:
    """One option: the API parameter's name (``state_key``) and a value.

    Without a value it is a flag (``force=True``), or, with ``takes_value``, an option whose
    value the user chooses (``state_key=...``; the CLI spells the flag alone).
    """

    name: str
    value: str | None = None
    takes_value: bool = False


@dataclass(frozen=True)
class Command:
    """A suggested invocation: a command (None: the one being run), arguments and options."""

    name: str | None = None
    args: tuple[str, ...] = ()
    options: tuple[Option, ...] = ()


Fix = Option | Command


def _python_spelling(fix: Fix) -> str:
    if isinstance(fix, Option):
        if fix.value is not None:
            return f"{fix.name}={fix.value!r}"
        return f"{fix.name}=..." if fix.takes_value else f"{fix.name}=True"
    parts = [repr(a) for a in fix.args] + [_python_spelling(o) for o in fix.options]
    return f"{fix.name}({', '.join(parts)})" if fix.name else ", ".join(parts)


#: How suggestions are spelled right now (the CLI sets its own for the command it runs).
SPELLER: ContextVar[Callable[[Fix], str]] = ContextVar("SPELLER", default=_python_spelling)


def spell(fix: Fix) -> str:
    """``fix`` as the current speller writes it (``--state-key model`` inside the CLI)."""
    return SPELLER.get()(fix)


@dataclass(frozen=True)
class Note:
    """Text naming options or commands: ``{fix0}`` ... stand for ``fixes[0]`` ...

    Example:
        >>> str(Note("pass {fix0}", (Option("state_key", "model"),)))
        "pass state_key='model'"
    """

    text: str
    fixes: tuple[Fix, ...] = ()

    def __str__(self) -> str:
        out = self.text
        for i, fix in enumerate(self.fixes):
            out = out.replace(f"{{fix{i}}}", spell(fix))
        return out


def _normal(word: str) -> str:
    # "pytorch2burn", "PyTorch_to_Burn" and "pytorch-to-burn" are one spelling
    return word.strip().lower().replace("_", "-").replace("2", "-to-").replace("--", "-")


def closest(word: str, candidates: Iterable[str], *, cutoff: float = 0.6) -> str | None:
    """The candidate ``word`` most likely misspells ("Did you mean"), or None.

    Example:
        >>> closest("pytorch2burn", ["pytorch-to-burn", "burn-to-pytorch", "half"])
        'pytorch-to-burn'
    """
    import difflib

    by_normal = {_normal(c): c for c in candidates}
    found = difflib.get_close_matches(_normal(word), list(by_normal), n=1, cutoff=cutoff)
    return by_normal[found[0]] if found else None


def hint_of(exc: CkptError) -> str | Note | None:
    """The hint ``exc`` carries, typed (``errors.py`` carries it as data: it imports nothing)."""
    hint = exc.hint
    if hint is None or isinstance(hint, str | Note):
        return hint
    return str(hint)

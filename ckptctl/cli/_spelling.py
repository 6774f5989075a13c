"""How the command line spells the library's suggestions (``ckptctl.fix``): as its own flags.

An :class:`~ckptctl.fix.Option` names an API parameter (``state_key``, ``remap``,
``allow_globals``); this module finds the click option of the command that takes it and writes
that option's long flag with the value shell-quoted (``--state-key model``,
``--remap '^fc\\.=fc1.'``). A :class:`~ckptctl.fix.Command` becomes a whole command line
(``ckptctl convert in.pt out.safetensors --state-key model``); without a name it is options for
the command being run.
"""

from __future__ import annotations

import shlex
from contextvars import ContextVar
from typing import TYPE_CHECKING

from ckptctl.cli import _root
from ckptctl.fix import Command, Option

if TYPE_CHECKING:
    import click

    from ckptctl.fix import Fix

#: API parameter names whose click parameter is called otherwise.
API_TO_PARAM = {
    "remap": "rules",
    "max_output_bytes": "max_output_size",
    "max_shard_bytes": "max_shard_size",
    "shards": "share",
    "max_compare_bytes": "max_compare_size",
}

#: The subcommand being run (what a ``Command`` without a name refers to).
CURRENT: ContextVar[str | None] = ContextVar("CURRENT", default=None)


def flag(command: click.Command | None, option: str) -> str | None:
    """The long flag of ``command`` that sets the API parameter ``option``, or None."""
    wanted = API_TO_PARAM.get(option, option)
    for param in getattr(command, "params", ()):
        if param.name == wanted and param.param_type_name == "option":
            longs = [o for o in param.opts if o.startswith("--")]
            return str(longs[0] if longs else param.opts[0])
    return None


def flag_of(name: str | None, option: str, *, strict: bool) -> str:
    """The flag for ``option`` in command ``name``.

    Without ``strict`` an option that command lacks takes another command's flag: the Tensor
    Loading Summary's ``remap`` fixes shown by ``verify --expect`` are ``convert``'s.

    Raises:
        LookupError: no command (with ``strict``: not that command) has the option; a
            suggestion must run as printed.
    """
    names = [name] if name else []
    if not strict:
        names += [n for n in _root.commands() if n != name]
    for candidate in names:
        found = flag(_root.root().get_command(None, candidate), option)  # type: ignore[arg-type]  # LazyGroup needs no context
        if found is not None:
            return found
    raise LookupError(f"ckptctl {name or ''} has no option for {option!r}")


def spell_cli(fix: Fix) -> str:
    """``fix`` as a command line (or the options of one), ready to paste into a shell."""
    if isinstance(fix, Option):
        fix = Command(options=(fix,))
    name = fix.name or CURRENT.get()
    parts = ["ckptctl", fix.name, *(shlex.quote(a) for a in fix.args)] if fix.name else []
    for option in fix.options:
        spelled = flag_of(name, option.name, strict=fix.name is not None)
        parts.append(spelled if option.value is None else f"{spelled} {shlex.quote(option.value)}")
    return " ".join(parts)

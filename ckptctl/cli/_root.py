"""The root command group, as the modules below ``ckptctl.cli`` reach it.

``ckptctl.cli`` registers its group and command table here when it is imported, which importing
any ``ckptctl.cli.*`` module always does first; modules that need the command tree (flag
spelling, manual pages, ``man``) ask this module and never import the package (no import circle).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    import click

_ROOT: list[tuple[click.Group, Mapping[str, tuple[str, str]]]] = []


def register(group: click.Group, commands: Mapping[str, tuple[str, str]]) -> None:
    """Set the root group and its table: command name -> (module, short help)."""
    _ROOT[:] = [(group, commands)]


def root() -> click.Group:
    """The ``ckptctl`` group."""
    return _ROOT[0][0]


def commands() -> Mapping[str, tuple[str, str]]:
    """Command name -> (module, short help), in ``--help`` order."""
    return _ROOT[0][1]

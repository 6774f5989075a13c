"""Every check of ``verify``, collected from the modules of this package.

Each public module (name without a leading ``_``) defines its check as ``CHECK``
(:class:`~ckptctl.ops.verify._check.Check`): a new check is one new module, and nothing else
lists it. ``tests/ops/verify/test_registry.py`` holds the rules a module must keep.
"""

from __future__ import annotations

import importlib
import os
import pkgutil

from ckptctl.ops.verify._check import Check

_PACKAGE = __name__.rpartition(".")[0]


def _collect() -> tuple[Check, ...]:
    """The ``CHECK`` of every public module of the package, in ``order``."""
    found: list[Check] = []
    for info in pkgutil.iter_modules([os.path.dirname(__file__)]):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{_PACKAGE}.{info.name}")
        check = getattr(module, "CHECK", None)
        if not isinstance(check, Check):
            raise TypeError(f"{module.__name__} defines no CHECK (a verify check module must)")
        found.append(check)
    found.sort(key=lambda c: c.order)
    for what in ("name", "order"):
        values = [getattr(c, what) for c in found]
        if len(set(values)) != len(values):
            raise ValueError(f"two verify checks share a {what}: {values}")
    return tuple(found)


#: Every check, in :data:`CHECKS` order.
REGISTRY: tuple[Check, ...] = _collect()
#: Check id -> its check.
BY_NAME: dict[str, Check] = {c.name: c for c in REGISTRY}
#: Every check id, in the order ``--check`` lists them and SARIF numbers its rules.
CHECKS: tuple[str, ...] = tuple(c.name for c in REGISTRY)
#: Checks reported whatever ``checks``/``skip`` say: what a file that cannot be read fails.
ALWAYS_REPORTED: tuple[str, ...] = tuple(c.name for c in REGISTRY if c.unskippable)

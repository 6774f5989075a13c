"""Names a package exports but imports only on first use (a PEP 562 module ``__getattr__``),
so that importing the package (every command imports ``ckptctl`` and the format registry)
does not import what only some commands need."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, MutableMapping


def lazy_attributes(
    package: str, names: Mapping[str, str], namespace: MutableMapping[str, object]
) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: each name in ``names`` (name -> the module
    that defines it) is imported when first looked up and kept in ``namespace`` (the package's
    ``globals()``), so later look-ups are plain attributes.

    Raises (from the returned function):
        AttributeError: ``package`` has no such name.
    """

    def __getattr__(name: str) -> object:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__

"""Importing only what a command uses: names a package exports but imports on first use (a
PEP 562 module ``__getattr__``), and tables keyed by type name, so that importing the package
(every command imports ``ckptctl`` and the format registry) or the table's module (the text
and JSON renderers) does not import what only some commands need."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, MutableMapping

T = TypeVar("T")


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


def for_type(table: Mapping[str, T], value: object) -> T | None:
    """The entry of ``table`` (keyed ``module.QualName``) for ``value``'s type or its nearest
    base that has one, or None: a table that names types instead of importing them."""
    for cls in type(value).__mro__:
        found = table.get(f"{cls.__module__}.{cls.__qualname__}")
        if found is not None:
            return found
    return None

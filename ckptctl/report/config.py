"""What ``verify --show-config`` shows: each setting in force and where it came from (types)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ckptctl.model import JSONValue


@dataclass(frozen=True)
class ConfigSetting:
    """One ``verify`` setting.

    Attributes:
        key: the key, spelled like the long option (``min-tensors``).
        value: the value in force (``allow-global``: a list, or glob -> list).
        source: ``command line``, ``default``, or the configuration file.
        line: the file's line that sets it (None unless ``source`` is the file).
    """

    key: str
    value: JSONValue
    source: str
    line: int | None = None


@dataclass(frozen=True)
class ConfigReport:
    """The configuration file found (None: none), its table, and every setting in order."""

    path: str | None
    table: str | None
    searched_from: str
    settings: tuple[ConfigSetting, ...]

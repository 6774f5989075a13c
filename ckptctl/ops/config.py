"""``verify``'s configuration file: ``[tool.ckptctl.verify]`` or ``.ckptctl.toml`` (issue 28).

Found from a directory (the current one) upwards: in each directory ``.ckptctl.toml`` (table
``[verify]``) first, then ``pyproject.toml`` if it has a ``[tool.ckptctl.verify]`` table; the
first found is the one used. Keys are spelled like ``verify``'s long options:

.. code-block:: toml

    [tool.ckptctl.verify]
    check = ["readable", "safe-pickle"]      # --check (repeatable)
    skip = ["flat-reader"]                   # --skip
    min-tensors = 10                         # --min-tensors
    no-nan = true                            # --no-nan
    state-key = "model"                      # --state-key, for every file
    allow-global = ["argparse.Namespace"]    # --allow-global, for every file

    # or per path glob, relative to the configuration file's directory
    # ("*" stays within one path segment, "**" spans any number of them):
    [tool.ckptctl.verify.allow-global]
    "models/legacy/*.pt" = ["argparse.Namespace"]

    [tool.ckptctl.verify.state-key]
    "checkpoints/**/*.pt" = "model"

A file matching several ``allow-global`` globs gets all their globals; a file matching
``state-key`` globs with different keys is refused (exit 2) naming both, and one matching no
``state-key`` glob is read flat.

An unknown key, a wrong type or an unknown check name is a :class:`ConfigError` naming the file
and the line (``tomllib`` gives no line numbers for valid documents, so the line is found by
scanning the text). Options given on the command line override the file, key by key
(``cli/verify.py``).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.errors import CkptError, ExitCode
from ckptctl.fix import closest
from ckptctl.report.config import ConfigReport, ConfigSetting

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from ckptctl.model import JSONValue

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "CONFIG_KEYS",
    "DEFAULTS",
    "SETTINGS",
    "ConfigError",
    "Setting",
    "VerifyConfig",
    "find_config",
    "load_verify_config",
    "settings_in_force",
]

#: Largest configuration file read.
MAX_CONFIG_BYTES = 1 << 20

_PYPROJECT_TABLE = ("tool", "ckptctl", "verify")
_OWN_TABLE = ("verify",)


class ConfigError(CkptError):
    """The configuration file is malformed: bad TOML, an unknown key, a wrong type (exit 2)."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class VerifyConfig:
    """What a configuration file sets for ``verify``.

    Attributes:
        path: the file, None when none was found.
        table: the table read (``[tool.ckptctl.verify]`` or ``[verify]``).
        values: key -> value, only the keys the file sets (``allow-global`` as given: a list,
            or a mapping of glob -> list).
        lines: key -> the line that sets it.
    """

    path: str | None = None
    table: str | None = None
    values: Mapping[str, JSONValue] = field(default_factory=dict)
    lines: Mapping[str, int] = field(default_factory=dict)

    @property
    def root(self) -> str | None:
        """The directory path globs are relative to (the file's)."""
        return None if self.path is None else os.path.dirname(self.path)


def find_config(start: str | os.PathLike[str] | None = None) -> tuple[str, tuple[str, ...]] | None:
    """The configuration file for ``start`` (default: the current directory) and its table."""
    here = os.path.abspath(os.fspath(start) if start is not None else os.getcwd())
    while True:
        own = os.path.join(here, ".ckptctl.toml")
        if os.path.isfile(own):
            return own, _OWN_TABLE
        pyproject = os.path.join(here, "pyproject.toml")
        if os.path.isfile(pyproject) and _has_table(pyproject):
            return pyproject, _PYPROJECT_TABLE
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _read(path: str) -> tuple[str, dict[str, object]]:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"larger than {MAX_CONFIG_BYTES} bytes", path=path)
    try:
        text = raw.decode("utf-8")
        return text, tomllib.loads(text)
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", path=path) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path=path) from None


def _has_table(pyproject: str) -> bool:
    try:
        with open(pyproject, "rb") as f:
            if b"ckptctl" not in f.read(MAX_CONFIG_BYTES + 1):
                return False  # not ours: never fail on another project's broken file
    except OSError:
        return False
    _, doc = _read(pyproject)
    tool = doc.get("tool")
    return isinstance(tool, dict) and isinstance(tool.get("ckptctl"), dict)


def load_verify_config(start: str | os.PathLike[str] | None = None) -> VerifyConfig:
    """Find and read the ``verify`` configuration (an empty one when there is no file).

    Raises:
        ConfigError: the file is not valid TOML, or sets an unknown key or a wrong type.
    """
    found = find_config(start)
    if found is None:
        return VerifyConfig()
    path, table = found
    text, doc = _read(path)
    # Tables above ours may hold only ours: [tool.ckptctl] is ckptctl's, .ckptctl.toml too.
    node: object = doc
    owner = () if table == _OWN_TABLE else table[:2]
    for depth, part in enumerate(table):
        if not isinstance(node, dict):
            raise ConfigError(
                f"line {_line_of(text, table[:depth], part)}: {part!r} must be a table", path=path
            )
        if depth >= len(owner):
            for key in node:
                if key != part:
                    _unknown(path, text, table[:depth], key, (part,))
        node = node.get(part, {})
    if not isinstance(node, dict):
        raise ConfigError(
            f"line {_line_of(text, table[:-1], table[-1])}: {table[-1]!r} must be a table",
            path=path,
        )
    values: dict[str, JSONValue] = {}
    lines: dict[str, int] = {}
    for key, value in node.items():
        if key not in CONFIG_KEYS:
            _unknown(path, text, table, key, CONFIG_KEYS)
        line = _line_of(text, table, key)
        values[key] = _checked(path, line, key, value)
        lines[key] = line
    return VerifyConfig(path, "[" + ".".join(table) + "]", values, lines)


def _unknown(path: str, text: str, table: tuple[str, ...], key: str, known: Iterable[str]) -> None:
    where = "[" + ".".join(table) + "]" if table else "the top level"
    guess = closest(key, known)
    raise ConfigError(
        f"line {_line_of(text, table, key)}: unknown key {key!r} in {where}",
        path=path,
        hint=(f"did you mean {guess!r}? " if guess else "") + "keys: " + ", ".join(known),
    )


def _checked(path: str, line: int, key: str, value: object) -> JSONValue:
    """``value`` if it has the key's type, else a ConfigError naming the line."""
    return SETTINGS[key].check(path, line, key, value)


def _fail(path: str, line: int, key: str, expected: str) -> ConfigError:
    return ConfigError(f"line {line}: {key!r} must be {expected}", path=path)


def _names(path: str, line: int, key: str, item: object, what: str) -> list[str]:
    if not isinstance(item, list) or not all(isinstance(n, str) for n in item):
        raise _fail(path, line, key, what)
    return list(item)


def _check_names(path: str, line: int, key: str, value: object) -> JSONValue:
    """``check``/``skip``: known check names (``skip`` never names one always reported)."""
    from ckptctl.ops.verify._registry import ALWAYS_REPORTED, CHECKS

    listed = _names(path, line, key, value, "a list of check names")
    allowed = [c for c in CHECKS if key == "check" or c not in ALWAYS_REPORTED]
    for name in listed:
        if name not in allowed:
            guess = closest(name, allowed)
            raise ConfigError(
                f"line {line}: unknown check {name!r} in {key!r}",
                path=path,
                hint=(f"did you mean {guess!r}? " if guess else "")
                + "checks: "
                + ", ".join(allowed),
            )
    return list(listed)


def _globals(path: str, line: int, key: str, value: object) -> JSONValue:
    """``allow-global``: a list of globals, or a table of path glob -> list."""
    if isinstance(value, dict):
        return {
            str(glob): list(_names(path, line, key, v, "a list of MODULE.NAME strings per glob"))
            for glob, v in value.items()
        }
    return list(
        _names(
            path,
            line,
            key,
            value,
            "a list of MODULE.NAME strings, or a table of glob = [MODULE.NAME, ...]",
        )
    )


def _count(path: str, line: int, key: str, value: object) -> JSONValue:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(path, line, key, "a whole number of at least 0")
    return value


def _flag(path: str, line: int, key: str, value: object) -> JSONValue:
    if not isinstance(value, bool):
        raise _fail(path, line, key, "true or false")
    return value


def _dotted_key(path: str, line: int, key: str, value: object) -> JSONValue:
    """``state-key``: a dotted key, or a table of path glob -> dotted key."""
    if isinstance(value, dict):
        for one in value.values():
            if not isinstance(one, str) or not one:
                raise _fail(path, line, key, "a non-empty dotted key (such as 'model') per glob")
        return {str(glob): one for glob, one in value.items()}
    if not isinstance(value, str) or not value:
        raise _fail(
            path,
            line,
            key,
            "a non-empty string (a dotted key such as 'model'), or a table of glob = 'key'",
        )
    return value


@dataclass(frozen=True)
class Setting:
    """One key of the ``verify`` table.

    Attributes:
        param: the parameter of ``verify``'s option for it (``cli/verify.py``), whose value
            given on the command line replaces the file's.
        default: its value when neither the command line nor a file sets it.
        check: ``(path, line, key, value) -> value``, raising a ConfigError for a wrong type.
    """

    param: str
    default: JSONValue
    check: Callable[[str, int, str, object], JSONValue]


#: Every key of the ``verify`` table, in the order ``--show-config`` prints them: a new
#: setting is one entry here (and its option in ``cli/verify.py``).
SETTINGS: dict[str, Setting] = {
    "check": Setting("checks", [], _check_names),
    "skip": Setting("skip", [], _check_names),
    "allow-global": Setting("allow_globals", [], _globals),
    "min-tensors": Setting("min_tensors", None, _count),
    "no-nan": Setting("no_nan", False, _flag),
    "state-key": Setting("state_key", None, _dotted_key),
}
#: The keys, in the order ``--show-config`` prints them.
CONFIG_KEYS = tuple(SETTINGS)
#: What each key is when neither the command line nor a file sets it.
DEFAULTS: dict[str, JSONValue] = {key: s.default for key, s in SETTINGS.items()}


def settings_in_force(
    config: VerifyConfig, command_line: Mapping[str, JSONValue], searched_from: str
) -> ConfigReport:
    """Every key's value and source: the command line over the file over the default.

    Args:
        config: what the file sets (:func:`load_verify_config`).
        command_line: the keys given as options, with their values.
        searched_from: the directory the search for the file started in.
    """
    settings = []
    for key in CONFIG_KEYS:
        if key in command_line:
            settings.append(ConfigSetting(key, command_line[key], "command line"))
        elif key in config.values and config.path is not None:
            settings.append(
                ConfigSetting(key, config.values[key], config.path, config.lines.get(key))
            )
        else:
            settings.append(ConfigSetting(key, DEFAULTS[key], "default"))
    return ConfigReport(config.path, config.table, searched_from, tuple(settings))


# --- locating a key in the text ---------------------------------------------------------------

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]*?)\s*\]\]?\s*(#.*)?$")


def _split_key(dotted: str) -> tuple[str, ...]:
    """``tool . "ckptctl".verify`` -> ``("tool", "ckptctl", "verify")``."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|([A-Za-z0-9_-]+)', dotted)
    return tuple(a or b or c for a, b, c in parts)


def _line_of(text: str, table: tuple[str, ...], key: str) -> int:
    """The line (1-based) where ``key`` is set in ``table``: its ``key = `` line, a
    ``[table.key]`` header, or a dotted ``key.sub = `` line; else the table's header; else 1."""
    current: tuple[str, ...] = ()
    header_line = 1
    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header:
            current = _split_key(header.group(1))
            if current == table:
                header_line = number
            if current == (*table, key):
                return number
            continue
        if "=" not in line:
            continue
        left = _split_key(line.split("=", 1)[0])
        full = current + left
        if full[: len(table) + 1] == (*table, key):
            return number
    return header_line

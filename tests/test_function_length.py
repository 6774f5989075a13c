"""No function in ``ckptctl/`` is longer than 100 lines (issue 47; STYLE.md: "Keep functions
short (< ~60 lines; never > 100)").

A function's length is its lines from ``def`` to its last line, docstring included and
decorators (click's option lists) left out; a nested function counts in its own length and in
its parent's. Functions that are still longer are listed in :data:`ALLOWED` with their length
when the list was made: a ratchet. The test fails when a function not listed passes the limit,
when a listed one grows, and when a listed one is split or gone (then take it off the list).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

MAX_LINES = 100

#: ``path:qualified name`` -> its length when listed. Only shrinks: split these, then remove.
ALLOWED: dict[str, int] = {}


def lengths(source: str) -> dict[str, int]:
    """Qualified name (``Class.method.inner``) -> lines, for every function in ``source``."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                found[name] = (child.end_lineno or child.lineno) - child.lineno + 1
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def too_long() -> dict[str, int]:
    """Every function of ``ckptctl/`` over :data:`MAX_LINES`, by ``path:name``."""
    long: dict[str, int] = {}
    for path in sorted((REPO / "ckptctl").rglob("*.py")):
        where = path.relative_to(REPO).as_posix()
        for name, n in lengths(path.read_text(encoding="utf-8")).items():
            if n > MAX_LINES:
                long[f"{where}:{name}"] = n
    return long


def test_no_function_grows_past_100_lines() -> None:
    found = too_long()
    new = {k: n for k, n in found.items() if k not in ALLOWED}
    grown = {k: (ALLOWED[k], n) for k, n in found.items() if k in ALLOWED and n > ALLOWED[k]}
    assert not new, f"functions over {MAX_LINES} lines (split them): {new}"
    assert not grown, f"listed functions that grew (was, now): {grown}"


def test_the_list_only_names_functions_still_too_long() -> None:
    found = too_long()
    done = sorted(k for k in ALLOWED if k not in found)
    assert not done, f"no longer over {MAX_LINES} lines: take them off ALLOWED: {done}"
    shrunk = {k: (ALLOWED[k], found[k]) for k in ALLOWED if k in found and found[k] < ALLOWED[k]}
    assert not shrunk, f"shrunk: lower their ALLOWED length (was, now): {shrunk}"


def test_the_measure_counts_from_def_to_the_last_line(tmp_path: Path) -> None:
    source = (
        "import click\n"
        "@click.command()\n"
        "@click.option('--x')\n"
        "def f(x):\n"
        "    '''doc'''\n"
        "    def inner():\n"
        "        return 1\n"
        "    return inner()\n"
        "class C:\n"
        "    async def m(self):\n"
        "        pass\n"
    )
    assert lengths(source) == {"f": 5, "f.inner": 2, "C.m": 2}


@pytest.mark.parametrize("key", sorted(ALLOWED))
def test_listed_functions_exist(key: str) -> None:
    path, _, name = key.partition(":")
    assert name in lengths((REPO / path).read_text(encoding="utf-8")), key

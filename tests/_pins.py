"""Which test functions copy the words of a product message (issue 47's metric).

A test *pins a message* when one of its string literals shares five or more consecutive words
with a string literal of ``ckptctl/`` (an f-string counts by its constant parts, each on its
own: a placeholder breaks the run of words). Such a test breaks when the message is reworded,
whatever the behaviour; the wording belongs in golden files (STYLE.md, "Errors: the class and
the facts, not the sentence").

What is counted:

* product side: every ``str`` constant and f-string constant part under ``ckptctl/``, except
  docstrings (they are documentation, not messages);
* test side: every test function (``test_*`` at module level or in a ``Test*`` class) of every
  ``test_*.py`` under ``tests/``, with its decorators (a ``parametrize`` table is part of the
  test) and, transitively, the module-level functions, classes and constants of the same module
  it names (a helper that spells the message for it); its docstring does not count;
* words: runs of ASCII letters, digits and ``_`` (an identifier such as ``weight_ih_l0`` is one
  word), lower-cased, so quoting, escaping (``re.escape``) and line-splitting of a literal do
  not hide a copy; a run of one-character words (``\\t\\n\\v\\f\\r``, a data table) is no copy.

Run ``python -m tests._pins`` for the numbers; ``--list`` names every pinning test and the words
it copies.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: words in a row a test must share with a product literal to count as a copy
RUN_WORDS = 5
_WORD = re.compile(r"\w+", re.ASCII)

Gram = tuple[str, ...]


@dataclass(frozen=True)
class Pin:
    """One test function and the first run of product words it copies (``None``: it copies none)."""

    path: Path
    name: str
    words: Gram | None


def _grams(text: str) -> Iterator[Gram]:
    words = _WORD.findall(text.lower())
    for i in range(len(words) - RUN_WORDS + 1):
        gram = tuple(words[i : i + RUN_WORDS])
        if any(len(word) > 1 for word in gram):
            yield gram


def _docstrings(tree: ast.AST) -> set[int]:
    """The ``id`` of every docstring node in ``tree``."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _literals(nodes: Iterable[ast.AST], skip: set[int]) -> Iterator[str]:
    """Every string constant under ``nodes`` (f-string parts one by one), but those in ``skip``."""
    for top in nodes:
        for node in ast.walk(top):
            is_str = isinstance(node, ast.Constant) and isinstance(node.value, str)
            if is_str and id(node) not in skip:
                yield node.value  # type: ignore[attr-defined]  # is_str: an ast.Constant


def product_grams(root: Path = REPO / "ckptctl") -> set[Gram]:
    """Every run of ``RUN_WORDS`` words in a string literal of the product's modules."""
    grams: set[Gram] = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for text in _literals([tree], _docstrings(tree)):
            grams.update(_grams(text))
    return grams


def _is_test(node: ast.stmt) -> bool:
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")


def _tests(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in tree.body:
        if _is_test(node):
            yield node  # type: ignore[misc]  # _is_test narrowed it
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            yield from (n for n in node.body if _is_test(n))  # type: ignore[misc]  # as above


def _module_names(tree: ast.Module) -> dict[str, ast.stmt]:
    """Module-level functions, classes and assigned names -> their statement."""
    out: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        out[name.id] = node
    return out


@dataclass(frozen=True)
class _Summary:
    """What one statement names, and the first run of product words its own literals copy."""

    names: frozenset[str]
    copied: Gram | None


def _summary(node: ast.AST, skip: set[int], grams: set[Gram]) -> _Summary:
    names = frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
    copies = (g for text in _literals([node], skip) for g in _grams(text) if g in grams)
    return _Summary(names, next(copies, None))


def _copied(
    test: ast.AST, names: dict[str, ast.stmt], summary: Callable[[ast.AST], _Summary]
) -> Gram | None:
    """The first run of product words ``test`` or a module-level definition it names copies."""
    seen = {id(test)}
    todo = [test]
    while todo:
        found = summary(todo.pop(0))
        if found.copied:
            return found.copied
        for name in sorted(found.names & names.keys()):
            if id(names[name]) not in seen:
                seen.add(id(names[name]))
                todo.append(names[name])
    return None


def _file_pins(path: Path, grams: set[Gram]) -> list[Pin]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names, skip = _module_names(tree), _docstrings(tree)
    cache: dict[int, _Summary] = {}

    def summary(node: ast.AST) -> _Summary:
        if id(node) not in cache:
            cache[id(node)] = _summary(node, skip, grams)
        return cache[id(node)]

    return [Pin(path, test.name, _copied(test, names, summary)) for test in _tests(tree)]


def pins(tests: Path = REPO / "tests", grams: set[Gram] | None = None) -> list[Pin]:
    """Every test function under ``tests`` and the product words it copies, if any."""
    grams = product_grams() if grams is None else grams
    return [pin for path in sorted(tests.rglob("test_*.py")) for pin in _file_pins(path, grams)]


def share(found: list[Pin]) -> float:
    """The fraction of ``found`` that copies product words (0 when there is no test)."""
    return sum(p.words is not None for p in found) / len(found) if found else 0.0


def main(argv: list[str]) -> None:
    """Print the share for the whole tree and each folder (``--list``: and every pin)."""
    found = pins(Path(argv[0]) if argv and argv[0] != "--list" else REPO / "tests")
    folders = sorted({p.path.parent for p in found})
    lines: list[str] = []
    for folder in folders:
        part = [p for p in found if p.path.parent == folder]
        pinned = sum(p.words is not None for p in part)
        lines.append(f"{folder.relative_to(REPO)}: {pinned} / {len(part)} ({share(part):.1%})")
    pinned = sum(p.words is not None for p in found)
    lines.append(f"all: {pinned} / {len(found)} ({share(found):.1%})")
    if "--list" in argv:
        lines += [
            f"{p.path.relative_to(REPO)}::{p.name}: {' '.join(p.words)}"
            for p in found
            if p.words is not None
        ]
    sys.stdout.write("".join(f"{line}\n" for line in lines))


if __name__ == "__main__":
    main(sys.argv[1:])

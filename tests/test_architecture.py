"""Imports point one way only (STYLE.md, "Package layout"; ARCHITECTURE.md).

Every module under ``ckptctl/`` is parsed with :mod:`ast` -- nothing is imported -- and every
import it makes of another ``ckptctl`` module is checked against the layer table below: imports at
module level, inside functions, under ``if TYPE_CHECKING:``, relative imports, and modules named
by a string constant (``importlib.import_module("ckptctl.x")``, lazy-import tables).

    cli  ->  ops  ->  adapters  ->  formats  ->  base (model, sources, _io, dtypes, safety, fix,
    _version, errors: which imports nothing of ours)
             ops  ->  report types;  report  ->  base;  only cli (and nothing below it) renders.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

# Under mutation testing (mutmut) the source files hold every mutant of a unit,
# 10-100 times their lines, so parsing them takes 15 s a test, and no mutant changes an import
# (mutmut mutates expressions in function bodies): these tests cannot kill one.
pytestmark = pytest.mark.skipif(
    bool(os.environ.get("MUTANT_UNDER_TEST")), reason="import graph: no mutant changes one"
)

PACKAGE = REPO / "ckptctl"

#: The bottom layer: the data model and what it needs. Imports only itself.
BASE = frozenset(
    {
        "ckptctl.model",
        "ckptctl._io",
        "ckptctl.sources",
        "ckptctl.sources.local",
        "ckptctl.sources.remote",
        "ckptctl.dtypes",
        "ckptctl.errors",
        "ckptctl.safety",
        "ckptctl.fix",
        "ckptctl._version",
        "ckptctl._lazy",
        "ckptctl._ckernels",  # compiled (ckptctl/_ckernels.c, typed by its .pyi stub)
        "ckptctl._gc",
    }
)

#: Report modules that turn reports into text or JSON. ``ops`` must not import them; ``cli`` does.
#: Any ``ckptctl.report`` module whose name starts with ``render`` is a renderer too.
RENDERER_MODULES = frozenset({"ckptctl.report.text", "ckptctl.report.json", "ckptctl.report.sarif"})

#: layer -> the layers its modules may import ("*" = anything). ``report-types`` are the report
#: modules that are not renderers; ``api`` is ``ckptctl/__init__.py``, which imports everything.
ALLOWED: dict[str, frozenset[str]] = {
    "base": frozenset({"base"}),
    "formats": frozenset({"base", "formats"}),
    "adapters": frozenset({"base", "formats", "adapters"}),
    "report-types": frozenset({"base", "report-types"}),
    "renderers": frozenset({"base", "report-types", "renderers"}),
    "ops": frozenset({"base", "formats", "adapters", "report-types", "ops"}),
    "cli": frozenset({"*"}),
    "api": frozenset({"base", "formats", "adapters", "report-types", "renderers", "ops", "api"}),
}


def is_renderer(module: str) -> bool:
    """True for the report modules that render (see ``RENDERER_MODULES``)."""
    if module in RENDERER_MODULES:
        return True
    parts = module.split(".")
    return parts[:2] == ["ckptctl", "report"] and len(parts) > 2 and parts[-1].startswith("render")


def layer_of(module: str) -> str | None:
    """The layer ``module`` belongs to, or None when the table above does not place it."""
    if module in BASE:
        return "base"
    if module == "ckptctl":
        return "api"
    if module == "ckptctl.__main__":
        return "cli"
    top = module.split(".")[1]
    if top == "report":
        return "renderers" if is_renderer(module) else "report-types"
    if top in ("formats", "adapters", "ops", "cli"):
        return top
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
PACKAGES = {module_name(p) for p in PACKAGE.rglob("__init__.py")}
#: Compiled modules, known by their stubs (``ckptctl/_ckernels.pyi``).
EXTENSIONS = {module_name(p) for p in PACKAGE.rglob("*.pyi")}


@dataclass(frozen=True)
class Import:
    """One import of a ckptctl module: what was written and the module it loads."""

    line: int
    written: str
    target: str


def resolve(name: str) -> str:
    """The ckptctl module ``name`` loads: itself if it is a module, else its longest module prefix
    (``ckptctl.formats.HeaderLayout`` -> ``ckptctl.formats``)."""
    parts = name.split(".")
    while parts and ".".join(parts) not in MODULES.keys() | EXTENSIONS:
        parts.pop()
    return ".".join(parts) or name


def imports_of(module: str, path: Path) -> list[Import]:
    """Every import of a ckptctl module in ``path``, at any depth of the syntax tree."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if module in PACKAGES else module.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(Import(node.lineno, a.name, resolve(a.name)) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                written = f"{source}.{alias.name}" if alias.name != "*" else source
                found.append(Import(node.lineno, written, resolve(written)))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("ckptctl.")
            and node.value in MODULES
            and node.value != module
        ):
            # A module named by a string: importlib.import_module(...) or a lazy-import table.
            found.append(Import(node.lineno, f"{node.value!r} (by name)", node.value))
    return [i for i in found if i.target == "ckptctl" or i.target.startswith("ckptctl.")]


def violations() -> list[str]:
    """Every import that breaks the layer table, as ``path:line: ...`` lines."""
    problems: list[str] = []
    for module, path in MODULES.items():
        layer = layer_of(module)
        where = path.relative_to(REPO)
        if layer is None:
            problems.append(
                f"{where}:1: {module} is in no layer; add it to tests/test_architecture"
            )
            continue
        allowed = ALLOWED[layer]
        if "*" in allowed:
            continue
        for imp in imports_of(module, path):
            target_layer = layer_of(imp.target) or "?"
            if target_layer not in allowed:
                problems.append(
                    f"{where}:{imp.line}: {module} ({layer}) imports {imp.written} "
                    f"({target_layer}); {layer} may import only {', '.join(sorted(allowed))}"
                )
    return problems


def test_imports_point_one_way() -> None:
    problems = violations()
    assert not problems, f"{len(problems)} import(s) against the layering:\n" + "\n".join(problems)


def test_every_module_is_in_a_layer_and_the_walk_sees_them() -> None:
    assert len(MODULES) > 40
    assert {"ckptctl", "ckptctl.model", "ckptctl.cli", "ckptctl.formats.safetensors"} <= set(
        MODULES
    )
    assert "ckptctl.report.text" in MODULES


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Function-level, TYPE_CHECKING, relative and by-name imports are all found."""
    code = (
        "from __future__ import annotations\n"
        "import importlib\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ckptctl.ops.convert import convert\n"
        "def f():\n"
        "    import ckptctl.cli\n"
        "    from ..report import text\n"
        "    from . import _base\n"
        "    return importlib.import_module('ckptctl.report.json')\n"
    )
    path = tmp_path / "x.py"
    path.write_text(code, encoding="utf-8")
    found = {(i.line, i.target) for i in imports_of("ckptctl.formats.x", path)}
    assert found == {
        (5, "ckptctl.ops.convert"),
        (7, "ckptctl.cli"),
        (8, "ckptctl.report.text"),
        (9, "ckptctl.formats._base"),
        (10, "ckptctl.report.json"),
    }
    assert layer_of("ckptctl.report.render_diff") == "renderers"
    assert layer_of("ckptctl.report.model") == "report-types"


def test_architecture_md_names_real_files() -> None:
    """Every file and function ARCHITECTURE.md points at exists."""
    import re

    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    found = set(re.findall(r"`([\w/<>.]+\.py)(?::(\w+)(?:\(\))?)?`", text))
    checked = 0
    for path, symbol in sorted(found):
        if "<" in path:
            continue  # a pattern such as formats/<name>.py
        where = REPO / path if (REPO / path).exists() else REPO / "ckptctl" / path
        assert where.exists(), path
        if symbol:
            source = where.read_text(encoding="utf-8")
            assert re.search(rf"\b(def|class) {symbol}\b|^{symbol}\b", source, re.M), path
        checked += 1
    assert checked >= 8


# --- no import circles; command ops stand side by side (issue 29) ---------------------------


def import_graph() -> dict[str, set[str]]:
    """module -> the ckptctl modules it imports (every kind of import, as above)."""
    return {
        module: {i.target for i in imports_of(module, path) if i.target in MODULES} - {module}
        for module, path in MODULES.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_cycles() -> None:
    """No module reaches itself through imports: each layer, and each package, is one-way."""
    graph = import_graph()
    found = cycles(graph)
    detail = [
        " <-> ".join(c)
        + ": "
        + "; ".join(f"{a} imports {b}" for a in c for b in sorted(graph[a]) if b in c)
        for c in found
    ]
    assert not found, f"{len(found)} import circle(s):\n" + "\n".join(detail)


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": set(), "f": {"f"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"x": {"y"}, "y": set()}) == []


def command_ops() -> set[str]:
    """The ops a command runs: the ``ckptctl.ops`` modules a ``ckptctl/cli/<command>.py``
    imports (``ls`` and ``header`` -> ``ops.inspect``, ``remap`` -> ``ops.convert`` ...)."""
    found: set[str] = set()
    for module, path in MODULES.items():
        if module.startswith("ckptctl.cli.") and not module.rpartition(".")[2].startswith("_"):
            found |= {
                i.target for i in imports_of(module, path) if i.target.startswith("ckptctl.ops.")
            }
    return found


def test_command_ops_import_no_other_command_op() -> None:
    """What several commands share lives below them (``ops/_select.py``, ``ops/summary.py``)."""
    ops = command_ops()
    assert {"ckptctl.ops.inspect", "ckptctl.ops.convert", "ckptctl.ops.diff"} <= ops
    problems = [
        f"{MODULES[m].relative_to(REPO)}:{i.line}: {m} imports {i.written}"
        for m in sorted(ops)
        for i in imports_of(m, MODULES[m])
        if i.target in ops and i.target != m
    ]
    assert not problems, "command ops importing one another:\n" + "\n".join(problems)


def test_errors_imports_nothing_of_ours() -> None:
    """``errors`` is the floor every module raises from: it imports no ckptctl module."""
    assert imports_of("ckptctl.errors", MODULES["ckptctl.errors"]) == []


# --- the map and the format notes (issue #47) -------------------------------------------------

#: Directories whose every module ARCHITECTURE.md must name (by its path below ``ckptctl/``).
MAPPED_DIRS = ("ops", "formats/pytorch")


def test_architecture_md_maps_every_ops_and_pytorch_module() -> None:
    """A ratchet: a new module under ``ops/`` or ``formats/pytorch/`` gets its line in the map."""
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w/]+\.py)`", text))
    modules = sorted(
        p.relative_to(PACKAGE).as_posix() for d in MAPPED_DIRS for p in (PACKAGE / d).rglob("*.py")
    )
    assert len(modules) > 60
    missing = [m for m in modules if m not in named]
    assert not missing, "ARCHITECTURE.md's module map lacks:\n" + "\n".join(missing)


#: The research notes the code once cited, outside the repository (``../shared/spec/...``), and
#: their numbered sections: the code cites ``docs/formats/<page>.md#<anchor>`` instead.
STALE_CITATION = re.compile(r"shared/spec|\bspec,? (?:§|sections? \d)")

#: A page of this repository's docs, and optionally a heading in it, as the code cites them (not
#: another repository's ``https://.../docs/x.md``).
DOCS_CITATION = re.compile(r"(?<![\w/.-])docs/[\w./-]+\.md(?:#[\w-]+)?")


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation dropped, spaces -> ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link keeps its text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors_of(page: Path) -> set[str]:
    """Every heading anchor of a Markdown page (fenced code skipped; repeats get ``-1``, ``-2``)."""
    seen: dict[str, int] = {}
    anchors = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = re.match(r"#{1,6} (.+)", line)
        if fenced or heading is None:
            continue
        anchor = github_anchor(heading.group(1))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        anchors.add(f"{anchor}-{count}" if count else anchor)
    return anchors


def test_github_anchor_rule() -> None:
    assert github_anchor("Burn 0.19 files") == "burn-019-files"
    assert github_anchor("`ckptctl ls`") == "ckptctl-ls"
    assert github_anchor("What `verify` guarantees, and what it does not") == (
        "what-verify-guarantees-and-what-it-does-not"
    )
    assert github_anchor("See [the page](x.md)") == "see-the-page"


def test_anchors_of_numbers_repeated_headings(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# Peers\n\n```\n# not a heading\n```\n## Peers\n### Zip container\n")
    assert anchors_of(page) == {"peers", "peers-1", "zip-container"}


def test_no_module_cites_the_research_notes() -> None:
    """``../shared/spec`` is not in the repository: cite ``docs/formats/`` instead."""
    stale = [
        f"{path.relative_to(PACKAGE).as_posix()}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if STALE_CITATION.search(line)
    ]
    assert not stale, "citations of the research notes:\n" + "\n".join(stale)


def test_docs_pages_and_anchors_the_code_cites_exist() -> None:
    cited = {
        (match.group(), path.relative_to(REPO).as_posix())
        for path in sorted(PACKAGE.rglob("*.py"))
        for match in DOCS_CITATION.finditer(path.read_text(encoding="utf-8"))
    }
    assert len(cited) >= 30
    broken = []
    for citation, where in sorted(cited):
        page, _, anchor = citation.partition("#")
        if not (REPO / page).is_file():
            broken.append(f"{where}: {citation}: no such page")
        elif anchor and anchor not in anchors_of(REPO / page):
            broken.append(f"{where}: {citation}: no such heading")
    assert not broken, "\n".join(broken)


#: The headings of docs/formats/pytorch.md that code links to (the pickle walker among others).
PYTORCH_ANCHORS = (
    "detection", "zip-container", "pickle", "rebuild-functions", "dtypes", "views",
    "legacy-stream", "tar", "plain-pickles", "whole-models", "torchscript",
    "nested-checkpoints", "safety", "bounds",
)  # fmt: skip


def test_pytorch_page_has_the_headings_code_links_to() -> None:
    anchors = anchors_of(REPO / "docs" / "formats" / "pytorch.md")
    assert set(PYTORCH_ANCHORS) <= anchors, sorted(set(PYTORCH_ANCHORS) - anchors)


def test_links_between_docs_pages_resolve() -> None:
    """Relative links in ``docs/`` name files that exist, and headings those files have."""
    pages = sorted((REPO / "docs").rglob("*.md"))
    assert len(pages) >= 10
    broken = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            where = (page.parent / path).resolve() if path else page
            if not where.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}: no such file")
            elif anchor and where.suffix == ".md" and anchor not in anchors_of(where):
                broken.append(f"{page.relative_to(REPO)}: {target}: no such heading")
    assert not broken, "\n".join(broken)

"""The docs cover the CLI: help text, man pages and the command reference under docs/commands/
(generated, never stale), the README tutorial and the reference pages under docs/ (every console
example run, links resolve), CHANGELOG form."""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys

import click
import pytest

from ckptctl.cli import COMMANDS, cli
from tests.conftest import REPO

DOCS = REPO / "docs"
COMMAND_PAGES = DOCS / "commands"
#: The README tutorial stays short; the reference lives under docs/ (#47).
README_MAX_LINES = 600


def _load_generator():
    spec = importlib.util.spec_from_file_location("man_generate", REPO / "man" / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["man_generate"] = module
    spec.loader.exec_module(module)
    return module


def _commands() -> dict[str, click.Command]:
    ctx = click.Context(cli, info_name="ckptctl")
    out = {}
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        if command is not None:
            out[name] = command
    return out


def _options(command: click.Command) -> list[str]:
    names: list[str] = []
    for param in command.params:
        if isinstance(param, click.Option):
            names.extend(o for o in param.opts if o.startswith("--"))
    return names


def test_man_pages_are_current():
    generator = _load_generator()
    pages = generator.render_pages()
    on_disk = {p.name for p in (REPO / "man").glob("*.1")}
    assert on_disk == set(pages), "run: python man/generate.py"
    for name, text in pages.items():
        assert (REPO / "man" / name).read_text(encoding="utf-8") == text, (
            f"man/{name} is stale; run: python man/generate.py"
        )


def test_command_reference_is_current():
    """docs/commands/ holds one page per command, written from the click definitions."""
    generator = _load_generator()
    pages = generator.render_markdown_pages()
    on_disk = {p.name for p in COMMAND_PAGES.glob("*.md")}
    assert on_disk == set(pages), "run: python man/generate.py"
    assert set(pages) == {"index.md"} | {f"{name}.md" for name in _commands()}
    for name, text in pages.items():
        assert (COMMAND_PAGES / name).read_text(encoding="utf-8") == text, (
            f"docs/commands/{name} is stale; run: python man/generate.py"
        )


@pytest.mark.parametrize("name", list(_commands()))
def test_command_is_documented(name, run_cli):
    command = _commands()[name]
    assert command.help, f"{name} has no help text"
    result = run_cli(name, "--help")
    assert result.code == 0
    page = (REPO / "man" / f"ckptctl-{name}.1").read_text(encoding="utf-8")
    reference = (COMMAND_PAGES / f"{name}.md").read_text(encoding="utf-8")
    guide = (DOCS / "guide.md").read_text(encoding="utf-8")
    assert f"\n## ckptctl {name}\n" in guide, f"docs/guide.md has no section for {name}"
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "EXAMPLES"):
        assert f".SH {section}" in page, (name, section)
    for section in ("Options", "Exit status", "Examples"):
        assert f"\n## {section}\n" in reference, (name, section)
    for option in _options(command):
        assert option in result.stdout, (name, option)
        assert option.replace("-", "\\-") in page, (name, option)
        assert re.search(rf"`[^`]*{re.escape(option)}\b", reference), (
            f"docs/commands/{name}.md does not list {option}"
        )
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{name} {param.opts} has no help text"


def test_exit_codes_page_lists_every_exit_status():
    """docs/exit-codes.md (hand-written) has the codes the generated pages list."""
    from ckptctl.cli._manpage import EXIT_STATUS

    text = (DOCS / "exit-codes.md").read_text(encoding="utf-8")
    assert re.findall(r"^\| (\d+) \|", text, re.M) == [code for code, _ in EXIT_STATUS]


def test_changelog_has_unreleased_section():
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in text
    assert "Keep a Changelog" in text


def test_readme_test_command_is_what_ci_runs():
    """Each test command of the README (the suite in parallel, the bounded tier serially) is a
    pytest run of .ci/run: the same options at the end, CI's own (no cache) before them."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    documented = [
        shlex.split(m) for m in re.findall(r"\.venv/bin/python -m pytest -q([^`\n]*)", readme)
    ]
    runs = [
        shlex.split(line.partition("python -m pytest -q")[2])
        for line in ci.splitlines()
        if "python -m pytest -q" in line and not line.lstrip().startswith("#")
    ]
    assert ["-n", "auto", "-m", "not bounded"] in documented
    assert ["-m", "bounded", "-p", "no:xdist"] in documented
    for args in documented:
        assert any(run[len(run) - len(args) :] == args for run in runs), args


def _examples() -> list[tuple[str, str, int]]:
    """(command, example line, expected exit code) from every command's ``Examples:`` block."""
    out = []
    for name, command in _commands().items():
        block = (command.help or "").partition("Examples:")[2]
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.strip()
            if not line.startswith("ckptctl "):
                continue
            code = 0
            match = re.search(r"#\s*exit (\d+)", line)
            if match:
                code = int(match.group(1))
            out.append((name, line, code))
    return out


#: The file names --help examples use (what a user has), and the fixture each one stands for.
EXAMPLE_FILES = {
    "model.safetensors": "valid/safetensors/tiny.safetensors",
    "model.manifest": "valid/safetensors/tiny.manifest",
    "encoder.pt": "valid/burn_modules/encoder_pre.pt",
    "checkpoint.pt": "valid/pytorch/nested.pt",
    "whole_model.pt": "valid/pytorch/module.pt",
    "weights.pt": "valid/pytorch/min_zip.pt",
    "legacy.pt": "valid/pytorch/min_legacy.pt",
    "lightning.ckpt": "valid/pytorch/lightning.ckpt",
    "model.bpk": "valid/burnpack/net.bpk",
    "trained.bpk": "valid/optim/model.bpk",
    "optim.bpk": "valid/optim/optim.bpk",
    "model-10.mpk": "valid/burn-records/model.mpk",
    "optim-10.mpk": "valid/burn-records/optim-adam.mpk",
    "models/weights.pt": "valid/pytorch/min_zip.pt",
    "models/v1/model.safetensors": "valid/safetensors/tiny.safetensors",
    "args.pt": "valid/trust/argparse_namespace.pt",
    "bert.safetensors": "valid/ports/bert.safetensors",
    "burn_bert.bpk": "valid/ports/bert_target.bpk",
    "roberta.safetensors": "valid/ports/roberta.safetensors",
    "burn_roberta.bpk": "valid/ports/roberta_target.bpk",
    "llama.safetensors": "valid/ports/llama.safetensors",
    "burn_llama.bpk": "valid/ports/llama_target.bpk",
    "checkpoint/step-1000": "valid/distributed/fsdp2",  # a DCP directory
    "model-gptq.safetensors": "valid/quantized/gptq-4bit.safetensors",
    "ckpt": "valid/deepspeed/zero2_bf16_2rank",  # a DeepSpeed save: a folder
    "llama-q4_k_m.gguf": "valid/gguf/tiny_llama.gguf",
}


def test_help_examples_name_files_a_user_has():
    for _, line, _ in _examples():
        assert "fixtures/" not in line, line


@pytest.mark.parametrize(("name", "line", "code"), _examples())
def test_help_examples_run(name, line, code, run_cli, tmp_path, monkeypatch):
    """Every example in --help and the man pages is real: it runs on the bundled fixtures,
    copied under the names the examples use."""
    import shlex
    import shutil

    for example, fixture in EXAMPLE_FILES.items():
        (tmp_path / example).parent.mkdir(parents=True, exist_ok=True)
        if (REPO / "fixtures" / fixture).is_dir():
            shutil.copytree(REPO / "fixtures" / fixture, tmp_path / example)
        else:
            shutil.copy(REPO / "fixtures" / fixture, tmp_path / example)
    monkeypatch.chdir(tmp_path)
    args = shlex.split(line, comments=True)
    assert args[0] == "ckptctl"
    assert args[1] == name
    result = run_cli(*args[1:])
    assert result.code == code, (line, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr


def test_every_command_has_examples():
    names = {name for name, _, _ in _examples()}
    assert names == set(_commands())


_CONSOLE = re.compile(r"```console\n(.*?)```", re.S)


def _run_console_block(block: str, run_cli, cwd) -> str:
    """Run every ``$ ckptctl ...`` line of a README console block; return the block rebuilt."""
    import shlex

    out = []
    for line in block.splitlines():
        if line.startswith("$ ckptctl "):
            result = run_cli(*shlex.split(line[2:], comments=True)[1:])
            text = result.stdout + result.stderr
            out.append(line)
            out.extend(t.rstrip() for t in text.rstrip("\n").splitlines())
    return "\n".join(out) + "\n"


def _written_pages() -> list[str]:
    """README.md and every hand-written page under docs/ (the generated command pages aside)."""
    pages = sorted(p for p in DOCS.rglob("*.md") if p.parent != COMMAND_PAGES)
    return ["README.md", *(str(p.relative_to(REPO)) for p in pages)]


@pytest.mark.parametrize("page", _written_pages())
def test_console_examples_show_real_output(page, run_cli, tmp_path, monkeypatch, update_golden):
    """Every console example of the README and the docs is run (a page's blocks in order, in one
    directory); its output must be what the page shows (``--update-golden`` rewrites it)."""
    (tmp_path / "fixtures").symlink_to(REPO / "fixtures")
    monkeypatch.chdir(tmp_path)
    path = REPO / page
    text = path.read_text(encoding="utf-8")
    rebuilt = text
    for block in _CONSOLE.findall(text):
        fresh = _run_console_block(block, run_cli, tmp_path)
        if update_golden:
            rebuilt = rebuilt.replace(f"```console\n{block}```", f"```console\n{fresh}```", 1)
        else:
            assert fresh == block, f"{page}: a console example shows other output"
    if update_golden and rebuilt != text:
        path.write_text(rebuilt, encoding="utf-8")


def _commands_shown(text: str) -> set[str]:
    blocks = _CONSOLE.findall(text)
    return {line.split()[2] for b in blocks for line in b.splitlines() if line.startswith("$ ")}


def test_every_command_has_a_console_example():
    """Each command is shown with its real output somewhere under docs/, and the README walks
    through its journeys with real output too."""
    shown: set[str] = set()
    for page in _written_pages()[1:]:
        shown |= _commands_shown((REPO / page).read_text(encoding="utf-8"))
    assert shown == set(_commands())
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(_CONSOLE.findall(readme)) >= 3
    assert {"convert", "verify"} <= _commands_shown(readme)


def test_readme_is_a_short_tutorial():
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move reference text to docs/"


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path) -> set[str]:
    text = _CODE_BLOCK.sub("", path.read_text(encoding="utf-8"))
    return {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


_CODE_BLOCK = re.compile(r"^```.*?^```", re.S | re.M)


def _links(path) -> list[tuple[str, str]]:
    text = _CODE_BLOCK.sub("", path.read_text(encoding="utf-8"))
    out = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        out.append((file, anchor))
    return out


@pytest.mark.parametrize(
    "page",
    [*_written_pages(), *sorted(str(p.relative_to(REPO)) for p in COMMAND_PAGES.glob("*.md"))],
)
def test_doc_links_resolve(page):
    """Every relative link of the README and the docs names a file that exists, and a heading
    in it when it has an anchor."""
    path = REPO / page
    for file, anchor in _links(path):
        target = (path.parent / file).resolve() if file else path
        if not target.exists() and target.parent == DOCS / "formats" and not target.parent.exists():
            continue  # the per-format pages of #47, written on another branch
        assert target.exists(), f"{page} links to {file}, which does not exist"
        if anchor and target.suffix == ".md":
            assert anchor in _anchors(target), f"{page} links to {file}#{anchor}: no such heading"


def test_changelog_is_one_line_per_change() -> None:
    """CHANGELOG.md keeps one line per user-visible change: under every `###` heading each line is
    a single `- ` bullet (nothing continues one onto the next line), the headings are Keep a
    Changelog's sections, each once per release, and [Unreleased] bullets end with their issue."""
    keep_a_changelog = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    issue_at_end = re.compile(r"\(#\d+(?:, #\d+)*\)$")
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    problems: list[str] = []
    release, section, seen = "", "", set[str]()
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("## "):
            release, section, seen = line, "", set()
        elif line.startswith("### "):
            section = line.removeprefix("### ")
            if section not in keep_a_changelog or section in seen:
                problems.append(
                    f"line {number}: section {section!r} (one of each Keep a Changelog's)"
                )
            seen.add(section)
        elif re.match(r"\[[^\]]+\]: ", line):
            section = ""
        elif section and line.strip():
            if not line.startswith("- "):
                problems.append(f"line {number}: continues a bullet; write one line per change")
            elif release == "## [Unreleased]" and not issue_at_end.search(line):
                problems.append(f"line {number}: no issue reference such as (#44) at its end")
    assert not problems, "\n".join(problems)

"""The command reference under ``docs/commands/``, rendered from the click command tree.

Like the manual pages (:mod:`ckptctl.cli._manpage`, whose walk and help parsing this reuses):
one Markdown page per command (usage, description, every option with its help, exit status,
the ``Examples:`` block) and ``index.md`` for ``ckptctl`` itself. ``man/generate.py`` writes
both kinds; ``tests/test_docs.py`` fails while a committed page differs from what it writes.
"""

from __future__ import annotations

import re

import click

from ckptctl.cli._manpage import EXIT_STATUS, command_tree, option_rows, split_help

#: The first line of every generated page.
GENERATED = (
    "<!-- Generated from the click definitions by `python man/generate.py`: do not edit. -->"
)

#: Hand-written pages a command page points to (relative to ``docs/commands/``).
GUIDE = "../guide.md"
EXIT_CODES = "../exit-codes.md"
JSON = "../json.md"

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|])")


def _md(text: str) -> str:
    """Help text as Markdown that renders as the same characters (``__globals__``, ``*.pt``)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def page_file(title: str) -> str:
    """``verify.md`` for ``ckptctl-verify``, ``index.md`` for ``ckptctl``."""
    return "index.md" if title == "ckptctl" else title.removeprefix("ckptctl-") + ".md"


def _commands_table() -> list[str]:
    out = ["## Commands", "", "| command | what it does |", "| --- | --- |"]
    for source in command_tree()[1:]:
        name, title, summary = source[0], source[1], source[2]
        out.append(f"| [`{name}`]({page_file(title)}) | {_md(summary)}. |")
    return [*out, ""]


def _see_also(title: str) -> list[str]:
    sub = title.removeprefix("ckptctl-")
    man_command = "ckptctl man" if title == "ckptctl" else f"ckptctl man {sub}"
    guide = GUIDE if title == "ckptctl" else f"{GUIDE}#ckptctl-{sub}"
    links = [f"`man {title}` (or `{man_command}`)", f"[the command guide]({guide})"]
    if title != "ckptctl":
        links.append("[all commands](index.md)")
    links += [f"[JSON output]({JSON})", f"[exit codes]({EXIT_CODES})"]
    return ["## See also", "", ", ".join(links), ""]


def _indent_continuations(lines: list[str]) -> list[str]:
    """Example lines with the continuation of a ``\\``-ended line indented, as a shell user
    writes it."""
    return [
        ("    " + line) if i and lines[i - 1].endswith("\\") else line
        for i, line in enumerate(lines)
    ]


def _page(name: str, title: str, summary: str, command: click.Command, ctx: click.Context) -> str:
    paragraphs, examples = split_help(command.help or "")
    usage = " ".join(command.collect_usage_pieces(ctx))
    out = [GENERATED, "", f"# {name}", "", f"{_md(summary[:1].upper() + summary[1:])}.", ""]
    out += ["```text", f"{name} {usage}", "```", ""]
    for paragraph in paragraphs:
        out += [_md(paragraph), ""]
    if isinstance(command, click.Group):
        out += _commands_table()
    out += ["## Options", ""]
    out += [f"- `{flags}`: {_md(help_text)}" for flags, help_text in option_rows(command, ctx)]
    out += ["", "## Exit status", "", "| code | meaning |", "| --- | --- |"]
    out += [f"| {code} | {_md(meaning)} |" for code, meaning in EXIT_STATUS]
    out.append("")
    if examples:
        out += ["## Examples", "", "```sh", *_indent_continuations(examples), "```", ""]
    out += _see_also(title)
    return "\n".join(out)


def render_markdown_pages() -> dict[str, str]:
    """Every page's file name (in ``docs/commands/``) and Markdown text, as generated now."""
    pages: dict[str, str] = {}
    for source in command_tree():
        pages[page_file(source[1])] = _page(*source)
    return pages

"""The manual pages, rendered from the click command tree.

``man/generate.py`` writes them into ``man/`` (committed; a regular ``pip install`` puts them
under ``share/man/man1``), and ``ckptctl man COMMAND`` renders the same page from the installed
package, so it works in an editable install too, where no ``share/man`` exists. Sections: NAME,
SYNOPSIS, DESCRIPTION, OPTIONS, EXIT STATUS, EXAMPLES (the ``Examples:`` block of each help).
"""

from __future__ import annotations

import re

import click

from ckptctl._version import __version__
from ckptctl.cli import _root

DATE = "2026"

EXIT_STATUS = [
    ("0", "Success; for diff: identical; for verify: every check passed."),
    (
        "1",
        "verify found a problem, diff found differences, or convert --target found missing, "
        "ambiguous (unproven) or mismatched tensors.",
    ),
    ("2", "Usage error: bad option, unknown tensor or adapter name, bad rule."),
    ("3", "Input unreadable, corrupt, unsafe, or not a checkpoint."),
    ("4", "Valid input that uses a feature ckptctl does not support."),
    ("5", "Output cannot be written: exists without --force, is the input, disk full."),
    ("70", "Internal error: a bug in ckptctl (--debug shows the traceback)."),
    ("130", "Interrupted."),
]


def _esc(text: str) -> str:
    """Escape text for roff: backslashes, leading dots and quotes, hyphens in options."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    lines = []
    for line in text.split("\n"):
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def split_help(help_text: str) -> tuple[list[str], list[str]]:
    """Split a command's help into description paragraphs and example lines."""
    body, _, examples = help_text.partition("Examples:")
    paragraphs = [
        " ".join(line.strip() for line in p.strip().splitlines() if line.strip() != "\b")
        for p in body.split("\n\n")
    ]
    paragraphs = [p for p in paragraphs if p]
    example_lines = [line.strip() for line in examples.splitlines() if line.strip()]
    return paragraphs, example_lines


def option_rows(command: click.Command, ctx: click.Context) -> list[tuple[str, str]]:
    """(flags, help) of each documented option, as ``--help`` lists them."""
    rows = []
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option):
            continue
        record = param.get_help_record(ctx)
        if record is not None:
            rows.append(record)
    return rows


def _page(name: str, title: str, summary: str, command: click.Command, ctx: click.Context) -> str:
    paragraphs, examples = split_help(command.help or "")
    usage = " ".join(command.collect_usage_pieces(ctx))
    out = [
        f'.TH "{title.upper()}" "1" "{DATE}" "ckptctl {__version__}" "ckptctl manual"',
        ".SH NAME",
        f"{_esc(title)} \\- {_esc(summary)}",
        ".SH SYNOPSIS",
        f".B {_esc(name)}\n{_esc(usage)}",
        ".SH DESCRIPTION",
    ]
    for paragraph in paragraphs:
        out += [".PP", _esc(paragraph)]
    existing = _root.root().list_commands(ctx)
    if isinstance(command, click.Group):
        out.append(".SH COMMANDS")
        for sub in existing:
            sub_help = _root.commands()[sub][1]
            out += [".TP", f".B {_esc(sub)}", f"{_esc(sub_help)} See \\fBckptctl\\-{sub}\\fR(1)."]
    out.append(".SH OPTIONS")
    for flags, help_text in option_rows(command, ctx):
        out += [".TP", f".B {_esc(flags)}", _esc(help_text)]
    out.append(".SH EXIT STATUS")
    for code, meaning in EXIT_STATUS:
        out += [".TP", f".B {code}", _esc(meaning)]
    if examples:
        out += [
            ".SH EXAMPLES",
            ".PP",
            "The files named below are the fixtures of a ckptctl source checkout; the test suite "
            "runs every example.",
        ]
        for line in examples:
            out += [".PP", f".nf\n{_esc(line)}\n.fi"]
    out += [".SH SEE ALSO"]
    others = [f"\\fBckptctl\\-{s}\\fR(1)" for s in existing if f"ckptctl-{s}" != title]
    if title != "ckptctl":
        others.insert(0, "\\fBckptctl\\fR(1)")
    out.append(", ".join(others))
    return "\n".join(out) + "\n"


#: One page of the command tree: (name, title, summary, command, context).
PageSource = tuple[str, str, str, click.Command, click.Context]


def command_tree() -> list[PageSource]:
    """``ckptctl`` and each of its commands in ``--help`` order, with the context to render them
    in: what the manual pages and the generated command reference (``docs/commands/``) walk."""
    root_ctx = click.Context(_root.root(), info_name="ckptctl", **_root.root().context_settings)
    summary = "inspect, verify and convert deep-learning checkpoints"
    out: list[PageSource] = [("ckptctl", "ckptctl", summary, _root.root(), root_ctx)]
    for sub, (_, sub_summary) in _root.commands().items():
        command = _root.root().get_command(root_ctx, sub)
        if command is None:
            continue
        ctx = click.Context(command, info_name=f"ckptctl {sub}", parent=root_ctx)
        out.append((f"ckptctl {sub}", f"ckptctl-{sub}", sub_summary.rstrip("."), command, ctx))
    return out


def render_pages() -> dict[str, str]:
    """Every page's file name and roff text, as this script would write them now."""
    return {f"{source[1]}.1": _page(*source) for source in command_tree()}


def page_name(command: str | None) -> str:
    """``ckptctl-verify.1`` for ``verify``, ``ckptctl.1`` for None (or ``ckptctl``)."""
    if command in (None, "ckptctl"):
        return "ckptctl.1"
    return f"ckptctl-{command}.1"


#: Where man(1) puts a page's text: section bodies, and a ``.TP`` paragraph's body.
TEXT_INDENT = 7
TAG_INDENT = 14
_ROFF_ESCAPE = re.compile(r"\\(e|-|&|f[BRIP])")


def _unescape(text: str) -> str:
    return _ROFF_ESCAPE.sub(lambda m: {"e": "\\", "-": "-"}.get(m.group(1), ""), text)


class _TextPage:
    """Fills the paragraphs of a page written by :func:`_page` (our subset of man(7)), as
    man(1) lays it out when its output is not a terminal."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.lines: list[str] = []
        self.words: list[str] = []
        self.tag: str | None = None
        self.indent = TEXT_INDENT

    def flush(self) -> None:
        import textwrap

        text = " ".join(self.words)
        self.words = []
        if self.tag is not None:
            tag, self.tag = self.tag, None
            lead = " " * TEXT_INDENT + tag
            if len(lead) < TAG_INDENT - 1 and text:  # short tags share the body's first line
                text = lead.ljust(TAG_INDENT) + text
            else:
                self.lines.append(lead)
        if text:
            self.lines += textwrap.wrap(
                text,
                self.width,
                initial_indent="" if text.startswith(" ") else " " * self.indent,
                subsequent_indent=" " * self.indent,
                break_long_words=False,
                break_on_hyphens=False,
            )

    def section(self, title: str) -> None:
        self.flush()
        if self.lines:
            self.lines.append("")
        self.lines.append(title)
        self.indent = TEXT_INDENT

    def paragraph(self, *, tagged: bool) -> None:
        self.flush()
        if self.lines and self.lines[-1].startswith(" "):  # not right under a heading
            self.lines.append("")
        self.indent = TAG_INDENT if tagged else TEXT_INDENT
        self.tag = "" if tagged else None


def to_text(page: str, width: int = 80) -> str:
    """A page written by :func:`_page` as plain text, the way man(1) formats it for a pipe:
    sections flush left, text filled to ``width`` at words, examples kept as written."""
    out = _TextPage(width)
    verbatim = False
    for raw in page.splitlines():
        request, _, rest = raw.partition(" ")
        if verbatim:
            if raw == ".fi":
                verbatim = False
            else:
                out.lines.append(" " * TEXT_INDENT + _unescape(raw))
        elif request == ".TH":
            title = rest.split('"')[1] if '"' in rest else rest
            out.lines.append(f"{title}(1)")
        elif request == ".SH":
            out.section(_unescape(rest))
        elif request in (".PP", ".TP"):
            out.paragraph(tagged=request == ".TP")
        elif request == ".nf":
            out.flush()
            verbatim = True
        elif request == ".B" and out.tag == "":
            out.tag = _unescape(rest)
        else:
            text = _unescape(rest if request == ".B" else raw)
            out.words += text.split()
    out.flush()
    return "\n".join(out.lines) + "\n"

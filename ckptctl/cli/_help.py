"""``--help`` laid out as click lays it out, but wrapped at spaces only.

click's wrapper breaks a word longer than the line (``T`` / ``ransformerEncoderLayer``) and
breaks at hyphens (``pytorch-to-`` / ``burn``), which turns names, flags and rules a user
copies into something that does not work. Here a line breaks only between words; a word longer
than the line stays whole (the help texts keep their words shorter than an 80-column option
column, which ``tests/cli/test_everyday_round_three.py`` checks).
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import click
from click.formatting import iter_rows, measure_table

if TYPE_CHECKING:
    from collections.abc import Iterable


def wrap_words(text: str, width: int, indent: str = "") -> str:
    """``text``'s paragraphs (split at blank lines) filled to ``width`` behind ``indent``,
    breaking only at spaces; a paragraph that starts with a ``\\b`` line is kept as written,
    as click does."""
    out: list[str] = []
    for extra, verbatim, lines in _paragraphs(text.expandtabs()):
        prefix = indent + " " * extra
        if verbatim:
            out.append("\n".join(prefix + line for line in lines))
            continue
        out.append(
            textwrap.fill(
                " ".join(line.strip() for line in lines),
                width,
                initial_indent=prefix,
                subsequent_indent=prefix,
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    return "\n\n".join(out)


def _paragraphs(text: str) -> list[tuple[int, bool, list[str]]]:
    """(indent of the first line, kept as written, lines) of each paragraph."""
    out: list[tuple[int, bool, list[str]]] = []
    block: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.strip():
            block.append(line)
            continue
        if block:
            first = block[0]
            indent = len(first) - len(first.lstrip())
            if first.strip() == "\b":
                out.append((indent, True, block[1:]))
            else:
                out.append((indent, False, [block[0].lstrip(), *block[1:]]))
            block = []
    return out


class WordWrapFormatter(click.HelpFormatter):
    """click's help formatter with :func:`wrap_words` for every paragraph and option help."""

    def write_text(self, text: str) -> None:
        self.write(wrap_words(text, self.width, " " * self.current_indent))
        self.write("\n")

    def write_dl(
        self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2
    ) -> None:
        rows = list(rows)
        widths = measure_table(rows)
        first_col = min(widths[0], col_max) + col_spacing
        text_width = max(self.width - first_col - 2, 10)
        for first, second in iter_rows(rows, len(widths)):
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            if len(first) <= first_col - col_spacing:
                self.write(" " * (first_col - len(first)))
            else:
                self.write("\n" + " " * (first_col + self.current_indent))
            lines = wrap_words(second, text_width).splitlines() or [""]
            self.write(f"{lines[0]}\n")
            for line in lines[1:]:
                self.write(f"{'':>{first_col + self.current_indent}}{line}\n" if line else "\n")


class HelpContext(click.Context):
    """The context of every ``ckptctl`` command: its help uses :class:`WordWrapFormatter`."""

    formatter_class = WordWrapFormatter

"""Generate the manual pages and the command reference from the click command tree.

Writes ``man/ckptctl.1`` and ``man/ckptctl-<command>.1`` (rendered by ``ckptctl.cli._manpage``;
``ckptctl man COMMAND`` shows the same page from the installed package) and
``docs/commands/index.md`` and ``docs/commands/<command>.md`` (rendered by
``ckptctl.cli._docpages``). Run ``python man/generate.py`` after changing a command;
``tests/test_docs.py`` fails while the committed pages differ from what this script writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ckptctl.cli._docpages import render_markdown_pages
from ckptctl.cli._manpage import render_pages

MAN_DIR = Path(__file__).resolve().parent
COMMANDS_DIR = MAN_DIR.parent / "docs" / "commands"


def _write(directory: Path, pattern: str, pages: dict[str, str]) -> None:
    """Write ``pages`` into ``directory``; remove pages of commands that no longer exist."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob(pattern):
        if old.name not in pages:
            old.unlink()
    for filename, text in pages.items():
        (directory / filename).write_text(text, encoding="utf-8")
    sys.stdout.write(f"wrote {len(pages)} pages to {directory}\n")


def main() -> None:
    _write(MAN_DIR, "*.1", render_pages())
    _write(COMMANDS_DIR, "*.md", render_markdown_pages())


if __name__ == "__main__":
    main()

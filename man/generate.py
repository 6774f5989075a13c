"""Generate ``man/ckptctl.1`` and ``man/ckptctl-<command>.1`` from the click command tree.

Run ``python man/generate.py`` after changing a command; ``tests/test_docs.py`` fails while the
committed pages differ from what this script writes. The pages are rendered by
``ckptctl.cli._manpage`` (``ckptctl man COMMAND`` shows the same page from the installed package).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ckptctl.cli._manpage import render_pages

MAN_DIR = Path(__file__).resolve().parent


def main() -> None:
    """Write the pages into ``man/`` and remove pages of commands that no longer exist."""
    pages = render_pages()
    for old in MAN_DIR.glob("*.1"):
        if old.name not in pages:
            old.unlink()
    for filename, text in pages.items():
        (MAN_DIR / filename).write_text(text, encoding="utf-8")
    sys.stdout.write(f"wrote {len(pages)} pages to {MAN_DIR}\n")


if __name__ == "__main__":
    main()

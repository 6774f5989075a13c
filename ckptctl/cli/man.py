"""``ckptctl man [COMMAND]``: the manual page, from the installed package.

``man ckptctl-verify`` needs the pages under a ``share/man`` that a regular ``pip install``
creates and an editable one (``pip install -e``) does not; this command renders the same page
from the package itself, so it works either way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import click

from ckptctl.errors import ExitCode, SelectionError, quote


@click.command("man")
@click.argument("command", required=False, metavar="[COMMAND]")
@click.option(
    "--roff",
    is_flag=True,
    help="Print the page's roff source (for man -l -, or to install it) instead of showing "
    "the page.",
)
@click.option("--list", "list_pages", is_flag=True, help="List the manual pages there are.")
@click.option(
    "--install",
    "install",
    is_flag=True,
    help="Write every page to PREFIX/share/man/man1, where man(1) finds them for a PREFIX/bin "
    "on PATH: after `pip install -e`, `man ckptctl-verify` works as after `pip install`.",
)
@click.option(
    "--prefix",
    type=click.Path(file_okay=False),
    default=None,
    help="With --install: the installation prefix (default: this Python's, sys.prefix).",
)
def command(
    command: str | None, roff: bool, list_pages: bool, install: bool, prefix: str | None
) -> int:
    """Show the manual page of ckptctl or of one COMMAND.

    The pages come with the installed package, so this works in an editable install
    (pip install -e) too, where `man ckptctl-COMMAND` finds no page. On a terminal the page
    opens in man(1); piped, it is printed as plain text, as man(1) and `git help` do, so
    `ckptctl man verify | grep -- --format` finds the option. --roff prints the page's source
    instead (`ckptctl man verify --roff | man -l -`).

    Examples:

    \b
      ckptctl man verify
      ckptctl man --list
      ckptctl man --install      # then: man ckptctl-verify
      ckptctl man nope           # exit 2: no such command
    """
    from ckptctl.cli import _root
    from ckptctl.cli._manpage import page_name, render_pages

    COMMANDS = _root.commands()  # the package's table, by its name there

    if install:
        from pathlib import Path

        from ckptctl._io import atomic_write

        target = Path(prefix or sys.prefix) / "share" / "man" / "man1"
        target.mkdir(parents=True, exist_ok=True)
        for name, text in render_pages().items():
            with atomic_write(target / name, force=True) as out:
                out.write(text.encode("utf-8"))
        click.echo(f"installed {len(render_pages())} manual pages in {target}")
        return ExitCode.OK
    if list_pages:
        click.echo("ckptctl")
        for name in COMMANDS:
            click.echo(f"ckptctl-{name}")
        return ExitCode.OK
    if command is not None and command not in ("ckptctl", *COMMANDS):
        from ckptctl.fix import closest

        guess = closest(command, COMMANDS)
        raise SelectionError(
            f"no manual page for {quote(command)}: there is no such command"
            + (f"; did you mean {guess!r}?" if guess else ""),
            hint="commands: " + ", ".join(COMMANDS),
        )
    text = render_pages()[page_name(command)]
    man = shutil.which("man")
    if roff:
        click.echo(text, nl=False)
        return ExitCode.OK
    if man is None or not sys.stdout.isatty():
        from ckptctl.cli._manpage import to_text

        click.echo(to_text(text), nl=False)
        return ExitCode.OK
    with tempfile.TemporaryDirectory(prefix="ckptctl-man-") as tmp:
        path = os.path.join(tmp, page_name(command))
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
        # a path with a slash is read as a file by man-db and mandoc alike
        subprocess.run([man, path], check=False)
    return ExitCode.OK

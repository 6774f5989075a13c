"""The ``ckptctl`` command line: a thin shell over the library.

Commands live one per module and are imported only when run, so ``ckptctl --help`` stays fast.
:func:`main` is the only place that turns exceptions into messages and exit codes.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import os
import sys
from typing import TYPE_CHECKING

import click

from ckptctl._version import __version__
from ckptctl.cli import _root
from ckptctl.cli._help import HelpContext
from ckptctl.errors import CkptError, ExitCode

if TYPE_CHECKING:
    from collections.abc import Sequence

#: command name → (module, short help). The help is repeated here so `--help` imports nothing.
COMMANDS: dict[str, tuple[str, str]] = {
    "ls": ("ckptctl.cli.ls", "List the tensors in a checkpoint and say what the file is."),
    "header": ("ckptctl.cli.header", "Show the raw header and account for every byte."),
    "convert": ("ckptctl.cli.convert", "Convert between .pt, .safetensors and .bpk."),
    "remap": ("ckptctl.cli.remap", "Rename tensors by ordered regex rules."),
    "diff": ("ckptctl.cli.diff", "Compare two checkpoints, across formats."),
    "verify": ("ckptctl.cli.verify", "Check checkpoints for CI: readable, safe, loadable."),
    "show": ("ckptctl.cli.show", "Show tensor values, statistics and a histogram."),
    "hash": ("ckptctl.cli.hash", "Write a format-independent digest of every tensor."),
    "man": ("ckptctl.cli.man", "Show the manual page of ckptctl or of a command."),
}

#: names other tools give these commands → ours, for "Did you mean"
ALIASES: dict[str, str] = {
    "inspect": "ls",
    "info": "ls",
    "values": "show",
    "stats": "show",
    "list": "ls",
    "dump": "header",
    "export": "convert",
    "rename": "remap",
    "compare": "diff",
    "check": "verify",
    "digest": "hash",
    "checksum": "hash",
    "sha256sum": "hash",
    "validate": "verify",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use; every command's help is wrapped
    at words (:mod:`ckptctl.cli._help`)."""

    context_class = HelpContext

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module = importlib.import_module(COMMANDS[cmd_name][0])
        command: click.Command = module.command
        command.context_class = HelpContext
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in COMMANDS and not args[0].startswith("-"):
            import difflib

            close = difflib.get_close_matches(args[0], list(COMMANDS), n=1)
            guess = ALIASES.get(args[0].lower()) or (close[0] if close else None)
            hint = f" Did you mean {guess!r}?" if guess else ""
            ctx.fail(f"No such command {args[0]!r}.{hint}")
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:  # suggestions without a command name mean this one
            from ckptctl.cli._spelling import CURRENT

            CURRENT.set(command.name)
        return name, command, rest

    def invoke(self, ctx: click.Context) -> object:
        """Run the subcommand; EPIPE from a stream :func:`main` could not guard ends it quietly.

        :func:`main` runs commands with :func:`~ckptctl.cli._streams.guard_closed_pipes`, so
        the process's own stdout and stderr never raise here and every command keeps its exit
        status. Streams put in their place by a caller can still raise; click would answer
        with exit 1, our code for a failed check, so the command ends with 0 instead.
        """
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            from ckptctl.cli._options import quiet_broken_pipe

            quiet_broken_pipe()
            return ExitCode.OK

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


EPILOG = """\b
Exit status: 0 success; 1 verify found a problem, diff found differences or
convert --target found missing, ambiguous or mismatched tensors; 2 usage
error; 3 input unreadable, corrupt or unsafe; 4 valid input using an
unsupported feature; 5 output cannot be written; 70 internal error;
130 interrupted.
"""


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="ckptctl")
@click.option(
    "--no-color", is_flag=True, help="Never use colour (NO_COLOR in the environment does the same)."
)
@click.option(
    "--debug", is_flag=True, help="Show a traceback for internal errors (or set CKPTCTL_DEBUG=1)."
)
@click.pass_context
def cli(ctx: click.Context, no_color: bool, debug: bool) -> None:
    """Inspect, verify and convert deep-learning checkpoints: PyTorch .pt/.pth/.bin,
    safetensors and Burn .bpk, without torch and without running pickled code.

    Formats are detected from file content, never from the extension. Where a FILE is read,
    a URL works too (https://..., hf://ORG/REPO/FILE[@REVISION], s3://...; pip install
    'ckptctl[remote]'): only the bytes needed are fetched, by range requests.
    """
    ctx.ensure_object(dict)
    ctx.obj["no_color"] = no_color or "NO_COLOR" in os.environ
    ctx.obj["debug"] = debug


_root.register(cli, COMMANDS)


def _debug_requested(args: Sequence[str]) -> bool:
    return "--debug" in args or os.environ.get("CKPTCTL_DEBUG", "") not in ("", "0")


def _wants_json(argv: Sequence[str]) -> bool:
    if "--json" in argv or "--format=json" in argv:
        return True
    return any(a == "--format" and b == "json" for a, b in itertools.pairwise(argv))


def _json_error(
    argv: Sequence[str],
    message: str,
    hint: object,
    code: int,
    kind: str,
    path: str | None = None,
) -> None:
    """Under ``--json`` an error is also one JSON object on stdout, so scripts always get JSON."""
    if not _wants_json(argv):
        return
    from ckptctl.report.json import dumps
    from ckptctl.report.model import SCHEMA_VERSION

    error = {
        "type": kind,
        "message": message,
        "path": path,
        "hint": None if hint is None else str(hint),
        "exit_code": int(code),
    }
    with contextlib.suppress(BrokenPipeError):
        click.echo(dumps({"schema_version": SCHEMA_VERSION, "ok": False, "error": error}), nl=False)


def _error(message: str, hint: object = None) -> None:
    from ckptctl.report.sanitize import sanitize

    click.echo(f"ckptctl: error: {sanitize(message)}", err=True)
    if hint:
        click.echo(f"hint: {sanitize(str(hint))}", err=True)


def _one_blas_thread() -> None:
    """Ask numpy's BLAS (OpenBLAS in the wheels) for one thread, unless the user chose.

    ckptctl parallelises on its own copy threads (``-j``) and uses BLAS only for vector dot
    products; OpenBLAS starting a thread per core when numpy is imported cost every command
    that imports numpy about 0.05 s of CPU and wall time on a 2-core VM (benchmarks/RESULTS.md,
    issue 50). Only effective before numpy's first import.
    """
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(args: Sequence[str] | None = None) -> None:
    """Run the CLI and exit with the documented code; never show a traceback unless asked."""
    from ckptctl.cli._options import _remote_traffic
    from ckptctl.cli._spelling import CURRENT, spell_cli
    from ckptctl.cli._streams import guard_closed_pipes
    from ckptctl.fix import SPELLER

    _one_blas_thread()
    _remote_traffic()  # a report counts only its own requests, not a failed earlier command's
    # The library's suggestions are spelled as this CLI's flags while it runs.
    speller, current = SPELLER.set(spell_cli), CURRENT.set(None)
    try:
        # a reader closing stdout or stderr early (`| head`) must not change the exit status
        with guard_closed_pipes():
            code = _run(list(sys.argv[1:] if args is None else args))
    finally:
        SPELLER.reset(speller)
        CURRENT.reset(current)
    sys.exit(int(code or 0))


def _run(argv: list[str]) -> int:
    try:
        code = cli.main(args=argv, prog_name="ckptctl", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
        _json_error(argv, exc.format_message(), None, code, type(exc).__name__)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo("ckptctl: interrupted", err=True)
        code = ExitCode.INTERRUPTED
    except CkptError as exc:
        _error(str(exc), exc.hint)
        code = exc.exit_code
        _json_error(argv, exc.message, exc.hint, code, type(exc).__name__, exc.path)
    except BrokenPipeError:
        from ckptctl.cli._options import quiet_broken_pipe

        quiet_broken_pipe()
        code = ExitCode.OK
    except Exception as exc:
        if _debug_requested(argv):
            raise
        _error(
            f"internal error: {type(exc).__name__}: {exc}",
            "this is a bug in ckptctl; please report it with the command line "
            "(run again with --debug for a traceback)",
        )
        code = ExitCode.INTERNAL
    return int(code or 0)

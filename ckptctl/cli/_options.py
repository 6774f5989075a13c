"""Options shared by several commands, and the per-invocation consoles."""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

import click

from ckptctl.model import StrEnum

if TYPE_CHECKING:
    from rich.console import Console

    from ckptctl.errors import CkptError

F = TypeVar("F", bound=Callable[..., object])


class OutputFormat(StrEnum):
    """How a command prints its report."""

    TEXT = "text"
    JSON = "json"
    SARIF = "sarif"  # verify only (SARIF 2.1.0, for code-scanning viewers)


def output_options(func: F) -> F:
    """``--format text|json`` and its shorthand ``--json``, passed on as one ``fmt``; also
    ``--no-color``, which works after the subcommand as well as before it."""
    return _output_options(func, (OutputFormat.TEXT, OutputFormat.JSON))


def sarif_output_options(func: F) -> F:
    """:func:`output_options` with ``--format sarif`` too (``verify``)."""
    return _output_options(func, (OutputFormat.TEXT, OutputFormat.JSON, OutputFormat.SARIF))


def _output_options(func: F, formats: tuple[OutputFormat, ...]) -> F:
    @functools.wraps(func)
    def wrapper(
        *args: object, as_json: bool, output_format: str, no_color: bool, **kwargs: object
    ) -> object:
        if no_color:
            ctx = click.get_current_context()
            ctx.find_root().ensure_object(dict)["no_color"] = True
        fmt = OutputFormat(output_format)
        if as_json and fmt not in (OutputFormat.TEXT, OutputFormat.JSON):
            raise click.UsageError(f"--json and --format {fmt.value} cannot be used together")
        return func(*args, fmt=OutputFormat.JSON if as_json else fmt, **kwargs)

    wrapper = click.option(
        "--no-color",
        is_flag=True,
        help="Never use colour (NO_COLOR in the environment does the same).",
    )(wrapper)
    wrapped = click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print one JSON object (schema_version 1) instead of text.",
    )(wrapper)
    sarif = (
        " sarif: one SARIF 2.1.0 log (GitHub code scanning and other SARIF viewers)."
        if OutputFormat.SARIF in formats
        else ""
    )
    return click.option(  # type: ignore[return-value]  # the wrapper keeps func's click params
        "--format",
        "output_format",
        type=click.Choice([f.value for f in formats]),
        default=OutputFormat.TEXT.value,
        show_default=True,
        help="Output format." + sarif,
    )(wrapped)


def emit_each(
    files: tuple[str, ...],
    fmt: OutputFormat,
    produce: Callable[[str], object],
    **options: bool,
) -> int:
    """Emit ``produce(file)`` for each file in turn (a blank line between text reports, one
    JSON object per line). One file's error is reported and the others still run; the exit code
    is the first error's. With a single file its error is raised as usual.
    """
    from ckptctl.errors import CkptError, ExitCode

    if len(files) == 1:
        emit(produce(files[0]), fmt, None, **options)
        return ExitCode.OK
    code = ExitCode.OK
    console = make_console()
    for i, file in enumerate(files):
        try:
            report = produce(file)
        except CkptError as exc:
            print_error(exc, fmt)
            code = code or exc.exit_code
            continue
        if i and fmt is OutputFormat.TEXT:
            console.print()
        emit(report, fmt, console, **options)
    return code


def print_error(exc: CkptError, fmt: OutputFormat) -> None:
    """One error: a line on stderr (and a hint line), and under JSON an object on stdout."""
    from ckptctl.report.json import dumps
    from ckptctl.report.model import SCHEMA_VERSION
    from ckptctl.report.sanitize import sanitize

    click.echo(f"ckptctl: error: {sanitize(str(exc))}", err=True)
    if exc.hint:
        click.echo(f"hint: {sanitize(str(exc.hint))}", err=True)
    _remote_traffic()  # the next file counts its own requests
    if fmt is OutputFormat.JSON:
        error = {
            "type": type(exc).__name__,
            "message": exc.message,
            "path": exc.path,
            "hint": None if exc.hint is None else str(exc.hint),
            "exit_code": int(exc.exit_code),
        }
        click.echo(dumps({"schema_version": SCHEMA_VERSION, "ok": False, "error": error}), nl=False)


def emit_verdict(
    report: object, fmt: OutputFormat, code: int, console: Console | None = None, **options: bool
) -> int:
    """:func:`emit`, then ``code``; a reader that stops early (``verify ... | head``) never
    turns a failing verdict into success: the output ends quietly and ``code`` stands."""
    try:
        emit(report, fmt, console, **options)
    except BrokenPipeError:
        quiet_broken_pipe()
    return code


def quiet_broken_pipe() -> None:
    """The reader of stdout went away: send the rest to /dev/null and exit without noise."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def emit(
    report: object, fmt: OutputFormat, console: Console | None = None, **options: bool
) -> None:
    """Print ``report``: one JSON object on stdout, or its text rendering on ``console``.

    ``options`` go to the text renderer (``all_regions``, ``show_all``, ``quiet``).
    """
    if fmt is OutputFormat.SARIF:
        from ckptctl.report.json import dumps
        from ckptctl.report.sarif import to_sarif

        _remote_traffic()
        click.echo(dumps(to_sarif(report)), nl=False)
        return
    if fmt is OutputFormat.JSON:
        from ckptctl.report.json import dumps, to_json

        obj = to_json(report)
        traffic = _remote_traffic()
        if traffic is not None:
            obj["remote"] = traffic
        click.echo(dumps(obj), nl=False)
        return
    _remote_traffic()  # the next report counts its own requests
    from ckptctl.report.render import render

    render(report, console or make_console(), **options)


def _remote_traffic() -> dict[str, int] | None:
    """Requests and bytes fetched for this report, when it read a URL (else None)."""
    remote = sys.modules.get("ckptctl.sources.remote")  # imported only when a URL was opened
    return None if remote is None else remote.TRAFFIC.take()


def remote_options(func: F) -> F:
    """``--download`` and ``--yes`` for commands that read URLs (``https://``, ``hf://``, ...)."""

    @functools.wraps(func)
    def wrapper(*args: object, download: bool, yes: bool, **kwargs: object) -> object:
        if not (download or yes):
            return func(*args, **kwargs)
        from ckptctl.sources.remote import policy

        with policy(download=download, yes=yes):
            return func(*args, **kwargs)

    wrapper = click.option(
        "--yes",
        "-y",
        is_flag=True,
        help="For URLs: fetch the whole file when reading it needs that (legacy and TAR .pt) "
        "even when it is large.",
    )(wrapper)
    return click.option(  # type: ignore[return-value]  # the wrapper keeps func's click params
        "--download",
        is_flag=True,
        help="For URLs: fetch each remote file whole before reading it (servers without range "
        "requests).",
    )(wrapper)


_SIZE_UNITS = {
    "": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40,
}  # fmt: skip


class InputPath(click.Path):
    """A file (or directory, or URL) a command reads, passed on as given.

    click's own checks would refuse an unreadable file or a directory as a usage error (exit 2)
    and, in ``verify``, stop every other file; the library says what is wrong with it instead
    (no such file, permission denied, a directory): an input error (exit 3) naming the file, or
    in ``verify`` one FAIL line while the other files are still checked.
    """

    def __init__(self) -> None:
        super().__init__(allow_dash=False, readable=False)


class CheckpointRef(click.Path):
    """A checkpoint a command only reads: an existing local file, or a URL (checked on use)."""

    def __init__(self) -> None:
        super().__init__(exists=True, dir_okay=False, readable=False)  # the library says why

    def convert(
        self,
        value: str | os.PathLike[str],
        param: click.Parameter | None,
        ctx: click.Context | None,
    ) -> str | bytes | os.PathLike[str]:
        if isinstance(value, str) and "://" in value:
            return value
        return super().convert(value, param, ctx)


class ByteSize(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.5 on
    """A size: ``5GB`` → 5_000_000_000, ``2GiB`` → 2**31, ``1048576`` bytes (as Hugging Face)."""

    name = "size"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        if isinstance(value, int):
            return value
        text = str(value)
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B?)\s*", text.upper())
        if match is None or float(match.group(1)) <= 0:
            self.fail(f"invalid size {text!r}: write it like 500MB, 5GB or 2GiB", param, ctx)
        return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])


class SharePart(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.5 on
    """A share of a job split N ways: ``3/8`` -> ``(3, 8)``."""

    name = "share"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[int, int]:
        if isinstance(value, tuple):
            return value  # already converted (a default)
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(value))
        if match is None:
            self.fail(f"invalid share {value!r}: write it like 3/8 (this run's K of N)", param, ctx)
        return int(match.group(1)), int(match.group(2))


def force_option(func: F) -> F:
    """``--force``: overwrite an existing destination."""
    return overwrite_option("DST")(func)


def overwrite_option(what: str) -> Callable[[F], F]:
    """``--force``: overwrite an existing ``what`` (the output's metavar)."""
    return click.option("--force", "-f", is_flag=True, help=f"Overwrite {what} if it exists.")


def fsync_option(func: F) -> F:
    """``--no-fsync``: skip the flush to disk before the atomic rename."""
    return click.option(
        "--no-fsync",
        is_flag=True,
        help="Do not flush DST to disk before renaming it into place (faster; a power loss "
        "right after may leave DST empty).",
    )(func)


def jobs_option(help_text: str) -> Callable[[F], F]:
    """``--jobs/-j N``: how many shards at once (default: the number of cores)."""
    return click.option(
        "--jobs",
        "-j",
        type=click.IntRange(min=1),
        default=lambda: os.cpu_count() or 1,
        show_default="number of cores",
        metavar="N",
        help=help_text,
    )


def dry_run_option(func: F) -> F:
    """``--dry-run``: print the plan, write nothing."""
    return click.option("--dry-run", "-n", is_flag=True, help="Print the plan and write nothing.")(
        func
    )


def state_key_option(func: F) -> F:
    """``--state-key KEY``: descend into a nested checkpoint."""
    return click.option(
        "--state-key",
        metavar="KEY",
        help="Descend into KEY (dotted path, e.g. 'model' or 'state_dict') and strip the prefix; "
        "of a DeepSpeed save, exp_avg, exp_avg_sq or step: that optimizer state by parameter name.",
    )(func)


def adapter_option(help_text: str) -> Callable[[F], F]:
    """``--adapter/-a NAME``, repeatable (``pytorch-to-burn``, ``half``, ``cast:DTYPE`` ...)."""
    return click.option(
        "--adapter", "-a", "adapters", multiple=True, metavar="NAME", help=help_text
    )


def remap_option(*names: str, help_text: str, required: bool = False) -> Callable[[F], F]:
    """An ordered, repeatable ``PATTERN=REPLACEMENT`` rule option (``--remap`` / ``--rule``)."""
    return click.option(
        *names,
        "rules",
        multiple=True,
        required=required,
        metavar="PATTERN=REPLACEMENT",
        help=help_text,
    )


def module_type_option(help_text: str) -> Callable[[F], F]:
    """``--module-type REGEX=TYPE``, repeatable."""
    return click.option(
        "--module-type", "module_types", multiple=True, metavar="REGEX=TYPE", help=help_text
    )


def quiet_option(help_text: str) -> Callable[[F], F]:
    """``--quiet/-q``."""
    return click.option("--quiet", "-q", is_flag=True, help=help_text)


def to_option(func: F) -> F:
    """``--to FORMAT``: the output format when DST's extension does not tell."""
    return click.option(
        "--to",
        metavar="FORMAT",
        help="Output format when DST's extension does not tell (.ckpt, no extension): "
        "safetensors, burnpack (bpk) or pytorch (pt).",
    )(func)


def write_options(func: F) -> F:
    """What every writing command takes: ``--to``, ``--force``, ``--no-fsync``, ``--dry-run``,
    ``--quiet``."""
    for decorator in reversed(
        (
            to_option,
            force_option,
            fsync_option,
            dry_run_option,
            quiet_option("No progress bar and no summary line."),
        )
    ):
        func = decorator(func)
    return func


def print_warnings(console: Console, warnings: Iterable[object]) -> None:
    """One ``warning: ...`` line per warning, escaped."""
    from rich.text import Text

    from ckptctl.report.sanitize import sanitize

    for warning in warnings:
        console.print(Text(f"warning: {sanitize(str(warning))}"))


def make_console(*, stderr: bool = False) -> Console:
    """A console for this invocation: no colour when NO_COLOR/--no-color or not a terminal."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich exits 1 here; let LazyGroup.invoke end the command quietly with 0 instead
            raise BrokenPipeError

    ctx = click.get_current_context(silent=True)
    no_color = bool(ctx and ctx.find_root().obj and ctx.find_root().obj.get("no_color"))
    stream = sys.stderr if stderr else sys.stdout
    is_tty = stream.isatty()
    width = None if is_tty else int(os.environ.get("COLUMNS", "100") or 100)
    return _Console(
        file=stream,
        no_color=no_color or not is_tty,
        color_system=None if (no_color or not is_tty) else "auto",
        highlight=False,
        soft_wrap=not is_tty,  # never wrap output that goes to a file or a pipe
        width=width,
        emoji=False,
        markup=False,
    )

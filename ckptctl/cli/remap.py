"""``ckptctl remap``."""

from __future__ import annotations

import os

import click

from ckptctl.cli._options import (
    InputPath,
    OutputFormat,
    output_options,
    remap_option,
    remote_options,
    state_key_option,
    write_options,
)


@click.command("remap")
@click.argument("src", type=InputPath())
@click.argument("dst", type=click.Path(dir_okay=False))
@remap_option(
    "--rule",
    "-r",
    required=True,
    help_text="A regex rename rule, repeatable; each applies (replace-all) to the previous "
    "result. Groups are written $1 or ${name}, as in Burn's KeyRemapper (${1}_x when a "
    "letter, digit or _ follows).",
)
@state_key_option
@click.option(
    "--strict", is_flag=True, help="Fail (exit 1, nothing written) when a rule matches no tensor."
)
@write_options
@remote_options
@output_options
def command(
    src: str,
    dst: str,
    rules: tuple[str, ...],
    state_key: str | None,
    strict: bool,
    to: str | None,
    force: bool,
    no_fsync: bool,
    dry_run: bool,
    quiet: bool,
    fmt: OutputFormat,
) -> int:
    """Rename the tensors of SRC by ordered regex rules and write DST (any output format).

    The same engine as convert, without adapters: bytes are copied unchanged. Two tensors
    renamed to the same name is an error naming both. --dry-run prints source name → target
    name for every tensor and writes nothing.

    \b
    Examples:
      ckptctl remap model.bpk renamed.bpk --rule '^fc\\.=fc1.' --dry-run
      ckptctl remap checkpoint.pt m.safetensors --state-key model -r '^=model.'
    """
    from ckptctl.cli.convert import run_conversion
    from ckptctl.ops.convert import ConvertOptions

    options = ConvertOptions(
        state_key=state_key,
        remap=rules,
        to=to,
        strict=strict,
        force=force,
        fsync=not no_fsync,
        dry_run=dry_run,
        jobs=os.cpu_count() or 1,  # threads copying tensor bytes, as convert's default -j
    )
    return run_conversion(src, dst, options, fmt=fmt, quiet=quiet)

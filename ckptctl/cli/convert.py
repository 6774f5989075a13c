"""``ckptctl convert``."""

from __future__ import annotations

import click

from ckptctl.cli._options import (
    dry_run_option,
    force_option,
    make_console,
    output_options,
    print_json,
    state_key_option,
    wants_json,
)


@click.command("convert")
@click.argument("src", type=click.Path(dir_okay=False))
@click.argument("dst", type=click.Path(dir_okay=False))
@state_key_option
@force_option
@dry_run_option
@output_options
def command(
    src: str,
    dst: str,
    state_key: str | None,
    force: bool,
    dry_run: bool,
    as_json: bool,
    output_format: str,
) -> None:
    """Convert SRC to DST; DST's extension picks the format (.safetensors, .bpk, .pt/.pth/.bin).

    Streams one tensor at a time and writes atomically: on any failure DST is left as it was.
    Refuses to overwrite DST without --force, and never writes over SRC.

    \b
    Examples:
      ckptctl convert model.safetensors model.bpk
      ckptctl convert checkpoint.pt model.safetensors --state-key model
    """
    from ckptctl.ops.convert import convert

    report = convert(src, dst, state_key=state_key, force=force, dry_run=dry_run)
    if wants_json(as_json, output_format):
        from ckptctl.report.json import dumps, to_json

        print_json(dumps(to_json(report)))
    else:
        from ckptctl.report.text import render_convert

        render_convert(report, make_console(stderr=not dry_run))

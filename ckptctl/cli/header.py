"""``ckptctl header``."""

from __future__ import annotations

import click

from ckptctl.cli._options import make_console, output_options, print_json, wants_json


@click.command("header")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=False))
@click.option("--all", "all_regions", is_flag=True, help="Show every region, however many.")
@output_options
def command(file: str, all_regions: bool, as_json: bool, output_format: str) -> None:
    """Show FILE's raw header, decoded, and account for every byte of the file.

    Each byte belongs to one region: header, metadata, padding (with its reason: burnpack's
    256-byte alignment, safetensors' 8-byte header padding, PyTorch zip's 64-byte records),
    a tensor, or other. The totals say how much is tensor data and how much overhead.

    \b
    Examples:
      ckptctl header fixtures/valid/burnpack/net.bpk
      ckptctl header fixtures/valid/safetensors/tiny.safetensors --json
    """
    from ckptctl.ops.inspect import describe_header

    report = describe_header(file)
    if wants_json(as_json, output_format):
        from ckptctl.report.json import dumps, to_json

        print_json(dumps(to_json(report)))
    else:
        from ckptctl.report.text import render_header

        render_header(report, make_console(), all_regions=all_regions)

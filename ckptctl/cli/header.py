"""``ckptctl header``."""

from __future__ import annotations

import click

from ckptctl.cli._options import OutputFormat, emit_each, output_options


@click.command("header")
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=False))
@click.option("--all", "all_regions", is_flag=True, help="Show every region, however many.")
@output_options
def command(files: tuple[str, ...], all_regions: bool, fmt: OutputFormat) -> int:
    """Show each FILE's raw header, decoded, and account for every byte of the file.

    Each byte belongs to one region: header, metadata, padding (with its reason: burnpack's
    256-byte alignment, safetensors' 8-byte header padding, PyTorch zip's 64-byte records),
    a tensor, or other. The totals say how much is tensor data and how much overhead. A
    directory stands for the checkpoint in it; several files are shown one after the other.

    \b
    Examples:
      ckptctl header model.bpk
      ckptctl header model.safetensors --json
    """
    from ckptctl.ops.inspect import describe_header

    return emit_each(files, fmt, describe_header, all_regions=all_regions)

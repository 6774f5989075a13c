"""``ckptctl header``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ckptctl.cli._options import (
    InputPath,
    OutputFormat,
    emit_each,
    output_options,
    print_error,
    remote_options,
)
from ckptctl.errors import ExitCode

if TYPE_CHECKING:
    from ckptctl.errors import CkptError
    from ckptctl.report.model import HeaderReport


@click.command("header")
@click.argument("files", nargs=-1, required=True, type=InputPath())
@click.option("--all", "all_regions", is_flag=True, help="Show every region, however many.")
@remote_options
@output_options
def command(files: tuple[str, ...], all_regions: bool, fmt: OutputFormat) -> int:
    """Show each FILE's raw header, decoded, and account for every byte of the file.

    Each byte belongs to one region: header, metadata, padding (with its reason: burnpack's
    256-byte alignment, safetensors' 8-byte header padding, PyTorch zip's 64-byte records),
    a tensor, or other. The totals say how much is tensor data and how much overhead. A
    truncated file is shown as far as it goes, the damage marked, and exits 3. A
    directory stands for the checkpoint in it; several files are shown one after the other.

    \b
    Examples:
      ckptctl header model.bpk
      ckptctl header model.safetensors --json
    """
    from ckptctl.ops.inspect import describe_header

    damaged: list[CkptError] = []

    def produce(file: str) -> HeaderReport:
        report = describe_header(file)
        if report.damage is not None:
            damaged.append(report.damage.with_path(report.path))
        return report

    code = emit_each(files, fmt, produce, all_regions=all_regions)
    for error in damaged:  # shown above as far as it could be read; still an input error
        print_error(error, OutputFormat.TEXT)
    return code or (ExitCode.INPUT if damaged else ExitCode.OK)

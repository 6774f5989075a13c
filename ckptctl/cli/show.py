"""``ckptctl show``."""

from __future__ import annotations

import os

import click

from ckptctl.cli._options import (
    InputPath,
    OutputFormat,
    emit,
    output_options,
    remote_options,
    state_key_option,
)
from ckptctl.cli._progress import data_progress, file_name
from ckptctl.errors import ExitCode


@click.command("show")
@click.argument("file", type=InputPath())
@click.argument("names", nargs=-1)
@click.option(
    "--filter",
    "pattern",
    metavar="REGEX",
    help="Also every tensor whose name matches REGEX (Rust regex syntax, as --remap).",
)
@state_key_option
@click.option(
    "--no-stats",
    is_flag=True,
    help="Only the values numpy shows; do not read every element for the statistics.",
)
@remote_options
@output_options
def command(
    file: str,
    names: tuple[str, ...],
    pattern: str | None,
    state_key: str | None,
    no_stats: bool,
    fmt: OutputFormat,
) -> int:
    """Show the values of tensors NAME... of FILE (or those matching --filter).

    For each tensor: its first and last elements as numpy prints them (str(array); BF16 and
    FP8 decoded exactly to the float32 values they are, F16 as float16), then statistics over
    the finite values (min, max, mean, sample std as torch.std, absolute max), the share of
    zeros, NaN and Inf counts, and a histogram in Unicode blocks (ASCII under NO_COLOR or a
    non-UTF-8 terminal). Tensors are read one at a time in blocks; for a large tensor only the
    elements shown are read for the preview, with a progress bar on a terminal (stderr). --json
    gives the numbers.

    \b
    Examples:
      ckptctl show model.safetensors fc.weight
      ckptctl show model.safetensors --filter 'bias$' --json
      ckptctl show checkpoint.pt --state-key model 0.weight --no-stats
    """
    from ckptctl.ops.show import show_tensors

    with data_progress(f"reading {file_name(file)}", fmt) as progress:
        report = show_tensors(
            file, names, pattern=pattern, state_key=state_key, stats=not no_stats, progress=progress
        )
    ctx = click.get_current_context()
    root = ctx.find_root().obj or {}
    emit(report, fmt, ascii_only=bool(root.get("no_color")) or "NO_COLOR" in os.environ)
    return ExitCode.OK

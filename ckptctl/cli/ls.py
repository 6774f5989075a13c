"""``ckptctl ls``."""

from __future__ import annotations

import click

from ckptctl.cli._options import OutputFormat, emit, output_options, state_key_option
from ckptctl.errors import ExitCode


@click.command("ls")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=False))
@state_key_option
@click.option("--filter", "pattern", metavar="REGEX", help="Only tensors whose name matches REGEX.")
@click.option(
    "--sort",
    type=click.Choice(["file", "name", "size", "dtype", "shape"]),
    default="file",
    show_default=True,
    help="Order of the rows (file: as stored).",
)
@output_options
def command(
    file: str,
    state_key: str | None,
    pattern: str | None,
    sort: str,
    fmt: OutputFormat,
) -> int:
    """List the tensors in FILE (name, dtype, shape, parameters, bytes) with totals by dtype.

    Only the header is read. For PyTorch files, says what the file really is: a flat
    state_dict, a nested checkpoint (and where the tensors are), a whole pickled model or a
    TorchScript archive.

    \b
    Examples:
      ckptctl ls fixtures/valid/safetensors/tiny.safetensors
      ckptctl ls fixtures/valid/pytorch/nested.pt --state-key model --filter weight --sort size
      ckptctl ls fixtures/valid/burnpack/net.bpk --json
    """
    from ckptctl.ops.inspect import list_tensors

    emit(list_tensors(file, state_key=state_key, pattern=pattern, sort=sort), fmt)
    return ExitCode.OK

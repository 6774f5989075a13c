"""``ckptctl ls``."""

from __future__ import annotations

import click

from ckptctl.cli._options import (
    make_console,
    output_options,
    print_json,
    state_key_option,
    wants_json,
)


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
    as_json: bool,
    output_format: str,
) -> None:
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

    report = list_tensors(file, state_key=state_key, pattern=pattern, sort=sort)
    if wants_json(as_json, output_format):
        from ckptctl.report.json import dumps, to_json

        print_json(dumps(to_json(report)))
    else:
        from ckptctl.report.text import render_ls

        render_ls(report, make_console())

"""``ckptctl hash``."""

from __future__ import annotations

import click

from ckptctl.cli._options import (
    InputPath,
    OutputFormat,
    emit,
    jobs_option,
    make_console,
    output_options,
    overwrite_option,
    remote_options,
    state_key_option,
)
from ckptctl.cli._progress import data_progress, file_name
from ckptctl.errors import ExitCode


@click.command("hash")
@click.argument("file", type=InputPath())
@state_key_option
@click.option(
    "--filter",
    "pattern",
    metavar="REGEX",
    help="Only tensors whose name matches REGEX (Rust regex syntax, as --remap).",
)
@click.option(
    "--output",
    "-o",
    metavar="MANIFEST",
    type=click.Path(dir_okay=False, allow_dash=False),
    help="Write the manifest to MANIFEST (atomically) instead of stdout.",
)
@overwrite_option("MANIFEST (--output)")
@jobs_option("Hash N tensors at once (the manifest does not depend on N).")
@remote_options
@output_options
def command(
    file: str,
    state_key: str | None,
    pattern: str | None,
    output: str | None,
    force: bool,
    jobs: int,
    fmt: OutputFormat,
) -> int:
    """Write a manifest of FILE's tensors: one JSON object per line with name, dtype, shape
    and digest (sha256 of the tensor's canonical bytes: C order, little-endian).

    The digests do not depend on the format: a .pt, its .safetensors and its .bpk give the
    same manifest, so `ckptctl verify CONVERTED --hashes MANIFEST` checks a converted file
    without the original, and a download against a published manifest. Every tensor byte is
    read, one chunk at a time (a progress bar on a terminal, on stderr). --json prints one
    object (path, format, algorithm, tensors) instead of the lines.

    \b
    Examples:
      ckptctl hash model.safetensors
      ckptctl hash weights.pt -o weights.manifest
      ckptctl hash checkpoint.pt --state-key model --json
    """
    from ckptctl.ops.hash import hash_tensors

    with data_progress(f"hashing {file_name(file)}", fmt) as progress:
        report = hash_tensors(
            file, state_key=state_key, pattern=pattern, jobs=jobs, progress=progress
        )
    if output is None:
        emit(report, fmt)
        return ExitCode.OK
    from ckptctl._io import atomic_write
    from ckptctl.report.json import manifest_line

    with atomic_write(output, force=force) as out:
        out.write("".join(manifest_line(r) + "\n" for r in report.tensors).encode("ascii"))
    if fmt is OutputFormat.JSON:
        emit(report, fmt)
    else:
        n = len(report.tensors)
        make_console().print(f"wrote {output}: {n} tensor{'' if n == 1 else 's'}", markup=False)
    return ExitCode.OK

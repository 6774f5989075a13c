"""``ckptctl verify``: the CI gate."""

from __future__ import annotations

import click

from ckptctl.cli._options import (
    CheckpointRef,
    InputPath,
    OutputFormat,
    emit_verdict,
    jobs_option,
    output_options,
    quiet_option,
    remote_options,
    state_key_option,
)
from ckptctl.errors import ExitCode
from ckptctl.report.verify import CHECKS


@click.command("verify")
@click.argument("files", nargs=-1, required=True, type=InputPath())
@state_key_option
@click.option(
    "--no-nan",
    is_flag=True,
    help="Also scan every float tensor for NaN and Inf (reads all tensor bytes, in chunks).",
)
@click.option(
    "--expect",
    metavar="REF",
    type=CheckpointRef(),
    help="Fail unless the tensor names and shapes match the reference checkpoint REF "
    "(prints the Tensor Loading Summary with 'Did you mean').",
)
@click.option(
    "--min-tensors",
    metavar="N",
    type=click.IntRange(min=0),
    help="Fail files with fewer than N tensors.",
)
@click.option(
    "--optimizer",
    metavar="OPTIM",
    type=CheckpointRef(),
    help="Check that the Burn optimizer record OPTIM (optim-N.bpk) attaches to each FILE's "
    "ParamIds (prints the Optimizer State Check).",
)
@click.option(
    "--hashes",
    metavar="MANIFEST",
    type=click.Path(exists=True, dir_okay=False),
    help="Fail unless every tensor's name, dtype, shape and digest match MANIFEST (written by "
    "ckptctl hash; reads every tensor byte).",
)
@click.option(
    "--check",
    "checks",
    metavar="NAME",
    multiple=True,
    type=click.Choice(CHECKS),
    help="Report only this check (repeatable; readable is always reported): e.g. "
    "--check safe-pickle for optimizer, scheduler and training-argument files.",
)
@click.option(
    "--skip",
    metavar="NAME",
    multiple=True,
    type=click.Choice([c for c in CHECKS if c != "readable"]),
    help="Do not report this check (repeatable).",
)
@click.option(
    "--allow-global",
    "allow_globals",
    metavar="MODULE.NAME",
    multiple=True,
    help="Trust this pickle global (repeatable), as torch.serialization.add_safe_globals does: "
    "a needs-trust file whose only untrusted globals are allowed passes. Unsafe globals stay "
    "unsafe.",
)
@click.option(
    "--trust",
    is_flag=True,
    help="Accept needs-trust pickles with a warning instead of failing (unsafe ones still fail).",
)
@jobs_option("With --no-nan: scan N tensors at once (shards in parallel); same report for any N.")
@quiet_option("Show only files that fail or warn.")
@remote_options
@output_options
def command(
    files: tuple[str, ...],
    state_key: str | None,
    no_nan: bool,
    expect: str | None,
    min_tensors: int | None,
    optimizer: str | None,
    hashes: str | None,
    checks: tuple[str, ...],
    skip: tuple[str, ...],
    allow_globals: tuple[str, ...],
    trust: bool,
    jobs: int,
    quiet: bool,
    fmt: OutputFormat,
) -> int:
    """Check each FILE for CI: exit 0 when every file passes, 1 when any fails.

    Every file is checked for: readable (opens and passes every structural check), safe-pickle
    (pickle-based files: the verdict safe, needs-trust or unsafe, with every global named; safe
    means torch.load(weights_only=True) loads it; unsafe always fails and needs-trust fails
    unless --trust or --allow-global), sharded-index (*.index.json against its shards) and
    flat-reader (a reader expecting a top-level name -> tensor map, such as candle's from_pth,
    would find tensors: nested checkpoints, whole pickled models, TorchScript archives and empty
    files fail, with the fix). Unreadable, corrupt or unsafe files are reported as failures,
    not errors, and never stop the other files. --no-nan, --expect, --min-tensors,
    --optimizer and --hashes add checks; --check and --skip choose which are reported.

    \b
    Examples:
      ckptctl verify weights.pt model.bpk
      ckptctl verify checkpoint.pt  # exit 1: tensors are under 'model'
      ckptctl verify checkpoint.pt --state-key model --no-nan
      ckptctl verify trained.bpk --optimizer optim.bpk
      ckptctl verify whole_model.pt --check safe-pickle --trust
      ckptctl verify model.safetensors --hashes model.manifest
    """
    from ckptctl.ops.verify import verify

    report = verify(
        files,
        state_key=state_key,
        no_nan=no_nan,
        expect=expect,
        min_tensors=min_tensors,
        optimizer=optimizer,
        checks=checks,
        skip=skip,
        allow_globals=allow_globals,
        trust=trust,
        jobs=jobs,
        hashes=hashes,
    )
    code = ExitCode.OK if report.ok else ExitCode.CHECK_FAILED
    return emit_verdict(report, fmt, code, quiet=quiet)

"""``ckptctl diff``."""

from __future__ import annotations

import click

from ckptctl.cli._options import (
    ByteSize,
    InputPath,
    OutputFormat,
    adapter_option,
    emit_verdict,
    jobs_option,
    make_console,
    module_type_option,
    output_options,
    print_warnings,
    quiet_option,
    remap_option,
    remote_options,
    state_key_option,
)
from ckptctl.cli._progress import data_progress
from ckptctl.errors import ExitCode


@click.command("diff")
@click.argument("a", type=InputPath())
@click.argument("b", type=InputPath())
@state_key_option
@click.option(
    "--state-key-b",
    metavar="KEY",
    help="Descend into KEY of B (dotted path) and strip the prefix; --state-key applies to A.",
)
@remap_option(
    "--remap",
    "-r",
    help_text="Rename A's tensors by regex before comparing, repeatable, in order, as in convert.",
)
@adapter_option(
    "Adapter to apply to A after the --remap rules, repeatable, in order: pytorch-to-burn, "
    "burn-to-pytorch, half, cast:DTYPE."
)
@module_type_option(
    "Declare the module type of matching tensors of A for the layout adapters, as in "
    "convert; repeatable, first match wins."
)
@click.option(
    "--filter",
    "pattern",
    metavar="REGEX",
    help="Compare only tensors whose name matches REGEX (Rust regex syntax, as ls, show and "
    "hash), on both sides; A's names after --remap and adapters.",
)
@click.option(
    "--rtol",
    type=click.FloatRange(min=0),
    default=1e-5,
    show_default=True,
    help="Relative tolerance: |a - b| <= atol + rtol * |b| counts as equal.",
)
@click.option(
    "--atol",
    type=click.FloatRange(min=0),
    default=1e-8,
    show_default=True,
    help="Absolute tolerance (see --rtol).",
)
@click.option(
    "--values-only",
    is_flag=True,
    help="Ignore dtype differences: a tensor passes when its values are within tolerance.",
)
@click.option(
    "--all", "show_all", is_flag=True, help="List every common tensor, not only those that differ."
)
@click.option(
    "--max-compare-size",
    metavar="SIZE",
    type=ByteSize(),
    help="Refuse to compare more than SIZE bytes of tensors (e.g. 8GiB). Default: 1 GiB or 64 "
    "times the two inputs' size, whichever is larger; views expanded with stride 0 can "
    "describe far more data than a file holds.",
)
@jobs_option("Compare N tensors at once (shards read in parallel); same report for any N.")
@quiet_option("Print nothing; only the exit status says whether A and B differ.")
@remote_options
@output_options
def command(
    a: str,
    b: str,
    state_key: str | None,
    state_key_b: str | None,
    rules: tuple[str, ...],
    adapters: tuple[str, ...],
    module_types: tuple[str, ...],
    pattern: str | None,
    rtol: float,
    atol: float,
    values_only: bool,
    show_all: bool,
    max_compare_size: int | None,
    jobs: int,
    quiet: bool,
    fmt: OutputFormat,
) -> int:
    """Compare checkpoints A and B tensor by tensor, across formats (.pt, .safetensors, .bpk).

    Reports tensors only in A or only in B (with "Did you mean"), and for each common tensor
    its dtype, shape and values: identical bytes, or the largest absolute and relative
    difference, the relative change of the whole tensor (||a - b|| / ||a||) and its cosine
    similarity (how far a fine-tune moved it), and whether all values are close
    (|a - b| <= atol + rtol * |b|, NaN equal to NaN at the same place), whatever the dtypes
    (F32 against BF16 compares values). Finds
    [m, n] against [n, m] tensors that hold the same values ("transposed") and prints the
    --remap rules and adapters that would reconcile the names as a ready command line: found
    as convert --target finds them (the structure of both files, then their values), and then
    also the convert that writes A under B's names.

    A goes through --state-key, --remap and --adapter as in convert; B only through
    --state-key-b. Tensors are read one at a time in fixed-size chunks: memory stays bounded.

    Exits 0 when A and B match: the same tensor names, and every tensor with the same dtype
    (unless --values-only), the same shape and all values within --rtol/--atol (--rtol 0 --atol
    0 demands exact equality); 1 when they differ in any other way; 2 on a usage error, 3 on
    unreadable or corrupt input, 4 on unsupported input. The verdict says "identical" only when
    every tensor has the same bytes, else "match within rtol=..., atol=..." (--json:
    "identical" and "within_tolerance").

    \b
    Examples:
      ckptctl diff weights.pt legacy.pt
      ckptctl diff checkpoint.pt lightning.ckpt --state-key model \\
        --state-key-b state_dict.model
      ckptctl diff model.bpk trained.bpk  # exit 1
      ckptctl diff model.bpk trained.bpk --filter '^fc\\.' --all  # exit 1
    """
    from dataclasses import replace

    from ckptctl.ops.diff import diff_checkpoints
    from ckptctl.report.diff import DiffOptions

    options = DiffOptions(
        state_key=state_key,
        state_key_b=state_key_b,
        remap=rules,
        adapters=adapters,
        module_types=module_types,
        rtol=rtol,
        atol=atol,
        values_only=values_only,
        pattern=pattern,
    )
    with data_progress("comparing", fmt, quiet=quiet) as progress:
        options = replace(options, progress=progress)
        report = diff_checkpoints(a, b, options, jobs=jobs, max_compare_bytes=max_compare_size)
    code = ExitCode.OK if report.ok else ExitCode.CHECK_FAILED
    if quiet:  # like diff -q / git diff --quiet: the exit code says it all
        return code
    if fmt is OutputFormat.TEXT:
        print_warnings(make_console(stderr=True), report.warnings)
    return emit_verdict(report, fmt, code, show_all=show_all)

"""``ckptctl ls``."""

from __future__ import annotations

import click

from ckptctl.cli._options import (
    InputPath,
    OutputFormat,
    emit_each,
    output_options,
    remote_options,
    state_key_option,
)
from ckptctl.cli._progress import data_progress, file_name


@click.command("ls")
@click.argument("files", nargs=-1, required=True, type=InputPath())
@state_key_option
@click.option(
    "--filter",
    "pattern",
    metavar="REGEX",
    help="Only tensors whose name matches REGEX (Rust regex syntax, as --remap: no lookaround "
    "or backreferences).",
)
@click.option(
    "--sort",
    type=click.Choice(["file", "name", "size", "dtype", "shape"]),
    default=None,
    help="Order of the rows (default file: as stored). With --tree, of the modules: file (the "
    "default: as stored, as print(model) shows them; numbered blocks in number order), name "
    "(natural: layers.2 before layers.10, the same tree for every format) or size (largest "
    "first); dtype and shape are refused. --tree --json lists children in natural order "
    "unless --sort says otherwise.",
)
@click.option(
    "--tree",
    is_flag=True,
    help="Show the module hierarchy instead of the flat table: tensors, parameters and bytes "
    "per module, identical numbered blocks collapsed (layers.{0..31} x32), tied tensors "
    "counted once; modules in the file's order (see --sort).",
)
@click.option(
    "--depth",
    metavar="N",
    type=click.IntRange(min=1),
    help="With --tree: show N levels of the hierarchy, the deeper ones as totals.",
)
@click.option(
    "--expand",
    is_flag=True,
    help="With --tree: list every block instead of collapsing identical ones.",
)
@click.option(
    "--stats",
    is_flag=True,
    help="Add the statistics of every tensor's values (min, max, mean, std, absmax, share of "
    "zeros, NaN, Inf); reads every tensor, one at a time, in blocks (a progress bar on a "
    "terminal).",
)
@click.option(
    "--full-metadata",
    is_flag=True,
    help="Metadata values whole: a long GGUF array (a tokenizer's tokens) is otherwise shown "
    "as its length, item type and first items.",
)
@click.option(
    "--bytes", "exact_bytes", is_flag=True, help="Sizes as exact byte counts, not KiB/MiB/GiB."
)
@remote_options
@output_options
def command(
    files: tuple[str, ...],
    state_key: str | None,
    pattern: str | None,
    sort: str | None,
    tree: bool,
    depth: int | None,
    expand: bool,
    stats: bool,
    full_metadata: bool,
    exact_bytes: bool,
    fmt: OutputFormat,
) -> int:
    """List the tensors in each FILE (name, dtype, shape, parameters, bytes) with totals by dtype.

    Only the header is read. For PyTorch files, says what the file really is: a flat state_dict,
    a nested checkpoint (and where the tensors are), a whole pickled model or a TorchScript
    archive. A directory stands for the checkpoint in it (a torch.distributed.checkpoint
    directory through its .metadata; a DeepSpeed ZeRO save: latest + global_step*/, read as its
    consolidated fp32 weights; its *.index.json, or its one checkpoint file); several files are
    listed one after the other (one JSON object per line with --json). Quantized modules (GPTQ,
    AWQ, bitsandbytes 4/8-bit, FP8 with scales, compressed-tensors) are named: a second table
    gives each one's scheme, bits, group size and the weight's shape and parameters once
    unpacked next to what is stored (--json: "quantized"); their layout descriptors (a few bytes
    each) are read too. A FILE may be a URL (https://, hf://ORG/REPO/FILE, s3://): a safetensors
    header costs two or three range requests, and --json adds "remote": {requests,
    bytes_fetched}.

    \b
    Examples:
      ckptctl ls model.safetensors
      ckptctl ls checkpoint.pt --state-key model --filter weight --sort size
      ckptctl ls model.bpk --json
      ckptctl ls checkpoint.pt --tree --depth 2
      ckptctl ls model.safetensors --stats
      ckptctl ls checkpoint/step-1000
      ckptctl ls model-gptq.safetensors
      ckptctl ls ckpt --state-key exp_avg
    """
    from ckptctl.ops.inspect import list_tensors

    as_tree = tree or depth is not None or expand

    def produce(file: str) -> object:
        with data_progress(f"reading {file_name(file)}", fmt, quiet=not stats) as progress:
            return list_tensors(
                file,
                state_key=state_key,
                pattern=pattern,
                sort=sort or ("name" if fmt is OutputFormat.JSON and as_tree else "file"),
                tree=as_tree,
                depth=depth,
                expand=expand,
                stats=stats,
                full_metadata=full_metadata,
                progress=progress,
            )

    return emit_each(files, fmt, produce, exact_bytes=exact_bytes)

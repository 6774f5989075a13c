"""``ckptctl convert``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ckptctl.cli._options import (
    ByteSize,
    InputPath,
    OutputFormat,
    SharePart,
    adapter_option,
    emit,
    jobs_option,
    make_console,
    module_type_option,
    output_options,
    print_warnings,
    remap_option,
    remote_options,
    state_key_option,
    write_options,
)
from ckptctl.cli._progress import data_progress, file_name
from ckptctl.errors import ExitCode

if TYPE_CHECKING:
    from ckptctl.ops.convert import ConvertOptions


def run_conversion(
    src: str,
    dst: str,
    options: ConvertOptions,
    *,
    fmt: OutputFormat,
    quiet: bool,
) -> int:
    """Run the pipeline and print the report; the exit code (1: a target check failed).

    Shared by ``convert`` and ``remap``.
    """
    from dataclasses import replace

    from ckptctl.ops.convert import convert

    err = make_console(stderr=True)
    quiet_bar = quiet or options.dry_run
    with data_progress(f"writing {file_name(dst)}", fmt, quiet=quiet_bar) as progress:
        report = convert(src, dst, replace(options, progress=progress))
    if fmt is OutputFormat.JSON:
        emit(report, fmt)
    else:
        from rich.text import Text

        from ckptctl.report.sanitize import sanitize

        if not quiet:
            print_warnings(err, report.warnings)
        if options.dry_run or not report.ok:
            emit(report, fmt)
        elif not quiet:
            emit(report, fmt, err)
        if report.refused is not None and not report.written and not options.dry_run:
            err.print(Text(f"ckptctl: nothing written to {sanitize(dst)}: {report.refused}"))
    return ExitCode.OK if report.ok else ExitCode.CHECK_FAILED


#: The command's --help (and man page) text; its Examples are run by tests/test_docs.py.
HELP = """Convert SRC to DST; DST's extension picks the format (.safetensors, .bpk, .pt/.pth/.bin,
.gguf).

Tensors go through: --state-key, --include/--exclude, --remap rules (in order), then
adapters (in order). Streams one tensor at a time; tensors that need no change are copied
as raw bytes. Writes atomically: on any failure DST is left as it was. Refuses to overwrite
DST without --force, and never writes over SRC. SRC may be a DeepSpeed ZeRO save (a folder
with latest and global_step*/): DST gets the fp32 weights deepspeed's zero_to_fp32 returns
(plus frozen parameters at stage 1), read from the rank files piece by piece.

A .gguf DST is GGUF v3 as gguf-py writes it: GGUF to GGUF keeps every key/value and every
quantized block byte for byte, so --set-meta and --drop-meta edit a model's metadata
without touching its tensors (into a new file: DST is never SRC).

\b
Examples:
  ckptctl convert model.safetensors burn.bpk -a pytorch-to-burn
  ckptctl convert checkpoint.pt weights.safetensors --state-key model
  ckptctl convert whole_model.pt whole_model.bpk -a pytorch-to-burn \\
    -a cast:bf16
  ckptctl convert encoder.pt encoder.bpk -a pytorch-to-burn \\
    --module-type 'layers\\.\\d+\\.=TransformerEncoderLayer(norm_first=True)'
  ckptctl convert model.bpk renamed.bpk --remap '^fc\\.=fc1.' --dry-run
  ckptctl convert bert.safetensors bert.bpk -a pytorch-to-burn \\
    --target burn_bert.bpk --write-rules bert-rules.txt
  ckptctl convert roberta.safetensors roberta.bpk -a pytorch-to-burn \\
    --target burn_roberta.bpk --tie lm_head.decoder.bias=lm_head.bias \\
    --tie lm_head.decoder.weight=roberta.embeddings.word_embeddings.weight
  ckptctl convert llama.safetensors llama.bpk -a pytorch-to-burn \\
    -a rope-interleaved:2,1 --target burn_llama.bpk
  ckptctl convert model-10.mpk model-10.bpk
  ckptctl convert optim-10.mpk optim-10.bpk --paths-from model-10.mpk
  ckptctl convert checkpoint/step-1000 full.safetensors --state-key model
  ckptctl convert checkpoint/step-1000 full.safetensors \\
    --max-shard-size 5GB --shards 1/8
  ckptctl convert checkpoint/step-1000 full.safetensors \\
    --max-shard-size 5GB --index-only
  ckptctl convert ckpt consolidated.safetensors
  ckptctl convert llama-q4_k_m.gguf llama-bf16.safetensors --dequantize=bf16
  ckptctl convert llama.safetensors llama-q8_0.gguf --arch llama \\
    --quantize q8_0
  ckptctl convert llama-q4_k_m.gguf renamed.gguf \\
    --set-meta general.name=str:my-llama --drop-meta tokenizer.chat_template
"""


@click.command("convert", help=HELP)
@click.argument("src", type=InputPath())
@click.argument("dst", type=click.Path(dir_okay=False))
@adapter_option(
    "Adapter to apply, repeatable, in order: pytorch-to-burn, burn-to-pytorch, half, "
    "cast:DTYPE (e.g. cast:f32, cast:bf16), rope-interleaved:HEADS[,KV_HEADS] (Llama q/k "
    "projections from Hugging Face's half-split RoPE layout to Meta's interleaved one, as "
    "llama-burn loads them), rope-half-split:HEADS[,KV_HEADS] (the reverse), gguf-to-hf or "
    "hf-to-gguf (llama.cpp's tensor names for llama, mistral, mixtral, qwen2, qwen3, "
    "qwen2/3-moe, phi3 and gemma 1-3, with its q/k row order, stacked experts and Gemma's norm "
    "weights + 1; head counts from the GGUF metadata "
    "or the config.json beside the source, else gguf-to-hf:HEADS[,KV_HEADS]; first in the "
    "list, they rename before --remap)."
)
@remap_option(
    "--remap",
    "-r",
    help_text="Rename tensors by regex, repeatable; applied in order before the adapters. "
    "Groups are written $1 or ${name}, as in Burn's KeyRemapper (${1}_x when a letter, digit "
    "or _ follows).",
)
@state_key_option
@click.option(
    "--include",
    multiple=True,
    metavar="REGEX",
    help="Keep only matching tensors (Rust regex syntax, as --remap and ls --filter).",
)
@click.option(
    "--exclude", multiple=True, metavar="REGEX", help="Drop matching tensors (Rust regex syntax)."
)
@module_type_option(
    "Declare the module type (Linear, LayerNorm, BatchNorm, Embedding, Conv2d, PRelu, "
    "InstanceNorm, ...) of matching tensors for the layout adapters; repeatable, first match "
    "wins. Layers Burn stores as several modules take options in call syntax: "
    "MultiheadAttention; LSTM, GRU, RNN (bidirectional=, num_layers=); "
    "TransformerEncoderLayer, TransformerDecoderLayer (norm_first=); any other type takes "
    "(variant=NAME), the Burn enum variant holding it. One declaration serves both directions."
)
@click.option(
    "--module-types",
    "module_types_file",
    type=click.Path(dir_okay=False),
    metavar="FILE.json",
    help="A JSON object {regex: type} of more --module-type rules.",
)
@click.option(
    "--target",
    type=InputPath(),
    metavar="REF",
    help="A checkpoint whose names and shapes the output must fit; prints the Tensor Loading "
    "Summary and writes nothing (exit 1) when tensors are missing or mismatched. When names "
    "do not fit, remap rules proven from the structure of both (blocks, shapes, role names) "
    "are applied; tensors several sources could fill are named, never guessed.",
)
@click.option(
    "--allow-partial", is_flag=True, help="With --target: write even if tensors do not fit."
)
@click.option(
    "--tie",
    "ties",
    multiple=True,
    metavar="NAME=SOURCE",
    help="Also write tensor SOURCE under NAME, repeatable (a tied weight the file stores "
    "once, e.g. 'lm_head.weight=model.embed_tokens.weight'); the copy "
    "goes through --remap rules and adapters like any tensor. --target suggests it.",
)
@click.option(
    "--remap-file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Read remap rules from FILE: one PATTERN=REPLACEMENT per line (Burn's KeyRemapper "
    "syntax, as --remap), '#' comments; they run in file order, before --remap rules.",
)
@click.option(
    "--write-rules",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Write the remap rules used, given and inferred from --target's structure, to FILE "
    "with the evidence for each as a comment (read back with --remap-file); FILE.rs writes a "
    "Rust KeyRemapper::from_patterns(vec![...]) list. Layouts only the target's values decided "
    "follow as commented --module-type flags.",
)
@click.option(
    "--no-infer",
    is_flag=True,
    help="With --target: only check and suggest; do not apply remap rules inferred from the "
    "structure of the source and the target.",
)
@click.option(
    "--param-ids-from",
    type=InputPath(),
    metavar="FILE",
    help="Give the output the ParamIds of a Burn model (.bpk) or optimizer record, by name.",
)
@click.option(
    "--paths-from",
    type=InputPath(),
    metavar="MODEL",
    help="Converting an old Burn optimizer record (optim-N.mpk): write burn 0.22's ParamId -> "
    "parameter path metadata, taken from the model record of the same checkpoint.",
)
@click.option(
    "--dedupe-tied",
    is_flag=True,
    help="Write one copy of each group of tied tensors (one storage in a .pt, e.g. an embedding "
    "and an LM head), as Hugging Face's converter does; the dropped names go into the "
    "'tied_weights' metadata.",
)
@click.option(
    "--max-shard-size",
    metavar="SIZE",
    type=ByteSize(),
    help="Write Hugging Face sharded safetensors (DST must end in .safetensors): shards of at "
    "most SIZE (e.g. 5GB, 500MB, 2GiB) named like model-00001-of-00003.safetensors, plus "
    "DST.index.json.",
)
@click.option(
    "--max-output-size",
    metavar="SIZE",
    type=ByteSize(),
    help="Refuse to write more than SIZE bytes of tensors (e.g. 8GiB). Default: 1 GiB or 64 "
    "times the input's size, whichever is larger; views expanded with stride 0 can describe "
    "far more data than the input holds.",
)
@click.option(
    "--shards",
    "share",
    metavar="K/N",
    type=SharePart(),
    help="With --max-shard-size: write only this run's share of the shards (K, K+N, K+2N ..., "
    "1-based) and no index, so N runs (a Slurm array, several machines on one file system) "
    "split the work; then one run with --index-only writes the index. The shard plan is the "
    "same in every run.",
)
@click.option(
    "--index-only",
    is_flag=True,
    help="With --max-shard-size: write only DST.index.json (reads no tensor), after the "
    "--shards runs.",
)
@click.option(
    "--dequantize",
    type=click.Choice(["f32", "f16", "bf16"], case_sensitive=False),
    is_flag=False,
    flag_value="f32",
    default=None,
    help="GGUF: decode block-quantized tensors (Q4_0, Q8_0, Q4_K, Q6_K, the IQ types, MXFP4 ...) "
    "to f32 (the default), f16 or bf16, with the values gguf-py's dequantize gives; without it "
    "such a tensor exits 4 unless DST is GGUF.",
)
@click.option(
    "--arch",
    metavar="NAME",
    help="GGUF output: general.architecture (llama, qwen2, gemma3 ...), which llama.cpp reads "
    "first to load a model; required unless SRC is a GGUF file that has it.",
)
@click.option(
    "--alignment",
    type=int,
    metavar="N",
    help="GGUF output: start each tensor's data at a multiple of N bytes (a power of two up to "
    "1 MiB; written as general.alignment). Default: SRC's, else 32.",
)
@click.option(
    "--quantize",
    type=click.Choice(["q8_0", "q4_0"], case_sensitive=False),
    help="GGUF output: quantize as llama.cpp's convert_hf_to_gguf.py does, bit for bit as "
    "gguf-py: float weights (*.weight) of 2+ dimensions become Q8_0/Q4_0 blocks; 1-D tensors, "
    "norms and other floats F32; weights whose rows are not whole 32-value blocks F16; "
    "integer tensors and GGUF blocks stay as they are. Sets general.file_type and "
    "general.quantization_version.",
)
@click.option(
    "--set-meta",
    multiple=True,
    metavar="KEY=TYPE:VALUE",
    help="GGUF output: set key KEY, repeatable (replaced where SRC has it, else added at the "
    "end). TYPE: u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str, or arr[TYPE] with a JSON "
    'array as VALUE: general.name=str:My Model, general.tags=arr[str]:["a","b"], '
    "x=arr[arr[i32]]:[[1,2],[3]].",
)
@click.option(
    "--drop-meta",
    multiple=True,
    metavar="KEY",
    help="GGUF output: leave out SRC's key KEY, repeatable (a key SRC lacks exits 2).",
)
@jobs_option(
    "Copy tensor bytes, and compute casts and transposes, with up to N threads (at most 4), "
    "and with --max-shard-size write N shards at once; the files are the same for any N."
)
@write_options
@remote_options
@output_options
def command(
    src: str,
    dst: str,
    adapters: tuple[str, ...],
    rules: tuple[str, ...],
    state_key: str | None,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    module_types: tuple[str, ...],
    module_types_file: str | None,
    target: str | None,
    allow_partial: bool,
    ties: tuple[str, ...],
    remap_file: str | None,
    write_rules: str | None,
    no_infer: bool,
    param_ids_from: str | None,
    paths_from: str | None,
    dedupe_tied: bool,
    max_shard_size: int | None,
    max_output_size: int | None,
    share: tuple[int, int] | None,
    index_only: bool,
    dequantize: str | None,
    arch: str | None,
    alignment: int | None,
    quantize: str | None,
    set_meta: tuple[str, ...],
    drop_meta: tuple[str, ...],
    jobs: int,
    to: str | None,
    force: bool,
    no_fsync: bool,
    dry_run: bool,
    quiet: bool,
    fmt: OutputFormat,
) -> int:
    """``ckptctl convert``: see ``HELP``."""
    from ckptctl.dtypes import DType
    from ckptctl.ops.convert import ConvertOptions

    options = ConvertOptions(
        state_key=state_key,
        dequantize=None if dequantize is None else DType.parse(dequantize),
        arch=arch,
        alignment=alignment,
        quantize=None if quantize is None else quantize.lower(),
        set_meta=set_meta,
        drop_meta=drop_meta,
        include=include,
        exclude=exclude,
        remap=rules,
        adapters=adapters,
        module_types=module_types,
        module_types_file=module_types_file,
        target=target,
        allow_partial=allow_partial,
        ties=ties,
        remap_file=remap_file,
        write_rules=write_rules,
        infer=not no_infer,
        param_ids_from=param_ids_from,
        paths_from=paths_from,
        max_shard_bytes=max_shard_size,
        max_output_bytes=max_output_size,
        dedupe_tied=dedupe_tied,
        to=to,
        force=force,
        fsync=not no_fsync,
        jobs=jobs,
        shards=share,
        index_only=index_only,
        dry_run=dry_run,
    )
    return run_conversion(src, dst, options, fmt=fmt, quiet=quiet)

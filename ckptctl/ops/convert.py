"""``convert`` and ``remap``: one pipeline from any readable checkpoint to any writable format.

select (``--state-key``, ``--include``/``--exclude``) → remap rules → adapters in the order given
→ target matching (``--target``) → ParamIds (``--param-ids-from``) → writer. Metadata work happens
at once; data work stays lazy and streams one tensor at a time. Entries that need no change keep
their file-backed data, so the writer copies raw bytes without decoding them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ckptctl.adapters import PlanItem
from ckptctl.adapters.pipeline import (
    NAMES_SHOWN,
    PipelineOptions,
    rule_inputs,
    run_pipeline,
)
from ckptctl.adapters.rename import parse_rules, unmatched_rules
from ckptctl.adapters.rope import needs_interleaving
from ckptctl.errors import CkptError, SelectionError, UnsupportedError
from ckptctl.fix import Note, Option
from ckptctl.formats import format_for_output, open_checkpoint, save_checkpoint
from ckptctl.formats.sharded import write_sharded
from ckptctl.model import STORED_TYPE, CheckpointKind, TensorData, describe_groups
from ckptctl.ops._facts import model_facts
from ckptctl.ops._infer import (
    definition_order,
    fits,
    infer_from_reference,
    rule_text,
    same_values,
)
from ckptctl.ops._migrate import migration_plan
from ckptctl.ops._select import (
    add_ties,
    describe_outside,
    outside_state_key,
    select_state_key,
    tied_groups,
    top_level_groups,
)
from ckptctl.ops._size_limit import check_size
from ckptctl.report.model import ConvertReport, PlanRow
from ckptctl.safety import Verdict
from ckptctl.sources import set_copy_threads

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ckptctl.dtypes import DType
    from ckptctl.model import Checkpoint, JSONValue, Progress, TensorEntry
    from ckptctl.report.summary import AmbiguousTensor, LoadingSummary
    from ckptctl.sources import ByteSource

    Specs = Mapping[str, tuple[DType, tuple[int, ...]]]

#: Formats whose metadata map is free-form user metadata (and so worth carrying over).
_USER_METADATA_FORMATS = frozenset({"safetensors", "burnpack"})


@dataclass(frozen=True)
class ConvertOptions:
    """Everything ``convert``/``remap`` can be asked to do besides reading and writing.

    Attributes:
        state_key: descend into this dotted key of a nested checkpoint first.
        include: keep only tensors matching one of these regexes (Rust dialect).
        exclude: drop tensors matching any of these regexes.
        remap: ordered ``PATTERN=REPLACEMENT`` rules (Burn's KeyRemapper syntax).
        adapters: adapter names, applied in order after the remap rules.
        module_types: explicit ``REGEX=Type`` rules for the layout adapters.
        module_types_file: a JSON file ``{regex: type}`` with more such rules.
        target: a checkpoint whose names and shapes the output must fit.
        allow_partial: write even when the target reports missing tensors or errors.
        param_ids_from: a burnpack model or Burn optimizer record to take ParamIds from.
        paths_from: a model (Burn record or .bpk) whose ParamIds give an optimizer record's
            id -> parameter path metadata (burn 0.22's optimizer record layout).
        max_shard_bytes: write Hugging Face sharded safetensors with shards of at most this size.
        max_output_bytes: refuse to write more tensor bytes than this (None: the default limit,
            ``ops._size_limit.size_limit`` of the input's size).
        to: the output format by name, when ``dst``'s extension does not tell (``.ckpt``).
        strict: a remap rule that matches no tensor name fails the conversion (nothing written).
        dedupe_tied: write one copy of each group of tied tensors (the same storage), as
            Hugging Face's converter does, naming the dropped aliases in metadata
            (``tied_weights``: a JSON map of kept name to dropped names).
        force: overwrite the destination.
        fsync: flush the output to disk before renaming it into place.
        jobs: threads copying tensor bytes at once, and shards written at once with
            ``max_shard_bytes`` (the files do not depend on it).
        shards: ``(K, N)``: with ``max_shard_bytes``, write only this run's share of the shards
            (K, K+N, K+2N ..., 1-based) and no index, so N runs can share the work.
        index_only: with ``max_shard_bytes``, write only the index (after the ``shards`` runs).
        dry_run: plan only, write nothing.
        ties: ``NAME=SOURCE`` declarations: write a copy of the source tensor SOURCE under
            NAME, before the remap rules (a tied weight the file stores once).
        remap_file: a rules file (``PATTERN=REPLACEMENT`` lines, ``#`` comments) whose rules
            run before ``remap``.
        write_rules: write the rules used (given and inferred from the target) to this file,
            with their evidence; ``.rs`` writes a Rust ``KeyRemapper::from_patterns`` list.
        infer: with a target the output does not fit, infer remap rules from the structure of
            both (``ops._structure``) and apply the proven ones.
        dequantize: decode GGUF's block-quantized tensors to this float dtype (F32, F16 or
            BF16; the values gguf-py's ``dequantize`` gives, rounded to nearest even for the
            16-bit ones); None: such a tensor is refused unless the output is GGUF.
        arch: a GGUF output's ``general.architecture`` (required unless the source is a GGUF
            file that has it).
        alignment: a GGUF output's ``general.alignment`` (a power of two; default 32).
        quantize: ``q8_0`` or ``q4_0``: quantize a GGUF output's weights as llama.cpp's
            converter does (``formats.gguf._edit``), bit for bit as gguf-py.
        set_meta: ``KEY=TYPE:VALUE`` key/values a GGUF output gets (replaced in place or
            added at the end; ``formats.gguf.parse_set_meta``).
        drop_meta: keys of a GGUF source the GGUF output leaves out.
        progress: called as ``progress(nbytes, total)`` when each tensor is written, with the
            tensor's size and the total bytes of all output tensors.

    ``pipeline`` gives the part shared with ``diff``.
    """

    state_key: str | None = None
    dequantize: DType | None = None
    arch: str | None = None
    alignment: int | None = None
    quantize: str | None = None
    set_meta: tuple[str, ...] = ()
    drop_meta: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    remap: tuple[str, ...] = ()
    adapters: tuple[str, ...] = ()
    module_types: tuple[str, ...] = ()
    module_types_file: str | None = None
    target: str | None = None
    allow_partial: bool = False
    param_ids_from: str | None = None
    paths_from: str | None = None
    max_shard_bytes: int | None = None
    max_output_bytes: int | None = None
    to: str | None = None
    strict: bool = False
    dedupe_tied: bool = False
    force: bool = False
    fsync: bool = True
    jobs: int = 1
    shards: tuple[int, int] | None = None
    index_only: bool = False
    dry_run: bool = False
    ties: tuple[str, ...] = ()
    remap_file: str | None = None
    write_rules: str | None = None
    infer: bool = True
    progress: Progress | None = field(default=None, compare=False)

    @property
    def pipeline(self) -> PipelineOptions:
        """The selection, rename and adapter part (``module_types_file`` read here)."""
        module_map = _read_json_map(self.module_types_file) if self.module_types_file else {}
        from_file = tuple(r for r, _ in read_rules_file(self.remap_file)) if self.remap_file else ()
        return PipelineOptions(
            include=self.include,
            exclude=self.exclude,
            remap=from_file + self.remap,
            adapters=self.adapters,
            module_types=self.module_types,
            module_map=module_map,
        )


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    options: ConvertOptions | None = None,
) -> ConvertReport:
    """Convert ``src`` to ``dst``; the extension of ``dst`` picks the output format.

    The output is written atomically: on any failure ``dst`` is left as it was. With a target
    that reports missing tensors or errors nothing is written (``report.ok`` is False) unless
    ``allow_partial`` is set.

    Args:
        src: any readable checkpoint (format detected from content).
        dst: ``.safetensors``, ``.bpk``, ``.pt``/``.pth``/``.bin`` or ``.gguf``.
        options: what to select, rename, adapt, match and how to write.

    Returns:
        A :class:`~ckptctl.report.model.ConvertReport`.

    Raises:
        InputError: ``src`` (or the target / ParamId file) is unreadable, corrupt or unsafe.
        UnsupportedError: ``src`` holds something the output format cannot (e.g. FP8 in .bpk).
        SelectionError: unknown output extension, state key, adapter or bad rule.
        OutputError: ``dst`` exists (without ``force``), is ``src``, or cannot be written.

    Example:
        >>> convert("model.safetensors", "model.bpk",
        ...         ConvertOptions(adapters=("pytorch-to-burn",)))  # doctest: +SKIP
    """
    opts = options or ConvertOptions()
    _check_split(opts)
    out_spec = format_for_output(dst, opts.to)
    _check_gguf_options(opts, out_spec.name)
    target_specs = _read_specs(opts.target) if opts.target else None
    with open_checkpoint(src) as ckpt:
        everything = _dequantized(ckpt.entries(), opts.dequantize)
        entries = add_ties(select_state_key(everything, opts.state_key, ckpt), opts.ties)
        modules = ckpt.structure.modules if ckpt.structure and not opts.state_key else None
        pipeline = replace(opts.pipeline, facts=model_facts(ckpt, src, opts.adapters))
        order = definition_order(ckpt.format, entries) if opts.target else None
        try:
            plan = _plan(src, opts, entries, pipeline, target_specs, modules, order)
        except UnsupportedError as exc:  # an adapter refusing what this file holds
            raise exc.with_path(src) from None
        items, inferred = plan.items, plan.inferred
        warnings = plan.warnings
        outside = outside_state_key(everything, opts.state_key, ckpt)
        if outside and opts.state_key is not None:
            warnings.insert(0, describe_outside(outside, len(everything), opts.state_key))
        outputs = [item.entry for item in items if item.entry is not None]
        _refuse_stored_types(outputs, out_spec.name, decoding=opts.dequantize is not None)
        if opts.param_ids_from:
            outputs, note = _attach_param_ids(outputs, opts.param_ids_from)
            warnings.append(note)
        summary, fixes, ok, refused, strict_failed = _judge(
            opts, entries, outputs, plan, target_specs, modules
        )
        if not outputs and not opts.dry_run:
            warnings.append("no tensors to write: the output holds none")
        metadata = dict(ckpt.metadata) if ckpt.format in _USER_METADATA_FORMATS else {}
        paths, migration_notes = migration_plan(ckpt, out_spec.name, opts.paths_from)
        metadata.update(paths)
        warnings += migration_notes
        if out_spec.name != "pytorch":  # the .pt writer keeps shared storages shared
            outputs, items, tied_note = _tied(outputs, items, metadata, dedupe=opts.dedupe_tied)
            if tied_note is not None:
                warnings.append(tied_note)
        scalars: Mapping[str, JSONValue] = ckpt.scalars
        if out_spec.name == "gguf":
            outputs, scalars, gguf_notes = _gguf_output(ckpt, outputs, opts)
            warnings += gguf_notes
        by_name = {e.name: e for e in entries}
        rows = tuple(_plan_row(item, by_name[item.source]) for item in items)
        warnings += _lost_in_output(out_spec.name, outputs, metadata, ckpt.scalars)
        warnings += _source_notes(ckpt, opts.state_key)
        report = ConvertReport(
            source=os.fspath(src),
            destination=os.fspath(dst),
            source_format=ckpt.format,
            destination_format=out_spec.name,
            plan=rows,
            written=False,
            dry_run=opts.dry_run,
            warnings=tuple(warnings),
            summary=summary,
            fixes=fixes,
            ok=ok,
            refused=refused,
            inferred=inferred,
        )
        if opts.dry_run or (not ok and (not opts.allow_partial or strict_failed)):
            return report
        return _write(src, dst, opts, ckpt, outputs, (metadata, scalars), report)


def _source_notes(ckpt: Checkpoint, state_key: str | None) -> list[str | Note]:
    """What the output does not say of its source: a nested checkpoint written whole, a pickle
    that needed trust (read without running it)."""
    notes: list[str | Note] = []
    if ckpt.kind is CheckpointKind.NESTED and state_key is None:
        where = describe_groups(dict(list(top_level_groups(ckpt).items())[:4]))
        notes.append(
            Note(
                "the source is a nested checkpoint: every tensor is written under its key "
                f"path ({where}); pass {{fix0}} to write only one part, e.g. the model weights",
                (Option("state_key", takes_value=True),),
            )
        )
    if ckpt.safety is not None and ckpt.safety.verdict is not Verdict.SAFE:
        notes.append(
            f"the source pickle is {ckpt.safety.describe()}: read without running any of it; "
            "the output holds only tensors and needs no trust"
        )
    return notes


@dataclass
class _Plan:
    """What the conversion does: the pipeline as inferred, its items, and what it found."""

    pipeline: PipelineOptions
    items: list[PlanItem]
    inferred: tuple[tuple[str, str, str], ...]
    ambiguous: list[AmbiguousTensor]
    warnings: list[str | Note]


def _plan(
    src: str | os.PathLike[str],
    opts: ConvertOptions,
    entries: list[TensorEntry],
    pipeline: PipelineOptions,
    target_specs: Specs | None,
    modules: Mapping[str, tuple[str, Mapping[str, JSONValue]]] | None,
    order: list[str] | None = None,
) -> _Plan:
    """Run the pipeline; with a target, infer the rules (``order``: the source's module
    definition order, when its format keeps it) and the layouts it decides; add the RoPE
    adapter a config.json beside the source calls for (or say it is needed)."""
    items, notes = run_pipeline(entries, pipeline, target_specs, modules)
    inferred: tuple[tuple[str, str, str], ...] = ()
    ambiguous: list[AmbiguousTensor] = []
    if opts.target and target_specs is not None and opts.infer and not fits(items, target_specs):
        inferred, ambiguous = infer_from_reference(
            entries, pipeline, target_specs, opts.target, order
        )
        if inferred:
            pipeline = replace(pipeline, remap=pipeline.remap + tuple(
                rule_text(p, r) for p, r, _ in inferred))  # fmt: skip
            items, notes = run_pipeline(entries, pipeline, target_specs, modules)
    declared: list[tuple[str, str, Note]] = []
    if target_specs is not None and opts.target is not None:
        unproven = _unproven_layouts(items, target_specs)
        declared = _layouts_by_values(unproven, items, opts.target) if unproven else []
        if declared:  # the target's values decide square layouts nothing else decided
            pipeline = replace(pipeline, module_types=pipeline.module_types + tuple(
                rule for rule, _, _ in declared))  # fmt: skip
            items, notes = run_pipeline(entries, pipeline, target_specs, modules)
    if opts.write_rules:
        _write_rules(opts.write_rules, pipeline, inferred, declared, force=opts.force)
    warnings: list[str | Note] = [*notes, *(note for _, _, note in declared)]
    rope = _rope_moves(items, pipeline.adapters)
    heads = _config_heads(src) if rope else None
    if heads is not None:  # the model's config.json says the head counts: no need to ask
        pipeline = replace(pipeline, adapters=(*pipeline.adapters, heads[0]))
        items, notes = run_pipeline(entries, pipeline, target_specs, modules)
        warnings.append(_rope_added(len(rope), *heads))
        rope = []
    if rope and target_specs is None:
        warnings.append(_rope_note(len(rope)))
    elif target_specs is not None:  # unproven: the check refuses them
        from ckptctl.report.summary import AmbiguityKind, AmbiguousTensor

        ambiguous += [AmbiguousTensor(out, AmbiguityKind.ROPE, (src,))
                      for src, out in rope if out in target_specs]  # fmt: skip
    return _Plan(pipeline, items, inferred, ambiguous, warnings)


def _judge(
    opts: ConvertOptions,
    entries: list[TensorEntry],
    outputs: list[TensorEntry],
    plan: _Plan,
    target_specs: Specs | None,
    modules: Mapping[str, tuple[str, Mapping[str, JSONValue]]] | None,
) -> tuple[LoadingSummary | None, tuple[Option, ...], bool, str | Note | None, bool]:
    """The Tensor Loading Summary against the target and ``--strict``: (summary, fixes, ok,
    why nothing is written, whether --strict refused)."""
    pipeline, items, ambiguous = plan.pipeline, plan.items, plan.ambiguous
    summary = None
    fixes: tuple[Option, ...] = ()
    ok = True
    refused: str | Note | None = None
    if target_specs is not None:
        from ckptctl.ops.summary import specs_of, summarize

        ambiguous += _unproven_layouts(items, target_specs)
        result = summarize(specs_of(outputs), target_specs, given=tuple(opts.adapters),
                           ambiguous=ambiguous)  # fmt: skip
        ties, copies = _suggest_ties(result, entries, pipeline, target_specs, modules)
        if ties:
            result = replace(result, fixes=(*result.fixes, *ties))
        plan.warnings.extend(copies)
        result = _named_by_source(result, items)
        summary, fixes = result, result.fixes
        ok = result.ok
        if result.ambiguous:
            refused = _refuse_ambiguous(result.ambiguous)
        elif not ok:
            refused = Note(
                "the output does not fit {fix0}; fix the names (see above) or pass {fix1}",
                (Option("target", takes_value=True), Option("allow_partial")),
            )
    strict_failed = False
    if opts.strict and ok:
        every = rule_inputs(entries, replace(pipeline, include=(), exclude=()))
        unused = unmatched_rules(every, parse_rules(opts.remap))
        if unused:
            ok, strict_failed = False, True
            numbers = ", ".join(f"#{r.number}" for r in unused)
            refused = Note(
                f"remap rule {numbers} matches no tensor name ({{fix0}})", (Option("strict"),)
            )
    return summary, fixes, ok, refused, strict_failed


def _write(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    opts: ConvertOptions,
    ckpt: Checkpoint,
    outputs: list[TensorEntry],
    meta: tuple[dict[str, str], Mapping[str, JSONValue]],
    report: ConvertReport,
) -> ConvertReport:
    """Write ``outputs`` with ``meta`` (metadata, scalars: a GGUF output's key/values), to one
    file or shards, and say what was written."""
    metadata, scalars = meta
    check_size(
        sum(e.nbytes for e in outputs),
        ckpt.input_bytes,
        opts.max_output_bytes,
        path=src,
        doing=f"converting it to {os.fspath(dst)} would write",
        inputs="the input's",
        wanted="output",
        option="max_output_bytes",
    )
    if opts.progress is not None:
        report_bytes, total = opts.progress, sum(e.nbytes for e in outputs)
        report_bytes(0, total)  # the bar knows its end before the first tensor is read
        outputs = [_with_progress(e, lambda n: report_bytes(n, total)) for e in outputs]
    with set_copy_threads(opts.jobs):
        if opts.max_shard_bytes is not None:
            written = write_sharded(
                dst,
                outputs,
                metadata,
                max_shard_bytes=opts.max_shard_bytes,
                force=opts.force,
                sources=_sources(src, ckpt),
                fsync=opts.fsync,
                jobs=opts.jobs,
                part=opts.shards,
                index_only=opts.index_only,
            )
            return replace(
                report,
                written=bool(written),
                destination=written[-1] if written else report.destination,
                destination_format=_sharded_format(opts, written),
                bytes_written=sum(os.path.getsize(p) for p in written),
                warnings=report.warnings
                + (() if written else ("this share of the shards is empty: nothing written",)),
            )
        save_checkpoint(
            dst,
            outputs,
            metadata,
            scalars=scalars,
            force=opts.force,
            sources=_sources(src, ckpt),
            fsync=opts.fsync,
            to=opts.to,
        )
    return replace(report, written=True, bytes_written=os.path.getsize(dst))


def _check_split(opts: ConvertOptions) -> None:
    """``shards`` and ``index_only`` split a sharded output, one way at a time.

    Raises:
        SelectionError: either without ``max_shard_bytes``, both at once, or a share K/N with
            K outside 1..N.
    """
    if opts.shards is None and not opts.index_only:
        return
    if opts.max_shard_bytes is None:
        raise SelectionError(
            "writing a share of the shards or only the index needs a sharded output",
            hint=Note("pass {fix0} (the same in every run)", (Option("max_shard_bytes", "5GB"),)),
        )
    if opts.shards is not None and opts.index_only:
        raise SelectionError(
            "a run writes either a share of the shards or only the index, not both",
            hint="run the shares first, then one run with only the index",
        )
    if opts.shards is not None:
        part, parts = opts.shards
        if parts < 1 or not 1 <= part <= parts:
            raise SelectionError(
                f"share {part}/{parts} does not exist: K/N needs 1 <= K <= N",
                hint=f"the shares of {max(parts, 1)} runs are 1/{max(parts, 1)} .. "
                f"{max(parts, 1)}/{max(parts, 1)}",
            )


#: The options that shape a GGUF output, by their ``ConvertOptions`` name.
_GGUF_OPTIONS = ("arch", "alignment", "quantize", "set_meta", "drop_meta")


def _check_gguf_options(opts: ConvertOptions, out_format: str) -> None:
    """The GGUF options apply to a GGUF output only.

    Raises:
        SelectionError: one is given for another format, or ``quantize`` names no type.
    """
    given = [n for n in _GGUF_OPTIONS if getattr(opts, n) not in (None, ())]
    if given and out_format != "gguf":
        raise SelectionError(
            f"{', '.join(given)}: only a GGUF output takes {'these' if len(given) > 1 else 'it'}, "
            f"and the output is {out_format}",
            hint=Note("write to a .gguf file, or leave out {fix0}",
                      (Option(given[0], takes_value=True),)),
        )  # fmt: skip
    from ckptctl.formats.gguf import QUANTIZE_TYPES

    if opts.quantize is not None and opts.quantize not in QUANTIZE_TYPES:
        raise SelectionError(
            f"cannot quantize to {opts.quantize!r}",
            hint="ckptctl quantizes to " + ", ".join(QUANTIZE_TYPES),
        )


def _gguf_output(
    ckpt: Checkpoint, outputs: list[TensorEntry], opts: ConvertOptions
) -> tuple[list[TensorEntry], dict[str, object], list[str | Note]]:
    """A GGUF output's key/values (the source's, edited) and tensors (quantized)."""
    from ckptctl.formats.gguf import edit_key_values, quantize_entries

    is_gguf = ckpt.format == "gguf"
    merged = is_gguf and ckpt.sharding is not None
    values = edit_key_values(
        ckpt.typed_metadata if is_gguf else {},
        arch=opts.arch,
        alignment=opts.alignment,
        quantize=opts.quantize,
        set_meta=opts.set_meta,
        drop_meta=opts.drop_meta,
        merged_split=merged,
    )
    notes: list[str | Note] = []
    if merged:
        notes.append("the split model is written as one file, with split.count 0 (as "
                     "gguf-split --merge writes it)")  # fmt: skip
    if opts.quantize is not None:
        outputs, counts = quantize_entries(outputs, opts.quantize)
        made = ", ".join(f"{n} tensor{'s' if n != 1 else ''} {t}" for t, n in counts.items())
        notes.append(
            Note(
                "{fix0}: " + (made or "no float tensors")
                + " (1-D tensors, norms and non-weights stay F32; rows that are not whole "
                "blocks F16, as llama.cpp's convert_hf_to_gguf.py)",
                (Option("quantize", opts.quantize),),
            )
        )  # fmt: skip
    return outputs, values, notes


def _sharded_format(opts: ConvertOptions, written: list[str]) -> str:
    if opts.index_only:
        return "safetensors index"
    if opts.shards is not None:
        part, parts = opts.shards
        return f"safetensors, {len(written)} shards (share {part}/{parts}, no index)"
    return f"safetensors, {len(written) - 1} shards"


def _config_heads(src: str | os.PathLike[str]) -> tuple[str, str] | None:
    """``("rope-interleaved:H,KV", where)`` from the ``config.json`` of a Hugging Face model
    directory ``src`` or beside the file ``src`` (``num_attention_heads``, and
    ``num_key_value_heads``, which defaults to it as in transformers' ``LlamaConfig``); None
    when there is none, it cannot be read, or it does not say."""
    from ckptctl.errors import InputError
    from ckptctl.ops._facts import read_config

    try:
        found = read_config(src)
    except InputError:
        return None
    if found is None:
        return None
    values, config = found
    heads = values.get("num_attention_heads")
    kv = values.get("num_key_value_heads", heads)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in (heads, kv)):
        return None
    return f"rope-interleaved:{heads},{kv}", config


def _write_rules(
    path: str,
    pipeline: PipelineOptions,
    inferred: tuple[tuple[str, str, str], ...],
    declared: list[tuple[str, str, Note]],
    *,
    force: bool,
) -> None:
    """``--write-rules``: the given rules, the inferred ones with their evidence, and the
    layouts the target's values decided (as commented ``--module-type`` flags)."""
    given = [(r, "given") for r in pipeline.remap[: len(pipeline.remap) - len(inferred)]]
    made = [(rule_text(p, r), e) for p, r, e in inferred]
    decided = [(rule, evidence) for rule, evidence, _ in declared]
    write_rules_file(path, [*given, *made], force=force, module_types=decided)


def _rope_moves(items: list[PlanItem], adapters: tuple[str, ...]) -> list[tuple[str, str]]:
    """The (source, output) q/k projections that need a RoPE adapter ``adapters`` lacks."""
    return needs_interleaving([(i.source, i.entry.name) for i in items if i.entry], adapters)


def _rope_added(count: int, adapter: str, where: str) -> str:
    """The note that says the RoPE adapter was added with the config's head counts."""
    return (
        f"{count} q/k projections go from Hugging Face's q_proj/k_proj to wq/wk: added "
        f"--adapter {adapter} (the RoPE layout Meta's Llama and llama-burn use; head counts "
        f"from {where})"
    )


def _rope_note(count: int) -> Note:
    """The RoPE adapter to add when Hugging Face's q/k projections land on Meta's names."""
    return Note(
        f"{count} q/k projections go from Hugging Face's q_proj/k_proj to wq/wk: Hugging "
        "Face stores them in the half-split RoPE layout, Meta's Llama and llama-burn in "
        "the interleaved one; add {fix0} with the model's num_attention_heads and "
        "num_key_value_heads (its config.json)",
        (Option("adapters", "rope-interleaved:HEADS,KV_HEADS"),),
    )


#: Most candidates compared by digest for one missing tensor: tied copies come in twos and
#: threes (a decoder bias, a head beside its embeddings); more are no group of copies.
MAX_EQUAL_COPIES = 8


def _suggest_ties(
    summary: LoadingSummary,
    entries: list[TensorEntry],
    pipeline: PipelineOptions,
    target: Specs,
    modules: Mapping[str, tuple[str, Mapping[str, JSONValue]]] | None,
) -> tuple[list[Option], list[Note]]:
    """``ties`` for missing target tensors that exactly one source tensor could be a copy of
    (its shape, or a rank-2 transpose, and the same kind: weight, bias), each verified: with
    the copy, the pipeline makes the missing name with the target's shape. Candidates that
    hold the same bytes (equal digests: tied copies) are one: the shortest name is suggested,
    and a note names the others. A last resort: none while another fix (a rule, an adapter)
    is suggested, as that may make the name."""
    if summary.fixes:
        return [], []
    unsure = {a.name for a in summary.ambiguous}
    out: list[Option] = []
    notes: list[Note] = []
    digests: dict[str, str] = {}
    for missing in summary.missing[: NAMES_SHOWN * 3]:
        name = missing.name
        if name in unsure:
            continue
        shape = target[name][1]
        kind = _kind(name)
        fits = [e for e in entries if _kind(e.name) == kind and (e.shape == shape or (
            len(shape) == 2 and shape[0] != shape[1] and e.shape == shape[::-1]))]  # fmt: skip
        source, copies = _one_source(fits, digests)
        if source is None or not _copy_fits(source.renamed(name), entries, pipeline, target,
                                            modules):  # fmt: skip
            continue
        tie = Option("ties", f"{name}={source.name}")
        out.append(tie)
        if copies:
            others = ", ".join(repr(c.name) for c in copies)
            notes.append(Note(
                f"{name!r} can be {source.name!r} or {others}: they hold the same bytes (equal "
                "digests: tied copies), so either is right; {fix0} takes the first",
                (tie,),
            ))  # fmt: skip
    return out, notes


def _one_source(
    fits: list[TensorEntry], digests: dict[str, str]
) -> tuple[TensorEntry | None, list[TensorEntry]]:
    """The one candidate, or, when every candidate holds the same bytes (same dtype and shape,
    equal digests, never the names), the one with the shortest name (the tied copy sits
    deeper: ``predictions.decoder.bias`` beside ``predictions.bias``) and the others."""
    from ckptctl.ops.manifest import digest_entry

    if len(fits) == 1:
        return fits[0], []
    if not 1 < len(fits) <= MAX_EQUAL_COPIES or len({(e.dtype, e.shape) for e in fits}) != 1:
        return None, []
    for e in fits:
        if e.name not in digests:
            digests[e.name] = digest_entry(e)
    if len({digests[e.name] for e in fits}) != 1:
        return None, []
    first = min(fits, key=lambda e: (e.name.count("."), len(e.name)))  # min is stable
    return first, [e for e in fits if e is not first]


def _copy_fits(
    copy: TensorEntry,
    entries: list[TensorEntry],
    pipeline: PipelineOptions,
    target: Specs,
    modules: Mapping[str, tuple[str, Mapping[str, JSONValue]]] | None,
) -> bool:
    """Whether the pipeline makes ``copy``'s name, with the target's shape, from the copy."""
    try:
        items, _ = run_pipeline([*entries, copy], pipeline, target, modules)
    except CkptError:
        return False
    made = next((i.entry for i in items if i.source == copy.name and i.entry is not None), None)
    return made is not None and made.name == copy.name and made.shape == target[copy.name][1]


def _kind(name: str) -> str:
    """``weight`` or ``bias`` (norm ``gamma``/``beta`` too), from a name's last word."""
    last = name.rpartition(".")[2].rpartition("_")[2]
    return {"gamma": "weight", "beta": "bias"}.get(last, last)


def _layouts_by_values(
    unproven: list[AmbiguousTensor], items: list[PlanItem], target: str
) -> list[tuple[str, str, Note]]:
    """``--module-type`` rules for the square weights whose target holds their values (as is:
    not a Linear; transposed: a Linear), each with its evidence and the note that reports it."""
    import re

    by_name = {i.entry.name: i.entry for i in items if i.entry is not None}
    out = []
    with open_checkpoint(target) as ref:
        for amb in unproven:
            found = same_values(by_name[amb.name], ref[amb.name])
            if found is None:
                continue
            module_type = "Linear" if found == "transposed" else "Other"
            rule = f"^{re.escape(amb.name)}$={module_type}"
            evidence = (
                f"value check: the target's {amb.name!r} holds the source's values "
                f"{'transposed: a Linear' if found == 'transposed' else 'as they are: kept'}"
            )
            note = Note(evidence + "; to keep this without the target pass {fix0}",
                        (Option("module_types", rule),))  # fmt: skip
            out.append((rule, evidence, note))
    return out


def _unproven_layouts(items: list[PlanItem], target: Specs) -> list[AmbiguousTensor]:
    """Target tensors filled by a square weight whose layout nothing decided."""
    from ckptctl.report.summary import AmbiguityKind, AmbiguousTensor

    return [
        AmbiguousTensor(i.entry.name, AmbiguityKind.LAYOUT, (i.source,))
        for i in items
        if i.entry is not None and i.entry.name in target and any(a.unproven for a in i.actions)
    ]


def _refuse_ambiguous(ambiguous: tuple[AmbiguousTensor, ...]) -> Note:
    from ckptctl.report.summary import AmbiguityKind

    n = len(ambiguous)
    names = ", ".join(repr(a.name) for a in ambiguous[:NAMES_SHOWN])
    names += ", ..." if n > NAMES_SHOWN else ""
    if any(a.kind is AmbiguityKind.ROPE for a in ambiguous):
        return Note(
            f"{n} target tensor{'s are' if n != 1 else ' is'} unproven ({names}): Hugging "
            "Face's q/k projections in the half-split RoPE layout where wq/wk take the "
            "interleaved one; add {fix0} with the model's num_attention_heads and "
            "num_key_value_heads, or pass {fix1}",
            (Option("adapters", "rope-interleaved:HEADS,KV_HEADS"), Option("allow_partial")),
        )
    return Note(
        f"{n} target tensor{'s are' if n != 1 else ' is'} unproven ({names}): nothing decides "
        "which source or layout fills "
        f"{'them' if n != 1 else 'it'}; name {'them' if n != 1 else 'it'} with {{fix0}} or "
        "{fix1}, or pass {fix2}",
        (Option("remap", takes_value=True), Option("module_types", takes_value=True),
         Option("allow_partial")),
    )  # fmt: skip


def read_rules_file(path: str) -> list[tuple[str, str]]:
    """``PATTERN=REPLACEMENT`` lines of a rules file, in order, with the comment after each.

    Blank lines and lines starting with ``#`` are skipped; a rule's trailing ``  # ...`` is its
    comment (evidence). The rules are checked as ``--remap`` rules are.

    Raises:
        SelectionError: the file cannot be read, or a rule is invalid (named by line).
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise SelectionError(f"cannot read rules file: {exc.strerror}", path=path) from None
    except UnicodeDecodeError:
        raise SelectionError("rules file is not UTF-8 text", path=path) from None
    out = []
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        rule, _, comment = text.partition("  # ")
        try:
            parse_rules([rule.strip()])
        except SelectionError as exc:
            raise SelectionError(
                f"line {number}: {exc.message}", path=path, hint=exc.hint
            ) from None
        out.append((rule.strip(), comment.strip()))
    return out


def write_rules_file(
    path: str,
    rules: list[tuple[str, str]],
    *,
    force: bool,
    module_types: list[tuple[str, str]] | None = None,
) -> None:
    """Write rules with their evidence: one ``PATTERN=REPLACEMENT  # evidence`` per line, or,
    for a ``.rs`` path, a Rust ``KeyRemapper::from_patterns(vec![...])`` expression.
    ``module_types`` (``--module-type`` rules the target's values decided, with their
    evidence) follow as comments: they are no remap rules, but the port needs them too."""
    import shlex

    from ckptctl._io import atomic_write

    comment = "//" if path.endswith(".rs") else "#"
    also = "".join(
        f"{comment} --module-type {shlex.quote(rule)}  ({evidence})\n"
        for rule, evidence in module_types or ()
    )
    if also:
        also = (
            f"{comment} not remap rules: the layouts the target's values decided; without the "
            f"target, pass them to convert:\n{also}"
        )
    if path.endswith(".rs"):
        body = "".join(
            f"    // {comment}\n    ({_rust(p)}, {_rust(r)}),\n"
            for p, r, comment in ((*_split_rule(t), c) for t, c in rules)
        )
        text = f"KeyRemapper::from_patterns(vec![\n{body}])\n{also}"
    else:
        text = (
            "# remap rules (ckptctl --remap-file), applied in order\n"
            + "".join(f"{t}  # {c}\n" for t, c in rules)
            + also
        )
    with atomic_write(path, force=force) as f:
        f.write(text.encode())


def _split_rule(text: str) -> tuple[str, str]:
    rule = parse_rules([text])[0]
    return rule.pattern, rule.replacement


#: The most ``#`` a Rust raw string literal may be delimited by (the Rust reference).
RUST_RAW_HASHES = 255


def _named_by_source(summary: LoadingSummary, items: Sequence[PlanItem]) -> LoadingSummary:
    """``summary`` with its unused tensors named as the source has them (a renamed one is in
    neither file) and, when nothing is missing (else an unused tensor may be what a fix
    needs), the ``--exclude`` regex that leaves out just those, when a short one does."""
    if not summary.unused:
        return summary
    unused = set(summary.unused)
    source_of = {item.entry.name: item.source for item in items if item.entry is not None}
    sources = tuple(source_of.get(name, name) for name in summary.unused)
    kept = [
        item.source for item in items if item.entry is not None and item.entry.name not in unused
    ]
    exclude = None if summary.missing or summary.errors else _exclude_regex(sources, kept)
    return replace(summary, unused_sources=sources, unused_exclude=exclude)


#: Unused tensors an ``--exclude`` suggestion may list by name, when they share no last segment.
EXCLUDE_NAMES_LISTED = 3


def _exclude_regex(dropped: Sequence[str], kept: Sequence[str]) -> str | None:
    r"""A regex (Rust dialect) matching every name in ``dropped`` and none in ``kept``: their
    common last segment (``\.num_batches_tracked$``), or the names themselves when few."""
    import re

    tails = {name.rsplit(".", 1)[-1] for name in dropped}
    if len(tails) == 1 and all("." in name for name in dropped):
        pattern = rf"\.{re.escape(tails.pop())}$"
        if not any(re.search(pattern, name) for name in kept):
            return pattern
    if len(dropped) <= EXCLUDE_NAMES_LISTED:
        return "^(" + "|".join(re.escape(name) for name in dropped) + ")$"
    return None


def _rust(text: str) -> str:
    """``text`` as a Rust string literal: raw (``r#"..."#``), with one ``#`` more than the
    longest run of ``#`` after a quote in it (a raw string ends at its first quote followed
    by as many ``#`` as it began with); where that would exceed Rust's limit, an ordinary
    literal with backslash escapes."""
    import re

    longest = max((len(run) for run in re.findall(r'"(#*)', text)), default=0)
    if longest < RUST_RAW_HASHES:
        hashes = "#" * (longest + 1)
        return f'r{hashes}"{text}"{hashes}'

    def escape(c: str) -> str:
        if c in '"\\':
            return "\\" + c
        return c if c.isprintable() else f"\\u{{{ord(c):x}}}"

    return '"' + "".join(map(escape, text)) + '"'


#: Metadata key naming the aliases ``dedupe_tied`` left out (kept name -> dropped names).
TIED_METADATA_KEY = "tied_weights"


def _tied(
    outputs: list[TensorEntry], items: list[PlanItem], metadata: dict[str, str], *, dedupe: bool
) -> tuple[list[TensorEntry], list[PlanItem], str | Note | None]:
    """Tied tensors are one storage in a ``.pt`` but copies in other formats: say so, or keep
    one of each group (``dedupe``) and record the others in ``metadata``."""
    groups = tied_groups(outputs)
    if not groups:
        return outputs, items, None
    extra = sum(e.nbytes for g in groups for e in g[1:])
    aliases = sum(len(g) - 1 for g in groups)
    if not dedupe:
        return (
            outputs,
            items,
            Note(
                f"{aliases} tensor{'s are' if aliases != 1 else ' is'} tied to another (one "
                f"storage in the source): written as separate copies, {extra:,} bytes more; "
                "{fix0} keeps one copy of each",
                (Option("dedupe_tied"),),
            ),
        )
    dropped = {e.name for g in groups for e in g[1:]}
    metadata[TIED_METADATA_KEY] = json.dumps({g[0].name: [e.name for e in g[1:]] for g in groups})
    kept = [e for e in outputs if e.name not in dropped]
    plan = [
        PlanItem(i.source, None, i.actions) if i.entry is not None and i.entry.name in dropped
        else i
        for i in items
    ]  # fmt: skip
    note = f"{aliases} tied alias{'es' if aliases != 1 else ''} left out ({extra:,} bytes); " \
        f"their names are in the {TIED_METADATA_KEY!r} metadata"  # fmt: skip
    return kept, plan, note


def _plan_row(item: PlanItem, before: TensorEntry) -> PlanRow:
    after = item.entry
    return PlanRow(
        source=before.name,
        target=None if after is None else after.name,
        dtype_before=before.dtype.value,
        dtype_after=None if after is None else after.dtype.value,
        shape_before=before.shape,
        shape_after=None if after is None else after.shape,
        actions=tuple(a.describe() for a in item.actions),
        kinds=tuple(str(a.kind) for a in item.actions),
    )


def _read_specs(path: str) -> Specs:
    from ckptctl.ops.summary import specs_of

    with open_checkpoint(path) as ref:
        return specs_of(ref.values())


def _read_json_map(path: str) -> dict[str, object]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise SelectionError(f"cannot read module-type map: {exc.strerror}", path=path) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise SelectionError(f"module-type map is not valid JSON: {exc}", path=path) from None
    if not isinstance(data, dict):
        raise SelectionError("module-type map must be a JSON object {regex: type}", path=path)
    return data


def read_param_ids(path: str | os.PathLike[str]) -> tuple[dict[str, int], str]:
    """ParamIds by tensor name from a burnpack model or a Burn optimizer record.

    A model carries ``param_id`` on its tensors; an optimizer record names its tensors
    ``<id>.<field>`` and maps each decimal id to the parameter's path in its metadata.

    Returns:
        ``(name -> id, kind)`` where kind is ``model`` or ``optimizer record``.

    Raises:
        SelectionError: the file carries no ParamIds.
    """
    with open_checkpoint(path) as ckpt:
        by_path = {k: v for k, v in ckpt.metadata.items() if k.isdigit()}
        if by_path:
            ids: dict[str, int] = {}
            for key, name in by_path.items():
                ids.setdefault(name, int(key))
            return ids, "optimizer record"
        ids = {e.name: e.param_id for e in ckpt.values() if e.param_id is not None}
        if ids:
            return ids, "model"
    raise SelectionError(
        "carries no ParamIds (neither a burnpack model with param_id nor an optimizer record)",
        path=os.fspath(path),
    )


def _attach_param_ids(entries: list[TensorEntry], path: str) -> tuple[list[TensorEntry], str]:
    ids, kind = read_param_ids(path)
    out = [replace(e, param_id=ids[e.name]) if e.name in ids else e for e in entries]
    matched = sum(1 for e in entries if e.name in ids)
    return out, f"ParamIds from {kind} {path}: {matched} of {len(entries)} tensors matched"


def _lost_in_output(
    out_format: str,
    outputs: list[TensorEntry],
    metadata: Mapping[str, str],
    scalars: Mapping[str, object],
) -> list[str]:
    """Warnings for what the output format has no place for (nothing is lost silently)."""
    lost = []
    ids = sum(1 for e in outputs if e.param_id is not None)
    if ids and out_format != "burnpack":
        lost.append(
            f"{ids} ParamIds are not kept: {out_format} has no place for them, so Burn optimizer "
            "state saved against them will not attach to a model loaded from this file"
        )
    if scalars and out_format != "burnpack":
        lost.append(
            f"{len(scalars)} burnpack scalars are not kept: {out_format} has no place for them"
        )
    if metadata and out_format == "pytorch":
        keys = ", ".join(f"'{k}'" for k in sorted(metadata)[:NAMES_SHOWN])
        keys += ", ..." if len(metadata) > NAMES_SHOWN else ""
        lost.append(
            f"metadata entry {keys} is not kept: a .pt state_dict has none"
            if len(metadata) == 1
            else f"{len(metadata)} metadata entries are not kept ({keys}): "
            "a .pt state_dict has none"
        )
    return lost


def _dequantized(entries: list[TensorEntry], dtype: DType | None) -> list[TensorEntry]:
    """``entries`` with every block-quantized GGUF tensor decoded to ``dtype`` (None: as they
    are)."""
    if dtype is None or not any(STORED_TYPE in e.extra for e in entries):
        return entries
    from ckptctl.adapters.cast import cast_entry
    from ckptctl.dtypes import DType
    from ckptctl.formats.gguf import can_decode, dequantized

    out = []
    for entry in entries:
        if can_decode(entry):
            entry = dequantized(entry)
            entry = entry if dtype is DType.F32 else cast_entry(entry, dtype)
        out.append(entry)
    return out


def _refuse_stored_types(outputs: list[TensorEntry], out_format: str, *, decoding: bool) -> None:
    """A stored type with no DType (GGUF's ``Q4_K`` blocks, an unknown GGML type) holds no
    values a plain format can take: refused rather than written as its bytes.

    Raises:
        UnsupportedError: the first such tensor, unless the output is the same format.
    """
    for entry in outputs:
        stored = entry.extra.get(STORED_TYPE)
        if stored is None or out_format == "gguf":
            continue
        if "quantized" not in entry.extra:
            raise UnsupportedError(
                f"tensor {entry.name!r} has GGML {stored}, unknown to ckptctl: it cannot be "
                f"decoded or written to {out_format}"
            )
        if decoding:  # --dequantize decoded every type it can
            why = (
                "of a big-endian file, which ckptctl decodes little-endian only"
                if entry.extra.get("byte_order") == "big"
                else "which ckptctl cannot decode (nor can gguf-py)"
            )
            raise UnsupportedError(
                f"tensor {entry.name!r} is stored as {stored} blocks {why}",
                hint=Note("leave it out with {fix0}", (Option("exclude", takes_value=True),)),
            )
        raise UnsupportedError(
            f"tensor {entry.name!r} is stored as {stored} blocks, which {out_format} cannot "
            "hold; decode it with --dequantize",
            hint=Note("or leave it out with {fix0}", (Option("exclude", takes_value=True),)),
        )


def _sources(src: str | os.PathLike[str], ckpt: Checkpoint) -> list[str]:
    paths = [os.fspath(src)]
    if ckpt.sharding is not None:  # shards sit beside the index (src may be its directory)
        base = os.path.dirname(ckpt.sharding.index)
        paths.extend([ckpt.sharding.index, *(os.path.join(base, s) for s in ckpt.sharding.shards)])
    return list(dict.fromkeys(paths))  # src may be the index itself


@dataclass(frozen=True, eq=False)
class _ProgressData(TensorData):
    """Reports a tensor's size once, when the writer first reaches for its bytes."""

    inner: TensorData
    nbytes: int
    report: Callable[[int], None]
    _done: list[bool] = field(default_factory=lambda: [False])

    def _tick(self) -> None:
        if not self._done[0]:
            self._done[0] = True
            self.report(self.nbytes)

    def read(self) -> memoryview:
        self._tick()
        return self.inner.read()

    def file_range(self) -> tuple[ByteSource, int] | None:
        self._tick()
        return self.inner.file_range()

    def read_range(self, start: int, length: int) -> bytes | memoryview:
        # delegated, so block-wise adapters keep reading with pread, not through the map
        self._tick()
        return self.inner.read_range(start, length)

    def is_ranged(self) -> bool:
        return self.inner.is_ranged()

    def read_into(self, start: int, out: memoryview) -> None:
        self._tick()
        self.inner.read_into(start, out)

    def compute_step(self) -> int:
        return self.inner.compute_step()


def _with_progress(entry: TensorEntry, report: Callable[[int], None]) -> TensorEntry:
    return replace(entry, data=_ProgressData(entry.data, entry.nbytes, report))

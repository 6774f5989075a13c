"""``diff``: compare two checkpoints tensor by tensor, across formats.

A is read through the same pipeline as ``convert`` (``--state-key``, ``--remap`` rules, then
adapters, with module types decided against B's shapes); B is read as is (``--state-key-b``).
Names are matched exactly; each common tensor gets one status:

``identical``   same dtype, same shape, identical bytes;
``equal``       same dtype and shape, bytes differ but every value is equal as a number
                (NaN payloads, -0.0 against 0.0);
``close``       same dtype and shape, every value within ``rtol``/``atol`` (``numpy.isclose``
                with B as reference and NaN equal to NaN) but not all equal;
``dtype``       dtypes differ, every value within tolerance (F32 against its BF16 rounding);
``different``   same shape, some values not within tolerance (any dtypes);
``transposed``  rank 2, A is ``[m, n]`` and B ``[n, m]`` (or both square), ``A.T`` within
                tolerance of B;
``shape``       shapes differ otherwise; values are not compared.

The checkpoints match *within tolerance* (exit 0) when both hold the same tensor names and every
tensor is ``identical``, ``equal`` or ``close``; with ``values_only`` a ``dtype`` tensor passes
too. They are *identical* only when every tensor is ``identical`` (the same bytes).

Values are compared one tensor at a time in fixed-size chunks (``ckptctl.ops._compare``), so
memory stays bounded whatever the file sizes.

JSON form (``report.diff.diff_json``), keys in this order::

    {"schema_version": 1, "a": str, "b": str, "format_a": str, "format_b": str,
     "identical": bool,          # same names, every tensor the same bytes
     "within_tolerance": bool,   # same names, every tensor passes (exit 0)
     "options": {"state_key": str|null, "state_key_b": str|null, "remap": [str], "adapters": [str],
                 "module_types": [str], "rtol": float, "atol": float, "values_only": bool},
     "counts": {"tensors_a", "tensors_b", "common", "only_in_a", "only_in_b", "identical", "equal",
                "close", "dtype", "different", "transposed", "shape": int},
     "only_in_a": [{"name": str, "suggestion": str|null}],   # suggestion: a B-only name
     "only_in_b": [{"name": str, "suggestion": str|null}],   # suggestion: an A-only name
     "tensors": [{"name", "status", "dtype_a", "dtype_b", "shape_a": [int], "shape_b": [int],
                  "numel": int, "max_abs", "max_rel": float|"inf"|null,
                  "mismatched", "nan_mismatched": int|null}],   # every common tensor, A order
     "fixes": [str], "suggested_command": str|null, "warnings": [str]}

Names are A's names after the remap rules and adapters. ``max_abs``/``max_rel``/``mismatched``/
``nan_mismatched`` are null when values were not compared (``shape``), the string ``"inf"`` when
infinite.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
from ckptctl.errors import SelectionError, UnsupportedError
from ckptctl.fix import Command, Note, Option
from ckptctl.formats import open_checkpoint
from ckptctl.model import listed_dtype
from ckptctl.ops._compare import compare_values
from ckptctl.ops._facts import model_facts
from ckptctl.ops._select import compile_regex, select_state_key
from ckptctl.ops._size_limit import check_size
from ckptctl.ops._stream import tracked
from ckptctl.ops.matching import did_you_mean, ranked_suggestion, suggest_fixes
from ckptctl.ops.summary import specs_of
from ckptctl.report.diff import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    DiffOptions,
    DiffReport,
    DiffStatus,
    OnlyIn,
    TensorDiff,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from ckptctl.adapters import PlanItem
    from ckptctl.dtypes import DType
    from ckptctl.model import JSONValue, TensorEntry
    from ckptctl.ops._compare import ValueDiff

    Specs = Mapping[str, tuple[DType, tuple[int, ...]]]

#: Jaro comparisons spent on "Did you mean" per side (a name against every name of the other
#: side); names beyond the budget get no suggestion. The first ten always get one.
SUGGESTION_BUDGET = 200_000
SUGGEST_AT_LEAST = 10


def diff_checkpoints(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    options: DiffOptions | None = None,
    *,
    jobs: int = 1,
    max_compare_bytes: int | None = None,
) -> DiffReport:
    """Compare two checkpoints of any formats, tensor by tensor, in bounded memory.

    Args:
        a: the first checkpoint; the remap rules and adapters apply to it.
        b: the second checkpoint (the reference for relative differences).
        options: selection, renaming, adapters and tolerances.
        jobs: tensor pairs compared at once, in threads (the report does not depend on it;
            memory grows to ``jobs`` tensors' working sets).
        max_compare_bytes: refuse to compare more tensor bytes of A than this (None: the
            default, ``ops._size_limit.size_limit`` of both inputs' size).

    Returns:
        A :class:`DiffReport`; ``report.ok`` (``within_tolerance``) says whether they match,
        ``report.identical`` whether every tensor has the same bytes.

    Raises:
        InputError: a file is unreadable, corrupt or unsafe.
        UnsupportedError: a file uses something ckptctl cannot handle, or the tensors to
            compare exceed ``max_compare_bytes``.
        SelectionError: bad state key, remap rule, adapter name or tolerance.

    Example:
        >>> report = diff_checkpoints("model.safetensors", "model.bpk")  # doctest: +SKIP
        >>> report.ok  # doctest: +SKIP
        True
    """
    opts = options or DiffOptions()
    for option, value in (("rtol", opts.rtol), ("atol", opts.atol)):
        if not (math.isfinite(value) and value >= 0):
            raise SelectionError(
                f"a tolerance must be a finite number >= 0, not {value!r}",
                hint=Note("check {fix0}", (Option(option, repr(value)),)),
            )
    with open_checkpoint(a) as ckpt_a, open_checkpoint(b) as ckpt_b:
        entries_b = select_state_key(ckpt_b.entries(), opts.state_key_b, ckpt_b)
        specs_b = specs_of(entries_b)
        entries_a = select_state_key(ckpt_a.entries(), opts.state_key, ckpt_a)
        pipeline = PipelineOptions(
            remap=opts.remap,
            adapters=opts.adapters,
            module_types=opts.module_types,
            facts=model_facts(ckpt_a, a, opts.adapters),  # as convert reads them
        )
        modules = ckpt_a.structure.modules if ckpt_a.structure and not opts.state_key else None
        try:
            items, warnings = run_pipeline(entries_a, pipeline, specs_b, modules)
        except UnsupportedError as exc:  # an adapter refusing what A holds
            raise exc.with_path(a) from None
        outputs = [item.entry for item in items if item.entry is not None]
        if opts.pattern is not None:
            regex = compile_regex(opts.pattern, "pattern")
            outputs = [e for e in outputs if regex.search(e.name)]
            entries_b = [e for e in entries_b if regex.search(e.name)]
        by_name_b = {e.name: e for e in entries_b}
        total = sum(e.nbytes for e in outputs if e.name in by_name_b)
        pairs = [(e, by_name_b[e.name]) for e in outputs if e.name in by_name_b]
        inputs = ckpt_a.input_bytes + ckpt_b.input_bytes
        check_size(
            total,
            inputs,
            max_compare_bytes,
            path=os.fspath(a),
            doing="comparing it would read",
            inputs="the inputs'",
            wanted="comparison",
            option="max_compare_bytes",
        )
        compared = [entry for entry, _ in pairs]
        rows = list(tracked(compared, _compare_all(pairs, opts, jobs), opts.progress))
        format_a, format_b = ckpt_a.format, ckpt_b.format
    names_a = [e.name for e in outputs]
    set_a = set(names_a)
    only_a = sorted(n for n in set_a if n not in by_name_b)
    only_b = sorted(n for n in by_name_b if n not in set_a)
    report = DiffReport(
        a=os.fspath(a),
        b=os.fspath(b),
        format_a=format_a,
        format_b=format_b,
        tensors_a=len(outputs),
        tensors_b=len(entries_b),
        tensors=tuple(rows),
        only_in_a=_with_suggestions(only_a, only_b),
        only_in_b=_with_suggestions(only_b, only_a),
        options=opts,
        warnings=tuple(warnings),
    )
    engine = _Engine(entries_a, pipeline, specs_b, b, modules, items)
    return _with_fixes(report, outputs, entries_b, engine)


@dataclass(frozen=True)
class _Engine:
    """What the structure engine needs to infer A's names from B's (as ``convert --target``)."""

    entries_a: list[TensorEntry]
    pipeline: PipelineOptions
    specs_b: Specs
    path_b: str | os.PathLike[str]
    modules: Mapping[str, tuple[str, Mapping[str, JSONValue]]] | None
    items: list[PlanItem]


def _with_fixes(
    report: DiffReport, outputs: list[TensorEntry], entries_b: list[TensorEntry], engine: _Engine
) -> DiffReport:
    """``report`` with the fixes that reconcile A with B, its suggestions and commands."""
    only_a = [o.name for o in report.only_in_a]
    only_b = [o.name for o in report.only_in_b]
    shapes_a = {e.name: e.shape for e in outputs}
    shapes_b = {e.name: e.shape for e in entries_b}
    for row in report.tensors:
        if row.status is DiffStatus.SHAPE:
            # values were compared and do not match transposed: hide the swapped shape from
            # suggest_fixes so that it proposes no transposing adapter on shapes alone
            shapes_a[row.name] = shapes_b[row.name]
    fixes = _fixes(report, shapes_a, shapes_b)
    inferred = (  # no rule of the name matcher's: what convert --target would infer
        _names_from_structure(engine)
        if only_a and only_b and not any(f.name == "remap" for f in fixes)
        else None
    )
    if inferred is not None:  # the --target engine made every name of B: its rules, verified
        fixes, toward_b = inferred
        report = replace(
            report,
            only_in_a=tuple(OnlyIn(o.name, toward_b.get(o.name)) for o in report.only_in_a),
            only_in_b=tuple(
                OnlyIn(o.name, _first_source(toward_b, o.name)) for o in report.only_in_b
            ),
        )
        return replace(
            report,
            fixes=tuple(fixes),
            suggested_command=suggest_command(report, fixes),
            convert_command=_convert_command(report, fixes),
        )
    command = suggest_command(report, fixes) if fixes else None
    if any(f.name == "remap" for f in fixes):  # the verified rules rank first (issue 13)
        report = replace(
            report,
            only_in_a=_with_suggestions(only_a, only_b, ranked_suggestion(fixes, forward=True)),
            only_in_b=_with_suggestions(only_b, only_a, ranked_suggestion(fixes)),
        )
    return replace(report, fixes=tuple(fixes), suggested_command=command)


def _compare_all(
    pairs: list[tuple[TensorEntry, TensorEntry]], opts: DiffOptions, jobs: int
) -> Iterator[TensorDiff]:
    """``compare_entries`` of every pair, in order; on ``jobs`` threads when asked (chunked
    ``pread`` and numpy comparisons release the GIL, so shards are read in parallel)."""

    def one(pair: tuple[TensorEntry, TensorEntry]) -> TensorDiff:
        return compare_entries(pair[0], pair[1], rtol=opts.rtol, atol=opts.atol)

    if jobs <= 1 or len(pairs) < 2:
        yield from map(one, pairs)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(jobs, len(pairs))) as pool:
        yield from pool.map(one, pairs)


def compare_entries(a: TensorEntry, b: TensorEntry, *, rtol: float, atol: float) -> TensorDiff:
    """Classify one pair of same-named tensors (see the module docstring for the statuses).

    Args:
        a: the tensor from A (after remap rules and adapters).
        b: the tensor from B.
        rtol: relative tolerance (of ``|b|``).
        atol: absolute tolerance.

    Returns:
        The tensor's status and value differences.
    """
    status: DiffStatus
    values: ValueDiff | None = None
    if a.shape == b.shape:
        values = compare_values(a, b, rtol=rtol, atol=atol)
        if values.identical_bytes:
            status = DiffStatus.IDENTICAL
        elif not values.allclose:
            status = DiffStatus.DIFFERENT
            if _is_square(a.shape):  # a square weight stored the other way round
                turned = compare_values(a, b, rtol=rtol, atol=atol, transposed=True)
                if turned.allclose:
                    status, values = DiffStatus.TRANSPOSED, turned
        elif a.dtype is not b.dtype:
            status = DiffStatus.DTYPE
        else:
            status = DiffStatus.EQUAL if values.equal else DiffStatus.CLOSE
    elif len(a.shape) == 2 and b.shape == (a.shape[1], a.shape[0]):
        turned = compare_values(a, b, rtol=rtol, atol=atol, transposed=True)
        status = DiffStatus.TRANSPOSED if turned.allclose else DiffStatus.SHAPE
        values = turned if turned.allclose else None
    else:
        status = DiffStatus.SHAPE
    return TensorDiff(
        name=a.name,
        status=status,
        dtype_a=listed_dtype(a),
        dtype_b=listed_dtype(b),
        shape_a=a.shape,
        shape_b=b.shape,
        numel=a.numel,
        max_abs=None if values is None else values.max_abs,
        max_rel=None if values is None else values.max_rel,
        mismatched=None if values is None else values.mismatched,
        nan_mismatched=None if values is None else values.nan_mismatched,
        relative_change=None if values is None else values.relative_change,
        cosine=None if values is None else values.cosine,
    )


def _is_square(shape: tuple[int, ...]) -> bool:
    return len(shape) == 2 and shape[0] == shape[1] and shape[0] > 1


#: Adapters the structure engine tries when none is given: A in PyTorch's layout, B in Burn's,
#: or the other way round.
_LAYOUT_ADAPTERS = (("pytorch-to-burn",), ("burn-to-pytorch",))


def _names_from_structure(engine: _Engine) -> tuple[list[Option], dict[str, str]] | None:
    """What ``convert --target B`` infers for A's names (the same engine: structure, then the
    reference's values), kept only when the result has every tensor of B with its shape: the
    fixes (the rules, and a layout adapter when none was given and one was needed) and, for each
    A-side name the fixes move, the name of B it becomes. None when nothing makes B's names."""
    from ckptctl.errors import CkptError
    from ckptctl.ops._infer import fits, infer_from_reference, rule_text

    given, entries_a, specs_b = engine.pipeline, engine.entries_a, engine.specs_b
    after_given = {i.source: i.entry.name for i in engine.items if i.entry is not None}
    tries = [()] if given.adapters else [(), *_LAYOUT_ADAPTERS]
    for extra in tries:
        pipeline = replace(given, adapters=given.adapters + extra)
        try:
            rules, ambiguous = infer_from_reference(
                entries_a, pipeline, specs_b, os.fspath(engine.path_b)
            )
            remap = tuple(rule_text(p, r) for p, r, _ in rules)
            trial, _ = run_pipeline(
                entries_a, replace(pipeline, remap=pipeline.remap + remap), specs_b, engine.modules
            )
        except CkptError:  # an adapter that does not apply to these tensors
            continue
        if ambiguous or not fits(trial, specs_b):
            continue
        toward_b = {
            after_given[i.source]: i.entry.name
            for i in trial
            if i.entry is not None and i.source in after_given
            and after_given[i.source] != i.entry.name
        }  # fmt: skip
        fixes = [Option("remap", rule) for rule in remap]
        return fixes + [Option("adapters", name) for name in extra], toward_b
    return None


def _convert_command(report: DiffReport, fixes: Sequence[Option]) -> Command:
    """``convert A OUT`` with A's options and ``fixes``: A written as B names and lays it out
    (OUT takes B's extension)."""
    opts = report.options
    ext = os.path.splitext(report.b)[1]
    out = "OUT" + (
        ext if ext in (".safetensors", ".bpk", ".pt", ".pth", ".bin") else ".safetensors"
    )
    parts: list[Option] = []
    if opts.state_key is not None:
        parts.append(Option("state_key", opts.state_key))
    parts += _options_with_fixes(opts, fixes)
    return Command("convert", (report.a, out), tuple(parts))


def _options_with_fixes(opts: DiffOptions, fixes: Sequence[Option]) -> list[Option]:
    """The remap rules, module types and adapters given, with ``fixes`` added: new rules after
    the given ones (rules apply in order, before adapters), other fixes last."""
    parts = [Option("remap", rule) for rule in opts.remap]
    parts += [f for f in fixes if f.name == "remap"]
    parts += [Option("module_types", rule) for rule in opts.module_types]
    parts += [Option("adapters", name) for name in opts.adapters]
    parts += [f for f in fixes if f.name != "remap"]
    return parts


def _first_source(toward_b: Mapping[str, str], name: str) -> str | None:
    """The A-side name that becomes ``name`` of B (the first, when several do)."""
    return next((a for a, b in toward_b.items() if b == name), None)


def _with_suggestions(
    names: Sequence[str],
    others: Sequence[str],
    suggest: Callable[[str, Sequence[str]], str | None] = did_you_mean,
) -> tuple[OnlyIn, ...]:
    """``OnlyIn`` rows with "Did you mean" (Burn's, unless ``suggest`` says) against the other
    side's names (``docs/formats/burn-store.md#did-you-mean``)."""
    if not others:
        return tuple(OnlyIn(n) for n in names)
    limit = max(SUGGEST_AT_LEAST, SUGGESTION_BUDGET // len(others))
    out = []
    for i, name in enumerate(names):
        found = suggest(name, others) if i < limit else None
        out.append(OnlyIn(name, found if found is None or _same_role(name, found) else None))
    return tuple(out)


#: Parameter names that play the same role under another name (a norm's ``gamma``/``beta`` in
#: Burn are PyTorch's ``weight``/``bias``).
_ROLES = {"gamma": "weight", "beta": "bias"}


def _same_role(a: str, b: str) -> bool:
    """Whether two tensor names end in the same parameter role: "Did you mean" never suggests a
    bias for a weight, or a running mean for a variance."""

    def role(name: str) -> str:
        last = name.rpartition(".")[2]
        return _ROLES.get(last, last)

    return role(a) == role(b)


def _fixes(
    report: DiffReport, shapes_a: dict[str, tuple[int, ...]], shapes_b: dict[str, tuple[int, ...]]
) -> list[Option]:
    """Options that would reconcile A with B, verified by ``suggest_fixes`` where it applies."""
    opts = report.options
    fixes: list[Option] = []
    turned = any(t.status is DiffStatus.TRANSPOSED for t in report.tensors)
    if report.only_in_a or report.only_in_b or turned:
        missing = [o.name for o in report.only_in_b]
        unused = [o.name for o in report.only_in_a]
        fixes = suggest_fixes(missing, unused, shapes_a, shapes_b)
    given = {Option("adapters", name) for name in opts.adapters}
    fixes = [f for f in fixes if f not in given]
    if fixes:
        return fixes
    differing = report.differing
    if not opts.values_only and differing and all(t.status is DiffStatus.DTYPE for t in differing):
        if report.only_in_a or report.only_in_b:
            return []
        return [Option("values_only")]
    return []


def suggest_command(report: DiffReport, fixes: Sequence[Option]) -> Command:
    """The ``diff`` invocation of ``report`` with ``fixes`` added.

    New ``remap`` rules go after the ones given (rules apply in order, before adapters).
    """
    opts = report.options
    parts: list[Option] = []
    if opts.state_key is not None:
        parts.append(Option("state_key", opts.state_key))
    if opts.state_key_b is not None:
        parts.append(Option("state_key_b", opts.state_key_b))
    parts += _options_with_fixes(opts, fixes)
    if opts.rtol != DEFAULT_RTOL:
        parts.append(Option("rtol", repr(opts.rtol)))
    if opts.atol != DEFAULT_ATOL:
        parts.append(Option("atol", repr(opts.atol)))
    if opts.values_only and Option("values_only") not in fixes:
        parts.append(Option("values_only"))
    return Command("diff", (report.a, report.b), tuple(parts))

"""The one JSON path of every report (``--json``): deterministic keys, ``schema_version``.

:func:`to_json` dispatches on the report type; nested parts (the Tensor Loading Summary, the
Optimizer State Check, a pickle verdict) use the same function, so each has one JSON form.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from ckptctl._lazy import for_type
from ckptctl.fix import spell
from ckptctl.report.model import SCHEMA_VERSION

if TYPE_CHECKING:
    from collections.abc import Callable

    from ckptctl.model import JSONValue
    from ckptctl.report.config import ConfigReport
    from ckptctl.report.diff import DiffReport, OnlyIn, TensorDiff
    from ckptctl.report.manifest import HashCheck, HashReport, TensorHash
    from ckptctl.report.model import ConvertReport, HeaderReport, LsReport
    from ckptctl.report.optimizer import OptimizerCheck, Orphan
    from ckptctl.report.quant import QuantModule
    from ckptctl.report.safe_globals import SafeGlobalsReport
    from ckptctl.report.summary import LoadingSummary
    from ckptctl.report.tree import TreeNode
    from ckptctl.report.values import ShowReport, TensorStats
    from ckptctl.report.verify import FileResult, Finding, VerifyReport
    from ckptctl.safety import PickleSafety


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def dumps(obj: JSONValue) -> str:
    """One line of JSON ending in a newline (pipe it to ``jq .`` to read it).

    Non-ASCII is escaped, so strings from files never reach a terminal raw. No indentation: it
    forces Python's slow pure-Python encoder, five times slower on a 20,000-tensor listing.
    """
    return json.dumps(obj, ensure_ascii=True, allow_nan=False, default=str) + "\n"


def to_json(report: object) -> dict[str, JSONValue]:
    """The JSON object of a report (or of a part of one: a summary, a check, a verdict).

    Raises:
        TypeError: no JSON form for this type.
    """
    convert = for_type(_CONVERTERS, report)
    if convert is None:
        raise TypeError(f"no JSON rendering for {type(report).__name__}")
    return convert(report)


def _ls(report: LsReport) -> dict[str, JSONValue]:
    total = report.total
    tensors: list[dict[str, JSONValue]] = []
    for row in report.tensors:
        item: dict[str, JSONValue] = {
            "name": row.name,
            "dtype": row.dtype,
            "shape": list(row.shape),
            "parameters": row.parameters,
            "nbytes": row.nbytes,
        }
        if row.buffer:
            item["buffer"] = True
        if row.param_id is not None:
            item["param_id"] = row.param_id
        if row.module_type is not None:
            item["module_type"] = row.module_type
        if row.stats is not None or report.with_stats:
            item["stats"] = None if row.stats is None else to_json(row.stats)
        tensors.append(item)
    out: dict[str, JSONValue] = {
        "schema_version": SCHEMA_VERSION,
        "path": report.path,
        "format": report.format,
        "kind": report.kind,
        "tensors": tensors,
        "metadata": dict(report.metadata),
        "totals": [
            {
                "dtype": t.dtype,
                "tensors": t.tensors,
                "parameters": t.parameters,
                "buffers": t.buffers,
                "numel": t.numel,  # deprecated: all elements, parameters and buffers alike
                "nbytes": t.nbytes,
            }
            for t in report.totals
        ],
        "total": {
            "tensors": total.tensors,
            "parameters": total.parameters,
            "buffers": total.buffers,
            "nbytes": total.nbytes,
        },
        "notes": list(report.notes),
    }
    if report.scalars:
        out["scalars"] = dict(report.scalars)
    if report.state_key is not None:
        out["state_key"] = report.state_key
    if report.file_tensors is not None and report.total_tensors is not None:
        out["outside_state_key"] = report.file_tensors - report.total_tensors
    if report.safety is not None:
        out["pickle"] = to_json(report.safety)
    if report.objects:
        out["objects"] = dict(report.objects)
    if report.stored is not None:
        out["stored"] = {"parameters": report.stored[0], "nbytes": report.stored[1]}
    if report.tree is not None:
        out["tree"] = to_json(report.tree)
    if report.quantized:
        out["quantized"] = [to_json(q) for q in report.quantized]
        out["logical_parameters"] = report.logical_parameters
    return out


def _quant(module: QuantModule) -> dict[str, JSONValue]:
    return {
        "module": module.module,
        "scheme": module.scheme.value,
        "bits": module.bits,
        "granularity": None if module.granularity is None else module.granularity.value,
        "group_size": module.group_size,
        "block": None if module.block is None else list(module.block),
        "shape": None if module.shape is None else list(module.shape),
        "parameters": module.parameters,
        "stored_parameters": module.stored_parameters,
        "nbytes": module.nbytes,
        "tensors": list(module.tensors),
        "problems": list(module.problems),
    }


def _tree(node: TreeNode) -> dict[str, JSONValue]:
    out: dict[str, JSONValue] = {
        "name": node.name,
        "path": node.path,
        "tensors": node.tensors,
        "parameters": node.parameters,
        "buffers": node.buffers,
        "nbytes": node.nbytes,
    }
    if node.is_tensor:
        out["dtype"] = node.dtype
        out["shape"] = list(node.shape or ())
        if node.tied_to is not None:
            out["tied_to"] = node.tied_to
        return out
    if node.indices:
        out["repeat"] = len(node.indices)
        out["indices"] = list(node.indices)
    if node.hidden:
        out["hidden"] = node.hidden
    out["children"] = [_tree(c) for c in node.children]
    return out


def _header(report: HeaderReport) -> dict[str, JSONValue]:
    layout = report.layout
    regions: list[dict[str, JSONValue]] = []
    for region in layout.regions:
        item: dict[str, JSONValue] = {
            "kind": region.kind,
            "start": region.start,
            "end": region.end,
        }
        if region.name is not None:
            item["name"] = region.name
        if region.note is not None:
            item["note"] = region.note
        regions.append(item)
    return {
        "schema_version": SCHEMA_VERSION,
        "path": report.path,
        "format": layout.format,
        "file_size": layout.file_size,
        "header": layout.header,
        "regions": regions,
        "bytes_by_kind": report.bytes_by_kind(),
        "facts": dict(layout.facts),
    } | (
        {"damage": {"message": report.damage.message, "hint": _text(report.damage.hint)}}
        if report.damage is not None
        else {}
    )


def _convert(report: ConvertReport) -> dict[str, JSONValue]:
    return {
        "schema_version": SCHEMA_VERSION,
        "source": report.source,
        "destination": report.destination,
        "source_format": report.source_format,
        "destination_format": report.destination_format,
        "dry_run": report.dry_run,
        "written": report.written,
        "ok": report.ok,
        "bytes_written": report.bytes_written,
        "plan": [
            {
                "source": row.source,
                "target": row.target,
                "dtype_before": row.dtype_before,
                "dtype_after": row.dtype_after,
                "shape_before": list(row.shape_before),
                "shape_after": None if row.shape_after is None else list(row.shape_after),
                "actions": list(row.actions),
            }
            for row in report.plan
        ],
        "warnings": [str(w) for w in report.warnings],
        "summary": None if report.summary is None else to_json(report.summary),
        "fixes": [spell(f) for f in report.fixes],
        "inferred_rules": [
            {"pattern": p, "replacement": r, "evidence": e} for p, r, e in report.inferred
        ],
    }


# --- diff ---------------------------------------------------------------------------------------


def _number(value: float | None) -> JSONValue:
    """A JSON number, ``"inf"`` for infinity (JSON has none), or null."""
    if value is None:
        return None
    if math.isinf(value):
        return "inf"
    return value


def _only(rows: tuple[OnlyIn, ...]) -> list[JSONValue]:
    return [{"name": r.name, "suggestion": r.suggestion} for r in rows]


def _tensor(row: TensorDiff) -> dict[str, JSONValue]:
    return {
        "name": row.name,
        "status": row.status,
        "dtype_a": row.dtype_a,
        "dtype_b": row.dtype_b,
        "shape_a": list(row.shape_a),
        "shape_b": list(row.shape_b),
        "numel": row.numel,
        "max_abs": _number(row.max_abs),
        "max_rel": _number(row.max_rel),
        "mismatched": row.mismatched,
        "nan_mismatched": row.nan_mismatched,
        "relative_change": _number(row.relative_change),
        "cosine": _number(row.cosine),
    }


def _diff(report: DiffReport) -> dict[str, JSONValue]:
    opts = report.options
    return {
        "schema_version": SCHEMA_VERSION,
        "a": report.a,
        "b": report.b,
        "format_a": report.format_a,
        "format_b": report.format_b,
        "identical": report.identical,
        "within_tolerance": report.within_tolerance,
        "options": {
            "state_key": opts.state_key,
            "state_key_b": opts.state_key_b,
            "remap": list(opts.remap),
            "adapters": list(opts.adapters),
            "module_types": list(opts.module_types),
            "rtol": opts.rtol,
            "atol": opts.atol,
            "values_only": opts.values_only,
            "filter": opts.pattern,
        },
        "counts": dict(report.counts()),
        "only_in_a": _only(report.only_in_a),
        "only_in_b": _only(report.only_in_b),
        "tensors": [_tensor(t) for t in report.tensors],
        "fixes": [spell(f) for f in report.fixes],
        "suggested_command": None
        if report.suggested_command is None
        else spell(report.suggested_command),
        "convert_command": None
        if report.convert_command is None
        else spell(report.convert_command),
        "warnings": [str(w) for w in report.warnings],
    }


# --- verify -------------------------------------------------------------------------------------


def _details(finding: Finding) -> JSONValue:
    """A finding's machine-readable facts; the summary, check or verdict it carries when any."""
    if finding.summary is not None:
        return to_json(finding.summary)
    if finding.optimizer is not None:
        return to_json(finding.optimizer)
    if finding.safety is not None:
        return to_json(finding.safety)
    if finding.hashes is not None:
        return to_json(finding.hashes)
    return dict(finding.details)


def _finding_json(finding: Finding) -> dict[str, JSONValue]:
    return {
        "check": finding.check,
        "status": finding.status.value,
        "message": str(finding.message),
        "hint": None if finding.hint is None else str(finding.hint),
        "details": _details(finding),
    }


def _file_json(result: FileResult) -> dict[str, JSONValue]:
    return {
        "path": result.path,
        "format": result.format,
        "kind": result.kind,
        "ok": result.ok,
        "tensors": result.tensors,
        "findings": [_finding_json(f) for f in result.findings],
        "verdict": result.verdict.value,
    }


def _verify(report: VerifyReport) -> dict[str, JSONValue]:
    """The ``--json`` object of a verify report (serialise with ``report.json.dumps``).

    Shape: ``{"schema_version": 1, "ok": bool, "files": [{"path", "format", "kind", "ok",
    "verdict", "tensors", "findings": [{"check", "status", "message", "hint", "details"}]}],
    "summary": {"files", "passed", "failed", "warned", "verdicts", "skipped", "skipped_paths"}}``;
    ``verdict`` (safe / needs-trust / unsafe / unreadable), ``verdicts`` (files by verdict) and
    ``skipped`` (walked files that are no checkpoint) were added in issue 28, ``skipped_paths``
    (those files, in walk order) in issue 44.
    """
    return {
        "schema_version": SCHEMA_VERSION,
        "ok": report.ok,
        "files": [_file_json(f) for f in report.files],
        "summary": {
            "files": len(report.files),
            "passed": report.passed,
            "failed": report.failed,
            "warned": report.warned,
            "verdicts": {v.value: n for v, n in report.verdicts().items()},
            "skipped": report.skipped,
            "skipped_paths": list(report.skipped_paths),
        },
    }


def _summary(summary: LoadingSummary) -> dict[str, JSONValue]:
    from ckptctl.report.render_summary import error_message

    return {
        "ok": summary.ok,
        "counts": {
            "applied": len(summary.applied),
            "skipped": len(summary.skipped),
            "missing": len(summary.missing),
            "unused": len(summary.unused),
            "errors": len(summary.errors),
            "ambiguous": len(summary.ambiguous),
        },
        "applied": list(summary.applied),
        "skipped": list(summary.skipped),
        "missing": [
            {"name": m.name, "container": m.container, "suggestion": m.suggestion}
            for m in summary.missing
        ],
        "unused": list(summary.unused),
        "unused_sources": list(summary.unused_sources or summary.unused),
        "unused_exclude": summary.unused_exclude,
        "errors": [
            {
                "name": e.name,
                "kind": e.kind,
                "expected": None if e.expected is None else list(e.expected),
                "found": None if e.found is None else list(e.found),
                "message": error_message(e),
            }
            for e in summary.errors
        ],
        "dtype_notes": [
            {"name": n.name, "expected": n.expected.value, "found": n.found.value}
            for n in summary.dtype_notes
        ],
        "ambiguous": [
            {"name": a.name, "kind": a.kind, "candidates": list(a.candidates)}
            for a in summary.ambiguous
        ],
        "fixes": [spell(f) for f in summary.fixes],
        "enum_paths": summary.enum_paths,
    }


def _optimizer(check: OptimizerCheck) -> dict[str, JSONValue]:
    def orphan(o: Orphan) -> dict[str, JSONValue]:
        return {"param_id": o.param_id, "path": o.path, "model_id": o.model_id}

    return {
        "verdict": check.verdict,
        "model": check.model,
        "optimizer": check.optimizer,
        "model_format": check.model_format,
        "model_has_ids": check.model_has_ids,
        "states": check.states,
        "matched": check.matched,
        "match_rate": check.match_rate,
        "trainable": check.trainable,
        "trainable_with_state": check.trainable_with_state,
        "coverage": check.coverage,
        "running_stats": check.running_stats,
        "without_ids": list(check.without_ids),
        "path_disagreements": [
            {"param_id": i, "recorded": p, "model": m} for i, p, m in check.path_disagreements
        ],
        "shape_disagreements": list(check.shape_disagreements),
        "orphans": {
            "reinitialized": [orphan(o) for o in check.reinitialized],
            "foreign": [orphan(o) for o in check.foreign],
        },
        "cohorts": check.cohorts,
        "cohort_times": [
            None if t is None else {"min": t[0], "max": t[1]} for t in check.cohort_times
        ],
        "rebindable": check.rebindable,
        "repair": None if check.repair is None else spell(check.repair),
    }


def _safety(safety: PickleSafety) -> dict[str, JSONValue]:
    unreached = safety.unreached_verdict
    return {
        "verdict": safety.verdict.value,
        "globals": [
            {"name": g.name, "class": g.verdict.value, "where": g.where}
            | ({"reason": g.reason} if g.reason else {})
            | ({"reached": False} if not g.reached else {})
            for g in safety.globals
        ],
        "problems": [
            {"message": p.message, "class": p.verdict.value, "where": p.where}
            | ({"reached": False} if not p.reached else {})
            for p in safety.problems
        ],
        "unreached_verdict": None if unreached is None else unreached.value,
        "torch_refuses": safety.torch_refusal,
    }


def _config(report: ConfigReport) -> dict[str, JSONValue]:
    """``verify --show-config --json``: the file (null: none found), its table, the settings."""
    return {
        "schema_version": SCHEMA_VERSION,
        "path": report.path,
        "table": report.table,
        "searched_from": report.searched_from,
        "settings": [
            {"key": s.key, "value": s.value, "source": s.source, "line": s.line}
            for s in report.settings
        ],
    }


def _safe_globals(report: SafeGlobalsReport) -> dict[str, JSONValue]:
    """``verify --print-safe-globals --json``: the globals to allow and the code that does."""
    return {
        "schema_version": SCHEMA_VERSION,
        "files": list(report.files),
        "globals": list(report.globals),
        "code": report.code(),
    }


# --- hash ---------------------------------------------------------------------------------------


def _hash_item(row: TensorHash) -> dict[str, JSONValue]:
    return {"name": row.name, "dtype": row.dtype, "shape": list(row.shape), "digest": row.digest}


def manifest_line(row: TensorHash) -> str:
    """One line of a ``ckptctl hash`` manifest (no newline): ``name``, ``dtype``, ``shape``,
    ``digest`` in this order, ASCII only."""
    return json.dumps(_hash_item(row), ensure_ascii=True)


def _hash(report: HashReport) -> dict[str, JSONValue]:
    return {
        "schema_version": SCHEMA_VERSION,
        "path": report.path,
        "format": report.format,
        "algorithm": report.algorithm,
        "tensors": [_hash_item(t) for t in report.tensors],
    }


def _hash_check(check: HashCheck) -> dict[str, JSONValue]:
    return {
        "manifest": check.manifest,
        "checked": check.checked,
        "mismatched": [
            {"name": m.name, "field": m.field, "expected": m.expected, "found": m.found}
            for m in check.mismatched
        ],
        "missing": list(check.missing),
        "extra": list(check.extra),
    }


# --- show, ls --stats ---------------------------------------------------------------------------


def _finite(value: float | None) -> JSONValue:
    return None if value is None or not math.isfinite(value) else value


def _stats(stats: TensorStats) -> dict[str, JSONValue]:
    out: dict[str, JSONValue] = {
        "count": stats.count,
        "min": _finite(stats.min),
        "max": _finite(stats.max),
        "mean": _finite(stats.mean),
        "std": _finite(stats.std),
        "absmax": _finite(stats.absmax),
        "zeros": stats.zeros,
        "zero_share": stats.zero_share,
        "nan": stats.nan,
        "inf": stats.inf,
    }
    if stats.histogram is not None:
        out["histogram"] = {
            "low": stats.histogram.low,
            "high": stats.histogram.high,
            "counts": list(stats.histogram.counts),
        }
    return out


def _show(report: ShowReport) -> dict[str, JSONValue]:
    return {
        "schema_version": SCHEMA_VERSION,
        "path": report.path,
        "format": report.format,
        "tensors": [
            {
                "name": t.name,
                "dtype": t.dtype,
                "shape": list(t.shape),
                "preview": t.preview,
                "stats": None if t.stats is None else to_json(t.stats),
            }
            for t in report.tensors
        ],
    }


#: type (``module.QualName``) -> its JSON form. Types are named, not imported, so that the JSON
#: of one report imports no other report's module.
_CONVERTERS: dict[str, Callable[..., dict[str, JSONValue]]] = {
    "ckptctl.report.model.LsReport": _ls,
    "ckptctl.report.quant.QuantModule": _quant,
    "ckptctl.report.tree.TreeNode": _tree,
    "ckptctl.report.model.HeaderReport": _header,
    "ckptctl.report.model.ConvertReport": _convert,
    "ckptctl.report.diff.DiffReport": _diff,
    "ckptctl.report.verify.VerifyReport": _verify,
    "ckptctl.report.summary.LoadingSummary": _summary,
    "ckptctl.report.optimizer.OptimizerCheck": _optimizer,
    "ckptctl.safety.PickleSafety": _safety,
    "ckptctl.report.config.ConfigReport": _config,
    "ckptctl.report.safe_globals.SafeGlobalsReport": _safe_globals,
    "ckptctl.report.manifest.HashReport": _hash,
    "ckptctl.report.manifest.HashCheck": _hash_check,
    "ckptctl.report.values.TensorStats": _stats,
    "ckptctl.report.values.ShowReport": _show,
}

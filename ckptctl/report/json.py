"""Stable JSON renderings of reports (``--json``): deterministic keys, ``schema_version``."""

from __future__ import annotations

import json
from functools import singledispatch
from typing import TYPE_CHECKING

from ckptctl.report.model import SCHEMA_VERSION, ConvertReport, HeaderReport, LsReport

if TYPE_CHECKING:
    from ckptctl.model import JSONValue


def dumps(obj: JSONValue) -> str:
    """One line of JSON ending in a newline (pipe it to ``jq .`` to read it).

    Non-ASCII is escaped, so strings from files never reach a terminal raw. No indentation: it
    forces Python's slow pure-Python encoder, five times slower on a 20,000-tensor listing.
    """
    return json.dumps(obj, ensure_ascii=True, allow_nan=False, default=str) + "\n"


@singledispatch
def to_json(report: object) -> dict[str, JSONValue]:
    """The JSON object of a report."""
    raise TypeError(f"no JSON rendering for {type(report).__name__}")


@to_json.register(LsReport)
def _ls(report: LsReport) -> dict[str, JSONValue]:
    tensors: list[dict[str, JSONValue]] = []
    for row in report.tensors:
        item: dict[str, JSONValue] = {
            "name": row.name,
            "dtype": row.dtype,
            "shape": list(row.shape),
            "nbytes": row.nbytes,
        }
        if row.param_id is not None:
            item["param_id"] = row.param_id
        if row.module_type is not None:
            item["module_type"] = row.module_type
        tensors.append(item)
    out: dict[str, JSONValue] = {
        "schema_version": SCHEMA_VERSION,
        "path": report.path,
        "format": report.format,
        "kind": report.kind,
        "tensors": tensors,
        "metadata": dict(report.metadata),
        "totals": [
            {"dtype": t.dtype, "tensors": t.tensors, "numel": t.numel, "nbytes": t.nbytes}
            for t in report.totals
        ],
        "notes": list(report.notes),
    }
    if report.scalars:
        out["scalars"] = dict(report.scalars)
    if report.state_key is not None:
        out["state_key"] = report.state_key
    if report.safety is not None:
        out["pickle"] = report.safety.to_json()
    return out


@to_json.register(HeaderReport)
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
    }


@to_json.register(ConvertReport)
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
        "warnings": list(report.warnings),
        "summary": report.summary,
        "fixes": list(report.fixes),
    }

"""Text renderings of reports for people: rich tables, every file string escaped."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from ckptctl.report.sanitize import sanitize

if TYPE_CHECKING:
    from rich.console import Console

    from ckptctl.model import JSONValue
    from ckptctl.report.model import ConvertReport, HeaderReport, LsReport

#: Regions of one kind beyond this many are summarised in the byte table (``--all`` shows them).
MAX_REGION_ROWS = 200

_KIND_TEXT = {
    "state_dict": "a flat state_dict",
    "nested": "a nested checkpoint",
    "module": "a whole pickled model (torch.save(model)), not a state_dict",
    "torchscript": "a TorchScript archive (torch.jit.save)",
    "tensor": "a single bare tensor",
    "empty": "a checkpoint with no tensors",
}


def print_table(console: Console, table: Table) -> None:
    """Print a table without the trailing spaces rich pads the last column with."""
    with console.capture() as capture:
        console.print(table)
    lines = capture.get().splitlines()
    console.file.write("".join(line.rstrip() + "\n" for line in lines))


def pretty_json(value: JSONValue, indent: int = 0) -> str:
    """JSON with objects indented and lists of numbers or strings kept on one line.

    ``ensure_ascii`` escapes every control, bidi and non-ASCII character inside strings, so the
    text is safe to print.
    """
    pad = "  " * indent
    if isinstance(value, dict) and value:
        items = [
            f"{pad}  {json.dumps(str(k), ensure_ascii=True)}: {pretty_json(v, indent + 1)}"
            for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        items = [f"{pad}  {pretty_json(v, indent + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(value, ensure_ascii=True, default=str)


def human_bytes(n: int) -> str:
    """``1536`` → ``1.5 KiB``; exact below 1 KiB."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def render_ls(report: LsReport, console: Console) -> None:
    """Print an ``ls`` report: a classification line, the tensor table and totals by dtype."""
    what = f"{report.format}"
    if report.kind:
        what += f", {_KIND_TEXT.get(report.kind, report.kind)}"
    console.print(Text(f"{sanitize(report.path)}: {what}"))
    for note in report.notes:
        console.print(Text(f"  {sanitize(note)}"))
    if report.state_key is not None:
        console.print(Text(f"  below state key {sanitize(report.state_key)!r}"))
    show_ids = any(r.param_id is not None for r in report.tensors)
    show_modules = any(r.module_type is not None for r in report.tensors)
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("name", overflow="fold")
    table.add_column("dtype")
    table.add_column("shape")
    table.add_column("parameters", justify="right")
    table.add_column("bytes", justify="right")
    if show_modules:
        table.add_column("module")
    if show_ids:
        table.add_column("param_id", justify="right")
    for row in report.tensors:
        cells: list[Text | str] = [
            Text(sanitize(row.name)),
            row.dtype,
            _shape(row.shape),
            f"{row.numel:,}",
            f"{row.nbytes:,}",
        ]
        if show_modules:
            cells.append(Text(sanitize(row.module_type or "")))
        if show_ids:
            cells.append("" if row.param_id is None else str(row.param_id))
        table.add_row(*cells)
    if report.tensors:
        print_table(console, table)
    totals = Table(box=None, pad_edge=False, header_style="bold", title_justify="left")
    totals.add_column("dtype")
    totals.add_column("tensors", justify="right")
    totals.add_column("parameters", justify="right")
    totals.add_column("bytes", justify="right")
    for t in report.totals:
        totals.add_row(t.dtype, f"{t.tensors:,}", f"{t.numel:,}", human_bytes(t.nbytes))
    n = len(report.tensors)
    all_bytes = sum(t.nbytes for t in report.totals)
    all_numel = sum(t.numel for t in report.totals)
    if len(report.totals) > 1:
        totals.add_row("total", f"{n:,}", f"{all_numel:,}", human_bytes(all_bytes))
    if report.totals:
        console.print()
        print_table(console, totals)
    shown = f"{n:,} tensors" if n != 1 else "1 tensor"
    if report.total_tensors is not None and report.total_tensors != n:
        shown += f" (of {report.total_tensors:,})"
    console.print(Text(f"{shown}, {all_numel:,} parameters, {human_bytes(all_bytes)}"))
    if report.metadata:
        console.print()
        meta = Table(box=None, pad_edge=False, header_style="bold")
        meta.add_column("metadata")
        meta.add_column("value", overflow="fold")
        for key, value in report.metadata.items():
            meta.add_row(Text(sanitize(key)), Text(sanitize(str(value))))
        print_table(console, meta)
    if report.scalars:
        console.print()
        sc = Table(box=None, pad_edge=False, header_style="bold")
        sc.add_column("scalar")
        sc.add_column("value")
        for key, value in report.scalars.items():
            sc.add_row(Text(sanitize(key)), Text(sanitize(json.dumps(value))))
        print_table(console, sc)


def render_header(report: HeaderReport, console: Console, *, all_regions: bool = False) -> None:
    """Print the decoded header, then the byte accounting with the padding explained."""
    layout = report.layout
    console.print(Text(f"{sanitize(report.path)}: {layout.format}, {layout.file_size:,} bytes"))
    console.print()
    console.print(Text("header", style="bold"))
    console.print(Text(pretty_json(layout.header)))
    console.print()
    console.print(Text("byte accounting", style="bold"))
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("start", justify="right")
    table.add_column("end", justify="right")
    table.add_column("bytes", justify="right")
    table.add_column("kind")
    table.add_column("what", overflow="fold")
    regions = layout.regions
    skipped = 0
    if not all_regions and len(regions) > MAX_REGION_ROWS:
        skipped = len(regions) - MAX_REGION_ROWS
        regions = regions[: MAX_REGION_ROWS // 2] + regions[-MAX_REGION_ROWS // 2 :]
    for i, region in enumerate(regions):
        if skipped and i == MAX_REGION_ROWS // 2:
            table.add_row("…", "…", "…", "", f"{skipped:,} more regions (--all shows them)")
        what = region.name if region.kind == "tensor" else region.note
        table.add_row(
            f"{region.start:,}",
            f"{region.end:,}",
            f"{region.size:,}",
            region.kind,
            Text(sanitize(what or "")),
        )
    print_table(console, table)
    console.print()
    by_kind = report.bytes_by_kind()
    parts = [f"{by_kind[k]:,} {k}" for k in by_kind]
    console.print(Text(f"{layout.file_size:,} bytes = " + " + ".join(parts)))
    tensor_bytes = by_kind.get("tensor", 0)
    overhead = layout.file_size - tensor_bytes
    if layout.file_size:
        share = 100 / layout.file_size
        console.print(
            Text(
                f"tensor data {tensor_bytes:,} bytes ({tensor_bytes * share:.1f}%),"
                f" overhead {overhead:,} bytes ({overhead * share:.1f}%)"
            )
        )
    reasons: dict[str, int] = {}
    for region in layout.regions:
        if region.kind == "padding":
            key = _reason_key(region.note)
            reasons[key] = reasons.get(key, 0) + region.size
    for reason, size in reasons.items():
        console.print(Text(f"  padding {size:,} bytes: {sanitize(reason)}"))
    why = _WHY_PADDING.get(layout.format)
    if why and sum(reasons.values()) > tensor_bytes:
        console.print(Text(f"why: {why}"))


_WHY_PADDING = {
    "burnpack": "burnpack starts the data section and every tensor on a 256-byte boundary so "
    "that each tensor can be memory-mapped in place; with small tensors that padding dominates",
    "safetensors": "safetensors pads its JSON header with spaces to a multiple of 8 bytes",
    "pytorch-zip": "torch aligns every record's data to 64 bytes and adds zip headers per record",
}


def _reason_key(note: str | None) -> str:
    """Group padding notes like "alignment of 'x' to 256 bytes" under one reason."""
    if not note:
        return "padding"
    if "'" in note:
        head, _, rest = note.partition("'")
        _, _, tail = rest.partition("'")
        return (head + "each tensor" + tail).replace("  ", " ")
    return note


def render_convert(report: ConvertReport, console: Console) -> None:
    """Print a conversion plan (``--dry-run``) or what was written."""
    dropped = sum(1 for r in report.plan if r.target is None)
    written = len(report.plan) - dropped
    changed = [
        r for r in report.plan if r.target is not None and (r.actions or r.target != r.source)
    ]
    if report.dry_run:
        console.print(
            Text(
                f"plan: {sanitize(report.source)} ({report.source_format}) → "
                f"{sanitize(report.destination)} ({report.destination_format}), "
                f"{len(report.plan)} tensors, nothing written (--dry-run)"
            )
        )
        for row in report.plan:
            dtype = row.dtype_before
            if row.dtype_after is not None and row.dtype_after != row.dtype_before:
                dtype += f" → {row.dtype_after}"
            shape = _shape(row.shape_before)
            if row.shape_after is not None and row.shape_after != row.shape_before:
                shape += f" → {_shape(row.shape_after)}"
            if row.target is None:
                head = f"{sanitize(row.source)} (dropped)"
            elif row.target != row.source:
                head = f"{sanitize(row.source)} → {sanitize(row.target)}"
            else:
                head = sanitize(row.source)
            console.print(Text(f"{head}  {dtype} {shape}"))
            for action in row.actions or ("copy (bytes unchanged)",):
                console.print(Text(f"    {sanitize(action)}"))
    if report.summary_text:
        console.print(Text(report.summary_text))
    for fix in report.fixes:
        console.print(Text(f"  try: {sanitize(fix)}"))
    if report.written:
        console.print(
            Text(
                f"wrote {sanitize(report.destination)} ({report.destination_format}): "
                f"{written} tensors, {human_bytes(report.bytes_written)}"
                + (f", {len(changed)} changed" if changed else "")
                + (f", {dropped} left out" if dropped else "")
            )
        )

"""Text renderings of reports for people: rich tables, every file string escaped."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING

from rich.text import Text

from ckptctl.fix import Option, spell
from ckptctl.model import TRUNCATED_KEY
from ckptctl.report.sanitize import sanitize

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from rich.console import Console
    from rich.table import Table

    from ckptctl.model import JSONValue
    from ckptctl.report.model import ConvertReport, HeaderReport, LsReport, TensorRow
    from ckptctl.report.quant import QuantModule
    from ckptctl.report.tree import TreeNode

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


class PlainTable:
    """A borderless table rendered by plain string formatting.

    rich's ``Table`` measures and wraps every cell; for 20,000 rows that takes seconds. This
    renders the same layout (columns two spaces apart, no outer padding) in linear time; cells
    are already-escaped strings.
    """

    def __init__(self) -> None:
        self.headers: list[str] = []
        self.right: list[bool] = []
        self.rows: list[list[str]] = []

    def add_column(self, header: str, *, justify: str = "left") -> None:
        """Add a column; ``justify`` is ``left`` or ``right``."""
        self.headers.append(header)
        self.right.append(justify == "right")

    def add_row(self, *cells: str) -> None:
        """Add a row of escaped strings, one per column."""
        self.rows.append(list(cells))

    def lines(self, max_width: int | None = None) -> list[str]:
        """The header line followed by one line per row, without trailing spaces.

        With ``max_width`` (a narrow terminal) the first column -- the names -- is shortened so
        that numbers are never broken: a long name keeps its start and its distinguishing tail
        (from the last layer index, else the last two segments), or, when even that does not
        fit, is folded: the whole name on a line of its own, the row's cells under it.
        """
        from rich.cells import cell_len

        table = [self.headers, *self.rows]
        widths = [max(cell_len(row[i]) for row in table) for i in range(len(self.headers))]
        total = sum(widths) + 2 * (len(widths) - 1)
        folded: dict[int, str] = {}
        if max_width is not None and total > max_width and widths and not self.right[0]:
            first = max(MIN_NAME_WIDTH, widths[0] - (total - max_width))
            if first < widths[0]:
                widths[0] = first
                shortened = []
                for i, row in enumerate(table):
                    name = _elide(row[0], first)
                    if name is None:
                        folded[i] = _tail(row[0], max_width)
                        name = ""
                    shortened.append([name, *row[1:]])
                table = shortened
        out = []
        for i, row in enumerate(table):
            cells = []
            for cell, width, right in zip(row, widths, self.right, strict=True):
                pad = " " * (width - cell_len(cell))
                cells.append(pad + cell if right else cell + pad)
            if i in folded:
                out.append(folded[i])
            out.append("  ".join(cells).rstrip())
        return out


#: Narrowest the name column of a table gets on a narrow terminal.
MIN_NAME_WIDTH = 16
#: Fewest characters of a name's start an elided name keeps (else the name is folded).
MIN_NAME_HEAD = 4


def _elide(text: str, width: int) -> str | None:
    """``state_d…0.input_layernorm.weight``: the start and the distinguishing tail, when
    ``text`` is too long; None when no such tail fits (the caller folds the name).

    Rows of one table differ mostly at the end (``input_layernorm`` / ``post_attention_layernorm``,
    layer 11 / layer 12), so the tail is kept whole: from the last numeric segment (the layer
    index) if it fits, else the last two segments.
    """
    from rich.cells import cell_len

    if cell_len(text) <= width:
        return text
    parts = text.split(".")
    numbered = [i for i, part in enumerate(parts[:-1]) if part.isdigit()]
    tails = [".".join(parts[numbered[-1] :])] if numbered else []
    if len(parts) >= 2:
        tails.append(".".join(parts[-2:]))
    for tail in tails:
        head = width - 1 - cell_len(tail)
        if head >= MIN_NAME_HEAD:
            return text[:head] + "…" + tail
    return None


def _tail(text: str, width: int) -> str:
    """A folded name on its own line: whole, or its end when even the line is too narrow."""
    if len(text) <= width:
        return text
    return "…" + text[len(text) - (width - 1) :]


def print_table(console: Console, table: Table | PlainTable) -> None:
    """Print a table without trailing spaces; the header row in bold on a terminal.

    Output that is not a terminal is never shortened; on a terminal the name column is.
    """
    if isinstance(table, PlainTable):
        header, *rows = table.lines(console.width if console.is_terminal else None)
        console.print(Text(header, style="bold"))
        print_lines(console, rows)
        return
    with console.capture() as capture:
        console.print(table)
    print_lines(console, capture.get().splitlines())


def print_lines(console: Console, lines: list[str]) -> None:
    """Write already-escaped lines as they are (rich's wrapping is quadratic on huge text)."""
    if lines:
        console.file.write("".join(line.rstrip() + "\n" for line in lines))


def pretty_json(value: JSONValue, indent: int = 0) -> str:
    """JSON with objects indented and lists of numbers or strings kept on one line.

    Strings are written ASCII-only (every control, bidi and non-ASCII character escaped), so the
    text is safe to print. Scalars skip ``json.dumps``: a 20,000-record zip header has 300,000.
    """
    pad = "  " * indent
    if isinstance(value, dict) and value:
        items = [
            f"{pad}  {_json_string(str(k))}: {pretty_json(v, indent + 1)}" for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        items = [f"{pad}  {pretty_json(v, indent + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    if isinstance(value, str):
        return _json_string(value)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if type(value) is int:
        return str(value)
    return json.dumps(value, ensure_ascii=True, default=str)


def _json_string(text: str) -> str:
    from json.encoder import encode_basestring_ascii

    return encode_basestring_ascii(text)


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


def format_shape(shape: tuple[int, ...]) -> str:
    """``[2, 3]``: a shape as the tables show it."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def format_number(value: float | None) -> str:
    """A statistic as tables show it: four significant digits, ``-`` when there is none."""
    if value is None:
        return "-"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def render_ls(report: LsReport, console: Console, *, exact_bytes: bool = False) -> None:
    """Print an ``ls`` report: a classification line, the tensor table and totals by dtype.

    Sizes are in binary units (``4.0 KiB``); ``exact_bytes`` prints the byte counts instead.
    """
    size = (lambda n: f"{n:,}") if exact_bytes else human_bytes
    what = f"{report.format}"
    if report.kind:
        what += f", {_KIND_TEXT.get(report.kind, report.kind)}"
    console.print(Text(f"{sanitize(report.path)}: {what}"))
    for note in report.notes:
        console.print(Text(f"  {sanitize(note)}"))
    if report.safety is not None:
        console.print(Text(f"  pickle: {sanitize(report.safety.describe())}"))
    if report.state_key is not None:
        below = f"  below state key {sanitize(report.state_key)!r}"
        if report.file_tensors is not None and report.total_tensors is not None:
            names = ", ".join(sanitize(n) for n in report.outside_state_key)
            if report.file_tensors - report.total_tensors > len(report.outside_state_key):
                names += ", ..."
            below += (
                f": {report.total_tensors:,} of {report.file_tensors:,} tensors "
                f"(outside it: {names})"
            )
        console.print(Text(below))
    show_ids = any(r.param_id is not None for r in report.tensors)
    show_modules = any(r.module_type is not None for r in report.tensors)
    table = PlainTable()
    table.add_column("name")
    table.add_column("dtype")
    table.add_column("shape")
    table.add_column("parameters", justify="right")
    table.add_column("bytes", justify="right")
    if show_modules:
        table.add_column("module")
    if show_ids:
        table.add_column("param_id", justify="right")
    if report.with_stats:
        for column in ("min", "max", "mean", "std", "absmax", "zeros", "NaN", "Inf"):
            table.add_column(column, justify="right")
    part_of = {name: q for q in report.quantized for name in q.tensors}
    if part_of:
        table.add_column("quantized")
    for row in report.tensors:
        cells = [
            sanitize(row.name),
            row.dtype,
            format_shape(row.shape),
            "buffer" if row.buffer else f"{row.numel:,}",
            size(row.nbytes),
        ]
        if show_modules:
            cells.append(sanitize(row.module_type or ""))
        if show_ids:
            cells.append("" if row.param_id is None else str(row.param_id))
        if report.with_stats:
            cells += _stat_cells(row)
        if part_of:
            q = part_of.get(row.name)
            cells.append(
                "" if q is None else q.scheme.value + ("" if q.bits is None else f" {q.bits}-bit")
            )
        table.add_row(*cells)
    if report.tree is not None:
        if report.tensors:
            quantized = {q.module: q for q in report.quantized}
            print_table(
                console,
                _tree_table(report.tree, size, unicode=_is_utf8(console), quantized=quantized),
            )
    elif report.tensors:
        print_table(console, table)
    _print_totals(report, console, size)
    if report.quantized:
        console.print()
        _render_quantized(report, console, size)
    if report.metadata:
        pairs = ((key, str(value)) for key, value in report.metadata.items())
        _print_values(console, "metadata", pairs)
    if report.objects:
        pairs = ((path, _short_value(plain)) for path, plain in _flat_objects(report.objects))
        _print_values(console, "object", pairs)
    if report.scalars:
        pairs = ((key, json.dumps(value)) for key, value in report.scalars.items())
        _print_values(console, "scalar", pairs)


def _print_values(console: Console, what: str, pairs: Iterable[tuple[str, str]]) -> None:
    """A blank line, then a two-column table: ``what`` and ``value``, both sanitized."""
    console.print()
    table = PlainTable()
    table.add_column(what)
    table.add_column("value")
    for key, value in pairs:
        table.add_row(sanitize(key), sanitize(value))
    print_table(console, table)


def _print_totals(report: LsReport, console: Console, size: Callable[[int], str]) -> None:
    """The totals by dtype (and in all, for several), then the one-line summary; buffers'
    elements (BatchNorm's running statistics) are counted apart from the parameters."""
    total = report.total
    totals = PlainTable()
    totals.add_column("dtype")
    for column in ("tensors", "parameters", *(["buffers"] if total.buffers else []), "bytes"):
        totals.add_column(column, justify="right")

    def counts(tensors: int, parameters: int, buffers: int, nbytes: int) -> list[str]:
        apart = [f"{buffers:,}"] if total.buffers else []
        return [f"{tensors:,}", f"{parameters:,}", *apart, size(nbytes)]

    for t in report.totals:
        totals.add_row(t.dtype, *counts(t.tensors, t.parameters, t.buffers, t.nbytes))
    n = total.tensors
    if len(report.totals) > 1:
        totals.add_row("total", *counts(n, total.parameters, total.buffers, total.nbytes))
    if report.totals:
        console.print()
        print_table(console, totals)
    shown = f"{n:,} tensors" if n != 1 else "1 tensor"
    if report.total_tensors is not None and report.total_tensors != n:
        shown += f" (of {report.total_tensors:,})"
    line = f"{shown}, {total.parameters:,} parameters"
    if total.buffers:
        line += f" (+{total.buffers:,} in buffers)"
    line += f", {size(total.nbytes)}"
    if report.stored is not None:  # tied weights and views share storage
        stored_numel, stored_bytes = report.stored
        line += f" ({stored_numel:,} parameters, {size(stored_bytes)} stored)"
    console.print(Text(line))


def _render_quantized(report: LsReport, console: Console, size: Callable[[int], str]) -> None:
    """``ls``' table of quantized modules: scheme, bits, group, the weight's shape and
    parameters once unpacked next to what is stored, then any layout that disagrees."""
    table = PlainTable()
    for column in ("quantized module", "scheme", "bits", "group", "shape"):
        table.add_column(column)
    for column in ("parameters", "stored", "bytes"):
        table.add_column(column, justify="right")
    for q in report.quantized:
        table.add_row(
            sanitize(q.module),
            q.scheme.value,
            "-" if q.bits is None else str(q.bits),
            q.describe_group(),
            "-" if q.shape is None else format_shape(q.shape),
            "-" if q.parameters is None else f"{q.parameters:,}",
            f"{q.stored_parameters:,}",
            size(q.nbytes),
        )
    print_table(console, table)
    schemes = ", ".join(dict.fromkeys(q.scheme.value for q in report.quantized))
    n = len(report.quantized)
    line = f"{n:,} quantized module{'s' if n != 1 else ''} ({schemes})"
    logical = report.logical_parameters
    if logical is not None:
        weights = sum(q.parameters or 0 for q in report.quantized)
        stored = sum(q.stored_parameters for q in report.quantized)
        line += (
            f": {weights:,} weights stored in {stored:,} elements; {logical:,} parameters in all "
            "once unpacked"
        )
    console.print(Text(line))
    for q in report.quantized:
        for problem in q.problems:
            console.print(Text(f"  {sanitize(q.module)}: {sanitize(problem)}"))


def _stat_cells(row: TensorRow) -> list[str]:
    """``ls --stats``' columns of one row (``-`` where a statistic does not exist)."""
    st = row.stats
    if st is None:
        return ["-"] * 8
    return [
        format_number(st.min), format_number(st.max), format_number(st.mean),
        format_number(st.std), format_number(st.absmax), f"{100 * st.zero_share:.1f}%",
        f"{st.nan:,}", f"{st.inf:,}",
    ]  # fmt: skip


def _is_utf8(console: Console) -> bool:
    """Whether ``console`` takes box-drawing characters (else the tree is drawn in ASCII)."""
    encoding = getattr(console.file, "encoding", None) or "utf-8"
    return encoding.lower().replace("-", "") in ("utf8", "utf8sig")


_BRANCHES = {True: ("├── ", "└── ", "│   ", "    "), False: ("|-- ", "`-- ", "|   ", "    ")}


def _tree_table(
    root: TreeNode,
    size: Callable[[int], str],
    *,
    unicode: bool,
    quantized: Mapping[str, QuantModule] | None = None,
) -> PlainTable:
    """``ls --tree``: one row per module and tensor, drawn as a tree; a collapsed run of
    blocks is one row (``layers.{0..31} x32``, totals of all blocks) over its first block; a
    quantized module says its scheme and its parameters once unpacked."""
    quantized = quantized or {}
    mid, last, down, blank = _BRANCHES[unicode]
    times = "\u00d7" if unicode else "x"  # the multiplication sign
    table = PlainTable()
    table.add_column("module")
    table.add_column("dtype")
    table.add_column("shape")
    table.add_column("tensors", justify="right")
    table.add_column("parameters", justify="right")
    table.add_column("bytes", justify="right")
    table.add_column("")

    def walk(node: TreeNode, lead: str, branch: str) -> None:
        label = sanitize(node.name) + (f" {times}{node.repeat}" if node.indices else "")
        note = ""
        if node.tied_to is not None:
            note = f"tied to {sanitize(node.tied_to)} (counted there)"
        elif node.indices and node.children:
            first = node.children[0].path.rsplit(".", 1)[0]
            note = f"below: {sanitize(first)}, one of {node.repeat}"
        elif node.hidden:
            note = f"{node.hidden:,} {'child' if node.hidden == 1 else 'children'} not shown"
        q = None if node.is_tensor else quantized.get(node.path)
        if q is not None:
            bits = "" if q.bits is None else f" {q.bits}-bit"
            unpacked = "" if q.parameters is None else f", {q.parameters:,} parameters unpacked"
            note = f"{q.scheme.value}{bits}{unpacked}" + (f"; {note}" if note else "")
        table.add_row(
            lead + branch + label,
            node.dtype or "",
            "" if node.shape is None else format_shape(node.shape),
            "" if node.is_tensor else f"{node.tensors:,}",
            "buffer" if node.is_tensor and node.buffers else f"{node.parameters:,}",
            size(node.nbytes),
            note,
        )
        inner = lead + (blank if branch in ("", last) else down)
        for i, child in enumerate(node.children):
            walk(child, inner if branch else lead, last if i == len(node.children) - 1 else mid)

    for child in root.children:
        walk(child, "", "")
    return table


#: The text table shows lists up to this many items and text up to this many characters
#: (``ls --json`` has the whole values).
_SHOWN_ITEMS = 8
_SHOWN_TEXT = 80


def _flat_objects(objects: Mapping[str, JSONValue], prefix: str = "") -> list[tuple[str, object]]:
    """``ls``'s object rows: nested mappings as dotted key paths (``optim.param_groups.0.lr``)."""
    rows: list[tuple[str, object]] = []
    for key, value in objects.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and TRUNCATED_KEY not in value and value:
            rows += _flat_objects(value, path + ".")
        else:
            rows.append((path, value))
    return rows


def _short_value(value: object) -> str:
    """One value as the text table shows it: long lists by their length, long text cut."""
    if isinstance(value, dict) and TRUNCATED_KEY in value:
        full = value[TRUNCATED_KEY]
        return f"<{full} items>" if isinstance(value.get("head"), list) else f"<{full} characters>"
    if isinstance(value, list) and len(value) > _SHOWN_ITEMS:
        return f"<{len(value)} items>"
    text = json.dumps(value, default=str)
    return text if len(text) <= _SHOWN_TEXT else text[: _SHOWN_TEXT - 1] + "…"


def render_header(report: HeaderReport, console: Console, *, all_regions: bool = False) -> None:
    """Print the decoded header, the regions and the byte totals (and the damage, if any)."""
    _render_header(report, console, all_regions=all_regions)
    if report.damage is not None:
        console.print()
        console.print(Text(f"DAMAGED: {sanitize(report.damage.message)}"))


def _render_header(report: HeaderReport, console: Console, *, all_regions: bool = False) -> None:
    """Print the decoded header, then the byte accounting with the padding explained."""
    layout = report.layout
    console.print(Text(f"{sanitize(report.path)}: {layout.format}, {layout.file_size:,} bytes"))
    console.print()
    console.print(Text("header", style="bold"))
    print_lines(console, pretty_json(layout.header).splitlines())
    console.print()
    console.print(Text("byte accounting", style="bold"))
    table = PlainTable()
    table.add_column("start", justify="right")
    table.add_column("end", justify="right")
    table.add_column("bytes", justify="right")
    table.add_column("kind")
    table.add_column("what")
    regions = layout.regions
    skipped = 0
    if not all_regions and len(regions) > MAX_REGION_ROWS:
        skipped = len(regions) - MAX_REGION_ROWS
        regions = regions[: MAX_REGION_ROWS // 2] + regions[-MAX_REGION_ROWS // 2 :]
    for i, region in enumerate(regions):
        if skipped and i == MAX_REGION_ROWS // 2:
            shows = spell(Option("all_regions"))
            table.add_row("…", "…", "…", "", f"{skipped:,} more regions ({shows} shows them)")
        what = region.name if region.kind == "tensor" else region.note
        table.add_row(
            f"{region.start:,}",
            f"{region.end:,}",
            f"{region.size:,}",
            region.kind,
            sanitize(what or ""),
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
    hint = layout.facts.get("hint")
    if hint is not None:
        console.print(Text(f"hint: {sanitize(str(hint))}"))
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


#: the kinds of change in the order the summary line counts them (always this order)
_PAST = {
    "transpose": "transposed", "split": "split", "fuse": "fused", "rename": "renamed",
    "cast": "cast", "custom": "adapted",
}  # fmt: skip


def _ordered(changed: Counter[str]) -> list[str]:
    """The kinds of change in ``_PAST``'s order, then any others by name: a line that does not
    depend on which tensor came first."""
    return [k for k in _PAST if k in changed] + sorted(k for k in changed if k not in _PAST)


def _wrap_plan(lines: list[str], width: int) -> list[str]:
    """Plan lines folded to ``width`` (a terminal): a long ``source → target`` head puts the
    target on its own line, long action lines continue under their own indent."""
    import textwrap

    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip(" "))]
        if not indent and " → " in line:
            source, _, rest = line.partition(" → ")
            out.append(source)
            out += textwrap.wrap(
                "→ " + rest, width, initial_indent="  ", subsequent_indent="    ",
                break_on_hyphens=False,
            )  # fmt: skip
            continue
        out += textwrap.wrap(
            line.strip(), width, initial_indent=indent, subsequent_indent=indent + "  ",
            break_on_hyphens=False,
        )  # fmt: skip
    return out


def render_convert(report: ConvertReport, console: Console) -> None:
    """Print a conversion plan (``--dry-run``) or what was written."""
    dropped = sum(1 for r in report.plan if r.target is None)
    written = len(report.plan) - dropped
    changed = Counter(k for r in report.plan if r.target is not None for k in r.changes)
    if report.dry_run:
        console.print(
            Text(
                f"plan: {sanitize(report.source)} ({report.source_format}) → "
                f"{sanitize(report.destination)} ({report.destination_format}), "
                f"{len(report.plan)} tensors, nothing written ({spell(Option('dry_run'))})"
            )
        )
        lines: list[str] = []
        for row in report.plan:
            dtype = row.dtype_before
            if row.dtype_after is not None and row.dtype_after != row.dtype_before:
                dtype += f" → {row.dtype_after}"
            shape = format_shape(row.shape_before)
            if row.shape_after is not None and row.shape_after != row.shape_before:
                shape += f" → {format_shape(row.shape_after)}"
            if row.target is None:
                head = f"{sanitize(row.source)} (dropped)"
            elif row.target != row.source:
                head = f"{sanitize(row.source)} → {sanitize(row.target)}"
            else:
                head = sanitize(row.source)
            lines.append(f"{head}  {dtype} {shape}")
            lines.extend(f"    {sanitize(a)}" for a in row.actions or ("copy (bytes unchanged)",))
        print_lines(console, _wrap_plan(lines, console.width) if console.is_terminal else lines)
    if report.inferred:
        n = len(report.inferred)
        console.print(Text(f"inferred from the target's structure and applied: {n} remap "
                           f"rule{'s' if n != 1 else ''}"))  # fmt: skip
        for pattern, replacement, evidence in report.inferred:
            console.print(Text(f"  {sanitize(pattern)}={sanitize(replacement)}  # {evidence}"))
    if report.summary is not None:
        from ckptctl.report.render_summary import render_summary

        console.print(Text(render_summary(report.summary)))
    for fix in report.fixes:
        console.print(Text(f"  try: {sanitize(spell(fix))}"))
    if report.written:
        console.print(
            Text(
                f"wrote {sanitize(report.destination)} ({report.destination_format}): "
                f"{written} tensor{'' if written == 1 else 's'}, "
                f"{human_bytes(report.bytes_written)}"
                + "".join(
                    f", {changed[kind]} {_PAST.get(kind, kind)}" for kind in _ordered(changed)
                )
                + (f", {dropped} left out" if dropped else "")
            )
        )

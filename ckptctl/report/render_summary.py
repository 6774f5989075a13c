"""Text rendering of the Tensor Loading Summary in Burn's exact layout.

See ``docs/formats/burn-store.md#tensor-loading-summary``.

The Burn-identical part is reproduced byte for byte: the 51-character top line, the Skipped
line's one-column misalignment, fixed plurals ("1 tensors"), ``U+26A0 U+FE0F`` warning signs,
the 52-character bottom line and no trailing newline (callers add one). ckptctl extras (dtype
notes, suggested fixes) come in additional ``├─`` sections after Errors, so a diff
against Burn's output stays meaningful. Every tensor name goes through ``report.sanitize``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.fix import Option, spell
from ckptctl.report.sanitize import sanitize
from ckptctl.report.summary import DISPLAY_LIMIT, AmbiguityKind, SummaryErrorKind

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ckptctl.report.summary import AmbiguousTensor, LoadingSummary, SummaryError

WARNING = "\u26a0\ufe0f"

_ENUM_BLOCK = (
    f"│  {WARNING}  {{count}} paths contain enum variants (detected from container stack)",
    "│      Burn includes enum variant names in paths, but PyTorch doesn't.",
    "│      Example: Burn has 'field.BaseConv.weight', PyTorch has 'field.weight'",
    "│",
    "│      💡 Solution 1: Enable skip_enum_variants flag (simplest):",
    "│",
    '│         let mut store = PytorchStore::from_file("model.pth")',
    "│             .skip_enum_variants(true);  // ← Add this",
    "│",
    "│      💡 Solution 2: Remap enum keys in source (most precise):",
    "│",
    '│         let mut store = SafetensorsStore::from_file("model.safetensors")',
    '│             .with_key_remapping(r"field\\.(\\w+)", "field.BaseConv.$1");',
    "│",
)


def burn_shape(shape: tuple[int, ...]) -> str:
    """Rust debug form of a Burn shape: ``Shape { dims: [8, 5] }``."""
    return "Shape { dims: [" + ", ".join(map(str, shape)) + "] }"


def error_message(error: SummaryError) -> str:
    """ckptctl's wording of an error, for messages and JSON (no Rust debug formatting)."""
    if error.kind is SummaryErrorKind.SHAPE_MISMATCH:
        expected = list(error.expected or ())
        found = list(error.found or ())
        return f"shape mismatch for {error.name!r}: expected {expected}, found {found}"
    return f"load error for {error.name!r}: {error.message}"


def error_line(error: SummaryError) -> str:
    """Burn's error line."""
    if error.kind is SummaryErrorKind.SHAPE_MISMATCH:
        return (
            f"Shape mismatch for '{error.name}': expected {burn_shape(error.expected or ())}"
            f", found {burn_shape(error.found or ())}"
        )
    return f"Load error for '{error.name}': Failed to load tensor data: {error.message}"


#: Why a target tensor is unproven, by kind, when the reason is the same for every such tensor
#: (said once over the list of them).
_SHARED_REASONS = {
    AmbiguityKind.ROPE: "Hugging Face's half-split RoPE layout, where wq/wk take the interleaved "
    "one; add the rope-interleaved adapter with the head counts",
    AmbiguityKind.LAYOUT: "square weights: nothing tells a Linear (transposed) from a tensor "
    "kept as is; declare their module type",
}


def ambiguity_text(amb: AmbiguousTensor) -> str:
    """Why a target tensor is unproven, naming its candidates."""
    if amb.kind is AmbiguityKind.ROPE:
        return f"from '{amb.candidates[0]}': {_SHARED_REASONS[amb.kind]}"
    if amb.kind is AmbiguityKind.LAYOUT:
        return (
            f"square weight from '{amb.candidates[0]}': nothing tells a Linear (transposed) "
            "from a tensor kept as is; declare its module type"
        )
    shown = " or ".join(f"'{c}'" for c in amb.candidates[:DISPLAY_LIMIT])
    return f"could be {shown}: same parameters and shapes; add a remap rule"


def _ambiguous_lines(ambiguous: Sequence[AmbiguousTensor]) -> list[str]:
    """The Ambiguous section's lines: a reason shared by several tensors once, over the list
    of them (each with its source); other tensors one by one with theirs."""
    lines: list[str] = []
    shown = ambiguous[:DISPLAY_LIMIT]
    for kind, reason in _SHARED_REASONS.items():
        alike = [a for a in shown if a.kind is kind]
        if len(alike) < 2:
            continue
        lines.append(f"│    {sanitize(reason)}:")
        lines += [f"│    • {sanitize(a.name)} (from '{sanitize(a.candidates[0])}')" for a in alike]
    grouped = {a.kind for a in shown if sum(b.kind is a.kind for b in shown) >= 2}
    for amb in shown:
        if amb.kind in _SHARED_REASONS and amb.kind in grouped:
            continue
        lines.append(f"│    • {sanitize(amb.name)}")
        lines.append(f"│        {sanitize(ambiguity_text(amb))}")
    return lines


def _more(lines: list[str], total: int) -> None:
    if total > DISPLAY_LIMIT:
        lines.append(f"│    ... and {total - DISPLAY_LIMIT} more")


def render_summary(summary: LoadingSummary, *, extras: bool = True) -> str:
    """Render the summary box (no trailing newline).

    Args:
        summary: the classified result.
        extras: add ckptctl's extra sections (dtype notes, suggested fixes) when non-empty;
            False gives exactly Burn's text.

    Returns:
        The box as one string.
    """
    lines = [
        "┌─ Tensor Loading Summary " + "─" * 25,
        "│",
        f"│ ✓ Successfully applied: {len(summary.applied)} tensors",
        f"│ ⊘ Skipped (filtered):  {len(summary.skipped)} tensors",
        f"│ ✗ Missing in source:    {len(summary.missing)} tensors",
        f"│ ? Unused in target:     {len(summary.unused)} tensors",
        f"│ ! Errors:               {len(summary.errors)} errors",
    ]
    if summary.missing:
        lines += ["│", "├─ Missing Tensors (requested by model but not found in source)", "│"]
        if summary.enum_paths:
            lines += [line.format(count=summary.enum_paths) for line in _ENUM_BLOCK]
        lines.append("│  First 10 missing tensors:")
        for missing in summary.missing[:DISPLAY_LIMIT]:
            lines.append(f"│    • {sanitize(missing.name)}")
            if missing.suggestion is not None:
                lines.append(f"│        Did you mean: '{sanitize(missing.suggestion)}'?")
        _more(lines, len(summary.missing))
    if summary.unused:
        lines += ["│", "├─ Unused Tensors (in source but not used by model)", "│"]
        lines.append("│  First 10 unused tensors:")
        # ckptctl names them as the source file does: renamed, they are in neither file
        unused = summary.unused_sources if extras and summary.unused_sources else summary.unused
        lines += [f"│    • {sanitize(name)}" for name in unused[:DISPLAY_LIMIT]]
        _more(lines, len(summary.unused))
        if extras and summary.unused_exclude is not None:
            drop = spell(Option("exclude", summary.unused_exclude))
            lines += ["│", f"│  Leave them out with: {sanitize(drop)}"]
    if summary.errors:
        lines += ["│", "├─ Errors", "│"]
        lines += [
            f"│  {WARNING}  {sanitize(error_line(e))}" for e in summary.errors[:DISPLAY_LIMIT]
        ]
        _more(lines, len(summary.errors))
    if extras and summary.ambiguous:
        lines += ["│", "├─ Ambiguous (not applied: nothing decides; name them)", "│"]
        lines += _ambiguous_lines(summary.ambiguous)
        _more(lines, len(summary.ambiguous))
    if extras and summary.dtype_notes:
        lines += ["│", "├─ Dtype Differences (applied; Burn does not check dtypes)", "│"]
        lines += [
            f"│    • {sanitize(n.name)}: source {n.found.value}, target {n.expected.value}"
            for n in summary.dtype_notes[:DISPLAY_LIMIT]
        ]
        _more(lines, len(summary.dtype_notes))
    if extras and summary.fixes:
        lines += ["│", "├─ Suggested Fixes (add to the command line)", "│"]
        lines += [f"│    {sanitize(spell(fix))}" for fix in summary.fixes]
    lines += ["│", "└" + "─" * 51]
    return "\n".join(lines)

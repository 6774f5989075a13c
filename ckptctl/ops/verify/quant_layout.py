"""``quant-layout``: files with quantized modules (GPTQ, AWQ, bitsandbytes, FP8,
compressed-tensors; :mod:`ckptctl.ops._quant`): packed shapes, scales, zero points and group
index agree; a broken module is named with the disagreement."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.ops._quant import check_group_index, find_quantized
from ckptctl.ops.verify._check import MESSAGE_LIMIT, Check, Phase, more, plural
from ckptctl.report.verify import Finding, Status

if TYPE_CHECKING:
    from ckptctl.model import JSONValue
    from ckptctl.ops.verify._check import Subject


def quant_layout(subject: Subject) -> Finding | None:
    """Packed shapes, scales and group sizes of every quantized module agree (None: the file
    has none)."""
    entries = subject.tensors
    by_name = {e.name: e for e in entries}
    modules = [check_group_index(q, by_name) for q in find_quantized(entries)]
    if not modules:
        return None
    kinds = ", ".join(
        dict.fromkeys(
            q.scheme.value + ("" if q.bits is None else f" {q.bits}-bit") for q in modules
        )
    )
    bad = [(q, p) for q in modules for p in q.problems]
    details: dict[str, JSONValue] = {
        "modules": len(modules),
        "schemes": list(dict.fromkeys(q.scheme.value for q in modules)),
        "problems": [{"module": q.module, "scheme": q.scheme.value, "problem": p} for q, p in bad],
    }
    if not bad:
        return Finding(
            "quant-layout",
            Status.OK,
            f"{plural(len(modules), 'quantized module')} ({kinds}): packed shapes, scales and "
            "group sizes agree",
            details=details,
        )
    failing = len({q.module for q, _ in bad})
    listed = "; ".join(f"{q.module!r} ({q.scheme.value}): {p}" for q, p in bad[:MESSAGE_LIMIT])
    return Finding(
        "quant-layout",
        Status.FAIL,
        f"{plural(failing, 'quantized module')} of {len(modules):,} with a broken layout: "
        + listed
        + more(len(bad)),
        "the tensors of a quantized module no longer fit together (a damaged file, or a "
        "conversion that renamed, cast or reshaped part of them); re-download or re-quantize it",
        details=details,
    )


CHECK = Check(
    "quant-layout",
    70,
    Phase.ENTRIES,
    "The tensors of every quantized module fit together",
    "GPTQ, AWQ, bitsandbytes, FP8 and compressed-tensors modules: the packed weight's "
    "shape, the scales, zero points and group index agree on one weight shape, bit width "
    "and group size.",
    run=quant_layout,
    reported_only=True,
)

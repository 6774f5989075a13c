"""How ``convert`` matches a source to a ``target``, pinned where mutation testing found gaps.

Covers the helpers of ``ckptctl.ops.convert`` that decide or refuse a match: the refusal text
for unproven target tensors (``_refuse_ambiguous``: singular and plural, the RoPE and the
layout kind, how many names are shown), the kind a ``ties`` suggestion must share (``_kind``:
``weight``/``bias``, norm ``gamma``/``beta``), the value check (``_same_values``) and the
square layouts a target's values decide (``_layouts_by_values``). Expected values are the
arrays built in each test and the message templates the docs spell out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ckptctl.dtypes import DType
from ckptctl.fix import Note, Option
from ckptctl.ops._infer import same_values as _same_values
from ckptctl.ops.convert import ConvertOptions, convert
from ckptctl.report.summary import AmbiguityKind, AmbiguousTensor
from tests.ops.test_ports_unproven import TO_BURN, write
from tests.strategies import array_entry

if TYPE_CHECKING:
    from pathlib import Path


def square(k: int) -> np.ndarray:
    """A 4x4 float32 weight whose values differ from every other ``square(j)`` and its own
    transpose (so no value check can match it by accident)."""
    return np.arange(16, dtype="<f4").reshape(4, 4) + 16 * k


def ties_of(report) -> list[str]:
    """The ``NAME=SOURCE`` values of the ``ties`` a report suggests, in order."""
    return [f.value for f in report.fixes if f.name == "ties"]


# --- refusal text -------------------------------------------------------------------------------


def test_three_unproven_layouts_are_all_named_in_the_plural(tmp_path: Path) -> None:
    names = ["blk.left.weight", "blk.mid.weight", "blk.right.weight"]
    src = write(tmp_path / "s.safetensors", {n: square(k) for k, n in enumerate(names)})
    zeros = np.zeros((4, 4), "<f4")  # holds none of the source's values: nothing decides
    ref = write(tmp_path / "t.bpk", dict.fromkeys(names, zeros))
    report = convert(src, tmp_path / "o.bpk", ConvertOptions(adapters=TO_BURN, target=str(ref)))
    assert not report.written
    assert report.summary is not None
    assert [a.name for a in report.summary.ambiguous] == names
    # exactly NAMES_SHOWN (3) names: all shown, no ", ..."
    assert str(report.refused) == (
        "3 target tensors are unproven ('blk.left.weight', 'blk.mid.weight', "
        "'blk.right.weight'): nothing decides which source or layout fills them; name them "
        "with remap=... or module_types=..., or pass allow_partial=True"
    )


def test_one_unproven_rope_projection_is_named_in_the_singular(tmp_path: Path) -> None:
    src = write(tmp_path / "s.safetensors", {"model.layers.0.self_attn.q_proj.weight": square(0)})
    ref = write(tmp_path / "t.bpk", {"layers.0.attention.wq.weight": square(0)})
    rule = r"^model\.layers\.(\d+)\.self_attn\.q_proj\.=layers.$1.attention.wq."
    report = convert(src, tmp_path / "o.bpk", ConvertOptions(remap=(rule,), target=str(ref)))
    assert not report.written
    assert report.summary is not None
    assert report.summary.ambiguous == (
        AmbiguousTensor(
            "layers.0.attention.wq.weight",
            AmbiguityKind.ROPE,
            ("model.layers.0.self_attn.q_proj.weight",),
        ),
    )
    assert str(report.refused) == (
        "1 target tensor is unproven ('layers.0.attention.wq.weight'): Hugging Face's q/k "
        "projections in the half-split RoPE layout where wq/wk take the interleaved one; add "
        "adapters='rope-interleaved:HEADS,KV_HEADS' with the model's num_attention_heads and "
        "num_key_value_heads, or pass allow_partial=True"
    )


# --- ties: the same kind ------------------------------------------------------------------------


def test_a_tie_is_suggested_only_from_a_tensor_of_the_same_kind(tmp_path: Path) -> None:
    # final.weight is missing; ln.weight and proj.bias both have its shape, only one its kind
    z = np.zeros(4, "<f4")
    src = write(tmp_path / "s.safetensors", {"ln.weight": z, "proj.bias": z})
    ref = write(tmp_path / "t.safetensors", {"ln.weight": z, "proj.bias": z, "final.weight": z})
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(target=str(ref)))
    assert report.summary is not None
    assert [m.name for m in report.summary.missing] == ["final.weight"]
    assert ties_of(report) == ["final.weight=ln.weight"]


def test_norm_gamma_and_beta_count_as_weight_and_bias_for_ties(tmp_path: Path) -> None:
    # Burn's LayerNorm names its parameters gamma and beta
    gamma, beta = np.ones(4, "<f4"), np.zeros(4, "<f4")
    src = write(tmp_path / "s.safetensors", {"ln.gamma": gamma, "ln.beta": beta})
    both = {"final.weight": gamma, "final.bias": beta}
    ref = write(tmp_path / "t.safetensors", {"ln.gamma": gamma, "ln.beta": beta, **both})
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(target=str(ref)))
    assert report.summary is not None
    assert {m.name for m in report.summary.missing} == set(both)
    assert set(ties_of(report)) == {"final.weight=ln.gamma", "final.bias=ln.beta"}


# --- value check --------------------------------------------------------------------------------


def test_same_values_says_equal_for_the_same_bytes_and_shape() -> None:
    a = np.arange(6, dtype="<f4").reshape(2, 3)
    assert _same_values(array_entry("s", a), array_entry("t", a.copy())) == "equal"


def test_same_values_says_transposed_for_a_non_square_transpose() -> None:
    a = np.arange(6, dtype="<f4").reshape(2, 3)
    assert _same_values(array_entry("s", a), array_entry("t", a.T.copy())) == "transposed"
    assert _same_values(array_entry("s", a), array_entry("t", a + 1)) is None


def test_same_bytes_under_another_dtype_are_not_the_same_values() -> None:
    a = np.arange(6, dtype="<f4").reshape(2, 3)
    as_int = array_entry("t", a.view("<i4"))  # the same bytes, numel and shape
    assert as_int.dtype is DType.I32
    assert _same_values(array_entry("s", a), as_int) is None


def test_a_square_the_values_cannot_decide_leaves_the_next_ones_decided(tmp_path: Path) -> None:
    names = ["blk.left.weight", "blk.mid.weight", "blk.right.weight"]
    src = write(tmp_path / "s.safetensors", {n: square(k) for k, n in enumerate(names)})
    ref = write(tmp_path / "t.bpk", {"blk.left.weight": np.zeros((4, 4), "<f4"),  # no evidence
                                     "blk.mid.weight": square(1).T.copy(),
                                     "blk.right.weight": square(2)})  # fmt: skip
    report = convert(src, tmp_path / "o.bpk", ConvertOptions(adapters=TO_BURN, target=str(ref)))
    assert report.summary is not None
    assert report.summary.ambiguous == (
        AmbiguousTensor("blk.left.weight", AmbiguityKind.LAYOUT, ("blk.left.weight",)),
    )
    checked = [w for w in report.warnings if str(w).startswith("value check")]
    assert checked == [
        Note(
            "value check: the target's 'blk.mid.weight' holds the source's values transposed: "
            "a Linear; to keep this without the target pass {fix0}",
            (Option("module_types", r"^blk\.mid\.weight$=Linear"),),
        ),
        Note(
            "value check: the target's 'blk.right.weight' holds the source's values as they "
            "are: kept; to keep this without the target pass {fix0}",
            (Option("module_types", r"^blk\.right\.weight$=Other"),),
        ),
    ]

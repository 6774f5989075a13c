"""Matching a source to a target: "did you mean", the fixes suggested, and ``convert --target``.

``ops/matching.py`` ranks names (Burn's Jaro similarity, rules, suffixes) and suggests the
``remap`` rules and ``adapters`` that make more source tensors fit a target; every suggestion
is checked here through ``suggest_fixes``, ``adapter_origins``, ``ranked_suggestion`` and
``did_you_mean``, and end to end through ``convert`` with a ``target``: the tensors it leaves
unproven (refused, named), the ``ties`` it suggests and the square layouts the target's values
decide. Expected values are the names and shapes built in each test, the layouts of PyTorch's
``nn.MultiheadAttention`` and Burn's ``MultiHeadAttention`` (query/key/value/output Linears,
``[in, out]``) and Burn's rules (``burn-store`` keyremapper.rs: enum variant segments, index
compaction).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pytest

from ckptctl.fix import Note, Option
from ckptctl.ops import matching
from ckptctl.ops.convert import ConvertOptions, convert
from ckptctl.ops.matching import adapter_origins, did_you_mean, ranked_suggestion, suggest_fixes
from ckptctl.report.summary import AmbiguityKind, AmbiguousTensor
from tests.conftest import VALID
from tests.ops.test_ports_unproven import TO_BURN, write

if TYPE_CHECKING:
    from pathlib import Path

Shapes = Mapping[str, tuple[int, ...]]
E = 8
#: nn.MultiheadAttention as PyTorch stores it, and as Burn's MultiHeadAttention does.
TORCH_MHA = {
    "attn.in_proj_weight": (3 * E, E),
    "attn.in_proj_bias": (3 * E,),
    "attn.out_proj.weight": (E, E),
    "attn.out_proj.bias": (E,),
}
BURN_MHA = {
    f"attn.{role}.{param}": (E, E) if param == "weight" else (E,)
    for role in ("query", "key", "value", "output")
    for param in ("weight", "bias")
}
P2B, B2P = Option("adapters", "pytorch-to-burn"), Option("adapters", "burn-to-pytorch")
BURN_MODULES = VALID / "burn_modules"


def fixes(source: Shapes, target: Shapes, given: tuple[str, ...] = ()) -> list[Option]:
    """What ``suggest_fixes`` proposes for ``source`` against ``target``."""
    missing = [t for t in target if t not in source]
    unused = [s for s in source if s not in target]
    return suggest_fixes(missing, unused, source, target, given=given)


def remap(*rules: str) -> list[Option]:
    return [Option("remap", rule) for rule in rules]


def torch_mha(prefix: str) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.{n.removeprefix('attn.')}": s for n, s in TORCH_MHA.items()}


def burn_mha(prefix: str) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.{n.removeprefix('attn.')}": s for n, s in BURN_MHA.items()}


# --- did you mean -------------------------------------------------------------------------------


def test_did_you_mean_prefers_the_name_without_the_enum_variant() -> None:
    """Burn's first rule: the missing name without its variant segment, when unused, beats
    any Jaro guess; when it is not unused, Jaro decides."""
    missing = "feature.BaseConv.weight"
    closer = "feature.BaseConv.weigh"
    assert matching.jaro(missing, closer) > matching.jaro(missing, "feature.weight")
    assert did_you_mean(missing, [closer, "feature.weight"]) == "feature.weight"
    assert did_you_mean(missing, [closer]) == closer


@pytest.mark.parametrize(
    ("missing", "unused", "suggested"),
    [
        ("attn.out_proj.bias", "attn.key.bias", None),  # out_proj is no key
        ("attn.key.bias", "attn.out_proj.bias", None),
        ("attn.o_proj.bias", "attn.out_proj.bias", "attn.out_proj.bias"),  # the same role
        # aligned from the end (different depths): key against out_proj
        ("model.encoder.key.weight", "model.encoder.x.out_proj.weight", None),
        ("blk.query.w.x", "blk.key.w", None),  # aligned from the start (tails differ)
        ("a.b.weight", "a.b.bias", None),  # a bias is no weight ...
        ("a.b.gamma", "a.b.beta", None),  # ... under Burn's norm names either
        ("a.b.weight", "a.b.weigh", "a.b.weigh"),
    ],
)
def test_a_jaro_guess_that_swaps_roles_or_kinds_is_no_suggestion(
    missing: str, unused: str, suggested: str | None
) -> None:
    assert did_you_mean(missing, [unused]) == unused  # close enough for Jaro alone
    assert ranked_suggestion([])(missing, [unused]) == suggested


def test_ranked_suggestion_follows_the_rules_forward() -> None:
    suggest = ranked_suggestion(remap(r"^a\.=b."), forward=True)
    assert matching.jaro("a.w", "a.ww") > matching.jaro("a.w", "b.w")
    assert suggest("a.w", ["a.ww", "b.w"]) == "b.w"  # the rule's name, not the closest one
    backward = ranked_suggestion(remap(r"^a\.=b."))
    assert backward("b.w", ["b.ww", "a.w"]) == "a.w"


def test_ranked_suggestion_prefers_the_shortest_suffix_match() -> None:
    suggest = ranked_suggestion([])
    assert suggest("bn.bias", ["aaa.bn.bias", "zz.bn.bias", "bn.biax"]) == "zz.bn.bias"
    assert suggest("module.bn.bias", ["bn.biax", "bn.bias"]) == "bn.bias"  # a prefix dropped


# --- remap rules suggested ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "target", "rule"),
    [
        ({"module.fc.weight": (2,)}, {"fc.weight": (2,)}, r"^module\.="),  # prefix removed
        ({"a.b.fc.weight": (4, 3)}, {"fc.weight": (4, 3)}, r"^a\.b\.="),  # of two segments
        ({"enc.weight": (2,)}, {"model.enc.weight": (2,)}, "^=model."),  # prefix added
        ({"fc.w": (2,)}, {"m.n.fc.w": (2,)}, "^=m.n."),
        ({"fc.w": (2,)}, {"fc.w2": (2,)}, r"\.w$=.w2"),  # the last segment renamed
        ({"a.x.w": (2,)}, {"a.x1.w": (2,)}, r"\.x\.=.x1."),  # a middle one
        ({"solo": (2,)}, {"solo2": (2,)}, "^solo$=solo2"),  # a name of one segment
        ({"a=1.w": (2,)}, {"a=2.w": (2,)}, r"^a\=1\.=a=2."),  # '=' escaped in the pattern
    ],
)
def test_each_kind_of_rename_is_one_rule(source: Shapes, target: Shapes, rule: str) -> None:
    assert fixes(source, target) == remap(rule)


@pytest.mark.parametrize(
    ("old", "new", "suggested"),
    [
        ("out_proj", "key", False),  # a rule must never move a module role onto another
        ("key", "out_proj", False),
        ("norm1", "norm_2", False),
        ("out_proj", "output", True),  # the same role under Burn's name, either way round
        ("output", "out_proj", True),
        ("q_proj", "query", True),
        ("query", "q_proj", True),
        ("fc1", "fc2", True),  # no role names: plain renames
        ("fc1", "key", True),  # only one side is a role
        ("key", "fc1", True),
    ],
)
def test_a_rule_never_moves_a_module_role(old: str, new: str, suggested: bool) -> None:
    rule = rf"\.{old}\.=.{new}."
    assert fixes({f"x.{old}.w": (2,)}, {f"x.{new}.w": (2,)}) == (remap(rule) if suggested else [])


def test_norm_parameters_are_the_adapters_job_never_a_rule() -> None:
    source = {"ln.weight": (E,), "ln.bias": (E,)}
    assert fixes(source, {"ln.gamma": (E,), "ln.beta": (E,)}) == [P2B]


@pytest.mark.parametrize(
    ("shape", "want", "fits"),
    [
        ((4, 3), (4, 3), True),
        ((3, 4), (4, 3), True),  # the rank-2 transpose the layout adapter makes
        ((5, 6), (3, 4), False),
        ((4, 3, 2), (2, 3, 4), False),  # only rank 2 is transposed
        ((3,), (3,), True),
    ],
)
def test_a_rule_renames_only_into_a_shape_that_fits(
    shape: tuple[int, ...], want: tuple[int, ...], fits: bool
) -> None:
    assert fixes({"a.w": shape}, {"b.w": want}) == (remap(r"^a\.=b.") if fits else [])


@pytest.mark.parametrize(
    ("source", "target"),
    [
        # \.w$ -> .v brings a.w in but takes b.w out: no gain
        ({"a.w": (2,), "b.w": (2,)}, {"a.v": (2,), "b.w": (2,)}),
        # \.w$ -> .v, the most frequent candidate, renames a and b into a shape error
        ({"a.w": (2,), "b.w": (2,), "c.w": (2,)}, {"a.v": (3,), "b.v": (3,), "c.u": (2,)}),
        # \.w$ -> .v would make y.w and y.v one name
        (
            {"x.w": (2,), "t.w": (2,), "y.w": (2,), "y.v": (2,)},
            {"x.v": (2,), "t.v": (2,), "k.y.w": (2,)},
        ),
    ],
    ids=["no-gain", "shape-error", "collision"],
)
def test_no_rule_is_suggested_that_gains_nothing_or_breaks_a_tensor(
    source: Shapes, target: Shapes
) -> None:
    assert fixes(source, target) == []


def test_at_most_four_rules_are_suggested() -> None:
    source = {f"l{i}.w": (i + 1,) for i in range(6)}
    target = {f"m{i}.w": (i + 1,) for i in range(6)}
    assert fixes(source, target) == remap(*(rf"^l{i}\.=m{i}." for i in range(4)))
    assert matching.MAX_FIX_RULES == 4


def test_rules_follow_the_structure_of_both_sides() -> None:
    """Each rule moves tensors into the module proven to be theirs (by shapes); where either
    of two source modules could fill a target module, no rule is proven."""
    source = {"x.a.weight": (4, 3), "x.a.bias": (4,), "x.b.weight": (5, 3), "x.b.bias": (5,)}
    target = {"x.p.weight": (4, 3), "x.p.bias": (4,), "x.q.weight": (5, 3), "x.q.bias": (5,)}
    assert sorted(f.value or "" for f in fixes(source, target)) == [r"\.a\.=.p.", r"\.b\.=.q."]
    same = {"x.a.weight": (4, 3), "x.b.weight": (4, 3)}
    assert fixes(same, {"x.p.weight": (4, 3), "x.q.weight": (4, 3)}) == []


# --- adapters suggested -------------------------------------------------------------------------


def test_family_adapter_splits_and_fuses_both_ways() -> None:
    """PyTorch's fused projection split for a Burn target; Burn's four Linears fused for a
    PyTorch one (pytorch-to-burn, tried first, changes nothing there: it is skipped, not the
    end of the search)."""
    assert fixes(TORCH_MHA, BURN_MHA) == [P2B]
    assert adapter_origins([P2B], TORCH_MHA, BURN_MHA) == {
        n: "attn.in_proj_weight" if n.endswith("weight") else "attn.in_proj_bias"
        for n in BURN_MHA
        if ".output." not in n
    } | {"attn.output.weight": "attn.out_proj.weight", "attn.output.bias": "attn.out_proj.bias"}
    assert fixes(BURN_MHA, TORCH_MHA) == [B2P]
    assert set(adapter_origins([B2P], BURN_MHA, TORCH_MHA)) == set(TORCH_MHA)
    assert fixes(TORCH_MHA, TORCH_MHA) == []


def test_family_adapter_takes_a_rename_that_keeps_the_count() -> None:
    """Burn's index compaction of an nn.Sequential renames without splitting or fusing."""
    source = {"net.0.weight": (4, 3), "net.0.bias": (4,), "net.2.weight": (5, 4),
              "net.2.bias": (5,)}  # fmt: skip
    target = {"net.0.weight": (3, 4), "net.0.bias": (4,), "net.1.weight": (4, 5),
              "net.1.bias": (5,)}  # fmt: skip
    assert fixes(source, target) == [P2B]
    assert adapter_origins([P2B], source, target) == {
        "net.0.weight": "net.0.weight",
        "net.0.bias": "net.0.bias",
        "net.1.weight": "net.2.weight",
        "net.1.bias": "net.2.bias",
    }


@pytest.mark.parametrize(
    "target",
    [
        # the split fits attn.query.weight but loses the four that fit by name
        {**TORCH_MHA, "attn.query.weight": (E, E)},
        # the split fits only as many as the names already do
        {"attn.in_proj_weight": (3 * E, E), "attn.query.weight": (E, E)},
    ],
)
def test_family_adapter_only_when_it_fits_more_than_the_names_already_do(target: Shapes) -> None:
    assert fixes(TORCH_MHA, target) == []


def test_family_adapter_applies_the_rules_then_fits_the_targets_variants() -> None:
    """The remap rules run before the adapter, and the target's enum-variant segments are
    inserted (a simulation without the target would not know them)."""
    source = {"layer1.0.conv1.weight": (4, 3, 3, 3), "layer1.0.bn1.weight": (4,)}
    target = {"layer1.blocks.0.Basic.conv1.weight": (4, 3, 3, 3),
              "layer1.blocks.0.Basic.bn1.gamma": (4,)}  # fmt: skip
    rule = remap(r"^layer1\.0\.=layer1.blocks.0.")
    assert adapter_origins([*rule, P2B], source, target) == {
        "layer1.blocks.0.Basic.conv1.weight": "layer1.0.conv1.weight",
        "layer1.blocks.0.Basic.bn1.gamma": "layer1.0.bn1.weight",
    }
    assert set(adapter_origins([P2B], source, target)) == {
        "layer1.0.conv1.weight",
        "layer1.0.bn1.gamma",
    }
    linear = {"fc.0.weight": (4, 3), "fc.0.bias": (4,)}
    variant = {"fc.0.Linear.weight": (3, 4), "fc.0.Linear.bias": (4,)}
    assert fixes(linear, variant) == [P2B]  # variant inserted, weight transposed: both fit


def test_family_adapter_of_equal_gain_is_the_first_tried() -> None:
    """One layer to split and two to fuse: both adapters fit 8 more tensors; pytorch-to-burn,
    tried first, is kept (a tie never moves the choice). One to fuse only: burn-to-pytorch
    fits fewer than the split does."""
    source = {**torch_mha("t"), **burn_mha("b1"), **burn_mha("b2")}
    target = {**burn_mha("t"), **torch_mha("b1"), **torch_mha("b2")}
    assert fixes(source, target)[-1] == P2B
    source = {**torch_mha("t"), **burn_mha("b1")}
    assert fixes(source, {**burn_mha("t"), **torch_mha("b1")})[-1] == P2B


def test_rules_are_inferred_on_what_the_family_adapter_makes() -> None:
    source = {**TORCH_MHA, "fc.weight": (4, 3), "fc.bias": (4,)}
    target = {**BURN_MHA, "fc1.weight": (3, 4), "fc1.bias": (4,)}
    found = fixes(source, target)
    assert found == [*remap(r"^fc\.=fc1."), P2B]
    # what each target tensor is built from, through the rule and the split
    origins = adapter_origins(found, source, target)
    assert origins["fc1.weight"] == "fc.weight"
    assert origins["attn.key.bias"] == "attn.in_proj_bias"
    assert origins["attn.output.weight"] == "attn.out_proj.weight"
    assert set(origins) == set(target)
    # an adapter given is not suggested again, however spelled: the rules are inferred alone
    for given in ("pytorch-to-burn", " PyTorch-To-Burn "):
        assert fixes(source, target, given=(given,)) == remap(
            r"\.out_proj\.=.output.", r"^fc\.=fc1."
        )


def test_rules_that_do_not_commute_with_the_family_adapter_are_dropped() -> None:
    """``\\.query\\.=.q.`` fits what the split makes, but applied before it (where rules run)
    it finds no query: only the adapter is suggested."""
    target = {n.replace(".query.", ".q."): s for n, s in BURN_MHA.items()}
    assert fixes(TORCH_MHA, target) == [P2B]


def norms(to_burn: int, to_torch: int) -> tuple[Shapes, Shapes]:
    """``to_burn`` norms named as PyTorch's against Burn's names, ``to_torch`` the other way;
    the sizes differ, so no remap rule between the two kinds fits."""
    source: dict[str, tuple[int, ...]] = {}
    target: dict[str, tuple[int, ...]] = {}
    for i in range(to_burn):
        source[f"b{i}.weight"], target[f"b{i}.gamma"] = (E,), (E,)
    for i in range(to_torch):
        source[f"t{i}.gamma"], target[f"t{i}.weight"] = (E + 1 + i,), (E + 1 + i,)
    return source, target


@pytest.mark.parametrize(
    ("source", "target", "adapter"),
    [
        (*norms(2, 2), P2B),  # a tie goes to pytorch-to-burn
        (*norms(1, 1), P2B),
        (*norms(1, 2), B2P),
        (*norms(2, 3), B2P),
        (*norms(3, 2), P2B),
        (*norms(0, 0), None),
        ({"weight": (E,)}, {"gamma": (E,)}, P2B),  # names without a prefix
        ({"gamma": (E,)}, {"weight": (E,)}, B2P),
        ({"fc.weight": (3, 4)}, {"fc.weight": (4, 3)}, P2B),  # a Linear weight transposed
        ({"fc.weight": (4, 4)}, {"fc.weight": (4, 4)}, None),
        ({"fc.bias": (3, 4)}, {"fc.bias": (4, 3)}, None),  # no weight: no Linear
    ],
)
def test_the_layout_adapter_is_suggested_by_norm_names_and_transposes(
    source: Shapes, target: Shapes, adapter: Option | None
) -> None:
    assert fixes(source, target) == ([] if adapter is None else [adapter])


def test_adapter_origins_needs_a_layout_adapter_and_a_plan() -> None:
    source = {"a.w": (2,), "b.w": (2,)}
    collide = [*remap(r"^a\.=b."), P2B]
    assert adapter_origins(collide, source, {"b.w": (2,)}) == {}  # refused: {}
    assert adapter_origins([Option("adapters", "half")], source, source) == {}
    assert adapter_origins([P2B], source, source) == {"a.w": "a.w", "b.w": "b.w"}


# --- convert against a target: tensors left unproven --------------------------------------------


def square(k: int) -> np.ndarray:
    """A 4x4 float32 weight whose values differ from every other ``square(j)`` and its own
    transpose (so no value check can match it by accident)."""
    return np.arange(16, dtype="<f4").reshape(4, 4) + 16 * k


def ties_of(report) -> list[str]:
    """The ``NAME=SOURCE`` values of the ``ties`` a report suggests, in order."""
    return [f.value for f in report.fixes if f.name == "ties"]


def refused(report) -> Note:
    assert not report.written
    assert isinstance(report.refused, Note)
    assert Option("allow_partial") in report.refused.fixes
    return report.refused


def test_three_unproven_layouts_are_all_named_in_the_plural(tmp_path: Path) -> None:
    names = ["blk.left.weight", "blk.mid.weight", "blk.right.weight"]
    src = write(tmp_path / "s.safetensors", {n: square(k) for k, n in enumerate(names)})
    zeros = np.zeros((4, 4), "<f4")  # holds none of the source's values: nothing decides
    ref = write(tmp_path / "t.bpk", dict.fromkeys(names, zeros))
    report = convert(src, tmp_path / "o.bpk", ConvertOptions(adapters=TO_BURN, target=str(ref)))
    assert report.summary is not None
    assert [a.name for a in report.summary.ambiguous] == names
    note = refused(report)
    # exactly NAMES_SHOWN (3) names: all shown, no ", ..."
    assert note.text.startswith("3 target tensors ")
    assert f"({', '.join(map(repr, names))})" in note.text
    assert note.fixes == (
        Option("remap", takes_value=True),
        Option("module_types", takes_value=True),
        Option("allow_partial"),
    )


def test_one_unproven_rope_projection_is_named_in_the_singular(tmp_path: Path) -> None:
    src = write(tmp_path / "s.safetensors", {"model.layers.0.self_attn.q_proj.weight": square(0)})
    ref = write(tmp_path / "t.bpk", {"layers.0.attention.wq.weight": square(0)})
    rule = r"^model\.layers\.(\d+)\.self_attn\.q_proj\.=layers.$1.attention.wq."
    report = convert(src, tmp_path / "o.bpk", ConvertOptions(remap=(rule,), target=str(ref)))
    assert report.summary is not None
    assert report.summary.ambiguous == (
        AmbiguousTensor(
            "layers.0.attention.wq.weight",
            AmbiguityKind.ROPE,
            ("model.layers.0.self_attn.q_proj.weight",),
        ),
    )
    note = refused(report)
    assert note.text.startswith("1 target tensor ")
    assert "('layers.0.attention.wq.weight')" in note.text
    assert note.fixes == (
        Option("adapters", "rope-interleaved:HEADS,KV_HEADS"),
        Option("allow_partial"),
    )


# --- convert against a target: what the values decide -------------------------------------------


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
    checked = [w for w in report.warnings if isinstance(w, Note) and "value check" in w.text]
    # each decided tensor, named, with the module type its values show, as the rule to pass
    assert [(w.fixes, "'blk.mid.weight'" in w.text, "Linear" in w.text) for w in checked] == [
        ((Option("module_types", r"^blk\.mid\.weight$=Linear"),), True, True),
        ((Option("module_types", r"^blk\.right\.weight$=Other"),), False, False),
    ]
    assert "'blk.right.weight'" in checked[1].text


def two_modules(tmp_path: Path, shape: tuple[int, ...], ref_b) -> tuple[Path, Path]:
    """Two source modules ``a.m`` and ``b.m`` whose weights have one shape (names and shapes
    cannot tell which is the target's ``y.m``); the target's ``y.m.weight`` holds ``ref_b``
    of ``b.m.weight``'s values."""
    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal(shape).astype("<f4") for _ in "ab")
    src = write(tmp_path / "s.safetensors", {"a.m.weight": a, "b.m.weight": b})
    ref = write(tmp_path / "t.safetensors", {"x.other.weight": np.zeros((7, 7), "<f4"),
                                             "y.m.weight": ref_b(b)})  # fmt: skip
    return src, ref


@pytest.mark.parametrize(
    ("shape", "ref_b", "decided"),
    [
        # a rank-2 weight is a Linear, which arrives transposed in Burn's layout
        ((2, 3), lambda b: np.ascontiguousarray(b.T), True),
        ((2, 3), lambda b: np.ascontiguousarray(b.T) + 1, False),
        ((2, 3), lambda b: np.ascontiguousarray(b.T).view("<i4"), False),  # bytes, not values
        # any other rank keeps its layout
        ((2, 3, 4), lambda b: b, True),
        ((2, 3, 4), lambda b: b.view("<i4"), False),
    ],
    ids=["transposed", "other-values", "other-dtype", "equal", "equal-bytes-other-dtype"],
)
def test_the_targets_values_decide_which_source_module_fills_it(
    tmp_path: Path, shape: tuple[int, ...], ref_b, decided: bool
) -> None:
    src, ref = two_modules(tmp_path, shape, ref_b)
    opts = ConvertOptions(target=str(ref), allow_partial=True, dry_run=True)
    report = convert(src, tmp_path / "o.safetensors", opts)
    rows = {r.source: r.target for r in report.plan}
    assert rows["b.m.weight"] == ("y.m.weight" if decided else "b.m.weight")
    assert rows["a.m.weight"] == "a.m.weight"  # never moved onto a module it does not fill


# --- convert against a target: ties suggested ---------------------------------------------------


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


def test_ties_are_suggested_for_the_first_nine_missing_names_only(tmp_path: Path) -> None:
    # ten missing names, each with exactly one source of its shape and kind; the search is
    # bounded to the first nine (sorted), three times the names a grouped warning shows
    sources = {f"s{k}.weight": np.zeros(k + 1, "<f4") for k in range(10)}
    missing = {f"m{k}.weight": np.zeros(k + 1, "<f4") for k in range(10)}
    src = write(tmp_path / "s.safetensors", sources)
    ref = write(tmp_path / "t.safetensors", {**sources, **missing})
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(target=str(ref)))
    assert report.summary is not None
    assert [m.name for m in report.summary.missing] == sorted(missing)
    assert ties_of(report) == [f"m{k}.weight=s{k}.weight" for k in range(9)]


def test_an_ambiguous_missing_name_does_not_end_the_search_for_ties(tmp_path: Path) -> None:
    # blk.x and blk.y could each be blk.a or blk.b (listed as ambiguous); head.weight, sorted
    # after them, has exactly one source of its shape: emb.weight
    rng = np.random.default_rng(0)
    src = write(tmp_path / "s.safetensors", {
        "blk.a.weight": rng.standard_normal((4, 4)).astype("<f4"),
        "blk.b.weight": rng.standard_normal((4, 4)).astype("<f4"),
        "emb.weight": np.zeros((5, 3), "<f4"),
    })  # fmt: skip
    ref = write(tmp_path / "t.safetensors", {
        "blk.x.weight": np.zeros((4, 4), "<f4"),
        "blk.y.weight": np.zeros((4, 4), "<f4"),
        "emb.weight": np.zeros((5, 3), "<f4"),
        "head.weight": np.zeros((5, 3), "<f4"),
    })  # fmt: skip
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(target=str(ref)))
    assert report.summary is not None
    assert [a.name for a in report.summary.ambiguous] == ["blk.x.weight", "blk.y.weight"]
    assert [m.name for m in report.summary.missing] == [
        "blk.x.weight",
        "blk.y.weight",
        "head.weight",
    ]
    assert ties_of(report) == ["head.weight=emb.weight"]


def test_a_missing_name_no_source_fits_does_not_end_the_search_for_ties(tmp_path: Path) -> None:
    # a.weight (5 elements) has no source of its shape; b.weight (2) has one: p.weight
    src = write(tmp_path / "s.safetensors", {"p.weight": np.zeros(2, "<f4")})
    ref = write(tmp_path / "t.safetensors", {
        "p.weight": np.zeros(2, "<f4"),
        "a.weight": np.zeros(5, "<f4"),
        "b.weight": np.zeros(2, "<f4"),
    })  # fmt: skip
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(target=str(ref)))
    assert report.summary is not None
    assert [m.name for m in report.summary.missing] == ["a.weight", "b.weight"]
    assert ties_of(report) == ["b.weight=p.weight"]


def test_a_tie_the_pipeline_refuses_does_not_end_the_search_for_ties(tmp_path: Path) -> None:
    # the copy a.weight=p.weight would be renamed onto q.weight, which the source has (two
    # tensors under one name: refused); b.weight=q.weight, sorted after it, still works
    src = write(tmp_path / "s.safetensors", {
        "p.weight": np.zeros(2, "<f4"),
        "q.weight": np.zeros(3, "<f4"),
    })  # fmt: skip
    ref = write(tmp_path / "t.safetensors", {
        "p.weight": np.zeros(2, "<f4"),
        "q.weight": np.zeros(3, "<f4"),
        "a.weight": np.zeros(2, "<f4"),
        "b.weight": np.zeros(3, "<f4"),
    })  # fmt: skip
    opts = ConvertOptions(target=str(ref), remap=(r"^a\.(.*)=q.$1",))
    report = convert(src, tmp_path / "o.safetensors", opts)
    assert report.summary is not None
    assert [m.name for m in report.summary.missing] == ["a.weight", "b.weight"]
    assert ties_of(report) == ["b.weight=q.weight"]


def tied_head(tmp_path: Path) -> tuple[Path, Path]:
    """A source that stores embed.weight only, and a target that also wants head.weight."""
    emb = np.arange(12, dtype="<f4").reshape(4, 3)
    src = write(tmp_path / "s.safetensors", {"embed.weight": emb})
    ref = write(tmp_path / "t.safetensors", {"embed.weight": emb, "head.weight": emb})
    return src, ref


def test_a_tie_is_suggested_when_the_copy_would_fill_the_missing_name(tmp_path: Path) -> None:
    src, ref = tied_head(tmp_path)
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(target=str(ref)))
    assert ties_of(report) == ["head.weight=embed.weight"]


@pytest.mark.parametrize(
    "options",
    [
        ConvertOptions(exclude=(r"^head\.",)),  # the filter would drop the copy
        ConvertOptions(remap=(r"^head\.=out.",)),  # a rule would rename the copy
    ],
    ids=["excluded", "renamed"],
)
def test_no_tie_is_suggested_where_the_copy_would_not_keep_the_missing_name(
    tmp_path: Path, options: ConvertOptions
) -> None:
    src, ref = tied_head(tmp_path)
    opts = replace(options, target=str(ref))
    report = convert(src, tmp_path / "o.safetensors", opts)
    assert report.summary is not None
    assert [m.name for m in report.summary.missing] == ["head.weight"]
    assert ties_of(report) == []


def test_a_tie_is_checked_with_the_files_module_classes(tmp_path: Path) -> None:
    """The copy is checked as the conversion runs: with the classes a whole-model file names.

    ``mixed_module.pt`` (make_burn_modules.py) holds ``embed = nn.Embedding(10, 8)`` and a
    2-layer bidirectional ``nn.LSTM(4, 6)``. With layer 1 left out, the tensors show one layer;
    the file's class says two, as the declaration does, so the conversion keeps Burn's Vec of
    layers. A check that ignored the class would see the declaration contradicted and drop the
    tie.
    """
    target: dict[str, np.ndarray] = {
        "embed.weight": np.zeros((10, 8), "<f4"),
        "head.weight": np.zeros((10, 8), "<f4"),
    }
    # Burn's BiLstm (forward, reverse), each of 4 gates of two Linears [d_input, d_output]
    for direction in ("forward", "reverse"):
        for gate in ("input", "forget", "output", "cell"):
            prefix = f"lstm.0.{direction}.{gate}_gate."
            target[prefix + "input_transform.weight"] = np.zeros((4, 6), "<f4")
            target[prefix + "input_transform.bias"] = np.zeros(6, "<f4")
            target[prefix + "hidden_transform.weight"] = np.zeros((6, 6), "<f4")
            target[prefix + "hidden_transform.bias"] = np.zeros(6, "<f4")
    ref = write(tmp_path / "t.bpk", target)
    opts = ConvertOptions(
        adapters=("pytorch-to-burn",),
        exclude=(r"^(encoder|gru|act|inst|fc)\.", "_l1"),
        module_types=("^lstm=LSTM(num_layers=2)",),
        target=str(ref),
    )
    report = convert(BURN_MODULES / "mixed_module.pt", tmp_path / "o.bpk", opts)
    assert report.summary is not None
    assert [m.name for m in report.summary.missing] == ["head.weight"]
    assert report.summary.errors == ()
    assert ties_of(report) == ["head.weight=embed.weight"]

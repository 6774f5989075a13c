"""``ops/matching.py`` pinned where its mutants showed gaps: module roles, the family-adapter
choice and the metadata-only simulation behind suggestions (issue 24)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from ckptctl.ops import matching
from ckptctl.ops.matching import ranked_suggestion

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


@pytest.mark.parametrize(
    ("old", "new", "moves"),
    [
        ("out_proj", "key", True),
        ("key", "out_proj", True),
        ("norm1", "norm_2", True),
        ("out_proj", "output", False),  # the same role under Burn's name, either way round
        ("output", "out_proj", False),
        ("q_proj", "query", False),
        ("query", "q_proj", False),
        ("key", "key", False),
        ("fc1", "fc2", False),  # no role names: plain renames
        ("fc1", "key", False),  # only one side is a role
        ("key", "fc1", False),
    ],
)
def test_moves_a_role(old: str, new: str, moves: bool) -> None:
    assert matching._moves_a_role(old, new) is moves


@pytest.mark.parametrize(
    ("a", "b", "swaps"),
    [
        ("attn.key.bias", "attn.out_proj.bias", True),
        ("attn.out_proj.bias", "attn.out_proj.bias", False),
        ("attn.o_proj.bias", "attn.out_proj.bias", False),
        # aligned from the end only (different depths): key against out_proj
        ("x.key.w", "y.z.out_proj.w", True),
        # aligned from the start only: query against key, the tails differ in length
        ("blk.query.w.x", "blk.key.w", True),
        ("fc.weight", "fc.bias", False),
    ],
)
def test_swaps_roles_by_segments(a: str, b: str, swaps: bool) -> None:
    """Names are compared segment by segment, aligned from the start and from the end."""
    assert matching._swaps_roles(a, b) is swaps
    assert matching._swaps_roles(b, a) is swaps


def test_a_jaro_guess_that_swaps_roles_is_no_suggestion() -> None:
    suggest = ranked_suggestion([])
    assert matching.did_you_mean("attn.out_proj.bias", ["attn.key.bias"]) == "attn.key.bias"
    assert suggest("attn.out_proj.bias", ["attn.key.bias"]) is None
    # the same role under another name is still suggested
    assert suggest("attn.o_proj.bias", ["attn.out_proj.bias"]) == "attn.out_proj.bias"


def test_family_adapter_splits_and_fuses_both_ways() -> None:
    """PyTorch's fused projection split for a Burn target; Burn's four Linears fused for a
    PyTorch one (pytorch-to-burn, tried first, changes nothing there: it is skipped, not the
    end of the search)."""
    to_burn = matching._family_adapter(TORCH_MHA, BURN_MHA)
    assert to_burn == ("pytorch-to-burn", BURN_MHA)
    to_torch = matching._family_adapter(BURN_MHA, TORCH_MHA)
    assert to_torch == ("burn-to-pytorch", TORCH_MHA)
    assert matching._family_adapter(TORCH_MHA, TORCH_MHA) is None


def test_family_adapter_takes_a_rename_that_keeps_the_count() -> None:
    """Burn's index compaction of an nn.Sequential renames without splitting or fusing."""
    source = {"net.0.weight": (4, 3), "net.0.bias": (4,), "net.2.weight": (5, 4),
              "net.2.bias": (5,)}  # fmt: skip
    target = {"net.0.weight": (3, 4), "net.0.bias": (4,), "net.1.weight": (4, 5),
              "net.1.bias": (5,)}  # fmt: skip
    assert matching._family_adapter(source, target) == ("pytorch-to-burn", target)


def test_family_adapter_leaves_norm_renames_to_the_plain_rules() -> None:
    source = {"ln.weight": (E,), "ln.bias": (E,)}
    target = {"ln.gamma": (E,), "ln.beta": (E,)}
    assert matching._simulate(source, "pytorch-to-burn", target) == target
    assert matching._family_adapter(source, target) is None


def test_family_adapter_only_when_it_fits_more_than_the_names_already_do() -> None:
    """A split that fits one target tensor but loses the four that fit by name is no gain."""
    target = {**TORCH_MHA, "attn.query.weight": (E, E)}
    assert matching._simulate(TORCH_MHA, "pytorch-to-burn", target) is not None
    assert matching._family_adapter(TORCH_MHA, target) is None


def test_simulate_applies_the_rules_then_fits_the_target() -> None:
    """The remap rules run before the adapter, and the target's enum-variant segments are
    inserted (a simulation without the target would not know them)."""
    source = {"layer1.0.conv1.weight": (4, 3, 3, 3), "layer1.0.bn1.weight": (4,)}
    target = {"layer1.blocks.0.Basic.conv1.weight": (4, 3, 3, 3),
              "layer1.blocks.0.Basic.bn1.gamma": (4,)}  # fmt: skip
    rules = (r"^layer1\.0\.=layer1.blocks.0.",)
    assert matching._simulate(source, "pytorch-to-burn", target, rules) == target
    assert matching._simulate(source, "pytorch-to-burn", target) == {
        "layer1.0.conv1.weight": (4, 3, 3, 3),
        "layer1.0.bn1.gamma": (4,),
    }
    linear = {"fc.0.weight": (4, 3), "fc.0.bias": (4,)}
    variant = {"fc.0.Linear.weight": (3, 4), "fc.0.Linear.bias": (4,)}
    assert matching._simulate(linear, "pytorch-to-burn", variant) == variant


@pytest.mark.parametrize(
    ("shape", "want", "fits"),
    [
        ((4, 3), (4, 3), True),
        ((3, 4), (4, 3), True),  # the rank-2 transpose the layout adapter makes
        ((5, 6), (3, 4), False),
        ((4, 3, 2), (2, 3, 4), False),  # only rank 2 is transposed
        ((3,), (3,), True),
        (None, (4, 3), False),
        (None, (3, 4), False),
    ],
)
def test_fits_same_shape_or_rank_2_transpose(
    shape: tuple[int, ...] | None, want: tuple[int, ...], fits: bool
) -> None:
    assert matching._fits(shape, want) is fits


def test_did_you_mean_prefers_the_name_without_the_enum_variant() -> None:
    """Burn's first rule: the missing name without its variant segment, when unused, beats
    any Jaro guess; when it is not unused, Jaro decides."""
    missing = "feature.BaseConv.weight"
    closer = "feature.BaseConv.weigh"
    assert matching.jaro(missing, closer) > matching.jaro(missing, "feature.weight")
    assert matching.did_you_mean(missing, [closer, "feature.weight"]) == "feature.weight"
    assert matching.did_you_mean(missing, [closer]) == closer


def test_candidates_count_every_rule_by_the_names_it_would_fix() -> None:
    """Each kind of candidate rule, counted once per name it turns into a missing one."""
    unused = [
        "module.fc.weight", "module.fc.bias",  # a prefix to remove
        "enc.weight", "enc.bias",  # a prefix to add
        "fc.w", "gc.w",  # the last segment renamed
        "a.x.w", "b.x.w",  # a middle segment renamed
        "ln.weight",  # a norm parameter: the adapter's job, never a rule
        "attn.out_proj.v",  # a role onto another role: never a rule
        "solo",  # one segment
    ]  # fmt: skip
    missing = [
        "fc.weight", "fc.bias", "model.enc.weight", "model.enc.bias", "fc.w2", "gc.w2",
        "a.x1.w", "b.x1.w", "ln.gamma", "ln.scale", "attn.key.v", "attn.kk.v", "solo2",
    ]  # fmt: skip
    found = matching._candidates(missing, unused)
    assert dict(found) == {
        (r"^module\.", ""): 2,
        ("^", "model."): 2,
        (r"\.w$", ".w2"): 2,
        (r"\.x\.", ".x1."): 2,
        (r"\.weight$", ".scale"): 1,  # gamma skipped, the next candidate still counted
        (r"\.out_proj\.", ".kk."): 1,  # key skipped, the next candidate still counted
        ("^solo$", "solo2"): 1,
        # and what the names above also allow: enc.* and ln.weight onto fc.*, fc.w onto fc.*
        (r"^enc\.", "fc."): 2,
        (r"^ln\.", "fc."): 1,
        (r"\.w$", ".weight"): 1,
        (r"\.w$", ".bias"): 1,
    }


@pytest.mark.parametrize(
    ("name", "renamed"),
    [
        ("ln.weight", "ln.gamma"),
        ("ln.gamma", "ln.weight"),
        ("ln.bias", "ln.beta"),
        ("ln.running_mean", "ln.running_mean"),
        ("weight", "gamma"),
        ("beta", "bias"),
    ],
)
def test_norm_renamed(name: str, renamed: str) -> None:
    assert matching._norm_renamed(name) == renamed


def _norms(to_burn: int, to_torch: int) -> tuple[dict[str, tuple[int, ...]], ...]:
    source: dict[str, tuple[int, ...]] = {}
    target: dict[str, tuple[int, ...]] = {}
    for i in range(to_burn):
        source[f"b{i}.weight"], target[f"b{i}.gamma"] = (E,), (E,)
    for i in range(to_torch):
        source[f"t{i}.gamma"], target[f"t{i}.weight"] = (E,), (E,)
    return source, target


@pytest.mark.parametrize(
    ("to_burn", "to_torch", "hint"),
    [
        (2, 2, "pytorch-to-burn"),  # a tie goes to pytorch-to-burn
        (1, 1, "pytorch-to-burn"),
        (1, 2, "burn-to-pytorch"),
        (2, 3, "burn-to-pytorch"),
        (3, 2, "pytorch-to-burn"),
        (0, 0, None),
    ],
)
def test_adapter_hint_counts_norm_names_each_way(
    to_burn: int, to_torch: int, hint: str | None
) -> None:
    assert matching._adapter_hint(*_norms(to_burn, to_torch)) == hint


def test_adapter_hint_for_names_without_a_prefix_and_transposes() -> None:
    assert matching._adapter_hint({"weight": (E,)}, {"gamma": (E,)}) == "pytorch-to-burn"
    assert matching._adapter_hint({"gamma": (E,)}, {"weight": (E,)}) == "burn-to-pytorch"
    assert matching._adapter_hint({"fc.weight": (3, 4)}, {"fc.weight": (4, 3)}) == (
        "pytorch-to-burn"
    )
    assert matching._adapter_hint({"fc.weight": (4, 4)}, {"fc.weight": (4, 4)}) is None
    assert matching._adapter_hint({"fc.bias": (3, 4)}, {"fc.bias": (4, 3)}) is None


def _missing_unused(
    source: Mapping[str, tuple[int, ...]], target: Mapping[str, tuple[int, ...]]
) -> tuple[list[str], list[str]]:
    return [t for t in target if t not in source], [s for s in source if s not in target]


#: A PyTorch attention layer and a renamed Linear, against the Burn model's names.
PORT_SOURCE = {**TORCH_MHA, "fc.weight": (4, 3), "fc.bias": (4,)}
PORT_TARGET = {**BURN_MHA, "fc1.weight": (3, 4), "fc1.bias": (4,)}


def test_rules_are_inferred_on_what_the_family_adapter_makes() -> None:
    from ckptctl.fix import Option

    fixes = matching.suggest_fixes(*_missing_unused(PORT_SOURCE, PORT_TARGET),
                                   PORT_SOURCE, PORT_TARGET)  # fmt: skip
    assert fixes == [Option("remap", r"^fc\.=fc1."), Option("adapters", "pytorch-to-burn")]
    # what each target tensor is built from, through the rule and the split
    origins = matching.adapter_origins(fixes, PORT_SOURCE, PORT_TARGET)
    assert origins["fc1.weight"] == "fc.weight"
    assert origins["attn.key.bias"] == "attn.in_proj_bias"
    assert origins["attn.output.weight"] == "attn.out_proj.weight"
    assert set(origins) == set(PORT_TARGET)


def test_an_adapter_given_is_not_suggested_again_however_spelled() -> None:
    from ckptctl.fix import Option

    want = [Option("remap", r"\.out_proj\.=.output."), Option("remap", r"^fc\.=fc1.")]
    for given in ("pytorch-to-burn", " PyTorch-To-Burn "):
        fixes = matching.suggest_fixes(*_missing_unused(PORT_SOURCE, PORT_TARGET),
                                       PORT_SOURCE, PORT_TARGET, given=(given,))  # fmt: skip
        assert fixes == want


def test_at_most_four_rules_are_suggested() -> None:
    source = {f"l{i}.w": (i + 1,) for i in range(6)}
    target = {f"m{i}.w": (i + 1,) for i in range(6)}
    fixes = matching.suggest_fixes(*_missing_unused(source, target), source, target)
    assert [f.value for f in fixes] == [rf"^l{i}\.=m{i}." for i in range(matching.MAX_FIX_RULES)]


def test_adapter_origins_needs_a_layout_adapter_and_a_plan() -> None:
    from ckptctl.fix import Option

    source = {"a.w": (2,), "b.w": (2,)}
    collide = [Option("remap", r"^a\.=b."), Option("adapters", "pytorch-to-burn")]
    assert matching.adapter_origins(collide, source, {"b.w": (2,)}) == {}  # refused: {}
    assert matching.adapter_origins([Option("adapters", "half")], source, source) == {}
    plain = [Option("adapters", "pytorch-to-burn")]
    assert matching.adapter_origins(plain, source, source) == {"a.w": "a.w", "b.w": "b.w"}


def test_vetted_keeps_the_leading_rules_the_structure_allows() -> None:
    """A rule stops the list when it moves a tensor into a module proven to be another source
    module's, into one several could fill, or to a name the target lacks."""
    from ckptctl.fix import Option

    source = {"x.a.weight": (4, 3), "x.a.bias": (4,), "x.b.weight": (5, 3), "x.b.bias": (5,)}
    target = {"x.p.weight": (4, 3), "x.p.bias": (4,), "x.q.weight": (5, 3), "x.q.bias": (5,)}
    right = [Option("remap", r"\.a\.=.p."), Option("remap", r"\.b\.=.q.")]
    assert matching._vetted(right, source, target) == right
    wrong = Option("remap", r"\.a\.=.q.")  # x.q is proven to be x.b's
    assert matching._vetted([right[1], wrong, right[0]], source, target) == [right[1]]
    assert matching._vetted([Option("remap", r"\.a\.=.z.")], source, target) == []
    same = {"x.a.weight": (4, 3), "x.b.weight": (4, 3)}  # either could be x.p: unproven
    assert matching._vetted([right[0]], same, {"x.p.weight": (4, 3), "x.q.weight": (4, 3)}) == []


def _torch_mha(prefix: str) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.{n.removeprefix('attn.')}": s for n, s in TORCH_MHA.items()}


def _burn_mha(prefix: str) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.{n.removeprefix('attn.')}": s for n, s in BURN_MHA.items()}


def test_family_adapter_of_equal_gain_is_the_first_tried() -> None:
    """One layer to split and two to fuse: both adapters fit 8 more tensors; pytorch-to-burn,
    tried first, is kept (a tie never moves the choice)."""
    source = {**_torch_mha("t"), **_burn_mha("b1"), **_burn_mha("b2")}
    target = {**_burn_mha("t"), **_torch_mha("b1"), **_torch_mha("b2")}
    for adapter in ("pytorch-to-burn", "burn-to-pytorch"):
        made = matching._simulate(source, adapter, target)
        assert made is not None
        assert sum(made[n] == target[n] for n in made if n in target) == 8
    found = matching._family_adapter(source, target)
    assert found is not None
    assert found[0] == "pytorch-to-burn"
    # one to fuse only: burn-to-pytorch fits fewer than the split does
    found = matching._family_adapter({**_torch_mha("t"), **_burn_mha("b1")},
                                     {**_burn_mha("t"), **_torch_mha("b1")})  # fmt: skip
    assert found is not None
    assert found[0] == "pytorch-to-burn"


def test_family_adapter_that_fits_only_as_many_is_no_gain() -> None:
    target = {"attn.in_proj_weight": (3 * E, E), "attn.query.weight": (E, E)}
    assert matching._family_adapter(TORCH_MHA, target) is None


def test_best_rule_needs_a_real_gain() -> None:
    """``\\.w$ -> .v`` brings a.w in but takes b.w out: no gain, no rule."""
    assert matching._best_rule(["a.w", "b.w"], {"a.v": (2,), "b.w": (2,)}, 1, [(2,), (2,)]) is None


def test_best_rule_skips_a_rule_into_a_shape_error_or_a_collision() -> None:
    """The most frequent candidate is passed over, the next one taken."""
    shape_error = matching._best_rule(
        ["a.w", "b.w", "c.w"], {"a.v": (3,), "b.v": (3,), "c.u": (2,)}, 1, [(2,)] * 3
    )
    assert shape_error is not None
    assert (shape_error[0].pattern, shape_error[0].replacement) == (r"\.w$", ".u")
    collision = matching._best_rule(
        ["x.w", "t.w", "y.w", "y.v"], {"x.v": (2,), "t.v": (2,), "k.y.w": (2,)}, 1, [(2,)] * 4
    )
    assert collision is not None
    assert (collision[0].pattern, collision[0].replacement) == ("^", "k.")


def test_best_rule_escapes_an_equals_sign_in_its_pattern() -> None:
    found = matching._best_rule(["a=1.w"], {"a=2.w": (2,)}, 1, [(2,)])
    assert found is not None
    assert found[1] == ["a=2.w"]
    assert (found[0].pattern, found[0].replacement) == (r"^a\=1\.", "a=2.")


def test_rules_that_do_not_commute_with_the_family_adapter_are_dropped() -> None:
    """``\\.query\\.=.q.`` fits what the split makes, but applied before it (where rules run)
    it finds no query: only the adapter is suggested."""
    target = {n.replace(".query.", ".q."): s for n, s in BURN_MHA.items()}
    found = matching._family_adapter(TORCH_MHA, target)
    assert found is not None
    made = found[1]
    rules = matching._rules(list(made), list(made.values()), target, True)
    assert [f.value for f in rules] == [r"\.query\.=.q."]
    from ckptctl.fix import Option

    fixes = matching.suggest_fixes(*_missing_unused(TORCH_MHA, target), TORCH_MHA, target)
    assert fixes == [Option("adapters", "pytorch-to-burn")]


def test_candidates_keep_prefixes_of_several_segments() -> None:
    found = matching._candidates(["fc.weight", "m.n.fc.w"], ["a.b.fc.weight", "fc.w"])
    assert found[(r"^a\.b\.", "")] == 1
    assert found[("^", "m.n.")] == 1


def test_ranked_suggestion_follows_the_rules_forward() -> None:
    from ckptctl.fix import Option

    suggest = ranked_suggestion([Option("remap", r"^a\.=b.")], forward=True)
    assert matching.jaro("a.w", "a.ww") > matching.jaro("a.w", "b.w")
    assert suggest("a.w", ["a.ww", "b.w"]) == "b.w"  # the rule's name, not the closest one
    backward = ranked_suggestion([Option("remap", r"^a\.=b.")])
    assert backward("b.w", ["b.ww", "a.w"]) == "a.w"


def test_ranked_suggestion_prefers_the_shortest_suffix_match() -> None:
    suggest = ranked_suggestion([])
    assert suggest("bn.bias", ["aaa.bn.bias", "zz.bn.bias", "bn.biax"]) == "zz.bn.bias"
    assert suggest("module.bn.bias", ["bn.biax", "bn.bias"]) == "bn.bias"  # a prefix dropped


def test_ranked_suggestion_never_offers_a_bias_for_a_weight() -> None:
    suggest = ranked_suggestion([])
    assert matching.did_you_mean("a.b.weight", ["a.b.bias"]) == "a.b.bias"
    assert suggest("a.b.weight", ["a.b.bias"]) is None
    assert suggest("a.b.gamma", ["a.b.beta"]) is None

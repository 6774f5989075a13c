"""``ops/matching.py`` pinned where its mutants showed gaps: module roles, the family-adapter
choice and the metadata-only simulation behind suggestions (issue 24)."""

from __future__ import annotations

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

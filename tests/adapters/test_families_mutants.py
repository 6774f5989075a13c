"""The family stage's edges, found by mutation testing (issue 24): which layers are recognised
beside each other, the words of its refusals and warnings, and Burn's contiguous renumbering
against a target (burn-store keyremapper.rs:225-330: ``map_indices_contiguous``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ckptctl.adapters._base import ActionKind
from ckptctl.adapters.families import _EXCLUDE, TO_BURN, contiguous_names, restructure
from ckptctl.adapters.modules import parse_module_rules
from ckptctl.errors import UnsupportedError
from ckptctl.fix import Note
from tests.strategies import array_entry

D = 4


def f32(name: str, *shape: int) -> Any:
    return array_entry(name, np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))


def mha(prefix: str) -> list[Any]:
    return [
        f32(f"{prefix}.in_proj_weight", 3 * D, D),
        f32(f"{prefix}.in_proj_bias", 3 * D),
        f32(f"{prefix}.out_proj.weight", D, D),
        f32(f"{prefix}.out_proj.bias", D),
    ]


def transformer_layer(prefix: str, *, decoder: bool = False) -> list[Any]:
    out = mha(f"{prefix}.self_attn")
    if decoder:
        out += mha(f"{prefix}.multihead_attn")
    out += [f32(f"{prefix}.linear1.weight", 2 * D, D), f32(f"{prefix}.linear1.bias", 2 * D)]
    out += [f32(f"{prefix}.linear2.weight", D, 2 * D), f32(f"{prefix}.linear2.bias", D)]
    for norm in ("norm1", "norm2", "norm3") if decoder else ("norm1", "norm2"):
        out += [f32(f"{prefix}.{norm}.weight", D), f32(f"{prefix}.{norm}.bias", D)]
    return out


def outputs(result: Any) -> dict[str, Any]:
    """Output name -> the Built that made it."""
    return {b.entry.name: b for built in result.placed.values() for b in built}


# --- which layers are recognised -------------------------------------------------------------


def test_an_attention_without_a_layer_around_it_does_not_stop_the_layers_after_it() -> None:
    # "a" has a self_attn but no linear1/norms: a plain MultiheadAttention; "b" is a whole layer
    result = restructure(mha("a.self_attn") + transformer_layer("b"), TO_BURN)
    names = set(outputs(result))
    assert {"a.self_attn.query.weight", "b.mha.query.weight", "b.pwff.linear_inner.weight"} <= (
        names
    )
    assert not {n for n in names if n.startswith("b.self_attn")}


def test_an_attention_after_a_layers_own_is_split_too() -> None:
    # a.self_attn belongs to the layer "a" (split by it); b.attn stands alone and comes after
    result = restructure(transformer_layer("a") + mha("b.attn"), TO_BURN)
    got = outputs(result)
    assert "a.mha.key.weight" in got
    assert "b.attn.key.weight" in got
    assert "b.attn.in_proj_weight" not in got
    key = got["b.attn.key.weight"]
    want = np.arange(3 * D * D, dtype=np.float32).reshape(3 * D, D)[D : 2 * D].T
    assert np.array_equal(np.asarray(key.entry.load()), want)


def test_the_decoders_evidence_names_its_cross_attention() -> None:
    result = restructure(transformer_layer("dec", decoder=True), TO_BURN)
    reason = outputs(result)["dec.self_attn.query.weight"].actions[0].reason
    assert reason == (
        "TransformerDecoderLayer (names: self_attn, linear1, linear2, norm1, norm2, "
        "multihead_attn, norm3)"
    )
    encoder = outputs(restructure(transformer_layer("enc"), TO_BURN))
    assert encoder["enc.mha.query.weight"].actions[0].reason == (
        "TransformerEncoderLayer (names: self_attn, linear1, linear2, norm1, norm2)"
    )


def test_a_recurrent_layer_needs_two_rank_2_weights() -> None:
    # a 1-D weight_ih_l0 beside a 2-D weight_hh_l0 is not an RNN: both pass through untouched
    entries = [f32("r.weight_ih_l0", 8), f32("r.weight_hh_l0", 2, 2)]
    result = restructure(entries, TO_BURN)
    assert set(outputs(result)) == {"r.weight_ih_l0", "r.weight_hh_l0"}
    assert all(not b.actions for b in outputs(result).values())


# --- the words of refusals and warnings ----------------------------------------------------------


def test_kdim_attention_is_refused_naming_the_tensor_and_burns_shape() -> None:
    entries = [f32("m.a.q_proj_weight", 8, 8), f32("m.a.k_proj_weight", 8, 4)]
    with pytest.raises(UnsupportedError) as info:
        restructure(entries, TO_BURN)
    assert str(info.value) == (
        "tensor 'm.a.q_proj_weight': a MultiheadAttention with kdim/vdim other than embed_dim "
        "has no Burn counterpart (Burn's query, key and value are all [d_model, d_model], "
        "mha.rs:133)"
    )
    assert info.value.hint is _EXCLUDE


@pytest.mark.parametrize(("shape", "shown"), [((20, 8), "[20, 8]"), ((24,), "[24]")])
def test_an_in_proj_weight_of_another_shape_is_refused(shape: tuple[int, ...], shown: str) -> None:
    with pytest.raises(UnsupportedError) as info:
        restructure([f32("attn.in_proj_weight", *shape)], TO_BURN)
    assert str(info.value) == (
        f"tensor 'attn.in_proj_weight' has shape {shown}: a MultiheadAttention in_proj_weight "
        "is [3 * embed_dim, embed_dim]"
    )


def test_an_attentions_extra_tensor_is_refused_with_the_exclude_hint() -> None:
    # torch's bias_k (add_bias_kv=True): Burn's MultiheadAttention has no such parameter
    with pytest.raises(UnsupportedError) as info:
        restructure([*mha("a"), f32("a.bias_k", 1, 1, D)], TO_BURN)
    assert str(info.value) == (
        "tensor 'a.bias_k' of MultiheadAttention 'a' has no Burn counterpart (pytorch-to-burn)"
    )
    assert info.value.hint is _EXCLUDE


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (1, "1 Transformer layer ('enc.layers.0')"),
        (3, "3 Transformer layers ('enc.layers.0', 'enc.layers.1', 'enc.layers.2')"),
        (4, "4 Transformer layers ('enc.layers.0', 'enc.layers.1', 'enc.layers.2', ...)"),
    ],
)
def test_the_post_norm_warning_shows_three_layers_at_most(count: int, shown: str) -> None:
    entries = [e for i in range(count) for e in transformer_layer(f"enc.layers.{i}")]
    (note,) = restructure(entries, TO_BURN).warnings
    assert isinstance(note, Note)
    assert note.text == (
        f"{shown} assumed post-norm (norm_first=False, PyTorch's default): a state_dict "
        "cannot tell, and pre-norm layers swap their norms in Burn; if they are pre-norm, "
        "pass {fix0}"
    )


# --- contiguous indices, and a target that keeps the gaps ---------------------------------------


def gapped() -> list[Any]:
    return [f32("fc.0.weight", 2, 2), f32("fc.2.weight", 2, 2), f32("head.weight", 2)]


def test_gapped_indices_are_renumbered_with_an_action_saying_why() -> None:
    got = outputs(restructure(gapped(), TO_BURN))
    assert set(got) == {"fc.0.weight", "fc.1.weight", "head.weight"}
    (action,) = got["fc.1.weight"].actions
    assert action.kind is ActionKind.RENAME
    assert action.detail == "fc.2.weight → fc.1.weight"
    assert action.reason == (
        "gapped indices renumbered as Burn's PytorchStore does (map_indices_contiguous)"
    )
    assert action.adapter == TO_BURN
    assert got["fc.1.weight"].sources == ("fc.2.weight",)
    assert not got["fc.0.weight"].actions
    assert not got["head.weight"].actions


def test_the_largest_usize_is_an_index_and_one_more_is_a_name() -> None:
    # Burn parses each segment with `part.parse::<usize>()` (keyremapper.rs): 2**64 - 1 is an
    # index (the only one after "a": renumbered 0), 2**64 does not parse and stays as it is
    names = ["a.18446744073709551615.w", "a.18446744073709551616.w", "b.+7.w"]
    assert contiguous_names(names) == {"a.18446744073709551615.w": "a.0.w", "b.+7.w": "b.0.w"}


@pytest.mark.parametrize(
    ("target", "want"),
    [
        # the target has the gap (a Vec of enum variants): the names stay
        ({"fc.0.weight": 1, "fc.2.weight": 1, "head.weight": 1}, "fc.2.weight"),
        # the target is contiguous, and names that need no renumbering are in it too
        ({"fc.0.weight": 1, "fc.1.weight": 1, "head.weight": 1}, "fc.1.weight"),
        # the target has none of these names: Burn's default, renumbered
        ({"other.weight": 1}, "fc.1.weight"),
        ({"fc.0.weight": 1, "head.weight": 1}, "fc.1.weight"),
    ],
)
def test_a_target_decides_whether_gaps_stay(target: dict[str, int], want: str) -> None:
    got = outputs(restructure(gapped(), TO_BURN, target=target))
    assert set(got) == {"fc.0.weight", want, "head.weight"}


def test_an_attentions_class_from_the_file_is_its_evidence() -> None:
    modules = {"attn": ("MultiheadAttention", {"embed_dim": D})}
    result = restructure(mha("attn"), TO_BURN, modules=modules)
    reason = outputs(result)["attn.query.weight"].actions[0].reason
    assert reason == "MultiheadAttention (class MultiheadAttention from file)"


def test_a_layers_rule_does_not_reach_the_layer_beside_it() -> None:
    rules = parse_module_rules([r"^b\.=TransformerEncoderLayer(norm_first=True)"])
    result = restructure(transformer_layer("a") + transformer_layer("b"), TO_BURN, rules=rules)
    (note,) = result.warnings
    assert "1 Transformer layer ('a') assumed post-norm" in str(note)
    reasons = {n: b.actions[0].reason for n, b in outputs(result).items()}
    assert reasons["b.mha.query.weight"] == (
        r"TransformerEncoderLayer (module rule #1 '^b\.=TransformerEncoderLayer(norm_first=True)')"
    )
    assert reasons["a.mha.query.weight"] == (
        "TransformerEncoderLayer (names: self_attn, linear1, linear2, norm1, norm2)"
    )


def test_an_attention_beside_a_root_level_layer_is_split() -> None:
    # a file that is one TransformerEncoderLayer (names at the root) plus an attention "x"
    layer = [e.renamed(e.name.removeprefix("r.")) for e in transformer_layer("r")]
    got = outputs(restructure(layer + mha("x"), TO_BURN))
    assert {"mha.query.weight", "x.query.weight", "x.output.weight"} <= set(got)
    assert "x.in_proj_weight" not in got

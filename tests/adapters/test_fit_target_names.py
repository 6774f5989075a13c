"""``adapters.families.fit_target_names``: enum-variant segments from declarations, and the
target's own spelling of a name (variant path, or the index before Burn's compaction), each
rename with the evidence that chose it (found by mutation testing, issue 24)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ckptctl.adapters._base import Action, ActionKind, PlanItem
from ckptctl.adapters.families import TO_BURN, TO_TORCH, fit_target_names
from ckptctl.adapters.modules import parse_module_rules
from tests.strategies import array_entry


def item(name: str) -> PlanItem:
    return PlanItem(name, array_entry(name, np.zeros(2, dtype=np.float32)), ())


def fitted(
    names: list[str], direction: str, rules: tuple[str, ...] = (), target: Any = None
) -> list[tuple[str | None, tuple[Action, ...]]]:
    items = [item(n) for n in names]
    out = fit_target_names(items, direction, parse_module_rules(rules), target)
    return [(i.entry.name if i.entry else None, i.actions) for i in out]


def renamed(old: str, new: str, why: str, direction: str) -> tuple[Action, ...]:
    return (Action(ActionKind.RENAME, f"{old} → {new}", why, direction),)


RULE = "^norm\\.=LayerNorm(variant=Layer)"
LABEL = "module rule #1 '^norm\\.=LayerNorm(variant=Layer)'"


def test_a_variant_rule_inserts_the_segment_for_burn_once() -> None:
    got = fitted(["norm.gamma", "norm.Layer.beta", "fc.weight"], TO_BURN, (RULE,))
    assert got == [
        ("norm.Layer.gamma", renamed("norm.gamma", "norm.Layer.gamma", LABEL, TO_BURN)),
        ("norm.Layer.beta", ()),  # already there: not twice
        ("fc.weight", ()),
    ]


def test_the_variant_goes_right_before_the_parameter_of_a_nested_module() -> None:
    rule = "enc\\.norm\\.=LayerNorm(variant=Layer)"
    got = fitted(["model.enc.norm.gamma"], TO_BURN, (rule,))
    assert [name for name, _ in got] == ["model.enc.norm.Layer.gamma"]


def test_a_variant_rule_takes_the_segment_out_for_pytorch() -> None:
    got = fitted(["norm.Layer.gamma", "norm.gamma"], TO_TORCH, (RULE,))
    assert got == [
        ("norm.gamma", renamed("norm.Layer.gamma", "norm.gamma", LABEL, TO_TORCH)),
        ("norm.gamma", ()),  # no segment to take out
    ]


def test_a_variant_rule_leaves_a_one_segment_name() -> None:
    assert fitted(["norm"], TO_BURN, ("^norm=LayerNorm(variant=Layer)",)) == [("norm", ())]


def test_the_target_spells_the_variant_path_for_burn() -> None:
    target = {"layer1.blocks.0.Basic.conv1.weight": 0, "fc.weight": 0}
    got = fitted(["layer1.blocks.0.conv1.weight", "fc.weight", "other.weight"], TO_BURN,
                 target=target)  # fmt: skip
    why = "the target's enum-variant path"
    assert got == [
        ("layer1.blocks.0.Basic.conv1.weight",
         renamed("layer1.blocks.0.conv1.weight", "layer1.blocks.0.Basic.conv1.weight", why,
                 TO_BURN)),
        ("fc.weight", ()),  # the target has it: unchanged
        ("other.weight", ()),  # the target has nothing like it
    ]  # fmt: skip


def test_the_target_without_variants_for_pytorch() -> None:
    target = {"features.0.conv.weight": 0}
    got = fitted(["features.0.Conv.conv.weight", "features.1.Conv.conv.weight"], TO_TORCH,
                 target=target)  # fmt: skip
    why = "the target's name without enum variants"
    assert got == [
        ("features.0.conv.weight",
         renamed("features.0.Conv.conv.weight", "features.0.conv.weight", why, TO_TORCH)),
        ("features.1.Conv.conv.weight", ()),  # its name without variants is not in the target
    ]  # fmt: skip


def test_each_direction_fits_only_its_own_way() -> None:
    # for Burn the variant-less target name is not taken, for PyTorch the variant path is not
    assert fitted(["a.Basic.w"], TO_BURN, target={"a.w": 0}) == [("a.Basic.w", ())]
    assert fitted(["a.w"], TO_TORCH, target={"a.Basic.w": 0}) == [("a.w", ())]


@pytest.mark.parametrize("direction", [TO_BURN, TO_TORCH])
def test_burns_compaction_is_undone_when_more_names_then_fit(direction: str) -> None:
    target = {"fc.0.weight": 0, "fc.2.weight": 0, "fc.4.weight": 0}
    got = fitted(["fc.0.weight", "fc.1.weight", "fc.2.weight"], direction, target=target)
    why = "the target's index for it (before Burn's compaction)"
    assert got == [
        ("fc.0.weight", ()),
        ("fc.2.weight", renamed("fc.1.weight", "fc.2.weight", why, direction)),
        ("fc.4.weight", renamed("fc.2.weight", "fc.4.weight", why, direction)),
    ]


def test_compaction_is_not_undone_when_as_many_names_fit_already() -> None:
    # the target's x.1 and x.2 compact to x.0 and x.1: x.1 fits as it is and undone (as x.2)
    target = {"x.1.weight": 0, "x.2.weight": 0}
    assert fitted(["x.1.weight"], TO_TORCH, target=target) == [("x.1.weight", ())]


def test_no_target_and_dropped_items_pass_through() -> None:
    dropped = PlanItem("gone", None, ())
    kept = item("fc.1.weight")
    out = fit_target_names([dropped, kept], TO_TORCH, (), None)
    assert out == [dropped, kept]
    assert out[0] is dropped
    assert out[1] is kept

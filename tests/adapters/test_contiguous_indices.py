"""Burn's contiguous renumbering of gapped indices, and a target that keeps the gaps.

Burn's ``PytorchStore`` renumbers the numeric segments of ``nn.Sequential`` names 0, 1, 2 ...
among those after the same prefix (burn-store keyremapper.rs:225-330,
``map_indices_contiguous``), parsing each segment with ``part.parse::<usize>()``;
``pytorch-to-burn`` does the same unless a target holds the gapped names. Checked through the
family stage's outputs: their names, sources and the rename action saying why.
"""

from __future__ import annotations

import numpy as np
import pytest

from ckptctl.adapters import ActionKind
from ckptctl.adapters.families import TO_BURN, Built, restructure
from tests.strategies import array_entry


def built(names: list[str], target: dict[str, int] | None = None) -> dict[str, Built]:
    """Output name -> the Built that made it, for tensors ``names`` through pytorch-to-burn."""
    entries = [array_entry(name, np.zeros((2, 2), np.float32)) for name in names]
    result = restructure(entries, TO_BURN, target=target)
    return {b.entry.name: b for group in result.placed.values() for b in group}


GAPPED = ["fc.0.weight", "fc.2.weight", "head.weight"]


def test_gapped_indices_are_renumbered_with_an_action_saying_why() -> None:
    got = built(GAPPED)
    assert list(got) == ["fc.0.weight", "fc.1.weight", "head.weight"]
    (action,) = got["fc.1.weight"].actions
    assert action.kind is ActionKind.RENAME
    assert action.detail == "fc.2.weight → fc.1.weight"
    assert "map_indices_contiguous" in action.reason
    assert action.adapter == TO_BURN
    assert got["fc.1.weight"].sources == ("fc.2.weight",)
    assert not got["fc.0.weight"].actions
    assert not got["head.weight"].actions


def test_the_largest_usize_is_an_index_and_one_more_is_a_name() -> None:
    # 2**64 - 1 parses as a usize (the only index after "a": renumbered 0), 2**64 does not and
    # stays as it is; "+7" parses too (Rust's usize accepts a leading '+')
    names = ["a.18446744073709551615.w", "a.18446744073709551616.w", "b.+7.w"]
    got = built(names)
    assert list(got) == ["a.0.w", "a.18446744073709551616.w", "b.0.w"]
    assert got["a.0.w"].sources == ("a.18446744073709551615.w",)
    assert not got["a.18446744073709551616.w"].actions


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
    assert list(built(GAPPED, target)) == ["fc.0.weight", want, "head.weight"]

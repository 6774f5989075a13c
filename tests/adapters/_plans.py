"""Shared checks of adapter plans for the adapters' mutation tests (issue 24)."""

from __future__ import annotations

import numpy as np

from ckptctl.adapters import Action, PlanItem
from ckptctl.model import TensorEntry

#: torch's recurrent tensor kinds (``{kind}_l{k}``) in torch's order, and the Burn transform
#: (``gate.{transform}.weight|bias``) each one's rows come from
RNN_PARTS = (
    ("weight_ih", "input_transform"),
    ("weight_hh", "hidden_transform"),
    ("bias_ih", "input_transform"),
    ("bias_hh", "hidden_transform"),
)

#: output name -> (source name, expected array, the one action that made it)
Want = dict[str, tuple[str, np.ndarray, Action]]


def assert_bytes(entry: TensorEntry | None, want: np.ndarray) -> None:
    assert entry is not None
    assert entry.shape == want.shape
    assert np.array(entry.load()).tobytes() == np.ascontiguousarray(want).tobytes()


def assert_plan(items: list[PlanItem], want: Want) -> None:
    """The outputs in order, each from its source by exactly its action, with its bytes."""
    assert [item.entry.name if item.entry else None for item in items] == list(want)
    for item in items:
        assert item.entry is not None
        source, array, action = want[item.entry.name]
        assert item.source == source, item.entry.name
        assert item.actions == (action,), item.entry.name
        assert_bytes(item.entry, array)

"""Edge cases of ``ckptctl.adapters`` that issue 24's mutation run of ``adapters/*`` found untested.

Pinned here, each worked out from the code and its docstrings:

* ``modules.parse_type_call`` and ``_option_value``: Burn's family names behind a dotted path
  or ``Struct:`` (``BiGru`` is ``GRU(bidirectional=True)``), option values of each type, and the
  whole message and hint of every refusal (``ModuleRule`` names its rule number in them);
* ``_rows.RowsData.read_range``: bytes relative to the rows' own start, a range ending exactly
  at ``nbytes``, length 0, and the refusal of a range outside the rows;
* ``families.slots_of`` for a recurrent layer with no ``num_layers`` fact (one layer);
* ``rename._groups_text``: the hint naming a pattern's groups, compared whole;
* ``rope.RopePermute.apply``: which tensors it leaves alone, the output-feature axis of a Burn
  ``[in, out]`` weight, the exact action, and the hint of a bad head count;
* ``rope.needs_interleaving``: an adapter is a RoPE one by its name before the first ``:``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ckptctl.adapters import Action, ActionKind
from ckptctl.adapters._rows import row_slice
from ckptctl.adapters.families import Layer, Slot, slots_of
from ckptctl.adapters.modules import Decision
from ckptctl.adapters.rope import RopePermute, needs_interleaving
from ckptctl.errors import SelectionError
from ckptctl.model import TensorData
from tests.strategies import array_entry

# --- modules.py: parse_type_call / _option_value -----------------------------------------------


# --- _rows.py: RowsData.read_range -------------------------------------------------------------


def middle_row() -> TensorData:
    """The middle row of a [3, 4] byte tensor 0..11: bytes 4..7, a RowsData(start=4, nbytes=4)."""
    entry = array_entry("t", np.arange(12, dtype=np.uint8).reshape(3, 4))
    return row_slice(entry, 1, 1, "mid").data


def test_rows_read_range_is_relative_to_the_rows() -> None:
    data = middle_row()
    assert bytes(data.read_range(0, 4)) == bytes([4, 5, 6, 7])
    assert bytes(data.read_range(1, 2)) == bytes([5, 6])
    assert bytes(data.read_range(1, 3)) == bytes([5, 6, 7])
    # empty ranges, at the start and exactly at the end
    assert bytes(data.read_range(0, 0)) == b""
    assert bytes(data.read_range(4, 0)) == b""


@pytest.mark.parametrize(
    ("start", "length"),
    [(0, 5), (2, 3), (4, 1), (-1, 2), (-1, 0), (0, -1), (3, -1)],
)
def test_rows_read_range_refuses_a_range_outside_the_rows(start: int, length: int) -> None:
    data = middle_row()
    with pytest.raises(ValueError, match="outside") as info:
        data.read_range(start, length)
    assert str(info.value) == f"range {start}+{length} outside a tensor of 4 bytes"


# --- families.py: _recurrent (through slots_of) ------------------------------------------------


def test_a_recurrent_layer_without_num_layers_is_one_layer_of_linears() -> None:
    layer = Layer("RNN", "rnn", "rnn", {"hidden": 2}, "names")
    assert slots_of(layer, {}) == [
        Slot("rnn.weight_ih_l0", (0, 2), "rnn.gate.input_transform.weight", True, "Linear"),
        Slot("rnn.weight_hh_l0", (0, 2), "rnn.gate.hidden_transform.weight", True, "Linear"),
        Slot("rnn.bias_ih_l0", (0, 2), "rnn.gate.input_transform.bias", False, "Linear"),
        Slot("rnn.bias_hh_l0", (0, 2), "rnn.gate.hidden_transform.bias", False, "Linear"),
    ]


# --- rename.py: _groups_text (the hint of a missing group) -------------------------------------


# --- rope.py: RopePermute.apply ----------------------------------------------------------------


def test_rope_leaves_other_parameters_and_ranks_alone() -> None:
    adapter = RopePermute(2, 2, interleave=True)
    scale = array_entry("attn.q_proj.scale", np.zeros(4, "<f4"))
    conv = array_entry("attn.q_proj.weight", np.zeros((4, 2, 2), "<f4"))
    assert adapter.apply(scale) == (scale, ())
    assert adapter.apply(conv) == (conv, ())


def test_rope_half_split_on_burn_columns() -> None:
    # Burn's [in, out] wq (3 inputs, 2 heads of 4 output features), read from a file
    name = "layers.0.attention.wq.weight"
    array = np.arange(24, dtype="<f4").reshape(3, 8)
    entry = replace(array_entry(name, array), offset=64)
    adapter = RopePermute(
        2,
        1,
        interleave=False,
        decisions={name: Decision(name, "Linear", "rule")},
        columns_if_linear=True,
    )
    out, actions = adapter.apply(entry)
    assert actions == (
        Action(
            ActionKind.CUSTOM,
            "8 features, 2 heads -> half-split",
            "RoPE q/k layout",
            "rope-half-split:2,1",
        ),
    )
    assert out is not None
    assert (out.name, out.shape, out.dtype, out.nbytes, out.offset) == (
        name,
        (3, 8),
        entry.dtype,
        96,
        None,
    )
    # half-split within each head of 4: even features first, then odd ones
    assert out.load().tobytes() == array[:, [0, 2, 1, 3, 4, 6, 5, 7]].tobytes()


def test_rope_bad_head_count_hint_names_the_adapter() -> None:
    entry = array_entry("layers.0.self_attn.k_proj.weight", np.zeros((6, 3), "<f4"))
    with pytest.raises(SelectionError) as info:
        RopePermute(4, 2, interleave=False).apply(entry)
    assert str(info.value) == (
        "tensor 'layers.0.self_attn.k_proj.weight': 6 output features are not 2 heads of an "
        "even size"
    )
    assert info.value.hint == "check the head counts of rope-half-split:4,2"


@pytest.mark.parametrize(
    "spec", ["rope-interleaved", " ROPE-Half-Split:4 ", "rope-interleaved:32,8"]
)
def test_needs_interleaving_knows_a_rope_adapter_by_its_name(spec: str) -> None:
    # the name is what comes before the first ":", as parse_adapter reads it (a spec without
    # head counts names the RoPE adapter too: parse_adapter refuses it for the missing count)
    moved = [("model.layers.0.self_attn.q_proj.weight", "layers.0.attention.wq.weight")]
    assert needs_interleaving(moved, ("pytorch-to-burn",)) == moved
    assert needs_interleaving(moved, ("pytorch-to-burn", spec)) == []

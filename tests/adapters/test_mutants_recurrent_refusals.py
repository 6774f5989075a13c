"""Recurrent layers a file holds that Burn has no module for, and the layers' edges, that the
issue 24 mutation run of ``adapters/*`` (session 15) found untested in ``families._torch_layers``.

Worked out from the code and torch's parameter naming (``weight_ih_l{k}``, ``weight_hh_l{k}``,
``weight_hr_l{k}`` for an LSTM with ``proj_size``, ``_reverse`` for the second direction):

* an LSTM with ``proj_size`` (seen by its ``weight_hr_l0``, or only by a whole-model file's
  class attribute) is refused with the tensor or the class as evidence and the hint to leave the
  layer out;
* a ``weight_ih_l0`` whose rows are not 4, 3 or 1 blocks of the hidden size (``weight_hh_l0``'s
  second axis), including a hidden size of 0, is refused with its rows and hidden size;
* a ``weight_ih_l0`` without its ``weight_hh_l0`` is no layer, and the layers after it are still
  found;
* a family declaration matches only the layer's own tensors (``lstm_head`` is not in ``lstm``);
* a one-layer bidirectional LSTM whose target keeps its layers in a ``Vec`` (``lstm.0.forward``)
  gets the index.

Messages and hints are compared whole.
"""

from __future__ import annotations

import numpy as np
import pytest

from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
from ckptctl.dtypes import DType
from ckptctl.fix import Note, Option
from tests.adapters.test_mutants_recurrent_facts import (
    IN,
    P2B,
    H,
    Record,
    entries,
    ramp,
    refusal,
    torch_lstm,
)

LEAVE_OUT = Note("leave the layer out with {fix0}", (Option("exclude", takes_value=True),))


def names(record: Record, target=None, module_types: tuple[str, ...] = ()) -> list[str]:
    options = PipelineOptions(adapters=(P2B,), module_types=module_types)
    items, _ = run_pipeline(entries(record), options, target)
    return [item.entry.name for item in items if item.entry is not None]


def test_an_lstm_with_proj_size_is_refused_naming_its_projection() -> None:
    sd = torch_lstm("enc.lstm")
    sd["enc.lstm.weight_hr_l0"] = ramp((1, H), 0)
    error = refusal(sd)
    assert error.message == (
        "tensor 'enc.lstm.weight_hr_l0': an LSTM with proj_size has no Burn counterpart "
        "(Burn's Lstm has no projection)"
    )
    assert error.hint == LEAVE_OUT


def test_an_lstm_whose_class_says_proj_size_is_refused_naming_the_class() -> None:
    modules = {"lstm": ("LSTM", {"bidirectional": False, "num_layers": 1, "proj_size": 1})}
    error = refusal(torch_lstm("lstm"), modules=modules)
    assert error.message == "class LSTM from file: an LSTM with proj_size has no Burn counterpart"
    assert error.hint == LEAVE_OUT


@pytest.mark.parametrize(
    ("rows", "hidden"),
    [
        (5, 2),  # 2.5 blocks: no family
        (9, 2),  # 4 blocks and one row more
        (2 * 2, 2),  # 2 blocks: no family has two gates
        (0, 0),  # no hidden size
    ],
)
def test_input_weights_of_no_gate_count_are_refused(rows: int, hidden: int) -> None:
    sd = {
        "rnn.weight_ih_l0": ramp((rows, IN), 0),
        "rnn.weight_hh_l0": ramp((rows, hidden), 100),
    }
    assert refusal(sd).message == (
        f"tensor 'rnn.weight_ih_l0' has {rows} rows for hidden size {hidden}: not an LSTM "
        "(4 gates), GRU (3) or RNN (1)"
    )


def test_input_weights_without_hidden_weights_are_no_layer_and_the_search_goes_on() -> None:
    sd = {"a.weight_ih_l0": ramp((4 * H, IN), 0), "a.bias": ramp((H,), 50), **torch_lstm("b")}
    got = names(sd)
    assert got[:2] == ["a.weight_ih_l0", "a.bias"]  # left as they are
    assert got[2:4] == ["b.input_gate.input_transform.weight", "b.input_gate.input_transform.bias"]
    assert len(got) == 2 + 16


def test_a_family_declaration_matches_only_the_layers_own_tensors() -> None:
    # `lstm_head` starts with `lstm` but is not inside it: the GRU rule is about lstm_head, so
    # the LSTM `lstm` is not contradicted (the rule matches no recurrent layer at all)
    sd = {**torch_lstm("lstm"), "lstm_head.weight": ramp((2, 3), 7)}
    got = names(sd, module_types=("^lstm_head=GRU",))
    assert got[0] == "lstm.input_gate.input_transform.weight"
    assert got[-1] == "lstm_head.weight"


def test_a_one_layer_bilstm_kept_in_a_vec_by_the_target_gets_the_index() -> None:
    sd = torch_lstm("lstm")
    for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        sd[f"lstm.{kind}_l0_reverse"] = sd[f"lstm.{kind}_l0"] + np.float32(0.5)
    shape = (IN, H)
    in_vec = {f"lstm.0.{d}.input_gate.input_transform.weight": (DType.F32, shape)
              for d in ("forward", "reverse")}  # fmt: skip
    plain = {name.replace("lstm.0.", "lstm."): spec for name, spec in in_vec.items()}
    assert names(sd, in_vec)[:2] == [
        "lstm.0.forward.input_gate.input_transform.weight",
        "lstm.0.forward.input_gate.input_transform.bias",
    ]
    assert names(sd, in_vec)[16] == "lstm.0.reverse.input_gate.input_transform.weight"
    assert names(sd, plain)[0] == "lstm.forward.input_gate.input_transform.weight"

"""Recurrent layers (LSTM, GRU, RNN) between torch's fused tensors and Burn's gate Linears.

Worked out from torch's parameter naming (``weight_ih_l{k}``, ``weight_hh_l{k}``,
``weight_hr_l{k}`` for an LSTM with ``proj_size``, ``_reverse`` for the second direction) and
Burn 0.22's sources as ``families``' docstring cites them: Burn writes a record in
field-declaration order (Lstm input, forget, output, cell gate, lstm_module.rs:61-70;
``input_transform`` before ``hidden_transform``; weight before bias; ``Vec`` index by index);
torch rows i, f, g, o are Burn's input, forget, cell and output gates. Expected arrays come
from numpy slicing and ``.T`` of the inputs; plans are compared whole (names, sources, actions,
bytes). Refusals are checked by class, a keyword and the facts: the tensor, the rule, the rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from ckptctl.adapters import Action, ActionKind, PlanItem
from ckptctl.adapters.families import TO_TORCH, Built, restructure
from ckptctl.adapters.modules import parse_module_rules
from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
from ckptctl.dtypes import DType
from ckptctl.errors import ExitCode, SelectionError, UnsupportedError
from ckptctl.fix import Note, Option
from ckptctl.model import JSONValue, TensorEntry
from tests.adapters._plans import RNN_PARTS, Want, assert_bytes, assert_plan
from tests.strategies import array_entry

FIXTURES = Path(__file__).parents[2] / "fixtures" / "valid" / "burn_modules"
P2B, B2P = "pytorch-to-burn", "burn-to-pytorch"
H, IN = 2, 3  # hidden size and input size of the recurrent layers
LSTM_NAMES = "LSTM (names: weight_ih_l0 with 4 x 2 rows)"
Record = dict[str, np.ndarray]
Modules = Mapping[str, tuple[str, Mapping[str, JSONValue]]]  # a whole-model file's classes

# torch's row block of each LSTM gate (i, f, g, o), and Burn's field order (lstm_module.rs:61-70)
TORCH_ROW = {"input_gate": 0, "forget_gate": 1, "cell_gate": 2, "output_gate": 3}
BURN_GATES = ("input_gate", "forget_gate", "output_gate", "cell_gate")


def ramp(shape: tuple[int, ...], start: int) -> np.ndarray:
    """Distinct float32 values ``start, start + 1, ...`` in C order."""
    return (np.arange(int(np.prod(shape)), dtype=np.float32) + start).reshape(shape)


def join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def entries(record: Record) -> list[TensorEntry]:
    return [array_entry(name, array) for name, array in record.items()]


def outputs(
    record: Record,
    *adapters: str,
    module_types: tuple[str, ...] = (),
    modules: Modules | None = None,
) -> list[PlanItem]:
    options = PipelineOptions(adapters=adapters, module_types=module_types)
    items, warnings = run_pipeline(entries(record), options, modules=modules)
    assert warnings == []
    return items


def refusal(record: Record, keyword: str, modules: Modules | None = None) -> UnsupportedError:
    """The error :func:`outputs` of ``record`` with pytorch-to-burn refuses it with."""
    with pytest.raises(UnsupportedError, match=keyword) as info:
        outputs(record, P2B, modules=modules)
    assert info.value.exit_code == ExitCode.UNSUPPORTED
    return info.value


def torch_lstm(prefix: str, layers: int = 1, bias: tuple[int, ...] = (4 * H,)) -> Record:
    sd: Record = {}
    for k in range(layers):
        shapes = {
            "weight_ih": (4 * H, IN if k == 0 else H),
            "weight_hh": (4 * H, H),
            "bias_ih": bias,
            "bias_hh": bias,
        }
        for kind, shape in shapes.items():
            sd[join(prefix, f"{kind}_l{k}")] = ramp(shape, 1000 * len(sd))
    return sd


def burn_lstm(sd: Record, prefix: str, layers: int, reason: str = LSTM_NAMES) -> Want:
    """Burn name -> (torch source, expected array, action), in the order Burn writes them."""
    out: Want = {}
    for k in range(layers):
        base = join(prefix, str(k) if layers > 1 else "")
        for gate in BURN_GATES:
            first = TORCH_ROW[gate] * H
            for transform, kind in (("input_transform", "ih"), ("hidden_transform", "hh")):
                for param in ("weight", "bias"):
                    torch = join(prefix, f"{param}_{kind}_l{k}")
                    burn = join(base, gate, transform, param)
                    rows = sd[torch][first : first + H]
                    how = ", transposed" if param == "weight" else ""
                    detail = f"{torch}[{first}:{first + H}] → {burn}{how}"
                    out[burn] = (
                        torch,
                        rows.T if param == "weight" else rows,
                        Action(ActionKind.SPLIT, detail, reason, P2B),
                    )
    return out


# --- declarations and class attributes against the file ------------------------------------


@pytest.mark.parametrize(
    ("rules", "modules", "tensor", "claim", "seen", "fix"),
    [
        (("^lstm=GRU",), None, "lstm.weight_ih_l0", "says GRU", "weight_ih_l0 with 4 x 2", "rule"),
        # the evidence a rule contradicts is the whole-model file's class, when there is one
        (
            ("^lstm=GRU",),
            {"lstm": ("LSTM", {"bidirectional": False, "num_layers": 1, "proj_size": 0})},
            "lstm.weight_ih_l0",
            "says GRU",
            "class LSTM",
            "rule",
        ),
        (("^lstm=LSTM(num_layers=2)",), None, "lstm.weight_ih_l0", "says num_layers=2",
         "num_layers=1", "option"),
        ((r"bias_hh=LSTM(bidirectional=false, num_layers=2)",), None, "lstm.bias_hh_l0",
         "says num_layers=2", "num_layers=1", "option"),
    ],
)  # fmt: skip
def test_a_declaration_the_file_contradicts_is_refused_with_its_hint(
    rules: tuple[str, ...],
    modules: Modules | None,
    tensor: str,
    claim: str,
    seen: str,
    fix: str,
) -> None:
    with pytest.raises(SelectionError, match=claim) as info:
        outputs(torch_lstm("lstm"), P2B, module_types=rules, modules=modules)
    label = parse_module_rules(rules)[0].label
    assert info.value.message.startswith(f"tensor {tensor!r}: {label} ")
    assert seen in info.value.message
    assert fix in str(info.value.hint)


def test_class_attributes_the_file_lacks_are_skipped() -> None:
    # an LSTM pickled before torch 1.8 has no proj_size: the whole-model reader keeps the
    # attributes it finds (formats/pytorch/_structure.py), so the layer's class names what it can
    sd = torch_lstm("lstm")
    modules = {"lstm": ("LSTM", {"bidirectional": False, "num_layers": 1, "batch_first": True})}
    items = outputs(sd, P2B, modules=modules)
    assert_plan(items, burn_lstm(sd, "lstm", 1, reason="LSTM (class LSTM from file)"))


# --- to Burn: the record's field order, splits and their refusals ------------------------------


@pytest.mark.parametrize(
    ("prefix", "layers", "bias"),
    [
        ("", 1, (4 * H,)),  # an nn.LSTM's own state_dict: the layer has no prefix
        ("lstm", 2, (4 * H,)),  # Burn has no multi-layer Lstm: Vec index 0, then index 1
        ("cells.²", 1, (4 * H,)),  # a ModuleDict key "²": a digit to str.isdigit, not to int
        ("lstm", 1, (4 * H, 1)),  # rank-2 biases: split, never transposed (not Linear weights)
    ],
    ids=["top-level", "two-layers", "digit-like-segment", "rank-2-biases"],
)
def test_lstm_outputs_come_in_burns_field_order(
    prefix: str, layers: int, bias: tuple[int, ...]
) -> None:
    sd = torch_lstm(prefix, layers, bias)
    want = burn_lstm(sd, prefix, layers)
    if layers == 2:
        assert list(want)[15:17] == [
            "lstm.0.cell_gate.hidden_transform.bias",
            "lstm.1.input_gate.input_transform.weight",
        ]
    if len(bias) == 2:
        assert want["lstm.forget_gate.input_transform.bias"][1].shape == (H, 1)
    assert_plan(outputs(sd, P2B), want)


def test_a_fused_tensor_with_too_few_rows_is_refused() -> None:
    # weight_hh has 6 rows, not 4 x 2: the output gate (rows [6:8], written before the cell
    # gate's [4:6]) is the first piece that does not fit
    sd = torch_lstm("lstm")
    sd["lstm.weight_hh_l0"] = ramp((6, H), 500)
    error = refusal(sd, keyword="needs 8")
    assert error.message.startswith("tensor 'lstm.weight_hh_l0' has 6 rows")
    assert error.hint is None


# --- to torch: what is a Burn Rnn ------------------------------------------------------------


def burn_rnn(prefix: str, start: int) -> Record:
    return {
        f"{prefix}.gate.input_transform.weight": ramp((IN, H), start),
        f"{prefix}.gate.input_transform.bias": ramp((H,), start + 100),
        f"{prefix}.gate.hidden_transform.weight": ramp((H, H), start + 200),
        f"{prefix}.gate.hidden_transform.bias": ramp((H,), start + 300),
    }


def fused_rnn(record: Record, prefix: str) -> list[tuple[str, str, np.ndarray, Action]]:
    """(torch name, Burn source, array, action) of the torch RNN tensors built from a Burn Rnn
    at ``prefix``: one gate, rows [0:H], in torch's order."""
    out = []
    for kind, transform in RNN_PARTS:
        param = kind.split("_")[0]
        burn, torch = f"{prefix}.gate.{transform}.{param}", f"{prefix}.{kind}_l0"
        if burn not in record:
            continue
        array = record[burn]
        how = ", transposed" if param == "weight" and array.ndim == 2 else ""
        detail = f"{burn} → [0:{H}] of {torch}{how}"
        action = Action(ActionKind.FUSE, detail, "RNN (names: Burn Rnn gates)", B2P)
        out.append((torch, burn, array.T if how else array, action))
    return out


def assert_fused(built: list[Built], want: list[tuple[str, str, np.ndarray, Action]]) -> None:
    assert [b.entry.name for b in built] == [name for name, _, _, _ in want]
    for b, (_, source, array, action) in zip(built, want, strict=True):
        assert b.sources == (source,)
        assert b.actions == (action,)
        assert b.module_type == "Linear"
        assert_bytes(b.entry, array)


def test_a_gate_beside_an_input_gate_is_no_burn_rnn() -> None:
    # 'a' has an Rnn's gate and an LSTM's input_gate: neither layer, so left alone; the search
    # goes on to 'b', a Burn Rnn
    record = burn_rnn("a", 0)
    record["a.input_gate.input_transform.weight"] = ramp((IN, H), 400)
    record |= burn_rnn("b", 1000)
    result = restructure(entries(record), TO_TORCH)
    assert result.warnings == []
    names = list(record)
    assert list(result.placed) == [*names[:5], "b.gate.input_transform.weight"]
    for name in names[:5]:
        (kept,) = result.placed[name]
        assert kept == Built((name,), array_entry(name, record[name]))
    assert_fused(result.placed["b.gate.input_transform.weight"], fused_rnn(record, "b"))


def test_the_hidden_size_is_the_first_axis_of_the_hidden_transform() -> None:
    # Burn Linear weights are [in, out]: the hidden state's size is the hidden transform's input
    # (a rank-1 weight has only that axis; it is fused as it is, not transposed)
    record = {
        "b.gate.input_transform.weight": ramp((IN, H), 0),
        "b.gate.hidden_transform.weight": ramp((H,), 200),
    }
    result = restructure(entries(record), TO_TORCH)
    assert list(result.placed) == ["b.gate.input_transform.weight"]
    assert_fused(result.placed["b.gate.input_transform.weight"], fused_rnn(record, "b"))


# Burn name -> torch name of a post-norm encoder layer outside its attention


# --- layers Burn has no module for, and where layers end ----------------------------------------

#: the fix a hint offers for a layer Burn has no counterpart for: leave it out
EXCLUDE = (Option("exclude", takes_value=True),)


def names(record: Record, target=None, module_types: tuple[str, ...] = ()) -> list[str]:
    options = PipelineOptions(adapters=(P2B,), module_types=module_types)
    items, _ = run_pipeline(entries(record), options, target)
    return [item.entry.name for item in items if item.entry is not None]


def test_an_lstm_with_proj_size_is_refused_naming_its_projection() -> None:
    sd = torch_lstm("enc.lstm")
    sd["enc.lstm.weight_hr_l0"] = ramp((1, H), 0)
    error = refusal(sd, keyword="proj_size")
    assert error.message.startswith("tensor 'enc.lstm.weight_hr_l0': ")
    assert isinstance(error.hint, Note)
    assert error.hint.fixes == EXCLUDE


def test_an_lstm_whose_class_says_proj_size_is_refused_naming_the_class() -> None:
    modules = {"lstm": ("LSTM", {"bidirectional": False, "num_layers": 1, "proj_size": 1})}
    error = refusal(torch_lstm("lstm"), keyword="proj_size", modules=modules)
    assert error.message.startswith("class LSTM from file: ")
    assert isinstance(error.hint, Note)
    assert error.hint.fixes == EXCLUDE


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
    error = refusal(sd, keyword="gates")
    assert error.message.startswith(f"tensor 'rnn.weight_ih_l0' has {rows} rows ")
    assert f"hidden size {hidden}" in error.message


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

"""Recognising layers in a Burn record: what ``burn-to-pytorch`` turns into PyTorch's tensors.

The layer-family stage (``families.restructure`` and ``run_pipeline``) finds Burn's
TransformerEncoderLayer/TransformerDecoderLayer, MultiheadAttention and Lstm/Gru/Rnn (alone, as
a forward/reverse pair, or as a ``Vec`` of layers) and names each output with the layer and its
evidence. Checked through the outputs: their torch names, shapes (``d_model`` is the first
axis of Burn's ``[in, out]`` ``query.weight``; the hidden size that of
``hidden_transform.weight``) and reasons (the family, and the names or the ``--module-type``
rule it was recognised by), the post-norm warning, and whole plans with names, actions and
bytes. The search goes on after a candidate that is not a layer; rules reach only the layer
whose tensors they match; refusals are checked by class, a keyword and their facts.

Expected arrays come from numpy ``.T`` and ``np.concatenate`` of the inputs; torch names, row
ranges and the pre-norm norm swaps from ``families``' docstring (encoder norm1 -> norm_2,
norm2 -> norm_1; decoder norm1 -> norm_3, norm2 -> norm_1, norm3 -> norm_2).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from ckptctl.adapters import Action, ActionKind
from ckptctl.adapters.families import TO_TORCH, restructure
from ckptctl.adapters.modules import parse_module_rules
from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
from ckptctl.errors import ExitCode, SelectionError, UnsupportedError
from ckptctl.fix import Note, Option
from ckptctl.model import TensorEntry
from tests.adapters._plans import RNN_PARTS, Want, assert_plan
from tests.strategies import array_entry

B2P = "burn-to-pytorch"
D, FF = 2, 3  # d_model and feed-forward width of the Transformer layers run through the pipeline
H, IN = 2, 3  # hidden size and input size of the recurrent layers
ROLES = ("query", "key", "value", "output")
Record = dict[str, np.ndarray]


def ramp(shape: tuple[int, ...], start: int) -> np.ndarray:
    """Distinct float32 values ``start, start + 1, ...`` in C order."""
    return (np.arange(int(np.prod(shape)), dtype=np.float32) + start).reshape(shape)


def entries(record: Record) -> list[TensorEntry]:
    return [array_entry(name, array) for name, array in record.items()]


def by_name(record: Record) -> dict[str, TensorEntry]:
    return {entry.name: entry for entry in entries(record)}


def evidence(family: str, *names: str) -> str:
    """The reason of an output recognised by the names ``names`` of its layer."""
    return f"{family} (names: {', '.join(names)})"


def declared(family: str, rule: str, number: int = 1) -> str:
    """The reason of an output whose layer the ``--module-type`` rule ``rule`` declared."""
    return f"{family} (module rule #{number} '{rule}')"


ENCODER = evidence("TransformerEncoderLayer", "mha", "pwff", "norm_1", "norm_2")
DECODER = evidence("TransformerDecoderLayer", "self_attn", "pwff", "norm_1", "norm_2", "norm_3")
MHA = evidence("MultiheadAttention", "query", "key", "value", "output")


#: output name -> (the reason of its first action, or None when untouched, and its shape)
Outputs = dict[str, tuple[str | None, tuple[int, ...]]]
#: torch prefix -> (reason, layers, directions, hidden size) of a recurrent layer
Recurrent = dict[str, tuple[str | None, int, int, int]]


def to_torch(record: Record, rules: tuple[str, ...] = ()) -> tuple[Outputs, list[str | Note]]:
    """Output name -> (reason or None, shape) of ``record`` through burn-to-pytorch's family
    stage, and its warnings."""
    result = restructure(entries(record), TO_TORCH, rules=parse_module_rules(rules))
    got = {
        b.entry.name: (b.actions[0].reason if b.actions else None, b.entry.shape)
        for built in result.placed.values()
        for b in built
    }
    return got, result.warnings


def post_norm_layers(warnings: list[str | Note]) -> list[str]:
    """The layers the post-norm warning names (none: no warning)."""
    if not warnings:
        return []
    (note,) = warnings
    assert isinstance(note, Note)
    assert "post-norm" in note.text
    assert all(f.name == "module_types" for f in note.fixes)
    return re.findall(r"'([^']*)'", note.text)


# --- Burn records ------------------------------------------------------------------------------


def attention(prefix: str, start: int, shape: tuple[int, int] = (D, D)) -> Record:
    """A Burn MultiheadAttention: query/key/value/output Linears (mha.rs:73-81)."""
    out: Record = {}
    for role in ROLES:
        out[f"{prefix}.{role}.weight"] = ramp(shape, start + 10 * len(out))
        out[f"{prefix}.{role}.bias"] = ramp(shape[1:], start + 10 * len(out))
    return out


def transformer(prefix: str, start: int, decoder: bool, shape: tuple[int, int] = (D, D)) -> Record:
    """A Burn TransformerEncoderLayer (mha) or TransformerDecoderLayer (self_attn, cross_attn)."""
    record = attention(f"{prefix}.{'self_attn' if decoder else 'mha'}", start, shape)
    if decoder:
        record |= attention(f"{prefix}.cross_attn", start + 100, shape)
    rest = {
        "pwff.linear_inner.weight": (D, FF), "pwff.linear_inner.bias": (FF,),
        "pwff.linear_outer.weight": (FF, D), "pwff.linear_outer.bias": (D,),
    }  # fmt: skip
    for n in (1, 2, 3) if decoder else (1, 2):
        rest |= {f"norm_{n}.gamma": (D,), f"norm_{n}.beta": (D,)}
    for i, (name, size) in enumerate(rest.items()):
        record[f"{prefix}.{name}"] = ramp(size, start + 200 + 10 * i)
    return record


GATES = {
    "LSTM": ("input_gate", "forget_gate", "cell_gate", "output_gate"),
    "GRU": ("reset_gate", "update_gate", "new_gate"),
    "RNN": ("gate",),
}


def recurrent(family: str, prefix: str, start: int, size: int = IN) -> Record:
    """A Burn Lstm/Gru/Rnn: per gate, input_transform [size, H] and hidden_transform [H, H]."""
    out: Record = {}
    for gate in GATES[family]:
        for transform, rows in (("input_transform", size), ("hidden_transform", H)):
            out[f"{prefix}.{gate}.{transform}.weight"] = ramp((rows, H), start + 10 * len(out))
            out[f"{prefix}.{gate}.{transform}.bias"] = ramp((H,), start + 10 * len(out))
    return out


def mha_want(record: Record, burn: str, torch: str, reason: str) -> Want:
    """torch name -> (first Burn source, array, action) of the attention at ``burn``."""
    rows = [f"[{k * D}:{(k + 1) * D}]" for k in range(3)]
    want: Want = {}
    for param, torch_name, how in (
        ("weight", "in_proj_weight", ", transposed"),
        ("bias", "in_proj_bias", ""),
    ):
        parts = [record[f"{burn}.{role}.{param}"] for role in ROLES[:3]]
        array = np.concatenate([p.T for p in parts] if how else parts)
        fused = ", ".join(f"{burn}.{r}.{param} → {s}" for r, s in zip(ROLES[:3], rows, strict=True))
        detail = f"{fused} of {torch}.{torch_name}{how}"
        want[f"{torch}.{torch_name}"] = (
            f"{burn}.query.{param}",
            array,
            Action(ActionKind.FUSE, detail, reason, B2P),
        )
    return want | linear_want(record, f"{burn}.output", f"{torch}.out_proj", reason)


def linear_want(record: Record, burn: str, torch: str, reason: str) -> Want:
    weight, bias = f"{burn}.weight", f"{burn}.bias"
    return {
        f"{torch}.weight": (
            weight,
            record[weight].T,
            Action(ActionKind.TRANSPOSE, f"{weight} → {torch}.weight, transposed", reason, B2P),
        ),
        f"{torch}.bias": (
            bias,
            record[bias],
            Action(ActionKind.RENAME, f"{bias} → {torch}.bias", reason, B2P),
        ),
    }


def transformer_want(
    record: Record, prefix: str, decoder: bool, norms: dict[int, int], reason: str
) -> Want:
    """The torch layer, in its slot order; ``norms``: torch normN -> Burn norm_M."""
    p = prefix
    want = mha_want(record, f"{p}.{'self_attn' if decoder else 'mha'}", f"{p}.self_attn", reason)
    if decoder:
        want |= mha_want(record, f"{p}.cross_attn", f"{p}.multihead_attn", reason)
    want |= linear_want(record, f"{p}.pwff.linear_inner", f"{p}.linear1", reason)
    want |= linear_want(record, f"{p}.pwff.linear_outer", f"{p}.linear2", reason)
    for n, m in norms.items():
        for torch, burn in (("weight", "gamma"), ("bias", "beta")):
            old, new = f"{p}.norm_{m}.{burn}", f"{p}.norm{n}.{torch}"
            want[new] = (old, record[old], Action(ActionKind.RENAME, f"{old} → {new}", reason, B2P))
    return want


# --- Layer records: Transformer layers and attentions -------------------------------------------


def test_transformer_and_attention_layers_are_recognised_by_their_names() -> None:
    # query.weight [4, 6]: d_model is its first axis (Burn Linear weights are [in, out]), the
    # second axis of torch's in_proj_weight; the plain attention's [3, 5] gives 3. 'lone' has
    # a query Linear but no key/value/output, 'a.self_attn' is an attention beside no pwff or
    # norms, and the attentions of 'enc' and 'dec' belong to those layers: none of them ends
    # the search for the next one
    record = {"lone.query.weight": ramp((D, D), 0), "lone.query.bias": ramp((D,), 10)}
    record |= attention("a.self_attn", 100)
    record |= transformer("enc", 200, decoder=False, shape=(4, 6))
    record |= transformer("dec", 500, decoder=True, shape=(4, 6))
    record |= attention("attn", 900, shape=(3, 5))
    got, warnings = to_torch(record)
    assert got["lone.query.weight"] == (None, (D, D))  # untouched
    assert got["enc.self_attn.in_proj_weight"] == (ENCODER, (18, 4))
    assert got["enc.linear1.weight"][0] == ENCODER
    assert got["dec.self_attn.in_proj_weight"] == (DECODER, (18, 4))
    assert got["dec.multihead_attn.in_proj_weight"] == (DECODER, (18, 4))
    assert got["dec.norm3.weight"][0] == DECODER
    assert got["a.self_attn.in_proj_weight"] == (MHA, (3 * D, D))
    assert got["attn.in_proj_weight"] == (MHA, (15, 3))
    assert post_norm_layers(warnings) == ["enc", "dec"]


def test_a_declared_transformer_layer_assumes_nothing_and_names_its_rule() -> None:
    record = transformer("enc", 0, decoder=False) | transformer("dec", 300, decoder=True)
    rules = (r"^enc\.=TransformerEncoderLayer(norm_first=false)", r"^dec\.=TransformerDecoderLayer")
    got, warnings = to_torch(record, rules)
    enc = r"^enc\.=TransformerEncoderLayer(norm_first=False)"  # the rule as parsed
    assert got["enc.self_attn.in_proj_weight"][0] == declared("TransformerEncoderLayer", enc)
    assert got["dec.self_attn.in_proj_weight"][0] == declared(
        "TransformerDecoderLayer", rules[1], 2
    )
    assert post_norm_layers(warnings) == ["dec"]  # no norm_first declared: still an assumption


@pytest.mark.parametrize(
    ("decoder", "rule", "tensor", "says", "found"),
    [
        (False, r"^layer\.=TransformerDecoderLayer", "layer.mha.query.weight",
         "TransformerDecoderLayer", ENCODER),
        (True, r"^layer\.=TransformerEncoderLayer(norm_first=true)",
         "layer.self_attn.query.weight", "TransformerEncoderLayer", DECODER),
    ],
    ids=["encoder", "decoder"],
)  # fmt: skip
def test_a_rule_of_the_other_transformer_type_is_refused(
    decoder: bool, rule: str, tensor: str, says: str, found: str
) -> None:
    record = transformer("layer", 0, decoder)
    with pytest.raises(SelectionError, match="says") as info:
        run_pipeline(entries(record), PipelineOptions(adapters=(B2P,), module_types=(rule,)))
    message = info.value.message
    assert info.value.exit_code == ExitCode.USAGE
    assert message.startswith(f"tensor '{tensor}': module rule #1 ")
    assert f"says {says}" in message
    assert message.endswith(found)  # what the tensors are, by their names
    assert info.value.hint


def test_an_attention_rule_reaches_only_that_attentions_tensors() -> None:
    # rule #1 declares the Rnn 'rnn', not the attention 'attn', which rule #2 declares
    record = attention("attn", 0) | recurrent("RNN", "rnn", 100)
    rules = (r"^rnn\.=RNN", r"^attn\.=MultiheadAttention")
    got, _ = to_torch(record, rules)
    assert got["attn.in_proj_weight"][0] == declared("MultiheadAttention", rules[1], 2)
    assert got["rnn.weight_ih_l0"][0] == declared("RNN", rules[0])


def test_a_tensor_beside_an_attentions_linears_is_refused_with_the_exclude_hint() -> None:
    record = attention("attn", 0) | {"attn.scale": ramp((D,), 100)}
    with pytest.raises(UnsupportedError, match="no Burn counterpart") as info:
        restructure(entries(record), B2P)
    assert info.value.exit_code == ExitCode.UNSUPPORTED
    assert str(info.value).startswith("tensor 'attn.scale' of MultiheadAttention 'attn' ")
    assert B2P in str(info.value)
    assert isinstance(info.value.hint, Note)
    assert info.value.hint.fixes == (Option("exclude", takes_value=True),)


# --- run_pipeline: the PyTorch tensors of a Burn Transformer layer ------------------------------

POST = {1: 1, 2: 2, 3: 3}


@pytest.mark.parametrize(
    ("decoder", "rules", "norms", "reason"),
    [
        (True, (), POST, DECODER),
        (
            True,
            (r"^layer\.=TransformerDecoderLayer(norm_first=true)",),
            {1: 3, 2: 1, 3: 2},
            declared(
                "TransformerDecoderLayer", r"^layer\.=TransformerDecoderLayer(norm_first=True)"
            ),
        ),
        (
            False,
            (r"^layer\.=TransformerEncoderLayer(norm_first=true)",),
            {1: 2, 2: 1},
            declared(
                "TransformerEncoderLayer", r"^layer\.=TransformerEncoderLayer(norm_first=True)"
            ),
        ),
    ],
    ids=["decoder-post-norm", "decoder-pre-norm", "encoder-pre-norm"],
)
def test_transformer_layer_to_torch(
    decoder: bool, rules: tuple[str, ...], norms: dict[int, int], reason: str
) -> None:
    record = transformer("layer", 0, decoder)
    want = transformer_want(record, "layer", decoder, norms, reason)
    items, warnings = run_pipeline(
        entries(record), PipelineOptions(adapters=(B2P,), module_types=rules)
    )
    assert_plan(items, want)
    if rules:
        assert warnings == []  # declared: nothing assumed
    else:
        assert post_norm_layers(warnings) == ["layer"]
        assert isinstance(warnings[0], Note)
        assert warnings[0].fixes == (
            Option("module_types", r"layer\.=TransformerDecoderLayer(norm_first=True)"),
        )


# --- Layer records: Burn Lstm/Gru/Rnn, pairs and Vec stacks -------------------------------------


def recurrent_layers(got: Outputs) -> Recurrent:
    """torch prefix -> (reason, layers, directions, hidden size) of each recurrent layer in
    ``got`` (:func:`to_torch`), by its torch tensors ``{prefix}.weight_hh_l{k}[_reverse]``."""
    out: Recurrent = {}
    for name, (reason, shape) in got.items():
        found = re.fullmatch(r"(.*)\.weight_hh_l(\d+)(_reverse)?", name)
        if found is None:
            continue
        prefix, layer, reverse = found.groups()
        _, layers, directions, hidden = out.get(prefix, (reason, 0, 1, shape[1]))
        out[prefix] = (reason, max(layers, int(layer) + 1), 2 if reverse else directions, hidden)
    return out


def test_recurrent_layers_are_recognised_alone_paired_and_stacked() -> None:
    # 'gap' (indices 0, 2) and 'one' (index 0 alone) are no Vec stack, and neither ends the
    # search for 'stack.layers', which is (under a dotted path); 'bigru' pairs forward and
    # reverse; 'solo.reverse' has no forward, so it is a one-direction Rnn of its own
    record = recurrent("LSTM", "gap.0", 0) | recurrent("LSTM", "gap.2", 200)
    record |= recurrent("LSTM", "one.0", 400)
    record |= recurrent("LSTM", "stack.layers.0", 600) | recurrent("LSTM", "stack.layers.1", 800, H)
    record |= recurrent("GRU", "bigru.forward", 1000) | recurrent("GRU", "bigru.reverse", 1200)
    record |= recurrent("RNN", "rnn", 1400) | recurrent("RNN", "solo.reverse", 1500)
    got, _ = to_torch(record)
    lstm = evidence("LSTM", "Burn Lstm gates")
    assert recurrent_layers(got) == {
        "gap.0": (lstm, 1, 1, H),
        "gap.2": (lstm, 1, 1, H),
        "one.0": (lstm, 1, 1, H),
        "stack.layers": (evidence("LSTM", "2 Burn LSTM layers (Vec indices)"), 2, 1, H),
        "bigru": (evidence("GRU", "Burn BiGru gates"), 1, 2, H),
        "rnn": (evidence("RNN", "Burn Rnn gates"), 1, 1, H),
        "solo.reverse": (evidence("RNN", "Burn Rnn gates"), 1, 1, H),
    }


def test_recurrent_rules_reach_only_their_own_layers_tensors() -> None:
    # the rule declares the Gru 'gru': not the Vec 'lstm' (lstm.0, lstm.1) nor the Rnn 'rnn'
    record = recurrent("LSTM", "lstm.0", 0) | recurrent("LSTM", "lstm.1", 200, H)
    record |= recurrent("GRU", "gru", 400) | recurrent("RNN", "rnn", 600)
    got, _ = to_torch(record, (r"^gru\.=GRU",))
    assert recurrent_layers(got) == {
        "lstm": (evidence("LSTM", "2 Burn LSTM layers (Vec indices)"), 2, 1, H),
        "gru": (declared("GRU", r"^gru\.=GRU"), 1, 1, H),
        "rnn": (evidence("RNN", "Burn Rnn gates"), 1, 1, H),
    }


@pytest.mark.parametrize("num_layers", [1, 2])
def test_a_declared_number_of_layers_decides_the_vec_stack(num_layers: int) -> None:
    # Vec indices 0 and 1: one 2-layer stack, unless a rule says num_layers=1 (then each index
    # is a 1-layer Lstm of its own, and the rule is the evidence of both)
    record = recurrent("LSTM", "lstm.0", 0) | recurrent("LSTM", "lstm.1", 200, H)
    rule = rf"^lstm\.=LSTM(num_layers={num_layers})"
    got, _ = to_torch(record, (rule,))
    label = declared("LSTM", rule)
    if num_layers == 1:
        assert recurrent_layers(got) == {"lstm.0": (label, 1, 1, H), "lstm.1": (label, 1, 1, H)}
    else:
        assert recurrent_layers(got) == {"lstm": (label, 2, 1, H)}


def test_a_single_burn_lstm_declared_with_two_layers_is_refused() -> None:
    record = recurrent("LSTM", "lstm", 0)
    rule = r"^lstm\.=LSTM(num_layers=2)"
    with pytest.raises(SelectionError, match="num_layers") as info:
        run_pipeline(entries(record), PipelineOptions(adapters=(B2P,), module_types=(rule,)))
    message = info.value.message
    assert message.startswith(
        f"tensor 'lstm.input_gate.input_transform.weight': module rule #1 '{rule}' "
    )
    assert "num_layers=2" in message  # what the rule says ...
    assert message.endswith("num_layers=1")  # ... and what the file holds
    assert info.value.exit_code == ExitCode.USAGE
    assert info.value.hint


# --- run_pipeline: the PyTorch tensors of Burn Rnns ---------------------------------------------


def rnn_want(record: Record, burn: str, torch: str, reason: str) -> Want:
    """torch name -> (Burn source, array, action) of the one-gate Burn Rnn ``burn`` as the
    torch tensors ``{torch}_l{k}...``: ``torch`` is the name before ``_l``."""
    want: Want = {}
    for kind, transform in RNN_PARTS:
        param = kind.split("_")[0]
        source = f"{burn}.gate.{transform}.{param}"
        how = ", transposed" if param == "weight" else ""
        name = torch.replace("KIND", kind)
        detail = f"{source} → [0:{H}] of {name}{how}"
        array = record[source].T if how else record[source]
        want[name] = (source, array, Action(ActionKind.FUSE, detail, reason, B2P))
    return want


def test_burn_rnns_to_torch() -> None:
    # a Vec of two Rnns under 'model.layers' is one 2-layer RNN; 'head.reverse' alone keeps
    # its name (no BiRnn without a forward)
    record = recurrent("RNN", "model.layers.0", 0) | recurrent("RNN", "model.layers.1", 100, H)
    record |= recurrent("RNN", "head.reverse", 200)
    stack = "RNN (names: 2 Burn RNN layers (Vec indices))"
    want = rnn_want(record, "model.layers.0", "model.layers.KIND_l0", stack)
    want |= rnn_want(record, "model.layers.1", "model.layers.KIND_l1", stack)
    want |= rnn_want(record, "head.reverse", "head.reverse.KIND_l0", "RNN (names: Burn Rnn gates)")
    items, warnings = run_pipeline(entries(record), PipelineOptions(adapters=(B2P,)))
    assert_plan(items, want)
    assert warnings == []

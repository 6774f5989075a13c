"""Recognising layers in a Burn record, which issue 24's mutation run of ``adapters/*`` missed.

Batch 4 of the survivors, all in ``families._burn_layers`` (the ``burn-to-pytorch`` direction).
Pinned here, each worked out from the code and the tables in ``families``' docstring:

* the ``Layer`` records it returns, compared whole: family, prefixes, facts (``d_model`` is the
  first axis of ``query.weight``, Burn Linear weights being ``[in, out]``, shown with a
  non-square weight; ``hidden``, ``num_layers``, ``bidirectional`` and ``vec`` of each Burn
  Lstm/Gru/Rnn), the evidence text (``names: mha, pwff, norm_1, norm_2``, ``, norm_3`` for a
  decoder layer, ``names: Burn BiGru gates``, ``names: 2 Burn LSTM layers (Vec indices)``) and
  the post-norm assumption;
* the search goes on after a candidate that is not a layer (an attention in a field named
  ``self_attn`` outside a decoder layer, a lone ``query`` Linear, a gapped or one-index ``Vec``);
  a ``reverse`` without its ``forward`` is a one-direction layer; a ``Vec`` may sit under a
  dotted path (``stack.layers.0``);
* ``--module-type`` rules: a rule declares the layer whose tensors it matches, not the other
  layers of the file, and becomes that layer's evidence; a ``num_layers`` declaration decides
  whether ``Vec`` indices are one stack or separate layers; a rule of the other Transformer
  type, or one the file contradicts, is refused with its whole message;
* a tensor under a recognised layer's prefix that none of its slots takes is refused, with the
  hint to leave the layer out;
* through ``run_pipeline``: the PyTorch tensors of a decoder layer (post-norm, with its
  warning, and pre-norm from a rule) and of a pre-norm encoder layer, and of a ``Vec`` of Burn
  Rnns, with names, actions, reasons and bytes.

Expected arrays come from numpy ``.T`` and ``np.concatenate`` of the inputs; torch names, row
ranges and the pre-norm norm swaps from ``families``' docstring (encoder norm1 -> norm_2,
norm2 -> norm_1; decoder norm1 -> norm_3, norm2 -> norm_1, norm3 -> norm_2).
"""

from __future__ import annotations

import numpy as np
import pytest

from ckptctl.adapters import Action, ActionKind
from ckptctl.adapters.families import _EXCLUDE, Layer, _burn_layers, restructure
from ckptctl.adapters.modules import parse_module_rules
from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
from ckptctl.errors import SelectionError, UnsupportedError
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


def facts(num_layers: int = 1, bidirectional: bool = False, vec: bool = False) -> dict[str, object]:
    """The facts ``_burn_layers`` finds for a Burn Lstm/Gru/Rnn (or a Vec of them)."""
    return {"hidden": H, "num_layers": num_layers, "bidirectional": bidirectional, "vec": vec}


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


def test_transformer_and_attention_layer_records() -> None:
    # query.weight [4, 6]: d_model is its first axis (Burn Linear weights are [in, out]); the
    # plain attention's [3, 5] gives 3. 'lone' has a query Linear but no key/value/output,
    # 'a.self_attn' is an attention beside no pwff or norms, and the attentions of 'enc' and
    # 'dec' belong to those layers: none of them ends the search for the next one
    record = {"lone.query.weight": ramp((D, D), 0), "lone.query.bias": ramp((D,), 10)}
    record |= attention("a.self_attn", 100)
    record |= transformer("enc", 200, decoder=False, shape=(4, 6))
    record |= transformer("dec", 500, decoder=True, shape=(4, 6))
    record |= attention("attn", 900, shape=(3, 5))
    mha = "names: query, key, value, output"
    assert _burn_layers(by_name(record), ()) == [
        Layer("TransformerEncoderLayer", "enc", "enc", {"d_model": 4},
              "names: mha, pwff, norm_1, norm_2", assumed_post_norm=True),
        Layer("TransformerDecoderLayer", "dec", "dec", {"d_model": 4},
              "names: self_attn, pwff, norm_1, norm_2, norm_3", assumed_post_norm=True),
        Layer("MultiheadAttention", "a.self_attn", "a.self_attn", {"d_model": D}, mha),
        Layer("MultiheadAttention", "attn", "attn", {"d_model": 3}, mha),
    ]  # fmt: skip


def test_a_declared_transformer_layer_assumes_nothing_and_names_its_rule() -> None:
    record = transformer("enc", 0, decoder=False) | transformer("dec", 300, decoder=True)
    rules = parse_module_rules(
        (r"^enc\.=TransformerEncoderLayer(norm_first=false)", r"^dec\.=TransformerDecoderLayer")
    )
    assert _burn_layers(by_name(record), rules) == [
        Layer("TransformerEncoderLayer", "enc", "enc", {"d_model": D, "norm_first": False},
              r"module rule #1 '^enc\.=TransformerEncoderLayer(norm_first=False)'"),
        # no norm_first declared: still an assumption
        Layer("TransformerDecoderLayer", "dec", "dec", {"d_model": D},
              r"module rule #2 '^dec\.=TransformerDecoderLayer'", assumed_post_norm=True),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("decoder", "rule", "message"),
    [
        (
            False,
            r"^layer\.=TransformerDecoderLayer",
            r"tensor 'layer.mha.query.weight': module rule #1 '^layer\.=TransformerDecoderLayer' "
            "says "
            "TransformerDecoderLayer, but its tensors are a TransformerEncoderLayer (names: mha, "
            "pwff, norm_1, norm_2)",
        ),
        (
            True,
            r"^layer\.=TransformerEncoderLayer(norm_first=true)",
            r"tensor 'layer.self_attn.query.weight': module rule #1 "
            r"'^layer\.=TransformerEncoderLayer"
            "(norm_first=True)' says TransformerEncoderLayer, but its tensors are a "
            "TransformerDecoderLayer (names: self_attn, pwff, norm_1, norm_2, norm_3)",
        ),
    ],
    ids=["encoder", "decoder"],
)
def test_a_rule_of_the_other_transformer_type_is_refused(
    decoder: bool, rule: str, message: str
) -> None:
    record = transformer("layer", 0, decoder)
    with pytest.raises(SelectionError) as info:
        run_pipeline(entries(record), PipelineOptions(adapters=(B2P,), module_types=(rule,)))
    assert info.value.message == message
    assert info.value.hint == "fix the rule's pattern or type"


def test_an_attention_rule_reaches_only_that_attentions_tensors() -> None:
    # rule #1 declares the Rnn 'rnn', not the attention 'attn', which rule #2 declares
    record = attention("attn", 0) | recurrent("RNN", "rnn", 100)
    rules = parse_module_rules((r"^rnn\.=RNN", r"^attn\.=MultiheadAttention"))
    assert _burn_layers(by_name(record), rules) == [
        Layer("MultiheadAttention", "attn", "attn", {"d_model": D},
              r"module rule #2 '^attn\.=MultiheadAttention'"),
        Layer("RNN", "rnn", "rnn", facts(), r"module rule #1 '^rnn\.=RNN'"),
    ]  # fmt: skip


def test_a_tensor_beside_an_attentions_linears_is_refused_with_the_exclude_hint() -> None:
    record = attention("attn", 0) | {"attn.scale": ramp((D,), 100)}
    with pytest.raises(UnsupportedError) as info:
        restructure(entries(record), B2P)
    assert str(info.value) == (
        "tensor 'attn.scale' of MultiheadAttention 'attn' has no Burn counterpart (burn-to-pytorch)"
    )
    assert info.value.hint is _EXCLUDE


# --- run_pipeline: the PyTorch tensors of a Burn Transformer layer ------------------------------

POST = {1: 1, 2: 2, 3: 3}


@pytest.mark.parametrize(
    ("decoder", "rules", "norms", "evidence"),
    [
        (True, (), POST, "names: self_attn, pwff, norm_1, norm_2, norm_3"),
        (
            True,
            (r"^layer\.=TransformerDecoderLayer(norm_first=true)",),
            {1: 3, 2: 1, 3: 2},
            r"module rule #1 '^layer\.=TransformerDecoderLayer(norm_first=True)'",
        ),
        (
            False,
            (r"^layer\.=TransformerEncoderLayer(norm_first=true)",),
            {1: 2, 2: 1},
            r"module rule #1 '^layer\.=TransformerEncoderLayer(norm_first=True)'",
        ),
    ],
    ids=["decoder-post-norm", "decoder-pre-norm", "encoder-pre-norm"],
)
def test_transformer_layer_to_torch(
    decoder: bool, rules: tuple[str, ...], norms: dict[int, int], evidence: str
) -> None:
    family = "TransformerDecoderLayer" if decoder else "TransformerEncoderLayer"
    record = transformer("layer", 0, decoder)
    want = transformer_want(record, "layer", decoder, norms, f"{family} ({evidence})")
    items, warnings = run_pipeline(
        entries(record), PipelineOptions(adapters=(B2P,), module_types=rules)
    )
    assert_plan(items, want)
    if rules:
        assert warnings == []  # declared: nothing assumed
    else:
        assert warnings == [
            Note(
                "1 Transformer layer ('layer') assumed post-norm (norm_first=False, PyTorch's "
                "default): a state_dict cannot tell, and pre-norm layers swap their norms in "
                "Burn; if they are pre-norm, pass {fix0}",
                (Option("module_types", r"layer\.=TransformerDecoderLayer(norm_first=True)"),),
            )
        ]


# --- Layer records: Burn Lstm/Gru/Rnn, pairs and Vec stacks -------------------------------------


def test_recurrent_layer_records() -> None:
    # 'gap' (indices 0, 2) and 'one' (index 0 alone) are no Vec stack, and neither ends the
    # search for 'stack.layers', which is (under a dotted path); 'bigru' pairs forward and
    # reverse; 'solo.reverse' has no forward, so it is a one-direction Rnn of its own
    record = recurrent("LSTM", "gap.0", 0) | recurrent("LSTM", "gap.2", 200)
    record |= recurrent("LSTM", "one.0", 400)
    record |= recurrent("LSTM", "stack.layers.0", 600) | recurrent("LSTM", "stack.layers.1", 800, H)
    record |= recurrent("GRU", "bigru.forward", 1000) | recurrent("GRU", "bigru.reverse", 1200)
    record |= recurrent("RNN", "rnn", 1400) | recurrent("RNN", "solo.reverse", 1500)
    lstm = "names: Burn Lstm gates"
    assert _burn_layers(by_name(record), ()) == [
        Layer("LSTM", "stack.layers", "stack.layers", facts(2, vec=True),
              "names: 2 Burn LSTM layers (Vec indices)"),
        Layer("LSTM", "gap.0", "gap.0", facts(), lstm),
        Layer("LSTM", "gap.2", "gap.2", facts(), lstm),
        Layer("LSTM", "one.0", "one.0", facts(), lstm),
        Layer("GRU", "bigru", "bigru", facts(bidirectional=True), "names: Burn BiGru gates"),
        Layer("RNN", "rnn", "rnn", facts(), "names: Burn Rnn gates"),
        Layer("RNN", "solo.reverse", "solo.reverse", facts(), "names: Burn Rnn gates"),
    ]  # fmt: skip


def test_recurrent_rules_reach_only_their_own_layers_tensors() -> None:
    # the rule declares the Gru 'gru': not the Vec 'lstm' (lstm.0, lstm.1) nor the Rnn 'rnn'
    record = recurrent("LSTM", "lstm.0", 0) | recurrent("LSTM", "lstm.1", 200, H)
    record |= recurrent("GRU", "gru", 400) | recurrent("RNN", "rnn", 600)
    rules = parse_module_rules((r"^gru\.=GRU",))
    assert _burn_layers(by_name(record), rules) == [
        Layer("LSTM", "lstm", "lstm", facts(2, vec=True),
              "names: 2 Burn LSTM layers (Vec indices)"),
        Layer("GRU", "gru", "gru", facts(), r"module rule #1 '^gru\.=GRU'"),
        Layer("RNN", "rnn", "rnn", facts(), "names: Burn Rnn gates"),
    ]  # fmt: skip


@pytest.mark.parametrize("num_layers", [1, 2])
def test_a_declared_number_of_layers_decides_the_vec_stack(num_layers: int) -> None:
    # Vec indices 0 and 1: one 2-layer stack, unless a rule says num_layers=1 (then each index
    # is a 1-layer Lstm of its own, and the rule is the evidence of both)
    record = recurrent("LSTM", "lstm.0", 0) | recurrent("LSTM", "lstm.1", 200, H)
    rule = rf"^lstm\.=LSTM(num_layers={num_layers})"
    label = f"module rule #1 '{rule}'"
    got = _burn_layers(by_name(record), parse_module_rules((rule,)))
    if num_layers == 1:
        assert got == [
            Layer("LSTM", "lstm.0", "lstm.0", facts(), label),
            Layer("LSTM", "lstm.1", "lstm.1", facts(), label),
        ]
    else:
        assert got == [Layer("LSTM", "lstm", "lstm", facts(2, vec=True), label)]


def test_a_single_burn_lstm_declared_with_two_layers_is_refused() -> None:
    record = recurrent("LSTM", "lstm", 0)
    rule = r"^lstm\.=LSTM(num_layers=2)"
    with pytest.raises(SelectionError) as info:
        run_pipeline(entries(record), PipelineOptions(adapters=(B2P,), module_types=(rule,)))
    assert info.value.message == (
        r"tensor 'lstm.input_gate.input_transform.weight': module rule #1 "
        r"'^lstm\.=LSTM(num_layers=2)' says num_layers=2, but the file holds num_layers=1"
    )
    assert info.value.hint == "fix or remove the option"


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

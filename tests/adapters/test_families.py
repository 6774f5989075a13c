"""Layers Burn stores as several modules (issue 23), against Burn's rules and torch's outputs.

Ground truth, none of it from the adapter under test:

* the source tensors come from the ``safetensors`` library's own reader;
* the expected Burn record is built here with numpy slicing, from Burn 0.22's sources
  (tracel-ai/burn 2c06be3, crates/burn-nn/src/modules): MHA query/key/value/output Linears
  (attention/mha.rs:73-81), LSTM gates i, f, g, o -> input/forget/cell/output_gate with
  input_transform/hidden_transform (rnn/gate_controller.rs:8-11, lstm/lstm_module.rs:61-70),
  GRU r, z, n -> reset/update/new_gate (rnn/gru.rs:60-66), RNN gate (rnn/basic.rs:57-59),
  Transformer layers (transformer/encoder.rs:211-225, 264-312; decoder.rs:182-198, 291-354),
  PRelu alpha (activation/prelu.rs:12-15), InstanceNorm gamma/beta (norm/instance.rs:30-34),
  Burn's contiguous indices (burn-store keyremapper.rs:225-330);
* numpy ports of Burn's forward passes (same files) run on that expected record and must give
  torch's outputs, stored by ``fixtures/make_burn_modules.py`` beside the weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file

from ckptctl import open_checkpoint
from ckptctl.adapters.families import _without_variants
from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
from ckptctl.errors import SelectionError, UnsupportedError
from ckptctl.fix import Note, Option
from ckptctl.ops.convert import ConvertOptions, convert
from tests.strategies import array_entry

FIXTURES = Path(__file__).parents[2] / "fixtures" / "valid" / "burn_modules"
Record = dict[str, np.ndarray]
D, HEADS = 8, 2

# --- Burn's rules, written from Burn's source --------------------------------------------------


def mha_record(sd: Record, torch: str, burn: str) -> Record:
    out: Record = {}
    w = sd[f"{torch}.in_proj_weight"]
    d = w.shape[1]
    for k, role in enumerate(("query", "key", "value")):
        out[f"{burn}.{role}.weight"] = w[k * d : (k + 1) * d].T
        if f"{torch}.in_proj_bias" in sd:
            out[f"{burn}.{role}.bias"] = sd[f"{torch}.in_proj_bias"][k * d : (k + 1) * d]
    out[f"{burn}.output.weight"] = sd[f"{torch}.out_proj.weight"].T
    if f"{torch}.out_proj.bias" in sd:
        out[f"{burn}.output.bias"] = sd[f"{torch}.out_proj.bias"]
    return out


GATES = {
    "lstm": ("input_gate", "forget_gate", "cell_gate", "output_gate"),  # torch rows i, f, g, o
    "gru": ("reset_gate", "update_gate", "new_gate"),  # torch rows r, z, n
    "rnn": ("gate",),
}


def recurrent_record(sd: Record, kind: str, layers: int, bidirectional: bool) -> Record:
    out: Record = {}
    hidden = sd[f"{kind}.weight_hh_l0"].shape[1]
    for k in range(layers):
        for suffix, direction in ((("", "forward"), ("_reverse", "reverse")) if bidirectional
                                  else (("", ""),)):  # fmt: skip
            base = kind + (f".{k}" if layers > 1 else "") + (f".{direction}" if direction else "")
            for j, gate in enumerate(GATES[kind]):
                rows = slice(j * hidden, (j + 1) * hidden)
                for torch_kind, transform in (
                    ("ih", "input_transform"),
                    ("hh", "hidden_transform"),
                ):
                    w = sd[f"{kind}.weight_{torch_kind}_l{k}{suffix}"]
                    b = sd[f"{kind}.bias_{torch_kind}_l{k}{suffix}"]
                    out[f"{base}.{gate}.{transform}.weight"] = w[rows].T
                    out[f"{base}.{gate}.{transform}.bias"] = b[rows]
    return out


def linear(sd: Record, torch: str, burn: str) -> Record:
    return {f"{burn}.weight": sd[f"{torch}.weight"].T, f"{burn}.bias": sd[f"{torch}.bias"]}


def norm(sd: Record, torch: str, burn: str) -> Record:
    return {f"{burn}.gamma": sd[f"{torch}.weight"], f"{burn}.beta": sd[f"{torch}.bias"]}


def layer_record(sd: Record, prefix: str, decoder: bool, norm_first: bool) -> Record:
    out: Record = {}
    if decoder:
        out |= mha_record(sd, f"{prefix}.self_attn", f"{prefix}.self_attn")
        out |= mha_record(sd, f"{prefix}.multihead_attn", f"{prefix}.cross_attn")
        # decoder.rs:297-354: pre-norm uses norm_3, norm_1, norm_2 before the three sub-layers
        norms = {1: 3, 2: 1, 3: 2} if norm_first else {1: 1, 2: 2, 3: 3}
    else:
        out |= mha_record(sd, f"{prefix}.self_attn", f"{prefix}.mha")
        # encoder.rs:275-310: pre-norm uses norm_2 before attention, norm_1 before the pwff
        norms = {1: 2, 2: 1} if norm_first else {1: 1, 2: 2}
    out |= linear(sd, f"{prefix}.linear1", f"{prefix}.pwff.linear_inner")
    out |= linear(sd, f"{prefix}.linear2", f"{prefix}.pwff.linear_outer")
    for n, m in norms.items():
        out |= norm(sd, f"{prefix}.norm{n}", f"{prefix}.norm_{m}")
    return out


def expected(case: str, sd: Record) -> Record:
    """The Burn record for each fixture case, by Burn's rules."""
    if case.startswith("mha"):
        return mha_record(sd, "attn", "attn")
    for kind in GATES:
        if case.startswith(kind):
            return recurrent_record(sd, kind, 2 if case[len(kind)] == "2" else 1, "bi" in case)
    if case.startswith(("encoder", "decoder")):
        top = case.split("_")[0]
        return {
            k: v
            for i in (0, 1)
            for k, v in layer_record(
                sd, f"{top}.layers.{i}", top == "decoder", case.endswith("pre")
            ).items()
        }
    if case == "prelu_instnorm":
        return {"act.alpha": sd["act.weight"]} | norm(sd, "inst", "inst")
    if case == "sequential":  # fc.0, fc.2, fc.4 -> Vec indices 0, 1, 2 (map_indices_contiguous)
        return {k: v for i, j in ((0, 0), (2, 1), (4, 2)) for k, v in
                linear(sd, f"fc.{i}", f"fc.{j}").items()}  # fmt: skip
    assert case == "mixed"
    out: Record = {"embed.weight": sd["embed.weight"]}
    for i in (0, 1):
        out |= layer_record(sd, f"encoder.layers.{i}", decoder=False, norm_first=True)
    out |= recurrent_record({k: v for k, v in sd.items() if k.startswith("lstm.")}, "lstm", 2, True)
    out |= recurrent_record({k: v for k, v in sd.items() if k.startswith("gru.")}, "gru", 1, False)
    out |= {"act.alpha": sd["act.weight"]} | norm(sd, "inst", "inst")
    out |= linear(sd, "fc.0", "fc.0") | linear(sd, "fc.2", "fc.1")
    return out


# What a state_dict cannot tell, declared (a whole-model .pt says it itself).
DECLARED = {
    "encoder_pre": (r"encoder\.layers\.\d+\.=TransformerEncoderLayer(norm_first=True)",),
    "decoder_pre": (r"decoder\.layers\.\d+\.=TransformerDecoderLayer(norm_first=True)",),
    "prelu_instnorm": ("^act\\.=PRelu", "^inst\\.=InstanceNorm"),
    "mixed": (
        r"encoder\.layers\.\d+\.=TransformerEncoderLayer(norm_first=True)",
        "^act\\.=PRelu",
        "^inst\\.=InstanceNorm",
    ),
}
CASES = [
    "mha", "mha_nobias", "lstm1", "lstm2", "lstm_bi", "lstm2_bi", "gru1", "gru2", "gru_bi",
    "gru2_bi", "rnn1", "rnn2", "rnn_bi", "rnn2_bi", "encoder_post", "encoder_pre",
    "decoder_post", "decoder_pre", "prelu_instnorm", "sequential", "mixed",
]  # fmt: skip
SOURCES = ["{}.pt", "{}.safetensors", "{}_module.pt"]


def read(path: Path) -> tuple[list[str], Record]:
    with open_checkpoint(path) as ckpt:
        return list(ckpt), {name: np.array(entry.load()) for name, entry in ckpt.items()}


def to_burn(src: Path, dst: Path, case: str, *, declare: bool) -> None:
    rules = DECLARED.get(case, ()) if declare else ()
    report = convert(src, dst, ConvertOptions(adapters=("pytorch-to-burn",), module_types=rules))
    assert report.written


def assert_same(got: Record, want: Record) -> None:
    assert sorted(got) == sorted(want)
    for name, array in want.items():
        assert got[name].shape == array.shape, name
        assert got[name].dtype == array.dtype, name
        assert got[name].tobytes() == np.ascontiguousarray(array).tobytes(), name


@pytest.mark.parametrize("pattern", SOURCES)
@pytest.mark.parametrize("case", CASES)
def test_converts_to_burns_record_and_back_to_the_same_bytes(
    case: str, pattern: str, tmp_path: Path
) -> None:
    sd = load_file(str(FIXTURES / f"{case}.safetensors"))
    src = FIXTURES / pattern.format(case)
    whole_model = pattern.endswith("_module.pt")
    to_burn(src, tmp_path / "m.bpk", case, declare=not whole_model)
    _, got = read(tmp_path / "m.bpk")
    want = expected(case, sd)
    assert_same(got, want)
    # back, with the original as the target (it gives the Sequential's gapped indices back)
    rules = DECLARED.get(case, ())
    report = convert(
        tmp_path / "m.bpk",
        tmp_path / "back.safetensors",
        ConvertOptions(
            adapters=("burn-to-pytorch",),
            module_types=rules,
            target=str(FIXTURES / f"{case}.safetensors"),
        ),
    )
    assert report.ok
    back_names, back = read(tmp_path / "back.safetensors")
    assert_same(back, sd)
    if not pattern.endswith(".safetensors"):  # a .safetensors file keeps names sorted
        assert back_names == read(FIXTURES / f"{case}.pt")[0]  # torch's state_dict order


def test_burn_order_within_a_layer(tmp_path: Path) -> None:
    # Burn writes a record in field-declaration order: Lstm input, forget, output, cell gate
    # (lstm_module.rs:61-70); GateController input_transform, hidden_transform; weight, bias
    to_burn(FIXTURES / "lstm1.pt", tmp_path / "m.bpk", "lstm1", declare=False)
    names, _ = read(tmp_path / "m.bpk")
    gates = list(dict.fromkeys(n.split(".")[1] for n in names))
    assert gates == ["input_gate", "forget_gate", "output_gate", "cell_gate"]
    assert names[:4] == [
        "lstm.input_gate.input_transform.weight", "lstm.input_gate.input_transform.bias",
        "lstm.input_gate.hidden_transform.weight", "lstm.input_gate.hidden_transform.bias",
    ]  # fmt: skip


# --- numpy ports of Burn's forward passes -----------------------------------------------------


def burn_linear(x: np.ndarray, rec: Record, p: str) -> np.ndarray:
    y = x @ rec[f"{p}.weight"]  # Burn Linear: x @ W with W [in, out] (linear.rs:128-133)
    return y + rec[f"{p}.bias"] if f"{p}.bias" in rec else y


def burn_mha(q: np.ndarray, kv: np.ndarray, rec: Record, p: str) -> np.ndarray:
    """mha.rs:212-227, 264-310: per-head [b, n_heads, s, d_k], softmax(q k^T / sqrt(d_k)) v."""
    b, s1, d = q.shape
    dk = d // HEADS

    def heads(x: np.ndarray, role: str) -> np.ndarray:
        return burn_linear(x, rec, f"{p}.{role}").reshape(b, -1, HEADS, dk).swapaxes(1, 2)

    scores = heads(q, "query") @ heads(kv, "key").swapaxes(2, 3) / np.sqrt(dk)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = (weights @ heads(kv, "value")).swapaxes(1, 2).reshape(b, s1, d)
    return burn_linear(context, rec, f"{p}.output")


def burn_norm(x: np.ndarray, rec: Record, p: str) -> np.ndarray:
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    out: np.ndarray = (x - mean) / np.sqrt(var + 1e-5) * rec[f"{p}.gamma"] + rec[f"{p}.beta"]
    return out


def burn_pwff(x: np.ndarray, rec: Record, p: str) -> np.ndarray:
    # pwff.rs: linear_outer(activation(linear_inner(x))); torch's layers use ReLU, which a
    # Burn port configures as its activation (the activation holds no tensors)
    return burn_linear(np.maximum(burn_linear(x, rec, f"{p}.linear_inner"), 0), rec,
                       f"{p}.linear_outer")  # fmt: skip


def burn_encoder_layer(x: np.ndarray, rec: Record, p: str, norm_first: bool) -> np.ndarray:
    """encoder.rs:264-312."""
    residual = burn_norm(x, rec, f"{p}.norm_2") if norm_first else x
    x = x + burn_mha(residual, residual, rec, f"{p}.mha")
    if norm_first:
        residual = burn_norm(x, rec, f"{p}.norm_1")
    else:
        x = burn_norm(x, rec, f"{p}.norm_1")
        residual = x
    x = x + burn_pwff(residual, rec, f"{p}.pwff")
    return x if norm_first else burn_norm(x, rec, f"{p}.norm_2")


def burn_decoder_layer(
    x: np.ndarray, memory: np.ndarray, rec: Record, p: str, norm_first: bool
) -> np.ndarray:
    """decoder.rs:291-354: self-attention (norm_3), cross-attention (norm_1), pwff (norm_2)."""
    residual = burn_norm(x, rec, f"{p}.norm_3") if norm_first else x
    x = x + burn_mha(residual, residual, rec, f"{p}.self_attn")
    for attn, n in (("cross_attn", 1), (None, 2)):
        if norm_first:
            residual = burn_norm(x, rec, f"{p}.norm_{n}")
        else:
            x = burn_norm(x, rec, f"{p}.norm_{n}")
            residual = x
        if attn:
            x = x + burn_mha(residual, memory, rec, f"{p}.{attn}")
        else:
            x = x + burn_pwff(residual, rec, f"{p}.pwff")
    return x if norm_first else burn_norm(x, rec, f"{p}.norm_3")


def sigmoid(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = 1 / (1 + np.exp(-x))
    return out


def gate(x: np.ndarray, h: np.ndarray, rec: Record, p: str) -> np.ndarray:
    """gate_controller.rs:42-44: input_transform(x) + hidden_transform(h)."""
    out: np.ndarray = burn_linear(x, rec, f"{p}.input_transform") + burn_linear(
        h, rec, f"{p}.hidden_transform"
    )
    return out


def burn_recurrent(x: np.ndarray, rec: Record, kind: str, p: str, reverse: bool) -> np.ndarray:
    """lstm_module.rs:212-275, gru.rs:178-268 (reset_after), basic.rs:180-210; batch-first."""
    b, s, _ = x.shape
    hidden = rec[f"{p}.{GATES[kind][0]}.hidden_transform.weight"].shape[0]
    h = np.zeros((b, hidden), np.float32)
    c = np.zeros((b, hidden), np.float32)
    out = np.zeros((b, s, hidden), np.float32)
    for t in reversed(range(s)) if reverse else range(s):
        xt = x[:, t]
        if kind == "lstm":
            i = sigmoid(gate(xt, h, rec, f"{p}.input_gate"))
            f = sigmoid(gate(xt, h, rec, f"{p}.forget_gate"))
            o = sigmoid(gate(xt, h, rec, f"{p}.output_gate"))
            g = np.tanh(gate(xt, h, rec, f"{p}.cell_gate"))
            c = f * c + i * g
            h = o * np.tanh(c)
        elif kind == "gru":
            z = sigmoid(gate(xt, h, rec, f"{p}.update_gate"))
            r = sigmoid(gate(xt, h, rec, f"{p}.reset_gate"))
            n = np.tanh(
                burn_linear(xt, rec, f"{p}.new_gate.input_transform")
                + r * burn_linear(h, rec, f"{p}.new_gate.hidden_transform")
            )
            h = (1 - z) * n + z * h
        else:
            h = np.tanh(gate(xt, h, rec, f"{p}.gate"))
        out[:, t] = h
    return out


def burn_stack(x: np.ndarray, rec: Record, kind: str, layers: int, bi: bool) -> np.ndarray:
    """A Vec of Burn layers applied in turn; BiLstm/BiGru/BiRnn concatenate both directions
    on the feature axis (bilstm_module.rs:128-160)."""
    for k in range(layers):
        p = kind + (f".{k}" if layers > 1 else "")
        if bi:
            x = np.concatenate(
                [burn_recurrent(x, rec, kind, f"{p}.forward", False),
                 burn_recurrent(x, rec, kind, f"{p}.reverse", True)], axis=2,
            )  # fmt: skip
        else:
            x = burn_recurrent(x, rec, kind, p, False)
    return x


def burn_forward(case: str, rec: Record, io: Any) -> np.ndarray:
    x: np.ndarray = io["x"].astype(np.float32)
    if case.startswith("mha"):
        return burn_mha(x, x, rec, "attn")
    for kind in GATES:
        if case.startswith(kind):
            return burn_stack(x, rec, kind, 2 if case[len(kind)] == "2" else 1, "bi" in case)
    top = case.split("_")[0]
    for i in (0, 1):
        p = f"{top}.layers.{i}"
        if top == "encoder":
            x = burn_encoder_layer(x, rec, p, case.endswith("pre"))
        else:
            x = burn_decoder_layer(x, io["memory"], rec, p, case.endswith("pre"))
    return x


FORWARD_CASES = [c for c in CASES if (FIXTURES / f"{c}_io.npz").exists()]


@pytest.mark.parametrize("case", FORWARD_CASES)
def test_burn_forward_on_the_converted_record_gives_torchs_output(
    case: str, tmp_path: Path
) -> None:
    assert len(FORWARD_CASES) == 18  # every family has its port
    to_burn(FIXTURES / f"{case}_module.pt", tmp_path / "m.bpk", case, declare=False)
    _, rec = read(tmp_path / "m.bpk")
    io = np.load(FIXTURES / f"{case}_io.npz")
    np.testing.assert_allclose(burn_forward(case, rec, io), io["y"], atol=2e-5, rtol=1e-4)


def test_the_pre_norm_swap_matters_numerically(tmp_path: Path) -> None:
    # the same file converted as post-norm (what a state_dict alone gives) computes another
    # function: the swap in the table is not a naming detail
    to_burn(FIXTURES / "encoder_pre.pt", tmp_path / "m.bpk", "encoder_pre", declare=False)
    _, rec = read(tmp_path / "m.bpk")
    io = np.load(FIXTURES / "encoder_pre_io.npz")
    assert not np.allclose(burn_forward("encoder_pre", rec, io), io["y"], atol=1e-3)


# --- what the file cannot tell, and what Burn has no counterpart for --------------------------


def test_post_norm_is_assumed_with_one_warning_naming_the_layers_and_the_declaration() -> None:
    report = convert(
        FIXTURES / "encoder_pre.pt", "unused.bpk",
        ConvertOptions(adapters=("pytorch-to-burn",), dry_run=True),
    )  # fmt: skip
    notes = [w for w in report.warnings if "post-norm" in str(w)]
    assert len(notes) == 1
    assert "'encoder.layers.0', 'encoder.layers.1'" in str(notes[0])
    assert isinstance(notes[0], Note)
    assert notes[0].fixes == (
        Option("module_types", r"encoder\.layers\.\d+\.=TransformerEncoderLayer(norm_first=True)"),
    )
    for src, rules in (
        ("encoder_pre_module.pt", ()),
        ("encoder_pre.pt", DECLARED["encoder_pre"]),
    ):
        quiet = convert(
            FIXTURES / src, "unused.bpk",
            ConvertOptions(adapters=("pytorch-to-burn",), module_types=rules, dry_run=True),
        )  # fmt: skip
        assert not [w for w in quiet.warnings if "post-norm" in str(w)]


def test_lstm_with_proj_size_is_refused_in_one_line() -> None:
    with pytest.raises(UnsupportedError, match="proj_size has no Burn counterpart") as info:
        convert(
            FIXTURES / "lstm_proj.pt", "unused.bpk",
            ConvertOptions(adapters=("pytorch-to-burn",), dry_run=True),
        )  # fmt: skip
    assert "\n" not in str(info.value)


def test_a_declaration_that_contradicts_the_file_is_refused() -> None:
    with pytest.raises(SelectionError, match="says GRU"):
        convert(
            FIXTURES / "lstm1.pt", "unused.bpk",
            ConvertOptions(adapters=("pytorch-to-burn",), module_types=("^lstm=GRU",),
                           dry_run=True),
        )  # fmt: skip
    with pytest.raises(SelectionError, match="bidirectional=True"):
        convert(
            FIXTURES / "lstm1.pt", "unused.bpk",
            ConvertOptions(adapters=("pytorch-to-burn",),
                           module_types=("^lstm=LSTM(bidirectional=True)",), dry_run=True),
        )  # fmt: skip


def test_dry_run_shows_each_split_with_its_source_rows() -> None:
    report = convert(
        FIXTURES / "mha.pt", "unused.bpk",
        ConvertOptions(adapters=("pytorch-to-burn",), dry_run=True),
    )  # fmt: skip
    rows = {row.target: row for row in report.plan}
    query = rows["attn.query.weight"]
    assert query.source == "attn.in_proj_weight"
    assert query.shape_before == (3 * D, D)
    assert query.shape_after == (D, D)
    assert query.kinds == ("split",)
    assert query.actions[0].startswith(
        "split attn.in_proj_weight[0:8] → attn.query.weight, transposed"
    )
    assert rows["attn.value.bias"].actions[0].startswith("split attn.in_proj_bias[16:24] →")
    assert rows["attn.output.weight"].source == "attn.out_proj.weight"


# --- --target: the three misleading suggestions of issue 23 are gone --------------------------


def write_ref(case: str, path: Path) -> Path:
    """REF: the expected Burn record (Burn's rules above) written as a .bpk."""
    from ckptctl.formats import save_checkpoint
    from tests.strategies import array_entry

    rec = expected(case, load_file(str(FIXTURES / f"{case}.safetensors")))
    entries = [array_entry(k, np.ascontiguousarray(v)) for k, v in rec.items()]
    save_checkpoint(path, entries, {})
    return path


@pytest.mark.parametrize(
    ("case", "misleading"),
    [
        ("mha", r"\.out_proj\.=.key."),  # wrote out_proj's values into key and reported success
        ("sequential", r"\.4\.=.1."),  # four shape errors followed
        ("encoder_pre", "norm1"),  # norm1 -> norm_1: 8 norm tensors with the wrong values
    ],
)
def test_target_proposes_the_adapter_not_a_rule_that_moves_a_role(
    case: str, misleading: str, tmp_path: Path
) -> None:
    ref = write_ref(case, tmp_path / "ref.bpk")
    report = convert(FIXTURES / f"{case}.pt", tmp_path / "o.bpk", ConvertOptions(target=str(ref)))
    assert not report.ok
    assert report.fixes == (Option("adapters", "pytorch-to-burn"),)
    assert not [f for f in report.fixes if f.name == "remap"]
    assert all(misleading not in (f.value or "") for f in report.fixes)
    assert report.summary is not None
    suggestions = {m.name: m.suggestion for m in report.summary.missing}
    if case == "mha":  # named by the tensor the adapter builds it from, never out_proj for key
        assert suggestions["attn.key.weight"] == "attn.in_proj_weight"
        assert suggestions["attn.key.bias"] == "attn.in_proj_bias"
        assert suggestions["attn.output.weight"] == "attn.out_proj.weight"


@pytest.mark.parametrize(
    "case",
    ["mha", "mha_nobias", "lstm1", "lstm2_bi", "gru_bi", "rnn2", "encoder_post", "decoder_post",
     "prelu_instnorm", "sequential"],
)  # fmt: skip
def test_with_target_alone_every_unambiguous_case_converts_to_exactly_ref(
    case: str, tmp_path: Path
) -> None:
    # pre- vs post-norm is the one thing a state_dict and a target cannot tell (same names and
    # shapes): those cases need the declaration and are covered above
    ref = write_ref(case, tmp_path / "ref.bpk")
    options = ConvertOptions(adapters=("pytorch-to-burn",), target=str(ref))
    report = convert(FIXTURES / f"{case}.pt", tmp_path / "o.bpk", options)
    assert report.ok
    assert_same(read(tmp_path / "o.bpk")[1], read(ref)[1])


def test_a_one_layer_lstm_in_a_vec_follows_the_target(tmp_path: Path) -> None:
    # Burn has no multi-layer Lstm: a port may hold a 1-layer torch LSTM as Vec<Lstm> (index 0)
    sd = load_file(str(FIXTURES / "lstm1.safetensors"))
    rec = {k.replace("lstm.", "lstm.0.", 1): v for k, v in expected("lstm1", sd).items()}
    from ckptctl.formats import save_checkpoint
    from tests.strategies import array_entry

    ref = tmp_path / "ref.bpk"
    save_checkpoint(ref, [array_entry(k, np.ascontiguousarray(v)) for k, v in rec.items()], {})
    report = convert(
        FIXTURES / "lstm1.pt", tmp_path / "o.bpk",
        ConvertOptions(adapters=("pytorch-to-burn",), target=str(ref)),
    )  # fmt: skip
    assert report.ok
    assert_same(read(tmp_path / "o.bpk")[1], rec)


def test_enum_variant_segment_from_a_declaration_and_back(tmp_path: Path) -> None:
    # burnpack paths hold the variant of an enum module: norm.Layer.gamma
    # (docs/formats/burn-store.md#module-types)
    sd = load_file(str(FIXTURES / "prelu_instnorm.safetensors"))
    rules = ("^act\\.=PRelu", "^inst\\.=InstanceNorm(variant=Instance)")
    report = convert(
        FIXTURES / "prelu_instnorm.pt", tmp_path / "o.bpk",
        ConvertOptions(adapters=("pytorch-to-burn",), module_types=rules),
    )  # fmt: skip
    assert report.ok
    got = read(tmp_path / "o.bpk")[1]
    assert_same(
        got,
        {"act.alpha": sd["act.weight"], "inst.Instance.gamma": sd["inst.weight"],
         "inst.Instance.beta": sd["inst.bias"]},
    )  # fmt: skip
    convert(
        tmp_path / "o.bpk", tmp_path / "back.safetensors",
        ConvertOptions(adapters=("burn-to-pytorch",), module_types=rules),
    )  # fmt: skip
    assert_same(read(tmp_path / "back.safetensors")[1], sd)


def test_module_type_options_are_checked() -> None:
    from ckptctl.adapters.modules import parse_module_rules

    (rule,) = parse_module_rules([r"enc\.=TransformerEncoderLayer(norm_first=True)"])
    assert (rule.pattern, rule.module_type, dict(rule.options)) == (
        r"enc\.",
        "TransformerEncoderLayer",
        {"norm_first": True},
    )
    (bi,) = parse_module_rules(["rnn=BiLstm"])
    assert (bi.module_type, dict(bi.options)) == ("LSTM", {"bidirectional": True})
    with pytest.raises(SelectionError, match="LSTM takes no option 'norm_first=1'"):
        parse_module_rules(["x=LSTM(norm_first=1)"])
    with pytest.raises(SelectionError, match="'maybe' is not a bool"):
        parse_module_rules(["x=GRU(bidirectional=maybe)"])


def test_a_split_reads_only_its_own_rows_of_the_source(tmp_path: Path) -> None:
    """Streaming: a split is a byte range of the fused tensor, read block by block (pread)."""
    from safetensors.numpy import save_file

    from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
    from ckptctl.model import FileData

    d = 512
    rng = np.random.default_rng(0)
    fused = rng.standard_normal((3 * d, d), dtype=np.float32)
    save_file({"a.in_proj_weight": fused, "a.out_proj.weight": fused[:d].copy()},
              str(tmp_path / "m.safetensors"))  # fmt: skip
    reads: list[tuple[int, int]] = []
    whole: list[int] = []
    original_range, original_read = FileData.read_range, FileData.read

    def spy_range(self: FileData, start: int, length: int) -> bytes | memoryview:
        reads.append((start, length))
        return original_range(self, start, length)

    def spy_read(self: FileData) -> memoryview:
        whole.append(self.nbytes)
        return original_read(self)

    with open_checkpoint(tmp_path / "m.safetensors") as ckpt:
        items, _ = run_pipeline(ckpt.entries(), PipelineOptions(adapters=("pytorch-to-burn",)))
        key = next(i.entry for i in items if i.entry is not None and i.entry.name == "a.key.weight")
        mp = pytest.MonkeyPatch()
        mp.setattr(FileData, "read_range", spy_range)
        mp.setattr(FileData, "read", spy_read)
        try:
            value = np.array(key.load())
        finally:
            mp.undo()
    np.testing.assert_array_equal(value, fused[d : 2 * d].T)
    assert whole == []  # the fused tensor is never read (or mapped) whole
    row = d * 4
    assert reads
    assert all(d * row <= start and start + length <= 2 * d * row for start, length in reads)
    assert sum(length for _, length in reads) == d * row  # each of its rows once


def test_attention_parts_burn_has_no_place_for_are_refused() -> None:
    from ckptctl.adapters.families import TO_BURN, restructure
    from tests.strategies import array_entry

    def f32(name: str, *shape: int) -> Any:
        return array_entry(name, np.zeros(shape, np.float32))

    kdim = [
        f32("a.q_proj_weight", 8, 8),
        f32("a.k_proj_weight", 8, 4),
        f32("a.v_proj_weight", 8, 4),
    ]
    with pytest.raises(UnsupportedError, match="kdim/vdim other than embed_dim"):
        restructure(kdim, TO_BURN)
    bias_kv = [
        f32("a.in_proj_weight", 24, 8),
        f32("a.out_proj.weight", 8, 8),
        f32("a.bias_k", 1, 1, 8),
    ]
    with pytest.raises(
        UnsupportedError, match=r"'a\.bias_k' of MultiheadAttention 'a' has no Burn"
    ):
        restructure(bias_kv, TO_BURN)


# --- a layer's tensors are the names under its module path, not names that extend it ------------


def _siblings(kind: str) -> dict[str, np.ndarray]:
    """A MultiheadAttention at ``attn`` beside an RNN at ``attn2`` (PyTorch or Burn names)."""
    d, hidden, inputs = 2, 2, 3
    values = iter(range(1000))

    def ramp(*shape: int) -> np.ndarray:
        count = int(np.prod(shape))
        return np.array([next(values) for _ in range(count)], dtype=np.float32).reshape(shape)

    if kind == "torch":
        return {
            "attn.in_proj_weight": ramp(3 * d, d),
            "attn.in_proj_bias": ramp(3 * d),
            "attn.out_proj.weight": ramp(d, d),
            "attn.out_proj.bias": ramp(d),
            "attn2.weight_ih_l0": ramp(hidden, inputs),
            "attn2.weight_hh_l0": ramp(hidden, hidden),
            "attn2.bias_ih_l0": ramp(hidden),
            "attn2.bias_hh_l0": ramp(hidden),
        }
    record = {}
    for role in ("query", "key", "value", "output"):
        record[f"attn.{role}.weight"] = ramp(d, d)
        record[f"attn.{role}.bias"] = ramp(d)
    record["attn2.gate.input_transform.weight"] = ramp(inputs, hidden)
    record["attn2.gate.input_transform.bias"] = ramp(hidden)
    record["attn2.gate.hidden_transform.weight"] = ramp(hidden, hidden)
    record["attn2.gate.hidden_transform.bias"] = ramp(hidden)
    return record


@pytest.mark.parametrize(("kind", "adapter"), [("torch", "pytorch-to-burn"),
                                               ("burn", "burn-to-pytorch")])  # fmt: skip
def test_a_rule_for_a_sibling_whose_name_extends_a_layers_does_not_reach_it(
    kind: str, adapter: str
) -> None:
    # `^attn2\.=RNN` names the RNN only; the attention `attn` beside it is no RNN and is
    # converted as the attention it is (it was refused: "says RNN, but ... MultiheadAttention")
    record = _siblings(kind)
    entries = [array_entry(name, array) for name, array in record.items()]
    rules = (r"^attn2\.=RNN",)
    items, _ = run_pipeline(entries, PipelineOptions(adapters=(adapter,), module_types=rules))
    out = {item.entry.name: item.entry for item in items if item.entry is not None}
    assert len(out) == len(items)  # nothing dropped
    attention = (
        {f"attn.{r}.{p}" for r in ("query", "key", "value", "output") for p in ("weight", "bias")}
        if kind == "torch"
        else {"attn.in_proj_weight", "attn.in_proj_bias", "attn.out_proj.weight",
              "attn.out_proj.bias"}
    )  # fmt: skip
    recurrent = (
        {f"attn2.gate.{t}.{p}" for t in ("input_transform", "hidden_transform")
         for p in ("weight", "bias")}
        if kind == "torch"
        else {"attn2.weight_ih_l0", "attn2.weight_hh_l0", "attn2.bias_ih_l0", "attn2.bias_hh_l0"}
    )  # fmt: skip
    assert set(out) == attention | recurrent
    if kind == "torch":  # the query Linear: rows [0:d] of in_proj_weight, as [in, out]
        want = record["attn.in_proj_weight"][0:2].T
        assert np.array_equal(out["attn.query.weight"].load(), want)
        assert np.array_equal(out["attn2.gate.input_transform.weight"].load(),
                              record["attn2.weight_ih_l0"].T)  # fmt: skip
    else:  # the fused in_proj_weight: query, key, value rows, each back to [out, in]
        want = np.concatenate([record[f"attn.{r}.weight"].T for r in ("query", "key", "value")])
        assert np.array_equal(out["attn.in_proj_weight"].load(), want)
        assert np.array_equal(out["attn2.weight_ih_l0"].load(),
                              record["attn2.gate.input_transform.weight"].T)  # fmt: skip


@pytest.mark.parametrize(("kind", "adapter"), [("torch", "pytorch-to-burn"),
                                               ("burn", "burn-to-pytorch")])  # fmt: skip
@pytest.mark.parametrize("prefix", ["enc.attn", ""])
def test_a_rule_reaches_the_layer_whose_names_it_matches_at_any_depth(
    kind: str, adapter: str, prefix: str
) -> None:
    # the attention alone, under `enc.attn` or at the root (a module saved by itself); a rule
    # typing one of its tensors as an LSTM is that layer's declaration, and contradicts it
    record = {
        (f"{prefix}.{name[5:]}" if prefix else name[5:]): array
        for name, array in _siblings(kind).items()
        if name.startswith("attn.")
    }
    entries = [array_entry(name, array) for name, array in record.items()]
    first = next(iter(record))
    with pytest.raises(SelectionError) as info:
        run_pipeline(
            entries, PipelineOptions(adapters=(adapter,), module_types=(f"^{first}$=LSTM",))
        )
    assert info.value.message.startswith(
        f"tensor {first!r}: module rule #1 '^{first}$=LSTM' says LSTM, but its tensors are a "
        "MultiheadAttention ("
    )


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("weight", "weight"),  # a root tensor: nothing to take out
        ("Layer.weight", "Layer.weight"),  # the first and last segments always stay
        ("norm.Layer.gamma", "norm.gamma"),
        ("blocks.0.BaseConv.Inner.conv.weight", "blocks.0.conv.weight"),
        ("a.X.FC.b", "a.X.FC.b"),  # one letter, or no lower case: no variant
    ],
)
def test_without_variants_drops_the_camel_case_segments_inside(name: str, want: str) -> None:
    assert _without_variants(name) == want

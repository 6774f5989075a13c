"""Layer recognition and Burn's record order that issue 24's mutation run of ``adapters/*`` missed.

Batch 3 of the survivors, in ``families.py`` and ``_rows.py``. Pinned here, each worked out from
the code and its docstrings:

* ``_facts``: a family rule of another type, or a ``num_layers`` option the file contradicts, is
  refused with its whole message and hint; class attributes a whole-model file lacks (an LSTM
  pickled before ``proj_size`` existed) are skipped, and the layer's evidence is then the class;
  a rule overrides the class's ``norm_first`` (it is the rule's word, not a contradiction) and
  becomes the evidence;
* ``_to_burn`` and ``_burn_key``: Burn writes a record in field-declaration order (Lstm input,
  forget, output, cell gate, lstm_module.rs:61-70; ``input_transform`` before
  ``hidden_transform``; weight before bias; ``Vec`` index by index), for a top-level layer, a
  stack of layers and a module path with a digit-like segment (``²``, which ``int`` refuses);
  rank-2 biases are split, never transposed; every action names ``pytorch-to-burn``; a fused
  tensor with too few rows is refused with the rows it has and needs;
* ``_burn_recurrent``: a ``gate`` beside an ``input_gate`` is no Burn Rnn (and does not stop the
  search), and the hidden size is the first axis of ``gate.hidden_transform.weight``;
* ``_burn_layers``: an attention in a field named ``mha`` without the rest of an encoder layer
  is a plain MultiheadAttention (and does not stop the search for encoder layers);
* ``_rows.row_slice``: a split lies at no file offset of its own.

Expected arrays come from numpy slicing and ``.T`` of the inputs; names, row ranges and field
orders from the tables in ``families``' docstring (torch rows i, f, g, o are Burn's input,
forget, cell and output gates). Plans, messages and hints are compared whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from ckptctl import open_checkpoint
from ckptctl.adapters import Action, ActionKind, PlanItem
from ckptctl.adapters._rows import row_slice
from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
from ckptctl.fix import Note, Option
from ckptctl.model import JSONValue, TensorEntry
from tests.adapters._plans import Want, assert_bytes
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


# --- _facts: declarations and class attributes against the file --------------------------------


def test_a_rule_overrides_the_norm_first_of_the_files_class() -> None:
    # the whole-model file says norm_first=True; the user's rule says False and wins (the rule
    # is the user's word, only num_layers/bidirectional are facts the tensors themselves show)
    rule = r"encoder\.layers\.\d+\.=TransformerEncoderLayer(norm_first=False)"
    reason = f"TransformerEncoderLayer (module rule #1 '{rule}')"
    sd = load_file(str(FIXTURES / "encoder_pre.safetensors"))
    with open_checkpoint(FIXTURES / "encoder_pre_module.pt") as ckpt:
        assert ckpt.structure is not None
        modules = ckpt.structure.modules
        assert modules["encoder.layers.0"] == ("TransformerEncoderLayer", {"norm_first": True})
        items, warnings = run_pipeline(
            ckpt.entries(), PipelineOptions(adapters=(P2B,), module_types=(rule,)), None, modules
        )
        got = {item.entry.name: item for item in items if item.entry is not None}
        assert warnings == []  # declared: no post-norm assumption
        for i in (0, 1):
            layer = f"encoder.layers.{i}"
            # post-norm: torch normN is Burn's norm_N (encoder.rs:211-225)
            for n in (1, 2):
                for torch, burn in (("weight", "gamma"), ("bias", "beta")):
                    source, name = f"{layer}.norm{n}.{torch}", f"{layer}.norm_{n}.{burn}"
                    item = got[name]
                    assert item.source == source
                    assert item.actions == (
                        Action(ActionKind.RENAME, f"{source} → {name}", reason, P2B),
                    )
                    assert_bytes(item.entry, sd[source])
            query = got[f"{layer}.mha.query.weight"]
            assert query.actions[0].reason == reason
            fused = sd[f"{layer}.self_attn.in_proj_weight"]
            assert_bytes(query.entry, fused[: fused.shape[1]].T)


# --- _to_burn / _burn_key: Burn's record order, splits and their refusals ----------------------


# --- _burn_recurrent: what is a Burn Rnn ---------------------------------------------------------


# --- _burn_layers: encoder layers and plain attentions ------------------------------------------

ENCODER_REST = {
    "pwff.linear_inner.weight": (H, 3), "pwff.linear_inner.bias": (3,),
    "pwff.linear_outer.weight": (3, H), "pwff.linear_outer.bias": (H,),
    "norm_1.gamma": (H,), "norm_1.beta": (H,), "norm_2.gamma": (H,), "norm_2.beta": (H,),
}  # fmt: skip
# Burn name -> torch name of a post-norm encoder layer outside its attention
ENCODER_TORCH = {
    "pwff.linear_inner.weight": "linear1.weight", "pwff.linear_inner.bias": "linear1.bias",
    "pwff.linear_outer.weight": "linear2.weight", "pwff.linear_outer.bias": "linear2.bias",
    "norm_1.gamma": "norm1.weight", "norm_1.beta": "norm1.bias",
    "norm_2.gamma": "norm2.weight", "norm_2.beta": "norm2.bias",
}  # fmt: skip


def burn_attention(prefix: str, start: int) -> Record:
    out: Record = {}
    for role in ("query", "key", "value", "output"):
        out[f"{prefix}.{role}.weight"] = ramp((H, H), start + 10 * len(out))
        out[f"{prefix}.{role}.bias"] = ramp((H,), start + 10 * len(out))
    return out


def torch_attention(record: Record, burn: str, torch: str, reason: str) -> Want:
    """torch name -> (first Burn source, expected array, action) of a Burn attention."""
    roles = ("query", "key", "value")
    w = np.concatenate([record[f"{burn}.{r}.weight"].T for r in roles])
    b = np.concatenate([record[f"{burn}.{r}.bias"] for r in roles])
    rows = [f"[{k * H}:{(k + 1) * H}]" for k in range(3)]
    fuse_w = ", ".join(f"{burn}.{r}.weight → {s}" for r, s in zip(roles, rows, strict=True))
    fuse_b = ", ".join(f"{burn}.{r}.bias → {s}" for r, s in zip(roles, rows, strict=True))
    out_w, out_b = f"{burn}.output.weight", f"{burn}.output.bias"
    return {
        f"{torch}.in_proj_weight": (
            f"{burn}.query.weight",
            w,
            Action(ActionKind.FUSE, f"{fuse_w} of {torch}.in_proj_weight, transposed", reason, B2P),
        ),
        f"{torch}.in_proj_bias": (
            f"{burn}.query.bias",
            b,
            Action(ActionKind.FUSE, f"{fuse_b} of {torch}.in_proj_bias", reason, B2P),
        ),
        f"{torch}.out_proj.weight": (
            out_w,
            record[out_w].T,
            Action(
                ActionKind.TRANSPOSE,
                f"{out_w} → {torch}.out_proj.weight, transposed",
                reason,
                B2P,
            ),
        ),
        f"{torch}.out_proj.bias": (
            out_b,
            record[out_b],
            Action(ActionKind.RENAME, f"{out_b} → {torch}.out_proj.bias", reason, B2P),
        ),
    }


def test_an_attention_named_mha_outside_an_encoder_layer_is_a_plain_attention() -> None:
    # 'a.mha' is a MultiheadAttention in a field named mha, with no pwff or norms beside it: not
    # an encoder layer 'a', and the search for encoder layers goes on to 'enc'
    record = burn_attention("a.mha", 0)
    record |= burn_attention("enc.mha", 100)
    record |= {f"enc.{k}": ramp(shape, 200 + 10 * i) for i, (k, shape) in
               enumerate(ENCODER_REST.items())}  # fmt: skip
    mha = "MultiheadAttention (names: query, key, value, output)"
    layer = "TransformerEncoderLayer (names: mha, pwff, norm_1, norm_2)"
    want = torch_attention(record, "a.mha", "a.mha", mha)
    want |= torch_attention(record, "enc.mha", "enc.self_attn", layer)
    for burn, torch in ENCODER_TORCH.items():
        array = record[f"enc.{burn}"]
        old, new = f"enc.{burn}", f"enc.{torch}"
        if array.ndim == 2:
            action = Action(ActionKind.TRANSPOSE, f"{old} → {new}, transposed", layer, B2P)
            want[new] = (old, array.T, action)
        else:
            want[new] = (old, array, Action(ActionKind.RENAME, f"{old} → {new}", layer, B2P))
    items, warnings = run_pipeline(entries(record), PipelineOptions(adapters=(B2P,)))
    assert [item.entry.name if item.entry else None for item in items] == list(want)
    for item in items:
        assert item.entry is not None
        source, array, action = want[item.entry.name]
        assert item.source == source
        assert item.actions == (action,)
        assert_bytes(item.entry, array)
    assert warnings == [
        Note(
            "1 Transformer layer ('enc') assumed post-norm (norm_first=False, PyTorch's default): "
            "a state_dict cannot tell, and pre-norm layers swap their norms in Burn; if they are "
            "pre-norm, pass {fix0}",
            (Option("module_types", r"enc\.=TransformerEncoderLayer(norm_first=True)"),),
        )
    ]


# --- _rows.row_slice: a split has no file offset -------------------------------------------------


def test_a_split_of_a_file_backed_tensor_lies_at_no_file_offset(tmp_path: Path) -> None:
    # the rows of in_proj_bias after row 0 start inside it: the source's file offset is not theirs
    d = 2
    sd = {
        "attn.in_proj_weight": ramp((3 * d, d), 0),
        "attn.in_proj_bias": ramp((3 * d,), 100),
        "attn.out_proj.weight": ramp((d, d), 200),
        "attn.out_proj.bias": ramp((d,), 300),
    }
    save_file(sd, str(tmp_path / "m.safetensors"))
    with open_checkpoint(tmp_path / "m.safetensors") as ckpt:
        read = {e.name: e for e in ckpt.entries()}
        fused = read["attn.in_proj_bias"]
        assert fused.offset is not None
        piece = row_slice(fused, 1, 2, "rows")
        assert piece == replace(fused, name="rows", shape=(2,), nbytes=8, offset=None)
        assert_bytes(piece, sd["attn.in_proj_bias"][1:3])
        items, _ = run_pipeline(list(read.values()), PipelineOptions(adapters=(P2B,)))
        got = {item.entry.name: item.entry for item in items if item.entry is not None}
        for k, role in enumerate(("query", "key", "value")):
            bias = got[f"attn.{role}.bias"]
            assert bias is not None
            assert bias.offset is None, role
            assert_bytes(bias, sd["attn.in_proj_bias"][k * d : (k + 1) * d])
        # a renamed tensor is still the file's bytes, where they lie
        renamed = got["attn.output.bias"]
        assert renamed is not None
        assert renamed.offset == read["attn.out_proj.bias"].offset
        assert_bytes(renamed, sd["attn.out_proj.bias"])

"""PyTorch's Transformer layers and MultiheadAttention as Burn's modules, and back.

``pytorch-to-burn`` splits torch's fused ``in_proj_weight``/``in_proj_bias`` into Burn's
``query``/``key``/``value`` Linears (rows ``[0:d]``, ``[d:2d]``, ``[2d:3d]``; weights transposed
to Burn's ``[in, out]``, biases of any rank never), ``out_proj`` into ``output``, and renames a
layer's ``linear1``/``linear2`` and norms (post-norm ``normN`` -> ``norm_N``; pre-norm swaps as
``families``' docstring cites Burn's encoder.rs/decoder.rs); ``burn-to-pytorch`` fuses them back.

Checked through the family stage's outputs (``restructure``, ``run_pipeline``, ``convert``):
names, sources, actions, the evidence each layer was recognised by (the names it has, the
file's class, a ``--module-type`` rule), the Burn module type ``half`` reads from it, and the
bytes, against numpy slicing, ``.T`` and ``np.concatenate`` of the inputs (and what the
``safetensors`` library reads back from a converted file). A split or fused tensor lies at no
file offset and has no ParamId of its own. The search for layers goes on after a candidate
that is not one. Refusals are checked by class, exit code, a keyword and the facts.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from ckptctl import open_checkpoint
from ckptctl.adapters import Action, ActionKind, PlanItem
from ckptctl.adapters.families import TO_BURN, Built, restructure
from ckptctl.adapters.modules import parse_module_rules
from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
from ckptctl.dtypes import DType
from ckptctl.errors import ExitCode, SelectionError, UnsupportedError
from ckptctl.fix import Note, Option
from ckptctl.formats import save_checkpoint
from ckptctl.model import BLOCK_BYTES, JSONValue
from ckptctl.ops.convert import ConvertOptions, convert
from tests.adapters._plans import assert_bytes
from tests.adapters.test_burn_layers import (
    ROLES,
    D,
    attention,
    declared,
    entries,
    evidence,
    mha_want,
    post_norm_layers,
    ramp,
)

if TYPE_CHECKING:
    from ckptctl.model import TensorEntry

FIXTURES = Path(__file__).parents[2] / "fixtures" / "valid" / "burn_modules"
P2B, B2P = "pytorch-to-burn", "burn-to-pytorch"
Record = dict[str, np.ndarray]
Modules = dict[str, tuple[str, dict[str, JSONValue]]]  # a whole-model file's classes

#: the evidence of a layer recognised by torch's names
TORCH_MHA = "MultiheadAttention (name: in_proj_weight)"
ENCODER_NAMES = ("self_attn", "linear1", "linear2", "norm1", "norm2")
ENCODER = evidence("TransformerEncoderLayer", *ENCODER_NAMES)
DECODER = evidence("TransformerDecoderLayer", *ENCODER_NAMES, "multihead_attn", "norm3")
BURN_MHA = evidence("MultiheadAttention", *ROLES)
BURN_ENCODER = evidence("TransformerEncoderLayer", "mha", "pwff", "norm_1", "norm_2")

# torch name -> Burn name of a post-norm encoder layer's parameters outside its attention
FEED_FORWARD = {
    "linear1.weight": "pwff.linear_inner.weight", "linear1.bias": "pwff.linear_inner.bias",
    "linear2.weight": "pwff.linear_outer.weight", "linear2.bias": "pwff.linear_outer.bias",
}  # fmt: skip
NORMS = {"weight": "gamma", "bias": "beta"}


def torch_mha(prefix: str, start: int = 0, bias: tuple[int, ...] = (3 * D,)) -> Record:
    """A torch MultiheadAttention's four tensors, distinct values from ``start``."""
    out_bias = (1, D) if len(bias) == 2 else (D,)  # a rank-2 bias layout for both biases
    return {
        f"{prefix}.in_proj_weight": ramp((3 * D, D), start),
        f"{prefix}.in_proj_bias": ramp(bias, start + 100),
        f"{prefix}.out_proj.weight": ramp((D, D), start + 200),
        f"{prefix}.out_proj.bias": ramp(out_bias, start + 300),
    }


def torch_layer(prefix: str, start: int = 0, *, decoder: bool = False) -> Record:
    """A torch TransformerEncoderLayer (or DecoderLayer, with ``multihead_attn`` and ``norm3``)."""
    record = torch_mha(join(prefix, "self_attn"), start)
    if decoder:
        record |= torch_mha(join(prefix, "multihead_attn"), start + 1000)
    shapes = {"linear1.weight": (6, D), "linear1.bias": (6,)}
    shapes |= {"linear2.weight": (D, 6), "linear2.bias": (D,)}
    for n in (1, 2, 3) if decoder else (1, 2):
        shapes |= {f"norm{n}.weight": (D,), f"norm{n}.bias": (D,)}
    for i, (name, shape) in enumerate(shapes.items()):
        record[join(prefix, name)] = ramp(shape, start + 2000 + 100 * i)
    return record


def join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def burn_of(record: Record, prefix: str, burn_prefix: str) -> Record:
    """Burn's attention of torch's at ``prefix``: rows k*d..(k+1)*d; weights as [in, out]."""
    w, b = record[f"{prefix}.in_proj_weight"], record[f"{prefix}.in_proj_bias"]
    out: Record = {}
    for k, role in enumerate(ROLES[:3]):
        out[f"{burn_prefix}.{role}.weight"] = np.ascontiguousarray(w[k * D : (k + 1) * D].T)
        out[f"{burn_prefix}.{role}.bias"] = b[k * D : (k + 1) * D]
    out[f"{burn_prefix}.output.weight"] = np.ascontiguousarray(
        record[f"{prefix}.out_proj.weight"].T
    )
    out[f"{burn_prefix}.output.bias"] = record[f"{prefix}.out_proj.bias"]
    return out


def encoder_burn(record: Record) -> Record:
    """Burn's post-norm TransformerEncoderLayer of :func:`torch_layer` ``("enc")``."""
    out = burn_of(record, "enc.self_attn", "enc.mha")
    for torch, burn in FEED_FORWARD.items():
        array = record[f"enc.{torch}"]
        out[f"enc.{burn}"] = np.ascontiguousarray(array.T) if array.ndim == 2 else array
    for n in (1, 2):
        for torch, burn in NORMS.items():
            out[f"enc.norm_{n}.{burn}"] = record[f"enc.norm{n}.{torch}"]
    return out


def built(record: Record, modules: Modules | None = None) -> dict[str, Built]:
    """Output name -> the Built that made it, through pytorch-to-burn's family stage."""
    result = restructure(entries(record), TO_BURN, modules=modules)
    return {b.entry.name: b for group in result.placed.values() for b in group}


def outputs(record: Record, *adapters: str) -> dict[str, PlanItem]:
    items, _ = run_pipeline(entries(record), PipelineOptions(adapters=adapters))
    return {item.entry.name: item for item in items if item.entry is not None}


def assert_half(action: Action, module_type: str) -> None:
    """``half``'s cast of an F32 output the family stage typed as ``module_type``."""
    assert (action.kind, action.detail, action.adapter) == (ActionKind.CAST, "F32 -> F16", "half")
    assert action.reason.startswith(f"{module_type} ")
    assert "(family)" in action.reason


# --- which layers are recognised, and by what ---------------------------------------------------


def test_an_attention_without_a_layer_around_it_does_not_stop_the_layers_after_it() -> None:
    # "a" has a self_attn but no linear1/norms: a plain MultiheadAttention; "b" is a whole layer
    got = built(torch_mha("a.self_attn") | torch_layer("b", 5000))
    assert got["a.self_attn.query.weight"].actions[0].reason == TORCH_MHA
    assert got["b.mha.query.weight"].actions[0].reason == ENCODER
    assert "b.pwff.linear_inner.weight" in got
    assert not [n for n in got if n.startswith("b.self_attn")]


def test_an_attention_after_a_layers_own_is_split_too() -> None:
    # a.self_attn belongs to the layer "a" (split by it); b.attn stands alone and comes after
    record = torch_layer("a") | torch_mha("b.attn", 5000)
    got = built(record)
    assert "a.mha.key.weight" in got
    assert "b.attn.in_proj_weight" not in got
    key = got["b.attn.key.weight"]
    assert key.actions[0].reason == TORCH_MHA
    assert_bytes(key.entry, record["b.attn.in_proj_weight"][D : 2 * D].T)


def test_an_attention_beside_a_root_level_layer_is_split() -> None:
    # a file that is one TransformerEncoderLayer (names at the root) plus an attention "x"
    got = built(torch_layer("") | torch_mha("x", 5000))
    assert got["mha.query.weight"].actions[0].reason == ENCODER
    assert {"x.query.weight", "x.output.weight"} <= set(got)
    assert "x.in_proj_weight" not in got


def test_a_recurrent_layer_needs_two_rank_2_weights() -> None:
    # a 1-D weight_ih_l0 beside a 2-D weight_hh_l0 is not an RNN: both pass through untouched
    got = built({"r.weight_ih_l0": ramp((8,), 0), "r.weight_hh_l0": ramp((2, 2), 10)})
    assert set(got) == {"r.weight_ih_l0", "r.weight_hh_l0"}
    assert all(not b.actions for b in got.values())


@pytest.mark.parametrize(
    ("record", "modules", "output", "reason"),
    [
        (torch_layer("enc"), None, "enc.mha.query.weight", ENCODER),
        (torch_layer("dec", decoder=True), None, "dec.self_attn.query.weight", DECODER),
        (torch_layer("dec", decoder=True), None, "dec.cross_attn.key.bias", DECODER),
        (torch_mha("attn"), None, "attn.query.weight", TORCH_MHA),
        (
            torch_mha("attn"),
            {"attn": ("MultiheadAttention", {"embed_dim": D})},
            "attn.query.weight",
            "MultiheadAttention (class MultiheadAttention from file)",
        ),
    ],
    ids=["encoder", "decoder", "cross-attention", "attention", "class-from-file"],
)
def test_each_output_names_its_layer_and_the_evidence(
    record: Record, modules: Modules | None, output: str, reason: str
) -> None:
    got = built(record, modules)
    assert {action.reason for action in got[output].actions} == {reason}


def test_a_layers_rule_does_not_reach_the_layer_beside_it() -> None:
    rule = r"^b\.=TransformerEncoderLayer(norm_first=True)"
    record = torch_layer("a") | torch_layer("b", 5000)
    result = restructure(entries(record), TO_BURN, rules=parse_module_rules([rule]))
    assert post_norm_layers(result.warnings) == ["a"]
    reasons = {b.entry.name: b.actions[0].reason for g in result.placed.values() for b in g}
    assert reasons["b.mha.query.weight"] == declared("TransformerEncoderLayer", rule)
    assert reasons["a.mha.query.weight"] == ENCODER


def test_a_rule_overrides_the_norm_first_of_the_files_class() -> None:
    # the whole-model file says norm_first=True; the user's rule says False and wins (the rule
    # is the user's word, only num_layers/bidirectional are facts the tensors themselves show)
    rule = r"encoder\.layers\.\d+\.=TransformerEncoderLayer(norm_first=False)"
    reason = declared("TransformerEncoderLayer", rule)
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
                for torch, burn in NORMS.items():
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


@pytest.mark.parametrize(
    ("decoder", "norm_first", "norms"),
    [
        (False, False, {1: 1, 2: 2}),
        (False, True, {1: 2, 2: 1}),  # encoder.rs:275-310
        (True, False, {1: 1, 2: 2, 3: 3}),
        (True, True, {1: 3, 2: 1, 3: 2}),  # decoder.rs:291-354
    ],
    ids=["encoder-post-norm", "encoder-pre-norm", "decoder-post-norm", "decoder-pre-norm"],
)
def test_a_layers_norms_go_to_burns_norm_for_their_place(
    decoder: bool, norm_first: bool, norms: dict[int, int]
) -> None:
    family = "TransformerDecoderLayer" if decoder else "TransformerEncoderLayer"
    rule = rf"^layer\.={family}(norm_first={norm_first})"
    record = torch_layer("layer", decoder=decoder)
    options = PipelineOptions(adapters=(P2B, "half"), module_types=(rule,))
    items, warnings = run_pipeline(entries(record), options)
    got = {item.entry.name: item for item in items if item.entry is not None}
    assert warnings == []
    for n, m in norms.items():
        for torch, burn in NORMS.items():
            item = got[f"layer.norm_{m}.{burn}"]
            assert item.source == f"layer.norm{n}.{torch}"
            assert item.actions[0].kind is ActionKind.RENAME
            assert_half(item.actions[1], "LayerNorm")
            assert_bytes(item.entry, record[item.source].astype(np.float16))
    assert not [name for name in got if name.split(".")[1].startswith(("norm1", "norm2", "norm3"))]


# --- what Burn has no place for, and what the file lacks ----------------------------------------


@pytest.mark.parametrize(
    ("record", "keyword", "facts", "excludes"),
    [
        (
            {"m.a.q_proj_weight": ramp((8, 8), 0), "m.a.k_proj_weight": ramp((8, 4), 100)},
            "kdim",
            ("'m.a.q_proj_weight'", "mha.rs"),
            True,
        ),
        # torch's bias_k (add_bias_kv=True): Burn's MultiheadAttention has no such parameter
        (
            torch_mha("a") | {"a.bias_k": ramp((1, 1, D), 500)},
            "no Burn counterpart",
            ("'a.bias_k'", "MultiheadAttention 'a'", P2B),
            True,
        ),
        ({"attn.in_proj_weight": ramp((20, 8), 0)}, "in_proj_weight", ("[20, 8]",), False),
        ({"attn.in_proj_weight": ramp((24,), 0)}, "in_proj_weight", ("[24]",), False),
    ],
    ids=["kdim", "bias_k", "rank-2-shape", "rank-1-shape"],
)
def test_an_attention_burn_has_no_place_for_is_refused(
    record: Record, keyword: str, facts: tuple[str, ...], excludes: bool
) -> None:
    with pytest.raises(UnsupportedError, match=keyword) as info:
        restructure(entries(record), TO_BURN)
    assert info.value.exit_code == ExitCode.UNSUPPORTED
    assert all(fact in str(info.value) for fact in facts), str(info.value)
    hint = info.value.hint
    fixes = hint.fixes if isinstance(hint, Note) else ()
    assert (fixes == (Option("exclude", takes_value=True),)) is excludes


def test_a_fuse_missing_a_part_names_that_part() -> None:
    record = burn_of(torch_mha("attn"), "attn", "attn")
    del record["attn.key.bias"]  # query.bias comes first and is there: the message must say key
    with pytest.raises(SelectionError, match="lacks") as info:
        run_pipeline(entries(record), PipelineOptions(adapters=(B2P,)))
    assert info.value.exit_code == ExitCode.USAGE
    message = info.value.message
    assert "'attn.in_proj_bias'" in message
    assert "'attn.key.bias'" in message
    assert message.count("'") == 4  # those two names, no other
    assert info.value.hint is None


@pytest.mark.parametrize(("count", "shown"), [(1, 1), (3, 3), (4, 3)])
def test_the_post_norm_warning_names_three_layers_at_most(count: int, shown: int) -> None:
    record: Record = {}
    for i in range(count):
        record |= torch_layer(f"enc.layers.{i}", 5000 * i)
    (note,) = restructure(entries(record), TO_BURN).warnings
    assert post_norm_layers([note]) == [f"enc.layers.{i}" for i in range(shown)]
    assert isinstance(note, Note)
    assert note.text.startswith(f"{count} Transformer layer{'s' if count > 1 else ''} (")
    last = f"'enc.layers.{shown - 1}'"
    assert f"{last}, ...)" in note.text if count > shown else f"{last})" in note.text
    assert note.fixes == (
        Option("module_types", r"enc\.layers\.\d+\.=TransformerEncoderLayer(norm_first=True)"),
    )


# --- MultiheadAttention and Transformer layers through the pipeline: plans, types, bytes -------


def test_mha_to_burn_plan_and_half_cast() -> None:
    sd = torch_mha("attn")
    want = burn_of(sd, "attn", "attn")
    got = outputs(sd, P2B, "half")
    assert list(got) == [f"attn.{r}.{p}" for r in ROLES for p in ("weight", "bias")]
    w, b = "attn.in_proj_weight", "attn.in_proj_bias"
    expected: dict[str, tuple[str, ActionKind, str]] = {}
    for k, role in enumerate(ROLES[:3]):
        rows = f"[{k * D}:{(k + 1) * D}]"
        weight, bias = f"attn.{role}.weight", f"attn.{role}.bias"
        expected[weight] = (w, ActionKind.SPLIT, f"{w}{rows} → {weight}, transposed")
        expected[bias] = (b, ActionKind.SPLIT, f"{b}{rows} → {bias}")
    out_w, out_b = "attn.out_proj.weight", "attn.out_proj.bias"
    expected["attn.output.weight"] = (
        out_w, ActionKind.TRANSPOSE, f"{out_w} → attn.output.weight, transposed"
    )  # fmt: skip
    expected["attn.output.bias"] = (out_b, ActionKind.RENAME, f"{out_b} → attn.output.bias")
    for name, (source, kind, detail) in expected.items():
        item = got[name]
        assert item.source == source, name
        assert item.actions[0] == Action(kind, detail, TORCH_MHA, P2B), name
        assert_half(item.actions[1], "Linear")
        assert item.entry is not None
        assert item.entry.dtype is DType.F16, name
        assert_bytes(item.entry, want[name].astype(np.float16))


def test_mha_to_torch_plan_and_half_cast() -> None:
    record = attention("attn", 0)
    want = mha_want(record, "attn", "attn", BURN_MHA)
    got = outputs(record, B2P, "half")
    assert list(got) == list(want)
    for name, (source, array, action) in want.items():
        item = got[name]
        assert item.source == source, name
        assert item.actions[0] == action, name
        assert_half(item.actions[1], "Linear")
        assert item.entry is not None
        assert item.entry.dtype is DType.F16, name
        assert_bytes(item.entry, array.astype(np.float16))


@pytest.mark.parametrize("direction", [P2B, B2P])
def test_an_empty_attention_splits_and_fuses_to_empty_tensors(direction: str) -> None:
    # embed_dim 0: every part has no rows, and nothing divides by the row count
    sd = {name: np.zeros((0,) * array.ndim, np.float32) for name, array in torch_mha("a").items()}
    source = sd if direction == P2B else burn_of(sd, "a", "a")
    got = outputs(source, direction)
    assert len(got) == (8 if direction == P2B else 4)
    for item in got.values():
        assert item.entry is not None
        assert np.array(item.entry.load()).shape == item.entry.shape
        assert item.entry.nbytes == 0


def test_rank_2_biases_are_split_and_fused_untransposed() -> None:
    # only a rank-2 Linear *weight* is transposed; a [rows, 1] or [1, d] bias keeps its layout
    sd = torch_mha("attn", bias=(3 * D, 1))
    want = burn_of(sd, "attn", "attn")
    assert want["attn.key.bias"].shape == (D, 1)
    burn = outputs(sd, P2B)
    key, out = "attn.key.bias", "attn.output.bias"
    rows = f"[{D}:{2 * D}]"
    assert burn[key].actions == (
        Action(ActionKind.SPLIT, f"attn.in_proj_bias{rows} → {key}", TORCH_MHA, P2B),
    )
    assert burn[out].actions == (
        Action(ActionKind.RENAME, f"attn.out_proj.bias → {out}", TORCH_MHA, P2B),
    )
    for name in ("attn.query.bias", key, "attn.value.bias", out):
        assert_bytes(burn[name].entry, want[name])
    torch = outputs(want, B2P)
    assert torch["attn.in_proj_bias"].actions[0].kind is ActionKind.FUSE
    assert not torch["attn.in_proj_bias"].actions[0].detail.endswith("transposed")
    assert torch["attn.out_proj.bias"].actions == (
        Action(ActionKind.RENAME, f"{out} → attn.out_proj.bias", BURN_MHA, B2P),
    )
    for name in ("attn.in_proj_bias", "attn.out_proj.bias", "attn.in_proj_weight"):
        assert_bytes(torch[name].entry, sd[name])  # [12, 1], [1, 4] and the weight


@pytest.mark.parametrize("direction", [P2B, B2P])
def test_encoder_layer_outputs_keep_their_module_type(direction: str) -> None:
    sd = torch_layer("enc")
    burn = encoder_burn(sd)
    source, want = (sd, burn) if direction == P2B else (burn, sd)
    reason = ENCODER if direction == P2B else BURN_ENCODER
    got = outputs(source, direction, "half")
    assert sorted(got) == sorted(want)
    for name, item in got.items():
        assert item.actions[0].reason == reason
        assert_half(item.actions[-1], "LayerNorm" if ".norm" in name else "Linear")
        assert_bytes(item.entry, want[name].astype(np.float16))
    # the norms: renamed by the family stage, cast by half as LayerNorm
    for n in (1, 2):
        for torch, burn_param in NORMS.items():
            t, b = f"enc.norm{n}.{torch}", f"enc.norm_{n}.{burn_param}"
            old, new = (t, b) if direction == P2B else (b, t)
            assert got[new].source == old
            rename = Action(ActionKind.RENAME, f"{old} → {new}", reason, direction)
            assert got[new].actions[0] == rename


def test_an_attention_named_mha_outside_an_encoder_layer_is_a_plain_attention() -> None:
    # 'a.mha' is a MultiheadAttention in a field named mha, with no pwff or norms beside it: not
    # an encoder layer 'a', and the search for encoder layers goes on to 'enc'
    torch = torch_layer("enc", 1000)
    record = attention("a.mha", 0) | encoder_burn(torch)
    items, warnings = run_pipeline(entries(record), PipelineOptions(adapters=(B2P,)))
    got = {item.entry.name: item for item in items if item.entry is not None}
    want = mha_want(record, "a.mha", "a.mha", BURN_MHA)
    for name, (source, array, action) in want.items():
        assert (got[name].source, got[name].actions) == (source, (action,))
        assert_bytes(got[name].entry, array)
    assert set(got) == set(want) | set(torch)
    assert {got[n].actions[0].reason for n in got if n.startswith("enc.")} == {BURN_ENCODER}
    assert post_norm_layers(warnings) == ["enc"]
    assert warnings[0].fixes == (  # type: ignore[union-attr]  # post_norm_layers: a Note
        Option("module_types", r"enc\.=TransformerEncoderLayer(norm_first=True)"),
    )


# --- splits and fuses of file-backed tensors: no file offset, no ParamId, the file's bytes -----


def test_a_split_of_a_file_backed_tensor_lies_at_no_file_offset(tmp_path: Path) -> None:
    # the rows of in_proj_bias after row 0 start inside it: the source's file offset is not theirs
    sd = torch_mha("attn")
    save_file(sd, str(tmp_path / "m.safetensors"))
    with open_checkpoint(tmp_path / "m.safetensors") as ckpt:
        read = {e.name: e for e in ckpt.entries()}
        assert read["attn.in_proj_bias"].offset is not None
        items, _ = run_pipeline(list(read.values()), PipelineOptions(adapters=(P2B,)))
        got = {item.entry.name: item.entry for item in items if item.entry is not None}
        for k, role in enumerate(ROLES[:3]):
            bias = got[f"attn.{role}.bias"]
            assert bias.offset is None, role
            assert_bytes(bias, sd["attn.in_proj_bias"][k * D : (k + 1) * D])
        # a renamed tensor is still the file's bytes, where they lie
        renamed = got["attn.output.bias"]
        assert renamed.offset == read["attn.out_proj.bias"].offset
        assert_bytes(renamed, sd["attn.out_proj.bias"])


def test_a_row_range_reads_only_inside_its_rows() -> None:
    # no caller asks for bytes outside a split (they read whole rows of it): this guard is
    # reached only here, through the split's data
    sd = torch_mha("a")
    key = outputs(sd, P2B)["a.key.bias"].entry
    assert key is not None
    whole = sd["a.in_proj_bias"].tobytes()
    size = key.nbytes  # D float32 rows after the first D
    assert key.data.read() == whole[size : 2 * size]  # unsigned bytes, as bytes compare
    for start, length in ((0, size), (1, 2), (1, size - 1), (0, 0), (size, 0)):
        want = whole[size + start : size + start + length]
        assert bytes(key.data.read_range(start, length)) == want
    for start, length in ((0, size + 1), (2, size - 1), (size, 1), (-1, 2), (-1, 0), (0, -1)):
        with pytest.raises(ValueError, match="outside") as info:
            key.data.read_range(start, length)
        assert f"{start}+{length}" in str(info.value)
        assert f"{size} bytes" in str(info.value)


def test_a_fused_tensor_has_no_file_offset_or_param_id(tmp_path: Path) -> None:
    # the parts lie in a burnpack with ids; the fused in_proj lies nowhere and is no Burn param
    record = burn_of(torch_mha("attn"), "attn", "attn")
    with_ids = [replace(e, param_id=1000 + k) for k, e in enumerate(entries(record))]
    save_checkpoint(tmp_path / "m.bpk", with_ids, {})
    with open_checkpoint(tmp_path / "m.bpk") as ckpt:
        read = ckpt.entries()
        query: TensorEntry = read[0]
        assert (query.name, query.param_id) == ("attn.query.weight", 1000)
        assert query.offset is not None
        items, _ = run_pipeline(read, PipelineOptions(adapters=(B2P,)))
        got = {i.entry.name: i.entry for i in items if i.entry is not None}
        fused = got["attn.in_proj_weight"]
        assert fused == replace(
            query, name="attn.in_proj_weight", shape=(3 * D, D), nbytes=3 * D * D * 4,
            offset=None, param_id=None,
        )  # fmt: skip
        assert_bytes(fused, torch_mha("attn")["attn.in_proj_weight"])
        assert (got["attn.in_proj_bias"].offset, got["attn.in_proj_bias"].param_id) == (None, None)
        # a renamed part is still the file's bytes, under its own id
        renamed = got["attn.out_proj.bias"]
        assert renamed.param_id == 1007
        assert renamed.offset == read[7].offset


def test_a_converted_attention_with_rows_larger_than_a_block_has_the_files_bytes(
    tmp_path: Path,
) -> None:
    # rank-2 biases whose rows are just over half a block: convert streams each split part
    # (D rows) a row at a time from inside the source, and the fuse back reads each part in
    # several row blocks; safetensors reads both files back
    cols = BLOCK_BYTES // 8 + 1
    sd = torch_mha("attn")
    sd["attn.in_proj_bias"] = np.random.default_rng(47).random((3 * D, cols), dtype=np.float32)
    save_file(sd, str(tmp_path / "torch.safetensors"))
    convert(tmp_path / "torch.safetensors", tmp_path / "burn.safetensors",
            ConvertOptions(adapters=(P2B,)))  # fmt: skip
    burn = load_file(str(tmp_path / "burn.safetensors"))
    for k, role in enumerate(ROLES[:3]):
        assert np.array_equal(
            burn[f"attn.{role}.bias"], sd["attn.in_proj_bias"][k * D : (k + 1) * D]
        )
    assert np.array_equal(burn["attn.key.weight"], sd["attn.in_proj_weight"][D : 2 * D].T)
    convert(tmp_path / "burn.safetensors", tmp_path / "back.safetensors",
            ConvertOptions(adapters=(B2P,)))  # fmt: skip
    back = load_file(str(tmp_path / "back.safetensors"))
    assert sorted(back) == sorted(sd)
    for name, array in sd.items():
        assert np.array_equal(back[name], array), name

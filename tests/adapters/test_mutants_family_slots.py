"""Splits, fuses and row ranges that issue 24's mutation run of ``adapters/*`` left unpinned.

Batch 2 of the survivors, in ``families.py`` and ``_rows.py``:

* the slot tables (``_linear``, ``_mha``, ``_transformer``): each slot's Burn module type
  (``Linear``, ``LayerNorm``) and transpose flag. The type reaches the adapters after the
  family stage as a ``done`` decision (evidence ``family``), which ``half`` reads: every
  output of a MultiheadAttention or Transformer layer is cast, with the owning type named in
  the reason, in both directions. The flag only matters for a rank-2 tensor, so rank-2 biases
  are split and fused too (kept as they are, never transposed);
* ``_to_torch``'s plan rows (the fuse's row list, ``, transposed`` on weights only, the layer
  as the reason, ``burn-to-pytorch`` as the adapter) and its message for a missing part;
* ``_rows``: ``RowsData.read`` gives unsigned bytes, ``row_slice`` of an empty first axis,
  ``concat_rows`` of untransposed rank-2 parts over several row blocks, and a fused tensor has
  no file offset and no burnpack ``param_id`` of its own.

Expected arrays come from numpy slicing, ``.T``, ``np.concatenate`` and ``astype`` of the
inputs; names, row ranges and module types from the tables in ``families``' docstring (Burn
0.22's MHA query/key/value/output Linears, ``linear1``/``linear2`` -> ``pwff``, ``norm1``/
``norm2`` -> ``norm_1``/``norm_2`` post-norm). Plans and messages are compared whole.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pytest

from ckptctl import open_checkpoint
from ckptctl.adapters import Action, ActionKind, PlanItem
from ckptctl.adapters._rows import concat_rows, row_slice
from ckptctl.adapters.families import Layer, Slot, slots_of
from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
from ckptctl.dtypes import DType
from ckptctl.errors import SelectionError
from ckptctl.formats import save_checkpoint
from ckptctl.model import BLOCK_BYTES, TensorEntry
from tests.strategies import array_entry

if TYPE_CHECKING:
    from pathlib import Path

D = 4  # embed_dim: in_proj rows [0:4], [4:8], [8:12] are query, key, value
P2B, B2P = "pytorch-to-burn", "burn-to-pytorch"
TORCH_MHA = "MultiheadAttention (name: in_proj_weight)"
BURN_MHA = "MultiheadAttention (names: query, key, value, output)"
Record = dict[str, np.ndarray]


def ramp(shape: tuple[int, ...], start: int) -> np.ndarray:
    """Distinct float32 values ``start, start + 1, ...`` in C order."""
    return (np.arange(int(np.prod(shape)), dtype=np.float32) + start).reshape(shape)


def entries(record: Record) -> list[TensorEntry]:
    return [array_entry(name, array) for name, array in record.items()]


def outputs(record: Record, *adapters: str) -> dict[str, PlanItem]:
    items, _ = run_pipeline(entries(record), PipelineOptions(adapters=adapters))
    return {item.entry.name: item for item in items if item.entry is not None}


def cast(module_type: str) -> Action:
    """``half``'s action on an F32 output of the family stage owned by ``module_type``."""
    reason = f"{module_type} is in the half-precision set (family)"
    return Action(ActionKind.CAST, "F32 -> F16", reason, "half")


def torch_mha(bias_shape: tuple[int, ...] = (3 * D,), out_bias: tuple[int, ...] = (D,)) -> Record:
    return {
        "attn.in_proj_weight": ramp((3 * D, D), 0),
        "attn.in_proj_bias": ramp(bias_shape, 100),
        "attn.out_proj.weight": ramp((D, D), 200),
        "attn.out_proj.bias": ramp(out_bias, 300),
    }


def burn_mha(sd: Record) -> Record:
    """Burn's record of ``sd``: in_proj rows k*d..(k+1)*d are query/key/value; weights [in, out]."""
    w, b = sd["attn.in_proj_weight"], sd["attn.in_proj_bias"]
    out: Record = {}
    for k, role in enumerate(("query", "key", "value")):
        out[f"attn.{role}.weight"] = np.ascontiguousarray(w[k * D : (k + 1) * D].T)
        out[f"attn.{role}.bias"] = b[k * D : (k + 1) * D]
    out["attn.output.weight"] = np.ascontiguousarray(sd["attn.out_proj.weight"].T)
    out["attn.output.bias"] = sd["attn.out_proj.bias"]
    return out


def assert_bytes(item: PlanItem, want: np.ndarray) -> None:
    assert item.entry is not None
    assert item.entry.shape == want.shape
    assert np.array(item.entry.load()).tobytes() == np.ascontiguousarray(want).tobytes()


# --- the slot tables: module type and transpose flag of every piece ---------------------------


def test_mha_slot_table() -> None:
    layer = Layer("MultiheadAttention", "attn", "attn", {"d_model": 2}, "names")
    assert slots_of(layer, {}) == [
        Slot("attn.in_proj_weight", (0, 2), "attn.query.weight", True, "Linear"),
        Slot("attn.in_proj_weight", (2, 2), "attn.key.weight", True, "Linear"),
        Slot("attn.in_proj_weight", (4, 2), "attn.value.weight", True, "Linear"),
        Slot("attn.in_proj_bias", (0, 2), "attn.query.bias", False, "Linear"),
        Slot("attn.in_proj_bias", (2, 2), "attn.key.bias", False, "Linear"),
        Slot("attn.in_proj_bias", (4, 2), "attn.value.bias", False, "Linear"),
        Slot("attn.out_proj.weight", None, "attn.output.weight", True, "Linear"),
        Slot("attn.out_proj.bias", None, "attn.output.bias", False, "Linear"),
    ]


def test_encoder_layer_slot_table_after_its_attention() -> None:
    layer = Layer("TransformerEncoderLayer", "enc", "enc", {"d_model": 2}, "names")
    slots = slots_of(layer, {})
    assert len(slots) == 16
    assert slots[:8] == slots_of(Layer("MultiheadAttention", "enc.self_attn", "enc.mha",
                                       {"d_model": 2}, "names"), {})  # fmt: skip
    assert slots[8:] == [
        Slot("enc.linear1.weight", None, "enc.pwff.linear_inner.weight", True, "Linear"),
        Slot("enc.linear1.bias", None, "enc.pwff.linear_inner.bias", False, "Linear"),
        Slot("enc.linear2.weight", None, "enc.pwff.linear_outer.weight", True, "Linear"),
        Slot("enc.linear2.bias", None, "enc.pwff.linear_outer.bias", False, "Linear"),
        Slot("enc.norm1.weight", None, "enc.norm_1.gamma", False, "LayerNorm"),
        Slot("enc.norm1.bias", None, "enc.norm_1.beta", False, "LayerNorm"),
        Slot("enc.norm2.weight", None, "enc.norm_2.gamma", False, "LayerNorm"),
        Slot("enc.norm2.bias", None, "enc.norm_2.beta", False, "LayerNorm"),
    ]


def test_pre_norm_decoder_layer_norm_slots() -> None:
    # pre-norm decoder: norm1 -> norm_3, norm2 -> norm_1, norm3 -> norm_2 (decoder.rs:291-354)
    layer = Layer("TransformerDecoderLayer", "dec", "dec", {"d_model": 2, "norm_first": True}, "")
    assert slots_of(layer, {})[-6:] == [
        Slot("dec.norm1.weight", None, "dec.norm_3.gamma", False, "LayerNorm"),
        Slot("dec.norm1.bias", None, "dec.norm_3.beta", False, "LayerNorm"),
        Slot("dec.norm2.weight", None, "dec.norm_1.gamma", False, "LayerNorm"),
        Slot("dec.norm2.bias", None, "dec.norm_1.beta", False, "LayerNorm"),
        Slot("dec.norm3.weight", None, "dec.norm_2.gamma", False, "LayerNorm"),
        Slot("dec.norm3.bias", None, "dec.norm_2.beta", False, "LayerNorm"),
    ]


# --- MultiheadAttention through the pipeline, with half: plans, types and bytes ---------------


def test_mha_to_burn_plan_and_half_cast() -> None:
    sd = torch_mha()
    want = burn_mha(sd)
    got = outputs(sd, P2B, "half")
    assert list(got) == [
        "attn.query.weight", "attn.query.bias", "attn.key.weight", "attn.key.bias",
        "attn.value.weight", "attn.value.bias", "attn.output.weight", "attn.output.bias",
    ]  # fmt: skip
    w, b = "attn.in_proj_weight", "attn.in_proj_bias"
    expected = {
        "attn.query.weight": (w, ActionKind.SPLIT, f"{w}[0:4] → attn.query.weight, transposed"),
        "attn.query.bias": (b, ActionKind.SPLIT, f"{b}[0:4] → attn.query.bias"),
        "attn.key.weight": (w, ActionKind.SPLIT, f"{w}[4:8] → attn.key.weight, transposed"),
        "attn.key.bias": (b, ActionKind.SPLIT, f"{b}[4:8] → attn.key.bias"),
        "attn.value.weight": (w, ActionKind.SPLIT, f"{w}[8:12] → attn.value.weight, transposed"),
        "attn.value.bias": (b, ActionKind.SPLIT, f"{b}[8:12] → attn.value.bias"),
        "attn.output.weight": (
            "attn.out_proj.weight",
            ActionKind.TRANSPOSE,
            "attn.out_proj.weight → attn.output.weight, transposed",
        ),
        "attn.output.bias": (
            "attn.out_proj.bias",
            ActionKind.RENAME,
            "attn.out_proj.bias → attn.output.bias",
        ),
    }
    for name, (source, kind, detail) in expected.items():
        item = got[name]
        assert item.source == source, name
        assert item.actions == (Action(kind, detail, TORCH_MHA, P2B), cast("Linear")), name
        assert item.entry is not None
        assert item.entry.dtype is DType.F16, name
        assert_bytes(item, want[name].astype(np.float16))


def test_mha_to_torch_plan_and_half_cast() -> None:
    sd = torch_mha()
    got = outputs(burn_mha(sd), B2P, "half")
    assert list(got) == [
        "attn.in_proj_weight", "attn.in_proj_bias", "attn.out_proj.weight", "attn.out_proj.bias",
    ]  # fmt: skip
    expected = {
        "attn.in_proj_weight": (
            "attn.query.weight",
            Action(
                ActionKind.FUSE,
                "attn.query.weight → [0:4], attn.key.weight → [4:8], attn.value.weight → [8:12] "
                "of attn.in_proj_weight, transposed",
                BURN_MHA,
                B2P,
            ),
        ),
        "attn.in_proj_bias": (
            "attn.query.bias",
            Action(
                ActionKind.FUSE,
                "attn.query.bias → [0:4], attn.key.bias → [4:8], attn.value.bias → [8:12] "
                "of attn.in_proj_bias",
                BURN_MHA,
                B2P,
            ),
        ),
        "attn.out_proj.weight": (
            "attn.output.weight",
            Action(
                ActionKind.TRANSPOSE,
                "attn.output.weight → attn.out_proj.weight, transposed",
                BURN_MHA,
                B2P,
            ),
        ),
        "attn.out_proj.bias": (
            "attn.output.bias",
            Action(ActionKind.RENAME, "attn.output.bias → attn.out_proj.bias", BURN_MHA, B2P),
        ),
    }
    for name, (source, action) in expected.items():
        item = got[name]
        assert item.source == source, name
        assert item.actions == (action, cast("Linear")), name
        assert item.entry is not None
        assert item.entry.dtype is DType.F16, name
        assert_bytes(item, sd[name].astype(np.float16))


def test_rank_2_biases_are_split_and_fused_untransposed() -> None:
    # only a rank-2 Linear *weight* is transposed; a [rows, 1] or [1, d] bias keeps its layout
    sd = torch_mha(bias_shape=(3 * D, 1), out_bias=(1, D))
    want = burn_mha(sd)
    burn = outputs(sd, P2B)
    assert burn["attn.key.bias"].actions == (
        Action(ActionKind.SPLIT, "attn.in_proj_bias[4:8] → attn.key.bias", TORCH_MHA, P2B),
    )
    assert burn["attn.output.bias"].actions == (
        Action(ActionKind.RENAME, "attn.out_proj.bias → attn.output.bias", TORCH_MHA, P2B),
    )
    for name in ("attn.query.bias", "attn.key.bias", "attn.value.bias", "attn.output.bias"):
        assert_bytes(burn[name], want[name])
    assert want["attn.key.bias"].shape == (D, 1)
    torch = outputs(want, B2P)
    assert torch["attn.in_proj_bias"].actions == (
        Action(
            ActionKind.FUSE,
            "attn.query.bias → [0:4], attn.key.bias → [4:8], attn.value.bias → [8:12] "
            "of attn.in_proj_bias",
            BURN_MHA,
            B2P,
        ),
    )
    assert torch["attn.out_proj.bias"].actions == (
        Action(ActionKind.RENAME, "attn.output.bias → attn.out_proj.bias", BURN_MHA, B2P),
    )
    assert_bytes(torch["attn.in_proj_bias"], sd["attn.in_proj_bias"])  # [12, 1]
    assert_bytes(torch["attn.out_proj.bias"], sd["attn.out_proj.bias"])  # [1, 4]
    assert_bytes(torch["attn.in_proj_weight"], sd["attn.in_proj_weight"])


def test_a_fuse_missing_a_part_names_that_part() -> None:
    record = burn_mha(torch_mha())
    del record["attn.key.bias"]  # query.bias comes first and is there: the message must say key
    with pytest.raises(SelectionError) as info:
        run_pipeline(entries(record), PipelineOptions(adapters=(B2P,)))
    assert info.value.message == (
        "cannot build 'attn.in_proj_bias': MultiheadAttention (names: query, key, value, "
        "output) needs 'attn.key.bias', which the file lacks"
    )
    assert info.value.hint is None


def test_a_fused_tensor_has_no_file_offset_or_param_id(tmp_path: Path) -> None:
    # the parts lie in a burnpack with ids; the fused in_proj lies nowhere and is no Burn param
    record = burn_mha(torch_mha())
    with_ids = [replace(e, param_id=1000 + k) for k, e in enumerate(entries(record))]
    save_checkpoint(tmp_path / "m.bpk", with_ids, {})
    with open_checkpoint(tmp_path / "m.bpk") as ckpt:
        read = ckpt.entries()
        query = read[0]
        assert (query.name, query.param_id) == ("attn.query.weight", 1000)
        assert query.offset is not None
        items, _ = run_pipeline(read, PipelineOptions(adapters=(B2P,)))
        got = {i.entry.name: i for i in items if i.entry is not None}
        fused = got["attn.in_proj_weight"].entry
        assert fused is not None
        assert fused == replace(
            query, name="attn.in_proj_weight", shape=(3 * D, D), nbytes=3 * D * D * 4,
            offset=None, param_id=None,
        )  # fmt: skip
        assert_bytes(got["attn.in_proj_weight"], torch_mha()["attn.in_proj_weight"])
        bias = got["attn.in_proj_bias"].entry
        assert bias is not None
        assert (bias.offset, bias.param_id) == (None, None)
        # a renamed part is still the file's bytes, under its own id
        renamed = got["attn.out_proj.bias"].entry
        assert renamed is not None
        assert renamed.param_id == 1007
        assert renamed.offset == read[7].offset


# --- Transformer layers: LayerNorm (and Linear) outputs keep their type for half ------------------

ENCODER = {
    "self_attn.in_proj_weight": (3 * D, D), "self_attn.in_proj_bias": (3 * D,),
    "self_attn.out_proj.weight": (D, D), "self_attn.out_proj.bias": (D,),
    "linear1.weight": (6, D), "linear1.bias": (6,), "linear2.weight": (D, 6), "linear2.bias": (D,),
    "norm1.weight": (D,), "norm1.bias": (D,), "norm2.weight": (D,), "norm2.bias": (D,),
}  # fmt: skip
# torch name -> Burn name of a post-norm encoder layer's parameters outside the attention
ENCODER_BURN = {
    "linear1.weight": "pwff.linear_inner.weight", "linear1.bias": "pwff.linear_inner.bias",
    "linear2.weight": "pwff.linear_outer.weight", "linear2.bias": "pwff.linear_outer.bias",
    "norm1.weight": "norm_1.gamma", "norm1.bias": "norm_1.beta",
    "norm2.weight": "norm_2.gamma", "norm2.bias": "norm_2.beta",
}  # fmt: skip


def encoder_torch() -> Record:
    return {f"enc.{k}": ramp(shape, 100 * i) for i, (k, shape) in enumerate(ENCODER.items())}


def encoder_burn(sd: Record) -> Record:
    w, b = sd["enc.self_attn.in_proj_weight"], sd["enc.self_attn.in_proj_bias"]
    out: Record = {}
    for k, role in enumerate(("query", "key", "value")):
        out[f"enc.mha.{role}.weight"] = np.ascontiguousarray(w[k * D : (k + 1) * D].T)
        out[f"enc.mha.{role}.bias"] = b[k * D : (k + 1) * D]
    out["enc.mha.output.weight"] = np.ascontiguousarray(sd["enc.self_attn.out_proj.weight"].T)
    out["enc.mha.output.bias"] = sd["enc.self_attn.out_proj.bias"]
    for torch, burn in ENCODER_BURN.items():
        array = sd[f"enc.{torch}"]
        # the rank-2 ones are the Linear weights: Burn stores them [in, out]
        out[f"enc.{burn}"] = np.ascontiguousarray(array.T) if array.ndim == 2 else array
    return out


def module_of(name: str) -> str:
    return "LayerNorm" if ".norm" in name else "Linear"


@pytest.mark.parametrize("direction", [P2B, B2P])
def test_encoder_layer_outputs_keep_their_module_type(direction: str) -> None:
    sd = encoder_torch()
    burn = encoder_burn(sd)
    source, want = (sd, burn) if direction == P2B else (burn, sd)
    got = outputs(source, direction, "half")
    assert sorted(got) == sorted(want)
    reason = (
        "TransformerEncoderLayer (names: self_attn, linear1, linear2, norm1, norm2)"
        if direction == P2B
        else "TransformerEncoderLayer (names: mha, pwff, norm_1, norm_2)"
    )
    for name, item in got.items():
        assert item.actions[-1] == cast(module_of(name)), name
        assert item.actions[0].reason == reason
        assert_bytes(item, want[name].astype(np.float16))
    # the norms: renamed by the family stage, cast by half as LayerNorm
    for torch, burn_name in list(ENCODER_BURN.items())[4:]:
        t, b = f"enc.{torch}", f"enc.{burn_name}"
        old, new = (t, b) if direction == P2B else (b, t)
        assert got[new].source == old
        assert got[new].actions == (
            Action(ActionKind.RENAME, f"{old} → {new}", reason, direction),
            cast("LayerNorm"),
        )


# --- _rows: RowsData.read, row_slice, concat_rows ----------------------------------------------


def test_rows_read_gives_unsigned_bytes() -> None:
    table = np.array([[0, 1, 2, 3], [200, 201, 254, 255], [7, 8, 9, 10]], dtype=np.uint8)
    data = row_slice(array_entry("t", table), 1, 1, "mid").data
    raw = data.read()
    assert raw.format == "B"
    assert raw.tolist() == [200, 201, 254, 255]
    assert raw == bytes([200, 201, 254, 255])
    assert raw[0] == 200


def test_row_slice_of_an_empty_first_axis() -> None:
    empty = array_entry("e", np.zeros((0, 4), np.float32))
    piece = row_slice(empty, 0, 0, "none")
    assert piece == replace(empty, name="none", shape=(0, 4), nbytes=0, offset=None)
    assert bytes(piece.data.read()) == b""
    assert np.array(piece.load()).shape == (0, 4)


def test_concat_rows_of_untransposed_matrices_over_several_row_blocks() -> None:
    # rows of BLOCK_BYTES / 2 bytes: each 3-row part is read as blocks of 2 rows and 1 row
    cols = BLOCK_BYTES // 2
    rng = np.random.default_rng(24)
    a = rng.integers(0, 256, (3, cols), dtype=np.uint8)
    b = rng.integers(0, 256, (3, cols), dtype=np.uint8)
    first = array_entry("a", a)
    fused = concat_rows(((first, False), (array_entry("b", b), False)), "ab", first)
    assert fused == replace(first, name="ab", shape=(6, cols), nbytes=6 * cols)
    got = np.array(fused.load())
    assert got.shape == (6, cols)
    assert np.array_equal(got, np.concatenate([a, b]))

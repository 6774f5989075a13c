"""pytorch-to-burn / burn-to-pytorch (docs/formats/burn-store.md#pytorch-adapters) and module-type
decisions."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckptctl.adapters import Action, ActionKind, AdapterContext, chain, parse_adapter, plan
from ckptctl.adapters.layout import (
    BurnToPyTorch,
    PyTorchToBurn,
    transpose_2d,
    transpose_into,
    transposed,
    will_transpose,
)
from ckptctl.adapters.modules import (
    Decision,
    decide_module_types,
    module_rules_from_mapping,
    normalize_type,
    parse_module_rules,
)
from ckptctl.dtypes import DType
from ckptctl.errors import SelectionError
from ckptctl.model import TensorEntry
from tests.strategies import array_entry, make_entry


def typed(entry: TensorEntry, module_type: str) -> TensorEntry:
    from dataclasses import replace

    return replace(entry, module_type=module_type)


def f32(name: str, shape: tuple[int, ...], module_type: str | None = None) -> TensorEntry:
    entry = array_entry(name, np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))
    return typed(entry, module_type) if module_type else entry


def test_acceptance_net_pytorch_to_burn() -> None:
    entries = [f32("fc.weight", (3, 4)), f32("fc.bias", (3,)), f32("head.weight", (2, 3))]
    decisions = decide_module_types(entries)
    adapter = parse_adapter("pytorch-to-burn", AdapterContext(decisions))
    out = {item.source: item.entry for item in plan(entries, adapter)}
    fc = out["fc.weight"]
    assert fc is not None
    assert fc.shape == (4, 3)
    assert fc.load().ravel().tolist() == [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]
    assert fc.load().flags.c_contiguous
    head = out["head.weight"]
    assert head is not None
    assert head.shape == (3, 2)
    assert out["fc.bias"] is entries[1]  # untouched: same object, zero-copy
    assert decisions["head.weight"].evidence == "pattern 'head'"
    assert decisions["fc.weight"].module_type == "Linear"


def test_only_rank2_linear_weight_transposed_and_norms_renamed() -> None:
    entries = [
        f32("emb.weight", (5, 3), "Embedding"),
        f32("conv.weight", (2, 3, 3, 3), "Conv2d"),
        f32("lin.weight", (2, 3), "torch.nn.modules.linear.Linear"),
        f32("lin.bias", (2,), "Linear"),
        f32("bn.weight", (3,), "BatchNorm2d"),
        f32("bn.bias", (3,), "BatchNorm2d"),
        f32("bn.running_mean", (3,), "BatchNorm2d"),
        f32("ln.weight", (3,), "LayerNorm"),
        f32("gn.bias", (3,), "GroupNorm"),
        f32("rms.weight", (3,), "RMSNorm"),
        f32("inorm.weight", (3,), "InstanceNorm2d"),
        f32("act.weight", (1,), "PReLU"),
        f32("cls_token", (1, 3), "VisionTransformer"),
    ]
    items = plan(entries, PyTorchToBurn())
    names = {i.source: i.entry.name for i in items if i.entry is not None}
    assert names["bn.weight"] == "bn.gamma"
    assert names["bn.bias"] == "bn.beta"
    assert names["ln.weight"] == "ln.gamma"
    assert names["gn.bias"] == "gn.beta"
    assert names["rms.weight"] == "rms.gamma"
    # Burn's own adapter skips these two (docs/formats/burn-store.md#hazards), but Burn's modules
    # store gamma/beta
    # (burn-nn norm/instance.rs:30-34) and alpha (activation/prelu.rs:12-15): issue 23
    assert names["inorm.weight"] == "inorm.gamma"
    assert names["act.weight"] == "act.alpha"
    transposed = [i.source for i in items if any(a.kind == "transpose" for a in i.actions)]
    assert transposed == ["lin.weight"]
    for item in items:
        if item.source not in ("lin.weight",) and not item.actions:
            assert item.entry is next(e for e in entries if e.name == item.source)
    # Burn 0.21 did not rename RmsNorm
    old = PyTorchToBurn(rename_rmsnorm=False).apply(entries[9])[0]
    assert old is not None
    assert old.name == "rms.weight"


def test_burn_to_pytorch_reverses() -> None:
    entries = [f32("fc.weight", (4, 3), "Linear"), f32("ln.gamma", (3,), "LayerNorm")]
    items = plan(entries, BurnToPyTorch())
    fc, ln = (i.entry for i in items)
    assert fc is not None
    assert fc.shape == (3, 4)
    assert fc.load().tolist() == np.arange(12).reshape(4, 3).T.tolist()
    assert ln is not None
    assert ln.name == "ln.weight"


def test_unknown_module_type_left_alone_with_reason() -> None:
    entry = f32("mystery.weight", (3, 3))
    out, actions = PyTorchToBurn().apply(entry)
    assert out is entry
    assert actions[0].kind == "keep"
    assert "module type unknown" in actions[0].reason


def test_half_follows_renamed_norm() -> None:
    entries = [f32("ln.weight", (3,), "LayerNorm")]
    items = plan(entries, chain(PyTorchToBurn(), parse_adapter("half")))
    out = items[0].entry
    assert out is not None
    assert out.name == "ln.gamma"
    assert out.dtype is DType.F16


def test_bf16_transposes_as_raw_bits() -> None:
    raw = np.arange(6, dtype=np.uint16).reshape(2, 3) + 0x3F80
    entry = typed(make_entry("fc.weight", DType.BF16, (2, 3), raw.tobytes()), "Linear")
    out = PyTorchToBurn()(entry)
    assert out is not None
    assert out.dtype is DType.BF16
    assert out.load().tolist() == raw.T.tolist()


def test_blocked_transpose_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    big = rng.integers(0, 2**16, size=(300, 517), dtype=np.uint16)
    assert np.array_equal(transpose_2d(big), big.T)
    assert transpose_2d(big).flags.c_contiguous


@given(
    rows=st.integers(0, 9),
    cols=st.integers(0, 9),
    dtype=st.sampled_from([DType.F32, DType.BF16, DType.F8_E4M3, DType.I64, DType.C128]),
    data=st.data(),
)
def test_transpose_twice_is_identity(rows: int, cols: int, dtype: DType, data: st.DataObject):
    raw = data.draw(
        st.binary(min_size=rows * cols * dtype.itemsize, max_size=rows * cols * dtype.itemsize)
    )
    entry = typed(make_entry("x.weight", dtype, (rows, cols), raw), "Linear")
    once = PyTorchToBurn()(entry)
    assert once is not None
    assert once.shape == (cols, rows)
    twice = BurnToPyTorch()(once)
    assert twice is not None
    assert twice.shape == (rows, cols)
    assert bytes(twice.data.read()) == raw


# --- module-type decisions -------------------------------------------------------------------


def test_target_decides_linear_and_conflicts_with_class() -> None:
    entries = [f32("proj_x.weight", (3, 4)), f32("proj_x.bias", (3,))]
    target = {"proj_x.weight": (DType.F32, (4, 3)), "proj_x.bias": (DType.F32, (3,))}
    d = decide_module_types(entries, target=target)
    assert d["proj_x.weight"].module_type == "Linear"
    assert d["proj_x.weight"].transpose is True
    assert "transpose" in d["proj_x.weight"].evidence
    assert d["proj_x.bias"].module_type == "Linear"
    # a class Linear whose target keeps the shape (Col layout, docs/formats/burn-store.md#hazards)
    # is a contradiction
    same = {"proj_x.weight": (DType.F32, (3, 4))}
    with pytest.raises(SelectionError, match="class Linear from file"):
        decide_module_types([f32("proj_x.weight", (3, 4), "Linear")], target=same)
    # a pattern guess yields to the target's shapes: not transposed
    fc = decide_module_types([f32("fc.weight", (3, 4))], target={"fc.weight": (DType.F32, (3, 4))})
    assert fc["fc.weight"].transpose is False
    out = PyTorchToBurn(fc)(f32("fc.weight", (3, 4)))
    assert out is not None
    assert out.shape == (3, 4)


def test_target_norm_rename_evidence() -> None:
    entries = [f32("blk.scale.weight", (4,)), f32("blk.scale.bias", (4,))]
    target = {"blk.scale.gamma": (DType.F32, (4,)), "blk.scale.beta": (DType.F32, (4,))}
    d = decide_module_types(entries, target=target)
    assert d["blk.scale.weight"].module_type == "LayerNorm"
    items = plan(entries, PyTorchToBurn(d))
    assert [i.entry.name for i in items if i.entry] == ["blk.scale.gamma", "blk.scale.beta"]


def test_heuristics_and_flags() -> None:
    entries = [
        f32("tok_embeddings.weight", (10, 4)),
        f32("layers.0.q_proj.weight", (4, 4)),
        f32("layers.0.mlp.weight", (8, 4)),
        f32("layers.0.mlp.bias", (8,)),
        f32("bn1.weight", (4,)),
        f32("bn1.running_var", (4,)),
        f32("final_layernorm.weight", (4,)),
        f32("odd.weight", (4, 4)),
        f32("h.0.attn.c_proj.weight", (4, 4)),
        f32("conv.weight", (2, 2, 3, 3)),
    ]
    d = decide_module_types(entries)
    assert d["tok_embeddings.weight"].module_type == "Embedding"
    assert not d["tok_embeddings.weight"].flagged
    q = d["layers.0.q_proj.weight"]
    assert q.module_type == "Linear"
    assert q.flagged
    assert "square" in q.evidence
    assert d["layers.0.mlp.weight"].module_type == "Linear"
    assert "bias" in d["layers.0.mlp.weight"].evidence
    assert d["bn1.weight"].module_type == "BatchNorm"
    assert d["final_layernorm.weight"].module_type == "LayerNorm"
    assert d["odd.weight"].module_type is None
    assert d["odd.weight"].flagged
    assert d["h.0.attn.c_proj.weight"].module_type == "Conv1D"
    assert d["h.0.attn.c_proj.weight"].flagged
    assert d["conv.weight"].module_type == "Conv2d"
    out = PyTorchToBurn(d)(entries[8])
    assert out is entries[8]  # GPT-2 Conv1D is already [in, out]


def test_rules_override_and_parse() -> None:
    rules = parse_module_rules([r"odd=Linear", r"^tok=embedding"])
    assert rules[1].module_type == "Embedding"
    d = decide_module_types([f32("odd.weight", (4, 4), "MyBlock")], rules=rules)
    assert d["odd.weight"] == Decision(
        "odd.weight", "Linear", "module rule #1 'odd=Linear'", False, None, None
    )
    assert module_rules_from_mapping({"x": "RmsNorm"})[0].module_type == "RmsNorm"
    with pytest.raises(SelectionError, match="unknown module type"):
        parse_module_rules(["x=Linaer"])
    with pytest.raises(SelectionError, match="module rule #1"):
        parse_module_rules(["(?=x)=Linear"])
    with pytest.raises(SelectionError, match="REGEX=Type"):
        parse_module_rules(["Linear"])


def test_normalize_type() -> None:
    assert normalize_type("__torch__.torch.nn.modules.linear.Linear") == "Linear"
    assert normalize_type("Struct:LayerNorm") == "LayerNorm"
    assert normalize_type("SyncBatchNorm") == "BatchNorm"
    assert normalize_type("MyBlock") == "Other"


# --- transposes: numpy's .T, in one copy or in strips ------------------------------------------


@pytest.mark.parametrize("shape", [(256, 256), (257, 256), (70, 1100), (1100, 70), (33, 2100)])
def test_transpose_2d_small_and_strip_paths(shape: tuple[int, int]) -> None:
    # 256 * 256 = 1 << 16 elements (one numpy copy), one more row: the strips
    array = np.arange(shape[0] * shape[1], dtype=np.int32).reshape(shape)
    out = transpose_2d(array)
    assert out.shape == shape[::-1]
    assert out.flags.c_contiguous
    assert np.array_equal(out, array.T)


def test_transpose_into_writes_a_strided_target() -> None:
    array = np.arange(300 * 300, dtype=np.uint16).reshape(300, 300)
    out = np.zeros((300, 600), dtype=np.uint16)
    transpose_into(out[:, ::2], array)
    assert np.array_equal(out[:, ::2], array.T)
    assert not out[:, 1::2].any()


@pytest.mark.parametrize("shape", [(256, 256), (257, 256), (2100, 1024)])
def test_a_transposed_entry_loads_the_transpose_and_lies_at_no_file_offset(
    shape: tuple[int, int],
) -> None:
    # read from a file at offset 256: the transposed bytes are computed, not in the file
    array = np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape)
    out = transposed(replace(array_entry("w", array), offset=256))
    assert (out.shape, out.offset, out.nbytes) == (shape[::-1], None, array.nbytes)
    assert out.data.file_range() is None
    assert out.load().tobytes() == np.ascontiguousarray(array.T).tobytes()


# --- the layout adapters' actions ------------------------------------------------------------


def test_a_transpose_and_a_rename_name_the_adapter_and_the_evidence() -> None:
    decisions = {
        "fc.weight": Decision("fc.weight", "Linear", "pattern 'fc'"),
        "ln.weight": Decision("ln.weight", "LayerNorm", "pattern 'ln'"),
    }
    out, actions = PyTorchToBurn(decisions).apply(f32("fc.weight", (3, 4)))
    assert out is not None
    assert out.shape == (4, 3)
    assert actions == (
        Action(
            ActionKind.TRANSPOSE, "[3, 4] -> [4, 3]", "Linear (pattern 'fc')", "pytorch-to-burn"
        ),
    )
    source = f32("ln.weight", (4,))
    out, _ = PyTorchToBurn(decisions).apply(source)
    assert out == replace(source, name="ln.gamma", module_type="LayerNorm")  # the decided type


def test_what_the_layout_adapters_keep_and_rename() -> None:
    adapter = PyTorchToBurn()
    unknown = f32("x.weight", (3, 4))
    out, (action,) = adapter.apply(unknown)
    assert out is unknown
    assert (action.kind, action.detail, action.adapter) == (
        ActionKind.KEEP, "[3, 4]", "pytorch-to-burn",
    )  # fmt: skip
    assert "unknown" in action.reason
    undecided = {"x.weight": Decision("x.weight", None, "no evidence here")}
    assert PyTorchToBurn(undecided).apply(unknown)[1][0].reason.startswith("no evidence here")
    bias = f32("x.bias", (3,))
    assert adapter.apply(bias) == (bias, ())
    emb = f32("emb.weight", (3, 4), "Embedding")
    out, (action,) = adapter.apply(emb)
    assert out is emb
    assert (action.kind, action.detail) == (ActionKind.KEEP, "[3, 4]")
    assert action.reason.startswith("Embedding (class Embedding")
    assert "not transposed" in action.reason
    # a bare parameter name (no prefix) is renamed without a dot
    out, actions = adapter.apply(f32("weight", (4,), "LayerNorm"))
    assert out is not None
    assert (out.name, out.module_type) == ("gamma", "LayerNorm")
    assert actions == (
        Action(
            ActionKind.RENAME,
            "weight -> gamma",
            "LayerNorm (class LayerNorm from file)",
            "pytorch-to-burn",
        ),
    )
    rms = f32("n.gamma", (4,), "RmsNorm")
    assert BurnToPyTorch(rename_rmsnorm=False).apply(rms) == (rms, ())
    out, _ = BurnToPyTorch().apply(rms)
    assert out is not None
    assert out.name == "n.weight"
    # a target verdict overrides the type: not renamed, and transposed though not a Linear
    verdict = {"n.weight": Decision("n.weight", "LayerNorm", "t", rename=False)}
    kept = f32("n.weight", (4,))
    assert PyTorchToBurn(verdict).apply(kept) == (kept, ())
    forced = {"e.weight": Decision("e.weight", "Embedding", "t", transpose=True)}
    out, actions = PyTorchToBurn(forced).apply(f32("e.weight", (2, 3)))
    assert out is not None
    assert out.shape == (3, 2)
    assert actions[0].describe() == "transpose [2, 3] -> [3, 2]: Embedding (t)"


@pytest.mark.parametrize(
    ("name", "shape", "decision", "want"),
    [
        ("fc.weight", (4, 3), Decision("fc.weight", "Linear", "pattern"), True),
        ("fc.weight", (4, 3), None, False),
        ("fc.weight", (4, 3), Decision("fc.weight", "Linear", "family", done=True), False),
        ("fc.weight", (4, 3), Decision("fc.weight", None, "nothing"), False),
        ("fc.weight", (4,), Decision("fc.weight", "Linear", "pattern"), False),
        ("fc.bias", (4, 3), Decision("fc.bias", "Linear", "pattern"), False),
        ("fc.weight", (4, 3), Decision("fc.weight", "Embedding", "pattern"), False),
        ("fc.weight", (4, 3), Decision("fc.weight", "Embedding", "target", transpose=True), True),
        ("fc.weight", (4, 3), Decision("fc.weight", "Linear", "target", transpose=False), False),
    ],
)
def test_will_transpose_only_a_rank_2_weight_the_adapters_own(
    name: str, shape: tuple[int, ...], decision: Decision | None, want: bool
) -> None:
    assert will_transpose(f32(name, shape), decision) is want
    # what the adapter does agrees with what will_transpose says
    decisions = {name: decision} if decision else {}
    out, _ = PyTorchToBurn(decisions).apply(f32(name, shape))
    assert out is not None
    assert (out.shape != shape) is want

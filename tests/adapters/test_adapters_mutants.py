"""Edge cases of ``ckptctl.adapters`` that mutation testing found untested (issue 17).

The adapters decide what ``convert --adapter`` and ``--remap`` do to every tensor, and their
``--dry-run`` plans and warnings are printed as they are: a changed word, name, dtype, shape or
byte is a changed interface. Each test drives both sides of a branch and compares whole
messages, plans and arrays; expected arrays come from numpy (``.T``, ``astype``), expected
names and dtypes from burn-store spec §1-§4.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ckptctl.adapters import (
    Action,
    ActionKind,
    AdapterContext,
    BaseAdapter,
    FunctionAdapter,
    chain,
    parse_adapter,
    plan,
)
from ckptctl.adapters.cast import Cast, HalfPrecision, cast_entry, convert_float
from ckptctl.adapters.layout import (
    BurnToPyTorch,
    PyTorchToBurn,
    transpose_2d,
    transpose_into,
    transposed,
)
from ckptctl.adapters.modules import (
    Decision,
)
from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
from ckptctl.adapters.select import Select
from ckptctl.dtypes import DType
from ckptctl.errors import SelectionError
from ckptctl.fix import Note, Option
from ckptctl.model import TensorEntry
from tests.strategies import array_entry


def f32(name: str, shape: tuple[int, ...], module_type: str | None = None) -> TensorEntry:
    entry = array_entry(name, np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))
    return replace(entry, module_type=module_type) if module_type else entry


# --- Action, FunctionAdapter, Chain, plan, parse_adapter (adapters/__init__.py) ---------------


def test_action_describe_with_and_without_reason() -> None:
    full = Action(ActionKind.TRANSPOSE, "[3, 4] -> [4, 3]", "Linear (pattern 'fc')", "x")
    assert full.describe() == "transpose [3, 4] -> [4, 3]: Linear (pattern 'fc')"
    assert Action(ActionKind.KEEP, "[2, 2]", "", "x").describe() == "keep"


def test_base_adapter_describe_is_the_class_name_and_apply_is_abstract() -> None:
    class Mine(BaseAdapter):
        pass

    assert Mine().describe() == "Mine"
    with pytest.raises(NotImplementedError):
        Mine()(f32("a", (1,)))


def test_function_adapter_actions() -> None:
    entry = f32("a.w", (2,))
    renamed = FunctionAdapter(lambda e: replace(e, name="b.w"), "mine")
    out, actions = renamed.apply(entry)
    assert out is not None
    assert out.name == "b.w"
    assert actions == (Action(ActionKind.CUSTOM, "a.w -> b.w", "custom adapter", "mine"),)
    assert actions[0].describe() == "custom a.w -> b.w: custom adapter"
    dropped = FunctionAdapter(lambda e: None)
    assert dropped.apply(entry) == (
        None,
        (Action(ActionKind.CUSTOM, "dropped", "custom adapter", "custom"),),
    )
    assert dropped.describe() == "custom"
    assert FunctionAdapter(lambda e: e).apply(entry) == (entry, ())


def test_chain_flattens_describes_and_stops_at_a_drop() -> None:
    half, cast = parse_adapter("half"), Cast(DType.F16)
    inner = chain(half, cast)
    outer = chain(inner, Select(exclude=("x",)))
    assert outer.adapters == (half, cast, Select(exclude=("x",)))
    assert outer.describe() == "half -> cast:F16 -> select exclude x"
    assert chain().describe() == "identity"
    assert chain().adapters == ()
    calls: list[str] = []

    def spy(e: TensorEntry) -> TensorEntry:
        calls.append(e.name)
        return e

    out, actions = chain(Select(exclude=("x",)), spy).apply(f32("x", (1,)))
    assert out is None
    assert calls == []
    assert actions == (
        Action(ActionKind.DROP, "x", "matches exclude pattern 'x'", "select exclude x"),
    )


def test_plan_refuses_two_inputs_with_one_output_name() -> None:
    entries = [f32("a", (1,)), f32("b", (1,))]
    with pytest.raises(SelectionError) as info:
        plan(entries, chain(lambda e: replace(e, name="c")))
    assert info.value.message == "tensors 'a' and 'b' would both be named 'c'"
    assert info.value.hint == Note(
        "change the {fix0} rules so that every tensor keeps a unique name",
        (Option("remap", takes_value=True),),
    )
    # a dropped entry takes no name
    items = plan(entries, chain(lambda e: None if e.name == "a" else replace(e, name="c")))
    assert [(i.source, i.entry.name if i.entry else None) for i in items] == [
        ("a", None),
        ("b", "c"),
    ]


def test_parse_adapter_names_and_errors() -> None:
    assert parse_adapter("  PyTorch-To-Burn ").describe() == "pytorch-to-burn"
    assert parse_adapter("Burn-To-PyTorch").describe() == "burn-to-pytorch"
    assert parse_adapter(" HALF ").describe() == "half"
    assert parse_adapter(" Cast:bf16 ") == Cast(DType.BF16)
    ctx = AdapterContext({"x": Decision("x", "Linear", "e")}, rename_rmsnorm=False)
    layout = parse_adapter("burn-to-pytorch", ctx)
    assert isinstance(layout, BurnToPyTorch)
    assert layout.rename_rmsnorm is False
    assert dict(layout.decisions) == {"x": Decision("x", "Linear", "e")}
    ptb = parse_adapter("pytorch-to-burn", ctx)
    assert isinstance(ptb, PyTorchToBurn)
    assert ptb.rename_rmsnorm is False
    half = parse_adapter("half", ctx)
    assert isinstance(half, HalfPrecision)
    assert dict(half.decisions) == {"x": Decision("x", "Linear", "e")}
    with pytest.raises(SelectionError) as info:
        parse_adapter("halves")
    assert info.value.message == "unknown adapter 'halves'; did you mean 'half'?"
    assert info.value.hint == (
        "valid adapters: pytorch-to-burn, burn-to-pytorch, half, cast:DTYPE, "
        "rope-interleaved:HEADS[,KV], rope-half-split:HEADS[,KV]"
    )


def test_parse_adapter_suggests_nothing_when_no_name_is_close() -> None:
    with pytest.raises(SelectionError) as info:
        parse_adapter("zzz")
    assert info.value.message == "unknown adapter 'zzz'"


# --- Select (select.py) -----------------------------------------------------------------------


def test_select_reasons_and_describe() -> None:
    sel = Select(include=("^a", "b$"), exclude=("x", "y"))
    assert sel.reason_dropped("a.x") == "matches exclude pattern 'x'"
    assert sel.reason_dropped("a.y") == "matches exclude pattern 'y'"
    assert sel.reason_dropped("c") == "matches no include pattern"
    assert sel.reason_dropped("cb") is None
    assert sel.reason_dropped("ac") is None
    assert sel.matches("ab") is True
    assert sel.matches("ax") is False
    assert sel.describe() == "select include ^a, include b$, exclude x, exclude y"
    assert Select().describe() == "select all"
    assert Select().matches("anything") is True
    out, actions = sel.apply(f32("zz", (1,)))
    assert out is None
    assert actions == (Action(ActionKind.DROP, "zz", "matches no include pattern", sel.describe()),)
    kept = f32("ab", (1,))
    assert sel.apply(kept) == (kept, ())


def test_select_names_the_bad_pattern() -> None:
    with pytest.raises(SelectionError) as info:
        Select(include=("a", "(b"))
    assert info.value.message.startswith("include #2: invalid pattern '(b': ")
    with pytest.raises(SelectionError) as info:
        Select(exclude=("(c",))
    assert info.value.message.startswith("exclude #1: invalid pattern '(c': ")


# --- Cast / HalfPrecision (cast.py) -----------------------------------------------------------


def test_cast_messages_and_actions() -> None:
    with pytest.raises(SelectionError) as info:
        Cast(DType.I32)
    assert info.value.message == "cannot cast to I32"
    assert info.value.hint == "cast targets: cast:f64, cast:f32, cast:f16, cast:bf16"
    with pytest.raises(SelectionError) as info:
        Cast.parse("f17")
    assert info.value.message == "unknown dtype 'f17' in cast:f17"
    assert info.value.hint == "e.g. cast:f32, cast:f16, cast:bf16, cast:f64"
    cast = Cast.parse("float16")
    assert cast.describe() == "cast:F16"
    entry = f32("w", (2, 3))
    out, actions = cast.apply(entry)
    assert actions == (
        Action(ActionKind.CAST, "F32 -> F16", "every float tensor is cast", "cast:F16"),
    )
    assert out is not None
    assert (out.dtype, out.shape, out.nbytes, out.offset) == (DType.F16, (2, 3), 12, None)
    assert out.load().tobytes() == np.arange(6, dtype=np.float16).tobytes()
    ints = array_entry("i", np.arange(3, dtype=np.int32))
    assert cast.apply(ints) == (ints, ())
    same = array_entry("h", np.arange(3, dtype=np.float16))
    assert cast.apply(same) == (same, ())


def test_cast_scalar_and_many_blocks() -> None:
    scalar = array_entry("s", np.array(1.5, dtype=np.float32))
    out = cast_entry(scalar, DType.F64)
    assert out.shape == ()
    assert out.load().tobytes() == np.array(1.5, dtype=np.float64).tobytes()
    # 2100 rows of 4 KiB: more than one 8 MiB read block
    values = ((np.arange(2100 * 1024) % 4099).astype(np.float32) * np.float32(0.37)).reshape(
        2100, 1024
    )
    big = cast_entry(array_entry("big", values), DType.F16)
    assert big.load().tobytes() == values.astype(np.float16).tobytes()


def test_convert_float_f64_to_f16_rounds_through_f32_without_warnings() -> None:
    with np.errstate(over="raise"):
        out = convert_float(np.array([1e300, 1.0], dtype=np.float64), DType.F64, DType.F16)
    assert out.tobytes() == np.array([np.inf, 1.0], dtype=np.float16).tobytes()
    # 1 + 2**-11 + 2**-40 rounds up to 1 + 2**-10 directly, but to 1 + 2**-11 (a tie, to
    # even: 1.0) through F32, as Burn does (spec §2.1)
    x = np.array([1 + 2**-11 + 2**-40], dtype=np.float64)
    assert convert_float(x, DType.F64, DType.F16).tobytes() == np.float16(1.0).tobytes()


def test_half_precision_reason_and_scope() -> None:
    lin = f32("fc.weight", (2, 2), "Linear")
    out, actions = HalfPrecision().apply(lin)
    assert out is not None
    assert out.dtype is DType.F16
    assert actions == (
        Action(
            ActionKind.CAST,
            "F32 -> F16",
            "Linear is in the half-precision set (class Linear from file)",
            "half",
        ),
    )
    back, actions = HalfPrecision().apply(out)
    assert back is not None
    assert back.dtype is DType.F32
    assert actions[0].detail == "F16 -> F32"
    bn = f32("bn.weight", (2,), "BatchNorm")
    assert HalfPrecision().apply(bn) == (bn, ())
    untyped = f32("x.weight", (2,))
    assert HalfPrecision().apply(untyped) == (untyped, ())
    f64 = replace(array_entry("d", np.zeros(2)), module_type="Linear")
    assert HalfPrecision().apply(f64) == (f64, ())


# --- layout.py --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape",
    [(256, 256), (257, 256), (70, 1100), (1100, 70), (33, 2100)],
)
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
def test_transposed_entry_loads_the_transpose(shape: tuple[int, int]) -> None:
    array = np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape)
    out = transposed(array_entry("w", array))
    assert (out.shape, out.offset, out.nbytes) == (shape[::-1], None, array.nbytes)
    assert out.load().tobytes() == np.ascontiguousarray(array.T).tobytes()


def test_layout_keep_actions_and_renames() -> None:
    adapter = PyTorchToBurn()
    unknown = f32("x.weight", (3, 4))
    assert adapter.apply(unknown) == (
        unknown,
        (Action(ActionKind.KEEP, "[3, 4]", "module type unknown; left as is", "pytorch-to-burn"),),
    )
    undecided = {"x.weight": Decision("x.weight", None, "no evidence here")}
    assert PyTorchToBurn(undecided).apply(unknown)[1][0].reason == "no evidence here; left as is"
    bias = f32("x.bias", (3,))
    assert adapter.apply(bias) == (bias, ())
    emb = f32("emb.weight", (3, 4), "Embedding")
    assert adapter.apply(emb) == (
        emb,
        (
            Action(
                ActionKind.KEEP,
                "[3, 4]",
                "Embedding (class Embedding from file); not transposed",
                "pytorch-to-burn",
            ),
        ),
    )
    # a bare parameter name (no prefix) is renamed without a dot
    ln = f32("weight", (4,), "LayerNorm")
    out, actions = adapter.apply(ln)
    assert out is not None
    assert out.name == "gamma"
    assert out.module_type == "LayerNorm"
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


# --- pipeline.py ------------------------------------------------------------------------------


def test_pipeline_warnings_name_the_first_three_modules() -> None:
    entries = [f32(f"m{i}.weight", (3, 4)) for i in range(4)]
    declare = (Option("module_types", takes_value=True),)
    _, warnings = run_pipeline(entries[:3], PipelineOptions(adapters=("pytorch-to-burn",)))
    assert warnings == [
        Note(
            "3 rank-2 weights with no module type left as is (m0, m1, m2): declare with {fix0}",
            declare,
        )
    ]
    _, warnings = run_pipeline(entries, PipelineOptions(adapters=("pytorch-to-burn",)))
    assert warnings == [
        Note(
            "4 rank-2 weights with no module type left as is (m0, m1, m2, ...): "
            "declare with {fix0}",
            declare,
        )
    ]


def test_pipeline_square_and_norm_warnings_singular() -> None:
    entries = [f32("fc.weight", (4, 4)), f32("x.weight", (4,))]
    items, warnings = run_pipeline(entries, PipelineOptions(adapters=("pytorch-to-burn",)))
    declare = (Option("module_types", takes_value=True),)
    assert warnings == [
        Note("1 square weight typed by name only (fc): confirm with {fix0}", declare),
        Note(
            "1 1-D weight with no module type kept as weight/bias, not renamed gamma/beta (x): "
            "declare with {fix0}",
            declare,
        ),
    ]
    assert [i.entry.shape if i.entry else None for i in items] == [(4, 4), (4,)]
    # half needs decisions but warns about nothing (only layout adapters do)
    _, warnings = run_pipeline(entries, PipelineOptions(adapters=("half",)))
    assert warnings == []


def test_pipeline_rule_warnings_and_collisions() -> None:
    entries = [f32("a.w", (1,)), f32("b.w", (1,))]
    items, warnings = run_pipeline(
        entries, PipelineOptions(remap=(r"^a\.(w)=c.$1", "zz=y"), exclude=("b",))
    )
    assert warnings == ["remap rule #2 'zz' matches no tensor name"]
    assert [(i.source, i.entry.name if i.entry else None) for i in items] == [
        ("a.w", "c.w"),
        ("b.w", None),
    ]
    with pytest.raises(SelectionError) as info:  # Python-style groups: refused up front
        run_pipeline(entries, PipelineOptions(remap=(r"^\w\.(w)=\1",)))
    assert info.value.message.startswith("rule #1 '^\\w\\.(w)=\\1': the replacement writes")
    assert info.value.hint == "groups are written $1 or ${name} in a replacement, not \\1: '${1}'"
    with pytest.raises(SelectionError) as info:
        run_pipeline(entries, PipelineOptions(remap=(r"^\w\.(w)=$1",)))
    assert info.value.message == "tensors 'a.w' and 'b.w' would both be named 'w'"
    # a rename by the layout adapter that lands on an existing name
    clash = [f32("n.weight", (2,), "LayerNorm"), f32("n.gamma", (2,))]
    with pytest.raises(SelectionError) as info:
        run_pipeline(clash, PipelineOptions(adapters=("pytorch-to-burn",)))
    assert info.value.message == "tensors 'n.weight' and 'n.gamma' would both be named 'n.gamma'"
    adapters_hint = Note(
        "change the {fix0} rules or adapters so that names stay unique",
        (Option("remap", takes_value=True),),
    )
    assert info.value.hint == adapters_hint
    # remapped first, then renamed by the adapter: the message names the input tensors
    clash = [f32("x.weight", (2,), "LayerNorm"), f32("y.gamma", (2,))]
    with pytest.raises(SelectionError) as info:
        run_pipeline(clash, PipelineOptions(remap=(r"^y\.=x.",), adapters=("pytorch-to-burn",)))
    assert info.value.message == "tensors 'x.weight' and 'y.gamma' would both be named 'x.gamma'"
    assert info.value.hint == adapters_hint


def test_pipeline_module_rules_from_options_and_map() -> None:
    entries = [f32("a.weight", (2, 3)), f32("b.weight", (2, 3))]
    options = PipelineOptions(
        adapters=("PyTorch-To-Burn",), module_types=("^a=Linear",), module_map={"^b": "Linear"}
    )
    items, warnings = run_pipeline(entries, options)
    assert warnings == []
    assert [i.entry.shape if i.entry else None for i in items] == [(3, 2), (3, 2)]
    assert [a.describe() for i in items for a in i.actions] == [
        "transpose [2, 3] -> [3, 2]: Linear (module rule #1 '^a=Linear')",
        "transpose [2, 3] -> [3, 2]: Linear (module rule #1 '^b=Linear')",
    ]


# --- modules.py -------------------------------------------------------------------------------


def test_cast_entry_forgets_file_offset_and_source_dtype() -> None:
    # an entry read from a file (offset 128, stored as F64 and decoded to F32)
    entry = replace(f32("w", (2,)), offset=128, source_dtype=DType.F64)
    out = cast_entry(entry, DType.F16)
    assert (out.offset, out.source_dtype, out.nbytes) == (None, None, 4)


def test_convert_float_f64_to_f64_keeps_every_bit() -> None:
    x = np.array([1 + 2**-40], dtype=np.float64)
    assert convert_float(x, DType.F64, DType.F64).tobytes() == x.tobytes()

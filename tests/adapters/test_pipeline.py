"""Adapter chains, plans and ``run_pipeline``: what ``convert --adapter/--remap/--exclude`` plans.

``run_pipeline`` selects, remaps, decides module types and runs the adapters; its plan (one item
per input tensor, with the actions that made its output) and its warnings are what
``--dry-run`` prints. Warnings are checked for what they must tell (how many tensors, which
ones, what kind of doubt, the option that settles it), not their words.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from ckptctl.adapters import (
    ADAPTER_NAMES,
    Action,
    ActionKind,
    AdapterContext,
    BaseAdapter,
    FunctionAdapter,
    PlanItem,
    chain,
    parse_adapter,
    plan,
)
from ckptctl.adapters.cast import Cast, HalfPrecision
from ckptctl.adapters.layout import BurnToPyTorch, PyTorchToBurn
from ckptctl.adapters.modules import Decision
from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
from ckptctl.adapters.select import Select
from ckptctl.dtypes import DType
from ckptctl.errors import ExitCode, SelectionError
from ckptctl.fix import Note, Option
from ckptctl.model import TensorEntry
from tests.strategies import array_entry

DECLARE = (Option("module_types", takes_value=True),)
REMAP = (Option("remap", takes_value=True),)


def f32(name: str, shape: tuple[int, ...], module_type: str | None = None) -> TensorEntry:
    entry = array_entry(name, np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))
    return replace(entry, module_type=module_type) if module_type else entry


def warned(warning: str | Note) -> tuple[object, ...]:
    """What a warning tells: (count, kind of doubt, tensors named), or the remap rule unused."""
    if isinstance(warning, str):
        rule = re.search(r"remap rule #\d+ '[^']*'", warning)
        assert rule is not None, warning
        assert "matches no" in warning
        return ("unused", rule.group())
    assert warning.fixes == DECLARE, warning
    kind = next(k for k in ("square", "rank-2", "1-D") if k in warning.text)
    names = re.search(r"\(([^)]*)\)", warning.text)
    assert names is not None, warning
    return (int(warning.text.split()[0]), kind, names.group(1).split(", "))


def collision(entries: list[TensorEntry], options: PipelineOptions) -> SelectionError:
    with pytest.raises(SelectionError, match="both be named") as info:
        run_pipeline(entries, options)
    assert info.value.exit_code == ExitCode.USAGE
    return info.value


# --- Action, adapters, chain, plan, parse_adapter ------------------------------------------------


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
    with pytest.raises(SelectionError, match="both be named") as info:
        plan(entries, chain(lambda e: replace(e, name="c")))
    assert info.value.message.startswith("tensors 'a' and 'b' ")
    assert info.value.message.endswith("'c'")
    assert isinstance(info.value.hint, Note)
    assert info.value.hint.fixes == REMAP
    # a dropped entry takes no name
    items = plan(entries, chain(lambda e: None if e.name == "a" else replace(e, name="c")))
    assert [(i.source, i.entry.name if i.entry else None) for i in items] == [
        ("a", None),
        ("b", "c"),
    ]


def test_parse_adapter_names_and_context() -> None:
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


@pytest.mark.parametrize(("name", "guess"), [("halves", "'half'"), ("zzz", None)])
def test_an_unknown_adapter_is_refused_with_a_guess_and_every_name(
    name: str, guess: str | None
) -> None:
    with pytest.raises(SelectionError, match="unknown adapter") as info:
        parse_adapter(name)
    assert f"'{name}'" in info.value.message
    if guess is None:
        assert "?" not in info.value.message
    else:
        assert info.value.message.endswith(f"did you mean {guess}?")
    assert str(info.value.hint).split(": ", 1)[1].split(", ") == list(ADAPTER_NAMES)


# --- Select ---------------------------------------------------------------------------------------


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
    with pytest.raises(SelectionError, match="invalid pattern") as info:
        Select(include=("a", "(b"))
    assert info.value.message.startswith("include #2: invalid pattern '(b': ")
    with pytest.raises(SelectionError, match="invalid pattern") as info:
        Select(exclude=("(c",))
    assert info.value.message.startswith("exclude #1: invalid pattern '(c': ")


# --- run_pipeline: plans -------------------------------------------------------------------------


def test_the_plan_keeps_every_entry_after_a_dropped_one() -> None:
    first, second, third = f32("a.x", (2,)), f32("b.x", (2,)), f32("c.x", (2,))
    items, warnings = run_pipeline([first, second, third], PipelineOptions(exclude=("^a",)))
    drop = Action(ActionKind.DROP, "a.x", "matches exclude pattern '^a'", "select exclude ^a")
    assert items == [
        PlanItem("a.x", None, (drop,)),
        PlanItem("b.x", second, ()),
        PlanItem("c.x", third, ()),
    ]
    assert warnings == []


def test_module_rules_come_from_options_and_a_map() -> None:
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


def test_a_python_style_group_is_refused_before_anything_runs() -> None:
    entries = [f32("a.w", (1,)), f32("b.w", (1,))]
    with pytest.raises(SelectionError, match="replacement") as info:
        run_pipeline(entries, PipelineOptions(remap=(r"^\w\.(w)=\1",)))
    assert info.value.message.startswith("rule #1 '^\\w\\.(w)=\\1': ")
    assert "'${1}'" in str(info.value.hint)


@pytest.mark.parametrize(
    ("entries", "options", "sources", "name"),
    [
        # two inputs remapped to one name
        ([f32("a.w", (1,)), f32("b.w", (1,))], PipelineOptions(remap=(r"^\w\.(w)=$1",)),
         ("a.w", "b.w"), "w"),
        # a rename by the layout adapter that lands on an existing name
        ([f32("n.weight", (2,), "LayerNorm"), f32("n.gamma", (2,))],
         PipelineOptions(adapters=("pytorch-to-burn",)), ("n.weight", "n.gamma"), "n.gamma"),
        # remapped first, then renamed by the adapter: the message names the input tensors
        ([f32("x.weight", (2,), "LayerNorm"), f32("y.gamma", (2,))],
         PipelineOptions(remap=(r"^y\.=x.",), adapters=("pytorch-to-burn",)),
         ("x.weight", "y.gamma"), "x.gamma"),
    ],
)  # fmt: skip
def test_two_inputs_with_one_output_name_are_refused_naming_the_inputs(
    entries: list[TensorEntry], options: PipelineOptions, sources: tuple[str, str], name: str
) -> None:
    error = collision(entries, options)
    assert error.message.startswith(f"tensors {sources[0]!r} and {sources[1]!r} ")
    assert error.message.endswith(f"{name!r}")
    assert isinstance(error.hint, Note)
    assert error.hint.fixes == REMAP
    assert ("adapters" in error.hint.text) is bool(options.adapters)


# --- run_pipeline: warnings ----------------------------------------------------------------------


def test_unused_remap_rules_are_warned_of_and_dropped_tensors_planned() -> None:
    entries = [f32("a.w", (1,)), f32("b.w", (1,))]
    items, warnings = run_pipeline(
        entries, PipelineOptions(remap=(r"^a\.(w)=c.$1", "zz=y"), exclude=("b",))
    )
    assert [warned(w) for w in warnings] == [("unused", "remap rule #2 'zz'")]
    assert [(i.source, i.entry.name if i.entry else None) for i in items] == [
        ("a.w", "c.w"),
        ("b.w", None),
    ]


def test_layout_warnings_count_and_name_the_weights_in_doubt() -> None:
    entries = [
        f32("q.weight", (4, 4)),  # typed by its name only: the shape cannot confirm it
        f32("k.weight", (4, 4)),
        f32("odd.weight", (3, 4)),  # no module type: left as is
        f32("big.weight", (3, 4)),
        f32("fc.weight", (3, 4)),  # a Linear by its name: no doubt
        f32("odd.bias", (3, 4)),
        f32("n.weight", (3,)),  # a 1-D weight: kept as weight/bias, not renamed
        f32("m.g.weight", (3,)),  # named by its last module
        f32("n.bias", (3,)),
        f32("t.weight", (3, 4, 5)),
    ]
    options = PipelineOptions(adapters=("pytorch-to-burn",))
    _, warnings = run_pipeline(entries, options)
    assert [warned(w) for w in warnings] == [
        (2, "square", ["q", "k"]),
        (2, "rank-2", ["odd", "big"]),
        (2, "1-D", ["n", "g"]),
    ]
    # singular, and a tensor at the root named by itself
    _, warnings = run_pipeline([f32("fc.weight", (4, 4)), f32("weight", (4,))], options)
    assert [warned(w) for w in warnings] == [(1, "square", ["fc"]), (1, "1-D", ["weight"])]
    assert [w.text.split()[2] for w in warnings if isinstance(w, Note)] == ["weight"] * 2
    _, several = run_pipeline(entries, options)
    assert [w.text.split()[2] for w in several if isinstance(w, Note)] == ["weights"] * 3
    # burn-to-pytorch doubts the same weights; half needs decisions but warns of nothing
    b2p = run_pipeline(entries[:2], PipelineOptions(adapters=("burn-to-pytorch",)))[1]
    assert [warned(w) for w in b2p] == [(2, "square", ["q", "k"])]
    assert run_pipeline(entries, PipelineOptions(adapters=("half",)))[1] == []
    assert run_pipeline(entries, PipelineOptions())[1] == []


@pytest.mark.parametrize(
    ("count", "names"), [(3, ["m0", "m1", "m2"]), (4, ["m0", "m1", "m2", "..."])]
)
def test_a_warning_names_three_modules_at_most(count: int, names: list[str]) -> None:
    entries = [f32(f"m{i}.weight", (3, 4)) for i in range(count)]
    _, warnings = run_pipeline(entries, PipelineOptions(adapters=("pytorch-to-burn",)))
    assert [warned(w) for w in warnings] == [(count, "rank-2", names)]


def test_rule_warnings_come_before_layout_warnings() -> None:
    options = PipelineOptions(remap=("zz=y",), adapters=("pytorch-to-burn",))
    _, warnings = run_pipeline([f32("q.weight", (4, 4))], options)
    assert [warned(w) for w in warnings] == [
        ("unused", "remap rule #1 'zz'"),
        (1, "square", ["q"]),
    ]

"""Module types: rules the user declares, classes a file names, patterns, and a target's shapes.

A decision is what the layout adapters act on: the module type, whether the evidence is weak
(``flagged``: a warning asks to confirm it), and a target's verdict on transposing and renaming
a norm's parameters. The evidence text is shown in ``--dry-run`` plans; here it is checked for
the fact it must carry (the pattern that matched, the target's name or shape), not its words.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from ckptctl.adapters.modules import (
    FAMILY_TYPES,
    MODULE_TYPES,
    Decision,
    ModuleRule,
    decide_module_types,
    module_rules_from_mapping,
    normalize_type,
    parse_module_rules,
    parse_type_call,
    resolve,
)
from ckptctl.dtypes import DType
from ckptctl.errors import ExitCode, SelectionError
from ckptctl.model import TensorEntry
from tests.strategies import array_entry

#: name -> (module type, flagged, transpose, rename, a fact the evidence names)
Want = dict[str, tuple[str | None, bool, bool | None, bool | None, str]]


def entry(name: str, shape: tuple[int, ...], module_type: str | None = None) -> TensorEntry:
    made = array_entry(name, np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))
    return replace(made, module_type=module_type) if module_type else made


def assert_decided(entries: list[TensorEntry], want: Want, **kw: object) -> None:
    got = decide_module_types(entries, **kw)  # type: ignore[arg-type]  # target=, rules=
    assert list(got) == list(want)
    for name, (module_type, flagged, transpose, rename, fact) in want.items():
        d = got[name]
        assert (d.name, d.module_type, d.flagged, d.transpose, d.rename) == (
            name, module_type, flagged, transpose, rename,
        ), name  # fmt: skip
        assert fact in d.evidence, (name, d.evidence)


# --- rules: REGEX=Type(option=value, ...) -------------------------------------------------------


def test_rules_are_numbered_and_labelled_by_their_canonical_type() -> None:
    rules = parse_module_rules(["fc=Linear", "norm=layernorm", "a=b=linear"])
    assert [(r.number, r.pattern, r.module_type) for r in rules] == [
        (1, "fc", "Linear"),
        (2, "norm", "LayerNorm"),
        (3, "a=b", "Linear"),  # the type follows the last '='
    ]
    assert rules[2].label == "module rule #3 'a=b=Linear'"
    mapped = module_rules_from_mapping({"a": "Linear", "b": "rmsnorm"})
    assert [(r.number, r.pattern, r.module_type) for r in mapped] == [
        (1, "a", "Linear"),
        (2, "b", "RmsNorm"),
    ]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # the pattern's own parentheses are not the type's call: the call opens at the last "("
        (r"(enc|dec)\.lstm=LSTM(num_layers=2)", (r"(enc|dec)\.lstm", "LSTM", {"num_layers": 2})),
        # blanks after the call's ")" still end a call
        ("fc=Linear(variant=Base)  ", ("fc", "Linear", {"variant": "Base"})),
    ],
)
def test_a_rule_splits_before_the_types_call(
    text: str, want: tuple[str, str, dict[str, object]]
) -> None:
    (rule,) = parse_module_rules([text])
    assert (rule.pattern, rule.module_type, dict(rule.options)) == want


@pytest.mark.parametrize(
    ("rules", "keyword", "facts", "hint"),
    [
        (["fc=Linear", "noequals"], "REGEX=Type", ["#2", "'noequals'"], "=Linear"),
        (["=Linear"], "REGEX=Type", ["#1", "'=Linear'"], "=Linear"),
        # the only "(" opens the text: no REGEX= comes before the type
        (["(fc=Linear)"], "REGEX=Type", ["#1", "'(fc=Linear)'"], "=Linear"),
        (["fc=Linear", "(=Linear"], "invalid pattern", ["#2", "'('"], None),
        (["x=Lineer"], "unknown module type", ["'Lineer'"], "Linear"),
    ],
)
def test_bad_rules_are_refused_naming_the_rule(
    rules: list[str], keyword: str, facts: list[str], hint: str | None
) -> None:
    with pytest.raises(SelectionError, match=keyword) as info:
        parse_module_rules(rules)
    assert info.value.exit_code == ExitCode.USAGE
    for fact in facts:
        assert fact in info.value.message
    if hint is not None:
        assert hint in str(info.value.hint)


def test_an_unknown_type_is_refused_listing_every_type() -> None:
    with pytest.raises(SelectionError, match="unknown module type") as info:
        parse_module_rules(["x=Lineer"])
    listed = str(info.value.hint).split(": ", 1)[1].split(", ")
    assert listed == [*MODULE_TYPES, *FAMILY_TYPES]


def test_a_mapping_rule_needs_a_string_type() -> None:
    with pytest.raises(SelectionError, match="string") as info:
        module_rules_from_mapping({"a": "Linear", "b": 3})
    assert info.value.message.startswith("module rule #2 'b'")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Burn's family names: the last dotted segment, after an optional Struct: prefix
        ("burn.nn.BiGru(num_layers=3)", ("GRU", {"bidirectional": True, "num_layers": 3})),
        ("Struct:BiRnn", ("RNN", {"bidirectional": True})),
        ("Struct:burn.BiLstm()", ("LSTM", {"bidirectional": True})),
        ("burn.nn.Lstm", ("LSTM", {})),
        # options split at commas, each at its first '='; bools in any case
        (
            "LSTM(bidirectional=false, num_layers=2)",
            ("LSTM", {"bidirectional": False, "num_layers": 2}),
        ),
        (
            "LSTM(bidirectional=FALSE,num_layers=10)",
            ("LSTM", {"bidirectional": False, "num_layers": 10}),
        ),
        ("GRU(bidirectional=No)", ("GRU", {"bidirectional": False})),
        ("GRU(bidirectional=0)", ("GRU", {"bidirectional": False})),
        ("GRU(bidirectional=Yes)", ("GRU", {"bidirectional": True})),
        ("GRU(bidirectional = true ,)", ("GRU", {"bidirectional": True})),
        # a variant is an identifier: lower-case first letters too
        ("Linear(variant=layer)", ("Linear", {"variant": "layer"})),
        ("LayerNorm(variant=Layer_2)", ("LayerNorm", {"variant": "Layer_2"})),
        ("Linear(variant=_x)", ("Linear", {"variant": "_x"})),
    ],
)
def test_type_calls_and_their_option_values(
    text: str, expected: tuple[str, dict[str, object]]
) -> None:
    assert parse_type_call(text, "module rule #1") == expected


@pytest.mark.parametrize(
    ("text", "option", "value", "kind"),
    [
        ("GRU(bidirectional=maybe)", "bidirectional", "'maybe'", "bool"),
        ("LSTM(num_layers=two)", "num_layers", "'two'", "int"),
        ("LSTM(num_layers=-1)", "num_layers", "'-1'", "int"),
        ("Linear(variant=12)", "variant", "'12'", "str"),
        ("Linear(variant=2a)", "variant", "'2a'", "str"),
        # the option is split at its first '=': the value 'a=b' is not an identifier
        ("Linear(variant=a=b)", "variant", "'a=b'", "str"),
    ],
)
def test_an_option_value_of_the_wrong_kind_is_refused(
    text: str, option: str, value: str, kind: str
) -> None:
    with pytest.raises(SelectionError, match=f"not a {kind}$") as info:
        parse_type_call(text, "module rule #1")
    assert info.value.message.startswith(f"module rule #1: option {option}: {value} ")
    assert info.value.hint is None


@pytest.mark.parametrize(
    ("text", "option", "options"),
    [
        ("LSTM(dropout=0.1)", "'dropout=0.1'", "bidirectional=, num_layers=, proj_size="),
        ("GRU(bidirectional=true, proj_size=4)", "'proj_size=4'", "bidirectional=, num_layers="),
        ("MultiheadAttention(heads=8)", "'heads=8'", "none"),
        ("Linear( bias )", "'bias'", "variant="),
    ],
)
def test_an_option_the_type_lacks_is_refused_listing_its_options(
    text: str, option: str, options: str
) -> None:
    with pytest.raises(SelectionError, match="no option") as info:
        parse_type_call(text, "module rule #1")
    assert info.value.message.startswith(f"module rule #1: {text.split('(')[0]} ")
    assert info.value.message.endswith(option)
    assert str(info.value.hint).endswith(f": {options}")


def test_a_rule_names_its_number_when_its_type_is_refused() -> None:
    for rule, text in [("module rule #1", "Linear(variant=a"), ("module rule #3", "Linear[2]")]:
        with pytest.raises(SelectionError, match=re.escape("Type(option=value")) as info:
            parse_type_call(text, rule) if rule.endswith("1") else ModuleRule("fc", text, 3)
        assert info.value.message.startswith(f"{rule}: '{text}' ")
    with pytest.raises(SelectionError, match="not a int") as info:
        ModuleRule("rnn", "GRU(num_layers=x)", 4)
    assert info.value.message.startswith("module rule #4: ")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Struct:LayerNorm", "LayerNorm"),
        (" torch.nn.modules.batchnorm.BatchNorm2d ", "BatchNorm"),
        ("__torch__.torch.nn.modules.linear.Linear", "Linear"),
        ("convtranspose2d", "ConvTranspose2d"),
        ("InstanceNorm3d", "InstanceNorm"),
        ("PReLU", "PRelu"),
        ("mypkg.MyBlock", "Other"),
    ],
)
def test_normalize_type(name: str, expected: str) -> None:
    assert normalize_type(name) == expected


def test_resolve_prefers_decisions_then_the_files_class() -> None:
    typed = entry("a.weight", (2, 2), "torch.nn.modules.linear.Linear")
    given = Decision("a.weight", "Other", "rule")
    assert resolve(typed, {"a.weight": given}) is given
    assert resolve(typed, {}) == Decision(
        "a.weight", "Linear", "class torch.nn.modules.linear.Linear from file"
    )
    assert resolve(entry("a.weight", (2, 2)), {}) is None


# --- patterns: names, ranks and siblings ---------------------------------------------------------


def test_patterns_need_the_right_rank() -> None:
    assert_decided(
        [
            entry("fc.weight", (3,)),
            entry("c_attn.weight", (2, 3, 4)),
            entry("c_proj.weight", (3,)),
            entry("norm.weight", (3, 4)),  # a norm pattern is no evidence for a rank-2 weight
            entry("rms.weight", (2, 3, 4)),
            entry("ln.bias", (3,)),
            entry("gn.weight", (3,)),
            entry("bn1.weight", (3,)),
            entry("embed.weight", (3, 4)),
            entry("q.weight", (4, 4)),
            entry("proj.weight", (3, 4)),
            entry("prelu.weight", (1,)),
            entry("h.c_attn.weight", (3, 9)),
            entry("ln_f.weight", (3,)),
            entry("conv.weight", (2, 3, 3, 3)),
            entry("c3.weight", (1, 1, 1, 1, 1)),
            entry("DeConv.weight", (1, 1, 1)),
            entry("norm_proj.weight", (3, 4)),  # 'norm' skipped: the Linear pattern applies
        ],
        {
            "fc.weight": (None, False, None, None, "no evidence"),
            "c_attn.weight": ("Conv1d", False, None, None, "rank-3"),
            "c_proj.weight": (None, False, None, None, "no evidence"),
            "norm.weight": (None, True, None, None, "declare"),
            "rms.weight": ("Conv1d", False, None, None, "rank-3"),
            "ln.bias": ("LayerNorm", False, None, None, "'ln'"),
            "gn.weight": ("GroupNorm", False, None, None, "'gn'"),
            "bn1.weight": ("BatchNorm", False, None, None, "'bn1'"),
            "embed.weight": ("Embedding", False, None, None, "'embed'"),
            "q.weight": ("Linear", True, None, None, "square"),
            "proj.weight": ("Linear", False, None, None, "'proj'"),
            "prelu.weight": ("PRelu", False, None, None, "'prelu'"),
            # GPT-2's Conv1D is already [in, out]: flagged, never transposed as a Linear
            "h.c_attn.weight": ("Conv1D", True, None, None, "'c_attn'"),
            "ln_f.weight": ("LayerNorm", False, None, None, "'ln_f'"),
            "conv.weight": ("Conv2d", False, None, None, "rank-4"),
            "c3.weight": ("Conv3d", False, None, None, "rank-5"),
            "DeConv.weight": ("ConvTranspose1d", False, None, None, "rank-3"),
            "norm_proj.weight": ("Linear", False, None, None, "'norm_proj'"),
        },
    )


def test_siblings_decide_batch_norms_and_linears() -> None:
    assert_decided(
        [
            entry("x.weight", (3,)),
            entry("x.running_mean", (3,)),
            entry("bn.weight", (3,)),
            entry("bn.running_var", (3,)),
            # 'norm' is skipped for a rank-2 weight; the matching bias then makes it a Linear
            entry("norm.weight", (3, 4)),
            entry("norm.bias", (3,)),
            entry("blk.weight", (5, 3)),
            entry("blk.bias", (5,)),
            entry("odd.weight", (5, 3)),
            entry("odd.bias", (7,)),  # not the weight's rows: no Linear
        ],
        {
            "x.weight": ("BatchNorm", False, None, None, "running_mean"),
            "x.running_mean": ("BatchNorm", False, None, None, "running_mean"),
            "bn.weight": ("BatchNorm", False, None, None, "running_mean"),
            "bn.running_var": ("BatchNorm", False, None, None, "running_mean"),
            "norm.weight": ("Linear", False, None, None, "rank-1 bias"),
            "norm.bias": ("Linear", False, None, None, "rank-1 bias"),
            "blk.weight": ("Linear", False, None, None, "rank-1 bias"),
            "blk.bias": ("Linear", False, None, None, "rank-1 bias"),
            "odd.weight": (None, True, None, None, "declare"),
            "odd.bias": (None, False, None, None, "no evidence"),
        },
    )


def test_a_lone_one_d_alpha_is_a_prelu() -> None:
    assert_decided(
        [
            entry("act.alpha", (1,)),
            entry("act2.alpha", (4,)),
            entry("a.alpha", (2, 2)),  # not 1-D
            entry("b.alpha", (2,)),  # not alone
            entry("b.beta", (2,)),
        ],
        {
            "act.alpha": ("PRelu", False, None, None, "alpha"),
            "act2.alpha": ("PRelu", False, None, None, "alpha"),
            "a.alpha": (None, False, None, None, "no evidence"),
            "b.alpha": (None, False, None, None, "no evidence"),
            "b.beta": (None, False, None, None, "no evidence"),
        },
    )


# --- a target's shapes and names -----------------------------------------------------------------


def test_a_targets_shapes_decide_transposes_but_square_and_unrelated_ones_do_not() -> None:
    target = {
        "q.weight": (DType.F32, (4, 4)),
        "fc.weight": (DType.F32, (5, 6)),
        "x.weight": (DType.F32, (4, 3)),
        "v.weight": (DType.F32, (4,)),
        "w.weight": (DType.F32, (3, 4)),
        "t.weight": (DType.F32, (4, 3)),
        "keep.weight": (DType.F32, (3, 4)),
        "same.weight": (DType.F32, (3,)),
    }
    assert_decided(
        [
            entry("q.weight", (4, 4)),
            entry("fc.weight", (3, 4)),
            entry("x.weight", (3, 4)),
            entry("v.weight", (4, 4)),
            entry("w.weight", (3, 4, 1)),
            entry("z.weight", (3,)),
            entry("t.weight", (3, 4)),
            entry("t.bias", (3,)),
            entry("keep.weight", (3, 4)),
            entry("same.weight", (3,), "LayerNorm"),
        ],
        {
            "q.weight": ("Linear", True, None, None, "square"),
            "fc.weight": ("Linear", False, None, None, "'fc'"),
            "x.weight": ("Linear", False, True, None, "[4, 3]"),
            "v.weight": ("Linear", True, None, False, "exact name"),
            "w.weight": ("Conv1d", False, None, False, "exact name"),
            "z.weight": (None, False, None, None, "no evidence"),
            "t.weight": ("Linear", False, True, None, "[4, 3]"),
            "t.bias": ("Linear", False, None, None, "[4, 3]"),  # the weight's layer; kept
            "keep.weight": (None, False, False, None, "[3, 4]"),
            "same.weight": ("LayerNorm", False, None, False, "exact name"),
        },
        target=target,
    )


def test_a_targets_norm_names_decide_renames() -> None:
    target = {
        "n.gamma": (DType.F32, (3,)),
        "i.gamma": (DType.F32, (3,)),
        "b.beta": (DType.F32, (3,)),
        "p.weight": (DType.F32, (3,)),
        "r.gamma": (DType.F32, (3,)),
        "g.gamma": (DType.F32, (3,)),
        "gamma": (DType.F32, (3,)),  # a root-level norm: "gamma", not ".gamma"
    }
    assert_decided(
        [
            entry("n.weight", (3,), "LayerNorm"),
            entry("i.weight", (3,), "InstanceNorm2d"),
            entry("b.bias", (3,), "BatchNorm2d"),
            entry("p.gamma", (3,)),
            entry("r.weight", (3,)),
            entry("g.weight", (3,), "GroupNorm"),
            entry("weight", (3,)),
            entry("bias", (3,)),
        ],
        {
            "n.weight": ("LayerNorm", False, None, True, "'n.gamma'"),
            "i.weight": ("InstanceNorm", False, None, True, "'i.gamma'"),
            "b.bias": ("BatchNorm", False, None, True, "'b.beta'"),
            "p.gamma": ("LayerNorm", False, None, True, "'p.weight'"),
            "r.weight": ("RmsNorm", False, None, True, "module rule #1 '^r=RmsNorm'"),
            "g.weight": ("GroupNorm", False, None, True, "'g.gamma'"),
            "weight": ("LayerNorm", False, None, True, "'gamma'"),
            "bias": (None, False, None, None, "no evidence"),
        },
        target=target,
        rules=parse_module_rules(["^r=RmsNorm"]),
    )


@pytest.mark.parametrize(("source", "other"), [("act.weight", "act.alpha"),
                                               ("act.alpha", "act.weight")])  # fmt: skip
def test_a_target_holding_the_other_prelu_name_decides_a_rename(source: str, other: str) -> None:
    target = {other: (DType.F32, (3,))}
    assert_decided([entry(source, (3,))], {source: ("PRelu", False, None, True, f"{other!r}")},
                   target=target)  # fmt: skip
    # a 2-D tensor of that name is no PRelu parameter
    got = decide_module_types([entry(source, (3, 3))], target={other: (DType.F32, (3, 3))})
    assert got[source].module_type != "PRelu"


def test_a_root_level_prelu_target_names_the_bare_parameter() -> None:
    target = {"alpha": (DType.F32, (1,))}
    assert_decided([entry("weight", (1,))], {"weight": ("PRelu", False, None, True, "'alpha'")},
                   target=target)  # fmt: skip


def test_a_target_agreeing_with_a_class_or_rule_transposes() -> None:
    target = {"fc.weight": (DType.F32, (4, 3)), "o.weight": (DType.F32, (4, 3))}
    assert_decided(
        [entry("fc.weight", (3, 4), "torch.nn.Linear"), entry("o.weight", (3, 4))],
        {
            "fc.weight": ("Linear", False, True, None, "[4, 3]"),
            "o.weight": ("Linear", False, True, None, "module rule #1 '^o=Linear'"),
        },
        target=target,
        rules=parse_module_rules(["^o=Linear"]),
    )


@pytest.mark.parametrize(
    ("source", "rules", "claim", "seen"),
    [
        (entry("n.weight", (3,), "Linear"), (), "class Linear", "'n.gamma'"),
        (entry("n.weight", (3,), "PReLU"), (), "class PReLU", "'n.gamma'"),
        (entry("n.weight", (3,)), ("n=Other",), "module rule #1 'n=Other'", "'n.gamma'"),
        (entry("fc.weight", (3, 4), "Embedding"), (), "class Embedding", "[4, 3]"),
        (entry("fc.weight", (3, 4), "LayerNorm"), (), "class LayerNorm", "[4, 3]"),
        (entry("keep.weight", (3, 4), "Linear"), (), "class Linear", "[3, 4]"),
    ],
)
def test_a_target_that_contradicts_a_class_or_rule_is_refused(
    source: TensorEntry, rules: tuple[str, ...], claim: str, seen: str
) -> None:
    target = {
        "n.gamma": (DType.F32, (3,)),
        "fc.weight": (DType.F32, (4, 3)),
        "keep.weight": (DType.F32, (3, 4)),
    }
    with pytest.raises(SelectionError, match="but target") as info:
        decide_module_types([source], target=target, rules=parse_module_rules(rules))
    assert info.value.message.startswith(f"tensor {source.name!r}: {claim} ")
    assert seen in info.value.message
    assert "target" in str(info.value.hint)

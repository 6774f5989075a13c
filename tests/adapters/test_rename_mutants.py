"""Rust-dialect translation, rule splitting and module-type evidence that mutation testing found
untested (issue 17).

A remap or module rule means what Rust's ``regex`` crate (Burn's ``KeyRemapper``) makes of it,
or it is refused: the expected names below follow the crate's syntax reference (a leading ``]``
in a class is a literal, ``[[:digit:]]`` is ASCII, ``\\x{HHHH}`` is a code point). Refusals are
pinned by their whole message, module-type decisions by their type, evidence text and flag.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ckptctl.adapters.layout import will_transpose
from ckptctl.adapters.modules import Decision, decide_module_types, parse_module_rules
from ckptctl.adapters.pipeline import PipelineOptions, _uncertain, run_pipeline
from ckptctl.dtypes import DType
from ckptctl.errors import SelectionError
from ckptctl.fix import Note, Option
from ckptctl.model import TensorEntry
from tests.strategies import array_entry

# --- character classes (_translate_class) -----------------------------------------------------


# --- \x{HHHH} (_hex_escape) -------------------------------------------------------------------


# --- other escapes, groups and repetitions (translate_pattern) ---------------------------------


# --- split_rule ------------------------------------------------------------------------------


# --- Rename.apply ----------------------------------------------------------------------------


def entry(name: str, shape: tuple[int, ...], module_type: str | None = None) -> TensorEntry:
    made = array_entry(name, np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))
    return replace(made, module_type=module_type) if module_type else made


# --- modules.py: pattern heuristics, target evidence, compatibility -----------------------------


def decide(*entries: TensorEntry, **kw: object) -> dict[str, tuple[object, ...]]:
    out = decide_module_types(entries, **kw)  # type: ignore[arg-type]
    return {
        k: (d.module_type, d.evidence, d.flagged, d.transpose, d.rename) for k, d in out.items()
    }


def test_pattern_needs_the_right_rank() -> None:
    assert decide(
        entry("fc.weight", (3,)),
        entry("c_attn.weight", (2, 3, 4)),
        entry("c_proj.weight", (3,)),
        entry("norm.weight", (3, 4)),
        entry("rms.weight", (2, 3, 4)),
        entry("ln.bias", (3,)),
        entry("gn.weight", (3,)),
        entry("bn1.weight", (3,)),
        entry("embed.weight", (3, 4)),
        entry("q.weight", (4, 4)),
        entry("proj.weight", (3, 4)),
        entry("prelu.weight", (1,)),
    ) == {
        "fc.weight": (None, "no evidence", False, None, None),
        "c_attn.weight": ("Conv1d", "pattern: rank-3 weight", False, None, None),
        "c_proj.weight": (None, "no evidence", False, None, None),
        "norm.weight": (
            None,
            "no evidence for this rank-2 weight; declare its module type",
            True,
            None,
            None,
        ),
        "rms.weight": ("Conv1d", "pattern: rank-3 weight", False, None, None),
        "ln.bias": ("LayerNorm", "pattern 'ln'", False, None, None),
        "gn.weight": ("GroupNorm", "pattern 'gn'", False, None, None),
        "bn1.weight": ("BatchNorm", "pattern 'bn1'", False, None, None),
        "embed.weight": ("Embedding", "pattern 'embed'", False, None, None),
        "q.weight": (
            "Linear",
            "pattern 'q' (square: the shape cannot confirm it)",
            True,
            None,
            None,
        ),
        "proj.weight": ("Linear", "pattern 'proj'", False, None, None),
        "prelu.weight": ("PRelu", "pattern 'prelu'", False, None, None),
    }


def test_pattern_siblings_conv_ranks_and_norm_named_linear() -> None:
    assert decide(
        entry("x.weight", (3,)),
        entry("x.running_mean", (3,)),
        entry("c3.weight", (1, 1, 1, 1, 1)),
        entry("DeConv.weight", (1, 1, 1)),
        entry("norm_proj.weight", (3, 4)),
    ) == {
        "x.weight": ("BatchNorm", "pattern: sibling running_mean/running_var", False, None, None),
        "x.running_mean": (
            "BatchNorm",
            "pattern: sibling running_mean/running_var",
            False,
            None,
            None,
        ),
        "c3.weight": ("Conv3d", "pattern: rank-5 weight", False, None, None),
        "DeConv.weight": ("ConvTranspose1d", "pattern: rank-3 weight", False, None, None),
        # 'norm' is skipped for a rank-2 weight, and the later Linear pattern still applies
        "norm_proj.weight": ("Linear", "pattern 'norm_proj'", False, None, None),
    }


def test_norm_pattern_with_rank_2_weight_falls_through_to_linear() -> None:
    # 'norm' is skipped for a rank-2 weight; the matching bias then makes it a Linear
    assert decide(entry("norm.weight", (3, 4)), entry("norm.bias", (3,))) == {
        "norm.weight": (
            "Linear",
            "pattern: rank-2 weight with a matching rank-1 bias",
            False,
            None,
            None,
        ),
        "norm.bias": (
            "Linear",
            "pattern: rank-2 weight with a matching rank-1 bias",
            False,
            None,
            None,
        ),
    }


def test_target_square_and_unrelated_shapes_are_no_evidence() -> None:
    target = {
        "q.weight": (DType.F32, (4, 4)),
        "fc.weight": (DType.F32, (5, 6)),
        "x.weight": (DType.F32, (4, 3)),
        "v.weight": (DType.F32, (4,)),
        "w.weight": (DType.F32, (3, 4)),
    }
    got = decide(
        entry("q.weight", (4, 4)),
        entry("fc.weight", (3, 4)),
        entry("x.weight", (3, 4)),
        entry("v.weight", (4, 4)),
        entry("w.weight", (3, 4, 1)),
        entry("z.weight", (3,)),
        target=target,
    )
    assert got == {
        "q.weight": (
            "Linear",
            "pattern 'q' (square: the shape cannot confirm it)",
            True,
            None,
            None,
        ),
        "fc.weight": ("Linear", "pattern 'fc'", False, None, None),
        "x.weight": (
            "Linear",
            "target shape [4, 3] is the transpose of [3, 4]",
            False,
            True,
            None,
        ),
        "v.weight": (
            "Linear",
            "pattern 'v'; the target has this exact name (square: the shape cannot confirm it)",
            True,
            None,
            False,
        ),
        "w.weight": (
            "Conv1d",
            "pattern: rank-3 weight; the target has this exact name",
            False,
            None,
            False,
        ),
        "z.weight": (None, "no evidence", False, None, None),
    }


def test_target_norm_renames() -> None:
    target = {
        "n.gamma": (DType.F32, (3,)),
        "i.gamma": (DType.F32, (3,)),
        "b.beta": (DType.F32, (3,)),
        "p.weight": (DType.F32, (3,)),
        "r.gamma": (DType.F32, (3,)),
        "g.gamma": (DType.F32, (3,)),
    }
    got = decide(
        entry("n.weight", (3,), "LayerNorm"),
        entry("i.weight", (3,), "InstanceNorm2d"),
        entry("b.bias", (3,), "BatchNorm2d"),
        entry("p.gamma", (3,)),
        entry("r.weight", (3,)),
        entry("g.weight", (3,), "GroupNorm"),
        target=target,
        rules=parse_module_rules(["^r=RmsNorm"]),
    )
    assert got == {
        "n.weight": ("LayerNorm", "target has 'n.gamma': a norm", False, None, True),
        "i.weight": ("InstanceNorm", "target has 'i.gamma': a norm", False, None, True),
        "b.bias": ("BatchNorm", "target has 'b.beta': a norm", False, None, True),
        "p.gamma": ("LayerNorm", "target has 'p.weight': a norm", False, None, True),
        "r.weight": (
            "RmsNorm",
            "module rule #1 '^r=RmsNorm'; target has 'r.gamma': a norm",
            False,
            None,
            True,
        ),
        "g.weight": ("GroupNorm", "target has 'g.gamma': a norm", False, None, True),
    }


def test_target_linear_agrees_with_class_and_rule() -> None:
    target = {"fc.weight": (DType.F32, (4, 3)), "o.weight": (DType.F32, (4, 3))}
    got = decide(
        entry("fc.weight", (3, 4), "torch.nn.Linear"),
        entry("o.weight", (3, 4)),
        target=target,
        rules=parse_module_rules(["^o=Linear"]),
    )
    assert got == {
        "fc.weight": (
            "Linear",
            "target shape [4, 3] is the transpose of [3, 4]",
            False,
            True,
            None,
        ),
        "o.weight": (
            "Linear",
            "module rule #1 '^o=Linear'; target shape [4, 3] is the transpose of [3, 4]",
            False,
            True,
            None,
        ),
    }


@pytest.mark.parametrize(
    ("source", "rules", "message"),
    [
        (
            entry("n.weight", (3,), "Linear"),
            (),
            "tensor 'n.weight': class Linear from file says Linear, but target has 'n.gamma': "
            "a norm",
        ),
        (
            entry("n.weight", (3,), "PReLU"),
            (),
            "tensor 'n.weight': class PReLU from file says PRelu, but target has 'n.gamma': a norm",
        ),
        (
            entry("n.weight", (3,)),
            ("n=Other",),
            "tensor 'n.weight': module rule #1 'n=Other' says Other, but target has 'n.gamma': "
            "a norm",
        ),
        (
            entry("fc.weight", (3, 4), "Embedding"),
            (),
            "tensor 'fc.weight': class Embedding from file says Embedding, but target shape "
            "[4, 3] is the transpose of [3, 4]",
        ),
        (
            entry("fc.weight", (3, 4), "LayerNorm"),
            (),
            "tensor 'fc.weight': class LayerNorm from file says LayerNorm, but target shape "
            "[4, 3] is the transpose of [3, 4]",
        ),
    ],
)
def test_target_contradicts_class_or_rule(
    source: TensorEntry, rules: tuple[str, ...], message: str
) -> None:
    target = {"n.gamma": (DType.F32, (3,)), "fc.weight": (DType.F32, (4, 3))}
    with pytest.raises(SelectionError) as info:
        decide_module_types([source], target=target, rules=parse_module_rules(rules))
    assert info.value.message == message
    assert info.value.hint == "fix or remove the rule, or check that the target is the right model"


# --- pipeline._uncertain ---------------------------------------------------------------------


def test_uncertain_square_untyped_and_norm_warnings() -> None:
    declare = (Option("module_types", takes_value=True),)
    entries = [
        entry("skip.weight", (3, 4)),  # no decision: skipped, the others still counted
        entry("q.weight", (4, 4)),
        entry("k.weight", (4, 4)),
        entry("odd.weight", (3, 4)),
        entry("big.weight", (3, 4)),
        entry("fc.weight", (3, 4)),
        entry("odd.bias", (3, 4)),
        entry("n.weight", (3,)),
        entry("m.g.weight", (3,)),
        entry("n.bias", (3,)),
        entry("t.weight", (3, 4, 5)),
    ]
    decisions = {
        "q.weight": Decision("q.weight", "Linear", "pattern 'q'", flagged=True),
        "k.weight": Decision("k.weight", "Linear", "pattern 'k'", flagged=True),
        "odd.weight": Decision("odd.weight", None, "no evidence", flagged=True),
        "big.weight": Decision("big.weight", None, "no evidence"),
        "fc.weight": Decision("fc.weight", "Linear", "pattern 'fc'"),
        "odd.bias": Decision("odd.bias", None, "no evidence"),
        "n.weight": Decision("n.weight", None, "no evidence"),
        "m.g.weight": Decision("m.g.weight", None, "no evidence"),
        "n.bias": Decision("n.bias", None, "no evidence"),
        "t.weight": Decision("t.weight", None, "no evidence"),
    }
    assert _uncertain(entries, decisions) == [
        Note("2 square weights typed by name only (q, k): confirm with {fix0}", declare),
        Note(
            "2 rank-2 weights with no module type left as is (odd, big): declare with {fix0}",
            declare,
        ),
        Note(
            "2 1-D weights with no module type kept as weight/bias, not renamed gamma/beta "
            "(n, g): declare with {fix0}",
            declare,
        ),
    ]
    assert _uncertain(entries[6:8], decisions) == [
        Note(
            "1 1-D weight with no module type kept as weight/bias, not renamed gamma/beta (n): "
            "declare with {fix0}",
            declare,
        )
    ]
    assert _uncertain(entries[3:4], decisions) == [
        Note("1 rank-2 weight with no module type left as is (odd): declare with {fix0}", declare)
    ]
    assert _uncertain(entries, {}) == []
    bare = entry("weight", (3,))
    assert _uncertain([bare], {"weight": Decision("weight", None, "no evidence")}) == [
        Note(
            "1 1-D weight with no module type kept as weight/bias, not renamed gamma/beta "
            "(weight): declare with {fix0}",
            declare,
        )
    ]


def test_pipeline_square_weights_by_name() -> None:
    declare = (Option("module_types", takes_value=True),)
    entries = [entry("q.weight", (4, 4)), entry("k.weight", (4, 4)), entry("fc.weight", (3, 4))]
    _, warnings = run_pipeline(entries, PipelineOptions(adapters=("burn-to-pytorch",)))
    assert warnings == [
        Note("2 square weights typed by name only (q, k): confirm with {fix0}", declare)
    ]


# --- the m flag's scope, '|' in classes, negated POSIX classes, Rust's empty-match rule ----------


# --- reworked translator (session 5) -----------------------------------------------------------


# --- the x flag and Rust's Unicode classes (session 5) --------------------------------------------


# --- check_replacement: the whole message and hint of each refusal -------------------------


# --- PRelu: Burn's `alpha`, PyTorch's `weight`, by pattern and by target -----------------------


def test_a_lone_one_d_alpha_is_a_prelu_by_pattern() -> None:
    assert decide(entry("act.alpha", (1,)), entry("act2.alpha", (4,))) == {
        "act.alpha": ("PRelu", "pattern: a lone 1-D alpha (Burn's PRelu)", False, None, None),
        "act2.alpha": ("PRelu", "pattern: a lone 1-D alpha (Burn's PRelu)", False, None, None),
    }
    # not alone, or not 1-D: no PRelu
    alone_2d = decide(entry("a.alpha", (2, 2)))["a.alpha"]
    with_beta = decide(entry("b.alpha", (2,)), entry("b.beta", (2,)))["b.alpha"]
    assert alone_2d[0] != "PRelu"
    assert with_beta[0] != "PRelu"


@pytest.mark.parametrize(("source", "other"), [("act.weight", "act.alpha"),
                                               ("act.alpha", "act.weight")])  # fmt: skip
def test_a_target_holding_the_other_prelu_name_decides_a_rename(source: str, other: str) -> None:
    target = {other: (DType.F32, (3,))}
    assert decide(entry(source, (3,)), target=target) == {
        source: ("PRelu", f"target has {other!r}: a PRelu", False, None, True)
    }
    # a 2-D tensor of that name is no PRelu parameter
    assert decide(entry(source, (3, 3)), target={other: (DType.F32, (3, 3))})[source][0] != (
        "PRelu"
    )


def test_a_root_level_prelu_target_names_the_bare_parameter() -> None:
    target = {"alpha": (DType.F32, (1,))}
    assert decide(entry("weight", (1,)), target=target)["weight"][:2] == (
        "PRelu",
        "target has 'alpha': a PRelu",
    )


# --- layout.will_transpose ----------------------------------------------------------------------


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
    assert will_transpose(entry(name, shape), decision) is want

"""Tensor Loading Summary: classification, Burn's layout, "Did you mean", suggested fixes."""

from __future__ import annotations

import pytest

from ckptctl.adapters.rename import parse_rules, remap_name
from ckptctl.dtypes import DType
from ckptctl.fix import Option
from ckptctl.ops.matching import did_you_mean, jaro, strip_enum_variant, suggest_fixes
from ckptctl.ops.summary import summarize
from ckptctl.report.json import to_json
from ckptctl.report.render_summary import render_summary

F32 = DType.F32

# Burn's rendering, copied verbatim from the research notes on burn-store (their Example A)
EXAMPLE_A = (
    "┌─ Tensor Loading Summary ─────────────────────────\n"
    "│\n"
    "│ ✓ Successfully applied: 4 tensors\n"
    "│ ⊘ Skipped (filtered):  0 tensors\n"
    "│ ✗ Missing in source:    4 tensors\n"
    "│ ? Unused in target:     7 tensors\n"
    "│ ! Errors:               2 errors\n"
    "│\n"
    "├─ Missing Tensors (requested by model but not found in source)\n"
    "│\n"
    "│  First 10 missing tensors:\n"
    "│    • encoder.layers.0.bias\n"
    "│        Did you mean: 'encoder.layer.0.bias'?\n"
    "│    • encoder.layers.0.weight\n"
    "│        Did you mean: 'encoder.layer.0.weight'?\n"
    "│    • encoder.layers.1.bias\n"
    "│        Did you mean: 'encoder.layer.1.bias'?\n"
    "│    • encoder.layers.1.weight\n"
    "│        Did you mean: 'encoder.layer.1.weight'?\n"
    "│\n"
    "├─ Unused Tensors (in source but not used by model)\n"
    "│\n"
    "│  First 10 unused tensors:\n"
    "│    • encoder.layer.0.bias\n"
    "│    • encoder.layer.0.weight\n"
    "│    • encoder.layer.1.bias\n"
    "│    • encoder.layer.1.weight\n"
    "│    • norm.bias\n"
    "│    • norm.num_batches_tracked\n"
    "│    • norm.weight\n"
    "│\n"
    "├─ Errors\n"
    "│\n"
    "│  ⚠️  Shape mismatch for 'head.weight': expected Shape { dims: [8, 5] }, found Shape { dims: [8, 3] }\n"  # noqa: E501
    "│  ⚠️  Shape mismatch for 'head.bias': expected Shape { dims: [5] }, found Shape { dims: [3] }\n"  # noqa: E501
    "│\n"
    "└───────────────────────────────────────────────────"
)

# Burn's rendering, copied verbatim from the research notes on burn-store (their Example B)
EXAMPLE_B = (
    "┌─ Tensor Loading Summary ─────────────────────────\n"
    "│\n"
    "│ ✓ Successfully applied: 2 tensors\n"
    "│ ⊘ Skipped (filtered):  0 tensors\n"
    "│ ✗ Missing in source:    2 tensors\n"
    "│ ? Unused in target:     2 tensors\n"
    "│ ! Errors:               0 errors\n"
    "│\n"
    "├─ Missing Tensors (requested by model but not found in source)\n"
    "│\n"
    "│  ⚠️  2 paths contain enum variants (detected from container stack)\n"
    "│      Burn includes enum variant names in paths, but PyTorch doesn't.\n"
    "│      Example: Burn has 'field.BaseConv.weight', PyTorch has 'field.weight'\n"
    "│\n"
    "│      💡 Solution 1: Enable skip_enum_variants flag (simplest):\n"
    "│\n"
    '│         let mut store = PytorchStore::from_file("model.pth")\n'
    "│             .skip_enum_variants(true);  // ← Add this\n"
    "│\n"
    "│      💡 Solution 2: Remap enum keys in source (most precise):\n"
    "│\n"
    '│         let mut store = SafetensorsStore::from_file("model.safetensors")\n'
    '│             .with_key_remapping(r"field\\.(\\w+)", "field.BaseConv.$1");\n'
    "│\n"
    "│  First 10 missing tensors:\n"
    "│    • feature.BaseConv.bias\n"
    "│        Did you mean: 'feature.bias'?\n"
    "│    • feature.BaseConv.weight\n"
    "│        Did you mean: 'feature.weight'?\n"
    "│\n"
    "├─ Unused Tensors (in source but not used by model)\n"
    "│\n"
    "│  First 10 unused tensors:\n"
    "│    • feature.bias\n"
    "│    • feature.weight\n"
    "│\n"
    "└───────────────────────────────────────────────────"
)


def specs(**shapes: tuple[int, ...]) -> dict[str, tuple[DType, tuple[int, ...]]]:
    return {name.replace("__", "."): (F32, shape) for name, shape in shapes.items()}


def spec_map(items: list[tuple[str, tuple[int, ...]]]) -> dict[str, tuple[DType, tuple[int, ...]]]:
    return {name: (F32, shape) for name, shape in items}


# --- Jaro: reference values (docs/formats/burn-store.md#did-you-mean) ---------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("abc", "acbd", 0.8055555555555555),
        ("dixon", "dicksonx", 0.76667),
        ("dwayne", "duane", 0.82222),
        ("a", "ab", 0.83333),
    ],
)
def test_jaro_reference_values(a: str, b: str, expected: float) -> None:
    assert jaro(a, b) == pytest.approx(expected, abs=5e-6)


def test_jaro_exact_first_value() -> None:
    assert jaro("abc", "acbd") == 0.8055555555555555


def test_jaro_out_of_order_by_hand() -> None:
    # "ba" vs "ab": w = 0; i=0 'b' scans [0,0] 'a' no -> no match; i=1 'a' scans [1,1] 'b' no.
    assert jaro("ba", "ab") == 0.0
    # "abcd" vs "badc": w = 1.
    # i0 'a': j0 'b', j1 'a' -> m1 prev 1; i1 'b': j0 'b' (0 < 1: t1) prev 0;
    # i2 'c': j1 used, j2 'd', j3 'c' -> m3 prev 3; i3 'd': j2 'd' (2 < 3: t2).
    # m = 4, t = 2: (1 + 1 + 2/4) / 3 = 0.8333...; the textbook Jaro gives 0.9167 (t = 1).
    assert jaro("abcd", "badc") == (1 + 1 + 0.5) / 3
    # edge cases from the port
    assert jaro("", "") == 1.0
    assert jaro("", "a") == 0.0
    assert jaro("x", "x") == 1.0
    assert jaro("x", "y") == 0.0


def test_example_a_scores() -> None:
    assert jaro("encoder.layers.0.bias", "encoder.layer.0.bias") == pytest.approx(0.9675, 1e-4)
    assert jaro("encoder.layers.0.bias", "encoder.layer.1.bias") == pytest.approx(0.934, 1e-3)


def test_enum_variant_strip() -> None:
    assert strip_enum_variant("feature.BaseConv.weight") == "feature.weight"
    assert strip_enum_variant("BaseConv.weight") is None  # first segment is never stripped
    assert strip_enum_variant("feature.FC.weight") is None  # no lowercase after the first char
    assert strip_enum_variant("a.B.c") is None  # one byte long
    assert strip_enum_variant("a.Xy.Zw.c") == "a.Zw.c"  # only the first one


def test_did_you_mean_threshold_and_ties() -> None:
    assert did_you_mean("do_not_exist_in_pt.bias", ["conv1.bias", "conv1.weight"]) is None
    # equal scores: the first in (alphabetical) unused order wins
    assert did_you_mean("ab.x", ["ab.y", "ab.z"]) == "ab.y"
    assert did_you_mean("anything", []) is None


# --- Burn's examples, byte for byte ---------------------------------------------------------


def example_a():
    source = spec_map(
        [
            ("encoder.layer.0.weight", (8, 8)),
            ("encoder.layer.0.bias", (8,)),
            ("encoder.layer.1.weight", (8, 8)),
            ("encoder.layer.1.bias", (8,)),
            ("norm.weight", (8,)),
            ("norm.bias", (8,)),
            ("norm.running_mean", (8,)),
            ("norm.running_var", (8,)),
            ("norm.num_batches_tracked", ()),
            ("head.weight", (8, 3)),  # already transposed from [3, 8] by the adapter
            ("head.bias", (3,)),
        ]
    )
    target = spec_map(
        [
            ("encoder.layers.0.weight", (8, 8)),
            ("encoder.layers.0.bias", (8,)),
            ("encoder.layers.1.weight", (8, 8)),
            ("encoder.layers.1.bias", (8,)),
            ("norm.gamma", (8,)),
            ("norm.beta", (8,)),
            ("norm.running_mean", (8,)),
            ("norm.running_var", (8,)),
            ("head.weight", (8, 5)),
            ("head.bias", (5,)),
        ]
    )
    alt = {"norm.gamma": "norm.weight", "norm.beta": "norm.bias"}
    return source, target, alt.get


def test_example_a_burn_compat_golden() -> None:
    source, target, alt = example_a()
    summary = summarize(source, target, alternative=alt, burn_compat=True, with_fixes=False)
    assert summary.applied == ("norm.gamma", "norm.beta", "norm.running_mean", "norm.running_var")
    assert render_summary(summary) == EXAMPLE_A
    assert not render_summary(summary).endswith("\n")


def test_example_a_default_counts_alternative_hits_as_used() -> None:
    source, target, alt = example_a()
    summary = summarize(source, target, alternative=alt)
    assert "norm.weight" not in summary.unused
    assert "norm.bias" not in summary.unused
    assert "norm.num_batches_tracked" in summary.unused
    assert not summary.ok
    # the consistent layer -> layers rename is found and verified
    assert Option("remap", r"\.layer\.=.layers.") in summary.fixes


def test_example_b_enum_golden() -> None:
    source = spec_map(
        [
            ("feature.weight", (4, 4)),
            ("feature.bias", (4,)),
            ("classifier.weight", (4, 2)),
            ("classifier.bias", (2,)),
        ]
    )
    target = spec_map(
        [
            ("feature.BaseConv.weight", (4, 4)),
            ("feature.BaseConv.bias", (4,)),
            ("classifier.weight", (4, 2)),
            ("classifier.bias", (2,)),
        ]
    )
    stack = "Struct:Model.Enum:ConvBlock.Struct:Linear"
    containers = {"feature.BaseConv.weight": stack, "feature.BaseConv.bias": stack}
    summary = summarize(source, target, containers=containers, with_fixes=False)
    assert render_summary(summary) == EXAMPLE_B
    # without container stacks the CamelCase heuristic triggers the same block
    assert render_summary(summarize(source, target, with_fixes=False)) == EXAMPLE_B


def test_example_c_no_suggestion() -> None:
    source = spec_map([("conv1.weight", (2, 1, 3, 3)), ("conv1.bias", (2,))])
    target = spec_map(
        [("do_not_exist_in_pt.weight", (2, 1, 3, 3)), ("do_not_exist_in_pt.bias", (2,))]
    )
    summary = summarize(source, target, burn_compat=True)  # Burn's own ranking: Jaro < 0.7
    text = render_summary(summary)
    assert "Did you mean" not in text
    assert "│ ✗ Missing in source:    2 tensors" in text
    # ckptctl ranks the verified remap rule (conv1 -> do_not_exist_in_pt, shapes fit) first
    ours = summarize(source, target)
    assert [m.suggestion for m in ours.missing] == ["conv1.bias", "conv1.weight"]
    assert [m.name for m in summary.missing] == [
        "do_not_exist_in_pt.bias",
        "do_not_exist_in_pt.weight",
    ]
    assert summary.unused == ("conv1.bias", "conv1.weight")


def test_did_you_mean_ranks_rules_then_suffix_then_jaro() -> None:
    # issue 13: 'module.bn.bias' lost to 'norm.bias' and 'o_proj' to 'k_proj' on Jaro ties
    source = spec_map(
        [("module.bn.bias", (4,)), ("norm.bias", (4,)), ("attn.out_proj.weight", (4, 4)),
         ("attn.k_proj.weight", (4, 4))]
    )  # fmt: skip
    target = spec_map(
        [("bn.bias", (4,)), ("attn.o_proj.weight", (4, 4)), ("attn.k.weight", (4, 4))]
    )
    ours = {m.name: m.suggestion for m in summarize(source, target).missing}
    assert ours["bn.bias"] == "module.bn.bias"  # exact suffix before Jaro
    assert ours["attn.o_proj.weight"] == "attn.out_proj.weight"  # the verified rule


def test_layout_details() -> None:
    summary = summarize({}, {})
    lines = render_summary(summary).split("\n")
    assert len(lines[0]) == 51
    assert lines[-1] == "└" + "─" * 51
    assert lines[3] == "│ ⊘ Skipped (filtered):  0 tensors"
    assert lines[2].index("0") == 26
    assert lines[3].index("0") == 25


def test_more_than_ten_and_suggestions_only_for_first_ten() -> None:
    target = spec_map([(f"t{i:02d}.weight", (1,)) for i in range(12)])
    source = spec_map([(f"s{i:02d}.weight", (1,)) for i in range(13)])
    summary = summarize(source, target)
    text = render_summary(summary)
    assert "│    ... and 2 more" in text
    assert "│    ... and 3 more" in text
    assert summary.missing[10].suggestion is None
    assert summary.missing[0].suggestion is not None


def test_filter_skipped_and_missing() -> None:
    source = spec_map([("a", (1,)), ("b", (1,))])
    target = spec_map([("b", (1,)), ("a", (1,)), ("c", (1,))])
    summary = summarize(source, target, include=lambda name: name != "b" and name != "c")
    assert summary.applied == ("a",)
    assert summary.skipped == ("b",)
    assert [m.name for m in summary.missing] == ["c"]  # filtered and absent: still missing
    assert summary.unused == ()


def test_errored_names_neither_missing_nor_unused_and_dtype_note() -> None:
    source = {"fc.weight": (DType.F16, (2, 3)), "x": (DType.F16, (2,))}
    target = {"fc.weight": (F32, (3, 2)), "x": (F32, (2,))}
    summary = summarize(source, target)
    assert [e.name for e in summary.errors] == ["fc.weight"]
    assert summary.missing == ()
    assert summary.unused == ()
    assert [(n.name, n.found, n.expected) for n in summary.dtype_notes] == [("x", DType.F16, F32)]
    assert Option("adapters", "pytorch-to-burn") in summary.fixes
    text = render_summary(summary)
    warning = "│  \u26a0\ufe0f  "
    assert f"{warning}Shape mismatch for 'fc.weight': expected Shape {{ dims: [3, 2] }}" in text
    assert "source F16, target F32" in text
    assert "source F16" not in render_summary(summary, extras=False)


def test_to_dict() -> None:
    source, target, alt = example_a()
    data = to_json(summarize(source, target, alternative=alt, burn_compat=True))
    assert data["counts"] == {"applied": 4, "skipped": 0, "missing": 4, "unused": 7, "errors": 2,
                              "ambiguous": 0}  # fmt: skip
    assert data["missing"][0] == {
        "name": "encoder.layers.0.bias",
        "container": None,
        "suggestion": "encoder.layer.0.bias",
    }
    assert data["errors"][0]["expected"] == [8, 5]
    assert data["ok"] is False


def test_names_are_sanitized() -> None:
    summary = summarize(spec_map([("evil\x1b[2J", (1,))]), {})
    text = render_summary(summary)
    assert "\x1b" not in text
    assert "evil\\x1b[2J" in text


# --- the acceptance case (issue #4) ---------------------------------------------------------


def test_acceptance_fc_to_fc1() -> None:
    source = spec_map([("fc.weight", (4, 3)), ("fc.bias", (3,)), ("head.weight", (3, 2))])
    target = spec_map([("fc1.weight", (4, 3)), ("fc1.bias", (3,)), ("head.weight", (3, 2))])
    summary = summarize(source, target)
    assert [m.name for m in summary.missing] == ["fc1.bias", "fc1.weight"]
    assert [m.suggestion for m in summary.missing] == ["fc.bias", "fc.weight"]
    text = render_summary(summary)
    assert "Did you mean: 'fc.bias'?" in text
    assert "Did you mean: 'fc.weight'?" in text
    assert summary.fixes == (Option("remap", "^fc\\.=fc1."),)
    # apply the fix: every tensor applies
    rule_text = summary.fixes[0].value
    assert rule_text is not None
    rules = parse_rules([rule_text])
    fixed = {remap_name(name, rules)[0]: spec for name, spec in source.items()}
    after = summarize(fixed, target)
    assert len(after.applied) == 3
    assert after.ok
    assert after.unused == ()
    assert after.fixes == ()


@pytest.mark.parametrize("prefix", ["module.", "_orig_mod.", "model."])
def test_suggest_prefix_removed(prefix: str) -> None:
    source = {f"{prefix}{n}": (2, 2) for n in ("a.weight", "b.weight")}
    target = {"a.weight": (2, 2), "b.weight": (2, 2)}
    fixes = suggest_fixes(list(target), list(source), source, target)
    escaped = prefix[:-1].replace(".", "\\.")
    assert fixes == [Option("remap", f"^{escaped}\\.=")]


def test_suggest_prefix_added_and_norm_adapter() -> None:
    source = {"norm.weight": (4,), "norm.bias": (4,), "fc.weight": (4, 4)}
    target = {"model.norm.gamma": (4,), "model.norm.beta": (4,), "model.fc.weight": (4, 4)}
    fixes = suggest_fixes(list(target), list(source), source, target)
    assert fixes == [Option("remap", "^=model."), Option("adapters", "pytorch-to-burn")]


def test_suggest_burn_to_pytorch() -> None:
    source = {"ln.gamma": (4,), "ln.beta": (4,)}
    target = {"ln.weight": (4,), "ln.bias": (4,)}
    assert suggest_fixes(list(target), list(source), source, target) == [
        Option("adapters", "burn-to-pytorch")
    ]


def test_suggest_nothing_when_nothing_fits() -> None:
    source = {"a": (1,)}
    target = {"zzzz": (1,)}
    assert suggest_fixes(["zzzz"], ["a"], source, target) == [Option("remap", "^a$=zzzz")]
    assert suggest_fixes([], [], {"x": (2,)}, {"x": (2,)}) == []

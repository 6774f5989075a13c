"""Key remapping in Rust regex dialect (burn-store spec §3)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckptctl.adapters import chain, plan
from ckptctl.adapters.rename import (
    Rename,
    compile_pattern,
    parse_rules,
    remap_name,
    replace_all,
    split_rule,
    translate_pattern,
)
from ckptctl.dtypes import DType
from ckptctl.errors import SelectionError
from tests.strategies import make_entry

LLAMA = [r"^model\.=", r"\.self_attn\.=.attn.", r"_layernorm\.weight$=_norm.gamma"]


def rename(rules: list[str], name: str) -> str:
    return remap_name(name, parse_rules(rules))[0]


def test_upstream_chained_example() -> None:
    rules = [
        r"(.+)\.block\.0\.(.+)=$1.conv.$2",
        r"(.+)\.block\.1\.(.+)=$1.bn.$2",
        r"layer\.([0-9])\.(.+)=layer.blocks.$1.$2",
    ]
    assert rename(rules, "layer.0.block.0.weight") == "layer.blocks.0.conv.weight"


def test_llama_rules() -> None:
    assert rename(LLAMA, "model.layers.0.self_attn.k_proj.weight") == "layers.0.attn.k_proj.weight"
    assert rename(LLAMA, "model.layers.0.input_layernorm.weight") == "layers.0.input_norm.gamma"
    fired = remap_name("model.layers.0.input_layernorm.weight", parse_rules(LLAMA))[1]
    assert [r.number for r in fired] == [1, 3]


@pytest.mark.parametrize(
    ("rule", "name", "expected"),
    [
        (r"(a)(b)=${1}_x", "ab", "a_x"),
        (r"a=$$", "a", "$"),
        (r"(a)|(b)=[$2]", "a", "[]"),  # group that did not participate
        (r"(?<n>a)=${n}${n}", "a", "aa"),  # Rust named-group syntax
        (r"(?P<n>a)=$n", "a", "a"),
        (r"a=${1", "a", "${1"),  # no closing brace: literal
        (r"a=$", "a", "$"),
        (r"a=b", "aaa", "bbb"),  # replace-all
        (r"a=x=y", "a", "x=y"),  # '=' in the replacement
        (r"a\=b=c", "a=b", "c"),  # escaped '=' in the pattern
        (r"[=]=eq", "=", "eq"),  # '=' inside a class
        (r"x$=Y", "x\n", "x\n"),  # Rust '$' is the very end, not before a final newline
        (r"[[:digit:]]+=N", "a12b", "aNb"),
        (r"\x{41}=a", "A", "a"),
    ],
)
def test_replacement_and_dialect(rule: str, name: str, expected: str) -> None:
    assert rename([rule], name) == expected


@pytest.mark.parametrize(
    ("rule", "message", "hint"),
    [
        # Burn would expand these to nothing or write them literally: refused, with the fix
        (r"(a)(b)=$1_x", "names the group '1_x'", "write ${1}_x for group 1 followed by '_x'"),
        (r"(?<n>a)=$n_", "names the group 'n_'", "write ${n}_ for group n"),
        (r"(a)=$9", "names the group '9', which the pattern does not have", "groups are $1"),
        (r"(a)(b)=${3}", "names the group '3'", "groups are $1 to $2"),
        (r"a=$x", "names the group 'x'", "the pattern has no groups"),
        (r"^layers\.(\d)=L\1", "writes a group as '\\1'", "not \\1: 'L${1}'"),
        (r"(a)=\g<1>", "writes a group as '\\g<1>'", "'${1}'"),
        (r"^fc\.=fc1\.", "the replacement has a backslash", "write '.' for a dot"),
    ],
)
def test_replacements_that_cannot_mean_it_are_refused(rule: str, message: str, hint: str) -> None:
    with pytest.raises(SelectionError) as info:
        parse_rules(["a=b", rule])
    assert info.value.message.startswith("rule #2 ")
    assert message in info.value.message
    assert hint in str(info.value.hint)


def test_the_engine_still_expands_like_rust() -> None:
    """Refusing happens in RemapRule; the engine keeps Rust's expansion (the parity tests)."""
    regex = compile_pattern("(a)(b)")
    assert replace_all(regex, "ab", "$1_x") == ""
    assert replace_all(regex, "ab", "$9") == ""
    assert replace_all(regex, "ab", r"\1") == r"\1"


def test_empty_matches_skip_like_rust() -> None:
    assert replace_all(compile_pattern("x*"), "abxd", "-") == "-a-b-d-"
    assert re.sub("x*", "-", "abxd") == "-a-b--d-"  # Python differs: why we emulate


@pytest.mark.parametrize(
    "pattern",
    [
        r"a(?=b)",
        r"a(?!b)",
        r"(?<=a)b",
        r"(?<!a)b",
        r"(a)\1",
        r"(?P<n>a)(?P=n)",
        r"(?>a)",
        r"a*+",
        r"a++",
        r"\p{L}",
        r"a\Z",
        r"a(?i)b",
        r"(?U)a*",
        r"[a-z&&[^aeiou]]",
        r"[[a]]",
        r"a{b",
        r"(?#comment)",
        "(",
    ],
)
def test_rejected_patterns_name_the_rule(pattern: str) -> None:
    with pytest.raises(SelectionError, match="rule #2"):
        parse_rules(["a=b", f"{pattern}=x"])


def test_split_rule_and_errors() -> None:
    assert split_rule(r"^fc\.=fc1.") == (r"^fc\.", "fc1.")
    assert split_rule(r"[]=]x=y") == ("[]=]x", "y")
    with pytest.raises(SelectionError, match="no '='"):
        parse_rules(["abc"])
    with pytest.raises(SelectionError, match="empty pattern"):
        parse_rules(["=x"])


def test_translation() -> None:
    assert translate_pattern(r"(?<n>a)$") == r"(?P<n>a)\Z"
    assert translate_pattern(r"(?m)a$") == r"(?m)a$"
    assert translate_pattern(r"a\z") == r"a\Z"


def test_rename_adapter_actions_and_collision() -> None:
    a = make_entry("model.fc.weight", DType.F32, (1,), b"\0" * 4)
    b = make_entry("fc.weight", DType.F32, (1,), b"\0" * 4)
    adapter = Rename.parse([r"^model\.="])
    out, actions = adapter.apply(a)
    assert out is not None
    assert out.name == "fc.weight"
    assert out.data is a.data
    assert actions[0].kind == "rename"
    assert "rule #1" in actions[0].reason
    assert adapter.apply(b) == (b, ())
    with pytest.raises(SelectionError, match=re.escape("'model.fc.weight' and 'fc.weight'")):
        plan([a, b], chain(adapter))


segments = st.text(alphabet="abcxyz_0123", min_size=1, max_size=4)
names = st.lists(segments, min_size=1, max_size=4).map(".".join)
rule_texts = st.tuples(st.sampled_from(["a", "b", "x", r"\.", "0", "^a", "c$"]), segments)


@given(name=names, rules=st.lists(rule_texts, max_size=4))
def test_rules_apply_in_order(name: str, rules: list[tuple[str, str]]) -> None:
    parsed = parse_rules([f"{p}={r}" for p, r in rules])
    expected = name
    for pattern, repl in rules:  # independent model: Python re.sub, no '$' in replacements
        expected = re.sub(translate_pattern(pattern), repl.replace("\\", "\\\\"), expected)
    assert remap_name(name, parsed)[0] == expected

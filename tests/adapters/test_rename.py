"""Key remapping in Rust regex dialect (docs/formats/burn-store.md#key-remapping)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckptctl.adapters import ActionKind, chain, plan
from ckptctl.adapters._rust_classes import DIGIT, SPACE, WORD
from ckptctl.adapters.rename import (
    RemapRule,
    Rename,
    check_replacement,
    compile_pattern,
    expand_replacement,
    parse_rules,
    remap_name,
    replace_all,
    split_rule,
    translate_pattern,
)
from ckptctl.dtypes import DType
from ckptctl.errors import ExitCode, SelectionError, quote
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
        (r"(a)=$9", "names the group '9'", "groups are $1"),
        (r"(a)(b)=${3}", "names the group '3'", "groups are $1 to $2"),
        (r"a=$x", "names the group 'x'", "no groups"),
        (r"^layers\.(\d)=L\1", "writes a group as '\\1'", "not \\1: 'L${1}'"),
        (r"(a)=\g<1>", "writes a group as '\\g<1>'", "'${1}'"),
        (r"^fc\.=fc1\.", "backslash", "'.'"),
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


# --- the Rust dialect: character classes --------------------------------------------------------
# A rule means what Rust's ``regex`` crate (Burn's KeyRemapper) makes of it, or it is refused:
# expected names follow the crate's syntax reference (a leading ']' in a class is a literal,
# [[:digit:]] is ASCII, \x{HHHH} is a code point); fixtures/golden/rust_regex.json is Rust's own
# word on many of them (test_rust_regex_parity.py).

W = f"[{WORD}]"
BOUNDARY = f"(?:(?<={W})(?!{W})|(?<!{W})(?={W}))"
NOT_BOUNDARY = f"(?:(?<={W})(?={W})|(?<!{W})(?!{W}))"


def renamed(rule: str, *names: str) -> list[str]:
    rules = parse_rules([rule])
    return [remap_name(name, rules)[0] for name in names]


def refused(pattern: str, keyword: str) -> SelectionError:
    """The refusal of ``pattern`` in rule #3: it names the rule and the pattern as typed."""
    with pytest.raises(SelectionError, match=keyword) as info:
        translate_pattern(pattern, "rule #3")
    assert info.value.message.startswith(f"rule #3: pattern {quote(pattern)} ")
    assert info.value.exit_code == ExitCode.USAGE
    return info.value


@pytest.mark.parametrize(
    ("pattern", "translated"),
    [
        ("[^]a]", "[^\\]a]"),
        ("[]a]", "[\\]a]"),
        ("[^a]", "[^a]"),
        ("[\\]x]", "[\\]x]"),
        ("[a\\-z]", "[a\\-z]"),
        ("[\\x{41}-\\x{43}]", "[\\U00000041-\\U00000043]"),
        ("[\\x{41}b]", "[\\U00000041b]"),
        ("[[:digit:]]", "[0-9]"),
        ("[[:alpha:]_]", "[A-Za-z_]"),
        ("[^[:space:]x]", "[^\\t\\n\\v\\f\\r x]"),
        ("[a-]b", "[a-]b"),
        ("[&~]", "[&~]"),
        ("[\\d{}]", f"[{DIGIT}{{}}]"),
        ("[\\x41]", "[\\x41]"),
        ("[a||b]", "[a\\|\\|b]"),
        ("[[:^digit:]]", "[^0-9]"),
        ("[^[:^digit:]]x", "[0-9]x"),
        # a ']' earlier in the pattern (a literal) does not close the class after it
        ("][[:^digit:]]", "][^0-9]"),
        ("[\\w.\\d\\s]", f"[{WORD}.{DIGIT}{SPACE}]"),
        ("[\\W]", f"[^{WORD}]"),
        ("[^\\S]", f"[{SPACE}]"),
    ],
)
def test_class_translation(pattern: str, translated: str) -> None:
    assert translate_pattern(pattern) == translated


@pytest.mark.parametrize(
    ("rule", "names", "expected"),
    [
        # a ']' right after '[' or '[^' is a literal in Rust
        ("[^]a]=_", ("]a.b", "a]", "b]a"), ["]a__", "a]", "_]a"]),
        ("[]a]=_", ("]ab",), ["__b"]),
        ("[]a]x=_", ("]xax",), ["__"]),
        ("[]]=_", ("a]",), ["a_"]),
        ("[^]]=_", ("a]",), ["_]"]),
        ("[\\]x]=_", ("a]x",), ["a__"]),
        ("[\\]]=_", ("a]",), ["a_"]),
        ("[a\\[]=_", ("[a",), ["__"]),
        ("[a\\-z]=_", ("a-bz",), ["__b_"]),
        # a class ends at its first unescaped ']': the rest is literal
        ("[a]=_", ("ab",), ["_b"]),
        ("[a]b]=_", ("ab]", "ab"), ["_", "ab"]),
        ("[[:alpha:]]]=_", ("a]b",), ["_b"]),
        # '[:alpha:]' outside a class is the class of ':ahlp'
        ("[:alpha:]]=_", ("a]", "b]"), ["_", "b]"]),
        ("[\\x{41}-\\x{43}]=_", ("ABCD",), ["___D"]),
        ("[[:digit:]]+=N", ("l12.w3",), ["lN.wN"]),
        ("[[:alpha:]_]=.", ("a_1Z",), ["..1."]),
        ("[[:^alpha:]]=_", ("a1",), ["a_"]),
        ("[^[:space:]x]=_", ("ax b",), ["_x _"]),
        ("[[:upper:][:digit:]]=_", ("aB3c",), ["a__c"]),
        ("[^]=]+=_", ("a=]b", "]=]"), ["_=]_", "]=]"]),
        ("][[:^digit:]]=_", ("]a1",), ["_1"]),  # Rust: ']' then a non-digit
    ],
)
def test_class_matching(rule: str, names: tuple[str, ...], expected: list[str]) -> None:
    assert renamed(rule, *names) == expected


@pytest.mark.parametrize(
    "pattern",
    ["[ab", "[", "[a", "[^", "[^]", "[]", "[a\\", "[a\\]", "x[[:digit:]", "[[:alpha]", "[[:]",
     "[a[b]", "[a&&b", "[[:^digit:]", "[[:nope:]", "[[:alpha:][]]", "[[]]"],
)  # fmt: skip
def test_unterminated_class(pattern: str) -> None:
    error = refused(pattern, "unterminated")
    assert error.hint is None


# --- the Rust dialect: \x{HHHH} -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "translated"),
    [
        ("\\x{41}", "\\U00000041"),
        ("\\x{0}", "\\U00000000"),
        ("\\x{D7FF}", "\\U0000D7FF"),
        ("\\x{E000}", "\\U0000E000"),
        ("\\x{10FFFF}", "\\U0010FFFF"),
        ("\\x{e9}x", "\\U000000E9x"),
        ("\\x{41}{2}", "\\U00000041{2}"),
        ("\\x{41}}", "\\U00000041}"),
        ("a*\\x{41}{2}", "a*\\U00000041{2}"),
        ("[\\x{10FFFF}]", "[\\U0010FFFF]"),
        ("\\x41", "\\x41"),
        ("a{2}\\x{41}", "a{2}\\U00000041"),
    ],
)
def test_hex_escape_translation(pattern: str, translated: str) -> None:
    assert translate_pattern(pattern) == translated


def test_hex_escape_matching() -> None:
    assert renamed("\\x{41}=a", "AB", "ab") == ["aB", "ab"]
    assert renamed("\\x{e9}+=e", "caf\u00e9\u00e9") == ["cafe"]
    assert renamed("[\\x{41}]{2}=_", "AAA") == ["_A"]


@pytest.mark.parametrize(
    ("pattern", "shown", "why"),
    [
        ("\\x{}", "\\x{}", "hex digits"),
        ("\\x{zz}", "\\x{zz}", "hex digits"),
        ("\\x{-1}", "\\x{-1}", "hex digits"),
        ("\\x{+41}", "\\x{+41}", "hex digits"),
        ("\\x{0x41}", "\\x{0x41}", "hex digits"),
        ("\\x{4_1}", "\\x{4_1}", "hex digits"),
        ("\\x{ 41}", "\\x{ 41}", "hex digits"),
        ("\\x{}}", "\\x{}", "hex digits"),
        ("[\\x{zz}]", "\\x{zz}", "hex digits"),
        ("[\\x{}]", "\\x{}", "hex digits"),
        ("\\x{110000}", "\\x{110000}", "scalar value"),
        ("\\x{D800}", "\\x{D800}", "scalar value"),
        ("\\x{DFFF}", "\\x{DFFF}", "scalar value"),
        ("\\x{dfff}", "\\x{dfff}", "scalar value"),
        ("[\\x{110000}]", "\\x{110000}", "scalar value"),
    ],
)
def test_bad_hex_escapes(pattern: str, shown: str, why: str) -> None:
    error = refused(pattern, "bad escape")
    assert f" {shown}: " in error.message
    assert why in error.message
    assert error.hint is None


@pytest.mark.parametrize("pattern", ["\\x{41", "a\\x{", "[\\x{41]"])
def test_hex_escape_without_a_closing_brace(pattern: str) -> None:
    assert "'}'" in refused(pattern, re.escape("\\x{")).message


# --- the Rust dialect: what is refused, and why --------------------------------------------------

REJECTS = "does not support"  # Rust's regex refuses the construct: so does Burn
CANNOT = "cannot translate"  # Burn runs it, but Python's re cannot say the same thing


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        ("[\\1]", "\\1"),
        ("[a\\9]", "\\9"),
        ("a\\1", "\\1"),
        ("\\0", "\\0"),
        ("\\g<1>", "\\g"),
        ("\\k<n>", "\\k"),
        ("a\\Z", "\\Z"),
        ("\\G", "\\G"),
        ("(?=a)", "look-around"),
        ("(?P>n)", "look-around"),
        ("(?!a)", "look-around"),
        ("(?<=a)b", "look-around"),
        ("(?<!a)b", "look-around"),
        ("(?>a)", "look-around"),
        ("(?(1)a)", "look-around"),
        ("(?#c)", "look-around"),
        ("(?P=n)", "look-around"),
        ("x(?P=n)", "look-around"),
    ],
)
def test_what_rust_rejects_is_refused_as_unsupported(pattern: str, construct: str) -> None:
    error = refused(pattern, REJECTS)
    assert construct in error.message
    assert CANNOT not in error.message
    assert error.hint is None


@pytest.mark.parametrize(
    ("pattern", "construct", "fix"),
    [
        ("[\\p{L}]", "\\p", "rewrite"),
        ("[\\P{L}]", "\\p", "rewrite"),
        ("\\p{L}", "\\p", "rewrite"),
        ("\\PL", "\\p", "rewrite"),
        ("[[:nope:]]", "nested", "rewrite"),
        ("[[:^nope:]]", "nested", "rewrite"),
        ("[a[b]]", "nested", "rewrite"),
        ("[a[^]]]", "nested", "rewrite"),
        ("[a[]]]", "nested", "rewrite"),
        ("[a&&b]", "'&&'", "rewrite"),
        ("[a--b]", "'--'", "rewrite"),
        ("[a~~b]", "'~~'", "rewrite"),
        ("[a-z&&[^aeiou]]", "'&&'", "rewrite"),
        ("\\<a", "\\<", "rewrite"),
        ("a\\>", "\\>", "rewrite"),
        ("\\b{start}a", "\\b{...}", "rewrite"),
        ("(?U)a*", "'U'", "rewrite"),
        ("(?R)a", "'R'", "rewrite"),
        ("(?iU:a)", "'iU'", "rewrite"),
        ("(?-u:a)", "'-u'", "rewrite"),
        ("(?i-mu:a)", "'i-mu'", "rewrite"),
        ("a*{2}", "repetition", "(?:a*)+"),
        ("a{2}{3}", "repetition", "(?:a*)+"),
        ("a+{2}", "repetition", "(?:a*)+"),
        ("a{2}+", "repetition", "(?:a*)+"),
        ("a*+", "repetition", "(?:a*)+"),
        ("a?+", "repetition", "(?:a*)+"),
        ("a?{2}", "repetition", "(?:a*)+"),
        ("a**", "repetition", "(?:a*)+"),
        ("a*??", "repetition", "(?:a*)+"),
        ("a{2}?*", "repetition", "(?:a*)+"),
        ("a(?i)b", "middle", "(?i:...)"),
        ("(a(?i)b)", "middle", "(?i:...)"),
        # a negated class can only be a class of its own in Python
        ("[x[:^digit:]]", "[:^digit:]", "([[:^digit:]]|[ab])"),
        ("[[:^digit:]x]", "[:^digit:]", "([[:^digit:]]|[ab])"),
        ("[^x[:^digit:]]", "[:^digit:]", "([[:^digit:]]|[ab])"),
        ("[[:^digit:]\\]]", "[:^digit:]", "([[:^digit:]]|[ab])"),
        # Rust reads ']' then a class of non-digits or 'x' (on ']a1x': '_1x')
        ("][[:^digit:]x]", "[:^digit:]", "([[:^digit:]]|[ab])"),
        ("[a\\W]", "\\W", "(\\W|[ab])"),
        ("[\\Da]", "\\D", "(\\D|[ab])"),
        ("[^a\\S]", "\\S", "(\\S|[ab])"),
    ],
)
def test_what_python_cannot_say_is_refused_with_a_rewrite(
    pattern: str, construct: str, fix: str
) -> None:
    error = refused(pattern, CANNOT)
    assert construct in error.message
    assert fix in str(error.hint)


@pytest.mark.parametrize(
    ("pattern", "keyword", "fix"),
    [
        ("a\\", "backslash", None),
        ("\\", "backslash", None),
        ("ab(?", "bad group at 2", None),
        ("(?&x)", "bad group at 0", None),
        ("a{b", "'{'", "\\{"),
    ],
)
def test_other_pattern_errors(pattern: str, keyword: str, fix: str | None) -> None:
    error = refused(pattern, re.escape(keyword))
    if fix is None:
        assert error.hint is None
    else:
        assert fix in str(error.hint)


def test_errors_name_the_rule() -> None:
    with pytest.raises(SelectionError, match="backslash") as info:
        translate_pattern("a\\")
    assert info.value.message.startswith("rule: pattern 'a\\' ")
    with pytest.raises(SelectionError, match="invalid pattern") as info:
        compile_pattern("a{2,1}")
    assert info.value.message.startswith("rule: ")
    # Python's own errors for what the translation passes through, after the rule
    for rule, fact in [
        ("+a=x", "position 0"),
        ("{2}=x", "position 0"),
        ("a)=x", "position 1"),
        ("\\X=x", "\\X"),
    ]:
        with pytest.raises(SelectionError, match="invalid pattern") as info:
            parse_rules([rule])
        assert info.value.message.startswith(f"rule #1 {quote(rule)}: ")
        assert fact in info.value.message
    with pytest.raises(SelectionError, match="bad escape") as info:
        parse_rules(["a=b", "\\x{zz}=x"])
    assert info.value.message.startswith("rule #2 '\\x{zz}=x': ")
    assert info.value.hint is None


# --- the Rust dialect: groups, repetitions, anchors, flags ----------------------------------------


@pytest.mark.parametrize(
    ("pattern", "translated"),
    [
        ("a{2}", "a{2}"),
        ("a{2,}", "a{2,}"),
        ("a{2,3}?", "a{2,3}?"),
        ("a*?b{2}", "a*?b{2}"),
        ("a??b{2}", "a??b{2}"),
        ("a?b{2}", "a?b{2}"),
        ("(a){2}", "(a){2}"),
        ("a*?", "a*?"),
        ("a+?b*", "a+?b*"),
        ("a{2}?b?", "a{2}?b?"),
        ("(?u)a", "(?u)a"),
        ("\\x{41}*", "\\U00000041*"),
        ("a*(b)+", "a*(b)+"),
        ("\\bx\\B", f"{BOUNDARY}x{NOT_BOUNDARY}"),
        ("\\ba\\B", f"{BOUNDARY}a{NOT_BOUNDARY}"),
        ("\\z", "\\Z"),
        ("(?<n>a)(?P<m>b)", "(?P<n>a)(?P<m>b)"),
        ("a(?<n>b)", "a(?P<n>b)"),
        ("ab(?P<n>c)", "ab(?P<n>c)"),
        ("X{2}", "X{2}"),
        ("aX+", "aX+"),
        ("\\d\\.\\w+", f"[{DIGIT}]\\.[{WORD}]+"),
        ("\\w\\W\\d\\D\\s\\S", f"[{WORD}][^{WORD}][{DIGIT}][^{DIGIT}][{SPACE}][^{SPACE}]"),
        ("(?i:a)b", "(?i:a)b"),
        # '$' is the very end unless the m flag of its own group is on
        ("a$", "a\\Z"),
        ("a$b", "a\\Zb"),
        ("(?m)a$", "(?m)a$"),
        ("(?im)a$", "(?im)a$"),
        ("(?i-m)a$", "(?i-m)a\\Z"),
        ("(?i)a$", "(?i)a\\Z"),
        ("(?m:a)b$", "(?m:a)b\\Z"),
        ("(?m:a$)b$", "(?m:a$)b\\Z"),
        ("(?m)(?-m:a$)b$", "(?m)(?-m:a\\Z)b$"),
        ("(?m)(a$)b$", "(?m)(a$)b$"),
        ("(?m:(a$)|(?<n>b$))c$", "(?m:(a$)|(?P<n>b$))c\\Z"),
        ("\\(?m:a\\)$", "\\(?m:a\\)\\Z"),
        ("[(](?m:a)$", "[(](?m:a)\\Z"),
        ("a)$", "a)\\Z"),
        # only '(' and ')' open and close an m scope: a letter inside the group does not end it
        ("(?m:aX$)", "(?m:aX$)"),
        ("(?m:X)$", "(?m:X)\\Z"),
        # flags set first open no group: a stray ')' (re.compile refuses it) pops nothing
        ("(?m)a)$", "(?m)a)$"),
    ],
)
def test_pattern_translation(pattern: str, translated: str) -> None:
    assert translate_pattern(pattern) == translated


def test_repetitions_match_like_rust() -> None:
    assert renamed("a{2}=X", "aaaaa") == ["XXa"]
    assert renamed("a{2,}=X", "a.aaaaa") == ["a.X"]
    assert renamed("a{2,3}?=X", "aaaa") == ["XX"]
    assert renamed("a*?b{2}=X", "aabbb") == ["Xb"]
    assert renamed("\\x{41}{2}=X", "AAA") == ["XA"]


@pytest.mark.parametrize(
    ("pattern", "translated"),
    [
        # Rust's x flag skips White_Space (not U+001C-U+001F, which str.isspace() takes) and
        # '#' to a newline, in its own scope, inside classes too
        ("(?x)a b", "(?x)ab"),
        ("(?x)a\t\n\x0b\x0c\r b", "(?x)ab"),
        ("(?x)a\u00a0\u3000b", "(?x)ab"),
        ("(?x)a # c\nb", "(?x)ab"),
        ("(?x)a # c\n b", "(?x)ab"),
        ("(?x)# a\n# b\nc", "(?x)c"),
        ("(?x)[a b]", "(?x)[ab]"),
        ("(?x)[ ^a]", "(?x)[^a]"),
        ("(?x)[ ]a]", "(?x)[\\]a]"),
        ("(?x)[^ ]a]", "(?x)[^\\]a]"),
        ("(?x)[ ^]a]", "(?x)[^\\]a]"),
        ("(?x)[a #]\n]", "(?x)[a]"),
        ("(?x)a *", "(?x)a*"),
        ("(?x:a b)c d", "(?x:ab)c d"),
        ("(?x)(?-x:a b)c d", "(?x)(?-x:a b)cd"),
        ("(?x)a\\ b", "(?x)a\\ b"),
        ("(?x)a\x1cb", "(?x)a\x1cb"),
        ("(?x)a \x1cb", "(?x)a\x1cb"),
        ("(?x)[\x1c]", "(?x)[\x1c]"),
        ("(?x)a\nb#c\nd", "(?x)abd"),
        ("(?x)a#c\nb#d\ne", "(?x)abe"),
        ("(?x)a#c", "(?x)a"),
        # without it, blanks are literal, and a blank after '[' does not make a ']' literal
        ("[a b]", "[a b]"),
        ("[ ]a]", "[ ]a]"),
        ("[^ ]a]", "[^ ]a]"),
        ("[ ^]a]", "[ ^]a]"),
        ("[a #]\n]", "[a #]\n]"),
        ("a\\.{2}", "a\\.{2}"),
    ],
)
def test_x_flag_whitespace_is_dropped_in_its_scope(pattern: str, translated: str) -> None:
    assert translate_pattern(pattern) == translated


# --- split_rule ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("[^]=]x=y", ("[^]=]x", "y")),
        ("[]=]x=y", ("[]=]x", "y")),
        ("[^=]=y", ("[^=]", "y")),
        ("[a]=b", ("[a]", "b")),
        ("[^a]=b=c", ("[^a]", "b=c")),
        ("a\\==b", ("a\\=", "b")),
        ("[\\]=]=b", ("[\\]=]", "b")),
        ("x[^]=]=", ("x[^]=]", "")),
        ("=", ("", "")),
        ("a[]=]=b", ("a[]=]", "b")),
        ("[]]=y", ("[]]", "y")),
        ("[^]]=y", ("[^]]", "y")),
    ],
)
def test_split_rule(text: str, parts: tuple[str, str]) -> None:
    assert split_rule(text) == parts


@pytest.mark.parametrize("text", ["[^]=]", "[=]", "a\\=", "[^]]"])
def test_a_rule_without_equals_is_refused_with_the_syntax(text: str) -> None:
    with pytest.raises(SelectionError, match="no '='") as info:
        split_rule(text)
    assert quote(text) in info.value.message
    assert "PATTERN=REPLACEMENT" in str(info.value.hint)
    with pytest.raises(SelectionError, match="no '='") as info:
        parse_rules(["a=b", text])
    assert info.value.message.startswith(f"rule #2: remap rule {quote(text)} ")
    assert "PATTERN=REPLACEMENT" in str(info.value.hint)


def test_an_empty_pattern_is_refused_with_the_anchor_hint() -> None:
    with pytest.raises(SelectionError, match="empty pattern") as info:
        RemapRule("", "x", 3)
    assert "#3" in info.value.message
    assert "^" in str(info.value.hint)


# --- replacements and replace-all --------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "expanded"),
    [
        # `$$` is one literal `$`, and the text after it is kept
        ("a$$b", "a$b"),
        ("$$$1", "$x"),
        ("$$${1}z", "$xz"),
        # `${}` names the empty group, which does not exist: it expands to nothing
        ("a${}b", "ab"),
        ("${}}", "}"),
        # a `$` before a character that cannot start a name is literal, and so is what follows
        ("a$-b", "a$-b"),
        ("$.$1", "$.x"),
        ("${1", "${1"),
    ],
)
def test_expand_replacement(template: str, expanded: str) -> None:
    match = re.search("(x)", "x")
    assert match is not None
    assert expand_replacement(template, match) == expanded


@pytest.mark.parametrize(
    ("template", "written", "fix"),
    [(r"L\1", r"'\1'", "'L${1}'"), (r"a\.b", "backslash", "'.'")],
)
def test_a_backslash_in_a_replacement_is_refused_with_its_fix(
    template: str, written: str, fix: str
) -> None:
    with pytest.raises(SelectionError, match=r"backslash|group") as info:
        check_replacement(template, re.compile(r"^(x)"), "rule")
    assert info.value.message.startswith("rule: ")
    assert written in info.value.message
    assert fix in str(info.value.hint)


@pytest.mark.parametrize(
    ("pattern", "template", "ref", "groups"),
    [
        ("a", "$x", "x", "no groups"),
        ("(a)", "$9", "9", "$1;"),
        ("(a)(b)", "${3}", "3", "$1 to $2;"),
        ("(?P<n>a)", "$m", "m", "$1, ${n};"),
        ("(?P<s>a)(b)(?P<t>c)", "$u", "u", "$1 to $3, ${s}, ${t};"),
    ],
)
def test_a_missing_group_is_refused_listing_the_groups(
    pattern: str, template: str, ref: str, groups: str
) -> None:
    with pytest.raises(SelectionError, match="names the group") as info:
        check_replacement(template, compile_pattern(pattern), "rule #2")
    assert info.value.message.startswith("rule #2: ")
    assert f"'{ref}'" in info.value.message
    assert groups in str(info.value.hint)
    assert "$$" in str(info.value.hint)  # how to write a literal $


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("a*?", "aa", "-a-a-"),  # Python's finditer: ---
        ("x*", "abxd", "-a-b-d-"),  # Python's finditer: -a-b--d-
        ("a|", "bab", "-b-b-"),
        ("b*", "", "-"),
        ("a", "aa", "--"),
        ("\\b", "ab cd", "-ab- -cd-"),
        ("\\b", ".a", ".-a-"),  # `\b` first matches at 1, not at 0
        ("^", "ab", "-ab"),
        ("$", "ab", "ab-"),  # Rust: one empty match, at 2
    ],
)
def test_replace_all_reports_matches_as_rust_does(pattern: str, name: str, expected: str) -> None:
    assert replace_all(compile_pattern(pattern), name, "-") == expected
    assert RemapRule("$", ".x").apply("a") == "a.x"


# --- Rename: actions and their reasons ----------------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "name", "new", "fired", "empty_segment"),
    [
        (["b="], "a.b.c", "a..c", ["rule #1 'b='"], True),
        (["c$="], "a.b.c", "a.b.", ["rule #1 'c$='"], True),
        (["^a="], "a.b", ".b", ["rule #1 '^a='"], True),
        (["x=y", "^a\\.="], "xa.b", "ya.b", ["rule #1 'x=y'"], False),
        (["a=b", "b=c"], "a.x", "c.x", ["rule #1 'a=b'", "rule #2 'b=c'"], False),
        (["a=", "^\\.="], "a.x", "x", ["rule #1 'a='", "rule #2 '^\\.='"], False),
        (["x=y.z"], "x", "y.z", ["rule #1 'x=y.z'"], False),
    ],
)
def test_a_rename_names_the_rules_that_fired_and_warns_of_an_empty_segment(
    rules: list[str], name: str, new: str, fired: list[str], empty_segment: bool
) -> None:
    adapter = Rename.parse(rules)
    source = make_entry(name, DType.F32, (2,), bytes(8))
    out, (action,) = adapter.apply(source)
    assert out == replace(source, name=new)
    assert (action.kind, action.detail, action.adapter) == (
        ActionKind.RENAME,
        f"{name} -> {new}",
        adapter.describe(),
    )
    assert action.reason.startswith(", ".join(fired))
    assert ("empty segment" in action.reason) is empty_segment


def test_an_unchanged_name_has_no_action_and_describe_lists_every_rule() -> None:
    source = make_entry("a.b", DType.F32, (2,), bytes(8))
    assert Rename.parse(["zz="]).apply(source) == (source, ())
    assert Rename.parse(["b=b"]).apply(source) == (source, ())
    assert Rename.parse(["^a\\.=b.", "(c)=$1"]).describe() == "remap ^a\\.=b.; (c)=$1"
    assert Rename.parse(["x=y"]).describe() == "remap x=y"

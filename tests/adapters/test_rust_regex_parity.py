"""Remap patterns against Burn's own regex engine.

``fixtures/golden/rust_regex.json`` holds what Rust's ``regex`` crate (the version Burn uses)
does with each case: ``Regex::new(pattern)`` then ``replace_all(name, replacement)``, as
burn-store's ``KeyRemapper`` runs a rule (written by ``fixtures/make_rust_regex.py``). A rule
must do exactly what Burn does, or be refused: refused as syntax Rust rejects only when Rust
does reject it, and as syntax ckptctl cannot translate only for the constructs listed below.
"""

from __future__ import annotations

import json

import pytest

from ckptctl.adapters.rename import compile_pattern, replace_all
from ckptctl.errors import SelectionError, quote
from tests.conftest import FIXTURES

GOLDEN = json.loads((FIXTURES / "golden" / "rust_regex.json").read_text(encoding="utf-8"))
CASES = GOLDEN["cases"]
ACCEPTS = "Rust regex (Burn) accepts it, but ckptctl cannot translate it to Python"

# Rust accepts these; Python's re cannot say the same thing, so ckptctl refuses them, saying so
UNTRANSLATABLE = {
    r"a(?i)b",
    r"((?m)b$)",
    r"(?U)a+",
    r"(?R)a$",
    r"(?-u:\w)",
    r"[x[:^alpha:]]",
    r"[[:nope:]]",
    r"[a[b]]",
    r"[[]]]",
    r"[a-z&&[^aeiou]]",
    r"[a\W]",
    r"[a\S]",
    r"[a-c&&b]",
    r"[a-c--b]",
    r"[a-c~~b-d]",
    r"[\p{L}]",
    r"\p{L}",
    r"\PL",
    r"\<a",
    r"a\>",
    r"\b{start}a",
    r"a*+",
    r"a?+",
    r"a{2}+",
    r"a{2}{3}",
    r"a**",
    r"a*??",
}


# Known differences ckptctl does not emulate: under the i flag Python also matches the Turkish
# dotted/dotless I (U+0130, U+0131) to i and I, which Rust's simple case folding does not
KNOWN_DIFFERENCES = {(r"(?i)i", "\u0130\u0131iI"): "____"}


def run(case: dict[str, str]) -> tuple[str, str]:
    try:
        regex = compile_pattern(case["pattern"])
    except SelectionError as exc:
        return "err", str(exc)
    return "ok", replace_all(regex, case["name"], case["replacement"])


def test_golden_covers_both_verdicts_and_the_untranslatable_list() -> None:
    assert GOLDEN["regex"].startswith("1.")
    rust_ok = {c["pattern"] for c in CASES if "ok" in c}
    assert rust_ok >= UNTRANSLATABLE
    assert len(rust_ok) > 80
    assert sum("err" in c for c in CASES) > 30


# plain case numbers as ids: ids holding backslashes are escaped again when pytest collects a
# second time in one process (mutmut's fork server), and then no longer match
@pytest.mark.parametrize("case", CASES, ids=[f"case{i:03d}" for i in range(len(CASES))])
def test_rule_does_what_burn_does_or_is_refused_truthfully(case: dict[str, str]) -> None:
    verdict, text = run(case)
    what = f"{case['pattern']!r} on {case['name']!r}"
    if "err" in case:  # Burn refuses the rule: so must ckptctl, without claiming Rust runs it
        assert verdict == "err", f"{what}: Rust says {case['err']}"
        assert ACCEPTS not in text, what
    elif case["pattern"] in UNTRANSLATABLE:  # refused, saying that Burn would run it
        assert verdict == "err", what
        assert text.startswith(f"rule: pattern {quote(case['pattern'])} uses "), what
        assert text.endswith(ACCEPTS), what
    elif (case["pattern"], case["name"]) in KNOWN_DIFFERENCES:
        assert case["ok"] != text, what
        assert (verdict, text) == ("ok", KNOWN_DIFFERENCES[case["pattern"], case["name"]]), what
    else:
        assert (verdict, text) == ("ok", case["ok"]), what

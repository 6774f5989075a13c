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
from ckptctl.adapters.modules import Decision
from ckptctl.adapters.pipeline import PipelineOptions, _uncertain, run_pipeline
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

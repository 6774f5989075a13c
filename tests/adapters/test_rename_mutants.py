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

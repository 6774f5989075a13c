"""Everyday use, round two (issue 30): remap replacements, --state-key leftovers, tolerance
verdicts of diff. Each test failed before the change it covers."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file


@pytest.fixture
def llama(tmp_path):
    """20 tensors under ``model.`` and an ``lm_head.weight`` outside it."""
    tensors: dict[str, np.ndarray] = {}
    for i in range(4):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors[f"model.layers.{i}.attn.{proj}.weight"] = np.zeros((4, 4), "<f4")
        tensors[f"model.layers.{i}.norm.weight"] = np.ones(4, "<f4")
    tensors["lm_head.weight"] = np.zeros((2, 4), "<f4")
    path = tmp_path / "llama.safetensors"
    save_file(tensors, str(path))
    return path


# --- item 3: replacements Burn would run, but never to a useful name --------------------------


def test_a_python_style_group_is_refused_with_the_dollar_hint(run_cli, llama, tmp_path):
    out = tmp_path / "q.safetensors"
    result = run_cli("remap", llama, out, "-r", r"^model\.layers\.(\d)=L\1")
    assert result.code == 2, result.stderr
    assert not out.exists()
    assert "writes a group as '\\1', Python's syntax" in result.stderr
    assert "hint: groups are written $1 or ${name} in a replacement, not \\1: 'L${1}'" in (
        result.stderr
    )
    convert = run_cli("convert", llama, out, "--remap", r"(lm_head)=\1_out")
    assert convert.code == 2
    assert not out.exists()


def test_a_group_the_pattern_does_not_have_suggests_braces(run_cli, llama, tmp_path):
    out = tmp_path / "q.safetensors"
    result = run_cli("remap", llama, out, "-r", r"^(lm)_head=$1_out")
    assert result.code == 2, result.stderr
    assert not out.exists()
    assert "the replacement names the group '1_out', which the pattern does not have" in (
        result.stderr
    )
    assert "hint: write ${1}_out for group 1 followed by '_out'" in result.stderr
    fixed = run_cli("remap", llama, out, "-r", r"^(lm)_head=${1}_out")
    assert fixed.code == 0, fixed.stderr
    assert "lm_out.weight" in run_cli("ls", out).stdout

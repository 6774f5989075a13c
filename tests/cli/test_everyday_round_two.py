"""Everyday use, round two (issue 30): remap replacements, --state-key leftovers, tolerance
verdicts of diff. Each test failed before the change it covers."""

from __future__ import annotations

import json

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


# --- item 4: tensors outside --state-key are counted, never dropped without a word -----------


def test_convert_state_key_names_what_it_leaves_out(run_cli, llama, tmp_path):
    out = tmp_path / "sub.safetensors"
    result = run_cli("convert", llama, out, "--state-key", "model")
    assert result.code == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        "warning: 1 of 21 tensors is outside --state-key model and not written (lm_head.weight)"
    )
    quiet = run_cli("convert", llama, out, "--state-key", "model", "--force", "-q")
    assert (quiet.code, quiet.stderr) == (0, "")
    as_json = run_cli("convert", llama, out, "--state-key", "model", "--force", "--json")
    assert json.loads(as_json.stdout)["warnings"][0].startswith("1 of 21 tensors is outside")


def test_convert_state_key_names_the_first_few(run_cli, tmp_path):
    src = tmp_path / "many.safetensors"
    names = [f"head{i}.weight" for i in range(5)]
    save_file({"model.w": np.zeros(2, "<f4"), **{n: np.zeros(2, "<f4") for n in names}}, str(src))
    result = run_cli("convert", src, tmp_path / "o.safetensors", "--state-key", "model")
    assert "warning: 5 of 6 tensors are outside --state-key model and not written " in (
        result.stderr
    )
    assert "(head0.weight, head1.weight, head2.weight, ...)" in result.stderr


def test_ls_state_key_says_how_many_of_all(run_cli, llama):
    result = run_cli("ls", llama, "--state-key", "model")
    assert result.code == 0
    assert result.stdout.splitlines()[1] == (
        "  below state key 'model': 20 of 21 tensors (outside it: lm_head.weight)"
    )
    as_json = json.loads(run_cli("ls", llama, "--state-key", "model", "--json").stdout)
    assert (len(as_json["tensors"]), as_json["outside_state_key"]) == (20, 1)
    inside = run_cli("ls", llama).stdout
    assert "below state key" not in inside


# --- item 5: "identical" means the same bytes; within tolerance is said so ------------------


@pytest.fixture
def near(tmp_path):
    """A and B: one equal tensor, one within rtol=1e-2 only, one F32 against F16."""
    values = np.linspace(1, 2, 8, dtype="<f4")
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_file({"same": values, "near": values, "cast": values}, str(a))
    save_file(
        {"same": values, "near": values * np.float32(1.001), "cast": values.astype("<f2")},
        str(b),
    )
    return a, b


def test_diff_within_tolerance_is_not_called_identical(run_cli, near):
    a, b = near
    result = run_cli("diff", a, b, "--values-only", "--rtol", "1e-2")
    assert result.code == 0, result.stderr
    verdict = result.stdout.splitlines()[-1]
    assert verdict == (
        "match within rtol=0.01, atol=1e-08: 3 tensors, same names and shapes "
        "(1 identical, 1 close, 1 dtype)"
    )
    assert "identical:" not in result.stdout
    out = json.loads(run_cli("diff", a, b, "--values-only", "--rtol", "1e-2", "--json").stdout)
    assert (out["identical"], out["within_tolerance"]) == (False, True)
    assert list(out)[5:8] == ["identical", "within_tolerance", "options"]


def test_diff_identical_stays_identical(run_cli, near):
    a, _ = near
    result = run_cli("diff", a, a)
    assert result.code == 0
    assert result.stdout.splitlines()[-1].startswith("identical: 3 tensors, same names, dtypes")
    out = json.loads(run_cli("diff", a, a, "--json").stdout)
    assert (out["identical"], out["within_tolerance"]) == (True, True)


def test_diff_outside_tolerance_is_neither(run_cli, near):
    a, b = near
    result = run_cli("diff", a, b, "--values-only", "--json")
    assert result.code == 1
    out = json.loads(result.stdout)
    assert (out["identical"], out["within_tolerance"]) == (False, False)

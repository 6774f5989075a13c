"""Everyday output: counts that are right, warnings that are grouped and quiet, no wrapping in
pipes (issue 13). Each test failed before the change it covers."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file


@pytest.fixture
def llama(tmp_path):
    """Two layers of square attention weights, an MLP weight, an unknown 1-D weight, a norm."""
    tensors = {}
    for i in range(2):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors[f"layers.{i}.attn.{proj}.weight"] = np.zeros((8, 8), "<f4")
        tensors[f"layers.{i}.mlp.up.weight"] = np.zeros((16, 8), "<f4")
        tensors[f"layers.{i}.scale.weight"] = np.ones(8, "<f4")
        tensors[f"layers.{i}.input_layernorm.weight"] = np.ones(8, "<f4")
    path = tmp_path / "llama.safetensors"
    save_file(tensors, str(path))
    return path


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning:")]


def test_changed_counts_only_what_changed(run_cli, llama, tmp_path):
    result = run_cli("convert", llama, tmp_path / "out.bpk", "-a", "pytorch-to-burn")
    assert result.code == 0, result.stderr
    done = result.stderr.splitlines()[-1]
    # 8 square + 2 MLP weights transposed, 2 norms renamed; the 2 unknown 1-D weights are kept
    assert done.endswith("14 tensors, 4.8 KiB, 10 transposed, 2 renamed"), done
    half = run_cli("convert", llama, tmp_path / "half.bpk", "-a", "half")
    assert half.stderr.splitlines()[-1].endswith(", 12 cast")  # norms stay F32 (Burn's rule)


def test_uncertain_module_types_are_one_grouped_line_per_kind(run_cli, llama, tmp_path):
    result = run_cli("convert", llama, tmp_path / "out.bpk", "-a", "pytorch-to-burn")
    lines = warnings(result.stderr)
    assert lines == [
        "warning: 8 square weights typed by name only (k_proj, o_proj, q_proj, ...): "
        "confirm with --module-type",
        "warning: 2 1-D weights with no module type kept as weight/bias, not renamed "
        "gamma/beta (scale): declare with --module-type",
    ]


def test_no_layout_warnings_when_the_chain_cannot_transpose(run_cli, llama, tmp_path):
    result = run_cli("convert", llama, tmp_path / "half.bpk", "-a", "half")
    assert warnings(result.stderr) == []


def test_quiet_silences_warnings_but_not_errors(run_cli, llama, tmp_path):
    quiet = run_cli("convert", llama, tmp_path / "q.bpk", "-a", "pytorch-to-burn", "-q")
    assert quiet.code == 0
    assert quiet.stderr == ""
    again = run_cli("convert", llama, tmp_path / "q.bpk", "-a", "pytorch-to-burn", "-q")
    assert again.code == 5
    assert again.stderr.startswith("ckptctl: error:")


def test_declared_module_types_leave_nothing_uncertain(run_cli, llama, tmp_path):
    result = run_cli(
        "convert", llama, tmp_path / "out.bpk", "-a", "pytorch-to-burn",
        "--module-type", r"attn\.=Linear", "--module-type", r"scale=LayerNorm",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert warnings(result.stderr) == []


def test_piped_output_is_never_wrapped(run_cli, llama, tmp_path):
    result = run_cli("convert", llama, tmp_path / "out.bpk", "-a", "pytorch-to-burn")
    assert all(line.startswith(("warning:", "wrote")) for line in result.stderr.splitlines())
    long_name = "encoder." + "very_long_module_name." * 8 + "weight"
    path = tmp_path / "long.safetensors"
    save_file({long_name: np.zeros((2, 2), "<f4")}, str(path))
    listing = run_cli("ls", path).stdout.splitlines()
    assert any(line.startswith(long_name) and line.endswith("16") for line in listing)


def test_a_narrow_terminal_shortens_names_not_numbers():
    from ckptctl.report.text import PlainTable

    table = PlainTable()
    table.add_column("name")
    table.add_column("bytes", justify="right")
    table.add_row("model.layers.0.self_attn.q_proj.weight", "16,777,216")
    wide = table.lines()
    assert wide[1] == "model.layers.0.self_attn.q_proj.weight  16,777,216"
    narrow = table.lines(max_width=30)
    assert narrow[1].endswith("  16,777,216")
    assert "…" in narrow[1]
    assert len(narrow[1]) <= 30
    assert narrow[1].startswith("model.l")
    assert "weight" in narrow[1]

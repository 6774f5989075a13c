"""Everyday use, round three (issue 48): a bar for every long read, options that do something,
JSON a script can use, counts that add up, docs where people look. Each test drives the CLI the
way the issue's user did: on a pseudo-terminal for bars and widths, through pipes otherwise."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from ckptctl.formats import open_checkpoint
from tests.cli._terminal import run_on_terminal
from tests.conftest import VALID

#: The width the issue's user had.
COLUMNS = 80
#: What torch.nn.BatchNorm registers with register_buffer (torch/nn/modules/batchnorm.py).
TORCH_BATCHNORM_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")
COMMAND_NAMES = ["ls", "header", "convert", "remap", "diff", "verify", "show", "hash", "man"]


# --- item 1: every command that reads tensor data shows the same bar, one line wide ---------

READERS = {
    "ls --stats": ("ls", "{f}", "--stats"),
    "show": ("show", "{f}", "--filter", "weight"),
    "hash": ("hash", "{f}", "-o", "{out}.manifest"),
    "diff": ("diff", "{f}", "{f}"),
    "convert": ("convert", "{f}", "{out}"),
}


def _args(command: tuple[str, ...], file, out) -> list[str]:
    return [a.format(f=file, out=out) for a in command]


@pytest.mark.parametrize("command", list(READERS))
def test_every_reading_command_shows_the_bar_on_one_line_of_an_80_column_terminal(
    command, eight, tmp_path
):
    out = tmp_path / "a-long-output-name-for-a-converted-checkpoint.safetensors"
    run = run_on_terminal(*_args(READERS[command], eight, out), columns=COLUMNS)
    assert run.code == 0, run.terminal
    bars = run.bar_lines()
    assert bars, run.terminal
    assert any("512.0 KiB/512.0 KiB" in line for line in bars), bars
    for line in bars:  # every frame is one whole line: nothing wraps onto a second
        assert len(line) < COLUMNS, line
        assert "━" in line, line
        assert line.split()[0] in ("reading", "hashing", "comparing", "writing"), line


@pytest.mark.parametrize("command", list(READERS))
def test_no_bar_in_a_pipe_or_with_json(command, eight, tmp_path, run_cli):
    args = _args(READERS[command], eight, tmp_path / "o.safetensors")
    piped = run_cli(*args)
    assert piped.code == 0, piped.stderr
    assert "━" not in piped.stderr
    assert "KiB/" not in piped.stderr
    again = ["--force"] if command in ("convert", "hash") else []  # the output exists now
    json_run = run_on_terminal(*args, "--json", *again)
    assert json_run.code == 0, json_run.terminal
    assert not json_run.bar_lines(), json_run.terminal


# --- item 4: ls --tree follows the file's module order, and --sort is honoured or refused ---

RESNET = VALID / "ports" / "resnet.pt"  # torch.save of a torchvision resnet18 layout


def _modules_in_file_order(path) -> list[str]:
    """Top-level modules by first appearance in the file, from `ls` (the flat listing)."""
    with open_checkpoint(path) as ckpt:
        names = [e.name.split(".")[0] for e in ckpt.entries()]
    return list(dict.fromkeys(names))


def _top(run_cli, *args):
    result = run_cli("ls", RESNET, "--tree", "--depth", "1", "--json", *args)
    assert result.code == 0, result.stderr
    return [c["name"] for c in json.loads(result.stdout)["tree"]["children"]]


def test_the_tree_follows_the_files_module_order_by_default(run_cli):
    order = _modules_in_file_order(RESNET)
    assert order[:3] == ["conv1", "bn1", "layer1"]  # as print(model) shows a resnet
    assert _top(run_cli, "--sort", "file") == order
    # --tree --json keeps the CLI contract's natural order unless --sort says otherwise
    assert _top(run_cli) == sorted(order)
    text = run_cli("ls", RESNET, "--tree", "--depth", "1").stdout
    rows = [
        line.split()[0]
        for line in text.splitlines()
        if line.split()[:1] and line.split()[0] in order
    ]
    assert rows == order


def test_the_tree_sorted_by_name_or_size(run_cli):
    assert _top(run_cli, "--sort", "name") == sorted(_modules_in_file_order(RESNET))
    result = run_cli("ls", RESNET, "--tree", "--depth", "1", "--json", "--sort", "size")
    children = json.loads(result.stdout)["tree"]["children"]
    sizes = [c["nbytes"] for c in children]
    assert sizes == sorted(sizes, reverse=True)
    assert children[0]["name"] == "layer4"


def test_numbered_blocks_stay_in_number_order_in_file_order(run_cli, tmp_path):
    # a safetensors file stores names sorted as text: layers.10 before layers.2
    tensors = {f"layers.{i}.w": np.zeros(2, "<f4") for i in range(12)}
    save_file(tensors, str(tmp_path / "m.safetensors"))
    result = run_cli("ls", tmp_path / "m.safetensors", "--tree", "--json", "--expand")
    layers = json.loads(result.stdout)["tree"]["children"][0]
    assert [c["name"] for c in layers["children"]] == [str(i) for i in range(12)]
    collapsed = run_cli("ls", tmp_path / "m.safetensors", "--tree", "--json")
    assert json.loads(collapsed.stdout)["tree"]["children"][0]["indices"] == list(range(12))


@pytest.mark.parametrize("key", ["dtype", "shape"])
def test_a_sort_the_tree_cannot_take_is_refused(run_cli, key):
    result = run_cli("ls", RESNET, "--tree", "--sort", key)
    assert result.code == 2
    assert key in result.stderr
    assert not result.stdout


# --- item 5: ls --json has a grand total and per-tensor parameters, under one name ----------


def test_ls_json_has_per_tensor_parameters_and_a_total_that_the_text_agrees_with(run_cli):
    result = run_cli("ls", RESNET, "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    with open_checkpoint(RESNET) as ckpt:
        sizes = {e.name: int(np.prod(e.shape)) for e in ckpt.entries()}
        nbytes = sum(e.nbytes for e in ckpt.entries())
    buffers = {n for n in sizes if n.rsplit(".", 1)[-1] in TORCH_BATCHNORM_BUFFERS}
    assert len(buffers) == 3 * 20  # resnet18's 20 BatchNorm layers
    for tensor in report["tensors"]:
        name = tensor["name"]
        assert tensor["parameters"] == (0 if name in buffers else sizes[name]), tensor
        assert tensor.get("buffer", False) == (name in buffers)
    expected = sum(size for name, size in sizes.items() if name not in buffers)
    in_buffers = sum(sizes[name] for name in buffers)
    assert report["total"] == {
        "tensors": len(sizes), "parameters": expected, "buffers": in_buffers, "nbytes": nbytes
    }  # fmt: skip
    for key in ("tensors", "parameters", "buffers", "nbytes"):  # the parts sum to the whole
        assert sum(t[key] for t in report["totals"]) == report["total"][key]
    for t in report["totals"]:  # numel, kept for old scripts, counts every element
        assert t["numel"] == t["parameters"] + t["buffers"]
    text = run_cli("ls", RESNET).stdout
    assert f"{len(sizes)} tensors, {expected:,} parameters (+{in_buffers:,} in buffers)" in text


def test_ls_and_its_tree_name_the_count_alike(run_cli):
    flat = json.loads(run_cli("ls", RESNET, "--json").stdout)
    tree = json.loads(run_cli("ls", RESNET, "--tree", "--json").stdout)["tree"]
    assert tree["parameters"] == flat["total"]["parameters"]
    assert tree["buffers"] == flat["total"]["buffers"]


# --- item 6: every summary's parts sum to its whole ----------------------------------------


def _summary_counts(line: str) -> tuple[int, list[int]]:
    """``6 tensors match (5 identical, 1 close); ...`` -> (6, [5, 1])."""
    whole = int(line.split()[0].replace(",", ""))
    inside = line[line.index("(") + 1 : line.index(")")]
    return whole, [int(part.split()[0].replace(",", "")) for part in inside.split(",")]


@pytest.fixture
def consolidated(tmp_path):
    """Seven tensors as the ground truth has them, and a consolidation with one in F16."""
    rng = np.random.default_rng(6)
    truth: dict[str, np.ndarray] = {f"w{i}": rng.random(8, dtype=np.float32) for i in range(7)}
    truth["w6"] = truth["w6"].astype(np.float16).astype(np.float32)  # the same values in F16
    merged = {**truth, "w6": truth["w6"].astype(np.float16)}
    save_file(truth, str(tmp_path / "truth.safetensors"))
    save_file(merged, str(tmp_path / "merged.safetensors"))
    return tmp_path / "merged.safetensors", tmp_path / "truth.safetensors"


def test_the_matching_tensors_line_counts_only_the_tensors_that_match(run_cli, consolidated):
    result = run_cli("diff", *consolidated)
    assert result.code == 1
    line = next(x for x in result.stdout.splitlines() if "tensors match" in x)
    whole, parts = _summary_counts(line)
    assert whole == 6
    assert sum(parts) == whole, line
    assert "dtype" not in line.split(";")[0]


def test_the_verdict_counts_add_up_with_values_only(run_cli, consolidated):
    result = run_cli("diff", *consolidated, "--values-only")
    assert result.code == 0, result.stdout
    line = next(x for x in result.stdout.splitlines() if x.startswith("match within"))
    whole, parts = _summary_counts(line.split(": ", 1)[1])
    assert whole == 7
    assert sum(parts) == whole, line


# --- item 7: docs where people look ----------------------------------------------------------


def test_man_piped_is_text_that_grep_finds_options_in(run_cli):
    result = run_cli("man", "verify")  # stdout is a pipe here
    assert result.code == 0, result.stderr
    assert "\\-" not in result.stdout
    assert not [line for line in result.stdout.splitlines() if line.startswith(".")]
    found = [line for line in result.stdout.splitlines() if "--format" in line]
    assert found
    assert any(line.strip().startswith("--format [text|json|sarif]") for line in found)
    assert max(map(len, result.stdout.splitlines())) <= COLUMNS
    roff = run_cli("man", "verify", "--roff").stdout
    assert ".TP" in roff
    assert "\\-\\-format" in roff


def _help_words(command) -> set[str]:
    """Every word of a command's own help texts (its description, its options')."""
    import click

    texts = [command.help or "", command.epilog or ""]
    texts += [p.help or "" for p in command.params if isinstance(p, click.Option)]
    return {word for text in texts for word in text.split() if word != "\b"}


@pytest.mark.parametrize("name", [None, *COMMAND_NAMES])
def test_help_at_80_columns_wraps_at_words_and_keeps_examples_inside(name):
    import click

    from ckptctl.cli import cli

    args = ["--help"] if name is None else [name, "--help"]
    run = run_on_terminal(*args, columns=COLUMNS, stdout_too=True)
    assert run.code == 0, run.terminal
    lines = run.lines()
    assert lines
    too_wide = [line for line in lines if len(line) > COLUMNS]
    assert not too_wide
    shown = {word for line in lines for word in line.split()}
    command = cli if name is None else cli.get_command(click.Context(cli), name)
    broken = sorted(_help_words(command) - shown)
    assert not broken  # a word cut in two is shown as two words that are not its own


def test_hash_help_names_what_force_overwrites(run_cli):
    text = run_cli("hash", "--help").stdout
    force = next(line for line in text.splitlines() if "--force" in line)
    assert "MANIFEST" in force
    assert "DST" not in text


# --- item 8: an unused tensor is named as the source file has it, with the --exclude ---------

PORTS = VALID / "ports"


def test_unused_tensors_carry_their_source_names_and_the_exclude_that_drops_them(run_cli, tmp_path):
    args = ["convert", RESNET, tmp_path / "r.bpk", "-a", "pytorch-to-burn"]
    args += ["--target", PORTS / "resnet_target.bpk"]
    result = run_cli(*args, "--json")
    assert result.code == 0, result.stderr
    summary = json.loads(result.stdout)["summary"]
    with open_checkpoint(RESNET) as ckpt:
        source_names = {e.name for e in ckpt.entries()}
    assert summary["unused_sources"]
    assert set(summary["unused_sources"]) <= source_names
    assert "layer2.0.downsample.1.num_batches_tracked" in summary["unused_sources"]
    text = run_cli(*args, "--force")
    assert "layer2.0.downsample.1.num_batches_tracked" in text.stderr
    assert "downsample.0.num_batches_tracked" not in text.stderr  # in neither file
    exclude = summary["unused_exclude"]
    assert f"--exclude '{exclude}'" in text.stderr
    dropped = run_cli(*args, "--force", "--exclude", exclude, "--json")
    assert dropped.code == 0, dropped.stderr
    after = json.loads(dropped.stdout)["summary"]
    assert after["counts"]["unused"] == 0
    assert after["counts"]["applied"] == summary["counts"]["applied"]


# --- item 8: diff of a fine-tune: relative change and cosine per tensor; --filter ------------


@pytest.fixture
def finetune(tmp_path):
    """A base model and its fine-tune: a tensor of three and a bit 1 Mi-element chunks whose
    first two chunks did not move (the changed part comes last), a moved bias, a frozen one."""
    from ckptctl.ops._compare import CHUNK_ELEMENTS

    rng = np.random.default_rng(8)
    big = rng.standard_normal(3 * CHUNK_ELEMENTS + 5).astype(np.float32)
    tuned_big = big.copy()
    tuned_big[2 * CHUNK_ELEMENTS :] += np.float32(0.01) * rng.standard_normal(
        CHUNK_ELEMENTS + 5
    ).astype(np.float32)
    base = {"enc.weight": big, "enc.bias": np.ones(4, np.float32), "head.bias": np.ones(3, "<f4")}
    tuned = dict(base)
    tuned["enc.weight"] = tuned_big
    tuned["enc.bias"] = np.array([1.0, 0.5, 2.0, -1.0], np.float32)
    save_file(base, str(tmp_path / "base.safetensors"))
    save_file(tuned, str(tmp_path / "tuned.safetensors"))
    return tmp_path / "base.safetensors", tmp_path / "tuned.safetensors", base, tuned


def _expected(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    norm_a, norm_b = np.linalg.norm(a64), np.linalg.norm(b64)
    return float(np.linalg.norm(a64 - b64) / norm_a), float(a64 @ b64 / (norm_a * norm_b))


def test_diff_gives_relative_change_and_cosine_per_tensor(run_cli, finetune):
    base_path, tuned_path, base, tuned = finetune
    result = run_cli("diff", base_path, tuned_path, "--json")
    assert result.code == 1
    rows = {t["name"]: t for t in json.loads(result.stdout)["tensors"]}
    for name in ("enc.weight", "enc.bias"):
        change, cosine = _expected(base[name], tuned[name])
        assert rows[name]["relative_change"] == pytest.approx(change, rel=1e-9), name
        assert rows[name]["cosine"] == pytest.approx(cosine, rel=1e-12), name
    assert rows["head.bias"]["relative_change"] == 0
    assert rows["head.bias"]["cosine"] == 1
    text = run_cli("diff", base_path, tuned_path).stdout
    assert "rel change" in text
    assert "cosine" in text


def test_diff_filter_compares_only_matching_tensors(run_cli, finetune):
    base_path, tuned_path, _, _ = finetune
    result = run_cli("diff", base_path, tuned_path, "--filter", "bias$", "--json")
    report = json.loads(result.stdout)
    assert sorted(t["name"] for t in report["tensors"]) == ["enc.bias", "head.bias"]
    assert report["only_in_a"] == report["only_in_b"] == []
    same = run_cli("diff", base_path, tuned_path, "--filter", "^head\\.")
    assert same.code == 0, same.stdout
    bad = run_cli("diff", base_path, tuned_path, "--filter", "(")
    assert bad.code == 2

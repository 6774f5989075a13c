"""``ls --tree`` (issue 27, item 1): the module hierarchy from tensor names alone.

Expected totals are computed here from the arrays the files were written from (sums over the
names below a prefix), never from ckptctl's output.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from safetensors.numpy import save_file

from ckptctl.formats import open_checkpoint, save_checkpoint


def _arrays() -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {"model.embed.weight": np.zeros((10, 4), "<f4")}
    for i in range(12):
        width = 6 if i == 7 else 4  # block 7 differs: the runs are {0..6}, 7, {8..11}
        out[f"model.layers.{i}.attn.weight"] = np.zeros((width, 4), "<f4")
        out[f"model.layers.{i}.attn.bias"] = np.zeros(width, "<f4")
        out[f"model.layers.{i}.norm.weight"] = np.zeros(4, "<f2")
    out["model.norm.weight"] = np.zeros(4, "<f4")
    out["lm_head.weight"] = np.zeros((10, 4), "<f4")
    return out


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file(_arrays(), str(path))
    return path


def _tree(run_cli, *args):
    result = run_cli("ls", *args, "--json")
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)["tree"]


def _find(node, path):
    if node.get("path") == path:
        return node
    for child in node.get("children", []):
        found = _find(child, path)
        if found is not None:
            return found
    return None


def _below(prefix: str) -> tuple[int, int, int]:
    arrays = _arrays()
    names = [n for n in arrays if n == prefix or n.startswith(prefix + ".")]
    return (len(names), sum(arrays[n].size for n in names), sum(arrays[n].nbytes for n in names))


def test_totals_per_module_are_the_sums_below_it(run_cli, model):
    tree = _tree(run_cli, model, "--tree", "--expand")
    everything = _arrays().values()
    assert (tree["tensors"], tree["parameters"], tree["nbytes"]) == (
        len(everything),
        sum(a.size for a in everything),
        sum(a.nbytes for a in everything),
    )
    for path in ("model", "model.layers", "model.layers.7", "model.layers.11.attn", "lm_head"):
        node = _find(tree, path)
        assert node is not None, path
        assert (node["tensors"], node["parameters"], node["nbytes"]) == _below(path), path


def test_siblings_sorted_by_name_are_in_natural_order(run_cli, model):
    layers = _find(_tree(run_cli, model, "--tree", "--expand", "--sort", "name"), "model.layers")
    assert [c["name"] for c in layers["children"]] == [str(i) for i in range(12)]
    model_node = _find(_tree(run_cli, model, "--tree", "--expand", "--sort", "name"), "model")
    assert [c["name"] for c in model_node["children"]] == ["embed", "layers", "norm"]


def test_identical_blocks_collapse_around_the_one_that_differs(run_cli, model):
    layers = _find(_tree(run_cli, model, "--tree"), "model.layers")
    runs = [(c["name"], c.get("repeat", 1)) for c in layers["children"]]
    assert runs == [("{0..6}", 7), ("7", 1), ("{8..11}", 4)]
    first = layers["children"][0]
    assert first["indices"] == list(range(7))
    # totals of all seven blocks; below it, the first block itself
    blocks = [_below(f"model.layers.{i}") for i in range(7)]
    assert first["parameters"] == sum(b[1] for b in blocks)
    assert [c["path"] for c in first["children"]] == ["model.layers.0.attn", "model.layers.0.norm"]
    assert first["children"][0]["parameters"] == _below("model.layers.0.attn")[1]


def test_a_module_list_of_one_run_is_one_line(run_cli, tmp_path):
    save_file({f"h.{i}.w": np.zeros(3, "<f4") for i in range(32)}, str(tmp_path / "m.safetensors"))
    text = run_cli("ls", tmp_path / "m.safetensors", "--tree").stdout
    assert re.search("^h\\.\\{0\\.\\.31\\} \u00d732 +32 +96 +384 B", text, re.M), text
    assert "└── w" in text


def test_depth_shows_totals_without_children(run_cli, model):
    tree = _tree(run_cli, model, "--tree", "--depth", "2")
    layers = _find(tree, "model.layers")
    assert layers["children"] == []
    assert layers["hidden"] == 12
    assert layers["parameters"] == _below("model.layers")[1]
    # --depth alone implies --tree
    assert _tree(run_cli, model, "--depth", "1")["children"][0]["children"] == []


def test_the_tree_is_the_same_for_every_format(run_cli, model, tmp_path):
    with open_checkpoint(model) as ckpt:
        entries = list(reversed(ckpt.entries()))  # another storage order
        save_checkpoint(tmp_path / "model.bpk", entries)
        save_checkpoint(tmp_path / "model.pt", entries)
    trees = [
        _tree(run_cli, tmp_path / f"model.{ext}", "--tree", "--sort", "name")
        for ext in ("safetensors", "bpk", "pt")
    ]
    assert trees[0] == trees[1] == trees[2]


def test_the_flat_tensor_list_stays_in_the_json(run_cli, model):
    result = json.loads(run_cli("ls", model, "--tree", "--json").stdout)
    assert len(result["tensors"]) == len(_arrays())


def test_tied_tensors_count_once_with_a_mark(run_cli):
    from tests.conftest import VALID

    # shared_storage.pt: written by torch (make_fixtures.py), names listed in truth.json
    tree = _tree(run_cli, VALID / "pytorch" / "shared_storage.pt", "--tree")
    listing = json.loads(run_cli("ls", VALID / "pytorch" / "shared_storage.pt", "--json").stdout)
    leaves = []

    def walk(node):
        if "dtype" in node:
            leaves.append(node)
        for child in node.get("children", []):
            walk(child)

    walk(tree)
    tied = [leaf for leaf in leaves if "tied_to" in leaf]
    assert tied, leaves
    for leaf in tied:
        assert leaf["parameters"] == 0
        assert leaf["nbytes"] == 0
    counted = sum(leaf["nbytes"] for leaf in leaves)
    assert counted < sum(t["nbytes"] for t in listing["tensors"])
    text = run_cli("ls", VALID / "pytorch" / "shared_storage.pt", "--tree").stdout
    assert "tied to " in text


def test_ascii_branches_when_the_output_is_not_utf8(model):
    import io

    from rich.console import Console

    from ckptctl.ops.inspect import list_tensors
    from ckptctl.report.render import render

    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="latin-1")
    render(list_tensors(model, tree=True), Console(file=stream, width=100, no_color=True))
    stream.flush()
    text = raw.getvalue().decode("latin-1")
    assert "`-- " in text
    assert "├" not in text
    assert "{0..6} x7" in text


def test_bad_depth_is_a_usage_error(run_cli, model):
    result = run_cli("ls", model, "--tree", "--depth", "0")
    assert result.code == 2

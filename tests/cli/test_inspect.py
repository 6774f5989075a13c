"""``ls`` and ``header``: text and JSON against golden files, and the contract's JSON shapes."""

from __future__ import annotations

import json

import pytest

from tests.conftest import GOLDEN, REPO, check_golden

CASES = [
    "fixtures/valid/burnpack/net.bpk",
    "fixtures/valid/burnpack/mixed.bpk",
    "fixtures/valid/burnpack/meta_scalars.bpk",
    "fixtures/valid/safetensors/tiny.safetensors",
    "fixtures/valid/safetensors/bf16.safetensors",
    "fixtures/valid/safetensors/sharded/model.safetensors.index.json",
    "fixtures/valid/pytorch/min_zip.pt",
]


def _case_name(path: str) -> str:
    return path.rsplit("/", 1)[1].replace(".", "_")


def test_header_of_a_sharded_index_lists_its_shards(run_cli, in_repo):
    path = "fixtures/valid/safetensors/sharded/model.safetensors.index.json"
    report = json.loads(run_cli("header", path, "--json").stdout)
    assert report["format"] == "safetensors-index"
    assert [s["tensors"] for s in report["header"]["shards"]] == [2, 2]
    assert all(s["bytes"] > 0 for s in report["header"]["shards"])
    assert "run ckptctl header on a shard" in run_cli("header", path).stdout


@pytest.fixture
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


@pytest.mark.parametrize("path", CASES)
@pytest.mark.parametrize("command", ["ls", "header"])
@pytest.mark.parametrize("as_json", [False, True])
def test_golden_output(run_cli, in_repo, update_golden, command, path, as_json):
    args = [command, path] + (["--json"] if as_json else [])
    result = run_cli(*args)
    assert result.code == 0, result.stderr
    assert result.stderr == ""
    ext = "json" if as_json else "txt"
    check_golden(result.stdout, GOLDEN / command / f"{_case_name(path)}.{ext}", update_golden)


@pytest.mark.parametrize("path", CASES)
def test_header_regions_tile_the_file(run_cli, in_repo, path):
    report = json.loads(run_cli("header", path, "--json").stdout)
    size = (REPO / path).stat().st_size
    assert report["file_size"] == size
    position = 0
    for region in report["regions"]:
        assert region["start"] == position
        assert region["end"] >= region["start"]
        assert region["kind"] in {"header", "metadata", "padding", "tensor", "other"}
        if region["kind"] == "tensor":
            assert region["name"]
        position = region["end"]
    assert position == size


def test_net_burnpack_accounts_for_all_792_bytes(run_cli, in_repo):
    report = json.loads(run_cli("header", "fixtures/valid/burnpack/net.bpk", "--json").stdout)
    assert report["file_size"] == 792
    by_kind = report["bytes_by_kind"]
    assert by_kind == {"header": 10, "metadata": 210, "padding": 488, "tensor": 84}
    text = run_cli("header", "fixtures/valid/burnpack/net.bpk").stdout
    assert "792 bytes = 10 header + 210 metadata + 488 padding + 84 tensor" in text
    assert "256-byte boundary" in text


def test_ls_json_follows_the_contract(run_cli, in_repo):
    report = json.loads(run_cli("ls", "fixtures/valid/burnpack/net.bpk", "--json").stdout)
    assert report["schema_version"] == 1
    assert report["format"] == "burnpack"
    assert report["path"] == "fixtures/valid/burnpack/net.bpk"
    assert report["tensors"] == [
        {"name": "fc.weight", "dtype": "F32", "shape": [4, 3], "parameters": 12, "nbytes": 48,
         "param_id": 14101554053607715927},
        {"name": "fc.bias", "dtype": "F32", "shape": [3], "parameters": 3, "nbytes": 12,
         "param_id": 1234567890123456789},
        {"name": "head.weight", "dtype": "F32", "shape": [3, 2], "parameters": 6, "nbytes": 24,
         "param_id": 9876543210987654321},
    ]  # fmt: skip
    assert report["metadata"] == {}


def test_ls_filter_sort_and_state_key(run_cli, in_repo):
    path = "fixtures/valid/burnpack/net.bpk"
    names = lambda r: [t["name"] for t in json.loads(r.stdout)["tensors"]]  # noqa: E731
    assert names(run_cli("ls", path, "--json", "--sort", "name")) == [
        "fc.bias",
        "fc.weight",
        "head.weight",
    ]
    assert names(run_cli("ls", path, "--json", "--sort", "size")) == [
        "fc.weight",
        "head.weight",
        "fc.bias",
    ]
    assert names(run_cli("ls", path, "--json", "--filter", "^fc")) == ["fc.weight", "fc.bias"]
    assert names(run_cli("ls", path, "--json", "--state-key", "fc")) == ["weight", "bias"]
    missing = run_cli("ls", path, "--state-key", "model")
    assert missing.code == 2
    assert "no tensors under state key 'model'" in missing.stderr
    bad = run_cli("ls", path, "--filter", "(")
    assert bad.code == 2
    assert "--filter" in bad.stderr


def test_ls_escapes_hostile_names(run_cli, tmp_path):
    import numpy as np

    from ckptctl import save_checkpoint
    from tests.strategies import array_entry

    path = tmp_path / "evil.safetensors"
    save_checkpoint(path, [array_entry("ok", np.zeros(1, "<f4"))], {"note": "\x1b[2Jgotcha\u202e"})
    out = run_cli("ls", path).stdout
    assert "\x1b" not in out
    assert "\u202e" not in out
    assert "\\x1b[2Jgotcha\\u202e" in out
    as_json = run_cli("ls", path, "--json").stdout
    assert "\x1b" not in as_json
    assert json.loads(as_json)["metadata"]["note"] == "\x1b[2Jgotcha\u202e"


@pytest.mark.parametrize(
    ("path", "key", "names"),
    [
        ("fixtures/valid/pytorch/nested.pt", "model", ["0.weight", "0.bias", "2.weight", "2.bias"]),
        (
            "fixtures/valid/pytorch/lightning.ckpt",
            "state_dict.model",
            ["0.weight", "0.bias", "2.weight", "2.bias"],
        ),
        (
            "fixtures/valid/pytorch/lightning.ckpt",
            "optimizer_states.0.state.1",
            ["step", "exp_avg", "exp_avg_sq"],
        ),
    ],
)
def test_state_key_descends_to_any_depth(run_cli, in_repo, path, key, names):
    report = json.loads(run_cli("ls", path, "--state-key", key, "--json").stdout)
    assert [t["name"] for t in report["tensors"]] == names
    assert report["state_key"] == key


@pytest.mark.parametrize(
    ("path", "kind", "phrase"),
    [
        ("fixtures/valid/pytorch/min_zip.pt", "state_dict", "a flat state_dict"),
        ("fixtures/valid/pytorch/nested.pt", "nested", "tensors are under 'model' (4)"),
        ("fixtures/valid/pytorch/module.pt", "module", "a pickled FixtureNet object"),
        ("fixtures/valid/pytorch/torchscript.pt", "torchscript", "TorchScript"),
        ("fixtures/valid/pytorch/empty_checkpoint.pt", "empty", "no tensors"),
    ],
)
def test_ls_says_what_a_pt_file_is(run_cli, in_repo, path, kind, phrase):
    assert json.loads(run_cli("ls", path, "--json").stdout)["kind"] == kind
    assert phrase in run_cli("ls", path).stdout

"""``convert`` and ``remap`` end to end: the acceptance cases of issues #2 and #4."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ckptctl import DType, open_checkpoint, save_checkpoint
from tests.conftest import VALID
from tests.strategies import array_entry, make_entry

NET = VALID / "burnpack" / "net.bpk"


def write_st(path, entries, metadata=None):
    save_checkpoint(path, entries, metadata or {}, force=True)
    return path


def load_all(path):
    with open_checkpoint(path) as ckpt:
        return {name: (e.dtype, e.shape, e.load().copy()) for name, e in ckpt.items()}


def test_pytorch_to_burn_transposes_linear_weights(run_cli, tmp_path):
    src = write_st(
        tmp_path / "torch.safetensors",
        [
            array_entry("fc.weight", np.arange(12, dtype="<f4").reshape(3, 4)),
            array_entry("fc.bias", np.array([1, 2, 3], dtype="<f4")),
            array_entry("head.weight", np.arange(6, dtype="<f4").reshape(2, 3)),
        ],
    )
    dst = tmp_path / "burn.bpk"
    result = run_cli("convert", src, dst, "--adapter", "pytorch-to-burn")
    assert result.code == 0, result.stderr
    out = load_all(dst)
    assert out["fc.weight"][1] == (4, 3)
    assert out["fc.weight"][2].reshape(-1).tolist() == [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]
    assert out["head.weight"][1] == (3, 2)
    assert out["fc.bias"][2].tolist() == [1, 2, 3]


def _burn_target(tmp_path, field="fc1"):
    ref = tmp_path / "model.bpk"
    save_checkpoint(
        ref,
        [
            array_entry(f"{field}.weight", np.zeros((4, 3), dtype="<f4")),
            array_entry(f"{field}.bias", np.zeros(3, dtype="<f4")),
            array_entry("head.weight", np.zeros((3, 2), dtype="<f4")),
        ],
    )
    return ref


def test_target_mismatch_suggests_names_and_writes_nothing(run_cli, tmp_path):
    ref = _burn_target(tmp_path)
    dst = tmp_path / "fixed.bpk"
    result = run_cli("convert", NET, dst, "--target", ref)
    assert result.code == 1
    assert not dst.exists()
    assert "Tensor Loading Summary" in result.stdout
    assert "✗ Missing in source:    2 tensors" in result.stdout
    assert "Did you mean: 'fc.bias'?" in result.stdout
    assert "Did you mean: 'fc.weight'?" in result.stdout
    assert "--remap '^fc\\.=fc1.'" in result.stdout


def test_target_with_remap_applies_all_and_keeps_values(run_cli, tmp_path):
    ref = _burn_target(tmp_path)
    dst = tmp_path / "fixed.bpk"
    result = run_cli("convert", NET, dst, "--target", ref, "--remap", r"^fc\.=fc1.", "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["summary"]["counts"]["applied"] == 3
    assert report["summary"]["ok"] is True
    before, after = load_all(NET), load_all(dst)
    assert sorted(after) == ["fc1.bias", "fc1.weight", "head.weight"]
    for old, new in [("fc.weight", "fc1.weight"), ("fc.bias", "fc1.bias")]:
        np.testing.assert_array_equal(before[old][2], after[new][2])
    np.testing.assert_array_equal(before["head.weight"][2], after["head.weight"][2])


def test_allow_partial_writes_despite_missing(run_cli, tmp_path):
    ref = _burn_target(tmp_path)
    dst = tmp_path / "partial.bpk"
    result = run_cli("convert", NET, dst, "--target", ref, "--allow-partial")
    assert result.code == 1
    assert dst.exists()


def _llama(tmp_path, dtype):
    rng = np.random.default_rng(1)
    entries = []
    for name, shape in [
        ("model.embed_tokens.weight", (10, 4)),
        ("model.layers.0.self_attn.k_proj.weight", (2, 4)),
        ("model.layers.0.self_attn.q_proj.weight", (4, 4)),
        ("model.layers.0.input_layernorm.weight", (4,)),
        ("lm_head.weight", (10, 4)),
    ]:
        values = rng.standard_normal(shape).astype(np.float32)
        bits = (values.view(np.uint32) >> 16).astype("<u2") if dtype is DType.BF16 else values
        entries.append(make_entry(name, dtype, shape, bits.tobytes()))
    return write_st(tmp_path / "llama.safetensors", entries)


LLAMA_RULES = [
    "--remap",
    r"^model\.=",
    "--remap",
    r"\.self_attn\.=.attn.",
    "--remap",
    r"_layernorm\.weight$=_norm.gamma",
]


def test_llama_rules_rename_and_keep_bytes(run_cli, tmp_path):
    src = _llama(tmp_path, DType.F32)
    dst = tmp_path / "llama.bpk"
    result = run_cli("convert", src, dst, *LLAMA_RULES)
    assert result.code == 0, result.stderr
    before, after = load_all(src), load_all(dst)
    assert sorted(after) == [
        "embed_tokens.weight",
        "layers.0.attn.k_proj.weight",
        "layers.0.attn.q_proj.weight",
        "layers.0.input_norm.gamma",
        "lm_head.weight",
    ]
    np.testing.assert_array_equal(
        before["model.layers.0.self_attn.k_proj.weight"][2],
        after["layers.0.attn.k_proj.weight"][2],
    )
    np.testing.assert_array_equal(
        before["model.layers.0.input_layernorm.weight"][2], after["layers.0.input_norm.gamma"][2]
    )


def test_llama_bf16_to_burn_f32(run_cli, tmp_path):
    src = _llama(tmp_path, DType.BF16)
    dst = tmp_path / "llama.bpk"
    args = [*LLAMA_RULES, "--adapter", "pytorch-to-burn", "--adapter", "cast:f32"]
    result = run_cli("convert", src, dst, *args)
    assert result.code == 0, result.stderr
    before, after = load_all(src), load_all(dst)
    assert {d for d, _, _ in after.values()} == {DType.F32}
    k_before = before["model.layers.0.self_attn.k_proj.weight"][2]
    k_after = after["layers.0.attn.k_proj.weight"]
    assert k_after[1] == (4, 2)
    expected = (k_before.astype(np.uint32) << 16).view(np.float32).T
    np.testing.assert_array_equal(k_after[2], expected)
    emb = after["embed_tokens.weight"]
    assert emb[1] == (10, 4)
    np.testing.assert_array_equal(
        emb[2], (before["model.embed_tokens.weight"][2].astype(np.uint32) << 16).view(np.float32)
    )


def test_dry_run_prints_plan_and_writes_nothing(run_cli, tmp_path):
    src = _llama(tmp_path, DType.F32)
    dst = tmp_path / "never.bpk"
    result = run_cli("convert", src, dst, *LLAMA_RULES, "-a", "pytorch-to-burn", "--dry-run")
    assert result.code == 0, result.stderr
    assert not dst.exists()
    assert "nothing written (--dry-run)" in result.stdout
    assert "layers.0.attn.k_proj.weight" in result.stdout
    assert "q_proj" in result.stderr  # the square weight decided by its name only is flagged
    plan = json.loads(run_cli("convert", src, dst, *LLAMA_RULES, "-a", "pytorch-to-burn",
                              "--dry-run", "--json").stdout)["plan"]  # fmt: skip
    assert not dst.exists()
    k = next(r for r in plan if r["source"] == "model.layers.0.self_attn.k_proj.weight")
    assert k["target"] == "layers.0.attn.k_proj.weight"
    assert k["shape_after"] == [4, 2]
    assert any(a.startswith("transpose [2, 4] -> [4, 2]") for a in k["actions"])
    emb = next(r for r in plan if r["source"] == "model.embed_tokens.weight")
    assert emb["shape_after"] == [10, 4]


def test_remap_command_and_collision(run_cli, tmp_path):
    src = _llama(tmp_path, DType.F32)
    dst = tmp_path / "renamed.safetensors"
    result = run_cli("remap", src, dst, "--rule", r"^model\.=")
    assert result.code == 0, result.stderr
    assert "layers.0.input_layernorm.weight" in load_all(dst)
    clash = run_cli("remap", src, tmp_path / "clash.safetensors", "--rule", r"\.[kq]_proj=.proj")
    assert clash.code == 2
    assert "would both be named" in clash.stderr
    assert not (tmp_path / "clash.safetensors").exists()


def test_bad_rule_is_usage_error(run_cli, tmp_path):
    result = run_cli("remap", NET, tmp_path / "x.bpk", "--rule", "(unclosed=x")
    assert result.code == 2
    assert "rule" in result.stderr


def test_unknown_adapter_is_usage_error(run_cli, tmp_path):
    result = run_cli("convert", NET, tmp_path / "x.bpk", "--adapter", "nope")
    assert result.code == 2
    assert "pytorch-to-burn" in result.stderr


def test_burnpack_copy_is_byte_identical(run_cli, tmp_path):
    for path in sorted((VALID / "burnpack").glob("*.bpk")):
        if "legacy_0_19" in path.name or "bool_legacy" in path.name:
            continue  # rewritten in the current aligned layout and bool encoding on purpose
        dst = tmp_path / path.name
        result = run_cli("convert", path, dst, "--force")
        assert result.code == 0, (path, result.stderr)
        assert dst.read_bytes() == path.read_bytes(), path.name


def test_safetensors_burnpack_round_trip_is_identity(run_cli, tmp_path):
    src = VALID / "safetensors" / "tiny.safetensors"
    mid, back = tmp_path / "mid.bpk", tmp_path / "back.safetensors"
    assert run_cli("convert", src, mid).code == 0
    assert run_cli("convert", mid, back).code == 0
    assert back.read_bytes() == src.read_bytes()


def test_refuses_overwrite_without_force_and_never_writes_over_source(run_cli, tmp_path):
    dst = tmp_path / "out.bpk"
    dst.write_bytes(b"keep me")
    result = run_cli("convert", NET, dst)
    assert result.code == 5
    assert "already exists" in result.stderr
    assert "--force" in result.stderr
    assert dst.read_bytes() == b"keep me"
    copy = tmp_path / "net.bpk"
    copy.write_bytes(NET.read_bytes())
    same = run_cli("convert", copy, copy, "--force")
    assert same.code == 5
    assert copy.read_bytes() == NET.read_bytes()


def test_failed_conversion_leaves_destination(run_cli, tmp_path):
    src = write_st(
        tmp_path / "fp8.safetensors", [make_entry("x", DType.F8_E4M3, (2,), b"\x38\x38")]
    )
    dst = tmp_path / "out.bpk"
    dst.write_bytes(b"original")
    result = run_cli("convert", src, dst, "--force")
    assert result.code == 4
    assert result.stderr.startswith(f"ckptctl: error: {dst}: tensor 'x' has dtype F8_E4M3")
    assert "hint: cast it first" in result.stderr
    assert dst.read_bytes() == b"original"
    assert sorted(os.listdir(tmp_path)) == ["fp8.safetensors", "out.bpk"]


def test_unknown_output_extension(run_cli, tmp_path):
    result = run_cli("convert", NET, tmp_path / "out.npz")
    assert result.code == 2
    assert ".safetensors" in result.stderr


@pytest.mark.parametrize("fmt", [".safetensors", ".bpk"])
def test_same_input_same_output_bytes(run_cli, tmp_path, fmt):
    a, b = tmp_path / f"a{fmt}", tmp_path / f"b{fmt}"
    assert run_cli("convert", NET, a, "-a", "burn-to-pytorch").code == 0
    assert run_cli("convert", NET, b, "-a", "burn-to-pytorch").code == 0
    assert a.read_bytes() == b.read_bytes()


def test_whole_pickled_model_decisions_come_from_class_names(run_cli, tmp_path):
    src = VALID / "pytorch" / "module.pt"
    dst = tmp_path / "module.bpk"
    plan = json.loads(run_cli("convert", src, dst, "-a", "pytorch-to-burn", "--json").stdout)
    assert plan["written"] is True
    actions = {row["source"]: " ".join(row["actions"]) for row in plan["plan"]}
    assert "class Linear from file" in actions["fc.weight"]
    assert "class Linear from file" in actions["head.weight"]
    assert "class LayerNorm from file" in actions["norm.weight"]
    assert "class BatchNorm2d from file" in actions["bn.bias"]
    assert "class Embedding from file" in actions["embed.weight"]
    assert actions["conv.weight"] == ""  # convolutions are copied untouched
    before, after = load_all(src), load_all(dst)
    assert "norm.gamma" in after
    assert "norm.beta" in after
    assert "bn.gamma" in after
    assert "bn.running_mean" in after
    assert "norm.weight" not in after
    np.testing.assert_array_equal(after["fc.weight"][2], before["fc.weight"][2].T)
    np.testing.assert_array_equal(after["head.weight"][2], before["head.weight"][2].T)
    np.testing.assert_array_equal(after["embed.weight"][2], before["embed.weight"][2])
    np.testing.assert_array_equal(after["conv.weight"][2], before["conv.weight"][2])
    np.testing.assert_array_equal(after["norm.gamma"][2], before["norm.weight"][2])


def test_sharded_output_round_trips_and_verifies(run_cli, tmp_path):
    src = VALID / "pytorch" / "module.pt"
    dst = tmp_path / "model.safetensors"
    result = run_cli("convert", src, dst, "--max-shard-size", "200B")
    assert result.code == 0, result.stderr
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ]
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    before = load_all(src)
    assert index["metadata"]["total_size"] == sum(v[2].nbytes for v in before.values())
    after = load_all(tmp_path / "model.safetensors.index.json")
    assert sorted(after) == sorted(before)
    for name, (dtype, _, values) in before.items():
        assert after[name][0] is dtype
        np.testing.assert_array_equal(after[name][2], values)
    assert run_cli("verify", tmp_path / "model.safetensors.index.json").code == 0
    again = run_cli("convert", src, dst, "--max-shard-size", "200B")
    assert again.code == 5  # the shards exist now; --force is needed


def test_sharded_failure_leaves_nothing(run_cli, tmp_path):
    src = write_st(
        tmp_path / "in.pt",
        [
            array_entry("a", np.zeros(64, "<f4")),
            make_entry("b", DType.C128, (1,), bytes(16)),  # safetensors cannot hold C128
        ],
    )
    out = tmp_path / "out"
    out.mkdir()
    result = run_cli("convert", src, out / "m.safetensors", "--max-shard-size", "100B")
    assert result.code in (3, 4)
    assert list(out.iterdir()) == []


def test_bad_shard_size_is_usage_error(run_cli, tmp_path):
    result = run_cli("convert", NET, tmp_path / "m.safetensors", "--max-shard-size", "lots")
    assert result.code == 2
    assert "invalid size" in result.stderr


def test_progress_reports_every_tensor_once_with_the_total(tmp_path):
    from ckptctl import ConvertOptions, convert

    calls: list[tuple[int, int | None]] = []
    convert(
        NET,
        tmp_path / "p.safetensors",
        ConvertOptions(progress=lambda n, total: calls.append((n, total))),
    )
    assert calls[0] == (0, 84)  # the total, before the first tensor is read
    assert sorted(n for n, _ in calls[1:]) == [12, 24, 48]
    assert {total for _, total in calls} == {84}


def test_nothing_is_lost_silently(run_cli, tmp_path):
    """ParamIds, scalars and metadata the output format cannot hold are named in a warning."""
    ids = run_cli("convert", NET, tmp_path / "n.safetensors")
    assert ids.code == 0
    assert "warning: 3 ParamIds are not kept: safetensors has no place for them" in ids.stderr
    scalars = run_cli("convert", VALID / "burnpack" / "meta_scalars.bpk", tmp_path / "m.pt")
    assert scalars.code == 0
    assert "warning: 6 burnpack scalars are not kept" in scalars.stderr
    assert "warning: 2 metadata entries are not kept" in scalars.stderr
    kept = run_cli("convert", VALID / "burnpack" / "meta_scalars.bpk", tmp_path / "m.bpk")
    assert "warning" not in kept.stderr


def test_nested_source_without_state_key_warns(run_cli, tmp_path):
    src = VALID / "pytorch" / "nested.pt"
    result = run_cli("convert", src, tmp_path / "all.safetensors")
    assert result.code == 0
    assert "warning: the source is a nested checkpoint" in result.stderr
    assert "'model' (4), 'optimizer' (12)" in " ".join(result.stderr.split())  # unwrap
    model = run_cli("convert", src, tmp_path / "model.safetensors", "--state-key", "model")
    assert "nested checkpoint" not in model.stderr
    # what stays outside the key is counted, never dropped without a word (#30)
    assert warnings_of(model.stderr) == [
        "warning: 12 of 16 tensors are outside --state-key model and not written "
        "(optimizer.state.0.step, optimizer.state.0.exp_avg, optimizer.state.0.exp_avg_sq, ...)"
    ]


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning:")]

"""``ckptctl diff`` end to end: the Done-when cases of issue #5."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from ckptctl import open_checkpoint, save_checkpoint
from ckptctl.ops.convert import convert
from tests.conftest import REPO, VALID
from tests.strategies import array_entry

TINY = VALID / "safetensors" / "tiny.safetensors"
NET = VALID / "burnpack" / "net.bpk"


def copy_as(src, dst, **rename):
    """Rewrite ``src`` as ``dst`` (format by extension) with ckptctl's own reader and writer."""
    with open_checkpoint(src) as ckpt:
        entries = [e.renamed(rename.get(e.name, e.name)) for e in ckpt.values()]
        save_checkpoint(dst, entries, force=True)
    return dst


def perturbed(src, dst, name, index, delta):
    with open_checkpoint(src) as ckpt:
        entries = []
        for e in ckpt.values():
            if e.name == name:
                values = e.load().copy()
                values.reshape(-1)[index] += delta
                e = array_entry(e.name, values, e.dtype)
            entries.append(e)
        save_checkpoint(dst, entries, force=True)
    return dst


# --- a file against itself in another format exits 0 ---------------------------------------


def test_safetensors_against_its_burnpack_copy(run_cli, tmp_path):
    bpk = copy_as(TINY, tmp_path / "tiny.bpk")
    result = run_cli("diff", TINY, bpk)
    assert result.code == 0, result
    assert "4 tensors match (4 identical)" in result.stdout
    assert result.stdout.rstrip().endswith(
        "identical: 4 tensors, same names, dtypes, shapes and values (rtol=1e-05, atol=1e-08)"
    )


def test_burnpack_against_its_safetensors_copy(run_cli, tmp_path):
    st = copy_as(NET, tmp_path / "net.safetensors")
    result = run_cli("diff", NET, st, "--json")
    assert result.code == 0, result
    out = json.loads(result.stdout)
    assert out["identical"] is True
    assert out["format_a"] == "burnpack"
    assert out["format_b"] == "safetensors"
    assert [t["status"] for t in out["tensors"]] == ["identical"] * 3


@pytest.mark.parametrize(
    ("fixture", "ext"),
    [
        ("min_zip.pt", "safetensors"),
        ("views.pt", "safetensors"),  # strided views: computed entries, not file ranges
        ("min_legacy.pt", "bpk"),
        ("shared_storage.pt", "safetensors"),
        ("dtypes.pt", "pt"),  # C64/C128 and FP8 have no safetensors/burnpack code everywhere
    ],
)
def test_pytorch_fixture_against_its_conversion(run_cli, tmp_path, fixture, ext):
    src = VALID / "pytorch" / fixture
    dst = tmp_path / f"converted.{ext}"
    convert(src, dst)
    truth = json.loads((VALID / "pytorch" / "truth.json").read_text())["files"][fixture]
    result = run_cli("diff", src, dst, "--json")
    assert result.code == 0, result
    out = json.loads(result.stdout)
    assert [t["name"] for t in out["tensors"]] == [t["name"] for t in truth["tensors"]]
    assert {t["status"] for t in out["tensors"]} == {"identical"}
    assert run_cli("diff", dst, src).code == 0


def test_nested_pytorch_with_state_key(run_cli, tmp_path):
    src = VALID / "pytorch" / "nested.pt"
    dst = tmp_path / "model.safetensors"
    convert(src, dst)  # keeps the dotted names: model.0.weight ...
    flat = tmp_path / "flat.safetensors"
    from ckptctl.ops.convert import ConvertOptions

    convert(src, flat, ConvertOptions(state_key="model"))
    assert run_cli("diff", src, flat, "--state-key", "model").code == 0
    assert run_cli("diff", flat, dst, "--state-key-b", "model").code == 0
    result = run_cli("diff", src, flat)
    assert result.code == 1
    assert "only in A (16):" in result.stdout


# --- differences exit 1 and say where and how much -----------------------------------------


def test_perturbed_copy_names_the_tensor_and_the_size_of_the_difference(run_cli, tmp_path):
    other = perturbed(TINY, tmp_path / "other.safetensors", "fc.weight", 5, 0.25)
    result = run_cli("diff", TINY, other)
    assert result.code == 1
    lines = result.stdout.splitlines()
    row = next(line for line in lines if line.startswith("fc.weight"))
    # fc.weight = arange(12): element 5 is 5 -> 5.25; max rel = 0.25 / 5.25
    a = np.arange(12, dtype=np.float64)
    b = a.copy()
    b[5] = 5.25
    change = float(np.linalg.norm(a - b) / np.linalg.norm(a))
    cosine = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert row.split() == [
        "fc.weight",
        "different",
        "F32",
        "[3,",
        "4]",
        "0.25",
        "0.0476",
        f"{change:.3g}",
        f"{cosine:.6g}",
        "1",
        "/",
        "12",
    ]
    assert "3 tensors match (3 identical)" in result.stdout
    assert lines[-1] == "different: 1 of 4 common tensors differ (rtol=1e-05, atol=1e-08)"

    out = json.loads(run_cli("diff", TINY, other, "--json").stdout)
    assert out["identical"] is False
    (changed,) = [t for t in out["tensors"] if t["status"] != "identical"]
    assert changed == {
        "name": "fc.weight",
        "status": "different",
        "dtype_a": "F32",
        "dtype_b": "F32",
        "shape_a": [3, 4],
        "shape_b": [3, 4],
        "numel": 12,
        "max_abs": 0.25,
        "max_rel": 0.25 / 5.25,
        "mismatched": 1,
        "nan_mismatched": 0,
        "relative_change": pytest.approx(change, rel=1e-12),
        "cosine": pytest.approx(cosine, rel=1e-12),
    }


def test_tolerance_options_decide(run_cli, tmp_path):
    # fc.weight[1] = 1 -> 1.0001: |d| = 1e-4 > 1e-8 + 1e-5 * 1.0001
    other = perturbed(TINY, tmp_path / "other.bpk", "fc.weight", 1, 1e-4)
    assert run_cli("diff", TINY, other).code == 1
    assert run_cli("diff", TINY, other, "--atol", "1e-3").code == 0
    assert run_cli("diff", TINY, other, "--rtol", "1e-3").code == 0
    # fc.weight[11] = 11 -> 11.0001: within the default 1e-5 * 11.0001, so "close" passes
    near = perturbed(TINY, tmp_path / "near.bpk", "fc.weight", 11, 1e-4)
    result = run_cli("diff", TINY, near, "--all")
    assert result.code == 0
    assert "fc.weight  close" in result.stdout
    assert run_cli("diff", TINY, near, "--rtol", "0", "--atol", "0").code == 1


def test_module_prefix_suggests_the_rule_that_fixes_it(run_cli, tmp_path):
    ddp = copy_as(
        TINY,
        tmp_path / "ddp.safetensors",
        **{n: f"module.{n}" for n in ("fc.weight", "fc.bias", "step", "mask")},
    )
    result = run_cli("diff", ddp, TINY)
    assert result.code == 1
    assert "  • module.fc.weight\n      Did you mean: 'fc.weight'?" in result.stdout
    assert f"  ckptctl diff {ddp} {TINY} --remap '^module\\.='\n" in result.stdout
    out = json.loads(run_cli("diff", ddp, TINY, "--json").stdout)
    assert out["fixes"] == ["--remap '^module\\.='"]
    # Burn's Jaro window is too narrow for the short "fc.bias"
    # (docs/formats/burn-store.md#did-you-mean), but the verified
    # rule ranks first (issue 13)
    assert out["only_in_a"][:2] == [
        {"name": "module.fc.bias", "suggestion": "fc.bias"},
        {"name": "module.fc.weight", "suggestion": "fc.weight"},
    ]
    fixed = run_cli("diff", ddp, TINY, "--remap", r"^module\.=")
    assert fixed.code == 0, fixed


def test_transposed_weights_and_burn_names(run_cli, tmp_path):
    weight = np.arange(12, dtype="<f4").reshape(3, 4)
    torch_like = tmp_path / "torch.safetensors"
    burn_like = tmp_path / "burn.bpk"
    save_checkpoint(
        torch_like,
        [array_entry("fc.weight", weight), array_entry("norm.weight", np.ones(4, "<f4"))],
    )
    save_checkpoint(
        burn_like,
        [array_entry("fc.weight", weight.T.copy()), array_entry("norm.gamma", np.ones(4, "<f4"))],
    )
    out = json.loads(run_cli("diff", torch_like, burn_like, "--json").stdout)
    (row,) = out["tensors"]
    assert (row["status"], row["shape_a"], row["shape_b"]) == ("transposed", [3, 4], [4, 3])
    assert row["max_abs"] == 0.0
    assert out["fixes"] == ["--adapter pytorch-to-burn"]
    assert out["only_in_a"] == [{"name": "norm.weight", "suggestion": "norm.gamma"}]
    assert run_cli("diff", torch_like, burn_like, "--adapter", "pytorch-to-burn").code == 0


def test_nan_at_the_same_place_is_equal_and_nan_mismatches_are_reported(run_cli, tmp_path):
    nan = float("nan")
    a = tmp_path / "a.safetensors"
    b = tmp_path / "b.bpk"
    c = tmp_path / "c.bpk"
    save_checkpoint(a, [array_entry("x", np.array([nan, 1, 2], "<f4"))])
    save_checkpoint(b, [array_entry("x", np.array([nan, 1, 2], "<f4"))])
    save_checkpoint(c, [array_entry("x", np.array([nan, nan, 2], "<f4"))])
    assert run_cli("diff", a, b).code == 0
    result = run_cli("diff", a, c)
    assert result.code == 1
    assert "1 / 3 (1 NaN)" in result.stdout
    row = json.loads(run_cli("diff", a, c, "--json").stdout)["tensors"][0]
    assert (row["nan_mismatched"], row["mismatched"], row["max_abs"]) == (1, 1, 0.0)


def test_bf16_against_f32_compares_values(run_cli, tmp_path):
    # bf16.safetensors 'bf16' holds 1, -2, 0.5, 3.140625 (written by the safetensors library)
    f32 = tmp_path / "f32.safetensors"
    save_checkpoint(f32, [array_entry("bf16", np.array([1, -2, 0.5, 3.140625], "<f4"))])
    bf16 = tmp_path / "bf16.safetensors"
    with open_checkpoint(VALID / "safetensors" / "bf16.safetensors") as ckpt:
        save_checkpoint(bf16, [ckpt["bf16"]])
    result = run_cli("diff", f32, bf16)
    assert result.code == 1
    assert "dtype" in result.stdout
    assert "F32 → BF16" in result.stdout
    assert f"ckptctl diff {f32} {bf16} --values-only" in result.stdout
    assert run_cli("diff", f32, bf16, "--values-only").code == 0


# --- usage and input errors ----------------------------------------------------------------


def test_bad_options_and_inputs(run_cli, tmp_path):
    bad_tol = run_cli("diff", TINY, TINY, "--rtol", "-1")
    assert bad_tol.code == 2
    assert "Invalid value for '--rtol'" in bad_tol.stderr
    nan_tol = run_cli("diff", TINY, TINY, "--atol", "nan")
    assert nan_tol.code == 2
    assert nan_tol.stderr == (
        "ckptctl: error: a tolerance must be a finite number >= 0, not nan\n"
        "hint: check --atol nan\n"
    )
    assert run_cli("diff", TINY, tmp_path / "missing.bpk").code == 3
    assert run_cli("diff", TINY, TINY, "--state-key", "nope").code == 2
    assert run_cli("diff", TINY, TINY, "--adapter", "nope").code == 2
    assert run_cli("diff", TINY).code == 2
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00" * 64)
    assert run_cli("diff", junk, TINY).code == 3


def test_names_from_files_are_escaped(run_cli, tmp_path):
    # a right-to-left override would disguise the name on a terminal
    a = tmp_path / "a.safetensors"
    save_checkpoint(a, [array_entry("fc\u202e.weight", np.zeros(2, "<f4"))])
    result = run_cli("diff", a, TINY)
    assert result.code == 1
    assert "\u202e" not in result.stdout
    assert "  • fc\\u202e.weight\n" in result.stdout
    assert "\u202e" not in run_cli("diff", a, TINY, "--json").stdout


def test_all_lists_every_tensor(run_cli, tmp_path):
    bpk = copy_as(TINY, tmp_path / "tiny.bpk")
    result = run_cli("diff", TINY, bpk, "--all")
    assert result.code == 0
    names = [line.split()[0] for line in result.stdout.splitlines() if " identical " in line]
    with open_checkpoint(TINY) as ckpt:
        assert names == list(ckpt)  # A's order
    assert sorted(names) == ["fc.bias", "fc.weight", "mask", "step"]


# --- bounded memory on big files -----------------------------------------------------------


def _big_safetensors(path, numel, poke=None):
    """A sparse F32 safetensors file of zeros (optionally one value set), without a big buffer."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [numel], "data_offsets": [0, numel * 4]}})
    header += " " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header.encode())
        start = f.tell()
        f.truncate(start + numel * 4)
        if poke is not None:
            f.seek(start + poke[0] * 4)
            f.write(struct.pack("<f", poke[1]))
    return path


@pytest.mark.slow
@pytest.mark.bounded
@pytest.mark.skipif(not hasattr(os, "wait4"), reason="needs os.wait4 for the child's peak RSS")
def test_big_files_diff_in_bounded_memory(tmp_path):
    numel = 192 * 1024 * 1024  # 768 MiB per file
    a = _big_safetensors(tmp_path / "a.safetensors", numel)
    b = _big_safetensors(tmp_path / "b.safetensors", numel, poke=(numel - 3, 2.5))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckptctl", "diff", str(a), str(b), "--json"],
        stdout=subprocess.PIPE,
        cwd=REPO,
    )
    assert proc.stdout is not None
    with proc.stdout:
        stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 1
    row = json.loads(stdout)["tensors"][0]
    assert (row["max_abs"], row["mismatched"]) == (2.5, 1)
    peak_mib = usage.ru_maxrss / 1024  # kilobytes on Linux
    assert peak_mib < 300, f"peak RSS {peak_mib:.0f} MiB for two 768 MiB files"

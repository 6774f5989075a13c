"""``ckptctl hash`` and ``verify --hashes`` (issue 27, item 4).

Ground truth: ``hashlib.sha256`` of numpy's own C-order little-endian bytes of the arrays the
files were written from (``safetensors.numpy``), never ckptctl's output.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from ckptctl.formats import open_checkpoint, save_checkpoint


def _sha(array: np.ndarray) -> str:
    return "sha256:" + hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


@pytest.fixture
def arrays():
    rng = np.random.default_rng(27)
    return {
        "embed.weight": rng.standard_normal((5, 3)).astype("<f4"),
        "layers.0.bias": rng.standard_normal(7).astype("<f2"),
        "layers.1.bias": np.arange(6, dtype="<i8").reshape(2, 3),
        "mask": np.array([True, False, True]),
        "bits": rng.integers(0, 2**16, 4, dtype=np.uint16),
        "scalar": np.array(2.5, dtype="<f8"),
        "empty": np.zeros((0, 4), dtype="<f4"),
    }


@pytest.fixture
def model(tmp_path, arrays):
    path = tmp_path / "model.safetensors"
    save_file(arrays, str(path))
    return path


def _lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def test_hash_lines_are_sha256_of_the_c_order_bytes(run_cli, model, arrays):
    result = run_cli("hash", model)
    assert result.code == 0, result.stderr
    lines = _lines(result.stdout)
    assert [list(item) for item in lines] == [["name", "dtype", "shape", "digest"]] * len(arrays)
    by_name = {item["name"]: item for item in lines}
    assert set(by_name) == set(arrays)
    for name, array in arrays.items():
        assert by_name[name]["digest"] == _sha(array), name
        assert by_name[name]["shape"] == list(array.shape)
    assert by_name["mask"]["dtype"] == "BOOL"
    assert by_name["layers.0.bias"]["dtype"] == "F16"


def test_the_manifest_is_the_same_for_safetensors_pt_and_bpk(run_cli, model, tmp_path):
    with open_checkpoint(model) as ckpt:
        for ext in (".pt", ".bpk"):
            save_checkpoint(tmp_path / f"model{ext}", ckpt.entries())
    outputs = {ext: run_cli("hash", tmp_path / f"model{ext}").stdout for ext in
               (".safetensors", ".pt", ".bpk")}  # fmt: skip
    assert outputs[".safetensors"]
    # burnpack and .pt keep the order they were written in: compare as sets of lines
    assert {frozenset(v.splitlines()) for v in outputs.values()} == {
        frozenset(outputs[".safetensors"].splitlines())
    }


def test_a_tensor_larger_than_a_chunk_hashes_like_its_bytes(run_cli, tmp_path):
    big = np.random.default_rng(1).standard_normal((9, 1 << 18)).astype("<f4")  # 9 MiB
    save_file({"big": big}, str(tmp_path / "big.safetensors"))
    (line,) = _lines(run_cli("hash", tmp_path / "big.safetensors").stdout)
    assert line["digest"] == _sha(big)


def _truth_cases():
    from tests.conftest import VALID

    # truth.json: written by fixtures/make_fixtures.py with torch, per tensor the sha256 of its
    # C-order little-endian bytes as torch sees them (views gathered, conj/neg resolved)
    files = json.loads((VALID / "pytorch" / "truth.json").read_text())["files"]
    return [(name, spec) for name, spec in files.items() if spec.get("tensors")]


@pytest.mark.parametrize(("name", "spec"), _truth_cases(), ids=[n for n, _ in _truth_cases()])
def test_pt_fixtures_hash_as_torch_sees_their_bytes(run_cli, name, spec):
    from tests.conftest import VALID

    result = run_cli("hash", VALID / "pytorch" / name)
    assert result.code == 0, result.stderr
    ours = {i["name"]: (i["dtype"], i["shape"], i["digest"]) for i in _lines(result.stdout)}
    torch_says = {t["name"]: (t["dtype"], t["shape"], "sha256:" + t["sha256"])
                  for t in spec["tensors"]}  # fmt: skip
    assert ours == torch_says


def test_output_file_is_written_and_refused_without_force(run_cli, model, tmp_path):
    manifest = tmp_path / "model.manifest"
    assert run_cli("hash", model, "-o", manifest).code == 0
    first = manifest.read_text()
    assert first == run_cli("hash", model).stdout
    again = run_cli("hash", model, "-o", manifest)
    assert again.code == 5
    assert "already exists" in again.stderr
    assert run_cli("hash", model, "-o", manifest, "--force").code == 0


def test_json_is_one_object_with_the_same_tensors(run_cli, model):
    obj = json.loads(run_cli("hash", model, "--json").stdout)
    assert obj["schema_version"] == 1
    assert obj["algorithm"] == "sha256"
    assert obj["tensors"] == _lines(run_cli("hash", model).stdout)


def test_jobs_do_not_change_the_manifest(run_cli, model):
    assert run_cli("hash", model, "-j", "3").stdout == run_cli("hash", model, "-j", "1").stdout


def test_verify_hashes_passes_a_converted_file(run_cli, model, tmp_path):
    manifest = tmp_path / "m.jsonl"
    run_cli("hash", model, "-o", manifest)
    assert run_cli("convert", model, tmp_path / "c.bpk", "-q").code == 0
    result = run_cli("verify", tmp_path / "c.bpk", "--hashes", manifest, "--json")
    assert result.code == 0, result.stdout
    (finding,) = [f for f in json.loads(result.stdout)["files"][0]["findings"]
                  if f["check"] == "hashes"]  # fmt: skip
    assert finding["status"] == "ok"
    assert finding["details"]["checked"] == 7


def test_verify_hashes_names_what_differs(run_cli, model, tmp_path, arrays):
    manifest = tmp_path / "m.jsonl"
    run_cli("hash", model, "-o", manifest)
    changed = dict(arrays)
    changed["embed.weight"] = arrays["embed.weight"].copy()
    changed["embed.weight"][4, 2] = np.nextafter(changed["embed.weight"][4, 2], np.float32(9))
    changed["layers.1.bias"] = arrays["layers.1.bias"].astype("<i4")
    changed["mask"] = arrays["mask"].reshape(3, 1)
    del changed["scalar"]
    changed["extra"] = np.zeros(1, "<f4")
    save_file(changed, str(tmp_path / "other.safetensors"))
    result = run_cli("verify", tmp_path / "other.safetensors", "--hashes", manifest, "--json")
    assert result.code == 1
    (finding,) = [f for f in json.loads(result.stdout)["files"][0]["findings"]
                  if f["check"] == "hashes"]  # fmt: skip
    details = finding["details"]
    assert {(m["name"], m["field"]) for m in details["mismatched"]} == {
        ("embed.weight", "digest"), ("layers.1.bias", "dtype"), ("mask", "shape"),
    }  # fmt: skip
    assert details["missing"] == ["scalar"]
    assert details["extra"] == ["extra"]
    text = run_cli("verify", tmp_path / "other.safetensors", "--hashes", manifest)
    assert "'embed.weight' (digest)" in text.stdout
    assert "'scalar'" in text.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json\n", "line 1 is not JSON"),
        ('{"name": "a"}\n', "line 1 is not a manifest line"),
        ('\n{"name": "a", "dtype": "F32", "shape": [-1], "digest": "x"}\n', "line 2:"),
    ],
)
def test_a_bad_manifest_fails_the_check_with_its_line(run_cli, model, tmp_path, content, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    result = run_cli("verify", model, "--hashes", bad)
    assert result.code == 1
    assert message in result.stdout
    assert "Traceback" not in result.stderr


def test_a_missing_manifest_is_a_usage_error(run_cli, model, tmp_path):
    result = run_cli("verify", model, "--hashes", tmp_path / "nope.jsonl")
    assert result.code == 2
    assert "nope.jsonl" in result.stderr


def test_hash_of_a_missing_file_is_an_input_error(run_cli, tmp_path):
    result = run_cli("hash", tmp_path / "nope.safetensors")
    assert result.code == 3
    assert result.stderr.startswith("ckptctl: error: ")
    assert "nope.safetensors" in result.stderr

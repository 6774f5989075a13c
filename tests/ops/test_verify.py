"""``ckptctl.ops.verify``: every check, the candle story, the optimizer scenarios, bad files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors import TensorSpec, serialize
from safetensors.numpy import save_file

from ckptctl.fix import Command, Option
from ckptctl.ops.convert import ConvertOptions, convert
from ckptctl.ops.verify import FileResult, Finding, Status, verify
from ckptctl.report.json import to_json
from ckptctl.report.render_summary import error_line
from ckptctl.sources import CHUNK_BYTES, ByteSource
from tests.conftest import CORPUS, FIXTURES, HOSTILE, REPO, VALID, load_module
from tests.ops.test_verify_warn_only import _mixed_nested

PT = VALID / "pytorch"
OPTIM = VALID / "optim"
SHARDED = VALID / "safetensors" / "sharded"


MO = load_module(OPTIM / "make_optim.py")


def one(path: Path | str, **kwargs) -> FileResult:
    report = verify([path], **kwargs)
    assert len(report.files) == 1
    return report.files[0]


def finding(result: FileResult, check: str) -> Finding:
    found = [f for f in result.findings if f.check == check]
    assert len(found) == 1, (check, result.findings)
    return found[0]


def checks(result: FileResult) -> dict[str, str]:
    return {f.check: f.status.value for f in result.findings}


# --- the candle story ------------------------------------------------------------------------


def test_flat_state_dict_passes():
    result = one(PT / "min_zip.pt")
    assert result.ok
    assert checks(result) == {"readable": "ok", "safe-pickle": "ok", "flat-reader": "ok"}
    assert (result.format, result.kind, result.tensors) == ("pytorch-zip", "state_dict", 2)


def test_nested_checkpoint_fails_and_names_the_state_key():
    result = one(PT / "nested.pt")
    assert not result.ok
    flat = finding(result, "flat-reader")
    assert flat.status is Status.FAIL
    assert "state_key='model'" in str(flat.message)  # the library spells options as keywords
    assert "'model' (4)" in str(flat.message)
    # truth.json: Adam state of 4 params, 3 tensors each
    assert "'optimizer' (12)" in str(flat.message)
    assert flat.details["state_key"] == "model"


def test_nested_checkpoint_passes_with_state_key():
    result = one(PT / "nested.pt", state_key="model")
    assert result.ok
    assert result.tensors == 4
    assert "below state key 'model'" in str(finding(result, "flat-reader").message)


def test_lightning_needs_state_key_state_dict():
    failed = one(PT / "lightning.ckpt")
    assert not failed.ok
    assert "state_key='state_dict'" in str(finding(failed, "flat-reader").message)
    assert one(PT / "lightning.ckpt", state_key="state_dict").ok


def test_wrong_state_key_fails_saying_where_tensors_are():
    result = one(PT / "nested.pt", state_key="net")
    flat = finding(result, "flat-reader")
    assert flat.status is Status.FAIL
    assert "'net'" in str(flat.message)
    assert flat.hint is not None
    assert "'model'" in str(flat.hint)


def test_whole_pickled_model_fails_without_importing_its_module():
    # Run in a fresh interpreter whose sys.path can import fixtures/_fixture_models.py: the
    # model's module must still never be imported (the reader never resolves the class).
    code = (
        "import sys, json\n"
        "from ckptctl.ops.verify import verify\n"
        f"r = verify([{str(PT / 'module.pt')!r}]).files[0]\n"
        "f = [x for x in r.findings if x.check == 'flat-reader'][0]\n"
        "bad = [n for n, m in list(sys.modules.items()) if '_fixture_models' in n\n"
        "       or hasattr(m, 'FixtureNet')]\n"
        "print(json.dumps({'ok': r.ok, 'status': f.status.value, 'message': str(f.message),\n"
        "                  'imported': bad}))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FIXTURES), str(REPO)]))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    data = json.loads(out.stdout)
    assert data["imported"] == []
    assert data["ok"] is False
    assert data["status"] == "fail"
    assert data["message"].startswith("a pickled FixtureNet object, not a state_dict")
    assert "re-save model.state_dict()" in data["message"]
    assert "_fixture_models" not in sys.modules


def test_torchscript_fails():
    result = one(PT / "torchscript.pt")
    flat = finding(result, "flat-reader")
    assert flat.status is Status.FAIL
    assert str(flat.message).startswith("a TorchScript archive of FixtureNet, not a state_dict")


def test_torchscript_fails_even_with_a_state_key():
    assert finding(one(PT / "torchscript.pt", state_key="fc"), "flat-reader").status is Status.FAIL


def test_bare_tensor_fails_and_explains():
    flat = finding(one(PT / "bare_tensor.pt"), "flat-reader")
    assert flat.status is Status.FAIL
    assert "single bare tensor" in str(flat.message)
    assert "no tensor names" in str(flat.message)


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        (PT / "empty_checkpoint.pt", "holds no tensors"),
        (VALID / "safetensors" / "empty.safetensors", "holds no tensors"),
        (VALID / "burnpack" / "scalar_only.bpk", "no tensors (only 1 scalar)"),
    ],
)
def test_files_without_tensors_fail(path, fragment):
    result = one(path)
    assert finding(result, "readable").status is Status.OK
    assert fragment in str(finding(result, "flat-reader").message)
    assert not result.ok


@pytest.mark.parametrize(
    "path",
    [
        VALID / "safetensors" / "tiny.safetensors",
        VALID / "burnpack" / "net.bpk",
        SHARDED / "model.safetensors.index.json",
    ],
)
def test_safetensors_and_burnpack_are_flat_by_construction(path):
    result = one(path)
    assert result.ok, result.findings
    assert "flat by construction" in str(finding(result, "flat-reader").message)


def test_mixed_top_level_and_nested_tensors_warn(tmp_path):
    # {"w": tensor, "extra": {"v": tensor}}: a flat reader finds "w" but skips "extra.v"
    path, _ = _mixed_nested(tmp_path)
    result = one(path)
    flat = finding(result, "flat-reader")
    assert flat.status is Status.WARN
    assert flat.details == {"top_level_tensors": 1, "groups": {"extra": 1}, "state_key": "extra"}
    assert "'extra' (1)" in str(flat.message)
    assert result.tensors == 2


@pytest.mark.corpus
def test_complex_structure_from_torch_suggests_its_top_key(corpus):
    flat = finding(one(corpus / "complex_structure.pt"), "flat-reader")
    assert flat.status is Status.FAIL
    assert "state_key='state'" in str(flat.message)


# --- unsafe, unreadable, not checkpoints --------------------------------------------------------


@pytest.mark.parametrize("path", sorted((HOSTILE / "pickle").glob("*__*")), ids=lambda p: p.name)
def test_unsafe_pickles_fail_as_safe_pickle(path, tmp_path):
    marker = Path(f"/tmp/ckptctl-pwned-{path.stem}")
    result = one(path)
    assert not result.ok
    unsafe = finding(result, "safe-pickle")
    assert unsafe.status is Status.FAIL
    assert path.name.split("__")[0].replace("builtins.", "") in str(unsafe.message)
    assert "readable" not in checks(result)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (
            b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n",
            "git-lfs pointer",
        ),
        (b"<!DOCTYPE html><html><body>404</body></html>", "HTML"),
        (b"", "the file is empty"),
    ],
)
def test_non_checkpoints_fail_as_readable(tmp_path, content, fragment):
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    result = one(path)
    assert [f.check for f in result.findings] == ["readable"]
    assert fragment in str(result.findings[0].message)
    assert result.format is None


def test_a_damaged_lfs_pointer_is_unreadable_not_a_pointer(tmp_path):
    path = tmp_path / "model.bin"  # git lfs pointer --check: not a pointer (the oid is short)
    path.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n")
    result = one(path)
    assert checks(result) == {"readable": "fail"}
    assert "git-lfs" in str(result.findings[0].message)


def test_truncated_safetensors_fails(tmp_path):
    src = (VALID / "safetensors" / "tiny.safetensors").read_bytes()
    path = tmp_path / "cut.safetensors"
    path.write_bytes(src[:-10])
    readable = finding(one(path), "readable")
    assert readable.status is Status.FAIL
    assert "truncated" in (str(readable.message) + (str(readable.hint) or ""))


def test_missing_file_and_directory_are_failures(tmp_path):
    report = verify([tmp_path / "nope.pt", tmp_path])
    assert not report.ok
    assert "no such file" in str(report.files[0].findings[0].message)
    assert "directory" in str(report.files[1].findings[0].message)


def test_unsupported_dtype_is_a_failure_not_an_exception():
    result = one(HOSTILE / "safetensors" / "unknown_dtype.safetensors")
    assert finding(result, "readable").status is Status.FAIL
    assert "Q4_K" in str(finding(result, "readable").message)


@pytest.mark.parametrize(
    "path",
    sorted(p for p in HOSTILE.rglob("*") if p.is_file() and p.suffix not in (".md", ".py")),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_no_hostile_file_raises(path):
    result = one(path, no_nan=True, min_tensors=1)
    assert result.findings
    assert result.path == str(path)


def test_single_path_argument_is_accepted():
    report = verify(str(PT / "min_zip.pt"))
    assert [f.path for f in report.files] == [str(PT / "min_zip.pt")]


# --- sharded index ------------------------------------------------------------------------------


def _copy_sharded(tmp_path: Path) -> Path:
    out = tmp_path / "sharded"
    shutil.copytree(SHARDED, out)
    return out / "model.safetensors.index.json"


def test_consistent_index_passes():
    result = one(SHARDED / "model.safetensors.index.json")
    assert finding(result, "sharded-index").status is Status.OK
    assert "2 shards" in str(finding(result, "readable").message)


def test_index_with_missing_shard_fails(tmp_path):
    index = _copy_sharded(tmp_path)
    (index.parent / "model-00002-of-00002.safetensors").unlink()
    result = one(index)
    assert finding(result, "readable").status is Status.FAIL
    sharded = finding(result, "sharded-index")
    assert sharded.status is Status.FAIL
    assert "model-00002-of-00002.safetensors" in str(sharded.message)


def test_index_soft_problems_fail_only_sharded_index(tmp_path):
    index = _copy_sharded(tmp_path)
    data = json.loads(index.read_text())
    del data["weight_map"]["lm_head.bias"]
    data["metadata"]["total_size"] = 1
    index.write_text(json.dumps(data))
    result = one(index)
    assert finding(result, "readable").status is Status.OK
    sharded = finding(result, "sharded-index")
    assert sharded.status is Status.FAIL
    problems = sharded.details["problems"]
    assert any("'lm_head.bias'" in p and "not listed" in p for p in problems)
    assert any("total_size is 1" in p for p in problems)


def test_escaping_index_is_one_readable_failure():
    result = one(HOSTILE / "safetensors" / "escape.safetensors.index.json")
    assert [f.check for f in result.findings] == ["readable"]
    assert "index's directory" in str(result.findings[0].message)


# --- no-nan ---------------------------------------------------------------------------------------


def _nan_file(tmp_path: Path) -> Path:
    path = tmp_path / "nan.safetensors"
    save_file(
        {
            "clean": np.arange(6, dtype="<f4"),
            "bad": np.array([1.0, np.nan, np.inf, -np.inf, np.nan], dtype="<f4"),
            "ints": np.array([1, 2], dtype="<i8"),
        },
        str(path),
    )
    return path


def test_no_nan_counts_nan_and_inf(tmp_path):
    result = one(_nan_file(tmp_path), no_nan=True)
    nan = finding(result, "no-nan")
    assert nan.status is Status.FAIL
    assert nan.details["tensors"] == [{"name": "bad", "dtype": "F32", "nan": 2, "inf": 2}]
    assert nan.details["scanned"] == 2  # the I64 tensor is not scanned
    assert "'bad' (2 NaN, 2 Inf)" in str(nan.message)


def test_no_nan_finds_bf16_nan(tmp_path):
    # BF16 bits: 1.0, quiet NaN 0x7FC0, -inf 0xFF80, NaN with payload 0x7F81, 2.0
    bits = np.array([0x3F80, 0x7FC0, 0xFF80, 0x7F81, 0x4000], dtype="<u2")
    spec = {"h": TensorSpec(dtype="bfloat16", shape=[5], data_ptr=bits.ctypes.data, data_len=10)}
    path = tmp_path / "bf16.safetensors"
    path.write_bytes(bytes(serialize(spec)))
    nan = finding(one(path, no_nan=True), "no-nan")
    assert nan.details["tensors"] == [{"name": "h", "dtype": "BF16", "nan": 2, "inf": 1}]


def test_no_nan_clean_files_pass():
    for path in (VALID / "safetensors" / "bf16.safetensors", PT / "dtypes.pt"):
        assert finding(one(path, no_nan=True), "no-nan").status is Status.OK


def test_no_nan_reads_in_bounded_chunks_without_the_memory_map(tmp_path, monkeypatch):
    # two whole chunks and a tail: NaN and Inf on both sides of each chunk boundary
    per_chunk = CHUNK_BYTES // 4
    values = np.zeros(2 * per_chunk + 8, dtype="<f4")
    values[[0, per_chunk - 1, per_chunk, 2 * per_chunk + 7]] = np.nan
    values[[2 * per_chunk - 1, 2 * per_chunk]] = np.inf
    path = tmp_path / "big.safetensors"
    save_file({"w": values}, str(path))
    reads: list[int] = []
    real_read = ByteSource.read

    def spy(self, offset, length):
        reads.append(length)
        return real_read(self, offset, length)

    def no_map(self, offset, length):
        raise AssertionError("the scan must not go through the memory map")

    monkeypatch.setattr(ByteSource, "read", spy)
    monkeypatch.setattr(ByteSource, "view", no_map)
    nan = finding(one(path, no_nan=True), "no-nan")
    assert nan.details["tensors"] == [{"name": "w", "dtype": "F32", "nan": 4, "inf": 2}]
    # the tensor in preads of at most one chunk: two full ones and the 32-byte tail
    assert reads[-3:] == [CHUNK_BYTES, CHUNK_BYTES, 32]
    assert max(reads) <= CHUNK_BYTES


@pytest.mark.corpus
def test_no_nan_in_pytorch_file_from_torch(corpus):
    # special_values.pt holds torch.tensor([nan, inf, -inf, 0.0, -0.0]) (burn's reader tests)
    nan = finding(one(CORPUS / "burn-pytorch-reader" / "special_values.pt", no_nan=True), "no-nan")
    assert nan.details["tensors"] == [{"name": "tensor", "dtype": "F32", "nan": 1, "inf": 2}]


# --- min-tensors, expect --------------------------------------------------------------------------


def test_min_tensors():
    assert finding(one(PT / "min_zip.pt", min_tensors=2), "min-tensors").status is Status.OK
    low = finding(one(PT / "min_zip.pt", min_tensors=3), "min-tensors")
    assert low.status is Status.FAIL
    assert str(low.message) == "2 tensors, fewer than the required 3"
    below = one(PT / "nested.pt", state_key="model", min_tensors=5)
    assert "below state key 'model'" in str(finding(below, "min-tensors").message)


def _example_a(tmp_path: Path) -> tuple[Path, Path]:
    """Burn's "Example A" (the research notes on burn-store): encoder.layer.N in the file, layers.N
    in the model."""
    z = np.zeros
    source = {
        "encoder.layer.0.weight": z((8, 8), "<f4"),
        "encoder.layer.0.bias": z(8, "<f4"),
        "encoder.layer.1.weight": z((8, 8), "<f4"),
        "encoder.layer.1.bias": z(8, "<f4"),
        "head.weight": z((8, 3), "<f4"),
    }
    target = {k.replace("layer.", "layers."): v for k, v in source.items()}
    target["head.weight"] = z((8, 5), "<f4")
    save_file(source, str(tmp_path / "file.safetensors"))
    save_file(target, str(tmp_path / "ref.safetensors"))
    return tmp_path / "file.safetensors", tmp_path / "ref.safetensors"


def test_expect_reports_missing_with_did_you_mean(tmp_path):
    path, ref = _example_a(tmp_path)
    expect = finding(one(path, expect=ref), "expect")
    assert expect.status is Status.FAIL
    assert expect.summary is not None
    suggestions = {m.name: m.suggestion for m in expect.summary.missing}
    # Burn's Example A: each encoder.layers.N.x suggests encoder.layer.N.x
    assert suggestions == {
        "encoder.layers.0.bias": "encoder.layer.0.bias",
        "encoder.layers.0.weight": "encoder.layer.0.weight",
        "encoder.layers.1.bias": "encoder.layer.1.bias",
        "encoder.layers.1.weight": "encoder.layer.1.weight",
    }
    assert [error_line(e) for e in expect.summary.errors] == [
        "Shape mismatch for 'head.weight': expected Shape { dims: [8, 5] }, "
        "found Shape { dims: [8, 3] }"
    ]
    assert to_json(expect.summary)["counts"] == {
        "applied": 0,
        "skipped": 0,
        "missing": 4,
        "unused": 4,
        "errors": 1,
        "ambiguous": 0,
    }
    assert "did you mean 'encoder.layer.0.bias'" in (str(expect.hint) or "")


def test_expect_same_file_passes():
    ref = VALID / "safetensors" / "tiny.safetensors"
    assert finding(one(ref, expect=ref), "expect").status is Status.OK


def test_expect_extra_tensors_warn(tmp_path):
    path = tmp_path / "ref.safetensors"
    save_file({"fc.weight": np.zeros((3, 4), "<f4")}, str(path))
    expect = finding(one(VALID / "safetensors" / "tiny.safetensors", expect=path), "expect")
    assert expect.status is Status.WARN
    assert "3 not in the reference" in str(expect.message)


def test_unreadable_reference_fails_each_file(tmp_path):
    ref = tmp_path / "ref.safetensors"
    ref.write_bytes(b"<html></html>" * 4)
    report = verify([PT / "min_zip.pt", PT / "views.pt"], expect=ref)
    for result in report.files:
        expect = finding(result, "expect")
        assert expect.status is Status.FAIL
        assert "cannot be read" in str(expect.message)
        assert "HTML" in str(expect.message)


# --- optimizer (docs/formats/burn-store.md#optimizer-check) ---------------------------------------


def optim(model: str, record: str, **kwargs):
    result = one(OPTIM / model, optimizer=OPTIM / record, **kwargs)
    found = finding(result, "optimizer")
    assert found.optimizer is not None
    return result, found, found.optimizer


def test_matching_burnpack_model_is_ok():
    result, _, check = optim("model.bpk", "optim.bpk")
    assert result.ok
    assert (check.verdict, check.states, check.matched) == ("ok", 5, 5)
    assert check.match_rate == 1.0
    assert check.coverage == 1.0
    assert (check.trainable, check.running_stats) == (len(MO.TRAINABLE), 2)
    assert check.repair is None


@pytest.mark.parametrize("model", ["model.safetensors", "model_noids.bpk"])
def test_model_without_ids_is_no_ids(model):
    result, found, check = optim(model, "optim.bpk")
    assert not result.ok
    assert check.verdict == "no-ids"
    assert check.match_rate is None
    assert str(found.message).startswith("no-ids: ")
    assert check.rebindable
    assert check.repair == Command(
        "convert",
        (str(OPTIM / model), "fixed.bpk"),
        (Option("param_ids_from", str(OPTIM / "optim.bpk")),),
    )


def test_reinitialized_model_is_lost_and_rebindable():
    result, found, check = optim("model_reinit.bpk", "optim.bpk")
    assert not result.ok
    assert (check.verdict, check.matched, check.states) == ("lost", 0, 5)
    assert check.rebindable
    assert {o.path: (o.param_id, o.model_id) for o in check.reinitialized} == {
        n: (MO.IDS[n], MO.REINIT_IDS[n]) for n in MO.TRAINABLE
    }
    assert check.foreign == ()
    assert "re-keyed by path" in (str(found.hint) or "")


def test_partial_with_foreign_state():
    result, found, check = optim("model.bpk", "optim_partial.bpk")
    assert not result.ok
    assert (check.verdict, check.matched, check.states) == ("partial", 3, 6)
    assert check.trainable_with_state == 3
    assert [(o.param_id, o.path) for o in check.foreign] == [(MO.FOREIGN_ID, MO.FOREIGN_PATH)]
    assert sorted(o.path for o in check.reinitialized) == ["norm.beta", "norm.gamma"]
    assert not check.rebindable
    assert str(found.message).startswith("partial: 3 of 6 optimizer states attach (50.0%)")


def test_grown_record_reports_cohorts():
    _, found, check = optim("model.bpk", "optim_grown.bpk")
    assert (check.verdict, check.matched, check.states, check.cohorts) == ("partial", 5, 10, 2)
    assert check.cohort_times == ((MO.TIME, MO.TIME), (100, 100))
    assert check.coverage == 1.0
    assert "2 cohorts" in str(found.message)


def test_shape_disagreement_is_not_ok():
    _, _, check = optim("model.bpk", "optim_shape.bpk")
    assert check.verdict == "partial"
    assert check.matched == check.states == 5
    pid = MO.IDS["fc.weight"]
    assert check.shape_disagreements == (
        f"state {pid}.momentum.moment_1 has shape [3, 4] but 'fc.weight' has [4, 3]",
        f"state {pid}.momentum.moment_2 has shape [3, 4] but 'fc.weight' has [4, 3]",
    )


def test_path_disagreement(tmp_path):
    record = tmp_path / "optim.bpk"
    MO.write_record(record, [("fc.bias", MO.IDS["fc.weight"], 1, (4, 3))])
    check = finding(one(OPTIM / "model.bpk", optimizer=record), "optimizer").optimizer
    assert check is not None
    assert check.path_disagreements == ((MO.IDS["fc.weight"], "fc.bias", "fc.weight"),)
    assert check.verdict == "partial"


@pytest.mark.parametrize("model", ["model.safetensors", "model_reinit.bpk", "model_noids.bpk"])
def test_convert_with_param_ids_from_repairs(tmp_path, model):
    fixed = tmp_path / "fixed.bpk"
    convert(OPTIM / model, fixed, ConvertOptions(param_ids_from=str(OPTIM / "optim.bpk")))
    result = one(fixed, optimizer=OPTIM / "optim.bpk")
    assert result.ok, result.findings
    check = finding(result, "optimizer").optimizer
    assert check is not None
    assert check.verdict == "ok"


def test_a_model_is_not_an_optimizer_record():
    found = finding(one(OPTIM / "model.bpk", optimizer=OPTIM / "model.bpk"), "optimizer")
    assert found.status is Status.FAIL
    assert "Burn optimizer record" in str(found.message)
    assert "'fc.weight'" in str(found.message)


def test_safetensors_is_not_an_optimizer_record():
    found = finding(one(OPTIM / "model.bpk", optimizer=OPTIM / "model.safetensors"), "optimizer")
    assert "safetensors file" in str(found.message)
    assert "Burn optimizer record" in str(found.message)


def test_optimizer_details_are_json():
    _, found, _ = optim("model.bpk", "optim_partial.bpk")
    assert found.optimizer is not None
    data = json.loads(json.dumps(to_json(found.optimizer)))
    assert data["verdict"] == "partial"
    assert data["orphans"]["foreign"] == [
        {"param_id": MO.FOREIGN_ID, "path": MO.FOREIGN_PATH, "model_id": None}
    ]
    assert data["match_rate"] == 0.5


# --- the report ---------------------------------------------------------------------------------


def test_many_files_summary():
    report = verify([PT / "min_zip.pt", PT / "views.pt", PT / "nested.pt"])
    assert (report.passed, report.failed, report.ok) == (2, 1, False)
    assert report.summary_line() == "3 files: 2 passed, 1 failed"
    assert verify([PT / "min_zip.pt"]).summary_line() == "1 file: 1 passed, 0 failed"

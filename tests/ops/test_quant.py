"""Quantized layouts named by ``ls`` and checked by ``verify`` (issue 27, item 3).

Ground truth: ``fixtures/valid/quantized/`` was written by the quantization packages' own
packing code (``fixtures/make_quantized.py``: auto-gptq, autoawq, bitsandbytes,
compressed-tensors), and ``expected.json`` holds what each package says the layout is (its
module's bits, group size and the original ``nn.Linear`` weight's shape), never ckptctl's
output. Broken layouts are those files with one tensor changed the way a damaged download or a
careless conversion changes it.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptctl.errors import CkptError
from ckptctl.formats import open_checkpoint
from ckptctl.ops._quant import check_group_index, find_quantized
from tests.conftest import VALID

QUANT = VALID / "quantized"
EXPECTED = json.loads((QUANT / "expected.json").read_text())


_NUMPY = {"I32": "<i4", "I64": "<i8", "U8": "u1", "I8": "i1", "F32": "<f4", "F16": "<f2"}


class _Raw:
    """A tensor of a safetensors file read from its own header (independent of ckptctl)."""

    def __init__(self, dtype, shape, data):
        self.dtype, self.shape, self.data = dtype, list(shape), data
        self.size, self.nbytes = math.prod(self.shape), len(data)

    def array(self):
        return np.frombuffer(self.data, dtype=_NUMPY[self.dtype]).reshape(self.shape)


def _raw(array):
    code = {v: k for k, v in _NUMPY.items()}[np.asarray(array).dtype.str.replace("|", "")]
    return _Raw(code, array.shape, np.ascontiguousarray(array).tobytes())


def load_file(path):
    blob = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    header.pop("__metadata__", None)
    data = blob[8 + n :]
    return {k: _Raw(v["dtype"], v["shape"], data[slice(*v["data_offsets"])])
            for k, v in header.items()}  # fmt: skip


def save_file(tensors, path):
    header, offset, chunks = {}, 0, []
    for name, t in tensors.items():
        t = t if isinstance(t, _Raw) else _raw(t)
        header[name] = {"dtype": t.dtype, "shape": t.shape,
                        "data_offsets": [offset, offset + t.nbytes]}  # fmt: skip
        offset += t.nbytes
        chunks.append(t.data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def _modules(path):
    with open_checkpoint(path) as ckpt:
        return find_quantized(ckpt.entries())


@pytest.mark.parametrize("filename", sorted(EXPECTED))
def test_every_module_is_named_as_its_package_wrote_it(filename):
    expected = EXPECTED[filename]
    modules = {m.module: m for m in _modules(QUANT / filename)}
    assert sorted(modules) == sorted(expected)
    for name, want in expected.items():
        got = modules[name]
        assert got.scheme.value == want["scheme"], name
        assert got.bits == want["bits"], name
        assert got.group_size == want["group_size"], name
        assert list(got.shape or ()) == want["shape"], name
        assert got.parameters == math.prod(want["shape"]), name
        if "block" in want:
            assert list(got.block or ()) == want["block"], name
        assert got.problems == (), name


@pytest.mark.parametrize("filename", sorted(EXPECTED))
def test_stored_counts_are_the_members_tensors_and_bias_stays_plain(filename):
    arrays = load_file(str(QUANT / filename))
    for m in _modules(QUANT / filename):
        assert m.stored_parameters == sum(arrays[n].size for n in m.tensors)
        assert m.nbytes == sum(arrays[n].nbytes for n in m.tensors)
        assert f"{m.module}.bias" not in m.tensors
    members = {n for m in _modules(QUANT / filename) for n in m.tensors}
    # every tensor is either part of a module or a plain one (bias, norm)
    assert {n for n in arrays if n not in members} <= {
        n for n in arrays if n.endswith((".bias", "norm.weight"))
    }


@pytest.mark.parametrize("name", ["tiny", "bf16", "dtypes", "edge", "empty"])
def test_plain_checkpoints_have_no_quantized_modules(name):
    assert _modules(VALID / "safetensors" / f"{name}.safetensors") == ()


def test_ls_json_lists_modules_with_logical_and_stored_counts(run_cli):
    result = run_cli("ls", QUANT / "gptq-4bit.safetensors", "--json")
    assert result.code == 0, result.stderr
    out = json.loads(result.stdout)
    want = EXPECTED["gptq-4bit.safetensors"]
    assert [q["module"] for q in out["quantized"]] == sorted(want)
    first = out["quantized"][0]
    assert list(first) == ["module", "scheme", "bits", "granularity", "group_size", "block",
                           "shape", "parameters", "stored_parameters", "nbytes", "tensors",
                           "problems"]  # fmt: skip
    assert first["shape"] == want[first["module"]]["shape"]
    arrays = load_file(str(QUANT / "gptq-4bit.safetensors"))
    plain = sum(a.size for n, a in arrays.items() if n.endswith(".bias"))
    assert out["logical_parameters"] == plain + sum(math.prod(w["shape"]) for w in want.values())


def test_ls_json_of_a_plain_file_has_no_quantized_key(run_cli):
    result = run_cli("ls", VALID / "safetensors" / "tiny.safetensors", "--json")
    assert result.code == 0, result.stderr
    assert "quantized" not in json.loads(result.stdout)


def test_ls_text_shows_scheme_bits_group_and_both_counts(run_cli):
    result = run_cli("ls", QUANT / "fp8-block.safetensors")
    assert result.code == 0, result.stderr
    row = next(line for line in result.stdout.splitlines()
               if line.startswith("model.layers.0.mlp.gate_proj "))  # fmt: skip
    assert row.split() == ["model.layers.0.mlp.gate_proj", "fp8-block", "8", "128x128",
                           "[136,", "128]", "17,408", "17,410", "17.0", "KiB"]  # fmt: skip
    assert "2 quantized modules (fp8-block)" in result.stdout


def test_ls_filter_keeps_the_modules_it_touches(run_cli):
    result = run_cli("ls", QUANT / "awq-4bit.safetensors", "--filter", r"layers\.1\.", "--json")
    out = json.loads(result.stdout)
    assert [q["module"] for q in out["quantized"]] == ["model.layers.1.proj"]


@pytest.mark.parametrize("filename", sorted(EXPECTED))
def test_verify_passes_every_package_written_file(run_cli, filename):
    result = run_cli("verify", QUANT / filename, "--json")
    assert result.code == 0, result.stdout
    (finding,) = [f for f in json.loads(result.stdout)["files"][0]["findings"]
                  if f["check"] == "quant-layout"]  # fmt: skip
    assert finding["status"] == "ok"
    assert finding["details"]["modules"] == len(EXPECTED[filename])
    assert finding["details"]["problems"] == []


def test_verify_of_a_plain_file_has_no_quant_finding(run_cli):
    result = run_cli("verify", VALID / "safetensors" / "tiny.safetensors", "--json")
    checks = [f["check"] for f in json.loads(result.stdout)["files"][0]["findings"]]
    assert "quant-layout" not in checks


def _broken(tmp_path, filename, change):
    arrays = load_file(str(QUANT / filename))
    change(arrays)
    path = tmp_path / filename
    save_file(arrays, str(path))
    return path


def _bnb_state(arrays, name, **changes):
    key = next(k for k in arrays if k.startswith(f"{name}.weight.quant_state."))
    state = json.loads(arrays[key].data.decode())
    state.update(changes)
    arrays[key] = np.frombuffer(json.dumps(state).encode(), dtype=np.uint8).copy()


L0 = "model.layers.0"
BROKEN = {
    "gptq qweight row dropped": (
        "gptq-4bit.safetensors",
        lambda a: a.update({f"{L0}.proj.qweight": a[f"{L0}.proj.qweight"].array()[:15]}),
        f"'{L0}.proj' (gptq): qweight is [15, 64], but 128 inputs at 4 bits make it [16, 64]",
    ),
    "gptq scales of another group size": (
        "gptq-4bit.safetensors",
        lambda a: a.update({f"{L0}.proj.scales": a[f"{L0}.proj.scales"].array()[:2]}),
        f"'{L0}.proj' (gptq): qzeros is [4, 8], but 2 groups of 64 outputs at 4 bits make it "
        "[2, 8]",
    ),
    "gptq g_idx all in group 0": (
        "gptq-4bit.safetensors",
        lambda a: a.update({f"{L0}.proj.g_idx": np.zeros(128, dtype=np.int32)}),
        f"'{L0}.proj' (gptq): g_idx puts 128 inputs in group 0, not the group size 32",
    ),
    "gptq g_idx past the scales": (
        "gptq-4bit.safetensors",
        lambda a: a.update({f"{L0}.proj.g_idx": np.arange(128, dtype=np.int32) // 16}),
        f"'{L0}.proj' (gptq): g_idx names groups 0 to 7, but scales has 4",
    ),
    "gptq scales missing": (
        "gptq-4bit.safetensors",
        lambda a: a.pop(f"{L0}.proj.scales"),
        f"'{L0}.proj' (gptq): no scales tensor",
    ),
    "awq qzeros of another width": (
        "awq-4bit.safetensors",
        lambda a: a.update({f"{L0}.proj.qzeros": a[f"{L0}.proj.qzeros"].array()[:, :4]}),
        f"'{L0}.proj' (awq): qzeros is [4, 4], but 4 groups of 64 outputs at 4 bits make it [4, 8]",
    ),
    "bnb absmax short by one block": (
        "bnb-fp4.safetensors",
        lambda a: a.update({f"{L0}.mlp.weight.absmax": a[f"{L0}.mlp.weight.absmax"].array()[:95]}),
        f"'{L0}.mlp' (bnb-fp4): absmax has 95 scales, but 6,144 values in blocks of 64 need 96",
    ),
    "bnb quant_state of another shape": (
        "bnb-nf4.safetensors",
        lambda a: _bnb_state(a, f"{L0}.mlp", shape=[64, 128]),
        f"'{L0}.mlp' (bnb-nf4): weight holds 3,072 bytes, but [64, 128] at 4 bits packs into 4,096",
    ),
    "bnb quant_state not JSON": (
        "bnb-nf4.safetensors",
        lambda a: a.update(
            {f"{L0}.mlp.weight.quant_state.bitsandbytes__nf4": np.full(9, 0xFF, np.uint8)}
        ),
        f"'{L0}.mlp' (bnb-nf4): quant_state is not the JSON object bitsandbytes writes",
    ),
    "bnb int8 SCB of another length": (
        "bnb-int8.safetensors",
        lambda a: a.update({f"{L0}.mlp.SCB": a[f"{L0}.mlp.SCB"].array()[:32]}),
        f"'{L0}.mlp' (bnb-int8): SCB is [32], but 64 rows, one scale each, make it [64]",
    ),
    "fp8 block scales of another grid": (
        "fp8-block.safetensors",
        lambda a: a.update({f"{L0}.mlp.gate_proj.weight_scale_inv": np.ones((3, 1), np.float32)}),
        f"'{L0}.mlp.gate_proj' (fp8-block): weight_scale_inv is [3, 1], but [136, 128] in the "
        "128x128 blocks of the other modules make it [2, 1]",
    ),
    "compressed-tensors weight_shape of another width": (
        "ct-w4a16.safetensors",
        lambda a: a.update(
            {f"{L0}.self_attn.q_proj.weight_shape": np.array([64, 200], dtype=np.int64)}
        ),
        f"'{L0}.self_attn.q_proj' (compressed-tensors): weight_packed has 16 words a row, which "
        "no width of 1 to 8 bits gives for 200 inputs",
    ),
    "compressed-tensors zero point of another height": (
        "ct-w4-asym.safetensors",
        lambda a: a.update(
            {f"{L0}.self_attn.q_proj.weight_zero_point": np.zeros((4, 4), dtype=np.int32)}
        ),
        f"'{L0}.self_attn.q_proj' (compressed-tensors): weight_zero_point is [4, 4], but 64 "
        "rows at 4 bits and 4 groups make it [8, 4]",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_verify_fails_a_broken_layout_naming_module_and_disagreement(run_cli, tmp_path, case):
    filename, change, message = BROKEN[case]
    path = _broken(tmp_path, filename, change)
    result = run_cli("verify", path, "--json")
    assert result.code == 1, result.stdout
    (finding,) = [f for f in json.loads(result.stdout)["files"][0]["findings"]
                  if f["check"] == "quant-layout"]  # fmt: skip
    assert finding["status"] == "fail"
    assert message in finding["message"], finding["message"]
    assert finding["hint"]
    module = message.split("'")[1]
    assert {p["module"] for p in finding["details"]["problems"]} == {module}
    text = run_cli("verify", path)
    assert text.code == 1
    assert "✗ quant-layout" in text.stdout or "x quant-layout" in text.stdout


def test_ls_still_lists_a_broken_layout_and_says_so(run_cli, tmp_path):
    filename, change, _ = BROKEN["gptq qweight row dropped"]
    path = _broken(tmp_path, filename, change)
    result = run_cli("ls", path)
    assert result.code == 0, result.stderr
    assert "model.layers.0.proj: qweight is [15, 64]" in result.stdout


def test_a_descriptor_larger_than_the_limit_is_a_problem_not_a_read(tmp_path):
    path = _broken(
        tmp_path,
        "bnb-nf4.safetensors",
        lambda a: a.update(
            {f"{L0}.mlp.weight.quant_state.bitsandbytes__nf4": np.zeros(1 << 20, np.uint8)}
        ),
    )
    (first, _) = _modules(path)
    assert first.problems == ("quant_state is 1,048,576 bytes, more than a layout descriptor",)


def test_skip_quant_layout_leaves_it_out(run_cli, tmp_path):
    filename, change, _ = BROKEN["gptq scales missing"]
    path = _broken(tmp_path, filename, change)
    result = run_cli("verify", path, "--skip", "quant-layout")
    assert result.code == 0, result.stdout


# --- hostile layouts ----------------------------------------------------------------------------

_SUFFIXES = ["qweight", "qzeros", "scales", "g_idx", "weight", "weight.absmax", "weight.quant_map",
             "weight.nested_absmax", "weight.quant_state.bitsandbytes__nf4", "SCB",
             "weight_scale_inv", "weight_scale", "input_scale", "weight_packed", "weight_shape",
             "weight_zero_point", "weight_global_scale", "bias"]  # fmt: skip
_DTYPES = ["I32", "I64", "U8", "I8", "F32", "F16"]
_HOSTILE_STATES = [
    b'{"shape": [4, 9], "blocksize": 0}',
    b"[" * 3000,
    b'{"shape": [1e999], "blocksize": 64}',
    b'{"shape": [99999999999999999999], "blocksize": 1}',
]


@st.composite
def _hostile_file(draw):
    tensors = {}
    for _ in range(draw(st.integers(1, 8))):
        name = f"m{draw(st.integers(0, 1))}.{draw(st.sampled_from(_SUFFIXES))}"
        dtype = draw(st.sampled_from(_DTYPES))
        shape = draw(st.lists(st.integers(0, 40), max_size=3))
        size = math.prod(shape) * np.dtype(_NUMPY[dtype]).itemsize
        if name.endswith(("quant_state.bitsandbytes__nf4", "weight_shape")) and draw(st.booleans()):
            text = draw(st.sampled_from(_HOSTILE_STATES))
            tensors[name] = _Raw("U8", [len(text)], text)
            continue
        data = draw(st.binary(min_size=size, max_size=size)) if size <= 256 else bytes(size)
        tensors[name] = _Raw(dtype, shape, data)
    return tensors


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tensors=_hostile_file())
def test_any_layout_is_named_or_left_alone_never_a_crash(tmp_path, tensors):
    path = tmp_path / "hostile.safetensors"
    save_file(tensors, path)
    with open_checkpoint(path) as ckpt:
        entries = ckpt.entries()
        try:
            modules = find_quantized(entries)
            by_name = {e.name: e for e in entries}
            for m in modules:
                check_group_index(m, by_name)
        except CkptError:
            return
    for m in modules:
        assert set(m.tensors) <= set(tensors)
        assert m.parameters is None or m.parameters >= 0


def test_ls_tree_marks_each_quantized_module_with_its_unpacked_parameters(run_cli):
    result = run_cli("ls", QUANT / "bnb-nf4.safetensors", "--tree")
    assert result.code == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if "bnb-nf4 4-bit" in line]
    want = EXPECTED["bnb-nf4.safetensors"]
    assert len(rows) == len(want)
    for row, name in zip(rows, sorted(want), strict=True):
        assert row.split()[-3:] == [f"{math.prod(want[name]['shape']):,}", "parameters", "unpacked"]

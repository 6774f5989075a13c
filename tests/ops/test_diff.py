"""``diff``: value comparison (NaN, dtypes, transposes, chunking) and the report (issue #5)."""

from __future__ import annotations

import math
import struct
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ckptctl import open_checkpoint, save_checkpoint
from ckptctl.dtypes import DType
from ckptctl.errors import SelectionError
from ckptctl.fix import Command, Option
from ckptctl.model import FileData
from ckptctl.ops import _compare
from ckptctl.ops._compare import compare_values
from ckptctl.ops.diff import compare_entries, diff_checkpoints
from ckptctl.report.diff import DiffOptions
from ckptctl.report.json import to_json
from ckptctl.sources import ByteSource
from tests.conftest import VALID
from tests.strategies import array_entry, make_entry

F32 = DType.F32


def f32(*values: float) -> np.ndarray:
    return np.array(values, dtype="<f4")


def f32_bits(*bits: int) -> bytes:
    return struct.pack(f"<{len(bits)}I", *bits)


def diff_arrays(a, b, *, rtol=1e-5, atol=1e-8, dtype_a=None, dtype_b=None):
    return compare_entries(
        array_entry("t", a, dtype_a), array_entry("t", b, dtype_b), rtol=rtol, atol=atol
    )


# --- statuses ------------------------------------------------------------------------------


def test_identical_bytes():
    row = diff_arrays(f32(1, 2, 3), f32(1, 2, 3))
    assert row.status == "identical"
    assert (row.max_abs, row.max_rel, row.mismatched, row.nan_mismatched) == (0.0, 0.0, 0, 0)


def test_different_values_report_max_abs_and_rel():
    row = diff_arrays(f32(1, 2, 3, 4), f32(1, 2.5, 3, 8))
    assert row.status == "different"
    assert row.max_abs == 4.0
    assert row.max_rel == 0.5  # |4 - 8| / |8| and |2 - 2.5| / |2.5| = 0.2
    assert row.mismatched == 2
    assert row.numel == 4


def test_close_within_tolerance_is_close_not_equal():
    row = diff_arrays(f32(1, 2), f32(1, 2 + 2**-22), rtol=1e-5)
    assert row.status == "close"
    assert row.max_abs == 2**-22
    assert diff_arrays(f32(1, 2), f32(1, 2 + 2**-22), rtol=0, atol=0).status == "different"


def test_negative_zero_is_equal_not_identical():
    row = diff_arrays(f32(0.0, 1.0), f32(-0.0, 1.0))
    assert row.status == "equal"
    assert row.max_abs == 0.0


def test_absolute_tolerance_allows_zero_reference():
    row = diff_arrays(f32(1e-9, 1), f32(0, 1), rtol=0, atol=1e-8)
    assert row.status == "close"
    assert math.isinf(row.max_rel)  # |a - 0| / |0|


# --- NaN and infinities --------------------------------------------------------------------


def test_nan_at_same_place_is_equal_even_with_other_payload():
    quiet, payload = 0x7FC00000, 0x7FC00001
    one = f32_bits(quiet, 0x3F800000)
    two = f32_bits(payload, 0x3F800000)
    row = compare_entries(
        make_entry("t", F32, (2,), one), make_entry("t", F32, (2,), two), rtol=0, atol=0
    )
    assert row.status == "equal"
    assert (row.mismatched, row.nan_mismatched) == (0, 0)


def test_nan_mismatches_are_counted_and_excluded_from_max_abs():
    nan = float("nan")
    row = diff_arrays(f32(nan, 1, 2, nan, 5), f32(nan, 1, nan, 3, 6))
    assert row.status == "different"
    assert row.nan_mismatched == 2
    assert row.mismatched == 3  # two NaN mismatches and 5 vs 6
    assert row.max_abs == 1.0


def test_infinities():
    inf = float("inf")
    assert diff_arrays(f32(inf, -inf), f32(inf, -inf)).status == "identical"
    row = diff_arrays(f32(inf, 1), f32(-inf, 1))
    assert row.status == "different"
    assert row.max_abs == inf
    assert row.mismatched == 1
    # a finite value is never close to an infinite one, however large the tolerance
    assert diff_arrays(f32(1, 1), f32(inf, 1), rtol=1e30, atol=1e30).mismatched == 1


# --- across dtypes -------------------------------------------------------------------------


def test_bf16_fixture_against_f32_values():
    # fixtures/valid/safetensors/bf16.safetensors (written by the safetensors library):
    # bits 0x3F80 0xC000 0x3F00 0x4049 = 1, -2, 0.5, 3.140625
    with open_checkpoint(VALID / "safetensors" / "bf16.safetensors") as ckpt:
        bf16 = ckpt["bf16"]
        exact = compare_entries(
            array_entry("bf16", f32(1, -2, 0.5, 3.140625)), bf16, rtol=0, atol=0
        )
        pi = compare_entries(array_entry("bf16", f32(1, -2, 0.5, math.pi)), bf16, rtol=0, atol=0)
        loose = compare_entries(
            array_entry("bf16", f32(1, -2, 0.5, math.pi)), bf16, rtol=1e-3, atol=0
        )
    assert exact.status == "dtype"
    assert (exact.dtype_a, exact.dtype_b, exact.max_abs) == ("F32", "BF16", 0.0)
    assert pi.status == "different"
    assert pi.max_abs == pytest.approx(float(np.float32(math.pi)) - 3.140625, rel=1e-12)
    assert pi.max_rel == pytest.approx((float(np.float32(math.pi)) - 3.140625) / 3.140625)
    assert loose.status == "dtype"


def test_f16_against_f32_and_ints_against_floats():
    row = diff_arrays(
        np.array([0.5, 1.5, 65504], dtype="<f2"), f32(0.5, 1.5, 65504), dtype_a=DType.F16
    )
    assert row.status == "dtype"
    assert row.max_abs == 0.0
    assert diff_arrays(np.array([1, 2], dtype="<i4"), f32(1, 2)).status == "dtype"


def test_large_int64_differences_are_not_lost_in_float64():
    a = np.array([2**60, 5], dtype="<i8")
    b = np.array([2**60 + 1, 5], dtype="<i8")
    row = diff_arrays(a, b, rtol=0, atol=0)
    assert row.status == "different"
    assert row.mismatched == 1
    assert row.max_abs >= 1.0
    assert diff_arrays(a, b.astype("<u8"), rtol=0, atol=0).mismatched == 1


# --- transposes ----------------------------------------------------------------------------


def test_transposed_rectangular():
    a = np.arange(12, dtype="<f4").reshape(3, 4)
    row = diff_arrays(a, np.ascontiguousarray(a.T))
    assert row.status == "transposed"
    assert (row.shape_a, row.shape_b) == ((3, 4), (4, 3))
    assert row.max_abs == 0.0


def test_transposed_square_is_detected_after_a_value_mismatch():
    a = np.arange(9, dtype="<f4").reshape(3, 3)
    assert diff_arrays(a, np.ascontiguousarray(a.T)).status == "transposed"


def test_swapped_shape_with_other_values_is_a_shape_difference():
    a = np.arange(12, dtype="<f4").reshape(3, 4)
    row = diff_arrays(a, np.ascontiguousarray(a.T) + 1)
    assert row.status == "shape"
    assert row.max_abs is None
    assert diff_arrays(a, np.zeros((2, 6), dtype="<f4")).status == "shape"


def test_transposed_flag_requires_swapped_shapes():
    a = array_entry("t", np.zeros((2, 3), dtype="<f4"))
    with pytest.raises(ValueError, match="not transposes"):
        compare_values(a, a, rtol=0, atol=0, transposed=True)
    with pytest.raises(ValueError, match="element counts differ"):
        compare_values(a, array_entry("t", f32(1)), rtol=0, atol=0)


# --- chunking: results do not depend on the chunk size -------------------------------------


def float_arrays(n: int):
    """float32 arrays of length n, NaN, infinities and signed zeros included."""
    return hnp.arrays(
        np.float32,
        n,
        elements=st.one_of(
            st.floats(width=32, allow_nan=True, allow_infinity=True),
            st.sampled_from([0.0, -0.0, 1.0, -1.0, float("nan")]),
        ),
    )


def _reference(a: np.ndarray, b: np.ndarray, rtol: float, atol: float):
    """The unchunked computation with numpy's own isclose."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    close = np.isclose(a64, b64, rtol=rtol, atol=atol, equal_nan=True)
    nan_a, nan_b = np.isnan(a64), np.isnan(b64)
    numbers = ~(nan_a | nan_b)
    with np.errstate(invalid="ignore"):
        delta = np.where(a64 == b64, 0.0, np.abs(a64 - b64))[numbers]
    max_abs = float(delta.max()) if delta.size else 0.0
    return int((~close).sum()), int((nan_a ^ nan_b).sum()), max_abs


@settings(max_examples=150, deadline=None)
@given(
    pair=st.integers(0, 40).flatmap(lambda n: st.tuples(float_arrays(n), float_arrays(n))),
    chunk=st.integers(1, 9),
)
def test_chunked_in_memory_equals_numpy(pair, chunk):
    a, b = pair
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_compare, "CHUNK_ELEMENTS", chunk)
        got = compare_values(array_entry("t", a), array_entry("t", b), rtol=1e-3, atol=1e-6)
    whole = compare_values(array_entry("t", a), array_entry("t", b), rtol=1e-3, atol=1e-6)
    # norms are sums: another chunking adds them in another order (the last bits may differ)
    assert replace(got, relative_change=0.0, cosine=None) == replace(
        whole, relative_change=0.0, cosine=None
    )
    assert got.relative_change == pytest.approx(whole.relative_change, rel=1e-9)
    assert got.cosine == (None if whole.cosine is None else pytest.approx(whole.cosine, rel=1e-9))
    mismatched, nan_mismatched, max_abs = _reference(a, b, 1e-3, 1e-6)
    assert (got.mismatched, got.nan_mismatched) == (mismatched, nan_mismatched)
    assert got.max_abs == max_abs
    assert got.allclose == (mismatched == 0)


@st.composite
def matrices(draw):
    rows, cols = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    a = draw(hnp.arrays(np.float32, (rows, cols), elements=st.floats(-4, 4, width=32)))
    turned = np.ascontiguousarray(a.T)
    if draw(st.booleans()):
        i, j = draw(st.integers(0, cols - 1)), draw(st.integers(0, rows - 1))
        turned[i, j] += draw(st.sampled_from([0.5, np.float32("nan")]))
    return a, turned


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=matrices(), chunk=st.integers(1, 30), flat=float_arrays(11))
def test_streamed_from_files_equals_in_memory(pair, chunk, flat):
    """File-backed entries (pread tiles and chunks) give what whole in-memory arrays give."""
    a, b = pair
    flat_b = flat[::-1].copy()
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        pa, pb = Path(tmp) / "a.safetensors", Path(tmp) / "b.safetensors"
        save_checkpoint(pa, [array_entry("m", a), array_entry("v", flat)])
        save_checkpoint(pb, [array_entry("m", b), array_entry("v", flat_b)])
        mp.setattr(_compare, "CHUNK_ELEMENTS", chunk)
        with open_checkpoint(pa) as ca, open_checkpoint(pb) as cb:
            assert _compare.ElementReader(ca["m"]).is_streamed
            turned = compare_values(ca["m"], cb["m"], rtol=1e-5, atol=0, transposed=True)
            values = compare_values(ca["v"], cb["v"], rtol=1e-5, atol=0)
    expected = compare_values(
        array_entry("m", np.ascontiguousarray(a.T)), array_entry("m", b), rtol=1e-5, atol=0
    )
    assert turned.mismatched == expected.mismatched
    assert turned.nan_mismatched == expected.nan_mismatched
    assert turned.max_abs == expected.max_abs
    assert turned.allclose == expected.allclose
    in_memory = compare_values(array_entry("v", flat), array_entry("v", flat_b), rtol=1e-5, atol=0)
    # the norms behind the relative change and cosine add chunk by chunk: equal to rounding
    assert replace(values, relative_change=0.0, cosine=None) == replace(
        in_memory, relative_change=0.0, cosine=None
    )
    for got, whole in ((values.relative_change, in_memory.relative_change),
                       (values.cosine, in_memory.cosine)):  # fmt: skip
        assert got == (None if whole is None else pytest.approx(whole, rel=1e-9, nan_ok=True))


def test_file_backed_entries_are_read_in_chunks_never_through_the_map(tmp_path, monkeypatch):
    n = 1000
    a = np.arange(n, dtype="<f4")
    b = a.copy()
    b[-1] += 3
    pa, pb = tmp_path / "a.safetensors", tmp_path / "b.bpk"
    save_checkpoint(pa, [array_entry("x", a)])
    save_checkpoint(pb, [array_entry("x", b)])
    reads: list[int] = []
    original = ByteSource.read

    def spy(self, offset, length):
        reads.append(length)
        return original(self, offset, length)

    def no_map(self):
        raise AssertionError("tensor bytes read through the memory map")

    monkeypatch.setattr(ByteSource, "read", spy)
    monkeypatch.setattr(FileData, "read", no_map)
    monkeypatch.setattr(_compare, "CHUNK_ELEMENTS", 64)
    report = diff_checkpoints(pa, pb)
    row = report.tensors[0]
    assert (row.status, row.max_abs, row.mismatched) == ("different", 3.0, 1)
    tensor_reads = [r for r in reads if r in (64 * 4, (n % 64) * 4)]
    # each side once, chunk by chunk; then A's equal chunks before the one that differs (the
    # last) once more, for the norms of the relative change and cosine
    chunks = math.ceil(n / 64)
    assert len(tensor_reads) == 2 * chunks + (chunks - 1)
    assert max(reads) <= max(64 * 4, 4096)  # headers are small; tensors come in chunks


# --- the report ----------------------------------------------------------------------------


def _save(path: Path, entries) -> Path:
    save_checkpoint(path, entries, force=True)
    return path


def test_report_names_only_in_each_side_with_suggestions(tmp_path):
    w = np.ones((2, 2), dtype="<f4")
    a = _save(
        tmp_path / "a.safetensors",
        [array_entry("encoder.layer.0.weight", w), array_entry("head.bias", f32(1))],
    )
    b = _save(
        tmp_path / "b.safetensors",
        [array_entry("encoder.layers.0.weight", w), array_entry("head.bias", f32(1))],
    )
    report = diff_checkpoints(a, b)
    assert not report.identical
    assert [(o.name, o.suggestion) for o in report.only_in_a] == [
        ("encoder.layer.0.weight", "encoder.layers.0.weight")
    ]
    assert [o.name for o in report.only_in_b] == ["encoder.layers.0.weight"]
    assert report.suggested_command is not None
    assert report.suggested_command is not None
    assert Option("remap", r"\.layer\.=.layers.") in report.suggested_command.options
    fixed = diff_checkpoints(a, b, DiffOptions(remap=(r"\.layer\.=.layers.",)))
    assert fixed.identical


def test_module_prefix_rule_is_suggested_and_fixes_the_diff(tmp_path):
    entries = [array_entry("fc.weight", np.eye(3, 4, dtype="<f4")), array_entry("fc.bias", f32(1))]
    b = _save(tmp_path / "b.safetensors", entries)
    a = _save(tmp_path / "a.safetensors", [e.renamed("module." + e.name) for e in entries])
    report = diff_checkpoints(a, b)
    assert report.fixes == (Option("remap", r"^module\.="),)
    assert report.suggested_command == Command("diff", (str(a), str(b)), report.fixes)
    assert diff_checkpoints(a, b, DiffOptions(remap=(r"^module\.=",))).identical


def test_values_only_lets_dtype_differences_pass(tmp_path):
    a = _save(tmp_path / "a.safetensors", [array_entry("x", f32(1, 2, 0.5))])
    b = _save(tmp_path / "b.bpk", [array_entry("x", np.array([1, 2, 0.5], dtype="<f2"))])
    strict = diff_checkpoints(a, b)
    assert not strict.identical
    assert strict.tensors[0].status == "dtype"
    assert strict.fixes == (Option("values_only"),)
    loose = diff_checkpoints(a, b, DiffOptions(values_only=True))
    assert loose.ok
    assert loose.within_tolerance
    assert not loose.identical  # the bytes differ: never called identical (#30)


def test_bad_tolerance_is_a_usage_error(tmp_path):
    a = _save(tmp_path / "a.safetensors", [array_entry("x", f32(1))])
    with pytest.raises(SelectionError, match="tolerance must be a finite number") as info:
        diff_checkpoints(a, a, DiffOptions(rtol=-1))
    assert str(info.value.hint) == "check rtol='-1'"
    with pytest.raises(SelectionError, match="not nan"):
        diff_checkpoints(a, a, DiffOptions(atol=float("nan")))


def test_json_keys_are_in_a_fixed_order_and_infinity_is_a_string(tmp_path):
    a = _save(tmp_path / "a.safetensors", [array_entry("x", f32(1, 0))])
    b = _save(tmp_path / "b.safetensors", [array_entry("x", f32(1, float("inf")))])
    out = to_json(diff_checkpoints(a, b))
    assert list(out) == [
        "schema_version",
        "a",
        "b",
        "format_a",
        "format_b",
        "identical",
        "within_tolerance",
        "options",
        "counts",
        "only_in_a",
        "only_in_b",
        "tensors",
        "fixes",
        "suggested_command",
        "convert_command",
        "warnings",
    ]
    assert out["schema_version"] == 1
    assert out["tensors"][0]["max_abs"] == "inf"
    assert out["counts"]["different"] == 1


PORTS = Path(__file__).parents[2] / "fixtures" / "valid" / "ports"


def test_names_a_port_gives_are_found_as_convert_target_finds_them(tmp_path, run_cli):
    """A Hugging Face BERT against its Burn port (same values, bert-burn's names): diff uses the
    --target engine: every suggestion is the tensor the port holds it under, and both printed
    commands work (issue 48)."""
    import json
    import shlex

    port = tmp_path / "port.bpk"
    made = run_cli("convert", PORTS / "bert.safetensors", port, "-a", "pytorch-to-burn",
                   "--target", PORTS / "bert_target.bpk", "-q")  # fmt: skip
    assert made.code == 0, made.stderr
    result = run_cli("diff", PORTS / "bert.safetensors", port, "--json")
    report = json.loads(result.stdout)
    assert result.code == 1
    toward = {o["name"]: o["suggestion"] for o in report["only_in_b"]}
    assert toward["embeddings.layer_norm.gamma"] == "embeddings.LayerNorm.weight"
    assert toward["embeddings.layer_norm.beta"] == "embeddings.LayerNorm.bias"
    assert toward["encoder.layers.0.mha.key.bias"] == "encoder.layer.0.attention.self.key.bias"
    assert all(toward.values())
    diff_again = shlex.split(report["suggested_command"])[1:]
    assert run_cli(*diff_again).code == 0
    convert = shlex.split(report["convert_command"])[1:]
    assert convert[:3] == ["convert", str(PORTS / "bert.safetensors"), "OUT.bpk"]
    out = tmp_path / "OUT.bpk"
    convert[2] = str(out)
    assert run_cli(*convert).code == 0
    assert run_cli("diff", out, port).code == 0


def test_did_you_mean_never_names_another_role(tmp_path):
    """With no rule that makes B's names, the name matcher still suggests, but never a bias for
    a weight (gamma/beta count as weight/bias)."""
    w = np.ones(3, dtype="<f4")
    a = _save(tmp_path / "a.safetensors",
              [array_entry("norm.weight", w), array_entry("norm.bias", w * 2)])  # fmt: skip
    b = _save(tmp_path / "b.safetensors",
              [array_entry("nrm.gamma", w * 5), array_entry("other.running_var", w)])  # fmt: skip
    report = diff_checkpoints(a, b)
    suggestions = {o.name: o.suggestion for o in (*report.only_in_a, *report.only_in_b)}
    assert suggestions["nrm.gamma"] in (None, "norm.weight")
    assert suggestions["other.running_var"] is None
    assert suggestions["norm.bias"] is None

"""Every float cast against torch's own results (issue 50).

``fixtures/valid/casts/`` holds, per source dtype, values that exercise rounding (ties, one ulp
either side, subnormals of the target, F16 overflow, signed zeros, infinities, NaN payloads)
and torch's ``.to(dtype)`` of them (``fixtures/make_casts.py``; F64 to F16/BF16 through F32,
as Burn casts). Every value but a NaN must come out bit for bit; torch's NaN bits depend on
its code path (see the generator), so a NaN must stay a NaN of the same sign. The torch tier
(``tests/torch_tier/test_casts_torch.py``) checks the same against torch at run time on every
F16/BF16 code and millions of F32 bit patterns.
"""

from __future__ import annotations

import numpy as np
import pytest

from ckptctl import open_checkpoint, save_checkpoint
from ckptctl.adapters import parse_adapter
from ckptctl.dtypes import DType, to_float
from tests.conftest import VALID
from tests.strategies import array_entry

CASTS = VALID / "casts"
PAIRS = [
    (source, target)
    for source in ("f32", "f16", "bf16", "f64")
    for target in ("f32", "f16", "bf16", "f64")
    if source != target
]


def _bits(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).reshape(-1).view(f"<u{array.dtype.itemsize}")


def _signs(array: np.ndarray) -> np.ndarray:
    bits = _bits(array)
    return bits >> (8 * bits.dtype.itemsize - 1)


def _golden(source: str, target: str) -> tuple[np.ndarray, DType, np.ndarray]:
    """The input (as stored), its dtype, and torch's cast of it."""
    with open_checkpoint(CASTS / f"{source}.safetensors") as ckpt:
        entry = ckpt["input"]
        return entry.load().copy(), entry.dtype, ckpt[f"to_{target}"].load().copy()


def assert_cast_like_torch(
    raw: np.ndarray, source: DType, got: np.ndarray, target: DType, expected: np.ndarray
) -> None:
    """Bit for bit where the input is a number; a NaN of the input's sign where it is NaN."""
    nan = np.isnan(to_float(raw, source)).reshape(-1)
    assert got.dtype == target.numpy
    mismatched = np.flatnonzero((_bits(got) != _bits(expected)) & ~nan)
    assert mismatched.size == 0, [
        (hex(int(_bits(raw)[i])), hex(int(_bits(got)[i])), hex(int(_bits(expected)[i])))
        for i in mismatched[:5]
    ]
    assert np.isnan(to_float(got, target)).reshape(-1)[nan].all()
    assert (_signs(got)[nan] == _signs(raw)[nan]).all()


@pytest.mark.parametrize(("source", "target"), PAIRS)
def test_every_cast_rounds_as_torch_does(source: str, target: str) -> None:
    raw, dtype, expected = _golden(source, target)
    nan = np.isnan(to_float(raw, dtype))
    assert 0 < nan.sum() < raw.size // 8  # the file exercises NaNs and numbers alike
    out = parse_adapter(f"cast:{target}")(array_entry("x", raw, dtype))
    assert out is not None
    assert out.dtype is DType.parse(target)
    assert_cast_like_torch(raw, dtype, out.load(), out.dtype, expected)


def test_the_fixtures_hold_the_cases_they_are_for() -> None:
    """Ties, F16 overflow and subnormals are in the inputs, so the comparison above means it."""
    raw, _, to_f16 = _golden("f32", "f16")
    bits = _bits(raw)
    assert ((bits & 0x1FFF) == 0x1000).sum() > 200  # F16 ties
    assert ((bits & 0xFFFF) == 0x8000).sum() > 10  # BF16 ties
    half = _bits(to_f16)
    finite = ~np.isnan(raw)
    assert ((half[finite] & 0x7FFF) == 0x7C00).sum() > 50  # overflow to +-inf
    assert ((half[finite] & 0x7C00) == 0).sum() > 100  # F16 subnormals and zeros
    wide, _, through_f32 = _golden("f64", "f16")
    with np.errstate(all="ignore"):
        direct = wide.astype(np.float16)  # one rounding: differs from Burn's two on some ties
    assert (_bits(direct) != _bits(through_f32))[~np.isnan(wide)].any()


def test_f16_of_values_below_its_normal_range_among_normal_weights() -> None:
    """Weights hold few values below 2**-14: each input, alone among 31 normal values, rounds
    as torch rounds it (a block of mostly normal values with rare subnormals, infinities and
    NaNs, where the golden file alone is a third subnormal)."""
    raw, dtype, expected = _golden("f32", "f16")
    spread = np.full((raw.size, 32), 0.75, dtype=np.float32)
    spread[:, 5] = raw
    want = np.full(spread.shape, 0.75, dtype=np.float16)
    want[:, 5] = expected
    out = parse_adapter("cast:f16")(array_entry("x", spread.reshape(-1), dtype))
    assert out is not None
    assert_cast_like_torch(spread.reshape(-1), dtype, out.load(), out.dtype, want.reshape(-1))


#: (source, target, -j): the writer's streamed path, several tasks on the copy threads
STREAMED = [("f32", "bf16", "2"), ("f32", "f16", "2"), ("f16", "f32", "2"), ("bf16", "f16", "1"),
            ("f64", "f16", "2"), ("f16", "bf16", "1")]  # fmt: skip


@pytest.mark.parametrize(("source", "target", "jobs"), STREAMED)
def test_a_converted_file_holds_torch_casts_of_a_large_tensor(
    tmp_path, run_cli, source: str, target: str, jobs: str
) -> None:
    """Tiled to 12 MiB of output, the cast is written a range at a time on the copy threads."""
    raw, dtype, expected = _golden(source, target)
    reps = -(-(12 << 20) // (expected.nbytes))
    src = tmp_path / "in.safetensors"
    save_checkpoint(src, [array_entry("w", np.tile(raw, reps).reshape(reps, -1), dtype)])
    out = tmp_path / "out.safetensors"
    result = run_cli("convert", src, out, "-a", f"cast:{target}", "-j", jobs, "-q")
    assert result.code == 0, result.stderr
    with open_checkpoint(out) as ckpt:
        got = ckpt["w"].load()
        assert ckpt["w"].shape == (reps, raw.size)
        assert_cast_like_torch(
            np.tile(raw, reps), dtype, got, ckpt["w"].dtype, np.tile(expected, reps)
        )


@pytest.mark.parametrize(
    ("bits", "want"),
    [
        (0x7F800001, 0x7C01),  # signalling, payload only in the dropped bits: still NaN
        (0x7F812345, 0x7C09),  # signalling: stays so, top payload bits kept (numpy's rule)
        (0xFFC00001, 0xFE00),  # quiet, negative
        (0x7FFFE000, 0x7FFF),
    ],
)
def test_nan_bits_of_f32_to_f16_keep_the_payload_and_sign(bits: int, want: int) -> None:
    raw = np.array([bits] * 3, dtype="<u4").view("<f4")
    out = parse_adapter("cast:f16")(array_entry("x", raw))
    assert out is not None
    assert _bits(out.load()).tolist() == [want] * 3


@pytest.mark.parametrize(
    ("bits", "want"),
    [(0x7C01, 0x7F802000), (0xFD23, 0xFFA46000), (0x7E00, 0x7FC00000), (0xFFFF, 0xFFFFE000)],
)
def test_nan_bits_of_f16_to_f32_keep_the_payload_and_sign(bits: int, want: int) -> None:
    raw = np.array([bits] * 3, dtype="<u2").view("<f2")
    out = parse_adapter("cast:f32")(array_entry("x", raw))
    assert out is not None
    assert _bits(out.load()).tolist() == [want] * 3

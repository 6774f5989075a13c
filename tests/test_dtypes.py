"""``ckptctl.dtypes`` against independent reference arithmetic (issue 17: mutation survivors).

The FP8 tables are compared code by code with a decoder written from the OCP FP8 spec in plain
Python floats; the BF16/F16 conversions are checked for their result dtype as well as values.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from ckptctl.dtypes import DType, _decode_table, from_float, to_float


@pytest.fixture(autouse=True)
def _fresh_tables():
    """Build the cached FP8 tables inside each test, so the test really exercises the decoder.

    mutmut maps tests to the functions they call; with a warm cache only the first test in the
    session would count as calling ``_fp8_table``.
    """
    _decode_table.cache_clear()


def fp8_reference(code: int, exp_bits: int, man_bits: int, bias: int, *, fn: bool) -> float:
    """One FP8 code's value from its sign, exponent and mantissa fields (OCP FP8, section 5)."""
    sign = -1.0 if code & 0x80 else 1.0
    exp = (code >> man_bits) & ((1 << exp_bits) - 1)
    man = code & ((1 << man_bits) - 1)
    top = (1 << exp_bits) - 1
    if fn and exp == top and man == (1 << man_bits) - 1:
        return math.nan  # E4M3FN: S.1111.111 is the only NaN
    if not fn and exp == top:
        return sign * math.inf if man == 0 else math.nan  # E5M2: IEEE-like
    if exp == 0:
        return sign * math.ldexp(man, 1 - bias - man_bits)
    return sign * math.ldexp((1 << man_bits) + man, exp - bias - man_bits)


FP8 = {
    DType.F8_E4M3: (4, 3, 7, True),
    DType.F8_E5M2: (5, 2, 15, False),
}


@pytest.mark.parametrize("dtype", list(FP8))
def test_fp8_tables_match_the_spec_for_all_256_codes(dtype):
    exp_bits, man_bits, bias, fn = FP8[dtype]
    table = _decode_table(dtype)
    assert table.shape == (256,)
    assert table.dtype == np.float32
    decoded = to_float(np.arange(256, dtype=np.uint8), dtype)
    assert decoded.dtype == np.float32
    for code in range(256):
        expected = fp8_reference(code, exp_bits, man_bits, bias, fn=fn)
        got = float(decoded[code])
        if math.isnan(expected):
            assert math.isnan(got), (hex(code), got)
        else:
            assert got == expected, (hex(code), got, expected)
            assert math.copysign(1.0, got) == math.copysign(1.0, expected), hex(code)  # -0.0


def test_fp8_known_edges():
    e4m3 = to_float(np.array([0x7E, 0x7F, 0xFF, 0x01, 0x08, 0x80], dtype=np.uint8), DType.F8_E4M3)
    assert e4m3[0] == 448.0  # the largest E4M3FN value: the top exponent is finite
    assert np.isnan(e4m3[1:3]).all()
    assert e4m3[3] == 2.0**-9  # the smallest subnormal
    assert e4m3[4] == 2.0**-6  # the smallest normal
    assert e4m3[5] == 0.0
    assert math.copysign(1.0, float(e4m3[5])) == -1.0
    e5m2 = to_float(np.array([0x7B, 0x7C, 0xFC, 0x7D, 0x01], dtype=np.uint8), DType.F8_E5M2)
    assert e5m2[0] == 57344.0
    assert (e5m2[1], e5m2[2]) == (np.inf, -np.inf)
    assert np.isnan(e5m2[3])
    assert e5m2[4] == 2.0**-16


def test_to_float_result_dtypes():
    assert to_float(np.array([1.5], dtype="<f2"), DType.F16).dtype == np.float32
    assert to_float(np.array([0x3F80], dtype="<u2"), DType.BF16).dtype == np.float32
    assert to_float(np.array([3], dtype="<i4"), DType.I32).dtype == np.float64
    f64 = np.array([0.1], dtype="<f8")
    assert to_float(f64, DType.F64) is f64


def _bf16_bits(value: float) -> int:
    """Round half to even on the f32 bit pattern, in Python integers (finite values)."""
    bits = int(struct.unpack("<I", struct.pack("<f", value))[0])
    low = bits & 0xFFFF
    up = low > 0x8000 or (low == 0x8000 and (bits >> 16) & 1)
    return ((bits >> 16) + up) & 0xFFFF


def test_from_float_bf16_from_f32_and_f64_input():
    values = [1.00390625, 1.01171875, -3.0, 2.0**-130, 3.4e38]
    out = from_float(np.array(values, dtype=np.float32), DType.BF16)
    assert out.dtype == np.uint16
    assert out.tolist() == [_bf16_bits(v) for v in values]
    # f64 input is narrowed to f32 first (the bits of an f64 are not an f32's)
    wide = from_float(np.array(values, dtype=np.float64), DType.BF16)
    assert wide.dtype == np.uint16
    assert wide.tolist() == out.tolist()
    nan = from_float(np.array([np.nan, 1.0], dtype=np.float64), DType.BF16)
    assert nan.dtype == np.uint16
    assert nan.tolist() == [0x7FC0, 0x3F80]


def test_from_float_other_targets():
    halves = from_float(np.array([1.0, 65504.0], dtype=np.float32), DType.F16)
    assert halves.dtype == np.float16
    assert halves.tolist() == [1.0, 65504.0]
    for fp8 in (DType.F8_E4M3, DType.F8_E5M2, DType.F8_E8M0):
        with pytest.raises(ValueError, match=f"casting to {fp8.value} is not supported"):
            from_float(np.zeros(1, dtype=np.float32), fp8)

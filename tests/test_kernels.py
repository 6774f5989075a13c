"""The blocked kernels against straightforward references (issue 15, round two).

``from_float(.., BF16)`` and ``transpose_2d`` run in cache-sized blocks; these properties compare
them with a per-element reference on random data that crosses block boundaries and includes the
awkward values: ties at every rounding position, NaN with any payload and sign, inf, -0.0,
subnormals and the largest finite values (which round to inf).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptctl.adapters.layout import STRIP_ROWS, transpose_2d, transpose_into
from ckptctl.dtypes import BF16_BLOCK_ELEMENTS, DType, from_float


def bf16_reference(bits: int) -> int:
    """One F32 bit pattern to BF16 bits: round half to even; NaN stays a quiet NaN."""
    value = struct.unpack("<f", struct.pack("<I", bits))[0]
    if value != value:  # NaN: keep sign and top payload bits, set the quiet bit
        return (bits >> 16) | 0x0040
    upper, lower = bits >> 16, bits & 0xFFFF
    if lower > 0x8000 or (lower == 0x8000 and upper & 1):
        upper += 1  # carries into the exponent as it should (max finite -> inf)
    return upper & 0xFFFF


SPECIAL_BITS = [
    0x00000000, 0x80000000,  # +-0.0
    0x00000001, 0x807FFFFF, 0x00008000, 0x00018000,  # subnormals, incl. ties
    0x7F800000, 0xFF800000,  # +-inf
    0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF,  # NaNs
    0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7E8000,  # max finite, ties next to it
    0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001,  # ties to even, either side
]  # fmt: skip


def _check(bits: np.ndarray) -> None:
    floats = bits.view(np.float32)
    got = from_float(floats, DType.BF16)
    want = np.array([bf16_reference(int(b)) for b in bits.reshape(-1)], dtype=np.uint16)
    assert got.dtype == np.uint16
    assert got.shape == floats.shape
    assert np.array_equal(got.reshape(-1), want)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    size=st.integers(0, 3 * BF16_BLOCK_ELEMENTS + 7),
    ties=st.booleans(),
)
def test_bf16_matches_reference_on_random_bits(seed: int, size: int, ties: bool) -> None:
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, size=size, dtype=np.uint32)
    if ties:  # force the low half to exactly 0x8000 on a third of the elements
        mask = rng.random(size) < 1 / 3
        bits[mask] = (bits[mask] & 0xFFFF0000) | 0x8000
    if size:
        where = rng.integers(0, size, size=min(size, len(SPECIAL_BITS)))
        bits[where] = np.array(SPECIAL_BITS[: len(where)], dtype=np.uint32)
    _check(bits)


def test_bf16_special_values_and_shapes() -> None:
    bits = np.array(SPECIAL_BITS, dtype=np.uint32)
    _check(bits)
    _check(bits[:4].reshape(2, 2))
    _check(np.array(0x3F808000, dtype=np.uint32))  # rank 0
    _check(np.zeros((0, 3), dtype=np.uint32))


def test_bf16_nan_only_in_a_later_block() -> None:
    bits = np.full(2 * BF16_BLOCK_ELEMENTS + 3, 0x3F808000, dtype=np.uint32)
    bits[-1] = 0xFFA00001
    _check(bits)


def test_bf16_accepts_f64_and_strided_input() -> None:
    values = np.linspace(-3, 3, 50)
    assert np.array_equal(
        from_float(values, DType.BF16), from_float(values.astype(np.float32), DType.BF16)
    )
    f32 = np.arange(40, dtype=np.float32).reshape(5, 8)
    assert np.array_equal(
        from_float(f32[:, ::2], DType.BF16), from_float(f32[:, ::2].copy(), DType.BF16)
    )


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 3 * STRIP_ROWS + 5),
    cols=st.integers(1, 2100),
    dtype=st.sampled_from([np.uint8, np.uint16, np.float32, np.float64]),
    seed=st.integers(0, 2**32 - 1),
)
def test_transpose_matches_reference(rows: int, cols: int, dtype: type, seed: int) -> None:
    array: np.ndarray = (
        np.random.default_rng(seed).integers(0, 200, size=(rows, cols)).astype(dtype)
    )
    out = transpose_2d(array)
    assert out.flags.c_contiguous
    assert out.dtype == array.dtype
    assert out.shape == (cols, rows)
    for r in range(0, rows, max(1, rows // 4)):  # element by element on a sample of rows
        assert out[:, r].tolist() == array[r].tolist()
    assert np.array_equal(out, array.T)


def test_transpose_into_a_column_slice() -> None:
    array = np.arange(300 * 517, dtype=np.float32).reshape(300, 517)
    out = np.zeros((517, 400), dtype=np.float32)
    transpose_into(out[:, 50:350], array)
    assert np.array_equal(out[:, 50:350], array.T)
    assert not out[:, :50].any()
    assert not out[:, 350:].any()


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.float64, np.complex128])
@pytest.mark.parametrize(("rows", "cols"), [(70001, 3), (9000, 127), (4099, 64), (1030, 128)])
def test_transpose_of_a_narrow_band_of_a_tall_matrix(dtype: type, rows: int, cols: int) -> None:
    """A band of columns (a strided view), rows not a multiple of the strip, into a column
    slice; every element moved as its bits (a signalling NaN stays one)."""
    rng = np.random.default_rng(rows)
    wide = rng.integers(0, 2**8, size=(rows, 3 * cols * np.dtype(dtype).itemsize), dtype=np.uint8)
    matrix: np.ndarray = wide.view(dtype)[:, cols : 2 * cols]
    if dtype is np.float32:
        matrix[::7, 0] = np.array([0x7F800001], dtype=np.uint32).view(np.float32)[0]
    out: np.ndarray = np.zeros((cols, rows + 9), dtype=dtype)
    transpose_into(out[:, 4 : 4 + rows], matrix)
    assert out[:, 4 : 4 + rows].tobytes() == np.ascontiguousarray(matrix.T).tobytes()
    assert not out[:, :4].any()
    assert not out[:, 4 + rows :].any()


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.float64])
@pytest.mark.parametrize(("rows", "cols"), [(9000, 127), (4099, 64), (1030, 130), (20011, 37)])
@pytest.mark.parametrize("first", [0, 1, 16])
def test_transpose_of_a_band_into_whole_rows(dtype: type, rows: int, cols: int, first: int) -> None:
    """A band of columns from ``first`` on (8-byte aligned or not) into a buffer of whole
    output rows, as a transposed tensor is written a band at a time: every element's bits,
    NaN payloads included, whether its rows are moved as 8-byte units or one by one."""
    rng = np.random.default_rng(rows + first)
    width = (cols + 40) * np.dtype(dtype).itemsize
    wide: np.ndarray = rng.integers(0, 2**8, size=(rows, width), dtype=np.uint8).view(dtype)
    if dtype is np.float32:
        wide[::5, first] = np.array([0x7F800001], dtype=np.uint32).view(np.float32)[0]
    matrix = wide[:, first : first + cols]
    out: np.ndarray = np.empty((cols, rows), dtype=dtype)
    transpose_into(out, matrix)
    assert out.tobytes() == np.ascontiguousarray(matrix.T).tobytes()

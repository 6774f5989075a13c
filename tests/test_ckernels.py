"""The compiled kernels (``ckptctl._ckernels``) against the numpy ones and numpy's own casts
(issue 50, round three).

Each public entry point (``convert_float``, ``transpose_2d``, ``transpose_into``) runs on both
paths -- the compiled kernels, and the numpy fallback forced by ``CKPTCTL_NO_CKERNELS=1`` -- and
must give the same bits: every F16 and BF16 code, F32 bit
patterns with every kind of rounding case, odd lengths, unaligned buffers. The compiled path is
the ``ckernels`` tier: it skips where the extension was not built, and CI requires it. The
extension's own functions are tested with hostile arguments: every count and shape is checked
against the buffers before any access.
"""

from __future__ import annotations

import numpy as np
import pytest

from ckptctl.adapters.cast import convert_float
from ckptctl.adapters.layout import transpose_2d, transpose_into
from ckptctl.dtypes import NO_CKERNELS_ENV, DType, ckernels, to_float

COMPILED = pytest.param("compiled", marks=pytest.mark.ckernels)


@pytest.fixture(params=[COMPILED, "numpy"])
def path(request, monkeypatch):
    """Which kernels run: the compiled ones (skips where they are not built) or numpy's."""
    if request.param == "numpy":
        monkeypatch.setenv(NO_CKERNELS_ENV, "1")
        assert ckernels() is None
    else:
        monkeypatch.delenv(NO_CKERNELS_ENV, raising=False)
        if ckernels() is None:
            pytest.skip("ckptctl._ckernels is not built (no C compiler at install time)")
    return request.param


@pytest.fixture
def ck(monkeypatch):
    """The extension module itself (the ``ckernels`` tier)."""
    monkeypatch.delenv(NO_CKERNELS_ENV, raising=False)
    return pytest.importorskip("ckptctl._ckernels")


def _numpy_path(monkeypatch, call):
    with monkeypatch.context() as m:
        m.setenv(NO_CKERNELS_ENV, "1")
        return call()


@pytest.mark.ckernels
def test_the_compiled_kernels_are_built_and_used_unless_disabled(ck, monkeypatch):
    assert ckernels() is ck
    monkeypatch.setenv(NO_CKERNELS_ENV, "1")
    assert ckernels() is None


def _bits_of(array: np.ndarray) -> np.ndarray:
    return array.reshape(-1).view(f"<u{array.dtype.itemsize}")


def _f32_patterns() -> np.ndarray:
    """Every upper half (sign, exponent, top mantissa bits) with low halves at every rounding
    position of BF16 (bit 15) and F16 (bit 12, and the subnormal ones): ties, one either side,
    zero, all ones, and random ones; all NaN payload tops, +-inf, overflow, subnormals."""
    lows = [0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x2000, 0x3000, 0x7FFF, 0x8000, 0x8001]
    lows += [0xFFFF, 0xF000, 0xE000, 0x5000, 0x9000]
    upper = np.arange(1 << 16, dtype=np.uint32) << 16
    rows = [upper | low for low in lows]
    rng = np.random.default_rng(50)
    rows.append(upper | rng.integers(0, 1 << 16, size=upper.size, dtype=np.uint32))
    return np.concatenate(rows)


def test_every_f16_code_widens_to_numpys_f32(path):
    codes = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    got = convert_float(codes, DType.F16, DType.F32)
    assert _bits_of(got).tolist() == _bits_of(codes.astype(np.float32)).tolist()


def test_every_bf16_code_widens_to_its_f32(path):
    codes = np.arange(1 << 16, dtype=np.uint16)
    got = convert_float(codes, DType.BF16, DType.F32)
    assert np.array_equal(_bits_of(got), codes.astype(np.uint32) << 16)


def test_f32_to_f16_is_numpys_cast_bit_for_bit(path):
    bits = _f32_patterns()
    got = convert_float(bits.view(np.float32), DType.F32, DType.F16)
    with np.errstate(over="ignore", invalid="ignore"):
        want = bits.view(np.float32).astype(np.float16)
    mismatched = np.flatnonzero(_bits_of(got) != _bits_of(want))
    assert mismatched.size == 0, [hex(int(bits[i])) for i in mismatched[:5]]


@pytest.mark.ckernels
@pytest.mark.parametrize(("source", "target"), [("F32", "BF16"), ("F32", "F16"), ("F16", "BF16")])
def test_compiled_narrowing_casts_equal_the_numpy_kernels(ck, monkeypatch, source, target):
    """Every F32 pattern above (and every F16 code, through F32), with NaN payloads, whose NaN
    bits only the numpy kernels define: the compiled ones must keep them the same."""
    raw = _f32_patterns() if source == "F32" else np.arange(1 << 16, dtype=np.uint16)
    src, dst = DType(source), DType(target)
    raw = raw.view(src.numpy)
    got = convert_float(raw, src, dst)
    want = _numpy_path(monkeypatch, lambda: convert_float(raw, src, dst))
    mismatched = np.flatnonzero(_bits_of(got) != _bits_of(want))
    assert mismatched.size == 0, [hex(int(_bits_of(raw)[i])) for i in mismatched[:5]]


@pytest.mark.ckernels
@pytest.mark.parametrize("target", [DType.F16, DType.BF16])
@pytest.mark.parametrize("length", [0, 1, 7, 65535, 65537, 3 * 65536 + 5])
@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_odd_lengths_and_unaligned_buffers(ck, monkeypatch, target, length, offset):
    rng = np.random.default_rng(length + offset)
    storage = bytearray(4 * length + offset)
    raw = np.frombuffer(storage, dtype=np.float32, count=length, offset=offset)
    raw[:] = rng.integers(0, 2**32, size=length, dtype=np.uint32).view(np.float32)
    got = convert_float(raw, DType.F32, target)
    want = _numpy_path(monkeypatch, lambda: convert_float(raw.copy(), DType.F32, target))
    assert got.tobytes() == want.tobytes()
    widened = convert_float(got, target, DType.F32)
    assert (
        widened.tobytes()
        == _numpy_path(monkeypatch, lambda: convert_float(got, target, DType.F32)).tobytes()
    )


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.float64])
@pytest.mark.parametrize(
    ("rows", "cols"), [(1, 1), (1, 9), (9, 1), (15, 17), (33, 65), (300, 517), (4099, 37)]
)
def test_transpose_of_every_element_size_and_odd_shapes(path, dtype, rows, cols):
    rng = np.random.default_rng(rows * cols)
    width = cols * np.dtype(dtype).itemsize
    array = rng.integers(0, 256, size=(rows, width), dtype=np.uint8).view(dtype)
    out = transpose_2d(array)
    assert out.tobytes() == np.ascontiguousarray(array.T).tobytes()


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32, np.float64])
@pytest.mark.parametrize("first", [0, 1, 5])
def test_transpose_of_a_band_into_a_column_slice(path, dtype, first):
    """A band of columns (row stride wider than the band, maybe unaligned start) into a column
    slice of a wider output (row stride wider than the rows): the elements around untouched."""
    rng = np.random.default_rng(first)
    rows, cols = 1037, 45
    wide = rng.integers(0, 256, size=(rows, (cols + 9) * np.dtype(dtype).itemsize), dtype=np.uint8)
    band = wide.view(dtype)[:, first : first + cols]
    out = np.zeros((cols, rows + 11), dtype=dtype)
    transpose_into(out[:, 3 : 3 + rows], band)
    assert out[:, 3 : 3 + rows].tobytes() == np.ascontiguousarray(band.T).tobytes()
    assert not out[:, :3].any()
    assert not out[:, 3 + rows :].any()


def test_transpose_of_elements_the_kernel_does_not_take(path):
    """16-byte elements and reversed rows: moved as before (numpy), same result."""
    array = (np.arange(60) + 1j).reshape(6, 10)
    assert np.array_equal(transpose_2d(array), array.T)
    flipped = np.arange(600, dtype=np.float32).reshape(20, 30)[::-1]
    assert np.array_equal(transpose_2d(flipped), flipped.T)


# ---- hostile arguments to the extension itself ----

F32 = np.zeros(8, dtype=np.float32)


@pytest.mark.ckernels
@pytest.mark.parametrize("name", ["f32_to_bf16", "f32_to_f16", "f16_to_f32", "bf16_to_f32"])
@pytest.mark.parametrize("count", [-1, 17, 2**62, 2**63 - 1])
def test_a_cast_count_beyond_either_buffer_is_refused(ck, name, count):
    source = np.zeros(16, dtype=np.uint16)  # 32 bytes: 8 F32 or 16 F16 values
    dest = bytearray(32)
    with pytest.raises(ValueError, match="do not fit"):
        getattr(ck, name)(source, dest, count)
    assert dest == bytearray(32)


@pytest.mark.ckernels
def test_a_cast_refuses_bad_buffers(ck):
    with pytest.raises(BufferError, match="not writable"):
        ck.f32_to_bf16(F32, bytes(16), 8)
    with pytest.raises(ValueError, match="read-only"):
        ck.f32_to_bf16(F32, np.frombuffer(bytes(16), np.uint16), 8)
    with pytest.raises(ValueError, match="contiguous"):
        ck.f32_to_bf16(F32[::2], bytearray(16), 4)
    with pytest.raises(TypeError):
        ck.f32_to_bf16(1, bytearray(16), 4)
    with pytest.raises(OverflowError):
        ck.f32_to_bf16(F32, bytearray(16), 2**64)
    shared = bytearray(64)
    with pytest.raises(ValueError, match="overlap"):
        ck.f32_to_bf16(memoryview(shared)[:32], memoryview(shared)[16:48], 8)
    assert ck.f32_to_bf16(F32, bytearray(16), 0) is None


@pytest.mark.ckernels
@pytest.mark.parametrize(
    ("rows", "cols", "src_stride", "dst_stride", "itemsize"),
    [
        (4, 4, 4, 4, 3),  # element size
        (4, 4, 4, 4, 16),
        (5, 4, 4, 4, 4),  # one row too many for the source
        (4, 5, 5, 4, 4),
        (4, 4, 3, 4, 4),  # stride narrower than a row
        (4, 4, 4, 3, 4),
        (-1, 4, 4, 4, 4),
        (4, -1, 4, 4, 4),
        (2**62, 2, 2**62, 2**62, 8),  # sizes that overflow
        (2, 2**62, 2**62, 2, 8),
        (3, 2, 2**62, 3, 4),
        (1, 2, 2**62, 1, 8),  # one row: its stride unused, but not representable in bytes
        (2, 1, 1, 2**62, 8),
    ],
)
def test_a_transpose_shape_beyond_either_buffer_is_refused(
    ck, rows, cols, src_stride, dst_stride, itemsize
):
    source = np.zeros(16, dtype=np.uint32)
    dest = bytearray(64)
    with pytest.raises(ValueError, match="transpose"):
        ck.transpose(source, dest, rows, cols, src_stride, dst_stride, itemsize)
    assert dest == bytearray(64)


@pytest.mark.ckernels
def test_a_transpose_fits_exactly_and_no_further(ck):
    """A [3, 2] matrix in rows of 5 elements needs 2 * 5 + 2 of them; one fewer is refused."""
    source = np.arange(12, dtype=np.uint16)
    dest = np.zeros(4 + 3, dtype=np.uint16)  # [2, 3] in rows of 4
    ck.transpose(source, dest, 3, 2, 5, 4, 2)
    assert dest.tolist() == [0, 5, 10, 0, 1, 6, 11]
    with pytest.raises(ValueError, match="does not fit"):
        ck.transpose(source[:11], dest, 3, 2, 5, 4, 2)
    with pytest.raises(ValueError, match="does not fit"):
        ck.transpose(source, dest[:6], 3, 2, 5, 4, 2)


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16])
def test_to_float_of_every_code_and_of_strided_arrays(path, dtype):
    """``to_float`` (statistics, diff, verify --no-nan) widens every F16 code as numpy does and
    every BF16 code exactly, whatever the array's shape and strides."""
    codes = np.arange(1 << 16, dtype=np.uint16)
    want = (
        codes.view(np.float16).astype(np.float32)
        if dtype is DType.F16
        else (codes.astype(np.uint32) << 16).view(np.float32)
    )
    raw = codes.view(np.float16) if dtype is DType.F16 else codes
    got = to_float(raw.reshape(256, 256), dtype)
    assert got.dtype == np.float32
    assert got.shape == (256, 256)
    assert _bits_of(got).tolist() == _bits_of(want).tolist()
    strided = to_float(raw.reshape(256, 256)[::3, 1::2], dtype)
    assert _bits_of(strided).tolist() == _bits_of(want.reshape(256, 256)[::3, 1::2].copy()).tolist()
    assert to_float(raw[:0], dtype).shape == (0,)

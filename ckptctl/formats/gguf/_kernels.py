"""GGML's block formats as numpy kernels: bytes of whole blocks in, float32 values out.

A quantized tensor is a run of blocks; each block holds ``block_size`` values in ``type_size``
bytes (``_ggml.GGMLType``), little-endian, laid out as the ``block_*`` structs of llama.cpp's
``ggml/src/ggml-common.h`` (QK_K = 256):

=========  ====  =================================================================================
type       size  fields, in order (``f16``: IEEE half; sub-block = values sharing one scale)
=========  ====  =================================================================================
Q4_0         18  d f16, qs[16]: value j = d * (nibble j - 8); nibbles: low halves of qs, then high
Q4_1         20  d f16, m f16, qs[16]: d * nibble + m
Q5_0         22  d f16, qh u32 (bit j: 5th bit of value j), qs[16]: d * (q - 16)
Q5_1         24  d f16, m f16, qh u32, qs[16]: d * q + m
Q8_0         34  d f16, qs[32] int8: d * q
Q2_K         84  scales[16] (4-bit scale | 4-bit min), qs[64] 2-bit, d f16, dmin f16
Q3_K        110  hmask[32], qs[64] 2-bit, scales[12] (16 x 6-bit, minus 32), d f16
Q4_K        144  d f16, dmin f16, scales[12] (8 x 6-bit scale + min), qs[128] 4-bit
Q5_K        176  d f16, dmin f16, scales[12], qh[32], qs[128]
Q6_K        210  ql[128] 4-bit, qh[64] 2-bit, scales[16] int8, d f16: (d * scale) * (q - 32)
IQ2_XXS      66  d f16, 8 x (u32 grid indices, u32 signs + scale): ``iq2xxs_grid`` rows of 8
IQ2_XS       74  d f16, qs[32] u16 (9-bit grid index, 7-bit sign index), scales[8]
IQ2_S        82  d f16, qs[32], signs[32], qh[8], scales[8]: ``iq2s_grid`` (10-bit index)
IQ3_XXS      98  d f16, qs[64] grid indices, 8 x u32 (signs + scale): ``iq3xxs_grid`` rows of 4
IQ3_S       110  d f16, qs[64], qh[8], signs[32], scales[4]: ``iq3s_grid`` (9-bit index)
IQ1_S        50  d f16, qs[32], qh[8] u16: ``iq1s_grid`` (11-bit index) + delta +-1/8
IQ1_M        56  qs[32], qh[16], scales[4] u16 (3-bit scales; d f16 in their top nibbles)
IQ4_NL       18  d f16, qs[16]: d * kvalues_iq4nl[nibble]
IQ4_XS      136  d f16, scales_h u16, scales_l[4], qs[128]: 8 sub-blocks, 6-bit scale - 32
TQ1_0        54  qs[48] (5 base-3 digits a byte), qh[4] (4 digits), d f16: d * (digit - 1)
TQ2_0        66  qs[64] 2-bit, d f16: d * (q - 1)
MXFP4        17  e (E8M0 scale, halved), qs[16]: e * kvalues_mxfp4[nibble] (E2M1 doubled)
NVFP4        36  d[4] (UE4M3, one per 16 values, halved), qs[32]: d * kvalues_mxfp4[nibble]
=========  ====  =================================================================================

Each kernel decodes a batch of blocks, ``(n, type_size)`` bytes, into a preallocated ``(n,
block_size)`` float32 array with numpy ufuncs (``_quants`` runs them batch by batch). The
arithmetic is gguf-py 0.19.0's (``gguf/quants.py``, the reference in the tests), operation for
operation: the scale is widened from f16 to f32 first and every product and sum is rounded to
f32 in the same order (``d * q + m``, never ``d * (q + m / d)``), so NaN and infinite scales
give the same bits too. One liberty, which changes no bit: numpy has no vector loop for shifting
bytes, so several kernels keep a quant 2**k times too large (``byte & 0xF0`` is 16 x the high
nibble) and divide its f32 scale by 2**k instead. ``(d / 2**k) * (2**k * q)`` is the same real
number as ``d * q``, rounded once; the division is exact because no scale is that close to the
f32 subnormals (an f16 scale is at least 2**-24).
"""

from __future__ import annotations

import base64
import functools
from typing import TYPE_CHECKING

import numpy as np

from ckptctl.formats.gguf._ggml import QK_K
from ckptctl.formats.gguf._grids import GRIDS

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import NDArray

    Blocks = NDArray[np.uint8]
    Values = NDArray[np.float32]
    Kernel = Callable[[Blocks, Values], None]

_F32 = np.float32
_U8 = np.uint8
#: Shifts that take the 2-bit fields of a byte apart, lowest first.
_SHIFT2 = np.array([0, 2, 4, 6], dtype=_U8)
#: Factors that move 2-bit field k of a byte (bits 2k, 2k+1) to bits 6-7 (bytes wrap), then
#: ``& 0xC0``: numpy has no vector loop for shifting bytes, it has one for multiplying them.
_TO_TOP2 = np.array([64, 16, 4, 1], dtype=_U8).reshape(4, 1)
#: Factors that move bit k of a byte to bit 7, then ``& 0x80``.
_TO_TOP1 = np.array([128, 64, 32, 16, 8, 4, 2, 1], dtype=_U8).reshape(8, 1)
#: ``kvalues_iq4nl`` of ggml-common.h: the 16 levels of IQ4_NL and IQ4_XS.
_IQ4NL_LEVELS = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=_F32
)
#: ``kvalues_mxfp4``: the E2M1 code points doubled (the scales are halved to match).
_FP4_LEVELS = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=_F32)


def _half(blocks: Blocks, offset: int) -> Values:
    """The f16 at byte ``offset`` of every block, widened to f32: shape (blocks, 1)."""
    return blocks.view(np.float16)[:, offset // 2 : offset // 2 + 1].astype(_F32)


def _per_value(scale: Values, width: int) -> Values:
    """Each of ``scale`` (n, groups) repeated for the ``width`` values of its group, flat: a
    full-length operand is cheaper for numpy than broadcasting over short rows."""
    return np.repeat(scale.reshape(-1), width)


def _nibbles(qs: Blocks, low: Values, high: Values) -> None:
    """Low and high nibbles of ``qs``, written as float32 into ``low`` and ``high``."""
    np.bitwise_and(qs, 15, out=low, casting="unsafe")
    np.right_shift(qs, 4, out=high, casting="unsafe")


def _scaled(out: Values, q: NDArray[np.generic], scale: Values) -> None:
    """``out = scale * q`` with ``q`` widened to f32 (exact) and broadcast against ``scale``."""
    np.multiply(q, scale, out=out, casting="unsafe")


# -- the 32-value formats ----------------------------------------------------------------------


def _q4_0(b: Blocks, out: Values) -> None:
    _nibbles(b[:, 2:], out[:, :16], out[:, 16:])
    np.subtract(out, _F32(8), out=out)
    np.multiply(out, _half(b, 0), out=out)


def _q4_1(b: Blocks, out: Values) -> None:
    _nibbles(b[:, 4:], out[:, :16], out[:, 16:])
    np.multiply(out, _half(b, 0), out=out)
    np.add(out, _half(b, 2), out=out)


def _five_bits(qh: Blocks, qs: Blocks) -> Blocks:
    """Q5_0/Q5_1's 5-bit values: nibbles of ``qs`` with bit j of ``qh`` (u32 LE) on top."""
    q = np.unpackbits(qh, axis=1, bitorder="little")
    np.multiply(q, 16, out=q)
    q[:, :16] |= qs & _U8(15)
    q[:, 16:] |= qs // _U8(16)
    return q


def _q5_0(b: Blocks, out: Values) -> None:
    np.subtract(_five_bits(b[:, 2:6], b[:, 6:]), _F32(16), out=out)
    np.multiply(out, _half(b, 0), out=out)


def _q5_1(b: Blocks, out: Values) -> None:
    _scaled(out, _five_bits(b[:, 4:8], b[:, 8:]), _half(b, 0))
    np.add(out, _half(b, 2), out=out)


def _q8_0(b: Blocks, out: Values) -> None:
    _scaled(out, b[:, 2:].view(np.int8), _half(b, 0))


def _iq4_nl(b: Blocks, out: Values) -> None:
    q = np.empty(out.shape, dtype=_U8)
    np.bitwise_and(b[:, 2:], 15, out=q[:, :16])
    np.right_shift(b[:, 2:], 4, out=q[:, 16:])
    np.take(_IQ4NL_LEVELS, q, out=out, mode="wrap")
    np.multiply(out, _half(b, 0), out=out)


@functools.cache
def _e8m0_halves() -> Values:
    """``ggml_e8m0_to_fp32_half`` for every byte: 2**(e - 128) as f32 bits (subnormal below 2)."""
    e = np.arange(256, dtype=np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23))
    return bits.astype(np.uint32).view(_F32)


def _mxfp4(b: Blocks, out: Values) -> None:
    q = np.empty(out.shape, dtype=_U8)
    np.bitwise_and(b[:, 1:], 15, out=q[:, :16])
    np.right_shift(b[:, 1:], 4, out=q[:, 16:])
    np.take(_FP4_LEVELS, q, out=out, mode="wrap")
    np.multiply(out, _e8m0_halves()[b[:, :1]], out=out)


@functools.cache
def _ue4m3_halves() -> Values:
    """NVFP4's scale byte as gguf-py reads it: UE4M3 (bit 7 ignored, 0x7F as 0), halved."""
    x = np.arange(256)
    exp, man = (x >> 3) & 15, (x & 7).astype(np.float64)
    value = np.where(exp == 0, man * 2.0**-9, (1 + man / 8) * 2.0 ** (exp - 7.0)) * 0.5
    return np.where((x == 0) | (x == 0x7F), 0.0, value).astype(_F32)


def _nvfp4(b: Blocks, out: Values) -> None:
    n = len(b)
    q = np.empty((n, 4, 2, 8), dtype=_U8)
    qs = b[:, 4:].reshape(n, 4, 8)
    np.bitwise_and(qs, 15, out=q[:, :, 0])
    np.right_shift(qs, 4, out=q[:, :, 1])
    o = out.reshape(n, 4, 16)
    np.take(_FP4_LEVELS, q.reshape(n, 4, 16), out=o, mode="wrap")
    np.multiply(o, _ue4m3_halves()[b[:, :4]][:, :, None], out=o)


# -- the k-quants (super-blocks of 256) ---------------------------------------------------------


def _top2(qs: Blocks) -> Blocks:
    """64 x each 2-bit field of ``qs`` (n, ..., 32): (n, ..., 4, 32), field k in row k."""
    q = np.multiply(qs[..., None, :], _TO_TOP2)
    q &= _U8(0xC0)
    return q


def _q2_k(b: Blocks, out: Values) -> None:
    n = len(b)
    scales = b[:, :16]
    dl = _half(b, 80) * (scales & _U8(15)).astype(_F32) / _F32(64)  # quants kept 64 x too large
    ml = _half(b, 82) * (scales // _U8(16)).astype(_F32)
    out.reshape(n, 2, 4, 32)[...] = _top2(b[:, 16:80].reshape(n, 2, 32))
    flat = out.reshape(-1)
    np.multiply(flat, _per_value(dl, 16), out=flat)
    np.subtract(flat, _per_value(ml, 16), out=flat)


def _q3_k_scales(s: Blocks) -> NDArray[np.int8]:
    """Q3_K's 16 six-bit scales: low nibbles from bytes 0-7, 2-bit tops from bytes 8-11."""
    n = len(s)
    low = np.empty((n, 2, 8), dtype=_U8)
    np.bitwise_and(s[:, :8], 15, out=low[:, 0])
    np.right_shift(s[:, :8], 4, out=low[:, 1])
    high = (s[:, 8:].reshape(n, 1, 4) >> _SHIFT2.reshape(4, 1)) & _U8(3)
    return (low.reshape(n, 16) | (high.reshape(n, 16) << _U8(4))).view(np.int8) - np.int8(32)


def _q3_k(b: Blocks, out: Values) -> None:
    n = len(b)
    dl = _half(b, 108) * _q3_k_scales(b[:, 96:108]) / _F32(32)  # quants kept 32 x too large
    q = _top2(b[:, 32:96].reshape(n, 2, 32))
    np.floor_divide(q, 2, out=q)  # 32 x the low 2 bits
    high = np.multiply(b[:, :32].reshape(n, 1, 32), _TO_TOP1)
    high &= _U8(0x80)  # 32 x 4 x the high bit: the offset is 0 where it is set, -4 where not
    q8 = q.reshape(n, 8, 32)
    q8 |= high
    q8 ^= _U8(0x80)  # as int8: 32 x (q - 4)
    out[...] = q.view(np.int8).reshape(n, QK_K)
    flat = out.reshape(-1)
    np.multiply(flat, _per_value(dl, 16), out=flat)


def _k_scales(s: Blocks) -> tuple[Blocks, Blocks]:
    """Q4_K/Q5_K's 8 six-bit scales and 8 six-bit mins from their 12 bytes.

    Bytes 0-3 hold scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7; bytes 4-7 the
    same for the mins; bytes 8-11 the low nibbles of scales 4-7 and (high nibbles) mins 4-7.
    Worked four bytes at a time, as u32 lanes (a byte shift here never crosses a lane: the
    masks keep only bits that come from the same byte).
    """
    n = len(s)
    a, m, tail = np.ascontiguousarray(s).view(np.uint32).T
    sc, mn = np.empty((n, 2), dtype=np.uint32), np.empty((n, 2), dtype=np.uint32)
    low6, low4, top2 = np.uint32(0x3F3F3F3F), np.uint32(0x0F0F0F0F), np.uint32(0x30303030)
    np.bitwise_and(a, low6, out=sc[:, 0])
    np.bitwise_or(tail & low4, (a >> np.uint32(2)) & top2, out=sc[:, 1])
    np.bitwise_and(m, low6, out=mn[:, 0])
    np.bitwise_or((tail >> np.uint32(4)) & low4, (m >> np.uint32(2)) & top2, out=mn[:, 1])
    return sc.view(_U8), mn.view(_U8)


def _k_affine(b: Blocks, out: Values, unit: Values) -> None:
    """``(d * scale) * q - dmin * min`` per 32-value sub-block, with ``unit * q`` in ``out``."""
    sc, mn = _k_scales(b[:, 4:16])
    flat = out.reshape(-1)
    np.multiply(flat, _per_value(_half(b, 0) * sc / unit, 32), out=flat)
    np.subtract(flat, _per_value(_half(b, 2) * mn, 32), out=flat)


#: Q4_K keeps the high nibbles 16 x too large (``byte & 0xF0``): sub-blocks 1, 3, 5, 7.
_Q4_K_UNITS = np.array([1, 16] * 4, dtype=_F32)
#: Q5_K keeps every quant 8 x too large.
_Q5_K_UNITS = np.full(8, 8, dtype=_F32)


def _q4_k(b: Blocks, out: Values) -> None:
    n = len(b)
    q = np.empty((n, 4, 2, 32), dtype=_U8)
    qs = b[:, 16:].reshape(n, 4, 32)
    np.bitwise_and(qs, 15, out=q[:, :, 0])
    np.bitwise_and(qs, 0xF0, out=q[:, :, 1])
    out[...] = q.reshape(n, QK_K)
    _k_affine(b, out, _Q4_K_UNITS)


def _q5_k(b: Blocks, out: Values) -> None:
    n = len(b)
    q = np.multiply(b[:, 16:48].reshape(n, 1, 32), _TO_TOP1)  # bit k of qh: sub-block k's 5th
    q &= _U8(0x80)
    q4 = q.reshape(n, 4, 2, 32)
    qs = b[:, 48:].reshape(n, 4, 32)
    q4[:, :, 0] |= np.multiply(qs, 8) & _U8(0x78)
    q4[:, :, 1] |= (qs // _U8(2)) & _U8(0x78)
    out.reshape(n, 8, 32)[...] = q
    _k_affine(b, out, _Q5_K_UNITS)


def _q6_k(b: Blocks, out: Values) -> None:
    n = len(b)
    q = _top2(b[:, 128:192].reshape(n, 2, 32))  # the top 2 bits, 4 x 16 x too large
    ql = b[:, :128].reshape(n, 2, 2, 32)
    q[:, :, :2] |= np.multiply(ql, 4) & _U8(0x3C)
    q[:, :, 2:] |= (ql // _U8(4)) & _U8(0x3C)
    q ^= _U8(0x80)  # as int8: 4 x (q - 32)
    out[...] = q.view(np.int8).reshape(n, QK_K)
    flat = out.reshape(-1)
    scale = _half(b, 208) * b[:, 192:208].view(np.int8) / _F32(4)
    np.multiply(flat, _per_value(scale, 16), out=flat)


def _tq1_0(b: Blocks, out: Values) -> None:
    n = len(b)
    digits = np.empty((n, QK_K), dtype=_U8)  # each byte times 3**k (mod 256): digit k on top
    powers = np.array([1, 3, 9, 27, 81], dtype=_U8).reshape(5, 1)
    np.multiply(b[:, None, :32], powers, out=digits[:, :160].reshape(n, 5, 32))
    np.multiply(b[:, None, 32:48], powers, out=digits[:, 160:240].reshape(n, 5, 16))
    np.multiply(b[:, None, 48:52], powers[:4], out=digits[:, 240:].reshape(n, 4, 4))
    wide = np.multiply(digits, 3, dtype=np.uint16)
    np.right_shift(wide, 8, out=out, casting="unsafe")
    np.subtract(out, _F32(1), out=out)
    np.multiply(out, _half(b, 52), out=out)


def _tq2_0(b: Blocks, out: Values) -> None:
    n = len(b)
    out.reshape(n, 2, 4, 32)[...] = _top2(b[:, :64].reshape(n, 2, 32))
    np.subtract(out, _F32(64), out=out)  # 64 x (q - 1)
    np.multiply(out, _half(b, 64) / _F32(64), out=out)


# -- the plain types gguf-py's dequantize also takes ----------------------------------------------


def _f32(b: Blocks, out: Values) -> None:
    out[...] = b.view(_F32)


def _f16(b: Blocks, out: Values) -> None:
    out[...] = b.view(np.float16)


def _bf16(b: Blocks, out: Values) -> None:
    np.left_shift(b.view(np.uint16), 16, out=out.view(np.uint32), dtype=np.uint32)


# -- the IQ types: rows of a lattice (``_grids``), signs, scales -------------------------------


@functools.cache
def _grid(name: str) -> Values:
    """One of ``_grids.GRIDS`` unpacked: (rows, width) float32."""
    rows, width, alphabet, bits, text = GRIDS[name]
    packed = np.frombuffer(base64.b64decode(text), dtype=_U8)
    per_byte = 8 // bits
    shifts = (np.arange(per_byte) * bits).astype(_U8)
    codes = (packed[:, None] >> shifts) & _U8((1 << bits) - 1)
    grid: Values = np.array(alphabet, dtype=_F32)[codes.reshape(rows, width)]
    return grid


@functools.cache
def _sign_rows() -> Values:
    """``ksigns_iq2xs`` as rows of 8 factors +-1: 7 sign bits and an eighth that makes the
    count of minus signs even."""
    index = np.arange(128, dtype=_U8)
    parity = np.unpackbits(index[:, None], axis=1).sum(axis=1) & 1
    bits = np.unpackbits((index | (parity << 7).astype(_U8))[:, None], axis=1, bitorder="little")
    return np.where(bits == 0, _F32(1), _F32(-1))


def _sign_bits(signs: Blocks) -> Values:
    """One factor +-1 for every bit of ``signs`` (lowest bit first)."""
    bits = np.unpackbits(signs, axis=-1, bitorder="little")
    return np.where(bits == 0, _F32(1), _F32(-1))


def _lattice(
    out: Values, grid: str, index: NDArray[np.integer], scale: Values, sign: Values
) -> None:
    """``(scale * grid[index]) * sign`` into ``out``; ``scale`` broadcasts over the rows."""
    rows = out.reshape(*index.shape, -1)
    np.take(_grid(grid), index, axis=0, out=rows, mode="wrap")
    np.multiply(rows, scale, out=rows)
    np.multiply(rows, sign.reshape(rows.shape), out=rows)


def _half_plus(scale: NDArray[np.integer]) -> Values:
    """``0.5 + scale`` in f32, as the IQ2/IQ3 scales start."""
    return _F32(0.5) + scale.astype(_F32)


def _iq2_xxs(b: Blocks, out: Values) -> None:
    n = len(b)
    words = b[:, 2:].reshape(n, 8, 8)
    aux = words[:, :, 4:].copy().view(np.uint32)  # (n, 8, 1): 4 x 7 sign bits, 4-bit scale
    scale = _half(b, 0)[:, :, None] * _half_plus(aux >> np.uint32(28)) * _F32(0.25)
    sign_index = (aux >> np.array([0, 7, 14, 21], dtype=np.uint32)) & np.uint32(127)
    _lattice(out, "iq2xxs_grid", words[:, :, :4], scale[..., None], _sign_rows()[sign_index])


def _iq2_scales(s: Blocks, d: Values, factor: float) -> Values:
    """The 16 sub-block scales of IQ2_XS/IQ2_S: ``d * (0.5 + nibble) * factor``."""
    n = len(s)
    nib = np.empty((n, 8, 2), dtype=_U8)
    np.bitwise_and(s, 15, out=nib[:, :, 0])
    np.right_shift(s, 4, out=nib[:, :, 1])
    return d * _half_plus(nib.reshape(n, 16)) * _F32(factor)


def _iq2_xs(b: Blocks, out: Values) -> None:
    n = len(b)
    qs = b[:, 2:66].copy().view(np.uint16)  # 9-bit grid index, 7-bit sign index
    scale = _iq2_scales(b[:, 66:74], _half(b, 0), 0.25).reshape(n, 16, 1, 1)
    index = (qs & np.uint16(511)).reshape(n, 16, 2)
    _lattice(out, "iq2xs_grid", index, scale, _sign_rows()[qs >> np.uint16(9)])


def _iq2_s(b: Blocks, out: Values) -> None:
    n = len(b)
    high = (b[:, 66:74].reshape(n, 8, 1) >> _SHIFT2) & _U8(3)
    index = b[:, 2:34].astype(np.uint16) | (high.reshape(n, 32).astype(np.uint16) << 8)
    scale = _iq2_scales(b[:, 74:82], _half(b, 0), 0.25).reshape(n, 16, 1, 1)
    _lattice(out, "iq2s_grid", index.reshape(n, 16, 2), scale, _sign_bits(b[:, 34:66]))


def _iq3_xxs(b: Blocks, out: Values) -> None:
    n = len(b)
    aux = b[:, 66:98].copy().view(np.uint32)  # (n, 8): 4 x 7 sign bits, 4-bit scale
    scale = _half(b, 0) * _half_plus(aux >> np.uint32(28)) * _F32(0.5)
    sign_index = (aux[:, :, None] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & np.uint32(127)
    index = b[:, 2:66].reshape(n, 8, 8)
    _lattice(out, "iq3xxs_grid", index, scale[:, :, None, None], _sign_rows()[sign_index])


def _iq3_s(b: Blocks, out: Values) -> None:
    n = len(b)
    high = np.unpackbits(b[:, 66:74], axis=1, bitorder="little").astype(np.uint16)
    index = b[:, 2:66].astype(np.uint16) | (high << 8)
    nib = np.empty((n, 4, 2), dtype=_U8)
    np.bitwise_and(b[:, 106:110], 15, out=nib[:, :, 0])
    np.right_shift(b[:, 106:110], 4, out=nib[:, :, 1])
    scale = _half(b, 0) * (_U8(1) + _U8(2) * nib.reshape(n, 8))
    sign = _sign_bits(b[:, 74:106])
    _lattice(out, "iq3s_grid", index.reshape(n, 8, 8), scale[:, :, None, None], sign)


#: IQ1_S and IQ1_M shift every grid value by this, up or down (``IQ1S_DELTA``).
_IQ1_DELTA = _F32(0.125)


def _iq1_rows(out: Values, index: NDArray[np.uint16], scale: Values, delta: Values) -> None:
    """``scale * (grid[index] + delta)`` into ``out`` (``iq1s_grid``, rows of 8)."""
    rows = out.reshape(*index.shape, 8)
    np.take(_grid("iq1s_grid"), index, axis=0, out=rows, mode="wrap")
    np.add(rows, delta, out=rows)
    np.multiply(rows, scale, out=rows)


def _iq1_s(b: Blocks, out: Values) -> None:
    n = len(b)
    qh = b[:, 34:50].copy().view(np.uint16)  # (n, 8): 4 x 3 index bits, 3-bit scale, sign
    scale = _half(b, 0) * (np.uint16(2) * ((qh >> np.uint16(12)) & np.uint16(7)) + np.uint16(1))
    delta = np.where(qh & np.uint16(0x8000), -_IQ1_DELTA, _IQ1_DELTA)
    high = (qh[:, :, None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & np.uint16(7)
    index = b[:, 2:34].reshape(n, 8, 4).astype(np.uint16) | (high << np.uint16(8))
    _iq1_rows(out, index, scale[:, :, None, None], delta[:, :, None, None])


def _iq1_m(b: Blocks, out: Values) -> None:
    n = len(b)
    sw = b[:, 48:56].copy().view(np.uint16)  # (n, 4): 4 x 3-bit scales, a nibble of d
    top = (sw & np.uint16(0xF000)) >> np.array([12, 8, 4, 0], dtype=np.uint16)
    d = np.bitwise_or.reduce(top, axis=1).view(np.float16).astype(_F32)[:, None]
    sc = (sw[:, :, None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & np.uint16(7)
    scale = d * (np.uint16(2) * sc.reshape(n, 16) + np.uint16(1))
    pairs = np.empty((n, 16, 2), dtype=_U8)
    np.bitwise_and(b[:, 32:48], 15, out=pairs[:, :, 0])
    np.right_shift(b[:, 32:48], 4, out=pairs[:, :, 1])
    nib = pairs.reshape(n, 32)  # per grid row: 3 index bits, then the delta's sign
    index = b[:, :32].astype(np.uint16) | ((nib & _U8(7)).astype(np.uint16) << np.uint16(8))
    delta = np.where(nib & _U8(8), -_IQ1_DELTA, _IQ1_DELTA)
    _iq1_rows(out, index.reshape(n, 16, 2), scale[:, :, None, None], delta.reshape(n, 16, 2, 1))


def _iq4_xs(b: Blocks, out: Values) -> None:
    n = len(b)
    low = np.empty((n, 4, 2), dtype=_U8)
    np.bitwise_and(b[:, 4:8], 15, out=low[:, :, 0])
    np.right_shift(b[:, 4:8], 4, out=low[:, :, 1])
    sh = b[:, 2:4].copy().view(np.uint16)
    high = (sh >> np.arange(0, 16, 2, dtype=np.uint16)) & np.uint16(3)
    ls = (low.reshape(n, 8) | (high.astype(_U8) << _U8(4))).view(np.int8) - np.int8(32)
    q = np.empty((n, 8, 2, 16), dtype=_U8)
    qs = b[:, 8:].reshape(n, 8, 16)
    np.bitwise_and(qs, 15, out=q[:, :, 0])
    np.right_shift(qs, 4, out=q[:, :, 1])
    o = out.reshape(n, 8, 32)
    np.take(_IQ4NL_LEVELS, q.reshape(n, 8, 32), out=o, mode="wrap")
    np.multiply(o, (_half(b, 0) * ls)[:, :, None], out=o)


#: The kernel of each GGML type, by name.
KERNELS: dict[str, Kernel] = {
    "F32": _f32,
    "F16": _f16,
    "BF16": _bf16,
    "Q4_0": _q4_0,
    "Q4_1": _q4_1,
    "Q5_0": _q5_0,
    "Q5_1": _q5_1,
    "Q8_0": _q8_0,
    "Q2_K": _q2_k,
    "Q3_K": _q3_k,
    "Q4_K": _q4_k,
    "Q5_K": _q5_k,
    "Q6_K": _q6_k,
    "IQ2_XXS": _iq2_xxs,
    "IQ2_XS": _iq2_xs,
    "IQ2_S": _iq2_s,
    "IQ3_XXS": _iq3_xxs,
    "IQ3_S": _iq3_s,
    "IQ1_S": _iq1_s,
    "IQ1_M": _iq1_m,
    "IQ4_NL": _iq4_nl,
    "IQ4_XS": _iq4_xs,
    "TQ1_0": _tq1_0,
    "TQ2_0": _tq2_0,
    "MXFP4": _mxfp4,
    "NVFP4": _nvfp4,
}

#: Names of the GGML types decoded: those gguf-py 0.19.0 decodes.
DEQUANTIZABLE = frozenset(KERNELS)

"""One dtype table for every format.

The canonical name of a dtype is its safetensors code (``F32``, ``BF16``, ``F8_E4M3`` ...), as the
CLI contract requires. Each member knows its element size, the numpy dtype its raw little-endian
bytes are viewed with, and its spelling in torch and burnpack.

numpy has no bfloat16 or float8 types: those load as their raw unsigned integers (``<u2``,
``u1``); :func:`to_float` and :func:`from_float` convert them bit-exactly (round to nearest even).
"""

from __future__ import annotations

import os
from enum import Enum
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np
    from numpy.typing import NDArray


class DType(Enum):
    """A tensor element type, named by its safetensors code."""

    F64 = "F64"
    F32 = "F32"
    F16 = "F16"
    BF16 = "BF16"
    F8_E4M3 = "F8_E4M3"
    F8_E5M2 = "F8_E5M2"
    F8_E8M0 = "F8_E8M0"
    I64 = "I64"
    I32 = "I32"
    I16 = "I16"
    I8 = "I8"
    U64 = "U64"
    U32 = "U32"
    U16 = "U16"
    U8 = "U8"
    BOOL = "BOOL"
    C64 = "C64"
    C128 = "C128"

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _ITEMSIZE[self]

    @property
    def numpy(self) -> np.dtype[np.generic]:
        """The numpy dtype that views this dtype's little-endian bytes (raw bits for BF16/FP8)."""
        import numpy as np

        return np.dtype(_NUMPY[self])

    @property
    def is_float(self) -> bool:
        """True for real floating-point types (what float adapters touch)."""
        return self in _FLOATS

    @property
    def is_native(self) -> bool:
        """True when numpy computes with this dtype directly (not BF16/FP8 raw bits)."""
        return self not in _RAW_BITS

    @classmethod
    def parse(cls, text: str) -> DType:
        """Parse a user-given dtype name: ``f32``, ``F32``, ``float32``, ``bf16``, ``bfloat16`` ...

        Raises:
            ValueError: the name is not a known dtype.
        """
        key = text.strip().upper()
        for prefix in ("TORCH.", "NUMPY.", "NP.", "JNP."):  # torch.float16, np.float32
            key = key.removeprefix(prefix)
        try:
            return cls(key)
        except ValueError:
            pass
        alias = _ALIASES.get(key)
        if alias is None:
            raise ValueError(f"unknown dtype {text!r}")
        return alias


_ITEMSIZE = {
    DType.F64: 8, DType.F32: 4, DType.F16: 2, DType.BF16: 2,
    DType.F8_E4M3: 1, DType.F8_E5M2: 1, DType.F8_E8M0: 1,
    DType.I64: 8, DType.I32: 4, DType.I16: 2, DType.I8: 1,
    DType.U64: 8, DType.U32: 4, DType.U16: 2, DType.U8: 1,
    DType.BOOL: 1, DType.C64: 8, DType.C128: 16,
}  # fmt: skip

_NUMPY = {
    DType.F64: "<f8", DType.F32: "<f4", DType.F16: "<f2", DType.BF16: "<u2",
    DType.F8_E4M3: "u1", DType.F8_E5M2: "u1", DType.F8_E8M0: "u1",
    DType.I64: "<i8", DType.I32: "<i4", DType.I16: "<i2", DType.I8: "i1",
    DType.U64: "<u8", DType.U32: "<u4", DType.U16: "<u2", DType.U8: "u1",
    DType.BOOL: "?", DType.C64: "<c8", DType.C128: "<c16",
}  # fmt: skip

_FLOATS = frozenset(
    {DType.F64, DType.F32, DType.F16, DType.BF16, DType.F8_E4M3, DType.F8_E5M2, DType.F8_E8M0}
)
_RAW_BITS = frozenset({DType.BF16, DType.F8_E4M3, DType.F8_E5M2, DType.F8_E8M0})

_ALIASES = {
    "FLOAT64": DType.F64, "DOUBLE": DType.F64, "FLOAT32": DType.F32, "FLOAT": DType.F32,
    "FLOAT16": DType.F16, "HALF": DType.F16, "BFLOAT16": DType.BF16,
    "INT64": DType.I64, "INT32": DType.I32, "INT16": DType.I16, "INT8": DType.I8,
    "UINT64": DType.U64, "UINT32": DType.U32, "UINT16": DType.U16, "UINT8": DType.U8,
    "BOOL": DType.BOOL, "COMPLEX64": DType.C64, "COMPLEX128": DType.C128,
    "FLOAT8_E4M3FN": DType.F8_E4M3, "FLOAT8_E5M2": DType.F8_E5M2, "FLOAT8_E8M0FNU": DType.F8_E8M0,
    "FP64": DType.F64, "FP32": DType.F32, "FP16": DType.F16, "BFLOAT": DType.BF16,
    "FP8_E4M3": DType.F8_E4M3, "FP8_E5M2": DType.F8_E5M2, "FP8": DType.F8_E4M3,
    "LONG": DType.I64, "INT": DType.I32, "SHORT": DType.I16, "BYTE": DType.U8,
    "CFLOAT": DType.C64, "CDOUBLE": DType.C128,
}  # fmt: skip

#: torch dtype names (``torch.float32`` without the prefix) for each DType.
TORCH_NAMES = {
    DType.F64: "float64", DType.F32: "float32", DType.F16: "float16", DType.BF16: "bfloat16",
    DType.F8_E4M3: "float8_e4m3fn", DType.F8_E5M2: "float8_e5m2",
    DType.F8_E8M0: "float8_e8m0fnu", DType.I64: "int64", DType.I32: "int32",
    DType.I16: "int16", DType.I8: "int8", DType.U64: "uint64", DType.U32: "uint32",
    DType.U16: "uint16", DType.U8: "uint8", DType.BOOL: "bool", DType.C64: "complex64",
    DType.C128: "complex128",
}  # fmt: skip


def _fp8_table(exp_bits: int, man_bits: int, bias: int, *, fn: bool) -> NDArray[np.float32]:
    """Decode all 256 codes of an FP8 format (OCP ``fn`` variants: no inf, one NaN pattern)."""
    import numpy as np

    codes = np.arange(256, dtype=np.uint32)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> man_bits) & ((1 << exp_bits) - 1)
    man = codes & ((1 << man_bits) - 1)
    normal = (1.0 + man / (1 << man_bits)) * np.exp2(exp.astype(np.float64) - bias)
    subnormal = (man / (1 << man_bits)) * np.exp2(1.0 - bias)
    values = sign * np.where(exp == 0, subnormal, normal)
    top = (1 << exp_bits) - 1
    if fn:  # E4M3FN: only S.1111.111 is NaN, the rest of the top exponent is finite
        values[(exp == top) & (man == (1 << man_bits) - 1)] = np.nan
    else:  # IEEE-like E5M2: top exponent is inf/NaN
        values[(exp == top) & (man == 0)] = sign[(exp == top) & (man == 0)] * np.inf
        values[(exp == top) & (man != 0)] = np.nan
    return values.astype(np.float32)


@cache
def _decode_table(dtype: DType) -> NDArray[np.float32]:
    import numpy as np

    if dtype is DType.F8_E4M3:
        return _fp8_table(4, 3, 7, fn=True)
    if dtype is DType.F8_E5M2:
        return _fp8_table(5, 2, 15, fn=False)
    # F8_E8M0: an exponent only, 2**(code-127), 0xFF is NaN
    exponents = np.exp2(np.arange(256, dtype=np.float64) - 127)
    exponents[255] = np.nan
    return exponents.astype(np.float32)


def to_float(raw: NDArray[np.generic], dtype: DType) -> NDArray[np.floating]:
    """Widen an array loaded as ``dtype`` (raw bits for BF16/FP8) to a numpy float array.

    Floats narrower than 32 bits become float32; F64 stays float64; integers and bools become
    float64. Complex arrays are returned unchanged.
    """
    import numpy as np

    if dtype in (DType.BF16, DType.F16) and raw.size and raw.dtype.itemsize == 2:
        compiled = ckernels_for(raw)
        if compiled is not None:  # the same bits as below (tests/test_ckernels.py)
            out = np.empty(raw.shape, dtype=np.float32)
            kernel = compiled.bf16_to_f32 if dtype is DType.BF16 else compiled.f16_to_f32
            kernel(raw, out, raw.size)
            return out
    if dtype is DType.BF16:
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if dtype in (DType.F8_E4M3, DType.F8_E5M2, DType.F8_E8M0):
        decoded: NDArray[np.floating] = _decode_table(dtype)[raw]
        return decoded
    if dtype is DType.F16:
        return raw.astype(np.float32)
    if dtype in (DType.F32, DType.F64, DType.C64, DType.C128):
        return raw  # type: ignore[return-value]  # complex passes through on purpose
    return raw.astype(np.float64)


def from_float(values: NDArray[np.generic], dtype: DType) -> NDArray[np.generic]:
    """Narrow float values to ``dtype``'s storage representation (round to nearest even).

    Raises:
        ValueError: ``dtype`` is an FP8 type (casting to FP8 is not supported).
    """
    if dtype is DType.BF16:
        return _to_bf16_bits(values)
    if dtype in (DType.F8_E4M3, DType.F8_E5M2, DType.F8_E8M0):
        raise ValueError(f"casting to {dtype.value} is not supported")
    return values.astype(dtype.numpy)


#: Set (to anything but empty) to use the numpy kernels even where the compiled ones are built.
NO_CKERNELS_ENV = "CKPTCTL_NO_CKERNELS"


def ckernels() -> ModuleType | None:
    """The compiled kernels (``ckptctl._ckernels``, C, built where a compiler was found at
    install time), or None: not built, or ``$CKPTCTL_NO_CKERNELS`` set. Both give the same bits
    (tests/test_ckernels.py); the numpy kernels here are the fallback and the reference. Imported
    at the first kernel call, not with ckptctl."""
    if os.environ.get(NO_CKERNELS_ENV):
        return None
    return _import_ckernels()


@cache
def _import_ckernels() -> ModuleType | None:
    import sys

    if sys.byteorder != "little":  # the kernels read and write native words; files are little
        return None
    try:
        from ckptctl import _ckernels
    except ImportError:
        return None
    return _ckernels


def ckernels_for(*arrays: NDArray[np.generic]) -> ModuleType | None:
    """:func:`ckernels` when every array can be handed to them: C-contiguous (their buffers
    are what C reads) and in the host's byte order (C reads words); else None."""
    kernels = ckernels()
    if kernels is None or not all(a.flags.c_contiguous and a.dtype.isnative for a in arrays):
        return None
    return kernels


#: Elements per step of the BF16 kernel: 128 KiB of F32 plus its temporaries stay in L2, so the
#: five integer passes run from cache instead of five trips through memory.
BF16_BLOCK_ELEMENTS = 1 << 15


def _to_bf16_bits(values: NDArray[np.generic]) -> NDArray[np.uint16]:
    """F32 -> BF16 bits block by block (:func:`bf16_into`), any shape and input float dtype."""
    import numpy as np

    f32 = np.ascontiguousarray(values, dtype=np.float32)
    flat = f32.reshape(-1)
    out = np.empty(flat.shape, dtype=np.uint16)
    step = BF16_BLOCK_ELEMENTS
    scratch = np.empty(min(step, flat.size), dtype=np.uint32)
    for start in range(0, flat.size, step):
        block = flat[start : start + step]
        bf16_into(block, out[start : start + step], scratch[: block.size])
    return out.reshape(np.shape(values))  # rank 0 stays rank 0 (ascontiguousarray gives 1-D)


def bf16_into(
    values: NDArray[np.float32], out: NDArray[np.uint16], scratch: NDArray[np.uint32]
) -> None:
    """Round one block of F32 ``values`` to BF16 bits in ``out``, half to even:
    ``(bits + 0x7FFF + ((bits >> 16) & 1)) >> 16``, through ``scratch`` (all three 1-D and the
    same length; a block of ``BF16_BLOCK_ELEMENTS`` keeps the passes in the CPU's cache).

    NaN keeps its sign and payload's top bits and becomes quiet (``bits >> 16 | 0x0040``) instead
    of rounding into inf. In-place ufuncs, no temporaries; the NaN test is one ``max``
    reduction, which propagates NaN.
    """
    compiled = ckernels_for(values, out)
    if compiled is not None:
        compiled.f32_to_bf16(values, out, values.size)
        return
    import numpy as np

    bits = values.view(np.uint32)
    np.right_shift(bits, 16, out=scratch)
    np.bitwise_and(scratch, 1, out=scratch)
    np.add(scratch, 0x7FFF, out=scratch)
    np.add(scratch, bits, out=scratch)  # wraps only for NaN bit patterns, fixed below
    np.right_shift(scratch, 16, out=scratch)
    np.copyto(out, scratch, casting="unsafe")
    with np.errstate(invalid="ignore"):
        if values.size and np.isnan(values.max()):
            nan = np.isnan(values)
            out[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)


def f16_into(
    values: NDArray[np.float32], out: NDArray[np.uint16], scratch: NDArray[np.uint32]
) -> None:
    """Round one block of F32 ``values`` to F16 bits in ``out``, exactly as numpy's
    ``astype(float16)`` does (half to even; subnormals; overflow to inf; NaN keeps its sign and
    payload's top bits, 0x7C01 when those are all zero), in integer passes: numpy's own cast
    converts one element at a time in software (0.3-0.7 GiB/s here, benchmarks/RESULTS.md).
    ``scratch`` holds three times as many elements as ``values``.

    Normal results: ``(m + 0xC8000FFF + odd) >> 13`` of the magnitude ``m`` (at least 2**-14)
    rebiases the exponent (-112 << 23, mod 2**32) and rounds half to even in one add.
    Subnormal results: the bits of ``|x| + 0.5`` as F32, less those of 0.5 (the FPU rounds to
    the F16 subnormal grid, 2**-24). Each is at least the other where the other is right, so
    their minimum is the result; magnitudes from 2**16 up are set to inf or NaN apart.
    """
    compiled = ckernels_for(values, out)
    if compiled is not None:
        compiled.f32_to_f16(values, out, values.size)
        return
    import numpy as np

    n = values.size
    magnitude, normal, other = scratch[:n], scratch[n : 2 * n], scratch[2 * n : 3 * n]
    bits = values.view(np.uint32)
    np.bitwise_and(bits, 0x7FFFFFFF, out=magnitude)
    np.maximum(magnitude, 0x38800000, out=normal)  # 2**-14: the subnormal path covers below
    np.right_shift(normal, 13, out=other)
    np.bitwise_and(other, 1, out=other)
    np.add(normal, other, out=normal)
    np.add(normal, 0xC8000FFF, out=normal)
    np.right_shift(normal, 13, out=normal)
    with np.errstate(invalid="ignore"):  # a signalling NaN; set apart below
        np.add(magnitude.view(np.float32), np.float32(0.5), out=other.view(np.float32))
    np.subtract(other, 0x3F000000, out=other)
    np.minimum(normal, other, out=normal)
    if n and magnitude.max() >= 0x47800000:  # 2**16 and up: inf, NaN
        big = np.flatnonzero(magnitude >= 0x47800000)
        normal[big] = _f16_specials(magnitude[big])
    np.right_shift(bits, 16, out=other)
    np.bitwise_and(other, 0x8000, out=other)
    np.bitwise_or(normal, other, out=normal)
    np.copyto(out, normal, casting="unsafe")


def _f16_specials(absolute: NDArray[np.uint32]) -> NDArray[np.uint32]:
    """F16 bits (no sign) of F32 magnitudes from 2**16 up: inf, or NaN as numpy makes it."""
    import numpy as np

    nan = absolute > 0x7F800000
    out = np.where(nan, 0x7C00 + ((absolute & 0x7FFFFF) >> 13), 0x7C00).astype(np.uint32)
    out[nan & (out == 0x7C00)] = 0x7C01  # a payload only in the dropped bits stays NaN
    return out


def f16_widen_into(
    raw: NDArray[np.generic], out: NDArray[np.float32], scratch: NDArray[np.uint32]
) -> None:
    """F16 -> F32 of one block, exactly as numpy's ``astype(float32)`` (NaN payloads kept,
    signalling ones too), in integer passes and one multiply by 2**112, which rescales the
    F16 exponent (subnormals included) exactly; inf and NaN are set apart. ``scratch`` holds
    as many elements as ``raw``."""
    compiled = ckernels_for(raw, out)
    if compiled is not None:
        compiled.f16_to_f32(raw, out, raw.size)
        return
    import numpy as np

    half = raw.view(np.int16)
    bits = out.view(np.uint32)
    np.copyto(out.view(np.int32), half)  # sign-extended: bits 31-15 are the sign
    np.left_shift(bits, 13, out=bits)
    np.bitwise_and(bits, 0x8FFFE000, out=bits)  # sign at bit 31, exponent and mantissa below
    top = scratch[: half.size].view(np.uint16)[: half.size]
    np.left_shift(half.view(np.uint16), 1, out=top)  # without the sign: 0xF800 up is inf/NaN
    special = np.flatnonzero(top >= 0xF800) if top.size and top.max() >= 0xF800 else None
    np.multiply(out, np.float32(2.0**112), out=out)  # exact: 2**(127 - 15)
    if special is not None:
        bits[special] = (
            ((half[special].view(np.uint16) & 0x7FFF).astype(np.uint32) << 13) + 0x70000000
        ) | ((half[special].view(np.uint16) & 0x8000).astype(np.uint32) << 16)


def widen_into(
    raw: NDArray[np.generic],
    dtype: DType,
    out: NDArray[np.float32],
    scratch: NDArray[np.uint32],
) -> None:
    """:func:`to_float` of one block of a float dtype, into ``out`` (F32, the same length;
    ``scratch`` too): BF16, FP8 and F16 exactly, F64 rounded to nearest even (numpy's cast;
    overflow to inf warns unless the caller silences it)."""
    import numpy as np

    if dtype is DType.BF16:
        compiled = ckernels_for(raw, out)
        if compiled is not None:
            compiled.bf16_to_f32(raw, out, raw.size)
        else:
            np.left_shift(raw, 16, out=out.view(np.uint32), dtype=np.uint32)
    elif dtype in (DType.F8_E4M3, DType.F8_E5M2, DType.F8_E8M0):
        np.take(_decode_table(dtype), raw.view(np.uint8), out=out, mode="clip")  # u8: in range
    elif dtype is DType.F16:
        f16_widen_into(raw, out, scratch)
    else:
        np.copyto(out, raw, casting="unsafe")

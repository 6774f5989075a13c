"""GGML tensor data decoded to float32, and float32 encoded as Q4_0 ... Q8_0, as gguf-py does.

:func:`dequantize` decodes a tensor's blocks (``_kernels``: one numpy kernel per type, bit for
bit as gguf-py 0.19.0's ``gguf.quants.dequantize``) batch by batch into one new array;
:func:`dequantize_blocks` streams a tensor of a file in pieces of bounded size; :func:`quantize`
encodes Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 byte for byte as ``gguf.quants.quantize``.

Types gguf-py cannot decode (Q8_1, Q8_K, Q1_0, the integer types, F64) raise
:class:`~ckptctl.errors.UnsupportedError`. See ARCHITECTURE.md (GGUF) for why these are our own
kernels rather than a dependency on gguf-py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ckptctl.errors import CorruptCheckpointError, UnsupportedError
from ckptctl.formats.gguf._kernels import DEQUANTIZABLE, KERNELS
from ckptctl.sources import CHUNK_BYTES, read_chunks

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from numpy.typing import NDArray

    from ckptctl.formats.gguf._ggml import GGMLType
    from ckptctl.formats.gguf._kernels import Blocks, Kernel, Values
    from ckptctl.sources import ByteSource

__all__ = [
    "BATCH_VALUES",
    "DEQUANTIZABLE",
    "QUANTIZABLE",
    "dequantize",
    "dequantize_blocks",
    "quantize",
]

#: Values one kernel call decodes (1 MiB of float32, a few MiB of temporaries): numpy's cost
#: per call and per row is paid once per batch. Measured in CPU time on 64 MiB tensors, 32 Ki
#: values a batch took 1.1-1.8x the time of 256 Ki (Q6_K the most), 512 Ki no less.
BATCH_VALUES = 1 << 18

_F32 = np.float32
_U8 = np.uint8


def _kernel(ggml_type: GGMLType) -> Kernel:
    kernel = KERNELS.get(ggml_type.name)
    if kernel is None:
        raise UnsupportedError(
            f"cannot dequantize GGML type {ggml_type.name}",
            hint="ckptctl decodes the types gguf-py decodes: " + ", ".join(sorted(DEQUANTIZABLE)),
        )
    return kernel


def _block_count(ggml_type: GGMLType, count: int) -> int:
    if count < 0 or count % ggml_type.block_size:
        raise CorruptCheckpointError(
            f"{count} values are not a whole number of {ggml_type.name} blocks "
            f"({ggml_type.block_size} values each)"
        )
    return count // ggml_type.block_size


def _decode(kernel: Kernel, blocks: Blocks, out: Values) -> None:
    """Run ``kernel`` over (blocks, type_size) bytes into (blocks, block_size) values."""
    step = max(1, BATCH_VALUES // out.shape[1])
    with np.errstate(all="ignore"):  # NaN and infinite scales decode as gguf-py's do, silently
        for start in range(0, len(blocks), step):
            kernel(blocks[start : start + step], out[start : start + step])


def dequantize(raw: NDArray[np.uint8], ggml_type: GGMLType, count: int) -> Values:
    """Decode ``count`` values of ``ggml_type`` from their blocks, as gguf-py 0.19.0 does.

    Args:
        raw: the tensor's bytes (``count / block_size * type_size`` of them, little-endian
            blocks), any shape.
        ggml_type: the tensor's GGML type.
        count: how many values the tensor holds.

    Returns:
        A new flat float32 array of ``count`` values, equal bit for bit to
        ``gguf.quants.dequantize`` (NaN and infinite scales included).

    Raises:
        UnsupportedError: gguf-py cannot decode ``ggml_type`` either (Q8_1, Q8_K, Q1_0, the
            integer types, F64).
        CorruptCheckpointError: ``count`` is not a whole number of blocks, or ``raw`` does not
            have the bytes they take.

    Example:
        >>> from ckptctl.formats.gguf._ggml import GGML_TYPES_BY_NAME
        >>> raw = np.frombuffer(bytes([0x00, 0x3C]) + bytes(range(32)), dtype=np.uint8)
        >>> dequantize(raw, GGML_TYPES_BY_NAME["Q8_0"], 32)[:3]
        array([0., 1., 2.], dtype=float32)
    """
    kernel = _kernel(ggml_type)
    n_blocks = _block_count(ggml_type, count)
    if raw.size != n_blocks * ggml_type.type_size:
        raise CorruptCheckpointError(
            f"{count} {ggml_type.name} values take {n_blocks * ggml_type.type_size} bytes, "
            f"not {raw.size}"
        )
    out = np.empty(count, dtype=_F32)
    blocks = raw.reshape(n_blocks, ggml_type.type_size)
    _decode(kernel, blocks, out.reshape(n_blocks, ggml_type.block_size))
    return out


def dequantize_blocks(
    source: ByteSource,
    offset: int,
    ggml_type: GGMLType,
    count: int,
    *,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[Values]:
    """Decode ``count`` values of ``ggml_type`` at ``offset`` of ``source``, piece by piece.

    Yields flat float32 arrays of whole blocks, at most ``chunk_bytes`` each (at least one
    block), in order; together they are :func:`dequantize` of the whole range. Each piece is
    a view of one buffer that the next piece overwrites: write or copy it before taking the
    next. Memory stays about ``chunk_bytes`` plus the input bytes of one piece, whatever the
    tensor's size.

    Raises:
        UnsupportedError: gguf-py cannot decode ``ggml_type`` either.
        CorruptCheckpointError: ``count`` is not a whole number of blocks, or the range is not
            inside ``source``.
    """
    kernel = _kernel(ggml_type)
    n_blocks = _block_count(ggml_type, count)
    size, width = ggml_type.type_size, ggml_type.block_size
    source.check_range(offset, n_blocks * size, f"{ggml_type.name} tensor data")
    per_piece = max(1, min(n_blocks, chunk_bytes // (4 * width)))
    buffer = np.empty((per_piece, width), dtype=_F32)
    carry = np.empty(0, dtype=_U8)  # a block split between two reads (remote sources)
    for piece in read_chunks(source, offset, n_blocks * size, per_piece * size):
        data = np.frombuffer(piece, dtype=_U8)
        if carry.size:
            data = np.concatenate((carry, data))
        whole = len(data) // size
        blocks = data[: whole * size].reshape(whole, size)
        for start in range(0, whole, per_piece):
            part = blocks[start : start + per_piece]
            _decode(kernel, part, buffer[: len(part)])
            yield buffer[: len(part)].reshape(-1)
        carry = data[whole * size :].copy()


# -- encoding: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 as gguf-py's quantizers -------------------------------


def _inverse(d: Values) -> Values:
    """``1 / d``, and 0 where ``d`` is 0 (an all-zero block)."""
    return np.where(d == 0, _F32(0), _F32(1) / d)


def _round_away(x: Values) -> Values:
    """Round half away from zero (C's ``roundf``), exact in f32: floor plus the doubled
    fraction's floor, with the sign put back."""
    a = np.abs(x)
    whole = np.floor(a)
    rounded: Values = np.sign(x) * (whole + np.floor(_F32(2) * (a - whole)))
    return rounded


def _put_half(out: Blocks, offset: int, value: Values) -> None:
    half = value.astype(np.float16)
    if not np.isfinite(half).all():
        raise UnsupportedError(
            f"cannot quantize values of magnitude up to {float(np.abs(value).max()):g}: "
            "a block's scale would not fit in a float16",
            hint="scale the tensor down, or keep it as F32/F16",
        )
    out[:, offset : offset + 2] = half.view(_U8)


def _pack_nibbles(q: Blocks) -> Blocks:
    """Values 0-15 (of 32) as 16 bytes: the first half in the low nibbles."""
    return q[:, :16] | (q[:, 16:] << _U8(4))


def _absmax_signed(x: Values) -> Values:
    """The value of largest magnitude in each block (the first on ties), with its sign."""
    return np.take_along_axis(x, np.abs(x).argmax(axis=1, keepdims=True), axis=1)


def _levels(x: Values, scale: Values, shift: float, top: int) -> Blocks:
    """``trunc(x / scale + shift)`` clipped to 0..top, as gguf-py (``x * (1 / scale)``)."""
    q: Blocks = np.trunc(x * _inverse(scale) + _F32(shift)).astype(_U8)
    np.clip(q, 0, top, out=q)
    return q


def _enc_q4_0(x: Values, out: Blocks) -> None:
    d = _absmax_signed(x) / _F32(-8)
    _put_half(out, 0, d)
    out[:, 2:] = _pack_nibbles(_levels(x, d, 8.5, 15))


def _enc_q4_1(x: Values, out: Blocks) -> None:
    low = x.min(axis=1, keepdims=True)
    d = (x.max(axis=1, keepdims=True) - low) / _F32(15)
    _put_half(out, 0, d)
    _put_half(out, 2, low)
    out[:, 4:] = _pack_nibbles(_levels(x - low, d, 0.5, 15))


def _put_five_bits(out: Blocks, q: Blocks) -> None:
    """Q5's 32 five-bit values: the 5th bits into the 4 bytes before the last 16, the nibbles
    into the last 16."""
    out[:, -20:-16] = np.packbits(q >> _U8(4), axis=1, bitorder="little")
    out[:, -16:] = (q[:, :16] & _U8(15)) | (q[:, 16:] << _U8(4))


def _enc_q5_0(x: Values, out: Blocks) -> None:
    d = _absmax_signed(x) / _F32(-16)
    _put_half(out, 0, d)
    _put_five_bits(out, _levels(x, d, 16.5, 31))


def _enc_q5_1(x: Values, out: Blocks) -> None:
    low = x.min(axis=1, keepdims=True)
    d = (x.max(axis=1, keepdims=True) - low) / _F32(31)
    _put_half(out, 0, d)
    _put_half(out, 2, low)
    _put_five_bits(out, _levels(x - low, d, 0.5, 31))


def _enc_q8_0(x: Values, out: Blocks) -> None:
    d = np.abs(x).max(axis=1, keepdims=True) / _F32(127)
    _put_half(out, 0, d)
    out[:, 2:] = _round_away(x * _inverse(d)).astype(np.int8).view(_U8)


_ENCODERS: dict[str, Callable[[Values, Blocks], None]] = {
    "Q4_0": _enc_q4_0,
    "Q4_1": _enc_q4_1,
    "Q5_0": _enc_q5_0,
    "Q5_1": _enc_q5_1,
    "Q8_0": _enc_q8_0,
}

#: Names of the GGML types :func:`quantize` encodes.
QUANTIZABLE = frozenset(_ENCODERS)


def quantize(values: NDArray[np.floating], ggml_type: GGMLType) -> Blocks:
    """Encode ``values`` as blocks of ``ggml_type``, byte for byte as ``gguf.quants.quantize``.

    Blocks run along the last axis, as in GGUF (a row of a weight is a whole number of blocks).

    Args:
        values: float values (widened or narrowed to float32 first, as gguf-py does), at least
            one axis; the last axis a multiple of the block size.
        ggml_type: one of :data:`QUANTIZABLE` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).

    Returns:
        uint8 blocks, shaped ``values.shape[:-1] + (row bytes,)``.

    Raises:
        UnsupportedError: another type; rows that are not whole blocks; NaN or infinite values,
            or values so large that a block's float16 scale overflows (gguf-py writes an
            infinite scale there, with a warning).
    """
    encoder = _ENCODERS.get(ggml_type.name)
    if encoder is None:
        raise UnsupportedError(
            f"cannot quantize to GGML type {ggml_type.name}",
            hint="ckptctl encodes " + ", ".join(sorted(QUANTIZABLE)),
        )
    width, size = ggml_type.block_size, ggml_type.type_size
    if values.ndim == 0 or values.shape[-1] % width:
        raise UnsupportedError(
            f"cannot quantize a tensor of shape {list(values.shape)} to {ggml_type.name}: "
            f"its rows are not a whole number of blocks of {width} values"
        )
    blocks = values.astype(_F32, copy=False).reshape(-1, width)
    out = np.empty((len(blocks), size), dtype=_U8)
    step = max(1, BATCH_VALUES // width)
    with np.errstate(all="ignore"):
        for start in range(0, len(blocks), step):
            part = blocks[start : start + step]
            if not np.isfinite(part).all():
                raise UnsupportedError(
                    f"cannot quantize NaN or infinite values to {ggml_type.name}",
                    hint="only finite values have a block scale",
                )
            encoder(part, out[start : start + step])
    return out.reshape(*values.shape[:-1], values.shape[-1] // width * size)

"""GGML block formats: our numpy kernels against gguf-py 0.19.0, bit for bit.

gguf-py (``gguf`` on PyPI, llama.cpp's own package, in the dev extra) is the ground truth: every
type it decodes is decoded from seeded random blocks (NaN and infinite f16 scales included, as
random bytes give them) and compared by bit pattern; Q4_0 ... Q8_0 are encoded from values with
ties, zeros and negatives and compared byte for byte.
"""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from typing import Any

import numpy as np
import pytest

from ckptctl.errors import CorruptCheckpointError, UnsupportedError
from ckptctl.formats.gguf._ggml import GGML_TYPES, GGML_TYPES_BY_NAME, GGMLType
from ckptctl.formats.gguf._quants import (
    DEQUANTIZABLE,
    QUANTIZABLE,
    dequantize,
    dequantize_blocks,
    quantize,
)
from ckptctl.sources import ByteSource, MemorySource

#: Blocks per random tensor: enough for every row of the largest IQ grid (2048 rows, 32 of
#: them drawn per IQ1 block) to be drawn with near certainty.
N_BLOCKS = 1500


@pytest.fixture(scope="module")
def gguf_quants() -> Any:
    return pytest.importorskip("gguf.quants", reason="gguf (the dev extra) is not installed")


def _gguf_type(name: str) -> Any:
    from gguf.constants import GGMLQuantizationType

    return GGMLQuantizationType[name]


def _random_blocks(ggml_type: GGMLType, n_blocks: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, ggml_type.id])
    return rng.integers(0, 256, size=n_blocks * ggml_type.type_size, dtype=np.uint8)


def _reference_values(gguf_quants: Any, raw: np.ndarray, ggml_type: GGMLType) -> np.ndarray:
    with np.errstate(all="ignore"):  # gguf-py warns on the NaN scales random bytes hold
        ref = gguf_quants.dequantize(
            raw.reshape(-1, ggml_type.type_size), _gguf_type(ggml_type.name)
        )
    return np.asarray(ref, dtype=np.float32).reshape(-1)


@pytest.mark.parametrize("name", sorted(DEQUANTIZABLE))
def test_dequantize_equals_gguf_py_bit_for_bit(gguf_quants: Any, name: str) -> None:
    ggml_type = GGML_TYPES_BY_NAME[name]
    raw = _random_blocks(ggml_type, N_BLOCKS, seed=45)
    ours = dequantize(raw, ggml_type, N_BLOCKS * ggml_type.block_size)
    ref = _reference_values(gguf_quants, raw, ggml_type)
    assert ours.dtype == np.float32
    assert ours.shape == ref.shape
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))
    assert np.isfinite(ours).mean() > 0.9  # the comparison is mostly of numbers, not of NaNs


@pytest.mark.parametrize("name", sorted(DEQUANTIZABLE))
def test_dequantize_of_a_strided_row_slice_equals_gguf_py(gguf_quants: Any, name: str) -> None:
    # the reader may hand a 2-D (rows, row bytes) view; every other row is not contiguous
    ggml_type = GGML_TYPES_BY_NAME[name]
    rows = _random_blocks(ggml_type, 8 * 4, seed=7).reshape(8, -1)[::2]
    ours = dequantize(rows, ggml_type, 4 * 4 * ggml_type.block_size)
    ref = _reference_values(gguf_quants, np.ascontiguousarray(rows), ggml_type)
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))


def test_dequantize_decodes_exactly_the_types_gguf_py_decodes(gguf_quants: Any) -> None:
    theirs, ours = set(), set()
    for ggml_type in GGML_TYPES.values():
        raw = np.zeros(ggml_type.type_size, dtype=np.uint8)
        try:
            gguf_quants.dequantize(raw.reshape(1, -1), _gguf_type(ggml_type.name))
            theirs.add(ggml_type.name)
        except NotImplementedError:
            pass
        try:
            dequantize(raw, ggml_type, ggml_type.block_size)
            ours.add(ggml_type.name)
        except UnsupportedError:
            pass
    assert ours == theirs
    assert {"Q4_0", "Q6_K", "IQ1_M", "TQ1_0", "MXFP4"} <= ours


@pytest.mark.parametrize("name", ["Q8_1", "Q8_K", "Q1_0", "I8", "I32", "F64"])
def test_dequantize_refuses_a_type_gguf_py_cannot_decode(name: str) -> None:
    ggml_type = GGML_TYPES_BY_NAME[name]
    raw = np.zeros(ggml_type.type_size, dtype=np.uint8)
    with pytest.raises(UnsupportedError, match=name):
        dequantize(raw, ggml_type, ggml_type.block_size)


def test_dequantize_refuses_a_partial_block() -> None:
    q4_k = GGML_TYPES_BY_NAME["Q4_K"]
    with pytest.raises(CorruptCheckpointError, match="Q4_K"):
        dequantize(np.zeros(144, dtype=np.uint8), q4_k, 255)


def test_dequantize_refuses_bytes_that_do_not_match_the_count() -> None:
    q8_0 = GGML_TYPES_BY_NAME["Q8_0"]
    with pytest.raises(CorruptCheckpointError, match="68 bytes"):
        dequantize(np.zeros(67, dtype=np.uint8), q8_0, 64)


def test_dequantize_of_known_blocks() -> None:
    # by hand, from ggml-common.h: Q8_0 = f16 scale + 32 int8; Q4_0 = f16 scale + 16 bytes of
    # nibbles, low nibbles first, minus 8
    q8_0 = np.frombuffer(
        np.float16(0.5).tobytes() + np.arange(-16, 16, dtype=np.int8).tobytes(), np.uint8
    )
    assert dequantize(q8_0, GGML_TYPES_BY_NAME["Q8_0"], 32).tolist() == [
        v / 2 for v in range(-16, 16)
    ]
    q4_0 = np.frombuffer(np.float16(2).tobytes() + bytes([0x10 * 15 + 0]) + bytes(15), np.uint8)
    values = dequantize(q4_0, GGML_TYPES_BY_NAME["Q4_0"], 32)
    assert (values[0], values[1], values[16]) == (-16, -16, 14)


# -- the streaming variant -------------------------------------------------------------------


def _collect(pieces: Any) -> np.ndarray:
    return np.concatenate([piece.copy() for piece in pieces])


@pytest.mark.parametrize("name", ["Q4_K", "Q6_K", "Q8_0", "IQ2_XS", "MXFP4"])
def test_dequantize_blocks_of_a_file_range_equals_dequantize(tmp_path, name: str) -> None:
    ggml_type = GGML_TYPES_BY_NAME[name]
    raw = _random_blocks(ggml_type, 1000, seed=3)
    path = tmp_path / "t.bin"
    path.write_bytes(b"x" * 101 + raw.tobytes() + b"y" * 13)
    count = 1000 * ggml_type.block_size
    chunk = 7 * ggml_type.block_size * 4 + 5  # 7 blocks of output (rounded down to blocks)
    with ByteSource(path) as source:
        pieces = list(dequantize_blocks(source, 101, ggml_type, count, chunk_bytes=chunk))
        sizes = {len(p) for p in pieces}
        assert max(sizes) == 7 * ggml_type.block_size
        streamed = _collect(dequantize_blocks(source, 101, ggml_type, count, chunk_bytes=chunk))
    whole = dequantize(raw, ggml_type, count)
    assert np.array_equal(streamed.view(np.uint32), whole.view(np.uint32))


def test_dequantize_blocks_joins_blocks_split_between_reads() -> None:
    # a source without a descriptor (in memory, remote) is read in pieces of 8 MiB, which cut
    # Q6_K's 210-byte blocks; each cut block is carried over to the next piece
    q6_k = GGML_TYPES_BY_NAME["Q6_K"]
    n_blocks = (9 << 20) // q6_k.type_size
    raw = _random_blocks(q6_k, n_blocks, seed=5)
    source = MemorySource(raw.tobytes(), "mem")
    count = n_blocks * q6_k.block_size
    streamed = _collect(dequantize_blocks(source, 0, q6_k, count))
    assert np.array_equal(streamed.view(np.uint32), dequantize(raw, q6_k, count).view(np.uint32))


def test_dequantize_blocks_refuses_a_range_past_the_end(tmp_path) -> None:
    path = tmp_path / "short.bin"
    path.write_bytes(bytes(34 * 3))
    with ByteSource(path) as source, pytest.raises(CorruptCheckpointError, match="past the end"):
        next(dequantize_blocks(source, 0, GGML_TYPES_BY_NAME["Q8_0"], 32 * 4))


@pytest.mark.bounded
def test_dequantize_blocks_memory_is_bounded_by_the_chunk(tmp_path) -> None:
    # 24 MiB of Q8_0 decode to 90 MiB of float32; the pass holds one 8 MiB piece at a time
    q8_0 = GGML_TYPES_BY_NAME["Q8_0"]
    n_blocks = (24 << 20) // q8_0.type_size
    path = tmp_path / "big.bin"
    path.write_bytes(_random_blocks(q8_0, n_blocks, seed=9).tobytes())
    total = 0
    with ByteSource(path) as source:
        tracemalloc.start()
        try:
            for piece in dequantize_blocks(source, 0, q8_0, n_blocks * 32):
                total += piece.size
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert total == n_blocks * 32
    assert peak < 16 << 20


# -- encoding --------------------------------------------------------------------------------


def _awkward_values(rng: np.random.Generator) -> np.ndarray:
    """(16, 256) float32 rows: noise, and blocks of zeros, ties, negatives, subnormals."""
    x = rng.standard_normal((16, 256)).astype(np.float32)
    x[0] = 0  # all-zero blocks: scale 0
    x[1] = np.arange(-128, 128) + 0.5  # halves: Q8_0's round-half-away, Q4's truncation
    x[2] = -np.abs(x[2])  # all negative
    x[3, :32] = 3.0  # a constant block (Q4_1's range 0)
    x[3, 32:64] = np.where(np.arange(32) % 2, 5.0, -5.0)  # +max and -max tie: the first wins
    x[4] *= np.float32(1e-40)  # subnormal values
    x[5] = np.round(x[5] * 8) / 8  # on the Q4/Q5 grid exactly
    x[6] *= 1000
    x[7] = rng.integers(-127, 128, 256)  # Q8_0's own levels
    # Q8_0 scale 1 (127 / 127): values just under a half, where floor(x + 0.5) rounds wrong
    below_half = np.nextafter(np.float32(0.5), np.float32(0))
    x[8, :8] = [127, below_half, -below_half, 0.5, -0.5, 1.5, -2.5, 126.5]
    return x


@pytest.mark.parametrize("name", sorted(QUANTIZABLE))
def test_quantize_equals_gguf_py_byte_for_byte(gguf_quants: Any, name: str) -> None:
    ggml_type = GGML_TYPES_BY_NAME[name]
    x = _awkward_values(np.random.default_rng(11))
    ours = quantize(x, ggml_type)
    with np.errstate(all="ignore"):  # gguf-py warns: 1 / scale overflows for subnormal blocks
        ref = gguf_quants.quantize(x, _gguf_type(name))
    assert ours.dtype == np.uint8
    assert ours.shape == ref.shape == (16, 256 // 32 * ggml_type.type_size)
    assert np.array_equal(ours, ref)
    flat = quantize(x.reshape(-1), ggml_type)  # blocks run along the last axis only
    assert np.array_equal(flat, ref.reshape(-1))


@pytest.mark.parametrize("name", sorted(QUANTIZABLE))
def test_quantize_of_float16_input_equals_gguf_py(gguf_quants: Any, name: str) -> None:
    x = np.random.default_rng(12).standard_normal((3, 64)).astype(np.float16)
    ggml_type = GGML_TYPES_BY_NAME[name]
    assert np.array_equal(quantize(x, ggml_type), gguf_quants.quantize(x, _gguf_type(name)))


@pytest.mark.parametrize("name", ["Q4_K", "Q6_K", "IQ4_NL", "TQ2_0", "F16"])
def test_quantize_refuses_other_types(name: str) -> None:
    with pytest.raises(UnsupportedError, match=name):
        quantize(np.zeros(256, dtype=np.float32), GGML_TYPES_BY_NAME[name])


def test_quantize_refuses_rows_that_are_not_whole_blocks() -> None:
    with pytest.raises(UnsupportedError, match="block"):
        quantize(np.zeros((4, 40), dtype=np.float32), GGML_TYPES_BY_NAME["Q8_0"])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_quantize_refuses_non_finite_values(bad: float) -> None:
    x = np.zeros(64, dtype=np.float32)
    x[40] = bad
    with pytest.raises(UnsupportedError, match="NaN or infinite"):
        quantize(x, GGML_TYPES_BY_NAME["Q4_0"])


def test_quantize_refuses_values_whose_scale_overflows_float16() -> None:
    x = np.full(32, 1e7, dtype=np.float32)  # Q8_0's scale 1e7 / 127 > 65504
    with pytest.raises(UnsupportedError, match="float16"):
        quantize(x, GGML_TYPES_BY_NAME["Q8_0"])


@pytest.mark.parametrize("name", sorted(QUANTIZABLE))
def test_quantize_then_dequantize_stays_within_half_a_level(name: str) -> None:
    ggml_type = GGML_TYPES_BY_NAME[name]
    x = np.random.default_rng(13).uniform(-1, 1, (8, 128)).astype(np.float32)
    back = dequantize(quantize(x, ggml_type), ggml_type, x.size).reshape(x.shape)
    levels = {"Q4_0": 16, "Q4_1": 15, "Q5_0": 32, "Q5_1": 31, "Q8_0": 254}[name]
    span = np.ptp(x.reshape(-1, 32), axis=1).max() if name.endswith("_1") else 2
    assert np.abs(back - x).max() <= span / levels * 1.01


def test_empty_tensors_decode_and_encode_to_nothing() -> None:
    q4_k = GGML_TYPES_BY_NAME["Q4_K"]
    assert dequantize(np.zeros(0, dtype=np.uint8), q4_k, 0).size == 0
    assert list(dequantize_blocks(MemorySource(b"", "empty"), 0, q4_k, 0)) == []
    assert quantize(np.zeros((0, 32), dtype=np.float32), GGML_TYPES_BY_NAME["Q8_0"]).shape == (
        0,
        34,
    )


def test_the_kernels_need_no_gguf_package() -> None:
    # the core install decodes: gguf-py is only the tests' ground truth (ARCHITECTURE.md)
    code = (
        "import sys, numpy as np\n"
        "sys.modules['gguf'] = None\n"  # an import of it would fail
        "from ckptctl.formats.gguf._ggml import GGML_TYPES_BY_NAME as G\n"
        "from ckptctl.formats.gguf._quants import DEQUANTIZABLE, dequantize\n"
        "for name in DEQUANTIZABLE:\n"
        "    t = G[name]\n"
        "    dequantize(np.zeros(t.type_size, dtype=np.uint8), t, t.block_size)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

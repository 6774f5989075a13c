"""Edge cases of ``ckptctl.adapters`` that mutation testing found untested (issue 17).

The adapters decide what ``convert --adapter`` and ``--remap`` do to every tensor, and their
``--dry-run`` plans and warnings are printed as they are: a changed word, name, dtype, shape or
byte is a changed interface. Each test drives both sides of a branch and compares whole
messages, plans and arrays; expected arrays come from numpy (``.T``, ``astype``), expected
names and dtypes from burn-store spec §1-§4.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ckptctl.adapters import (
    Action,
    ActionKind,
)
from ckptctl.adapters.cast import Cast, HalfPrecision, cast_entry, convert_float
from ckptctl.adapters.layout import (
    BurnToPyTorch,
    PyTorchToBurn,
    transpose_2d,
    transpose_into,
    transposed,
)
from ckptctl.adapters.modules import (
    Decision,
)
from ckptctl.dtypes import DType
from ckptctl.errors import SelectionError
from ckptctl.model import TensorEntry
from tests.strategies import array_entry


def f32(name: str, shape: tuple[int, ...], module_type: str | None = None) -> TensorEntry:
    entry = array_entry(name, np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))
    return replace(entry, module_type=module_type) if module_type else entry


# --- Action, FunctionAdapter, Chain, plan, parse_adapter (adapters/__init__.py) ---------------


# --- Select (select.py) -----------------------------------------------------------------------


# --- Cast / HalfPrecision (cast.py) -----------------------------------------------------------


def test_cast_messages_and_actions() -> None:
    with pytest.raises(SelectionError) as info:
        Cast(DType.I32)
    assert info.value.message == "cannot cast to I32"
    assert info.value.hint == "cast targets: cast:f64, cast:f32, cast:f16, cast:bf16"
    with pytest.raises(SelectionError) as info:
        Cast.parse("f17")
    assert info.value.message == "unknown dtype 'f17' in cast:f17"
    assert info.value.hint == "e.g. cast:f32, cast:f16, cast:bf16, cast:f64"
    cast = Cast.parse("float16")
    assert cast.describe() == "cast:F16"
    entry = f32("w", (2, 3))
    out, actions = cast.apply(entry)
    assert actions == (
        Action(ActionKind.CAST, "F32 -> F16", "every float tensor is cast", "cast:F16"),
    )
    assert out is not None
    assert (out.dtype, out.shape, out.nbytes, out.offset) == (DType.F16, (2, 3), 12, None)
    assert out.load().tobytes() == np.arange(6, dtype=np.float16).tobytes()
    ints = array_entry("i", np.arange(3, dtype=np.int32))
    assert cast.apply(ints) == (ints, ())
    same = array_entry("h", np.arange(3, dtype=np.float16))
    assert cast.apply(same) == (same, ())


def test_cast_scalar_and_many_blocks() -> None:
    scalar = array_entry("s", np.array(1.5, dtype=np.float32))
    out = cast_entry(scalar, DType.F64)
    assert out.shape == ()
    assert out.load().tobytes() == np.array(1.5, dtype=np.float64).tobytes()
    # 2100 rows of 4 KiB: more than one 8 MiB read block
    values = ((np.arange(2100 * 1024) % 4099).astype(np.float32) * np.float32(0.37)).reshape(
        2100, 1024
    )
    big = cast_entry(array_entry("big", values), DType.F16)
    assert big.load().tobytes() == values.astype(np.float16).tobytes()


def test_convert_float_f64_to_f16_rounds_through_f32_without_warnings() -> None:
    with np.errstate(over="raise"):
        out = convert_float(np.array([1e300, 1.0], dtype=np.float64), DType.F64, DType.F16)
    assert out.tobytes() == np.array([np.inf, 1.0], dtype=np.float16).tobytes()
    # 1 + 2**-11 + 2**-40 rounds up to 1 + 2**-10 directly, but to 1 + 2**-11 (a tie, to
    # even: 1.0) through F32, as Burn does (spec §2.1)
    x = np.array([1 + 2**-11 + 2**-40], dtype=np.float64)
    assert convert_float(x, DType.F64, DType.F16).tobytes() == np.float16(1.0).tobytes()


def test_half_precision_reason_and_scope() -> None:
    lin = f32("fc.weight", (2, 2), "Linear")
    out, actions = HalfPrecision().apply(lin)
    assert out is not None
    assert out.dtype is DType.F16
    assert actions == (
        Action(
            ActionKind.CAST,
            "F32 -> F16",
            "Linear is in the half-precision set (class Linear from file)",
            "half",
        ),
    )
    back, actions = HalfPrecision().apply(out)
    assert back is not None
    assert back.dtype is DType.F32
    assert actions[0].detail == "F16 -> F32"
    bn = f32("bn.weight", (2,), "BatchNorm")
    assert HalfPrecision().apply(bn) == (bn, ())
    untyped = f32("x.weight", (2,))
    assert HalfPrecision().apply(untyped) == (untyped, ())
    f64 = replace(array_entry("d", np.zeros(2)), module_type="Linear")
    assert HalfPrecision().apply(f64) == (f64, ())


# --- layout.py --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape",
    [(256, 256), (257, 256), (70, 1100), (1100, 70), (33, 2100)],
)
def test_transpose_2d_small_and_strip_paths(shape: tuple[int, int]) -> None:
    # 256 * 256 = 1 << 16 elements (one numpy copy), one more row: the strips
    array = np.arange(shape[0] * shape[1], dtype=np.int32).reshape(shape)
    out = transpose_2d(array)
    assert out.shape == shape[::-1]
    assert out.flags.c_contiguous
    assert np.array_equal(out, array.T)


def test_transpose_into_writes_a_strided_target() -> None:
    array = np.arange(300 * 300, dtype=np.uint16).reshape(300, 300)
    out = np.zeros((300, 600), dtype=np.uint16)
    transpose_into(out[:, ::2], array)
    assert np.array_equal(out[:, ::2], array.T)
    assert not out[:, 1::2].any()


@pytest.mark.parametrize("shape", [(256, 256), (257, 256), (2100, 1024)])
def test_transposed_entry_loads_the_transpose(shape: tuple[int, int]) -> None:
    array = np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape)
    out = transposed(array_entry("w", array))
    assert (out.shape, out.offset, out.nbytes) == (shape[::-1], None, array.nbytes)
    assert out.load().tobytes() == np.ascontiguousarray(array.T).tobytes()


def test_layout_keep_actions_and_renames() -> None:
    adapter = PyTorchToBurn()
    unknown = f32("x.weight", (3, 4))
    assert adapter.apply(unknown) == (
        unknown,
        (Action(ActionKind.KEEP, "[3, 4]", "module type unknown; left as is", "pytorch-to-burn"),),
    )
    undecided = {"x.weight": Decision("x.weight", None, "no evidence here")}
    assert PyTorchToBurn(undecided).apply(unknown)[1][0].reason == "no evidence here; left as is"
    bias = f32("x.bias", (3,))
    assert adapter.apply(bias) == (bias, ())
    emb = f32("emb.weight", (3, 4), "Embedding")
    assert adapter.apply(emb) == (
        emb,
        (
            Action(
                ActionKind.KEEP,
                "[3, 4]",
                "Embedding (class Embedding from file); not transposed",
                "pytorch-to-burn",
            ),
        ),
    )
    # a bare parameter name (no prefix) is renamed without a dot
    ln = f32("weight", (4,), "LayerNorm")
    out, actions = adapter.apply(ln)
    assert out is not None
    assert out.name == "gamma"
    assert out.module_type == "LayerNorm"
    assert actions == (
        Action(
            ActionKind.RENAME,
            "weight -> gamma",
            "LayerNorm (class LayerNorm from file)",
            "pytorch-to-burn",
        ),
    )
    rms = f32("n.gamma", (4,), "RmsNorm")
    assert BurnToPyTorch(rename_rmsnorm=False).apply(rms) == (rms, ())
    out, _ = BurnToPyTorch().apply(rms)
    assert out is not None
    assert out.name == "n.weight"
    # a target verdict overrides the type: not renamed, and transposed though not a Linear
    verdict = {"n.weight": Decision("n.weight", "LayerNorm", "t", rename=False)}
    kept = f32("n.weight", (4,))
    assert PyTorchToBurn(verdict).apply(kept) == (kept, ())
    forced = {"e.weight": Decision("e.weight", "Embedding", "t", transpose=True)}
    out, actions = PyTorchToBurn(forced).apply(f32("e.weight", (2, 3)))
    assert out is not None
    assert out.shape == (3, 2)
    assert actions[0].describe() == "transpose [2, 3] -> [3, 2]: Embedding (t)"


# --- pipeline.py ------------------------------------------------------------------------------


# --- modules.py -------------------------------------------------------------------------------


def test_cast_entry_forgets_file_offset_and_source_dtype() -> None:
    # an entry read from a file (offset 128, stored as F64 and decoded to F32)
    entry = replace(f32("w", (2,)), offset=128, source_dtype=DType.F64)
    out = cast_entry(entry, DType.F16)
    assert (out.offset, out.source_dtype, out.nbytes) == (None, None, 4)


def test_convert_float_f64_to_f64_keeps_every_bit() -> None:
    x = np.array([1 + 2**-40], dtype=np.float64)
    assert convert_float(x, DType.F64, DType.F64).tobytes() == x.tobytes()

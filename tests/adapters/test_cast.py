"""cast:DTYPE, half (burn-store spec §2), select, and the named-adapter registry."""

from __future__ import annotations

import struct
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckptctl.adapters import ADAPTER_NAMES, Chain, chain, parse_adapter
from ckptctl.adapters.cast import Cast, HalfPrecision
from ckptctl.adapters.select import Select
from ckptctl.dtypes import DType
from ckptctl.errors import SelectionError
from tests.strategies import array_entry, make_entry


def bf16_reference(value: float) -> int:
    """Round an f32 to bf16 bits by comparing distances in float64 (independent of dtypes.py)."""
    bits = int(struct.unpack("<I", struct.pack("<f", value))[0])
    lo = bits >> 16
    hi = lo + 1

    def val(b: int) -> float:
        if b & 0x7FFF == 0x7F80:  # the overflow step rounds like 2**128
            return (-1.0 if b & 0x8000 else 1.0) * 2.0**128
        return float(struct.unpack("<f", struct.pack("<I", b << 16))[0])

    d_lo, d_hi = abs(value - val(lo)), abs(value - val(hi))
    if d_lo < d_hi or (d_lo == d_hi and lo % 2 == 0):
        return lo
    return hi


finite_f32 = st.floats(allow_nan=False, allow_infinity=False, width=32)


@given(st.lists(finite_f32, min_size=1, max_size=20))
def test_cast_f32_to_bf16_matches_reference(values: list[float]) -> None:
    entry = array_entry("x", np.array(values, dtype=np.float32))
    out = parse_adapter("cast:bf16")(entry)
    assert out is not None
    assert out.dtype is DType.BF16
    assert out.nbytes == 2 * len(values)
    assert out.load().tolist() == [bf16_reference(v) for v in values]


@given(st.lists(st.floats(allow_nan=False, width=64), min_size=1, max_size=20))
def test_cast_f64_to_f16_goes_through_f32(values: list[float]) -> None:
    entry = array_entry("x", np.array(values, dtype=np.float64))
    out = Cast(DType.F16)(entry)
    assert out is not None
    with np.errstate(over="ignore"):  # numpy reference: overflow to inf is expected
        expected = np.array(values, dtype=np.float64).astype(np.float32).astype(np.float16)
    assert out.load().tobytes() == expected.tobytes()


def test_cast_bf16_to_f32_exact_and_non_float_untouched() -> None:
    raw = np.array([0x3F80, 0xC000, 0x7F80], dtype=np.uint16)  # 1.0, -2.0, inf
    entry = make_entry("b", DType.BF16, (3,), raw.tobytes())
    out = Cast.parse("float32")(entry)
    assert out is not None
    assert out.load().tolist() == [1.0, -2.0, float("inf")]
    ints = array_entry("i", np.arange(3, dtype=np.int64))
    assert Cast(DType.F16).apply(ints) == (ints, ())
    same = array_entry("f", np.zeros(2, dtype=np.float32))
    assert Cast(DType.F32)(same) is same


@pytest.mark.parametrize("spec", ["cast:f8_e4m3", "cast:i32", "cast:nope"])
def test_bad_cast_targets(spec: str) -> None:
    with pytest.raises(SelectionError):
        parse_adapter(spec)


def test_unknown_adapter_lists_valid_names() -> None:
    with pytest.raises(SelectionError) as info:
        parse_adapter("pytorch2burn")
    assert "pytorch2burn" in str(info.value)
    assert info.value.hint is not None
    for name in ADAPTER_NAMES:
        assert name in str(info.value.hint)
    assert info.value.exit_code == 2


def test_describe() -> None:
    assert parse_adapter("cast:bf16").describe() == "cast:BF16"
    assert parse_adapter("half").describe() == "half"
    adapter = chain(parse_adapter("pytorch-to-burn"), parse_adapter("cast:f16"))
    assert isinstance(adapter, Chain)
    assert adapter.describe() == "pytorch-to-burn -> cast:F16"


def test_half_precision_rules() -> None:
    values = np.array([1.0, 1e-8, 70000.0, 0.1], dtype=np.float32)
    with np.errstate(over="ignore"):  # 70000 overflows F16 to inf, as in Burn
        halves = values.astype(np.float16)
    lin = replace(array_entry("fc.weight", values), module_type="Linear")
    out = HalfPrecision()(lin)
    assert out is not None
    assert out.dtype is DType.F16
    assert out.load().tobytes() == halves.tobytes()  # RNE, overflow to inf
    back = HalfPrecision()(out)  # direction follows the data
    assert back is not None
    assert back.dtype is DType.F32
    assert back.load().tolist() == halves.astype(np.float32).tolist()
    # BatchNorm excluded entirely; unknown module type, user structs, BF16 and F64 untouched
    bn = replace(array_entry("bn.running_var", values), module_type="BatchNorm2d")
    assert HalfPrecision()(bn) is bn
    plain = array_entry("x", values)
    assert HalfPrecision()(plain) is plain
    user = replace(plain, module_type="MyBlock")
    assert HalfPrecision()(user) is user
    f64 = replace(array_entry("y", values.astype(np.float64)), module_type="Linear")
    assert HalfPrecision()(f64) is f64
    _, actions = HalfPrecision().apply(lin)
    assert "half-precision set" in actions[0].reason


def test_select() -> None:
    entries = [array_entry(n, np.zeros(1, np.float32)) for n in ("a.w", "b.w", "b.num")]
    sel = Select(include=(r"^b\.",), exclude=(r"num$",))
    kept = [e.name for e in entries if sel(e) is not None]
    assert kept == ["b.w"]
    out, actions = sel.apply(entries[2])
    assert out is None
    assert actions[0].kind == "drop"
    assert "num$" in actions[0].reason
    assert Select()(entries[0]) is entries[0]
    with pytest.raises(SelectionError, match="exclude #1"):
        Select(exclude=("(?!x)",))


def test_chain_accepts_plain_callables_and_stops_on_drop() -> None:
    entry = array_entry("x", np.zeros(1, np.float32))
    renamed = chain(lambda e: replace(e, name="y"), Cast(DType.F16))
    out, actions = renamed.apply(entry)
    assert out is not None
    assert out.name == "y"
    assert out.dtype is DType.F16
    assert [a.kind for a in actions] == ["custom", "cast"]
    dropped = chain(lambda e: None, Cast(DType.F16))
    assert dropped.apply(entry)[0] is None

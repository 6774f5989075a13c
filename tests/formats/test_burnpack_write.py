"""Writing a burnpack file: what the writer refuses, how it lays payloads out, which source
dtypes it keeps, and the CBOR bytes of its metadata.

Plans come from ``plan_layout`` (the layout worked out before any byte is written) and files
from ``write_burnpack``; their metadata is decoded with plain ``cbor2`` and compared with what
burn writes (docs/formats/burnpack.md#metadata: shortest integers and floats, definite lengths;
without floats, plain ``cbor2.dumps`` writes burn's bytes). Refusals are checked by class, a keyword
and the facts: the tensor, the value, the limit; hints by their fixes.
"""

from __future__ import annotations

import io
import struct
from typing import Any

import cbor2
import pytest

from ckptctl.dtypes import DType
from ckptctl.errors import CkptError, ExitCode, SelectionError, UnsupportedError
from ckptctl.fix import Note, Option
from ckptctl.formats.burnpack import plan_layout, write_burnpack
from ckptctl.formats.burnpack._cbor import encode_cbor
from ckptctl.model import TensorEntry
from tests.formats.test_burnpack import entry
from tests.formats.test_pytorch_safety_walk import Says


def written_meta(entries: list[TensorEntry], metadata: Any = None, scalars: Any = None) -> Any:
    """The decoded CBOR metadata the writer plans for ``entries``."""
    plan = plan_layout(entries, metadata or {}, scalars or {})
    return cbor2.loads(plan.head[10 : 10 + plan.metadata_length])


def q8(extra: dict[str, str], scheme: Any = None) -> TensorEntry:
    """A quantized tensor's 2 payload bytes with its QFloat scheme as the reader gives it."""
    source = {"QFloat": scheme if scheme is not None else {"value": "Q8S"}}
    return entry("q", DType.U8, (2,), b"\x01\x02", source_dtype=source, extra=extra)


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "metadata", "error", "keyword", "says"),
    [
        ([entry("w", DType.U8, (1,), b"\x01")] * 2, {}, SelectionError, "twice", Says("'w'")),
        ([entry("a\nb", DType.U8, (1,), b"\x01")], {}, UnsupportedError, "control characters",
         Says("'a\\nb'")),
        ([entry("w", DType.F32, (2,), b"\x00" * 4)], {}, UnsupportedError, "needs",
         Says("'w'", "4 bytes", "shape [2]", "F32", "needs 8")),
        ([entry("w", DType.U8, (1,), b"\x01", param_id=-1)], {}, UnsupportedError, "param_id",
         Says("'w'", "-1", "u64")),
        ([entry("w", DType.U8, (1,), b"\x01", param_id=1 << 64)], {}, UnsupportedError,
         "param_id", Says("'w'", "18446744073709551616", "u64")),
        ([], {"k": 1}, UnsupportedError, "text to text", Says("'k': 1")),
        ([], {1: "v"}, UnsupportedError, "text to text", Says("1: 'v'")),
        ([q8({"quantized": "Q8S", "logical_shape": "[2]"}, {"value": b"x"})], {},
         UnsupportedError, "cannot encode", Says("bytes")),
    ],
    ids=["duplicate", "control-name", "size", "negative-id", "id-too-big", "metadata-value",
         "metadata-key", "scheme-bytes"],
)  # fmt: skip
def test_the_writer_refuses_what_burnpack_cannot_hold(
    entries: list[TensorEntry], metadata: Any, error: type[CkptError], keyword: str, says: Says
) -> None:
    with pytest.raises(error, match=keyword) as info:
        plan_layout(entries, metadata, {})
    assert type(info.value) is error
    assert info.value.message == says
    assert info.value.exit_code == (
        ExitCode.USAGE if error is SelectionError else ExitCode.UNSUPPORTED
    )
    if error is SelectionError:  # two inputs renamed to one name
        assert info.value.hint == Says("remap")


@pytest.mark.parametrize(
    ("name", "dtype", "fix"),
    [
        ("w", DType.F8_E4M3, Option("adapters", "cast:f32")),
        ("z.x", DType.C64, Option("exclude", r"^z\.x$")),
    ],
)
def test_a_dtype_burnpack_cannot_store_is_refused_with_a_fix(
    name: str, dtype: DType, fix: Option
) -> None:
    with pytest.raises(UnsupportedError, match="cannot store") as info:
        plan_layout([entry(name, dtype, (1,), bytes(dtype.itemsize))], {}, {})
    assert info.value.message == Says(f"'{name}'", dtype.value)
    assert isinstance(info.value.hint, Note)
    assert info.value.hint.fixes == (fix,)


def test_a_bad_scalar_is_refused_naming_it() -> None:
    with pytest.raises(UnsupportedError, match="Float") as info:
        plan_layout([], {}, {"lr": {"Float": 1}})
    assert info.value.message == Says("'lr': 1")


def test_the_largest_u64_param_id_is_written() -> None:
    top = (1 << 64) - 1
    meta = written_meta([entry("w", DType.U8, (1,), b"\x01", param_id=top)])
    assert meta["tensors"]["w"]["param_id"] == top


def test_the_tensor_limit_is_inclusive() -> None:
    many = [entry(str(i), DType.U8, (0,), b"") for i in range(100_000)]
    assert len(plan_layout(many, {}, {}).offsets) == 100_000
    many.append(entry("x", DType.U8, (0,), b""))
    with pytest.raises(UnsupportedError, match="limit") as info:
        plan_layout(many, {}, {})
    assert info.value.message == Says("100001 tensors", "100000")


def test_the_metadata_size_limit_is_inclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptctl.formats.burnpack import writer

    entries = [entry("w", DType.U8, (1,), b"\x01")]
    size = plan_layout(entries, {}, {}).metadata_length
    monkeypatch.setattr(writer, "MAX_METADATA_BYTES", size)
    assert plan_layout(entries, {}, {}).metadata_length == size  # exactly at the limit: fine
    monkeypatch.setattr(writer, "MAX_METADATA_BYTES", size - 1)
    with pytest.raises(UnsupportedError, match="limit") as info:
        plan_layout(entries, {}, {})
    assert info.value.message == Says(f"{size} bytes", f"limit of {size - 1}")


# --- layout and metadata --------------------------------------------------------------------


def test_every_payload_is_aligned_to_256_bytes() -> None:
    entries = [
        entry("a", DType.U8, (1,), b"\x01"),
        entry("e", DType.U8, (0,), b""),
        entry("b", DType.U8, (256,), bytes(256)),
        entry("c", DType.U8, (2,), b"\x02\x03"),
    ]
    plan = plan_layout(entries, {}, {})
    assert plan.offsets == (("a", 0, 1), ("e", 256, 256), ("b", 256, 512), ("c", 512, 514))
    assert plan.data_start == 256
    assert plan.file_size == 256 + 514
    assert len(plan.head) == 256
    assert plan.head[:10] == b"NRUB\x01\x00" + struct.pack("<I", plan.metadata_length)
    assert plan.head[10 + plan.metadata_length :] == bytes(256 - 10 - plan.metadata_length)
    out = io.BytesIO()
    write_burnpack(out, entries, {}, {})
    data = out.getvalue()
    assert len(data) == plan.file_size
    assert data[256:257] == b"\x01"
    assert data[257:512] == bytes(255)
    assert data[768:770] == b"\x02\x03"


def test_empty_metadata_and_scalars_are_left_out_and_names_are_sorted() -> None:
    top = written_meta([entry("b", DType.U8, (1,), b"\x01"), entry("a", DType.U8, (0,), b"")])
    assert list(top) == ["tensors"]
    assert list(top["tensors"]) == ["a", "b"]
    top = written_meta([], {"z": "1", "a": "2"}, {"y": {"UInt": 1}, "b": {"Bool": True}})
    assert list(top) == ["tensors", "metadata", "scalars"]
    assert list(top["metadata"]) == ["a", "z"]
    assert list(top["scalars"]) == ["b", "y"]


@pytest.mark.parametrize(
    ("extra", "dtype"),
    [
        ({"quantized": "Q8S"}, "U8"),  # no logical shape: a plain U8 vector
        ({"quantized": "Q8S", "logical_shape": "{}"}, "U8"),  # not a list
        ({"quantized": "Q8S", "logical_shape": "[1, -1]"}, "U8"),  # not unsigned
        ({"quantized": "Q8S", "logical_shape": "[1,"}, "U8"),  # not JSON
        ({"quantized": "Q8S", "logical_shape": "[2, 1]"}, {"QFloat": {"value": "Q8S"}}),
    ],
)
def test_a_qfloat_scheme_is_kept_only_with_a_valid_logical_shape(
    extra: dict[str, str], dtype: Any
) -> None:
    d = written_meta([q8(extra)])["tensors"]["q"]
    assert d["dtype"] == dtype
    assert d["shape"] == ([2] if dtype == "U8" else [2, 1])


@pytest.mark.parametrize(
    ("dtype", "source", "extra", "written"),
    [
        (DType.U8, {"Other": {}}, {"logical_shape": "[2]"}, "U8"),  # only QFloat keeps a scheme
        (DType.U8, {"Bool": "U8"}, {}, "U8"),  # a bool store only for BOOL data
        (DType.BOOL, {"Bool": "U16"}, {}, {"Bool": "Native"}),  # unknown store
        (DType.BOOL, {"Bool": "U8"}, {}, {"Bool": "U8"}),
        (DType.U8, "Flex32", {}, "U8"),
    ],
)
def test_a_source_dtype_is_written_only_where_it_fits(
    dtype: DType, source: Any, extra: dict[str, str], written: Any
) -> None:
    e = entry("t", dtype, (2,), b"\x01\x00", source_dtype=source, extra=extra)
    assert written_meta([e])["tensors"]["t"]["dtype"] == written


# --- CBOR -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [0, 23, 24, 255, 256, 65535, 65536, (1 << 32) - 1, 1 << 32, (1 << 64) - 1,
     -1, -24, -25, -256, -257, -(1 << 64),
     None, True, False, "", "a" * 23, "a" * 24, "é", [], [1, [2]], {}, {"b": 1, "a": [None]}],
)  # fmt: skip
def test_cbor_matches_cbor2_without_floats(value: Any) -> None:
    """Without floats, plain cbor2 writes burn's bytes (shortest heads, in order)."""
    assert encode_cbor(value) == cbor2.dumps(value)
    # and so does the writer, for a quantization scheme holding the value
    scheme = {"value": "Q8S", "v": value}
    plan = plan_layout([q8({"quantized": "Q8S", "logical_shape": "[2]"}, scheme)], {}, {})
    assert cbor2.dumps("v") + cbor2.dumps(value) in plan.head[10 : 10 + plan.metadata_length]


@pytest.mark.parametrize(
    ("value", "hex_bytes"),
    [
        (0.0, "f90000"),
        (1.5, "f93e00"),
        (65504.0, "f97bff"),  # the largest half
        (65520.0, "fa477ff000"),  # overflows half, exact in single
        (0.1, "fb3fb999999999999a"),
        (1e300, "fb7e37e43c8800759c"),  # overflows half and single
        (float("inf"), "f97c00"),
        (-2.0, "f9c000"),
    ],
)
def test_cbor_floats_take_the_shortest_exact_form(value: float, hex_bytes: str) -> None:
    assert encode_cbor(value).hex() == hex_bytes
    plan = plan_layout([], {}, {"s": {"Float": value}})  # the writer's scalars end the metadata
    assert plan.head[10 : 10 + plan.metadata_length].endswith(bytes.fromhex(hex_bytes))


@pytest.mark.parametrize("value", [1 << 64, -(1 << 64) - 1])
def test_cbor_refuses_integers_past_64_bits(value: int) -> None:
    with pytest.raises(ValueError, match="64 bits") as info:
        encode_cbor(value)
    assert str(1 << 64) in str(info.value)  # the head's argument: the value, or -1 - value


def test_cbor_refuses_bytes_and_writes_tuples_as_lists() -> None:
    with pytest.raises(TypeError, match="cannot encode") as info:
        encode_cbor({"a": b"x"})
    assert "bytes" in str(info.value)
    assert encode_cbor((1, 2)) == cbor2.dumps([1, 2])

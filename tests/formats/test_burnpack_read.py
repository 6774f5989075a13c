"""Reading a burnpack file: what the header, the CBOR metadata and every descriptor must be, the
limits on each side of their bounds, burn 0.19's unaligned layout, and the header view.

Files are assembled with plain ``cbor2.dumps`` and ``struct.pack``, independent of
ckptctl's writer, and read through the reader (``open_burnpack``, as ``open_checkpoint`` does
once the magic is sniffed) and the header view (``read_layout``, which shows unknown dtypes and
cut files instead of refusing them). Refusals are checked by class, exit code, a keyword and the
facts the message must carry (the tensor, the value found, the byte counts); hints by a keyword.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cbor2
import pytest

from ckptctl import open_checkpoint, read_layout
from ckptctl.dtypes import DType
from ckptctl.errors import (
    CkptError,
    CorruptCheckpointError,
    ExitCode,
    TruncatedError,
    UnsupportedError,
)
from ckptctl.formats.burnpack import open_burnpack, parse_param_id
from ckptctl.formats.burnpack._parse import _check_plain
from ckptctl.model import Checkpoint, HeaderLayout, damaged_layout
from ckptctl.sources import ByteSource
from tests.formats.test_burnpack import desc, f32, pack
from tests.formats.test_pytorch_safety_walk import Says

#: The dtypes burnpack stores (docs/formats/burnpack.md#dtypes), in the order burn's DType enum
#: lists them.
BURNPACK_DTYPE_NAMES = [
    "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8",
    "U64", "U32", "U16", "U8", "Flex32", "Bool", "QFloat",
]  # fmt: skip
MAX_METADATA = 100 * 1024 * 1024  # burn's reader limit (docs/formats/burnpack.md#limits)


def raw(meta: bytes, total: int | None = None, version: int = 1) -> bytes:
    """A header and ``meta`` (already CBOR), zero-padded to ``total`` bytes when given."""
    head = b"NRUB" + struct.pack("<HI", version, len(meta)) + meta
    return head if total is None else head.ljust(total, b"\0")


def one(d: dict[str, Any], payload: bytes = f32(1.0, 2.0)) -> bytes:
    """A file with the one tensor ``w`` described by ``d``."""
    return pack({"tensors": {"w": d}}, {0: payload})


def write(tmp_path: Path, data: bytes, name: str = "t.bpk") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@contextmanager
def opened(tmp_path: Path, data: bytes) -> Iterator[Checkpoint]:
    with open_checkpoint(write(tmp_path, data)) as ckpt:
        yield ckpt


def layout(tmp_path: Path, data: bytes) -> HeaderLayout:
    return read_layout(write(tmp_path, data, "l.bpk"))


def refused(
    tmp_path: Path,
    data: bytes,
    keyword: str | None,
    error: type[CkptError] = CorruptCheckpointError,
) -> CkptError:
    """The error the reader refuses ``data`` with: exactly ``error``, its message matching."""
    with ByteSource(write(tmp_path, data)) as source, pytest.raises(error, match=keyword) as info:
        open_burnpack(source)
    assert type(info.value) is error
    assert info.value.exit_code == (
        ExitCode.UNSUPPORTED if error is UnsupportedError else ExitCode.INPUT
    )
    return info.value


# --- header ---------------------------------------------------------------------------------


def test_a_file_shorter_than_the_header_is_refused(tmp_path: Path) -> None:
    err = refused(tmp_path, b"NRUB\x01\x00\x00\x00\x00", "10-byte")
    assert err.message == Says("9 bytes", "header")
    assert err.hint is None


def test_exactly_ten_bytes_reaches_the_cbor_decoder(tmp_path: Path) -> None:
    refused(tmp_path, b"NRUB\x01\x00\x00\x00\x00\x00", "^invalid CBOR metadata: ")


def test_bad_magic_names_what_was_found(tmp_path: Path) -> None:
    err = refused(tmp_path, b"BURN\x01\x00\x00\x00\x00\x00", "bad magic")
    assert err.message == Says("b'BURN'", "b'NRUB'")


@pytest.mark.parametrize("version", [2, 0x8000])  # u16: 0x8000 is 32768 (newer), not -32768
def test_a_newer_version_is_unsupported(tmp_path: Path, version: int) -> None:
    data = bytearray(one(desc("F32", [2], 0, 8)))
    data[4:6] = struct.pack("<H", version)
    err = refused(tmp_path, bytes(data), "newer", UnsupportedError)
    assert err.message == Says(f"version {version}", "version 1")
    assert err.hint == Says("upgrade ckptctl")


def test_version_zero_is_read(tmp_path: Path) -> None:
    assert layout(tmp_path, raw(cbor2.dumps({"tensors": {}}), version=0)).header["version"] == 0


def test_the_metadata_limit_is_inclusive(tmp_path: Path) -> None:
    over = refused(tmp_path, raw(bytes(4))[:6] + struct.pack("<I", MAX_METADATA + 1) + bytes(4),
                   "exceeds")  # fmt: skip
    assert over.message == Says(str(MAX_METADATA + 1), f"limit of {MAX_METADATA} bytes")
    at = refused(tmp_path, raw(bytes(4))[:6] + struct.pack("<I", MAX_METADATA) + bytes(4),
                 "runs past")  # fmt: skip
    assert at.message == Says(str(MAX_METADATA), "(14 bytes)")
    assert at.hint == Says("truncated")


def test_metadata_may_end_exactly_at_the_end_of_the_file(tmp_path: Path) -> None:
    meta = cbor2.dumps({"tensors": {}})
    assert layout(tmp_path, raw(meta)).header["metadata_length"] == len(meta)
    with opened(tmp_path, raw(meta)) as ckpt:
        assert len(ckpt) == 0
    err = refused(tmp_path, raw(meta)[:-1], "runs past")
    assert err.message == Says(f"metadata length {len(meta)}", f"({9 + len(meta)} bytes)")


# --- metadata map ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("top", "says"),
    [
        ([1, 2], Says("CBOR list", "not a map")),
        ({"metadata": {}}, Says("no 'tensors'")),
        ({"tensors": [1]}, Says("'tensors'", "not a map")),
        ({"tensors": {}, "metadata": [1]}, Says("'metadata'", "not a map")),
        ({"tensors": {}, "metadata": {"a": 1}}, Says("entry 'a': 1", "text to text")),
        ({"tensors": {}, "metadata": {1: "a"}}, Says("entry 1: 'a'", "text to text")),
        ({"tensors": {}, "scalars": [1]}, Says("'scalars'", "not a map")),
        ({"tensors": {}, "scalars": {"": {"UInt": 1}}}, Says("scalar name", "empty")),
        ({"tensors": {}, "scalars": {1: {"UInt": 1}}}, Says("scalar name 1", "text string")),
        ({"tensors": {}, "scalars": {"a\x07": {"UInt": 1}}},
         Says("'a\\x07'", "control characters")),
        ({"tensors": {"": desc("F32", [2], 0, 8)}}, Says("tensor name", "empty")),
        ({"tensors": {"w": 1}}, Says("'w'", "descriptor", "not a map")),
    ],
)  # fmt: skip
def test_a_metadata_map_of_the_wrong_shape_is_refused(tmp_path: Path, top: Any, says: Says) -> None:
    err = refused(tmp_path, raw(cbor2.dumps(top), 256 + 8), None)
    assert err.message == says
    assert err.hint is None


def test_metadata_and_scalars_default_to_empty(tmp_path: Path) -> None:
    data = raw(cbor2.dumps({"tensors": {}}))
    with opened(tmp_path, data) as ckpt:
        assert (ckpt.metadata, ckpt.scalars, ckpt.notes) == ({}, {}, [])
        assert str(ckpt.path) == str(tmp_path / "t.bpk")
    assert layout(tmp_path, data).facts["layout"] == "aligned"


def test_unknown_keys_are_noted(tmp_path: Path) -> None:
    d = desc("F32", [2], 0, 8) | {"zz": 1, "aa": 2}
    with opened(tmp_path, pack({"tensors": {"w": d}, "b": 1, "a": 2}, {0: f32(1, 2)})) as ckpt:
        assert ckpt.notes == [
            Says("metadata keys", "'a', 'b'"),
            Says("tensor 'w'", "descriptor keys", "'aa', 'zz'"),
        ]


def test_the_tensor_limit_is_inclusive(tmp_path: Path) -> None:
    """100,000 tensors pass the count check (the first bad descriptor then stops the parse)."""
    body = bytearray(b"\xa1" + cbor2.dumps("tensors") + b"\xba" + struct.pack(">I", 100_000))
    for i in range(100_000):
        body += cbor2.dumps(str(i)) + b"\x00"
    err = refused(tmp_path, raw(bytes(body)), "descriptor")
    assert err.message == Says("tensor '0'", "not a map")


@pytest.mark.parametrize("levels", [127, 128])
def test_cbor_nesting_is_bounded_at_128_levels(tmp_path: Path, levels: int) -> None:
    # the top map is one level: 127 lists inside it make 128, one more is refused
    meta = b"\xa2" + cbor2.dumps("tensors") + b"\xa0" + cbor2.dumps("x") + b"\x81" * levels
    data = raw(meta + b"\x00" + b"\xff")  # a byte after the item, inside N: ignored, as in burn
    if levels == 127:
        with opened(tmp_path, data) as ckpt:
            assert ckpt.notes == [Says("'x'")]
    else:
        assert "nest" in refused(tmp_path, data, "^invalid CBOR").message


def test_duplicate_metadata_keys_are_refused(tmp_path: Path) -> None:
    meta = b"\xa2" + cbor2.dumps("tensors") + b"\xa0" + cbor2.dumps("tensors") + b"\xa0"
    refused(tmp_path, raw(meta), "^invalid CBOR metadata: ")


# --- descriptors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("d", "says"),
    [
        ({"shape": [2], "data_offsets": [0, 8]}, Says("'w'", "no 'dtype'")),
        ({"dtype": "F32", "data_offsets": [0, 8]}, Says("'w'", "no 'shape'")),
        ({"dtype": "F32", "shape": [2]}, Says("'w'", "no 'data_offsets'")),
        (desc("F32", [2, -1], 0, 8), Says("'w'", "shape [2, -1]", "unsigned integers")),
        (desc("F32", [True], 0, 8), Says("'w'", "shape [True]", "unsigned integers")),
        ({"dtype": "F32", "shape": [2], "data_offsets": [0]},
         Says("'w'", "data_offsets [0]", "pair")),
        ({"dtype": "F32", "shape": [2], "data_offsets": "08"},
         Says("'w'", "data_offsets '08'", "pair")),
        (desc("F32", [2], -1, 8), Says("'w'", "data_offsets [-1, 8]", "pair")),
        (desc("F32", [2], 8, 0), Says("'w'", "end 0", "start 8")),
        (desc("F32", [2], 0, 8, -1), Says("'w'", "param_id -1", "64-bit")),
        (desc("F32", [2], 0, 8) | {"param_id": "x"}, Says("'w'", "param_id 'x'", "64-bit")),
        (desc("F32", [3], 0, 8), Says("'w'", "8 bytes", "shape [3]", "'F32'", "needs 12")),
        (desc("F32", [1], 0, 8), Says("'w'", "8 bytes", "shape [1]", "needs 4")),
        # the size is end - start, not end or end + start
        (desc("F32", [1], 256, 264), Says("'w'", "8 bytes", "shape [1]", "needs 4")),
        (desc(5, [2], 0, 8), Says("'w'", "dtype 5", "one-entry map")),
        (desc({"Bool": "U8", "x": 1}, [2], 0, 8),
         Says("'w'", "dtype {'Bool': 'U8', 'x': 1}", "one-entry map")),
        (desc({}, [2], 0, 8), Says("'w'", "dtype {}", "one-entry map")),
        (desc({"QFloat": [1]}, [2], 0, 8), Says("'w'", "QFloat scheme", "not a map")),
        (desc({"QFloat": {1: "a"}}, [2], 0, 8), Says("'w'", "QFloat scheme", "non-text key 1")),
        (desc({"QFloat": {"a": b"x"}}, [2], 0, 8), Says("'w'", "QFloat scheme", "bytes data")),
        (desc({"QFloat": {"a": [{"b": b"x"}]}}, [2], 0, 8),
         Says("'w'", "QFloat scheme", "bytes data")),
    ],
)  # fmt: skip
def test_a_bad_descriptor_is_refused_naming_the_tensor(tmp_path: Path, d: Any, says: Says) -> None:
    err = refused(tmp_path, one(d), None)
    assert err.message == says
    assert err.hint is None


@pytest.mark.parametrize("pid", [None, 0, (1 << 64) - 1])
def test_param_ids_up_to_the_largest_u64_are_read(tmp_path: Path, pid: int | None) -> None:
    with opened(tmp_path, one(desc("F32", [2], 0, 8, pid))) as ckpt:
        assert ckpt["w"].param_id == pid


def test_a_quantization_scheme_is_only_plain_data_nested_128_levels_at_most() -> None:
    # no file reaches this bound: the CBOR decoder stops the whole item at 128 levels first
    # (test_cbor_nesting_is_bounded_at_128_levels); the scheme's own check is defence in depth
    def nested(levels: int) -> Any:
        value: Any = 0
        for _ in range(levels):
            value = [value]
        return value

    _check_plain(nested(128), "x")
    _check_plain({"a": nested(127)}, "x")  # a map is one level, as a list is
    for deep in (nested(129), {"a": nested(128)}):
        with pytest.raises(CorruptCheckpointError, match="nested") as info:
            _check_plain(deep, "x")
        assert info.value.message == Says("x ", "128 levels")


def test_a_qfloat_scheme_of_plain_values_is_read(tmp_path: Path) -> None:
    scheme = {"value": "Q8S", "n": None, "b": True, "f": 0.5, "l": [1, "x"], "m": {"k": -1}}
    with opened(tmp_path, one(desc({"QFloat": scheme}, [2], 0, 8))) as ckpt:
        w = ckpt["w"]
        assert (w.dtype, w.shape, w.source_dtype) == (DType.U8, (8,), {"QFloat": scheme})
        assert dict(w.extra) == {"quantized": "Q8S", "logical_shape": "[2]"}


@pytest.mark.parametrize(
    ("dtype", "unknown"),
    [
        ("F8E4M3", "dtype 'F8E4M3'"),
        ({"Bool": "U16"}, "bool store 'U16'"),
        ({"Bool": 1}, "bool store 1"),
        ({"QInt": {}}, "dtype {'QInt': {}}"),
    ],
)
def test_an_unknown_dtype_is_unsupported_and_shown_by_the_header_view(
    tmp_path: Path, dtype: Any, unknown: str
) -> None:
    data = one(desc(dtype, [2], 0, 8))
    err = refused(tmp_path, data, "does not support", UnsupportedError)
    assert err.message == Says("tensor 'w'", unknown)
    assert isinstance(err.hint, str)
    assert err.hint.partition(": ")[2].split(", ") == BURNPACK_DTYPE_NAMES
    (region,) = [r for r in layout(tmp_path, data).regions if r.kind == "tensor"]
    assert (region.name, region.size) == ("w", 8)


@pytest.mark.parametrize(
    ("dtype", "itemsize", "kind", "source_dtype"),
    [
        ("Flex32", 4, DType.F32, "Flex32"),
        ("Bool", 1, DType.BOOL, "Bool"),
        ({"Bool": "Native"}, 1, DType.BOOL, {"Bool": "Native"}),
        ({"Bool": "U8"}, 1, DType.BOOL, {"Bool": "U8"}),
        ({"Bool": "U32"}, 4, DType.BOOL, {"Bool": "U32"}),
        ("BF16", 2, DType.BF16, None),
        ("U64", 8, DType.U64, None),
    ],
)
def test_each_dtype_has_its_item_size(
    tmp_path: Path, dtype: Any, itemsize: int, kind: DType, source_dtype: Any
) -> None:
    # 8 bytes hold 8 // itemsize elements; a wrong item size is refused as a size mismatch
    with opened(tmp_path, one(desc(dtype, [8 // itemsize], 0, 8))) as ckpt:
        w = ckpt["w"]
        assert (w.dtype, w.shape, w.source_dtype) == (kind, (8 // itemsize,), source_dtype)
        assert w.nbytes == 8 // itemsize * kind.itemsize  # U32 bools: one canonical byte each


def test_a_u32_bool_store_reads_as_canonical_bytes(tmp_path: Path) -> None:
    data = pack({"tensors": {"b": desc({"Bool": "U32"}, [3], 0, 12, 4)}},
                {0: struct.pack("<3I", 0, 2, 1)})  # fmt: skip
    with opened(tmp_path, data) as ckpt:
        b = ckpt["b"]
        assert (b.dtype, b.shape, b.nbytes, b.offset, b.param_id) == (DType.BOOL, (3,), 3, None, 4)
        assert dict(b.extra) == {"bool_store": "U32"}
        assert b.source_dtype == {"Bool": "U32"}
        assert bytes(b.data.read()) == b"\x00\x01\x01"


def test_a_quantized_entry_keeps_its_offset_and_param_id(tmp_path: Path) -> None:
    top = {"tensors": {"q": desc({"QFloat": {"value": "Q8S"}}, [2], 0, 4, 9)}}
    with opened(tmp_path, pack(top, {0: b"\x01\x02\x03\x04"})) as ckpt:
        q = ckpt["q"]
        assert (q.offset, q.param_id, q.nbytes, q.shape) == (256, 9, 4, (4,))


def test_long_values_are_shown_cut_at_80_characters(tmp_path: Path) -> None:
    # {'QInt': 'aaa...'} is 12 characters more than its text
    for length, shown in ((68, repr({"QInt": "a" * 68})), (69, "{'QInt': '" + "a" * 67 + "...")):
        err = refused(
            tmp_path, one(desc({"QInt": "a" * length}, [2], 0, 8)), None, UnsupportedError
        )
        assert err.message == Says(f"dtype {shown},")
    err = refused(tmp_path, one(desc("F32", [*range(100), -1], 0, 8)), "unsigned")
    shape = err.message.partition("shape ")[2].partition(" is not")[0]
    assert (len(shape), shape[-3:]) == (80, "...")


# --- scalars --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (1, Says("'s': 1", "one-entry map")),
        ({"Text": 1}, Says("'s'", "kind 'Text'", "Int, UInt, Float, Bool")),
        ({"Float": "x"}, Says("'s': 'x'", "Float")),
        ({"Int": 1.5}, Says("'s': 1.5", "Int")),
        ({"Int": -(1 << 63) - 1}, Says("'s': -9223372036854775809", "Int")),
        ({"UInt": -1}, Says("'s': -1", "UInt")),
        ({"UInt": 1 << 64}, Says("'s': 18446744073709551616", "UInt")),
        ({"Bool": 1}, Says("'s': 1", "Bool")),
    ],
)
def test_a_bad_scalar_is_refused_naming_it(tmp_path: Path, value: Any, says: Says) -> None:
    err = refused(tmp_path, raw(cbor2.dumps({"tensors": {}, "scalars": {"s": value}})), "scalar")
    assert err.message == says


@pytest.mark.parametrize(
    "value",
    [{"Int": -(1 << 63)}, {"Int": (1 << 63) - 1}, {"UInt": 0}, {"UInt": (1 << 64) - 1},
     {"Float": 0.5}, {"Bool": False}],
)  # fmt: skip
def test_scalars_at_their_limits_are_read(tmp_path: Path, value: Any) -> None:
    with opened(tmp_path, raw(cbor2.dumps({"tensors": {}, "scalars": {"s": value}}))) as ckpt:
        assert ckpt.scalars == {"s": value}


def test_a_param_id_that_is_not_base32hex_is_refused() -> None:
    with pytest.raises(ValueError, match="base32hex") as info:
        parse_param_id("zzzzzzzzzzzzz")
    assert "'zzzzzzzzzzzzz'" in str(info.value)


# --- layout: alignment, legacy detection, ranges ----------------------------------------------


def test_an_aligned_file_is_not_legacy(tmp_path: Path) -> None:
    data = one(desc("F32", [2], 0, 8))
    assert (layout(tmp_path, data).facts["data_start"], legacy(tmp_path, data)) == (256, False)


def legacy(tmp_path: Path, data: bytes) -> bool:
    """Whether the header view and the reader's notes both call ``data`` burn 0.19's layout."""
    is_legacy = layout(tmp_path, data).facts["layout"] == "unaligned-0.19"
    with opened(tmp_path, data) as ckpt:
        assert any("0.19" in note for note in ckpt.notes) is is_legacy
    return is_legacy


def test_an_unpadded_file_is_legacy(tmp_path: Path) -> None:
    """Aligned offsets, but the file ends exactly at unpadded + max_end: burn 0.19
    (docs/formats/burnpack.md#burn-019-files)."""
    data = pack({"tensors": {"w": desc("F32", [2], 0, 8)}}, {0: f32(1, 2)}, aligned=False)
    assert legacy(tmp_path, data)
    assert layout(tmp_path, data).facts["data_start"] == len(data) - 8
    with opened(tmp_path, data) as ckpt:
        assert len(ckpt.notes) == 1


def test_a_misaligned_offset_is_legacy(tmp_path: Path) -> None:
    top = {"tensors": {"a": desc("U8", [1], 0, 1), "b": desc("U8", [1], 1, 2)}}
    data = pack(top, {0: b"\x01\x02"}, aligned=False, size=600)
    assert legacy(tmp_path, data)
    assert layout(tmp_path, data).facts["data_start"] == 10 + len(cbor2.dumps(top))
    with opened(tmp_path, data) as ckpt:
        assert {n: bytes(e.data.read()) for n, e in ckpt.items()} == {"a": b"\x01", "b": b"\x02"}


def test_an_empty_tensor_map_is_never_legacy(tmp_path: Path) -> None:
    data = raw(cbor2.dumps({"tensors": {}}))
    assert not legacy(tmp_path, data)
    assert layout(tmp_path, data).facts["data_start"] == 256


def test_metadata_ending_on_the_boundary_is_not_legacy(tmp_path: Path) -> None:
    """10 + N == 256: no padding either way, so the layout is the current one."""
    top: dict[str, Any] = {"tensors": {"w": desc("F32", [2], 0, 8)}, "metadata": {"k": ""}}
    top["metadata"]["k"] = "x" * (246 - len(cbor2.dumps(top)) - 1)  # a 2-byte text head
    meta = cbor2.dumps(top)
    assert len(meta) == 246
    data = raw(meta) + f32(1, 2)
    assert not legacy(tmp_path, data)
    assert layout(tmp_path, data).facts["data_start"] == 256
    with opened(tmp_path, data) as ckpt:
        assert ckpt.notes == []


def test_a_payload_may_end_exactly_at_the_end_of_the_file(tmp_path: Path) -> None:
    d = {"w": desc("F32", [2], 0, 8)}
    with opened(tmp_path, pack({"tensors": d}, {0: f32(1, 2)}, size=264)) as ckpt:
        assert ckpt["w"].load().tolist() == [1.0, 2.0]
    cut = pack({"tensors": d}, {0: f32(1)}, size=263)
    err = refused(tmp_path, cut, "ends at byte")
    assert err.message == Says("'w'", "byte 264", "263 bytes")
    assert err.hint == Says("truncated")
    with pytest.raises(TruncatedError) as info:  # the header view shows what is there
        layout(tmp_path, cut)
    assert layout_of(info.value).regions[-1].note == Says("7 of 8 bytes")


def test_an_empty_payload_past_the_end_is_refused(tmp_path: Path) -> None:
    d = {"w": desc("F32", [0], 0, 0), "z": desc("F32", [0], 512, 512)}
    err = refused(tmp_path, pack({"tensors": d}, {}, size=512), "ends at byte")
    assert err.message == Says("'z'", "byte 768", "512 bytes")


def test_adjacent_and_empty_payloads_do_not_overlap(tmp_path: Path) -> None:
    top = {
        "tensors": {
            "b": desc("F32", [1], 4, 8),
            "a": desc("F32", [1], 0, 4),
            "e": desc("F32", [0], 2, 2),  # empty, inside 'a'
        }
    }
    with opened(tmp_path, pack(top, {0: f32(1, 2)}, aligned=False)) as ckpt:
        assert list(ckpt) == ["a", "e", "b"]


def test_overlapping_payloads_are_refused_naming_both(tmp_path: Path) -> None:
    top = {"tensors": {"b": desc("F32", [2], 4, 12), "a": desc("F32", [2], 0, 8)}}
    err = refused(tmp_path, pack(top, {0: f32(1, 2, 3)}, aligned=False), "overlap")
    assert err.message == Says("'a' and 'b'")


def test_payloads_with_the_same_start_sort_by_end_then_name(tmp_path: Path) -> None:
    top = {
        "tensors": {
            "z": desc("U8", [0], 0, 0),
            "y": desc("U8", [0], 0, 0),
            "a": desc("U8", [1], 0, 1),
        }
    }
    with opened(tmp_path, pack(top, {0: b"\x01"}, aligned=False)) as ckpt:
        assert list(ckpt) == ["y", "z", "a"]


def test_open_checkpoint_and_read_layout_refuse_a_corrupt_file(tmp_path: Path) -> None:
    path = write(tmp_path, one(desc("F32", [3], 0, 8)))
    with pytest.raises(CorruptCheckpointError) as info, open_checkpoint(path):
        pass  # pragma: no cover - open raises
    assert info.value.exit_code == ExitCode.INPUT
    assert info.value.path == str(path)
    with pytest.raises(CorruptCheckpointError):
        read_layout(path)


# --- header view ----------------------------------------------------------------------------


def regions(tmp_path: Path, data: bytes) -> list[tuple[str, int, int, str | None, str | None]]:
    return [(r.kind.value, r.start, r.end, r.name, r.note) for r in layout(tmp_path, data).regions]


def layout_of(error: TruncatedError) -> HeaderLayout:
    found = damaged_layout(error)
    assert found is not None
    return found


def test_gaps_are_alignment_unused_or_other_and_trailing_bytes_are_shown(tmp_path: Path) -> None:
    top = {
        "tensors": {
            "a": desc("U8", [1], 0, 1),
            "b": desc("U8", [1], 256, 257),  # 255 zero bytes before: alignment
            "c": desc("U8", [1], 768, 769),  # 511 zero bytes before: unused
            "d": desc("U8", [1], 1024, 1025),  # 255 non-zero bytes before: other
        }
    }
    payloads = {0: b"\x01", 256: b"\x02", 768: b"\x03", 769: b"\x07" * 255, 1024: b"\x04"}
    meta_end = 10 + len(cbor2.dumps(top))
    assert regions(tmp_path, pack(top, payloads) + bytes(3)) == [
        ("header", 0, 10, None, Says("NRUB", "version 1")),
        ("metadata", 10, meta_end, None, Says("CBOR")),
        ("padding", meta_end, 256, None, Says("256-byte aligned")),
        ("tensor", 256, 257, "a", None),
        ("padding", 257, 512, None, Says("alignment of 'b'")),
        ("tensor", 512, 513, "b", None),
        ("padding", 513, 1024, None, Says("511 unused", "'c'")),
        ("tensor", 1024, 1025, "c", None),
        ("other", 1025, 1280, None, Says("255 unused", "'d'")),
        ("tensor", 1280, 1281, "d", None),
        ("padding", 1281, 1284, None, Says("trailing zero")),
    ]


def test_a_gap_of_exactly_256_zero_bytes_is_unused(tmp_path: Path) -> None:
    top = {"tensors": {"a": desc("U8", [256], 0, 256), "b": desc("U8", [1], 512, 513)}}
    assert regions(tmp_path, pack(top, {0: b"\x01" * 256, 512: b"\x02"}))[-2:] == [
        ("padding", 512, 768, None, Says("256 unused", "'b'")),
        ("tensor", 768, 769, "b", None),
    ]


def test_the_layout_of_a_legacy_file(tmp_path: Path) -> None:
    top = {"tensors": {"a": desc("U8", [1], 0, 1), "b": desc("U8", [1], 2, 3)}}
    data = pack(top, {0: b"\x01", 2: b"\x02"}, aligned=False)
    start = 10 + len(cbor2.dumps(top))
    assert regions(tmp_path, data)[2:] == [
        ("tensor", start, start + 1, "a", None),
        ("padding", start + 1, start + 2, None, Says("1 unused", "'b'")),
        ("tensor", start + 2, start + 3, "b", None),
    ]
    facts = layout(tmp_path, data).facts
    assert (facts["layout"], facts["alignment"], facts["data_start"]) == (
        "unaligned-0.19",
        1,
        start,
    )


def test_the_layout_of_truncated_files(tmp_path: Path) -> None:
    top = {"tensors": {"a": desc("U8", [4], 0, 4), "b": desc("U8", [4], 256, 260)}}
    with pytest.raises(TruncatedError, match="past the end") as one_short:
        layout(tmp_path, pack(top, {0: b"\x01" * 4}, size=512 + 2))
    assert one_short.value.message == Says("1 tensor run", "(514 bytes)", "'b'")
    assert one_short.value.hint == Says("truncated")
    last = layout_of(one_short.value).regions[-1]
    assert (last.kind.value, last.start, last.end, last.name) == ("tensor", 512, 514, "b")
    assert last.note == Says("truncated", "2 of 4 bytes")
    with pytest.raises(TruncatedError) as two_short:
        layout(tmp_path, pack(top, {}, size=256 + 2))
    assert two_short.value.message == Says("2 tensors run", "(258 bytes)", "'b'")
    last = layout_of(two_short.value).regions[-1]
    assert (last.kind.value, last.end) == ("tensor", 258)


@pytest.mark.parametrize(
    ("size", "last"),
    [
        (300, ("padding", 260, 300, Says("alignment of 'b'"))),  # the file ends in a gap
        (512, ("padding", 260, 512, Says("alignment of 'b'"))),  # a tensor starts at the end
    ],
)
def test_the_layout_of_a_file_ending_before_a_tensor(
    tmp_path: Path, size: int, last: tuple[Any, ...]
) -> None:
    """Regression: the gap before the missing tensor used to be read past the end."""
    top = {"tensors": {"a": desc("U8", [4], 0, 4), "b": desc("U8", [4], 256, 260)}}
    with pytest.raises(TruncatedError) as info:
        layout(tmp_path, pack(top, {0: b"\x01" * 4}, size=size))
    assert info.value.message == Says("1 tensor run", f"({size} bytes)", "'b'")
    found = layout_of(info.value).regions[-1]
    assert (found.kind.value, found.start, found.end, found.note) == last


def test_the_layout_when_the_file_ends_inside_the_padding(tmp_path: Path) -> None:
    meta = cbor2.dumps({"tensors": {"a": desc("U8", [1], 0, 1)}})
    with pytest.raises(TruncatedError) as info:
        layout(tmp_path, raw(meta, 100))
    assert [(r.kind.value, r.start, r.end) for r in layout_of(info.value).regions] == [
        ("header", 0, 10),
        ("metadata", 10, 10 + len(meta)),
        ("padding", 10 + len(meta), 100),
    ]


def test_quantized_tensors_are_noted_with_their_scheme_and_era(tmp_path: Path) -> None:
    top = {
        "tensors": {
            "n": desc({"QFloat": {"value": "Q8S"}}, [2], 0, 4),
            "o": desc({"QFloat": {"param": 1}}, [2, 1], 256, 260),
            "p": desc({"QFloat": {"level": "Tensor"}}, [3], 512, 516),
        }
    }
    with opened(tmp_path, pack(top, {0: bytes(4), 256: bytes(4), 512: bytes(4)})) as ckpt:
        assert ckpt.notes == [
            Says("'n'", "quantized (Q8S, shape [2])", "(U8)"),
            Says("'o'", "quantized (unknown, shape [2, 1])", "(U8)", "pre.2 form"),
            Says("'p'", "quantized (unknown, shape [3])", "(U8)", "pre.2 form"),
        ]  # `level` alone marks the old era too
        assert ckpt.notes[0].endswith("(U8)")  # the current form: no era after it


def test_the_layout_facts_and_header(tmp_path: Path) -> None:
    top = {"tensors": {"a": desc("U8", [1], 0, 1), "b": desc("U8", [2], 256, 258)}, "x": b"\x01"}
    found = layout(tmp_path, pack(top, {0: b"\x01", 256: b"\x02\x03", 300: b"\x09"}))
    n = len(cbor2.dumps(top))
    assert found.format == "burnpack"
    assert found.file_size == 256 + 301
    assert found.header == {
        "magic": "NRUB",
        "version": 1,
        "metadata_length": n,
        "cbor": {
            "tensors": {
                "a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                "b": {"dtype": "U8", "shape": [2], "data_offsets": [256, 258]},
            },
            "x": "01",
        },
    }
    assert found.facts == {
        "layout": "aligned",
        "data_start": 256,
        "alignment": 256,
        "metadata_bytes": n,
        "tensor_count": 2,
        "tensor_bytes": 3,
        "padding_bytes": 256 - 10 - n + 255,
        "other_bytes": 43,
    }
    assert (found.regions[-1].kind.value, found.regions[-1].note) == ("other", Says("trailing"))


def test_the_header_view_renders_decoded_cbor_as_json(tmp_path: Path) -> None:
    x = {1: [b"\x01\xff", None, True, 1.5, "s"], "k": [{"n": -1}], "t": cbor2.CBORTag(9, 1)}
    cbor = layout(tmp_path, raw(cbor2.dumps({"tensors": {}, "x": x}))).header["cbor"]
    assert isinstance(cbor, dict)
    assert cbor["x"] == {
        "1": ["01ff", None, True, 1.5, "s"],
        "k": [{"n": -1}],
        "t": "CBORTag(9, 1)",
    }


@pytest.mark.parametrize("container", [list, dict])
def test_the_header_view_cuts_a_cycle_after_128_levels(tmp_path: Path, container: type) -> None:
    """Value-sharing tags can decode to a cycle; the view shows 128 levels under the top map,
    then '...'."""
    cycle: Any = container()
    if container is list:
        cycle.append(cycle)
    else:
        cycle["r"] = cycle
    meta = cbor2.dumps({"tensors": {}, "x": cycle}, value_sharing=True)
    cbor = layout(tmp_path, raw(meta)).header["cbor"]
    assert isinstance(cbor, dict)
    out: Any = cbor["x"]
    levels = 0
    while isinstance(out, (list, dict)):
        levels, out = levels + 1, out[0] if isinstance(out, list) else out["r"]
    assert (levels, out) == (128, "...")

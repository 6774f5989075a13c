"""Edge cases of ``ckptctl.formats.burnpack`` that mutation testing found untested (issue 17).

Error texts and hints are what ``ckptctl`` prints (``ckptctl: error: PATH: MESSAGE`` then a
``hint:`` line), so a changed word is a changed interface. Files are assembled with plain
``cbor2.dumps`` and ``struct.pack`` (spec §3.6), independent of ckptctl's writer; limits are
probed on both sides.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import cbor2
import pytest

from ckptctl import open_checkpoint, read_layout
from ckptctl.dtypes import DType
from ckptctl.errors import (
    CorruptCheckpointError,
    ExitCode,
    SelectionError,
    TruncatedError,
    UnsupportedError,
)
from ckptctl.fix import Note, Option
from ckptctl.formats.burnpack import plan_layout, write_burnpack
from ckptctl.formats.burnpack._cbor import decode_cbor, encode_cbor
from ckptctl.formats.burnpack._parse import ParsedFile, _check_plain, parse_file
from ckptctl.formats.burnpack._schema import (
    LEGACY_LAYOUT_NOTE,
    check_scalar,
    describe,
    parse_param_id,
)
from ckptctl.formats.burnpack.reader import _jsonable
from ckptctl.model import HeaderLayout, damaged_layout
from ckptctl.sources import ByteSource
from tests.formats.test_burnpack import desc, entry, f32, pack

TRUNCATED_HINT = "the file looks truncated; re-download or re-save it"


def raw(meta: bytes, total: int | None = None, version: int = 1) -> bytes:
    """A header and ``meta`` (already CBOR), zero-padded to ``total`` bytes when given."""
    head = b"NRUB" + struct.pack("<HI", version, len(meta)) + meta
    return head if total is None else head.ljust(total, b"\0")


def parse(tmp_path: Path, data: bytes, **kw: Any) -> ParsedFile:
    path = tmp_path / "t.bpk"
    path.write_bytes(data)
    with ByteSource(path) as source:
        return parse_file(source, **kw)


def parse_error(
    tmp_path: Path, data: bytes, error: type[Exception] = CorruptCheckpointError, **kw: Any
) -> Any:
    with pytest.raises(error) as info:
        parse(tmp_path, data, **kw)
    assert type(info.value) is error
    return info.value


def one(d: dict[str, Any], payload: bytes = f32(1.0, 2.0)) -> bytes:
    return pack({"tensors": {"w": d}}, {0: payload})


# --- header ---------------------------------------------------------------------------------


def test_short_file_message(tmp_path: Path) -> None:
    err = parse_error(tmp_path, b"NRUB\x01\x00\x00\x00\x00")
    assert err.message == "the file has only 9 bytes, fewer than the 10-byte burnpack header"
    assert err.hint is None
    assert err.exit_code == ExitCode.INPUT


def test_exactly_ten_bytes_reaches_the_cbor_decoder(tmp_path: Path) -> None:
    err = parse_error(tmp_path, b"NRUB\x01\x00\x00\x00\x00\x00")
    assert err.message.startswith("invalid CBOR metadata: ")


def test_bad_magic_message(tmp_path: Path) -> None:
    err = parse_error(tmp_path, b"BURN\x01\x00\x00\x00\x00\x00")
    assert err.message == "bad magic b'BURN', expected b'NRUB'"


def test_newer_version_message_and_hint(tmp_path: Path) -> None:
    err = parse_error(tmp_path, raw(cbor2.dumps({"tensors": {}}), version=2), UnsupportedError)
    assert err.message == "burnpack format version 2 is newer than the supported version 1"
    assert err.hint == "upgrade ckptctl, or re-save the file with an older burn"


def test_version_zero_is_read(tmp_path: Path) -> None:
    assert parse(tmp_path, raw(cbor2.dumps({"tensors": {}}), version=0)).version == 0


def test_metadata_limit_is_inclusive(tmp_path: Path) -> None:
    limit = 100 * 1024 * 1024
    over = parse_error(tmp_path, b"NRUB\x01\x00" + struct.pack("<I", limit + 1) + bytes(4))
    assert over.message == f"metadata length {limit + 1} exceeds the limit of {limit} bytes"
    at = parse_error(tmp_path, b"NRUB\x01\x00" + struct.pack("<I", limit) + bytes(4))
    assert at.message == f"metadata length {limit} runs past the end of the file (14 bytes)"
    assert at.hint == TRUNCATED_HINT


def test_metadata_may_end_exactly_at_the_end_of_the_file(tmp_path: Path) -> None:
    meta = cbor2.dumps({"tensors": {}})
    parsed = parse(tmp_path, raw(meta))
    assert parsed.metadata_length == len(meta)
    assert parsed.tensors == []
    err = parse_error(tmp_path, raw(meta)[:-1])
    assert err.message == (
        f"metadata length {len(meta)} runs past the end of the file ({9 + len(meta)} bytes)"
    )


# --- metadata map ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("top", "message"),
    [
        ([1, 2], "metadata is a CBOR list, not a map"),
        ({"metadata": {}}, "metadata has no 'tensors' map"),
        ({"tensors": [1]}, "metadata 'tensors' is not a map"),
        ({"tensors": {}, "metadata": [1]}, "metadata 'metadata' is not a map"),
        ({"tensors": {}, "metadata": {"a": 1}},
         "metadata 'metadata' entry 'a': 1 is not text to text"),
        ({"tensors": {}, "metadata": {1: "a"}},
         "metadata 'metadata' entry 1: 'a' is not text to text"),
        ({"tensors": {}, "scalars": [1]}, "metadata 'scalars' is not a map"),
        ({"tensors": {}, "scalars": {"": {"UInt": 1}}}, "scalar name is empty"),
        ({"tensors": {}, "scalars": {1: {"UInt": 1}}}, "scalar name 1 is not a text string"),
        ({"tensors": {}, "scalars": {"a\x07": {"UInt": 1}}},
         "scalar name 'a\\x07' contains control characters"),
        ({"tensors": {"": desc("F32", [2], 0, 8)}}, "tensor name is empty"),
        ({"tensors": {"w": 1}}, "tensor 'w': descriptor is not a map"),
    ],
)  # fmt: skip
def test_metadata_errors(tmp_path: Path, top: Any, message: str) -> None:
    err = parse_error(tmp_path, raw(cbor2.dumps(top), 256 + 8))
    assert err.message == message
    assert err.hint is None


def test_metadata_and_scalars_default_to_empty(tmp_path: Path) -> None:
    parsed = parse(tmp_path, raw(cbor2.dumps({"tensors": {}})))
    assert parsed.metadata == {}
    assert parsed.scalars == {}
    assert parsed.notes == []
    assert parsed.legacy is False


def test_unknown_keys_are_noted(tmp_path: Path) -> None:
    d = desc("F32", [2], 0, 8) | {"zz": 1, "aa": 2}
    parsed = parse(tmp_path, pack({"tensors": {"w": d}, "b": 1, "a": 2}, {0: f32(1, 2)}))
    assert parsed.notes == [
        "ignored unknown metadata keys 'a', 'b'",
        "tensor 'w': ignored unknown descriptor keys 'aa', 'zz'",
    ]


def test_tensor_limit_is_inclusive(tmp_path: Path) -> None:
    """100,000 tensors pass the count check (the first bad descriptor then stops the parse)."""
    body = bytearray(b"\xa1" + cbor2.dumps("tensors") + b"\xba" + struct.pack(">I", 100_000))
    for i in range(100_000):
        body += cbor2.dumps(str(i)) + b"\x00"
    err = parse_error(tmp_path, raw(bytes(body)))
    assert err.message == "tensor '0': descriptor is not a map"


# --- descriptors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("d", "message"),
    [
        ({"shape": [2], "data_offsets": [0, 8]}, "tensor 'w': descriptor has no 'dtype'"),
        ({"dtype": "F32", "data_offsets": [0, 8]}, "tensor 'w': descriptor has no 'shape'"),
        ({"dtype": "F32", "shape": [2]}, "tensor 'w': descriptor has no 'data_offsets'"),
        (desc("F32", [2, -1], 0, 8),
         "tensor 'w': shape [2, -1] is not a list of unsigned integers"),
        (desc("F32", [True], 0, 8), "tensor 'w': shape [True] is not a list of unsigned integers"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [0]},
         "tensor 'w': data_offsets [0] is not a pair of unsigned integers"),
        ({"dtype": "F32", "shape": [2], "data_offsets": "08"},
         "tensor 'w': data_offsets '08' is not a pair of unsigned integers"),
        (desc("F32", [2], -1, 8),
         "tensor 'w': data_offsets [-1, 8] is not a pair of unsigned integers"),
        (desc("F32", [2], 8, 0), "tensor 'w': data_offsets end 0 is before start 8"),
        (desc("F32", [2], 0, 8, -1), "tensor 'w': param_id -1 is not an unsigned 64-bit integer"),
        (desc("F32", [2], 0, 8) | {"param_id": "x"},
         "tensor 'w': param_id 'x' is not an unsigned 64-bit integer"),
        (desc("F32", [3], 0, 8),
         "tensor 'w' has 8 bytes in the file, but shape [3] of 'F32' needs 12"),
        (desc("F32", [1], 0, 8),
         "tensor 'w' has 8 bytes in the file, but shape [1] of 'F32' needs 4"),
        (desc("F32", [1], 256, 264),  # the size is end - start, not end or end + start
         "tensor 'w' has 8 bytes in the file, but shape [1] of 'F32' needs 4"),
        (desc(5, [2], 0, 8), "tensor 'w': dtype 5 is neither a text string nor a one-entry map"),
        (desc({"Bool": "U8", "x": 1}, [2], 0, 8),
         "tensor 'w': dtype {'Bool': 'U8', 'x': 1} is neither a text string nor a one-entry map"),
        (desc({}, [2], 0, 8), "tensor 'w': dtype {} is neither a text string nor a one-entry map"),
        (desc({"QFloat": [1]}, [2], 0, 8), "tensor 'w': QFloat scheme is not a map"),
        (desc({"QFloat": {1: "a"}}, [2], 0, 8), "tensor 'w': QFloat scheme has a non-text key 1"),
        (desc({"QFloat": {"a": b"x"}}, [2], 0, 8),
         "tensor 'w': QFloat scheme holds bytes data, which burnpack never writes"),
        (desc({"QFloat": {"a": [{"b": b"x"}]}}, [2], 0, 8),
         "tensor 'w': QFloat scheme holds bytes data, which burnpack never writes"),
    ],
)  # fmt: skip
def test_descriptor_errors(tmp_path: Path, d: Any, message: str) -> None:
    err = parse_error(tmp_path, one(d))
    assert err.message == message
    assert err.hint is None


def test_param_id_limits(tmp_path: Path) -> None:
    top = (1 << 64) - 1
    assert parse(tmp_path, one(desc("F32", [2], 0, 8, top))).tensors[0].param_id == top
    assert parse(tmp_path, one(desc("F32", [2], 0, 8, 0))).tensors[0].param_id == 0
    assert parse(tmp_path, one(desc("F32", [2], 0, 8))).tensors[0].param_id is None


def test_plain_check_nesting_limit_is_inclusive() -> None:
    """cbor2 bounds the whole item at 128 first; this check bounds the scheme on its own."""

    def nested(levels: int) -> Any:
        value: Any = 0
        for _ in range(levels):
            value = [value]
        return value

    _check_plain(nested(128), "x")
    with pytest.raises(CorruptCheckpointError) as info:
        _check_plain(nested(129), "x")
    assert info.value.message == "x is nested deeper than 128 levels"
    _check_plain({"a": nested(127)}, "x")  # a map is one level, as a list is
    with pytest.raises(CorruptCheckpointError):
        _check_plain({"a": nested(128)}, "x")


def test_qfloat_scheme_accepts_plain_values(tmp_path: Path) -> None:
    scheme = {"value": "Q8S", "n": None, "b": True, "f": 0.5, "l": [1, "x"], "m": {"k": -1}}
    parsed = parse(tmp_path, one(desc({"QFloat": scheme}, [2], 0, 8)))
    t = parsed.tensors[0]
    assert (t.dtype.value, t.itemsize, t.shape) == ("U8", None, (2,))


@pytest.mark.parametrize(
    ("dtype", "unknown"),
    [
        ("F8E4M3", "dtype 'F8E4M3'"),
        ({"Bool": "U16"}, "bool store 'U16'"),
        ({"Bool": 1}, "bool store 1"),
        ({"QInt": {}}, "dtype {'QInt': {}}"),
    ],
)
def test_unknown_dtype_message_hint_and_lenient_view(
    tmp_path: Path, dtype: Any, unknown: str
) -> None:
    data = one(desc(dtype, [2], 0, 8))
    err = parse_error(tmp_path, data, UnsupportedError)
    assert err.message == f"tensor 'w' has {unknown}, which ckptctl does not support"
    assert err.hint == (
        "supported burnpack dtypes: F64, F32, F16, BF16, I64, I32, I16, I8, "
        "U64, U32, U16, U8, Flex32, Bool, QFloat"
    )
    t = parse(tmp_path, data, lenient=True).tensors[0]
    assert (t.dtype.value, t.itemsize) == ("U8", None)


@pytest.mark.parametrize(
    ("dtype", "itemsize", "kind"),
    [
        ("Flex32", 4, "F32"),
        ("Bool", 1, "BOOL"),
        ({"Bool": "Native"}, 1, "BOOL"),
        ({"Bool": "U8"}, 1, "BOOL"),
        ({"Bool": "U32"}, 4, "BOOL"),
        ("BF16", 2, "BF16"),
        ("U64", 8, "U64"),
    ],
)
def test_dtype_itemsizes(tmp_path: Path, dtype: Any, itemsize: int, kind: str) -> None:
    t = parse(tmp_path, one(desc(dtype, [8 // itemsize], 0, 8))).tensors[0]
    assert (t.dtype.name, t.itemsize, t.raw_dtype) == (kind, itemsize, dtype)


# --- layout: alignment, legacy detection, ranges ----------------------------------------------


def test_aligned_file_is_not_legacy(tmp_path: Path) -> None:
    parsed = parse(tmp_path, one(desc("F32", [2], 0, 8)))
    assert parsed.data_start == 256
    assert parsed.legacy is False
    assert LEGACY_LAYOUT_NOTE not in parsed.notes


def test_unpadded_file_is_legacy(tmp_path: Path) -> None:
    """Aligned offsets, but the file ends exactly at unpadded + max_end: burn 0.19 (§10.2)."""
    data = pack({"tensors": {"w": desc("F32", [2], 0, 8)}}, {0: f32(1, 2)}, aligned=False)
    parsed = parse(tmp_path, data)
    assert parsed.legacy is True
    assert parsed.data_start == len(data) - 8
    assert parsed.notes == [LEGACY_LAYOUT_NOTE]


def test_misaligned_offset_is_legacy(tmp_path: Path) -> None:
    top = {"tensors": {"a": desc("U8", [1], 0, 1), "b": desc("U8", [1], 1, 2)}}
    data = pack(top, {0: b"\x01\x02"}, aligned=False, size=600)
    parsed = parse(tmp_path, data)
    assert parsed.legacy is True
    assert parsed.data_start == 10 + len(cbor2.dumps(top))
    assert [t.name for t in parsed.tensors] == ["a", "b"]


def test_empty_tensor_map_is_never_legacy(tmp_path: Path) -> None:
    parsed = parse(tmp_path, raw(cbor2.dumps({"tensors": {}})))
    assert parsed.legacy is False
    assert parsed.data_start == 256


def test_metadata_ending_on_the_boundary_is_not_legacy(tmp_path: Path) -> None:
    """10 + N == 256: no padding either way, so the layout is the current one."""
    top: dict[str, Any] = {"tensors": {"w": desc("F32", [2], 0, 8)}, "metadata": {"k": ""}}
    filler = 246 - len(cbor2.dumps(top))
    top["metadata"]["k"] = "x" * (filler - 1)  # a longer text head at 24+ bytes
    meta = cbor2.dumps(top)
    while len(meta) != 246:
        top["metadata"]["k"] = top["metadata"]["k"][: 246 - len(meta) + len(top["metadata"]["k"])]
        meta = cbor2.dumps(top)
    assert len(meta) == 246
    parsed = parse(tmp_path, raw(meta) + f32(1, 2))
    assert (parsed.data_start, parsed.legacy, parsed.notes) == (256, False, [])


def test_payload_may_end_exactly_at_the_end_of_the_file(tmp_path: Path) -> None:
    d = {"w": desc("F32", [2], 0, 8)}
    assert parse(tmp_path, pack({"tensors": d}, {0: f32(1, 2)}, size=264)).tensors[0].end == 8
    err = parse_error(tmp_path, pack({"tensors": d}, {0: f32(1)}, size=263))
    assert err.message == "tensor 'w' ends at byte 264 but the file has 263 bytes"
    assert err.hint == TRUNCATED_HINT
    parsed = parse(tmp_path, pack({"tensors": d}, {0: f32(1)}, size=263), truncated_ok=True)
    assert parsed.tensors[0].end == 8


def test_empty_payload_past_the_end_is_refused(tmp_path: Path) -> None:
    d = {"w": desc("F32", [0], 0, 0), "z": desc("F32", [0], 512, 512)}
    err = parse_error(tmp_path, pack({"tensors": d}, {}, size=512))
    assert err.message == "tensor 'z' ends at byte 768 but the file has 512 bytes"


def test_adjacent_and_empty_payloads_do_not_overlap(tmp_path: Path) -> None:
    top = {
        "tensors": {
            "b": desc("F32", [1], 4, 8),
            "a": desc("F32", [1], 0, 4),
            "e": desc("F32", [0], 2, 2),  # empty, inside 'a'
        }
    }
    parsed = parse(tmp_path, pack(top, {0: f32(1, 2)}, aligned=False))
    assert [t.name for t in parsed.tensors] == ["a", "e", "b"]


def test_overlap_message_names_both_tensors(tmp_path: Path) -> None:
    top = {"tensors": {"b": desc("F32", [2], 4, 12), "a": desc("F32", [2], 0, 8)}}
    err = parse_error(tmp_path, pack(top, {0: f32(1, 2, 3)}, aligned=False))
    assert err.message == "tensors 'a' and 'b' overlap in the data section"


def test_same_start_sorts_by_end_then_name(tmp_path: Path) -> None:
    top = {
        "tensors": {
            "z": desc("U8", [0], 0, 0),
            "y": desc("U8", [0], 0, 0),
            "a": desc("U8", [1], 0, 1),
        }
    }
    parsed = parse(tmp_path, pack(top, {0: b"\x01"}, aligned=False))
    assert [t.name for t in parsed.tensors] == ["y", "z", "a"]


def test_open_checkpoint_exit_code(tmp_path: Path) -> None:
    path = tmp_path / "t.bpk"
    path.write_bytes(one(desc("F32", [3], 0, 8)))
    with pytest.raises(CorruptCheckpointError) as info, open_checkpoint(path):
        pass  # pragma: no cover - open raises
    assert info.value.exit_code == ExitCode.INPUT
    with pytest.raises(CorruptCheckpointError):
        read_layout(path)


# --- writer ---------------------------------------------------------------------------------


def test_writer_messages_and_hints() -> None:
    with pytest.raises(SelectionError) as dup:
        plan_layout([entry("w", DType.U8, (1,), b"\x01")] * 2, {}, {})
    assert dup.value.message == "tensor name 'w' appears twice"
    assert dup.value.hint == "check the remap rules: two tensors were renamed to the same name"
    with pytest.raises(UnsupportedError) as bad_name:
        plan_layout([entry("a\nb", DType.U8, (1,), b"\x01")], {}, {})
    assert bad_name.value.message == "tensor name 'a\\nb' is empty or has control characters"
    with pytest.raises(UnsupportedError) as size:
        plan_layout([entry("w", DType.F32, (2,), b"\x00" * 4)], {}, {})
    assert size.value.message == "tensor 'w' has 4 bytes, but shape [2] of F32 needs 8"
    with pytest.raises(UnsupportedError) as pid:
        plan_layout([entry("w", DType.U8, (1,), b"\x01", param_id=-1)], {}, {})
    assert pid.value.message == "tensor 'w': param_id -1 is not a u64"
    with pytest.raises(UnsupportedError) as meta:
        plan_layout([], {"k": 1}, {})  # type: ignore[dict-item]
    assert meta.value.message == "metadata 'k': 1 is not text to text"
    with pytest.raises(UnsupportedError) as meta_key:
        plan_layout([], {1: "v"}, {})  # type: ignore[dict-item]
    assert meta_key.value.message == "metadata 1: 'v' is not text to text"


def test_writer_param_id_limits() -> None:
    top = (1 << 64) - 1
    plan = plan_layout([entry("w", DType.U8, (1,), b"\x01", param_id=top)], {}, {})
    assert cbor2.loads(plan.head[10 : 10 + plan.metadata_length])["tensors"]["w"]["param_id"] == top
    with pytest.raises(UnsupportedError):
        plan_layout([entry("w", DType.U8, (1,), b"\x01", param_id=1 << 64)], {}, {})


def test_writer_aligns_every_payload_to_256() -> None:
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


def test_writer_omits_empty_metadata_and_scalars_and_sorts_keys() -> None:
    plan = plan_layout(
        [entry("b", DType.U8, (1,), b"\x01"), entry("a", DType.U8, (0,), b"")], {}, {}
    )
    top = cbor2.loads(plan.head[10 : 10 + plan.metadata_length])
    assert list(top) == ["tensors"]
    assert list(top["tensors"]) == ["a", "b"]
    plan = plan_layout([], {"z": "1", "a": "2"}, {"y": {"UInt": 1}, "b": {"Bool": True}})
    top = cbor2.loads(plan.head[10 : 10 + plan.metadata_length])
    assert list(top) == ["tensors", "metadata", "scalars"]
    assert list(top["metadata"]) == ["a", "z"]
    assert list(top["scalars"]) == ["b", "y"]


def test_writer_refuses_unencodable_scheme() -> None:
    q = entry(
        "q",
        DType.U8,
        (2,),
        b"\x01\x02",
        source_dtype={"QFloat": {"value": b"x"}},
        extra={"quantized": "Q8S", "logical_shape": "[2]"},
    )
    with pytest.raises(UnsupportedError) as info:
        plan_layout([q], {}, {})
    assert (
        info.value.message
        == "cannot encode burnpack metadata: cannot encode bytes in burnpack metadata"
    )


# --- header view ----------------------------------------------------------------------------


def regions(tmp_path: Path, data: bytes) -> list[tuple[str, int, int, str | None, str | None]]:
    path = tmp_path / "l.bpk"
    path.write_bytes(data)
    layout = read_layout(path)
    return [(r.kind.value, r.start, r.end, r.name, r.note) for r in layout.regions]


def test_layout_gaps_and_trailing_bytes(tmp_path: Path) -> None:
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
    data = pack(top, payloads) + bytes(3)
    assert regions(tmp_path, data) == [
        ("header", 0, 10, None, "magic NRUB, version 1"),
        ("metadata", 10, meta_end, None, "CBOR map"),
        ("padding", meta_end, 256, None, "zero padding to the 256-byte aligned data section"),
        ("tensor", 256, 257, "a", None),
        ("padding", 257, 512, None, "alignment of 'b' to 256 bytes"),
        ("tensor", 512, 513, "b", None),
        ("padding", 513, 1024, None, "511 unused bytes before tensor 'c'"),
        ("tensor", 1024, 1025, "c", None),
        ("other", 1025, 1280, None, "255 unused bytes before tensor 'd'"),
        ("tensor", 1280, 1281, "d", None),
        ("padding", 1281, 1284, None, "trailing zero bytes"),
    ]


def test_layout_of_legacy_file(tmp_path: Path) -> None:
    top = {"tensors": {"a": desc("U8", [1], 0, 1), "b": desc("U8", [1], 2, 3)}}
    data = pack(top, {0: b"\x01", 2: b"\x02"}, aligned=False)
    start = 10 + len(cbor2.dumps(top))
    assert regions(tmp_path, data)[2:] == [
        ("tensor", start, start + 1, "a", None),
        ("padding", start + 1, start + 2, None, "1 unused bytes before tensor 'b'"),
        ("tensor", start + 2, start + 3, "b", None),
    ]
    path = tmp_path / "l.bpk"
    facts = read_layout(path).facts
    assert (facts["layout"], facts["alignment"], facts["data_start"]) == (
        "unaligned-0.19",
        1,
        start,
    )


def layout_of(error: TruncatedError) -> HeaderLayout:
    layout = damaged_layout(error)
    assert layout is not None
    return layout


def test_layout_of_truncated_files(tmp_path: Path) -> None:
    top = {"tensors": {"a": desc("U8", [4], 0, 4), "b": desc("U8", [4], 256, 260)}}
    path = tmp_path / "t.bpk"
    path.write_bytes(pack(top, {0: b"\x01" * 4}, size=512 + 2))
    with pytest.raises(TruncatedError) as one_short:
        read_layout(path)
    assert (
        one_short.value.message
        == "1 tensor run past the end of the file (514 bytes), 'b' among them"
    )
    assert one_short.value.hint == TRUNCATED_HINT
    last = layout_of(one_short.value).regions[-1]
    assert (last.kind.value, last.start, last.end, last.name) == ("tensor", 512, 514, "b")
    assert last.note == "truncated: 2 of 4 bytes present"
    path.write_bytes(pack(top, {}, size=256 + 2))
    with pytest.raises(TruncatedError) as two_short:
        read_layout(path)
    assert (
        two_short.value.message
        == "2 tensors run past the end of the file (258 bytes), 'b' among them"
    )
    assert [r.kind.value for r in layout_of(two_short.value).regions][-1] == "tensor"
    assert layout_of(two_short.value).regions[-1].end == 258


def test_quantized_notes(tmp_path: Path) -> None:
    top = {
        "tensors": {
            "n": desc({"QFloat": {"value": "Q8S"}}, [2], 0, 4),
            "o": desc({"QFloat": {"param": 1}}, [2, 1], 256, 260),
            "p": desc({"QFloat": {"level": "Tensor"}}, [3], 512, 516),
        }
    }
    path = tmp_path / "q.bpk"
    path.write_bytes(pack(top, {0: bytes(4), 256: bytes(4), 512: bytes(4)}))
    with open_checkpoint(path) as ckpt:
        assert ckpt.notes == [
            "tensor 'n' is quantized (Q8S, shape [2]); listed as its opaque payload bytes (U8)",
            "tensor 'o' is quantized (unknown, shape [2, 1]); listed as its opaque payload bytes"
            " (U8); scheme in the burn 0.19-0.22.0-pre.2 form",
            "tensor 'p' is quantized (unknown, shape [3]); listed as its opaque payload bytes"
            " (U8); scheme in the burn 0.19-0.22.0-pre.2 form",  # `level` alone marks it too
        ]


def test_layout_of_file_ending_in_a_gap(tmp_path: Path) -> None:
    """Regression: the file ends between two tensors; the gap used to be read past the end."""
    top = {"tensors": {"a": desc("U8", [4], 0, 4), "b": desc("U8", [4], 256, 260)}}
    path = tmp_path / "t.bpk"
    path.write_bytes(pack(top, {0: b"\x01" * 4}, size=300))
    with pytest.raises(TruncatedError) as info:
        read_layout(path)
    assert info.value.message == "1 tensor run past the end of the file (300 bytes), 'b' among them"
    last = layout_of(info.value).regions[-1]
    assert (last.kind.value, last.start, last.end) == ("padding", 260, 300)
    assert last.note == "alignment of 'b' to 256 bytes"


def test_jsonable_renders_decoded_cbor() -> None:
    value = {1: (b"\x01\xff", None, True, 1.5, "s"), "k": [{"n": -1}], "t": cbor2.CBORTag(9, 1)}
    assert _jsonable(value) == {
        "1": ["01ff", None, True, 1.5, "s"],
        "k": [{"n": -1}],
        "t": "CBORTag(9, 1)",
    }
    assert _jsonable(bytearray(b"\x02")) == "02"


def test_jsonable_depth_limit_is_inclusive() -> None:
    assert _jsonable(7, 128) == 7
    assert _jsonable(7, 129) == "..."
    assert _jsonable([7], 128) == ["..."]


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
def test_writer_keeps_qfloat_only_with_a_valid_logical_shape(
    extra: dict[str, str], dtype: Any
) -> None:
    q = entry(
        "q", DType.U8, (2,), b"\x01\x02", source_dtype={"QFloat": {"value": "Q8S"}}, extra=extra
    )
    plan = plan_layout([q], {}, {})
    d = cbor2.loads(plan.head[10 : 10 + plan.metadata_length])["tensors"]["q"]
    assert d["dtype"] == dtype
    assert d["shape"] == ([2] if dtype == "U8" else [2, 1])


# --- CBOR -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [0, 23, 24, 255, 256, 65535, 65536, (1 << 32) - 1, 1 << 32, (1 << 64) - 1,
     -1, -24, -25, -256, -257, -(1 << 64),
     None, True, False, "", "a" * 23, "a" * 24, "é", [], [1, [2]], {}, {"b": 1, "a": [None]}],
)  # fmt: skip
def test_cbor_matches_cbor2_without_floats(value: Any) -> None:
    """Spec §3.6: without floats, plain cbor2 writes burn's bytes (shortest heads, in order)."""
    assert encode_cbor(value) == cbor2.dumps(value)


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
def test_cbor_shortest_float(value: float, hex_bytes: str) -> None:
    assert encode_cbor(value).hex() == hex_bytes


def test_cbor_encoder_errors() -> None:
    with pytest.raises(ValueError, match=r"^integer 18446744073709551616 does not fit 64 bits$"):
        encode_cbor(1 << 64)
    with pytest.raises(ValueError, match=r"^integer 18446744073709551616 does not fit 64 bits$"):
        encode_cbor(-(1 << 64) - 1)
    with pytest.raises(TypeError, match=r"^cannot encode bytes in burnpack metadata$"):
        encode_cbor({"a": b"x"})
    assert encode_cbor((1, 2)) == cbor2.dumps([1, 2])


def test_cbor_decoder_errors() -> None:
    with pytest.raises(CorruptCheckpointError) as info:
        decode_cbor(b"\x81" * 200 + b"\x00")
    assert "nest" in info.value.message
    with pytest.raises(CorruptCheckpointError) as dup:
        decode_cbor(b"\xa2\x61a\x00\x61a\x01")
    assert dup.value.message.startswith("invalid CBOR metadata: ")
    assert decode_cbor(b"\x81" * 127 + b"\x00\xff") == _nested_list(127)


def _nested_list(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def test_layout_facts_and_header(tmp_path: Path) -> None:
    top = {"tensors": {"a": desc("U8", [1], 0, 1), "b": desc("U8", [2], 256, 258)}, "x": b"\x01"}
    data = pack(top, {0: b"\x01", 256: b"\x02\x03", 300: b"\x09"})
    path = tmp_path / "f.bpk"
    path.write_bytes(data)
    layout = read_layout(path)
    n = len(cbor2.dumps(top))
    assert layout.format == "burnpack"
    assert layout.file_size == 256 + 301
    assert layout.header == {
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
    assert layout.facts == {
        "layout": "aligned",
        "data_start": 256,
        "alignment": 256,
        "metadata_bytes": n,
        "tensor_count": 2,
        "tensor_bytes": 3,
        "padding_bytes": 256 - 10 - n + 255,
        "other_bytes": 43,
    }
    assert layout.regions[-1].note == "trailing bytes after the data section"


def test_layout_when_the_file_ends_inside_the_padding(tmp_path: Path) -> None:
    meta = cbor2.dumps({"tensors": {"a": desc("U8", [1], 0, 1)}})
    path = tmp_path / "p.bpk"
    path.write_bytes(raw(meta, 100))
    with pytest.raises(TruncatedError) as info:
        read_layout(path)
    kinds = [(r.kind.value, r.start, r.end) for r in layout_of(info.value).regions]
    assert kinds == [
        ("header", 0, 10),
        ("metadata", 10, 10 + len(meta)),
        ("padding", 10 + len(meta), 100),
    ]


def test_layout_gap_of_exactly_256_zero_bytes_is_unused(tmp_path: Path) -> None:
    top = {"tensors": {"a": desc("U8", [256], 0, 256), "b": desc("U8", [1], 512, 513)}}
    got = regions(tmp_path, pack(top, {0: b"\x01" * 256, 512: b"\x02"}))
    assert got[-2:] == [
        ("padding", 512, 768, None, "256 unused bytes before tensor 'b'"),
        ("tensor", 768, 769, "b", None),
    ]


def test_layout_tensor_starting_at_the_end_of_the_file(tmp_path: Path) -> None:
    top = {"tensors": {"a": desc("U8", [4], 0, 4), "b": desc("U8", [4], 256, 260)}}
    path = tmp_path / "t.bpk"
    path.write_bytes(pack(top, {0: b"\x01" * 4}, size=512))
    with pytest.raises(TruncatedError) as info:
        read_layout(path)
    last = layout_of(info.value).regions[-1]
    assert (last.kind.value, last.start, last.end) == ("padding", 260, 512)


# --- schema helpers and writer dtype mapping ------------------------------------------------


def test_describe_shortens_at_80_characters() -> None:
    assert describe("a" * 78) == repr("a" * 78)  # 80 characters with the quotes
    assert describe("a" * 79) == "'" + "a" * 76 + "..."
    assert len(describe("a" * 200)) == 80


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1, "scalar 's': 1 is not a one-entry map like {'UInt': 1}"),
        ({"Text": 1}, "scalar 's' has unknown kind 'Text'; expected one of Int, UInt, Float, Bool"),
        ({"Float": "x"}, "scalar 's': 'x' is not a valid Float value"),
        ({"Int": 1.5}, "scalar 's': 1.5 is not a valid Int value"),
        ({"Int": -(1 << 63) - 1}, "scalar 's': -9223372036854775809 is not a valid Int value"),
        ({"UInt": -1}, "scalar 's': -1 is not a valid UInt value"),
        ({"UInt": 1 << 64}, "scalar 's': 18446744073709551616 is not a valid UInt value"),
        ({"Bool": 1}, "scalar 's': 1 is not a valid Bool value"),
    ],
)
def test_scalar_errors(value: Any, message: str) -> None:
    with pytest.raises(UnsupportedError) as info:
        check_scalar("s", value, UnsupportedError)
    assert info.value.message == message


@pytest.mark.parametrize(
    "value",
    [{"Int": -(1 << 63)}, {"Int": (1 << 63) - 1}, {"UInt": 0}, {"UInt": (1 << 64) - 1},
     {"Float": 0.5}, {"Bool": False}],
)  # fmt: skip
def test_scalar_limits_are_accepted(value: Any) -> None:
    check_scalar("s", value, UnsupportedError)


def test_parse_param_id_rejects_non_base32hex() -> None:
    with pytest.raises(ValueError, match=r"^param id 'zzzzzzzzzzzzz' is not base32hex$"):
        parse_param_id("zzzzzzzzzzzzz")


def test_writer_dtype_hints() -> None:
    with pytest.raises(UnsupportedError) as floating:
        plan_layout([entry("w", DType.F8_E4M3, (1,), b"\x00")], {}, {})
    assert floating.value.message == "tensor 'w' has dtype F8_E4M3, which burnpack cannot store"
    assert floating.value.hint == Note(
        "cast it first, e.g. {fix0}", (Option("adapters", "cast:f32"),)
    )
    with pytest.raises(UnsupportedError) as cplx:
        plan_layout([entry("z.x", DType.C64, (1,), bytes(8))], {}, {})
    assert cplx.value.hint == Note(
        "write a .pt instead, or leave it out with {fix0}", (Option("exclude", r"^z\.x$"),)
    )


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
def test_writer_source_dtype_only_when_it_fits(
    dtype: DType, source: Any, extra: dict[str, str], written: Any
) -> None:
    e = entry("t", dtype, (2,), b"\x01\x00", source_dtype=source, extra=extra)
    plan = plan_layout([e], {}, {})
    assert (
        cbor2.loads(plan.head[10 : 10 + plan.metadata_length])["tensors"]["t"]["dtype"] == written
    )


def test_jsonable_cuts_cycles_at_depth_129() -> None:
    """Value-sharing tags can decode to a cycle; 129 levels are shown, then '...'."""
    cycle: list[Any] = []
    cycle.append(cycle)
    out: Any = _jsonable(cycle)
    levels = 0
    while isinstance(out, list):
        levels, out = levels + 1, out[0]
    assert (levels, out) == (129, "...")
    ring: dict[str, Any] = {}
    ring["r"] = ring
    out = _jsonable(ring)
    levels = 0
    while isinstance(out, dict):
        levels, out = levels + 1, out["r"]
    assert (levels, out) == (129, "...")
    assert _jsonable([[7]], 127) == [["..."]]
    assert _jsonable({"a": {"b": 7}}, 127) == {"a": {"b": "..."}}


def test_quantized_entry_keeps_offset_and_param_id(tmp_path: Path) -> None:
    top = {"tensors": {"q": desc({"QFloat": {"value": "Q8S"}}, [2], 0, 4, 9)}}
    path = tmp_path / "q.bpk"
    path.write_bytes(pack(top, {0: b"\x01\x02\x03\x04"}))
    with open_checkpoint(path) as ckpt:
        q = ckpt["q"]
        assert (q.offset, q.param_id, q.nbytes, q.shape) == (256, 9, 4, (4,))


def test_writer_tensor_limit_is_inclusive() -> None:
    many = [entry(str(i), DType.U8, (0,), b"") for i in range(100_000)]
    assert len(plan_layout(many, {}, {}).offsets) == 100_000
    many.append(entry("x", DType.U8, (0,), b""))
    with pytest.raises(UnsupportedError) as info:
        plan_layout(many, {}, {})
    assert info.value.message == "100001 tensors exceed burnpack's limit of 100000"


def test_writer_scalar_message_names_the_scalar() -> None:
    with pytest.raises(UnsupportedError) as info:
        plan_layout([], {}, {"lr": {"Float": 1}})
    assert info.value.message == "scalar 'lr': 1 is not a valid Float value"


def test_u32_bool_entry(tmp_path: Path) -> None:
    top = {"tensors": {"b": desc({"Bool": "U32"}, [3], 0, 12, 4)}}
    path = tmp_path / "b.bpk"
    path.write_bytes(pack(top, {0: struct.pack("<3I", 0, 2, 1)}))
    with open_checkpoint(path) as ckpt:
        b = ckpt["b"]
        assert (b.dtype, b.shape, b.nbytes, b.offset, b.param_id) == (DType.BOOL, (3,), 3, None, 4)
        assert dict(b.extra) == {"bool_store": "U32"}
        assert b.source_dtype == {"Bool": "U32"}
        assert bytes(b.data.read()) == b"\x00\x01\x01"


def test_version_is_unsigned(tmp_path: Path) -> None:
    """The header's u16 version 0x8000 is 32768 (newer), not -32768 (older)."""
    data = bytearray(one(desc("F32", [2], 0, 8)))
    data[4:6] = struct.pack("<H", 0x8000)
    err = parse_error(tmp_path, bytes(data), UnsupportedError)
    assert err.message == "burnpack format version 32768 is newer than the supported version 1"


def test_metadata_size_limit_is_inclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptctl.formats.burnpack import writer

    entries = [entry("w", DType.U8, (1,), b"\x01")]
    size = plan_layout(entries, {}, {}).metadata_length
    monkeypatch.setattr(writer, "MAX_METADATA_BYTES", size)
    assert plan_layout(entries, {}, {}).metadata_length == size  # exactly at the limit: fine
    monkeypatch.setattr(writer, "MAX_METADATA_BYTES", size - 1)
    with pytest.raises(UnsupportedError) as info:
        plan_layout(entries, {}, {})
    assert info.value.message == (
        f"metadata of {size} bytes exceeds burnpack's limit of {size - 1}"
    )

"""Edge cases of ``ckptctl.formats.safetensors`` that mutation testing found untested (issue 17).

Error texts and hints are what ``ckptctl`` prints (``ckptctl: error: PATH: MESSAGE`` then a
``hint:`` line, CLI-CONTRACT), so a changed word is a changed interface. Files are built byte by
byte with ``struct.pack``; writer output is compared with the reference layout (u64
little-endian header length, compact JSON padded with spaces to a multiple of 8, then the data in
the given order).
"""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ckptctl.formats.safetensors as stmod
from ckptctl import open_checkpoint, read_layout
from ckptctl.dtypes import DType
from ckptctl.errors import (
    CorruptCheckpointError,
    ExitCode,
    OutputError,
    TruncatedError,
    UnsupportedError,
)
from ckptctl.fix import Note, Option
from ckptctl.model import HeaderLayout, RegionKind, damaged_layout
from ckptctl.sources import ByteSource
from tests.strategies import array_entry

LAYOUT_HINT = "the header's data_offsets do not describe a valid data section; re-save the file"


def st_file(tmp_path: Path, header: dict[str, Any] | str, data: bytes = b"") -> Path:
    text = header if isinstance(header, str) else json.dumps(header)
    raw = text.encode()
    path = tmp_path / "t.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def open_error(path: Path) -> CorruptCheckpointError:
    with pytest.raises(CorruptCheckpointError) as info, open_checkpoint(path):
        pass  # pragma: no cover - open raises
    assert info.value.exit_code == ExitCode.INPUT
    return info.value


def u8(start: int, end: int, shape: list[int] | None = None) -> dict[str, Any]:
    return {"dtype": "U8", "shape": [end - start] if shape is None else shape,
            "data_offsets": [start, end]}  # fmt: skip


# --- reader: sizes and tiling ---------------------------------------------------------------


def test_sub_byte_tensor_that_does_not_fill_whole_bytes(tmp_path):
    path = st_file(tmp_path, {"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, b"xx")
    error = open_error(path)
    assert error.message == "tensor 'a' with shape [3] and dtype F4 does not fill whole bytes"


def test_span_check_uses_exact_integers_beyond_float_precision(tmp_path):
    # 2**53 + 1 bytes is not a float; a float comparison would call the 2**53-byte span right
    n = 2**53 + 1
    path = st_file(tmp_path, {"a": u8(0, n - 1, shape=[n])})
    error = open_error(path)
    assert error.message == (
        f"tensor 'a' has shape [{n}] and dtype U8, which is {n} bytes, "
        f"but its data_offsets [0, {n - 1}] span {n - 1} bytes"
    )


def test_overlap_error_text_and_hint(tmp_path):
    path = st_file(tmp_path, {"a": u8(0, 2), "b": u8(1, 3)}, b"xyz")
    error = open_error(path)
    assert error.message == (
        "tensor 'b' (data_offsets [1, 3]) overlaps tensor 'a' (data_offsets [0, 2])"
    )
    assert error.hint == LAYOUT_HINT


def test_hole_error_text_and_hint(tmp_path):
    path = st_file(tmp_path, {"a": u8(0, 1), "b": u8(2, 3)}, b"xyz")
    error = open_error(path)
    assert error.message == (
        "1 unused bytes after tensor 'a': tensor 'b' starts at data offset 2, expected 1"
    )
    assert error.hint == LAYOUT_HINT


def test_hole_at_the_start_of_the_data_section(tmp_path):
    path = st_file(tmp_path, {"a": u8(1, 2)}, b"xy")
    error = open_error(path)
    assert error.message == (
        "1 unused bytes at the start of the data section: tensor 'a' starts at data offset 1, "
        "expected 0"
    )
    assert error.hint == LAYOUT_HINT


@pytest.mark.parametrize("extra", [1, 2])
def test_trailing_bytes_after_a_header_without_tensors(tmp_path, extra):
    text = "{}      "  # 8 bytes: the data section starts (and must end) at byte 16
    path = st_file(tmp_path, text, b"\0" * extra)
    error = open_error(path)
    assert error.message == f"the file has {extra} bytes after the end of the tensor data (byte 16)"
    assert error.hint == "the file was appended to or is corrupted"


def test_header_without_tensors_ending_the_file_is_valid(tmp_path):
    path = st_file(tmp_path, "{}      ")
    with open_checkpoint(path) as ckpt:
        assert list(ckpt) == []


def test_empty_tensor_at_the_end_of_the_file(tmp_path):
    path = st_file(tmp_path, {"a": u8(0, 2), "e": u8(2, 2, shape=[0, 4])}, b"ab")
    with open_checkpoint(path) as ckpt:
        assert [(e.name, e.shape, e.nbytes) for e in ckpt.values()] == [
            ("a", (2,), 2),
            ("e", (0, 4), 0),
        ]
        assert ckpt["e"].load().shape == (0, 4)


# --- reader: type names in messages ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (None, "null"),
        (True, "a boolean"),
        (1, "an integer"),
        (1.5, "a number"),
        ("x", "a string"),
        ([], "a list"),
        ({}, "an object"),
    ],
)
def test_type_names_in_messages(tmp_path, value, kind):
    path = st_file(tmp_path, {"a": {"dtype": value, "shape": [], "data_offsets": [0, 0]}})
    if isinstance(value, str):
        with pytest.raises(UnsupportedError) as info, open_checkpoint(path):
            pass  # pragma: no cover - open raises
        assert info.value.message == "tensor 'a' has dtype 'x', which ckptctl does not know"
        path = st_file(tmp_path, {"a": value})
        assert open_error(path).message == f"tensor 'a' is described by {kind}, not an object"
        return
    error = open_error(path)
    assert error.message == f"tensor 'a' has a dtype that is {kind}, not a string"


@pytest.mark.parametrize(("value", "kind"), [(1.5, "a number"), (None, "null"), ([], "a list")])
def test_non_string_metadata_value(tmp_path, value, kind):
    path = st_file(tmp_path, {"__metadata__": {"k": value}})
    error = open_error(path)
    assert error.message == f"metadata value for 'k' is {kind}, not a string"
    assert error.hint == "safetensors metadata maps strings to strings"


# --- layout ---------------------------------------------------------------------------------


def test_layout_names_leading_and_trailing_whitespace(tmp_path):
    text = ' \n{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}   '
    path = st_file(tmp_path, text, b"x")
    layout = read_layout(path)
    start = 8 + len(text) - 3
    assert [(r.kind, r.start, r.end, r.note) for r in layout.regions] == [
        (RegionKind.HEADER, 0, 8, "u64 little-endian header length"),
        (RegionKind.PADDING, 8, 10, "whitespace before the JSON header"),
        (RegionKind.METADATA, 10, start, "JSON header"),
        (
            RegionKind.PADDING,
            start,
            start + 3,
            "spaces padding the header to a multiple of 8 bytes",
        ),
        (RegionKind.TENSOR, start + 3, start + 4, None),
    ]


# --- writer ---------------------------------------------------------------------------------


def test_plan_header_bytes_follow_the_reference_layout():
    a = array_entry("b.w", np.arange(3, dtype=np.uint8))
    b = array_entry("a.w", np.zeros((2,), dtype=np.float32))
    text = (
        b'{"__metadata__":{"k":"v"},'
        b'"b.w":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},'
        b'"a.w":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}}'
    )
    padded = text + b" " * (-len(text) % 8)
    assert stmod.plan_header([a, b], {"k": "v"}) == struct.pack("<Q", len(padded)) + padded


def test_write_streams_the_data_after_the_header_in_the_given_order():
    a = array_entry("z", np.array([1, 2, 3], dtype=np.uint8))
    b = array_entry("a", np.array([0x0102], dtype="<u2").astype(np.uint16))
    out = io.BytesIO()
    stmod.write(out, [a, b], {}, {"ignored": 1})
    assert out.getvalue() == stmod.plan_header([a, b], {}) + b"\x01\x02\x03\x02\x01"


def test_plan_header_keeps_non_ascii_as_utf8():
    entry = array_entry("poids.é", np.zeros((1,), dtype=np.uint8))
    header = stmod.plan_header([entry], {"ключ": "значение"})
    length = int.from_bytes(header[:8], "little")
    assert length % 8 == 0
    text = header[8:].decode("utf-8")
    assert "ключ" in text
    assert "poids.é" in text
    assert "\\u" not in text


def test_plan_header_of_exactly_aligned_json_has_no_padding():
    # a 4-letter name makes the compact JSON exactly 56 bytes
    entry = array_entry("abcd", np.zeros((0,), dtype=np.uint8))
    header = stmod.plan_header([entry], {})
    text = b'{"abcd":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'
    assert len(text) % 8 == 0
    assert header == struct.pack("<Q", len(text)) + text


@pytest.mark.parametrize(
    ("metadata", "shown"),
    [({"k": 1}, "'k': 1"), ({2: "v"}, "2: 'v'"), ({3: 4}, "3: 4")],
)
def test_non_string_metadata_is_refused_by_the_writer(metadata, shown):
    with pytest.raises(OutputError) as info:
        stmod.plan_header([], metadata)
    assert info.value.message == f"metadata {shown} is not a string to string pair"


def test_c128_is_refused_with_an_exclude_hint():
    entry = array_entry("x.y", np.zeros((1,), dtype=np.complex128))
    assert entry.dtype is DType.C128
    with pytest.raises(UnsupportedError) as info:
        stmod.plan_header([entry], {})
    assert info.value.message == "tensor 'x.y' has dtype C128, which safetensors cannot store"
    hint = info.value.hint
    assert hint is not None
    assert isinstance(hint, Note)
    assert hint.text == "write a .pt instead, or leave it out with {fix0}"
    assert hint.fixes == (Option("exclude", r"^x\.y$"),)


def test_unencodable_metadata_is_an_output_error():
    with pytest.raises(OutputError) as info:
        stmod.plan_header([], {"k": "\ud800"})
    assert info.value.message == "cannot encode the header as UTF-8: surrogates not allowed"


def test_header_limit_is_inclusive(monkeypatch):
    header = stmod.plan_header([], {"k": "v" * 16})  # {"__metadata__":{"k":"vvv..."}} -> 48
    length = int.from_bytes(header[:8], "little")
    assert length == 48
    monkeypatch.setattr(stmod, "MAX_HEADER_BYTES", length)
    assert stmod.plan_header([], {"k": "v" * 16}) == header
    monkeypatch.setattr(stmod, "MAX_HEADER_BYTES", length - 1)
    with pytest.raises(OutputError) as info:
        stmod.plan_header([], {"k": "v" * 16})
    assert info.value.message == (
        f"the header would be {length} bytes, over the safetensors limit of {length - 1}"
    )
    assert info.value.hint == "split the checkpoint into shards"


# --- reader: header length and JSON ---------------------------------------------------------


def raw_error(tmp_path: Path, blob: bytes) -> CorruptCheckpointError:
    """Open ``blob`` with the safetensors reader itself (sniffing would refuse some of these)."""
    path = tmp_path / "raw.safetensors"
    path.write_bytes(blob)
    with pytest.raises(CorruptCheckpointError) as info, ByteSource(path) as src:
        stmod.open_safetensors(src)
    return info.value


def raw_open(tmp_path: Path, blob: bytes) -> list[str]:
    path = tmp_path / "raw.safetensors"
    path.write_bytes(blob)
    with ByteSource(path) as src, stmod.open_safetensors(src) as ckpt:
        return list(ckpt)


def test_file_shorter_than_the_length_field(tmp_path):
    error = raw_error(tmp_path, b"\x02" + b"\0" * 6)
    assert error.message == (
        "the file has only 7 bytes; a safetensors file starts with an 8-byte header length"
    )
    assert error.hint == "the file looks truncated; re-download it"


def test_file_of_exactly_the_length_field(tmp_path):
    error = raw_error(tmp_path, b"\0" * 8)
    assert error.message == "the header length 0 is too small for a JSON object"
    assert error.hint is None


def test_header_length_of_one_is_too_small(tmp_path):
    assert raw_error(tmp_path, struct.pack("<Q", 1) + b"{").message == (
        "the header length 1 is too small for a JSON object"
    )


def test_header_length_of_two_is_enough(tmp_path):
    assert raw_open(tmp_path, struct.pack("<Q", 2) + b"{}") == []


def test_header_length_just_past_the_end_of_the_file(tmp_path):
    blob = struct.pack("<Q", 13) + b"{}" + b" " * 10  # 20 bytes: at most 12 for the header
    error = raw_error(tmp_path, blob)
    assert (
        error.message
        == "the header length 13 runs past the end of the file (20 bytes, so at most 12)"
    )
    assert error.hint == "the file looks truncated; re-download it"


def test_header_length_limit_is_inclusive(tmp_path, monkeypatch):
    monkeypatch.setattr(stmod, "MAX_HEADER_BYTES", 8)
    assert raw_open(tmp_path, struct.pack("<Q", 8) + b"{}      ") == []
    error = raw_error(tmp_path, struct.pack("<Q", 9) + b"{}       ")
    assert error.message == "the header length 9 is over the limit of 8 bytes"


def test_invalid_json_message_names_the_header(tmp_path):
    error = raw_error(tmp_path, struct.pack("<Q", 3) + b"{x}")
    assert error.message == (
        "the header is not valid JSON: Expecting property name enclosed in double quotes "
        "at line 1 column 2"
    )


@pytest.mark.parametrize(
    ("text", "kind"),
    [(b'"ab"', "string"), (b"null", "null"), (b"12", "integer"), (b"1.5", "number"),
     (b"true", "boolean"), (b"[]", "array")],
)  # fmt: skip
def test_header_that_is_not_an_object(tmp_path, text, kind):
    error = raw_error(tmp_path, struct.pack("<Q", len(text)) + text)
    assert error.message == f"the header is a JSON {kind}, not an object"


def test_tensor_count_limit_leaves_out_metadata(tmp_path, monkeypatch):
    monkeypatch.setattr(stmod, "MAX_TENSORS", 2)
    header = {"__metadata__": {"k": "v"}, "a": u8(0, 1), "b": u8(1, 2)}
    path = st_file(tmp_path, header, b"ab")
    with open_checkpoint(path) as ckpt:
        assert list(ckpt) == ["a", "b"]
        assert dict(ckpt.metadata) == {"k": "v"}
    path = st_file(tmp_path, {"a": u8(0, 1), "b": u8(1, 2), "c": u8(2, 3)}, b"abc")
    assert open_error(path).message == "the header lists 3 tensors, more than the limit of 2"


def test_shape_that_is_not_a_list(tmp_path):
    path = st_file(tmp_path, {"a": {"dtype": "U8", "shape": "1", "data_offsets": [0, 1]}}, b"x")
    assert open_error(path).message == "tensor 'a' has a shape that is a string, not a list"


def test_rank_limit_is_inclusive(tmp_path):
    path = st_file(tmp_path, {"a": u8(0, 1, shape=[1] * 64)}, b"x")
    with open_checkpoint(path) as ckpt:
        assert ckpt["a"].shape == (1,) * 64
    path = st_file(tmp_path, {"a": u8(0, 1, shape=[1] * 65)}, b"x")
    assert open_error(path).message == "tensor 'a' has 65 dimensions, more than the limit of 64"


# --- reader: unsupported dtypes -------------------------------------------------------------

SUPPORTED_HINT = (
    "supported dtypes: F64 F32 F16 BF16 F8_E4M3 F8_E5M2 F8_E8M0 I64 I32 I16 I8 U64 U32 U16 U8 "
    "BOOL C64"
)


@pytest.mark.parametrize(
    ("codes", "message"),
    [
        (["F4"], "tensor 'a' has dtype 'F4', which ckptctl does not support yet"),
        (["Q9"], "tensor 'a' has dtype 'Q9', which ckptctl does not know"),
        (["F4", "Q9"], "tensor 'a' has dtype 'F4', which ckptctl does not support yet "
         "(1 more tensors too)"),
        (["Q9", "F4", "F4"], "tensor 'a' has dtype 'Q9', which ckptctl does not know "
         "(2 more tensors too)"),
    ],
)  # fmt: skip
def test_unsupported_dtype_message_and_hint(tmp_path, codes, message):
    header = {
        name: {"dtype": code, "shape": [2], "data_offsets": [i, i + 1]}  # F4 x2 = 1 byte
        for i, (name, code) in enumerate(zip("abc", codes, strict=False))
    }
    path = st_file(tmp_path, header, b"x" * len(codes))
    with pytest.raises(UnsupportedError) as info, open_checkpoint(path):
        pass  # pragma: no cover - open raises
    assert info.value.message == message
    assert info.value.hint == SUPPORTED_HINT
    assert info.value.exit_code == ExitCode.UNSUPPORTED


# --- tensor names ---------------------------------------------------------------------------


def test_name_length_limit_is_inclusive():
    ok = array_entry("n" * stmod.MAX_NAME_BYTES, np.zeros((1,), dtype=np.uint8))
    assert stmod.plan_header([ok], {})[:8] != b""
    long = array_entry("n" * (stmod.MAX_NAME_BYTES + 1), np.zeros((1,), dtype=np.uint8))
    with pytest.raises(UnsupportedError) as info:
        stmod.plan_header([long], {})
    assert info.value.message.endswith(
        " is longer than 16384 bytes, which safetensors cannot store"
    )


def test_lone_surrogate_in_a_name_is_refused():
    assert stmod.check_tensor_name("a\ud800") == "contains the control character '\\ud800'"
    assert stmod.check_tensor_name("a\x7f") == "contains the control character '\\x7f'"
    assert stmod.check_tensor_name("a.b") is None


# --- layout of truncated files --------------------------------------------------------------


def truncated_layout(tmp_path: Path, data: bytes) -> tuple[TruncatedError, int]:
    text = '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
    text += '"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},'
    text += '"c":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}'
    path = st_file(tmp_path, text, data)
    with pytest.raises(TruncatedError) as info:
        read_layout(path)
    return info.value, 8 + len(text)


def test_layout_of_a_file_cut_inside_a_tensor(tmp_path):
    error, ds = truncated_layout(tmp_path, b"abcdef")
    assert error.message == (
        f"2 tensors run past the end of the file: 'c' ends at byte {ds + 12} but the file has "
        f"{ds + 6} bytes"
    )
    assert error.hint == "the file looks truncated; re-download it"
    assert error.layout is not None
    tensors = [(r.name, r.start, r.end, r.note) for r in layout_of(error).regions[2:]]
    assert tensors == [
        ("a", ds, ds + 4, None),
        ("b", ds + 4, ds + 6, "truncated: 2 of 4 bytes present"),
    ]


def test_layout_of_a_file_cut_between_tensors(tmp_path):
    error, ds = truncated_layout(tmp_path, b"abcdefgh")
    assert error.message == (
        f"1 tensor run past the end of the file: 'c' ends at byte {ds + 12} but the file has "
        f"{ds + 8} bytes"
    )
    assert error.layout is not None
    assert [r.name for r in layout_of(error).regions[2:]] == ["a", "b"]
    assert layout_of(error).regions[-1].end == ds + 8


# --- sniffing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "claimed"),
    [
        (b"\0" * 7 + b"\x01{}", True),  # little-endian 2**56: over the limit, but binary
        (struct.pack("<Q", 2) + b"  {", False),  # the "{" is past the declared 2 bytes
        (struct.pack("<Q", 3) + b"\x0c{}", False),  # form feed is not JSON whitespace
        (struct.pack("<Q", 3) + b"\t\r\n{}", False),
        (struct.pack("<Q", 4) + b"\t\r\n{}", True),
        (b'{ "ab": {"x": 1}}', False),  # a JSON file: printable length bytes, spaces included
        (b"\x7f" * 8 + b"{}", True),  # DEL is not printable: a binary length
        (b'{\t"a":\r\n{"x": 1}}', False),
    ],
)
def test_sniff_edges(tmp_path, head, claimed):
    path = tmp_path / "head.bin"
    path.write_bytes(head)
    with ByteSource(path) as src:
        assert stmod.sniff(head, src) is claimed


def test_sniff_never_raises(tmp_path):
    path = tmp_path / "head.bin"
    path.write_bytes(b"x" * 16)
    with ByteSource(path) as src:
        # a str head makes int.from_bytes raise TypeError, which sniff must swallow
        assert stmod.sniff("0123456789{}", src) is False  # type: ignore[arg-type]


def test_layout_counts_every_tensor_past_the_end(tmp_path):
    error, ds = truncated_layout(tmp_path, b"abcd")  # b and c both start at or past the end
    assert error.message == (
        f"2 tensors run past the end of the file: 'c' ends at byte {ds + 12} but the file has "
        f"{ds + 4} bytes"
    )
    assert error.layout is not None
    assert [r.name for r in layout_of(error).regions[2:]] == ["a"]


def layout_of(error: TruncatedError) -> HeaderLayout:
    layout = damaged_layout(error)
    assert layout is not None
    return layout

"""safetensors: the format contract, interop with the reference library, hostile files, layout."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import re
import struct
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst
from safetensors import TensorSpec, deserialize, safe_open, serialize
from safetensors.numpy import load_file, save_file

import ckptctl.formats.safetensors as stmod
from ckptctl import (
    CkptError,
    CorruptCheckpointError,
    DType,
    OutputError,
    UnknownFormatError,
    UnsupportedError,
    open_checkpoint,
    read_layout,
    save_checkpoint,
)
from ckptctl.dtypes import TORCH_NAMES
from ckptctl.errors import TruncatedError
from ckptctl.fix import Note, Option
from ckptctl.model import RegionKind, TensorEntry, damaged_layout
from ckptctl.sources import ByteSource, copy_range
from tests.conftest import HOSTILE, VALID, load_module
from tests.contract import FormatContract, exercise, sample_entries
from tests.strategies import array_entry, checkpoints, make_entry

ST_VALID = VALID / "safetensors"
ST_HOSTILE = HOSTILE / "safetensors"
SAFETENSORS_DTYPES = tuple(d for d in DType if d is not DType.C128)


def st_bytes(header: dict[str, Any] | str, data: bytes = b"") -> bytes:
    text = header if isinstance(header, str) else json.dumps(header)
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw + data


def reference_bytes(entries: list[TensorEntry], metadata: dict[str, str] | None) -> bytes:
    """What the reference Rust writer produces for ``entries`` (raw bytes, any dtype)."""
    keep = [np.frombuffer(bytes(e.data.read()), dtype=np.uint8).copy() for e in entries]
    specs = {
        e.name: TensorSpec(
            dtype=TORCH_NAMES[e.dtype], shape=list(e.shape), data_ptr=a.ctypes.data, data_len=a.size
        )
        for e, a in zip(entries, keep, strict=True)
    }
    out = bytes(serialize(specs, metadata=metadata))
    del keep
    return out


def written_bytes(entries: list[TensorEntry], metadata: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    stmod.write(buffer, entries, metadata or {}, {})
    return buffer.getvalue()


class TestSafetensorsContract(FormatContract):
    fmt = "safetensors"
    ext = ".safetensors"
    dtypes: ClassVar[tuple[DType, ...]] = SAFETENSORS_DTYPES
    reserved_names: ClassVar[frozenset[str]] = frozenset({"__metadata__"})

    def make_unknown_dtype_file(self, path: Path) -> None:
        header = {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
        header["w"] = {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [4, 7]}
        path.write_bytes(st_bytes(header, bytes(7)))


# --- reading files written by the reference library ---------------------------------------


def test_tiny_fixture_values() -> None:
    with open_checkpoint(ST_VALID / "tiny.safetensors") as ckpt:
        assert ckpt.format == "safetensors"
        assert ckpt.metadata == {"format": "np"}
        np.testing.assert_array_equal(ckpt["fc.weight"].load(), np.arange(12).reshape(3, 4))
        assert ckpt["fc.weight"].dtype is DType.F32
        assert ckpt["step"].shape == ()
        assert int(ckpt["step"].load()) == 7
        assert ckpt["mask"].load().tolist() == [True, False, False, True]


@pytest.mark.parametrize("name", ["tiny", "dtypes", "edge", "empty", "bf16", "leading_ws"])
def test_valid_fixture_matches_reference_parse(name: str) -> None:
    """Every fixture parses to what the reference's own deserializer says, byte for byte."""
    path = ST_VALID / f"{name}.safetensors"
    reference = dict(deserialize(path.read_bytes()))
    with open_checkpoint(path) as ckpt:
        assert sorted(ckpt) == sorted(reference)
        offsets = [e.offset or 0 for e in ckpt.values()]
        assert all(e.offset is not None for e in ckpt.values())
        assert offsets == sorted(offsets), "entries must be in data-offset order"
        for entry in ckpt.values():
            ref = reference[entry.name]
            assert entry.dtype.value == ref["dtype"]
            assert list(entry.shape) == ref["shape"]
            assert bytes(entry.data.read()) == bytes(ref["data"])


def test_bf16_fixture_decodes_to_known_values() -> None:
    from ckptctl.dtypes import to_float

    with open_checkpoint(ST_VALID / "bf16.safetensors") as ckpt:
        bf16 = ckpt["bf16"]
        assert bf16.dtype is DType.BF16
        np.testing.assert_array_equal(to_float(bf16.load(), DType.BF16), [1.0, -2.0, 0.5, 3.140625])
        e4m3 = to_float(ckpt["f8_e4m3"].load(), DType.F8_E4M3)
        np.testing.assert_array_equal(e4m3, [1.0, -1.0, 0.0, 448.0])
        assert ckpt.metadata == {"format": "pt"}


def test_leading_whitespace_header_is_accepted() -> None:
    with open_checkpoint(ST_VALID / "leading_ws.safetensors") as ckpt:
        assert ckpt["x"].load().tolist() == [1, 2]


INTEROP_CASES: dict[str, dict[str, np.ndarray]] = {
    "mixed": {
        "a.weight": np.linspace(-1, 1, 12, dtype="<f4").reshape(3, 4),
        "b.f16": np.array([1.5, -2.25], dtype="<f2"),
        "c.f64": np.array([[np.pi]], dtype="<f8"),
        "d.i8": np.array([-128, 127], dtype="i1"),
        "e.u16": np.array([65535], dtype="<u2"),
        "f.bool": np.array([True, False]),
        "g.c64": np.array([1 + 2j], dtype="<c8"),
    },
    "scalar_and_empty": {
        "scalar": np.array(-3, dtype="<i4"),
        "empty": np.zeros((0,), dtype="<f4"),
        "empty2": np.zeros((3, 0, 2), dtype="<i8"),
    },
    "nothing": {},
}


@pytest.mark.parametrize("case", sorted(INTEROP_CASES))
@pytest.mark.parametrize("metadata", [None, {"format": "np", "note": "ünï ✓"}])
def test_reads_reference_written_files(
    tmp_path: Path, case: str, metadata: dict[str, str] | None
) -> None:
    arrays = INTEROP_CASES[case]
    path = tmp_path / "ref.safetensors"
    save_file(arrays, str(path), metadata=metadata)
    with open_checkpoint(path) as ckpt:
        assert sorted(ckpt) == sorted(arrays)
        assert dict(ckpt.metadata) == (metadata or {})
        for name, array in arrays.items():
            entry = ckpt[name]
            assert entry.shape == array.shape
            assert entry.dtype.numpy == array.dtype
            assert bytes(entry.data.read()) == array.tobytes()


# --- files written by ckptctl, read by the reference library -------------------------------


@pytest.mark.parametrize("case", sorted(INTEROP_CASES))
def test_reference_loads_written_files(tmp_path: Path, case: str) -> None:
    arrays = INTEROP_CASES[case]
    path = tmp_path / "out.safetensors"
    metadata = {"producer": "ckptctl", "x": "ünï ✓"}
    save_checkpoint(path, [array_entry(n, a) for n, a in arrays.items()], metadata)
    loaded = load_file(str(path))
    assert sorted(loaded) == sorted(arrays)
    for name, array in arrays.items():
        assert loaded[name].dtype == array.dtype
        np.testing.assert_array_equal(loaded[name], array)
    with safe_open(str(path), framework="numpy") as handle:
        assert handle.metadata() == metadata


def test_reference_reads_bf16_and_fp8_written(tmp_path: Path) -> None:
    entries = [
        make_entry("bf", DType.BF16, (2,), struct.pack("<2H", 0x3F80, 0xC000)),
        make_entry("e4", DType.F8_E4M3, (3,), bytes([0x38, 0xB8, 0x7E])),
        make_entry("e5", DType.F8_E5M2, (1,), bytes([0x3C])),
        make_entry("e8", DType.F8_E8M0, (1,), bytes([127])),
    ]
    path = tmp_path / "raw.safetensors"
    save_checkpoint(path, entries)
    parsed = dict(deserialize(path.read_bytes()))
    for entry in entries:
        assert parsed[entry.name]["dtype"] == entry.dtype.value
        assert parsed[entry.name]["shape"] == list(entry.shape)
        assert bytes(parsed[entry.name]["data"]) == bytes(entry.data.read())


def test_reference_writer_sorts_by_dtype_then_name() -> None:
    """The reference reorders tensors; with its order (and <= 1 metadata key) bytes match."""
    entries = sample_entries()
    out = bytes(reference_bytes(entries, None))
    ref_order = [name for name, _ in deserialize(out)]
    ours = stmod.reference_order(entries)
    assert [e.name for e in ours] == ["step", "fc.bias", "fc.weight", "mask"]
    assert sorted(ref_order) == sorted(e.name for e in ours)
    assert written_bytes(ours) == out
    assert written_bytes(ours, {"format": "pt"}) == reference_bytes(entries, {"format": "pt"})
    assert written_bytes(entries) != out  # given order is kept, so here it differs


@settings(max_examples=80, deadline=None)
@given(data=checkpoints(dtypes=SAFETENSORS_DTYPES), key=hst.sampled_from(["", "format"]))
def test_byte_identical_to_reference_in_reference_order(data: list[TensorEntry], key: str) -> None:
    metadata = {key: "pt"} if key else None
    assert written_bytes(stmod.reference_order(data), metadata) == reference_bytes(data, metadata)


# --- the writer ------------------------------------------------------------------------------


def test_header_is_padded_to_eight_and_metadata_only_when_given() -> None:
    for metadata in ({}, {"k": "v"}):
        blob = written_bytes(sample_entries(), metadata)
        (length,) = struct.unpack("<Q", blob[:8])
        assert (8 + length) % 8 == 0
        header = json.loads(blob[8 : 8 + length])
        assert ("__metadata__" in header) == bool(metadata)
        assert list(header)[-4:] == [e.name for e in sample_entries()]  # given order


def test_writer_refuses_duplicates_reserved_and_c128() -> None:
    entry = sample_entries()[0]
    with pytest.raises(OutputError, match="appears twice"):
        written_bytes([entry, entry])
    # names safetensors cannot hold are the input's, not the output's problem (exit 4)
    with pytest.raises(UnsupportedError, match="is reserved, which safetensors cannot store"):
        written_bytes([entry.renamed("__metadata__")], {"k": "v"})
    with pytest.raises(UnsupportedError, match="reserved"):  # also with no metadata to store:
        written_bytes([entry.renamed("__metadata__")])  # the file would be unreadable
    with pytest.raises(UnsupportedError, match="control character"):
        written_bytes([entry.renamed("a\nb")])
    c128 = array_entry("z", np.array([1j], dtype="<c16"))
    with pytest.raises(UnsupportedError, match="'z' has dtype C128"):
        written_bytes([c128])
    bad = make_entry("x", DType.F32, (1,), bytes(4))
    bad = TensorEntry(bad.name, bad.dtype, (2,), 4, None, bad.data)
    with pytest.raises(CorruptCheckpointError, match="needs 8"):
        written_bytes([bad])


def test_writer_ignores_scalars() -> None:
    buffer = io.BytesIO()
    stmod.write(buffer, sample_entries(), {}, {"step": {"UInt": 3}})
    assert buffer.getvalue() == written_bytes(sample_entries())


def test_writer_copies_file_ranges_zero_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int]] = []
    original = copy_range

    def spy(src: ByteSource, offset: int, length: int, dst: Any) -> None:
        calls.append((offset, length))
        original(src, offset, length, dst)

    monkeypatch.setattr("ckptctl.formats._base.copy_range", spy)
    src = ST_VALID / "tiny.safetensors"
    out = tmp_path / "copy.safetensors"
    with open_checkpoint(src) as ckpt:
        save_checkpoint(out, ckpt.entries(), ckpt.metadata, sources=[src])
        assert calls == [(e.offset, e.nbytes) for e in ckpt.values()]
        # BytesIO has no file descriptor: the chunked fallback gives the same bytes
        assert written_bytes(ckpt.entries(), dict(ckpt.metadata)) == out.read_bytes()
    assert out.read_bytes() == src.read_bytes()  # same order as the reference wrote it


# --- hostile files -------------------------------------------------------------------------

#: file -> (error class when opened by content, message pattern).
HOSTILE_EXPECTED: dict[str, tuple[type[CkptError], str]] = {
    "empty.safetensors": (UnknownFormatError, r"the file is empty"),
    "seven_bytes.safetensors": (UnknownFormatError, r"only 7 bytes"),
    "header_too_large.safetensors": (
        CorruptCheckpointError,
        r"100000001 .*limit.* 100000000",
    ),
    "header_past_eof.safetensors": (
        CorruptCheckpointError,
        r"4096 .*past the end.*\(16 bytes",
    ),
    "invalid_utf8.safetensors": (CorruptCheckpointError, r"UTF-8 \(byte 10\)"),
    "invalid_json.safetensors": (CorruptCheckpointError, r"not valid JSON: .* column 23"),
    "json_array.safetensors": (CorruptCheckpointError, r"JSON array"),
    "duplicate_keys.safetensors": (CorruptCheckpointError, r"has the key 'w' twice"),
    "unknown_dtype.safetensors": (UnsupportedError, r"tensor 'w' has dtype 'Q4_K'"),
    "unsupported_f6.safetensors": (
        UnsupportedError,
        r"'w' .*'F6_E2M3'.* not support",
    ),
    "offsets_past_eof.safetensors": (
        CorruptCheckpointError,
        r"'lm_head\.weight' ends at byte 1104 .* 96 bytes",
    ),
    "overlap.safetensors": (
        CorruptCheckpointError,
        r"tensor 'b' \(data_offsets \[8, 24\]\) overlaps tensor 'a' \(data_offsets \[0, 16\]\)",
    ),
    "hole.safetensors": (
        CorruptCheckpointError,
        r"8 unused bytes .*'a'.*'b'.* 24, expected 16",
    ),
    "gap_at_start.safetensors": (CorruptCheckpointError, r"8 unused bytes at the start"),
    "trailing_bytes.safetensors": (
        CorruptCheckpointError,
        r"4 bytes after the end\b.*\(byte 79\)",
    ),
    "size_mismatch.safetensors": (
        CorruptCheckpointError,
        r"'a' has shape \[2, 2\] and dtype F32, which is 16 bytes, .* span 12 bytes",
    ),
    "end_before_start.safetensors": (
        CorruptCheckpointError,
        r"data_offsets \[16, 8\]: the end is before",
    ),
    "negative_shape.safetensors": (CorruptCheckpointError, r"-1 is not\b.* integer"),
    "float_shape.safetensors": (CorruptCheckpointError, r"4\.0 is not\b.* integer"),
    "bad_data_offsets.safetensors": (
        CorruptCheckpointError,
        r"data_offsets \[0\], not two\b",
    ),
    "metadata_not_string.safetensors": (
        CorruptCheckpointError,
        r"'epoch' is an integer",
    ),
    "control_char_name.safetensors": (CorruptCheckpointError, r"control character '\\x1b'"),
    "too_many_dims.safetensors": (CorruptCheckpointError, r"65 dimensions, more than .* 64"),
    "too_deep.safetensors": (CorruptCheckpointError, r"nested too deeply"),
    "nan_in_header.safetensors": (CorruptCheckpointError, r"NaN is not valid JSON"),
}
#: Where ckptctl is stricter than the reference on purpose (the reference accepts these).
STRICTER_THAN_REFERENCE = {
    "duplicate_keys.safetensors",
    "control_char_name.safetensors",
    "too_many_dims.safetensors",
    "unsupported_f6.safetensors",
}
HOSTILE_CASES: dict[str, bytes] = load_module(ST_HOSTILE / "make_hostile.py").CASES


def test_hostile_table_covers_every_case() -> None:
    assert set(HOSTILE_CASES) == set(HOSTILE_EXPECTED)
    committed = {p.name for p in ST_HOSTILE.glob("*.safetensors")}
    assert committed == set(HOSTILE_CASES)


@pytest.mark.parametrize("name", sorted(HOSTILE_EXPECTED))
def test_hostile_file_is_refused_with_specific_message(name: str) -> None:
    path = ST_HOSTILE / name
    assert path.read_bytes() == HOSTILE_CASES[name], "regenerate with make_hostile.py"
    error, pattern = HOSTILE_EXPECTED[name]
    with pytest.raises(error) as info:
        open_checkpoint(path)
    assert type(info.value) is error
    assert re.search(pattern, info.value.message), info.value.message
    assert info.value.path == str(path)


@pytest.mark.parametrize("name", sorted(HOSTILE_EXPECTED))
def test_hostile_file_opened_directly_raises_only_format_errors(name: str) -> None:
    """Bypassing detection, the reader itself refuses each file as corrupt or unsupported."""
    with ByteSource(ST_HOSTILE / name) as source:
        with pytest.raises((CorruptCheckpointError, UnsupportedError)) as info:
            stmod.open_safetensors(source)
        if HOSTILE_EXPECTED[name][0] is not UnknownFormatError:
            assert re.search(HOSTILE_EXPECTED[name][1], info.value.message)


@pytest.mark.parametrize("name", sorted(set(HOSTILE_EXPECTED) - STRICTER_THAN_REFERENCE))
def test_reference_also_refuses(name: str) -> None:
    with pytest.raises(Exception, match="Error while deserializing"):
        deserialize(HOSTILE_CASES[name])


def test_tensor_count_limit_is_inclusive_and_leaves_out_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stmod, "MAX_TENSORS", 2)
    path = tmp_path / "many.safetensors"
    save_file({f"t{i}": np.zeros(1, "u1") for i in range(2)}, str(path), metadata={"k": "v"})
    with open_checkpoint(path) as ckpt:
        assert (sorted(ckpt), dict(ckpt.metadata)) == (["t0", "t1"], {"k": "v"})
    save_file({f"t{i}": np.zeros(1, "u1") for i in range(3)}, str(path))
    with pytest.raises(CorruptCheckpointError, match=r"3 tensors.* limit of 2$"):
        open_checkpoint(path)


def test_name_length_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stmod, "MAX_NAME_BYTES", 8)
    path = tmp_path / "long.safetensors"
    save_file({"a" * 9: np.zeros(1, "u1")}, str(path))
    with pytest.raises(CorruptCheckpointError, match="longer than 8 bytes"):
        open_checkpoint(path)


@pytest.mark.parametrize(
    ("header", "pattern"),
    [
        ('{"__metadata__": [1]}', r"__metadata__ is a list"),
        ('{"a": 5}', r"tensor 'a' is described by an integer"),
        ('{"a": {"dtype": "F32", "shape": [1]}}', r"tensor 'a' has no 'data_offsets'"),
        ('{"a": {"dtype": 4, "shape": [], "data_offsets": [0, 4]}}', r"dtype that is an integer"),
        ('{"a": {"dtype": "F32", "shape": 4, "data_offsets": [0, 4]}}', r"not a list"),
        ('{"a": {"dtype": "U8", "shape": "1", "data_offsets": [0, 1]}}', r"a string, not a list"),
        ('{"a": {"dtype": "F32", "shape": [true], "data_offsets": [0, 4]}}', r"True is not"),
        ('{"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}', r"whole bytes"),
        ('{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, "1"]}}', r"not two non-neg"),
    ],
)
def test_more_malformed_headers(tmp_path: Path, header: str, pattern: str) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(st_bytes(header, bytes(4)))
    with pytest.raises(CorruptCheckpointError, match=pattern):
        open_checkpoint(path)


def test_null_metadata_is_accepted_like_the_reference(tmp_path: Path) -> None:
    path = tmp_path / "null.safetensors"
    blob = st_bytes('{"__metadata__": null, "a": {"dtype":"U8","shape":[1],"data_offsets":[0,1]}}')
    path.write_bytes(blob + b"\x05")
    deserialize(path.read_bytes())  # the reference accepts it too
    with open_checkpoint(path) as ckpt:
        assert dict(ckpt.metadata) == {}
        assert ckpt["a"].load().tolist() == [5]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(blob=hst.binary(max_size=300), claimed=hst.integers(0, 400))
def test_arbitrary_bytes_raise_only_ckpt_errors(tmp_path: Path, blob: bytes, claimed: int) -> None:
    path = tmp_path / "any.safetensors"
    for data in (blob, struct.pack("<Q", claimed) + b"{" + blob):
        path.write_bytes(data)
        assert stmod.sniff(data[:4096], None) in (True, False)  # type: ignore[arg-type]  # unused
        with contextlib.suppress(CkptError), ByteSource(path) as source:
            stmod.open_safetensors(source)


def test_fuzzed_headers_raise_only_ckpt_errors(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    good = (ST_VALID / "dtypes.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", good[:8])
    path = tmp_path / "fuzz.safetensors"
    for _ in range(300):
        blob = bytearray(good)
        for pos in rng.integers(8, 8 + length, size=int(rng.integers(1, 4))):
            blob[pos] = int(rng.choice(list(b'{}[]",:0123456789-e. \x00\xff')))
        path.write_bytes(bytes(blob))
        exercise(path)


def test_sniff_rejects_json_text_and_short_files() -> None:
    assert not stmod.sniff(b'{"abcd":{"x": 1}}', None)  # type: ignore[arg-type]  # unused
    assert not stmod.sniff(b"\x02\x00\x00\x00\x00\x00\x00\x00{", None)  # type: ignore[arg-type]
    assert stmod.sniff(b"\x02\x00\x00\x00\x00\x00\x00\x00{}", None)  # type: ignore[arg-type]


# --- layout --------------------------------------------------------------------------------


def assert_tiles(regions: tuple[Any, ...], size: int) -> None:
    assert regions[0].start == 0
    assert regions[-1].end == size
    for before, after in itertools.pairwise(regions):
        assert before.end == after.start
        assert before.start <= before.end


def test_layout_of_reference_file() -> None:
    path = ST_VALID / "tiny.safetensors"
    blob = path.read_bytes()
    (length,) = struct.unpack("<Q", blob[:8])
    layout = read_layout(path)
    assert layout.format == "safetensors"
    assert layout.file_size == len(blob)
    assert_tiles(layout.regions, len(blob))
    kinds = [r.kind for r in layout.regions]
    assert kinds[:2] == ["header", "metadata"]
    metadata = layout.regions[1]
    assert blob[metadata.start : metadata.end] == blob[8 : 8 + length].rstrip(b" ")
    assert layout.header == json.loads(blob[8 : 8 + length])
    tensors = [r for r in layout.regions if r.kind == "tensor"]
    ref = {
        n: i["data_offsets"] for n, i in json.loads(blob[8 : 8 + length]).items() if "dtype" in i
    }
    assert {r.name: [r.start - 8 - length, r.end - 8 - length] for r in tensors} == ref
    padding = sum(r.size for r in layout.regions if r.kind == "padding")
    assert layout.facts == {
        "header_length": length,
        "data_start": 8 + length,
        "tensor_bytes": len(blob) - 8 - length,
        "padding_bytes": padding,
    }
    assert (8 + length) % 8 == 0


def test_layout_with_leading_whitespace_and_unsupported_dtype() -> None:
    layout = read_layout(ST_VALID / "leading_ws.safetensors")
    assert [r.kind for r in layout.regions] == [
        "header",
        "padding",
        "metadata",
        "padding",
        "tensor",
    ]
    json_text = b'{"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}'
    assert [r.size for r in layout.regions] == [8, 2, len(json_text), 2, 2]
    blob = (ST_VALID / "leading_ws.safetensors").read_bytes()
    assert blob[layout.regions[2].start : layout.regions[2].end] == json_text
    assert_tiles(layout.regions, layout.file_size)
    unsupported = read_layout(ST_HOSTILE / "unsupported_f6.safetensors")
    assert unsupported.regions[-1].name == "w"
    assert unsupported.regions[-1].size == 3


def test_layout_of_corrupt_file_raises() -> None:
    with pytest.raises(CorruptCheckpointError, match="overlaps"):
        read_layout(ST_HOSTILE / "overlap.safetensors")


def test_empty_tensor_numpy_cannot_hold_is_listed_but_refused_on_load(tmp_path, run_cli):
    # torch.empty(0, 2**61) and the reference library accept this shape; numpy cannot build it
    huge = [0, 2**61]
    path = tmp_path / "huge.safetensors"
    path.write_bytes(st_bytes({"a": {"dtype": "F32", "shape": huge, "data_offsets": [0, 0]}}))
    assert deserialize(path.read_bytes()) == [("a", {"data": b"", "shape": huge, "dtype": "F32"})]
    with pytest.raises(ValueError, match="too big"):
        np.empty(huge, np.float32)
    with open_checkpoint(path) as ckpt:
        entry = ckpt["a"]
        assert (entry.shape, entry.nbytes, entry.numel) == (tuple(huge), 0, 0)
        with pytest.raises(UnsupportedError) as caught:
            entry.load()
    assert re.search(
        rf"'a' .*\[0, {2**61}\]: numpy cannot hold\b.* 2\*\*63 - 1 bytes", str(caught.value)
    )
    assert caught.value.path == str(path)
    result = run_cli("convert", path, tmp_path / "out.safetensors", "--adapter", "cast:f16")
    assert (result.code, result.stdout) == (4, "")
    assert result.stderr == f"ckptctl: error: {caught.value}\n"
    assert not (tmp_path / "out.safetensors").exists()


@pytest.mark.parametrize(("dtype", "itemsize"), [("F32", 4), ("U8", 1)])
def test_empty_tensor_at_numpy_limit_loads(tmp_path, dtype, itemsize):
    largest = (2**63 - 1) // itemsize  # numpy's limit: non-zero dimensions times itemsize
    path = tmp_path / "edge.safetensors"
    for dims, fits in (([0, largest], True), ([largest + 1, 0], False)):
        header = {"a": {"dtype": dtype, "shape": dims, "data_offsets": [0, 0]}}
        path.write_bytes(st_bytes(header))
        with open_checkpoint(path) as ckpt:
            if fits:
                assert (
                    ckpt["a"].load().shape
                    == tuple(dims)
                    == np.empty(dims, dtype=f"<{dtype[0].lower()}{itemsize}").shape
                )
            else:
                with pytest.raises(UnsupportedError, match="numpy cannot hold it"):
                    ckpt["a"].load()


# --- the reader's edges: sizes, tiling, types, limits ---------------------------------------


def st_file(tmp_path: Path, header: dict[str, Any] | str, data: bytes = b"") -> Path:
    path = tmp_path / "t.safetensors"
    path.write_bytes(st_bytes(header, data))
    return path


def u8(start: int, end: int, shape: list[int] | None = None) -> dict[str, Any]:
    return {"dtype": "U8", "shape": [end - start] if shape is None else shape,
            "data_offsets": [start, end]}  # fmt: skip


def open_error(path: Path, error: type[CkptError] = CorruptCheckpointError) -> CkptError:
    """The error ``open_checkpoint(path)`` raises, which must be exactly of class ``error``."""
    with pytest.raises(error) as info, open_checkpoint(path):
        pass  # pragma: no cover - open raises
    assert type(info.value) is error
    assert info.value.exit_code == {CorruptCheckpointError: 3, UnsupportedError: 4}[error]
    assert info.value.path == str(path)
    return info.value


def raw_error(tmp_path: Path, blob: bytes) -> CkptError:
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


def test_span_check_uses_exact_integers_beyond_float_precision(tmp_path: Path) -> None:
    # 2**53 + 1 bytes is not a float; a float comparison would call the 2**53-byte span right
    n = 2**53 + 1
    error = open_error(st_file(tmp_path, {"a": u8(0, n - 1, shape=[n])}))
    assert re.search(rf"'a' .*\[{n}\].* {n} bytes.* \[0, {n - 1}\] span {n - 1}\b", error.message)


@pytest.mark.parametrize(
    ("header", "data", "facts"),
    [
        ({"a": u8(0, 2), "b": u8(1, 3)}, b"xyz", r"'b' .*\[1, 3\].* overlaps .*'a' .*\[0, 2\]"),
        (
            {"a": u8(0, 1), "b": u8(2, 3)},
            b"xyz",
            r"^1 unused bytes after .*'a'.*'b'.* 2, expected 1",
        ),
        ({"a": u8(1, 2)}, b"xy", r"^1 unused bytes at the start\b.*'a'.* 1, expected 0"),
    ],
)
def test_tensors_must_tile_the_data_section(
    tmp_path: Path, header: dict[str, Any], data: bytes, facts: str
) -> None:
    error = open_error(st_file(tmp_path, header, data))
    assert re.search(facts, error.message), error.message
    assert "re-save" in str(error.hint)


@pytest.mark.parametrize("extra", [1, 2])
def test_trailing_bytes_after_a_header_without_tensors(tmp_path: Path, extra: int) -> None:
    text = "{}      "  # 8 bytes: the data section starts (and must end) at byte 16
    error = open_error(st_file(tmp_path, text, b"\0" * extra))
    assert re.search(rf"\b{extra} bytes after the end\b.*\(byte 16\)$", error.message)
    assert "appended" in str(error.hint)


def test_header_without_tensors_ending_the_file_is_valid(tmp_path: Path) -> None:
    with open_checkpoint(st_file(tmp_path, "{}      ")) as ckpt:
        assert list(ckpt) == []


def test_empty_tensor_at_the_end_of_the_file(tmp_path: Path) -> None:
    path = st_file(tmp_path, {"a": u8(0, 2), "e": u8(2, 2, shape=[0, 4])}, b"ab")
    with open_checkpoint(path) as ckpt:
        assert [(e.name, e.shape, e.nbytes) for e in ckpt.values()] == [
            ("a", (2,), 2),
            ("e", (0, 4), 0),
        ]
        assert ckpt["e"].load().shape == (0, 4)


@pytest.mark.parametrize(
    ("value", "kind"),
    [(None, "null"), (True, "a boolean"), (1, "an integer"), (1.5, "a number"),
     ([], "a list"), ({}, "an object")],
)  # fmt: skip
def test_a_dtype_that_is_not_a_string_is_named_by_its_json_type(
    tmp_path: Path, value: Any, kind: str
) -> None:
    error = open_error(
        st_file(tmp_path, {"a": {"dtype": value, "shape": [], "data_offsets": [0, 0]}})
    )
    assert re.search(rf"^tensor 'a' .*dtype.* is {kind}, not a string$", error.message)


@pytest.mark.parametrize(
    ("value", "kind"), [(True, "a boolean"), ("x", "a string"), ([], "a list")]
)
def test_a_tensor_that_is_not_an_object_is_named_by_its_json_type(
    tmp_path: Path, value: Any, kind: str
) -> None:
    error = open_error(st_file(tmp_path, {"a": value}))
    assert re.search(rf"^tensor 'a' .* {kind}, not an object$", error.message)


def test_an_unknown_dtype_string_is_unsupported(tmp_path: Path) -> None:
    path = st_file(tmp_path, {"a": {"dtype": "x", "shape": [], "data_offsets": [0, 0]}})
    assert re.search(r"'a' .*'x'.* not know", open_error(path, UnsupportedError).message)


@pytest.mark.parametrize(("value", "kind"), [(1.5, "a number"), (None, "null"), ([], "a list")])
def test_non_string_metadata_value(tmp_path: Path, value: Any, kind: str) -> None:
    error = open_error(st_file(tmp_path, {"__metadata__": {"k": value}}))
    assert re.search(rf"^metadata .*'k' is {kind}, not a string$", error.message)
    assert "strings to strings" in str(error.hint)


def test_rank_limit_is_inclusive(tmp_path: Path) -> None:
    path = st_file(tmp_path, {"a": u8(0, 1, shape=[1] * 64)}, b"x")
    with open_checkpoint(path) as ckpt:
        assert ckpt["a"].shape == (1,) * 64
    path = st_file(tmp_path, {"a": u8(0, 1, shape=[1] * 65)}, b"x")
    assert re.search(r"'a' has 65 dimensions.* 64$", open_error(path).message)


# --- the reader: header length and JSON ---------------------------------------------------


def test_file_shorter_than_the_length_field(tmp_path: Path) -> None:
    error = raw_error(tmp_path, b"\x02" + b"\0" * 6)
    assert re.search(r"only 7 bytes.* 8-byte header length", error.message)
    assert "truncated" in str(error.hint)


@pytest.mark.parametrize("blob", [b"\0" * 8, struct.pack("<Q", 1) + b"{"])
def test_a_header_length_under_two_is_too_small(tmp_path: Path, blob: bytes) -> None:
    error = raw_error(tmp_path, blob)
    assert re.search(rf"header length {blob[0]} is too small\b", error.message)
    assert error.hint is None


def test_header_length_of_two_is_enough(tmp_path: Path) -> None:
    assert raw_open(tmp_path, struct.pack("<Q", 2) + b"{}") == []


def test_header_length_just_past_the_end_of_the_file(tmp_path: Path) -> None:
    blob = struct.pack("<Q", 13) + b"{}" + b" " * 10  # 20 bytes: at most 12 for the header
    error = raw_error(tmp_path, blob)
    assert re.search(r"header length 13 .*past the end.* \(20 bytes.* 12\)$", error.message)
    assert "truncated" in str(error.hint)


def test_header_length_limit_is_inclusive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stmod, "MAX_HEADER_BYTES", 8)
    assert raw_open(tmp_path, struct.pack("<Q", 8) + b"{}      ") == []
    error = raw_error(tmp_path, struct.pack("<Q", 9) + b"{}       ")
    assert re.search(r"header length 9 .*limit of 8 bytes$", error.message)


def test_invalid_json_names_the_header_and_the_place(tmp_path: Path) -> None:
    error = raw_error(tmp_path, struct.pack("<Q", 3) + b"{x}")
    assert re.search(r"\bheader .*JSON: .* line 1 column 2$", error.message)


@pytest.mark.parametrize(
    ("text", "kind"),
    [(b'"ab"', "string"), (b"null", "null"), (b"12", "integer"), (b"1.5", "number"),
     (b"true", "boolean"), (b"[]", "array")],
)  # fmt: skip
def test_header_that_is_not_an_object(tmp_path: Path, text: bytes, kind: str) -> None:
    error = raw_error(tmp_path, struct.pack("<Q", len(text)) + text)
    assert re.search(rf"\bJSON {kind}, not an object$", error.message)


@pytest.mark.parametrize(
    ("codes", "word", "more"),
    [(["F4"], "support", 0), (["Q9"], "know", 0), (["F4", "Q9"], "support", 1),
     (["Q9", "F4", "F4"], "know", 2)],
)  # fmt: skip
def test_unsupported_dtypes_name_the_first_and_count_the_rest(
    tmp_path: Path, codes: list[str], word: str, more: int
) -> None:
    header = {
        name: {"dtype": code, "shape": [2], "data_offsets": [i, i + 1]}  # F4 x2 = 1 byte
        for i, (name, code) in enumerate(zip("abc", codes, strict=False))
    }
    error = open_error(st_file(tmp_path, header, b"x" * len(codes)), UnsupportedError)
    assert re.search(rf"^tensor 'a' .*'{codes[0]}'.* {word}\b", error.message)
    assert (f"({more} more tensors too)" in error.message) == (more > 0)
    assert error.hint is not None
    listed = str(error.hint).partition(": ")[2].split()
    assert sorted(listed) == sorted(d.value for d in SAFETENSORS_DTYPES)


# --- the reader: layout ---------------------------------------------------------------------


def test_layout_names_leading_and_trailing_whitespace(tmp_path: Path) -> None:
    text = ' \n{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}   '
    layout = read_layout(st_file(tmp_path, text, b"x"))
    start = 8 + len(text) - 3
    assert [(r.kind, r.start, r.end) for r in layout.regions] == [
        (RegionKind.HEADER, 0, 8),
        (RegionKind.PADDING, 8, 10),
        (RegionKind.METADATA, 10, start),
        (RegionKind.PADDING, start, start + 3),
        (RegionKind.TENSOR, start + 3, start + 4),
    ]
    notes = [r.note or "" for r in layout.regions]
    assert "whitespace" in notes[1]
    assert "padding" in notes[3]


def truncated_layout(tmp_path: Path, data: bytes) -> tuple[TruncatedError, int]:
    text = '{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
    text += '"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},'
    text += '"c":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}'
    path = st_file(tmp_path, text, data)
    with pytest.raises(TruncatedError) as info:
        read_layout(path)
    return info.value, 8 + len(text)


@pytest.mark.parametrize(
    ("kept", "past", "tensors"),
    [
        (6, 2, [("a", 0, 4, None), ("b", 4, 6, "truncated: 2 of 4 bytes present")]),
        (8, 1, [("a", 0, 4, None), ("b", 4, 8, None)]),
        (4, 2, [("a", 0, 4, None)]),  # b and c both start at or past the end
    ],
)
def test_the_layout_of_a_cut_file_counts_the_tensors_past_the_end(
    tmp_path: Path, kept: int, past: int, tensors: list[tuple[str, int, int, str | None]]
) -> None:
    error, ds = truncated_layout(tmp_path, b"x" * kept)
    assert re.search(
        rf"^{past} tensors? .*'c' ends at byte {ds + 12} .* {ds + kept} bytes$", error.message
    )
    assert "truncated" in str(error.hint)
    layout = damaged_layout(error)
    assert layout is not None
    found = [(r.name, r.start - ds, r.end - ds, r.note) for r in layout.regions[2:]]
    assert found == tensors
    assert layout.regions[-1].end == ds + kept


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
def test_sniff_edges(tmp_path: Path, head: bytes, claimed: bool) -> None:
    path = tmp_path / "head.bin"
    path.write_bytes(head)
    with ByteSource(path) as src:
        assert stmod.sniff(head, src) is claimed


def test_sniff_never_raises(tmp_path: Path) -> None:
    path = tmp_path / "head.bin"
    path.write_bytes(b"x" * 16)
    with ByteSource(path) as src:
        # a str head makes int.from_bytes raise TypeError, which sniff must swallow
        assert stmod.sniff("0123456789{}", src) is False  # type: ignore[arg-type]


# --- the writer's edges -----------------------------------------------------------------------


def test_plan_header_bytes_follow_the_reference_layout() -> None:
    a = array_entry("b.w", np.arange(3, dtype=np.uint8))
    b = array_entry("a.w", np.zeros((2,), dtype=np.float32))
    text = (
        b'{"__metadata__":{"k":"v"},'
        b'"b.w":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},'
        b'"a.w":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}}'
    )
    padded = text + b" " * (-len(text) % 8)
    assert stmod.plan_header([a, b], {"k": "v"}) == struct.pack("<Q", len(padded)) + padded


def test_write_streams_the_data_after_the_header_in_the_given_order() -> None:
    a = array_entry("z", np.array([1, 2, 3], dtype=np.uint8))
    b = array_entry("a", np.array([0x0102], dtype="<u2").astype(np.uint16))
    out = io.BytesIO()
    stmod.write(out, [a, b], {}, {"ignored": 1})
    assert out.getvalue() == stmod.plan_header([a, b], {}) + b"\x01\x02\x03\x02\x01"


def test_plan_header_keeps_non_ascii_as_utf8() -> None:
    entry = array_entry("poids.é", np.zeros((1,), dtype=np.uint8))
    header = stmod.plan_header([entry], {"ключ": "значение"})
    length = int.from_bytes(header[:8], "little")
    assert length % 8 == 0
    text = header[8:].decode("utf-8")
    assert "ключ" in text
    assert "poids.é" in text
    assert "\\u" not in text


def test_plan_header_of_exactly_aligned_json_has_no_padding() -> None:
    # a 4-letter name makes the compact JSON exactly 56 bytes
    entry = array_entry("abcd", np.zeros((0,), dtype=np.uint8))
    header = stmod.plan_header([entry], {})
    text = b'{"abcd":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'
    assert len(text) % 8 == 0
    assert header == struct.pack("<Q", len(text)) + text


@pytest.mark.parametrize(
    ("metadata", "shown"),
    [({"k": 1}, "'k': 1"), ({2: "v"}, "2: 'v'"), ({3: 4}, "3: 4"), ({"k": "\ud800"}, "UTF-8")],
)
def test_metadata_the_writer_cannot_store_is_an_output_error(
    metadata: dict[Any, Any], shown: str
) -> None:
    with pytest.raises(OutputError, match=re.escape(shown)) as info:
        stmod.plan_header([], metadata)
    assert info.value.exit_code == 5


def test_c128_is_refused_with_an_exclude_option() -> None:
    entry = array_entry("x.y", np.zeros((1,), dtype=np.complex128))
    assert entry.dtype is DType.C128
    with pytest.raises(UnsupportedError, match=r"'x\.y' .*C128") as info:
        stmod.plan_header([entry], {})
    hint = info.value.hint
    assert isinstance(hint, Note)
    assert hint.fixes == (Option("exclude", r"^x\.y$"),)
    assert "{fix0}" in hint.text


def test_header_limit_is_inclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    header = stmod.plan_header([], {"k": "v" * 16})  # {"__metadata__":{"k":"vvv..."}} -> 48
    length = int.from_bytes(header[:8], "little")
    assert length == 48
    monkeypatch.setattr(stmod, "MAX_HEADER_BYTES", length)
    assert stmod.plan_header([], {"k": "v" * 16}) == header
    monkeypatch.setattr(stmod, "MAX_HEADER_BYTES", length - 1)
    with pytest.raises(OutputError, match=r"\b48 bytes.* limit of 47$") as info:
        stmod.plan_header([], {"k": "v" * 16})
    assert "shard" in str(info.value.hint)


def test_name_length_limit_is_inclusive() -> None:
    ok = array_entry("n" * stmod.MAX_NAME_BYTES, np.zeros((1,), dtype=np.uint8))
    assert int.from_bytes(stmod.plan_header([ok], {})[:8], "little") > stmod.MAX_NAME_BYTES
    long = array_entry("n" * (stmod.MAX_NAME_BYTES + 1), np.zeros((1,), dtype=np.uint8))
    with pytest.raises(UnsupportedError, match=r"longer than 16384 bytes"):
        stmod.plan_header([long], {})


@pytest.mark.parametrize(("name", "shown"), [("a\ud800", r"'\\ud800'"), ("a\x7f", r"'\\x7f'")])
def test_a_lone_surrogate_or_del_in_a_name_is_refused(name: str, shown: str) -> None:
    entry = array_entry(name, np.zeros((1,), dtype=np.uint8))
    with pytest.raises(UnsupportedError, match=rf"control character {shown}"):
        written_bytes([entry])

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
from ckptctl.model import TensorEntry
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
        r"header length 100000001 is over the limit of 100000000",
    ),
    "header_past_eof.safetensors": (
        CorruptCheckpointError,
        r"header length 4096 runs past the end of the file \(16 bytes",
    ),
    "invalid_utf8.safetensors": (CorruptCheckpointError, r"not valid UTF-8 \(byte 10\)"),
    "invalid_json.safetensors": (CorruptCheckpointError, r"not valid JSON: .* column 23"),
    "json_array.safetensors": (CorruptCheckpointError, r"header is a JSON array, not an object"),
    "duplicate_keys.safetensors": (CorruptCheckpointError, r"has the key 'w' twice"),
    "unknown_dtype.safetensors": (UnsupportedError, r"tensor 'w' has dtype 'Q4_K'"),
    "unsupported_f6.safetensors": (
        UnsupportedError,
        r"tensor 'w' has dtype 'F6_E2M3', which ckptctl does not support",
    ),
    "offsets_past_eof.safetensors": (
        CorruptCheckpointError,
        r"tensor 'lm_head.weight' ends at byte 1104 but the file has 96 bytes",
    ),
    "overlap.safetensors": (
        CorruptCheckpointError,
        r"tensor 'b' \(data_offsets \[8, 24\]\) overlaps tensor 'a' \(data_offsets \[0, 16\]\)",
    ),
    "hole.safetensors": (
        CorruptCheckpointError,
        r"8 unused bytes after tensor 'a': tensor 'b' starts at data offset 24, expected 16",
    ),
    "gap_at_start.safetensors": (CorruptCheckpointError, r"8 unused bytes at the start"),
    "trailing_bytes.safetensors": (
        CorruptCheckpointError,
        r"4 bytes after the end of the tensor data \(byte 79\)",
    ),
    "size_mismatch.safetensors": (
        CorruptCheckpointError,
        r"'a' has shape \[2, 2\] and dtype F32, which is 16 bytes, .* span 12 bytes",
    ),
    "end_before_start.safetensors": (
        CorruptCheckpointError,
        r"data_offsets \[16, 8\]: the end is before",
    ),
    "negative_shape.safetensors": (CorruptCheckpointError, r"-1 is not a non-negative integer"),
    "float_shape.safetensors": (CorruptCheckpointError, r"4\.0 is not a non-negative integer"),
    "bad_data_offsets.safetensors": (
        CorruptCheckpointError,
        r"data_offsets \[0\], not two non-negative integers",
    ),
    "metadata_not_string.safetensors": (
        CorruptCheckpointError,
        r"metadata value for 'epoch' is an integer, not a string",
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


def test_tensor_count_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stmod, "MAX_TENSORS", 2)
    path = tmp_path / "many.safetensors"
    save_file({f"t{i}": np.zeros(1, "u1") for i in range(3)}, str(path))
    with pytest.raises(CorruptCheckpointError, match="3 tensors, more than the limit of 2"):
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
    assert str(caught.value) == (
        f"{path}: tensor 'a' has shape [0, {2**61}]: numpy cannot hold it, even empty (its "
        "non-zero dimensions span more than 2**63 - 1 bytes)"
    )
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

"""GGUF reading (issue 45) against gguf-py's ``GGUFReader`` as ground truth.

Every committed fixture (fixtures/valid/gguf/, written by gguf-py's ``GGUFWriter`` or copied
from llama.cpp) is read by both: tensor names, GGML types, shapes (``ne`` reversed), offsets,
sizes, values of plain tensors and every key/value must agree. The CLI tests check what the
contract promises: ``ls --json`` dtypes and metadata strings, ``header --json`` regions that tile
the file, ``hash`` of stored blocks, ``convert`` refusing quantized tensors (exit 4).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from ckptctl import CorruptCheckpointError, open_checkpoint, read_layout
from ckptctl.formats._base import SNIFF_BYTES
from ckptctl.model import listed_dtype, listed_shape
from tests.conftest import VALID
from tests.contract import assert_header_only, assert_past_sniff, exercise, list_spied

GGUF = VALID / "gguf"
Q8_0 = gguf.GGMLQuantizationType.Q8_0
FILES = sorted(GGUF.glob("*.gguf"))
#: One file per split model (the others are its parts).
SINGLE = [p for p in FILES if "-of-" not in p.name]
#: GGML type -> the dtype ckptctl lists for plain types.
PLAIN = {"F32": "F32", "F16": "F16", "BF16": "BF16", "F64": "F64",
         "I8": "I8", "I16": "I16", "I32": "I32", "I64": "I64"}  # fmt: skip


def _reader(path: Path) -> gguf.GGUFReader:
    return gguf.GGUFReader(path)


def _floats_as_f32(value: Any) -> Any:
    if isinstance(value, list):
        return [_floats_as_f32(v) for v in value]
    return np.float32(value) if isinstance(value, float) else value


def _flat(value: Any) -> list[Any]:
    if isinstance(value, list):
        return [x for v in value for x in _flat(v)]
    return [value]


def _expected_text(field: Any) -> str | None:
    """What ``metadata`` must say for a scalar field (None for arrays)."""
    kind = field.types[0]
    value = field.contents()
    if kind == gguf.GGUFValueType.ARRAY:
        return None
    if kind == gguf.GGUFValueType.BOOL:
        return "true" if value else "false"
    if kind == gguf.GGUFValueType.STRING:
        return str(value)
    if kind == gguf.GGUFValueType.FLOAT32:
        return str(np.float32(value))
    return str(value)


@pytest.mark.parametrize("path", SINGLE, ids=[p.name for p in SINGLE])
def test_tensors_agree_with_gguf_py(path: Path) -> None:
    reader = _reader(path)
    with open_checkpoint(path) as ckpt:
        assert ckpt.format == "gguf"
        assert list(ckpt) == [t.name for t in reader.tensors] or ckpt.sharding is not None
        for t in reader.tensors:
            entry = ckpt[t.name]
            kind = t.tensor_type.name
            assert listed_dtype(entry) == PLAIN.get(kind, kind), t.name
            assert listed_shape(entry) == tuple(reversed(t.shape.tolist())), t.name
            assert entry.nbytes == t.n_bytes, t.name
            if reader.byte_order == "I":  # little-endian files: the bytes are where gguf-py says
                assert entry.offset == t.data_offset, t.name
            if kind in PLAIN and kind != "BF16":
                np.testing.assert_array_equal(entry.load(), t.data.reshape(entry.shape))
            else:
                raw = np.asarray(t.data).view(np.uint8).reshape(-1)
                if kind == "BF16" and reader.byte_order == "S":
                    raw = raw.view(">u2").astype("<u2").view(np.uint8)
                assert bytes(entry.data.read()) == raw.tobytes(), t.name


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_key_values_agree_with_gguf_py(path: Path) -> None:
    reader = _reader(path)
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    with open_checkpoint(path) as ckpt:
        first = _reader(GGUF / ckpt.sharding.shards[0]) if ckpt.sharding else reader
        expected_keys = [k for k in first.fields if not k.startswith("GGUF.")]
        assert list(ckpt.metadata) == expected_keys
        if ckpt.sharding is not None:
            return  # the parts' own keys: checked on the first part
        for key, field in fields.items():
            ours = ckpt.metadata[key]
            scalar = _expected_text(field)
            if scalar is not None:
                assert ours == scalar, key
                continue
            whole = json.loads(ours)
            assert _floats_as_f32(_flat(whole)) == _floats_as_f32(field.contents()), key


def test_every_key_value_type_is_in_the_fixtures() -> None:
    reader = _reader(GGUF / "key_values.gguf")
    types = {t for f in reader.fields.values() for t in f.types}
    assert types == set(gguf.GGUFValueType)


def test_nested_arrays_keep_their_nesting() -> None:
    with open_checkpoint(GGUF / "key_values.gguf") as ckpt:
        assert json.loads(ckpt.metadata["kv.nested"]) == [[1, 2], [3]]
        assert json.loads(ckpt.metadata["kv.nested_str"]) == [["x", "y"], ["z"]]
        assert ckpt.metadata["kv.f32"] == "0.1"
        assert ckpt.metadata["kv.string"] == 'héllo "wörld"\n\ttab'


def test_big_endian_reads_as_the_little_endian_file() -> None:
    with (
        open_checkpoint(GGUF / "big_endian.gguf") as big,
        open_checkpoint(GGUF / "plain_types.gguf") as little,
    ):
        assert list(big) == list(little)
        for name in little:
            assert bytes(big[name].data.read()) == bytes(little[name].data.read()), name
        assert any("big-endian" in n for n in big.notes)
        assert {k: v for k, v in big.metadata.items() if k.startswith("kv.")} == {
            k: v for k, v in _metadata(GGUF / "key_values.gguf").items() if k.startswith("kv.")
        }


def _metadata(path: Path) -> dict[str, str]:
    with open_checkpoint(path) as ckpt:
        return dict(ckpt.metadata)


def test_version_2_reads_like_version_3() -> None:
    with open_checkpoint(GGUF / "v2.gguf") as ckpt:
        np.testing.assert_array_equal(ckpt["w"].load(), np.arange(6, dtype="<f4").reshape(2, 3))
    assert read_layout(GGUF / "v2.gguf").header["version"] == 2


@pytest.mark.parametrize("part", [1, 2, 3])
def test_split_model_opens_as_one_checkpoint_from_any_part(part: int) -> None:
    with open_checkpoint(GGUF / f"split-0000{part}-of-00003.gguf") as ckpt:
        assert list(ckpt) == [f"t{i}" for i in range(5)]
        assert ckpt.sharding is not None
        assert len(ckpt.sharding.shards) == 3
        assert ckpt.metadata["general.name"] == "split test"
        for i in range(5):
            assert ckpt[f"t{i}"].load().shape == (2, 4)


def test_split_model_with_a_missing_part_is_refused(tmp_path: Path) -> None:
    for n in (1, 3):
        name = f"split-0000{n}-of-00003.gguf"
        (tmp_path / name).write_bytes((GGUF / name).read_bytes())
    with pytest.raises(CorruptCheckpointError, match="00002-of-00003") as info:
        open_checkpoint(tmp_path / "split-00001-of-00003.gguf")
    assert "split-00001-of-00003.gguf" in str(info.value)


def test_split_part_renamed_alone_opens_alone(tmp_path: Path) -> None:
    lone = tmp_path / "renamed.gguf"
    lone.write_bytes((GGUF / "split-00002-of-00003.gguf").read_bytes())
    with open_checkpoint(lone) as ckpt:
        assert list(ckpt) == ["t2", "t3"]
        assert ckpt.sharding is None


def test_listing_reads_no_tensor_bytes(tmp_path: Path) -> None:
    path = tmp_path / "listing.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_string("padding", "x" * SNIFF_BYTES)  # tensors past what format detection reads
    writer.add_array("tokens", [f"t{i}" for i in range(500)])
    writer.add_tensor("big", np.arange(4096, dtype=np.float32))
    writer.add_tensor("q", gguf.quants.quantize(np.ones((2, 64), np.float32), Q8_0), raw_dtype=Q8_0)
    writer.add_tensor("small", np.arange(3, dtype=np.int16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    listing = list_spied(path)
    assert [name for name, _, _ in listing.entries] == ["big", "q", "small"]
    assert_past_sniff(listing)
    assert_header_only(listing)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_header_regions_tile_the_file(path: Path) -> None:
    layout = read_layout(path)
    assert layout.file_size == path.stat().st_size
    position = 0
    for region in layout.regions:
        assert region.start == position, region
        position = region.end
    assert position == layout.file_size
    reader = _reader(path)
    tensors = {r.name: (r.start, r.end) for r in layout.regions if r.kind == "tensor"}
    assert tensors == {t.name: (t.data_offset, t.data_offset + t.n_bytes) for t in reader.tensors}
    kvs = [r.note for r in layout.regions if r.kind == "metadata"]
    assert kvs == [k for k in reader.fields if not k.startswith("GGUF.")]


def test_vocab_only_file_has_no_invented_padding() -> None:
    path = GGUF / "ggml-vocab-bert-bge.gguf"
    layout = read_layout(path)
    assert layout.regions[-1].end == path.stat().st_size
    assert layout.facts["data_start"] >= path.stat().st_size - 32
    assert all(r.kind != "padding" or r.end <= path.stat().st_size for r in layout.regions)
    assert layout.facts["tensor_count"] == 0


def test_alignment_is_honoured() -> None:
    layout = read_layout(GGUF / "alignment_64.gguf")
    assert layout.facts["alignment"] == 64
    starts = [r.start for r in layout.regions if r.kind == "tensor"]
    assert starts
    assert all(s % 64 == 0 for s in starts)


def test_mutated_files_raise_only_ckpt_errors(tmp_path: Path) -> None:
    rng = np.random.default_rng(45)
    good = (GGUF / "tiny_llama.gguf").read_bytes()
    bad = tmp_path / "mutant.gguf"
    for _ in range(150):
        blob = bytearray(good)
        for pos in rng.integers(0, 3000, size=int(rng.integers(1, 6))):
            blob[pos] = int(rng.integers(0, 256))
        bad.write_bytes(bytes(blob))
        exercise(bad)


# --- the CLI ---------------------------------------------------------------------------------


def test_ls_json_lists_ggml_types_logical_shapes_and_stored_bytes(run_cli) -> None:
    result = run_cli("ls", GGUF / "quantized.gguf", "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["format"] == "gguf"
    rows = {t["name"]: t for t in report["tensors"]}
    reader = {t.name: t for t in _reader(GGUF / "quantized.gguf").tensors}
    for name, row in rows.items():
        assert row["dtype"] == PLAIN.get(reader[name].tensor_type.name,
                                         reader[name].tensor_type.name)  # fmt: skip
        assert row["shape"] == list(reversed(reader[name].shape.tolist()))
        assert row["nbytes"] == reader[name].n_bytes
    assert {"Q4_K", "Q6_K", "IQ4_XS", "MXFP4", "Q8_0", "Q4_0"} <= {
        r["dtype"] for r in rows.values()
    }


def test_ls_summarises_long_arrays_unless_asked(run_cli) -> None:
    path = GGUF / "ggml-vocab-phi-3.gguf"
    short = json.loads(run_cli("ls", path, "--json").stdout)["metadata"]
    assert short["tokenizer.ggml.tokens"].startswith("32064 items (STRING): [")
    assert short["tokenizer.ggml.bos_token_id"] == "1"
    full = json.loads(run_cli("ls", path, "--json", "--full-metadata").stdout)["metadata"]
    tokens = json.loads(full["tokenizer.ggml.tokens"])
    assert tokens == _reader(path).fields["tokenizer.ggml.tokens"].contents()
    text = run_cli("ls", path).stdout
    assert "32064 items (STRING)" in text


def test_hash_of_a_quantized_tensor_digests_its_blocks(run_cli) -> None:
    result = run_cli("hash", GGUF / "quantized.gguf")
    assert result.code == 0, result.stderr
    rows = {json.loads(line)["name"]: json.loads(line) for line in result.stdout.splitlines()}
    tensor = next(t for t in _reader(GGUF / "quantized.gguf").tensors if t.name == "q4_k")
    blocks = np.asarray(tensor.data).tobytes()
    assert rows["q4_k"]["digest"] == "sha256:" + hashlib.sha256(blocks).hexdigest()
    assert rows["q4_k"]["dtype"] == "Q4_K"


def test_convert_of_a_quantized_tensor_names_dequantize(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "out.safetensors"
    result = run_cli("convert", GGUF / "tiny_llama.gguf", out)
    assert result.code == 4
    assert "--dequantize" in result.stderr
    assert "blk.0.attn_q.weight" in result.stderr
    assert not out.exists()


def test_convert_of_plain_tensors_is_byte_exact(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "out.safetensors"
    result = run_cli("convert", GGUF / "big_endian.gguf", out)
    assert result.code == 0, result.stderr
    raw = out.read_bytes()  # safetensors' layout read by hand (numpy has no bfloat16)
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    reader = _reader(GGUF / "plain_types.gguf")
    for t in reader.tensors:
        start, end = header[t.name]["data_offsets"]
        assert raw[8 + length + start : 8 + length + end] == t.data.tobytes(), t.name
        assert header[t.name]["dtype"] == PLAIN[t.tensor_type.name]


def test_commands_work_on_gguf(run_cli, tmp_path: Path) -> None:
    path = GGUF / "tiny_llama.gguf"
    tree = run_cli("ls", path, "--tree")
    assert tree.code == 0
    assert "Q8_0" in tree.stdout
    stats = run_cli("ls", path, "--stats", "--json")
    assert stats.code == 0, stats.stderr
    rows = {t["name"]: t for t in json.loads(stats.stdout)["tensors"]}
    assert rows["output_norm.weight"]["stats"]["count"] == 32
    show = run_cli("show", path, "output.weight")
    assert show.code == 0
    assert "F16 [31, 32]" in show.stdout
    same = run_cli("diff", path, path)
    assert same.code == 0, same.stdout
    other = run_cli("diff", path, GGUF / "unsafe_template.gguf")
    assert other.code == 0  # the same seeded weights; only the template differs


def test_header_json_accounts_for_every_byte(run_cli) -> None:
    path = GGUF / "tiny_llama.gguf"
    result = run_cli("header", path, "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    regions = report["regions"]
    assert regions[0]["start"] == 0
    assert regions[-1]["end"] == path.stat().st_size
    assert all(a["end"] == b["start"] for a, b in itertools.pairwise(regions))
    assert struct.unpack("<I", path.read_bytes()[4:8])[0] == 3


def _safetensors(path: Path) -> dict[str, tuple[str, list[int], bytes]]:
    """Every tensor of a safetensors file, read by hand: dtype code, shape, bytes."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    data = raw[8 + length :]
    return {
        name: (info["dtype"], info["shape"], data[slice(*info["data_offsets"])])
        for name, info in header.items()
        if name != "__metadata__"
    }


def _one_tensor_gguf(path: Path, blocks, ggml_type, endian=None) -> None:
    """A llama GGUF written by gguf-py holding one tensor ``w`` of raw ``blocks``."""
    writer = gguf.GGUFWriter(path, "llama", endianess=endian or gguf.GGUFEndian.LITTLE)
    writer.add_tensor("w", blocks, raw_dtype=ggml_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_dequantize_gives_gguf_pys_values(run_cli, tmp_path: Path, dtype: str) -> None:
    """Every quantized tensor decoded as gguf.quants.dequantize decodes it; f16/bf16 are those
    float32 values rounded to nearest even (bf16 by its bits: numpy has no bfloat16)."""
    out = tmp_path / "out.safetensors"
    flag = "--dequantize" if dtype == "f32" else f"--dequantize={dtype}"
    result = run_cli("convert", GGUF / "quantized.gguf", out, flag)
    assert result.code == 0, result.stderr
    written = _safetensors(out)
    decoded = 0
    for tensor in _reader(GGUF / "quantized.gguf").tensors:
        code, shape, raw = written[tensor.name]
        with np.errstate(all="ignore"):  # the fixture's random blocks hold NaN/Inf scales
            values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        assert shape == list(values.shape), tensor.name
        if dtype == "f32" or tensor.tensor_type.name == "F32":  # plain tensors stay as stored
            expected = values.tobytes()
        elif dtype == "f16":
            with np.errstate(all="ignore"):
                expected = values.astype("<f2").tobytes()
        else:
            bits = values.view("<u4").astype(np.uint64)
            rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            quiet = (bits >> 16) | 0x0040  # torch's NaN: sign and top payload kept, quiet
            expected = np.where(np.isnan(values), quiet, rounded).astype("<u2").tobytes()
        quantized = tensor.tensor_type.name != "F32"
        want = {"f32": "F32", "f16": "F16", "bf16": "BF16"}[dtype] if quantized else "F32"
        assert (code, raw) == (want, expected), tensor.name
        decoded += quantized
    assert decoded == 8


def test_dequantize_refuses_a_type_nothing_decodes(run_cli, tmp_path: Path) -> None:
    """Q8_1 blocks have no decoder in gguf-py either: refused by name even with --dequantize."""
    path = tmp_path / "q8_1.gguf"
    raw = np.zeros((2, 40), dtype=np.uint8)  # two rows of one Q8_1 block: 64 values
    _one_tensor_gguf(path, raw, gguf.GGMLQuantizationType.Q8_1)
    out = tmp_path / "out.safetensors"
    result = run_cli("convert", path, out, "--dequantize")
    assert result.code == 4
    assert "Q8_1" in result.stderr
    assert "'w'" in result.stderr
    assert not out.exists()


def test_big_endian_blocks_are_never_decoded_as_little_endian(run_cli, tmp_path: Path) -> None:
    """A big-endian file's Q8_0 scales are byte-swapped: decoding them as little-endian would
    give wrong values silently, so --dequantize refuses (exit 4) and ls --stats has none."""
    path = tmp_path / "be_q8.gguf"
    blocks = np.zeros((2, 34), dtype=np.uint8)
    blocks[:, 0:2] = [0x3C, 0x00]  # f16 1.0 stored big-endian
    _one_tensor_gguf(path, blocks, gguf.GGMLQuantizationType.Q8_0, gguf.GGUFEndian.BIG)
    out = tmp_path / "out.safetensors"
    result = run_cli("convert", path, out, "--dequantize")
    assert result.code == 4
    assert "big-endian" in result.stderr
    assert "'w'" in result.stderr
    assert not out.exists()
    stats = run_cli("ls", path, "--stats", "--json")
    assert stats.code == 0, stats.stderr
    assert json.loads(stats.stdout)["tensors"][0]["stats"] is None

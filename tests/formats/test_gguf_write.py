"""Writing GGUF (issue 45) against gguf-py as ground truth, in both directions.

Files ckptctl writes are read by ``gguf.GGUFReader`` (every key/value with its exact type and
bytes, every tensor's type, shape and bytes) and compared byte for byte with what
``gguf.GGUFWriter`` writes from the same key/values and tensors in the same order; a GGUF
source written back is the same file. ``--quantize`` gives ``gguf.quants.quantize``'s blocks.
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import gguf
import numpy as np
import pytest

from ckptctl import (
    CorruptCheckpointError,
    DType,
    InputError,
    UnsupportedError,
    open_checkpoint,
    save_checkpoint,
)
from ckptctl.model import TensorEntry
from tests.conftest import VALID
from tests.contract import FormatContract, read_everything, sample_entries
from tests.strategies import array_entry, make_entry

GGUF = VALID / "gguf"
FILES = sorted(GGUF.glob("*.gguf"))
#: Files gguf-py (or llama.cpp) wrote little-endian, version 3, in one part: written back as
#: they are, byte for byte.
SAME_FILE = [
    p for p in FILES if p.name not in ("big_endian.gguf", "v2.gguf") and "-of-" not in p.name
]
T = gguf.GGMLQuantizationType
V = gguf.GGUFValueType


# --- helpers: gguf-py's view of a file, and gguf-py writing one --------------------------------


def _little(array: np.ndarray) -> bytes:
    return np.asarray(array).astype(np.asarray(array).dtype.newbyteorder("<")).tobytes()


def _fields(path: Path) -> dict[str, tuple[list[Any], bytes]]:
    """Every key/value gguf-py reads: its types and its bytes, little-endian (key included)."""
    reader = gguf.GGUFReader(path)
    return {
        key: (list(field.types), b"".join(_little(p) for p in field.parts))
        for key, field in reader.fields.items()
        if not key.startswith("GGUF.")
    }


def _tensors(path: Path) -> dict[str, tuple[str, list[int], bytes]]:
    """Every tensor gguf-py reads: GGML type, shape (gguf-py's order) and bytes, little-endian."""
    reader = gguf.GGUFReader(path)
    out = {}
    for t in reader.tensors:
        data = np.asarray(t.data)
        if t.tensor_type == T.BF16 and reader.byte_order == "S":
            raw = data.view(np.uint8).reshape(-1).view(">u2").astype("<u2").tobytes()
        else:
            raw = _little(data)
        out[t.name] = (t.tensor_type.name, t.shape.tolist(), raw)
    return out


def _gguf_py(
    path: Path,
    tensors: list[tuple[str, np.ndarray, Any]],
    kvs: list[tuple[str, Any, Any, Any]] = (),  # type: ignore[assignment]  # a tuple default
    *,
    arch: str = "llama",
    alignment: int | None = None,
) -> bytes:
    """What gguf-py's GGUFWriter writes: arch first, the key/values, the tensors in order."""
    writer = gguf.GGUFWriter(path, arch)
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    for key, value, vtype, sub_type in kvs:
        writer.add_key_value(key, value, vtype, sub_type=sub_type)
    for name, array, raw_dtype in tensors:
        writer.add_tensor(name, array, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def _source(tmp_path: Path, entries: list[TensorEntry]) -> Path:
    path = tmp_path / "src.safetensors"
    save_checkpoint(path, entries, force=True)
    return path


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    return (values.astype("<f4").view("<u4") >> 16).astype("<u2")


# --- GGUF -> GGUF ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SAME_FILE, ids=[p.name for p in SAME_FILE])
def test_gguf_written_back_is_the_same_file(run_cli, tmp_path: Path, path: Path) -> None:
    out = tmp_path / "out.gguf"
    result = run_cli("convert", path, out)
    assert result.code == 0, result.stderr
    assert out.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_gguf_to_gguf_keeps_every_key_value_and_block(run_cli, tmp_path: Path, path: Path) -> None:
    """Big-endian, version 2 and split sources too: the same key/values (type and bytes) and
    tensors, little-endian, version 3, in one file; a merged split model gets split.count 0."""
    out = tmp_path / "out.gguf"
    result = run_cli("convert", path, out)
    assert result.code == 0, result.stderr
    with open_checkpoint(path) as ckpt:
        parts = [GGUF / s for s in ckpt.sharding.shards] if ckpt.sharding else [path]
    expected = _fields(parts[0])
    got = _fields(out)
    if len(parts) > 1:
        assert got.pop("split.count")[0] == [V.UINT16]
        assert gguf.GGUFReader(out).fields["split.count"].contents() == 0
        expected.pop("split.count")
    assert got == expected
    tensors: dict[str, tuple[str, list[int], bytes]] = {}
    for part in parts:
        tensors.update(_tensors(part))
    assert _tensors(out) == tensors
    assert gguf.GGUFReader(out).fields["GGUF.version"].contents() == 3


def test_gguf_edit_keeps_the_tensors_and_changes_only_the_keys(run_cli, tmp_path: Path) -> None:
    source = GGUF / "tiny_llama.gguf"
    out = tmp_path / "out.gguf"
    result = run_cli(
        "convert", source, out,
        "--set-meta", "general.name=str:my-llama",
        "--set-meta", "llama.context_length=u32:4096",
        "--set-meta", "custom.tags=arr[str]:[\"a\",\"b\"]",
        "--drop-meta", "tokenizer.chat_template",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    before, after = _fields(source), _fields(out)
    assert "tokenizer.chat_template" in before
    assert "tokenizer.chat_template" not in after
    reader = gguf.GGUFReader(out)
    assert reader.fields["general.name"].contents() == "my-llama"
    assert reader.fields["llama.context_length"].types == [V.UINT32]
    assert reader.fields["llama.context_length"].contents() == 4096
    assert reader.fields["custom.tags"].types == [V.ARRAY, V.STRING]
    assert reader.fields["custom.tags"].contents() == ["a", "b"]
    changed = {"general.name", "llama.context_length", "custom.tags", "tokenizer.chat_template"}
    assert {k: v for k, v in after.items() if k not in changed} == {
        k: v for k, v in before.items() if k not in changed
    }
    new = [k for k in ("general.name", "llama.context_length", "custom.tags") if k not in before]
    # replaced keys stay where they were; new ones go at the end, in the order given
    assert list(after) == [k for k in before if k != "tokenizer.chat_template"] + new
    assert _tensors(out) == _tensors(source)


# --- any format -> GGUF: gguf-py's bytes ------------------------------------------------------

#: --set-meta texts of every type, and what GGUFWriter.add_key_value is given for each.
SET_META = [
    ("k.u8=u8:255", 255, V.UINT8, None),
    ("k.i8=i8:-128", -128, V.INT8, None),
    ("k.u16=u16:65535", 65535, V.UINT16, None),
    ("k.i16=i16:-32768", -32768, V.INT16, None),
    ("k.u32=u32:4294967295", 4294967295, V.UINT32, None),
    ("k.i32=i32:-7", -7, V.INT32, None),
    ("k.u64=u64:18446744073709551615", 18446744073709551615, V.UINT64, None),
    ("k.i64=i64:-9223372036854775808", -9223372036854775808, V.INT64, None),
    ("k.f32=f32:0.1", 0.1, V.FLOAT32, None),
    ("k.f64=f64:-2.5e300", -2.5e300, V.FLOAT64, None),
    ("k.bool=bool:true", True, V.BOOL, None),
    ("k.str=str:a=b:c ünï", "a=b:c ünï", V.STRING, None),
    ('k.strs=arr[str]:["x", "", "ÿ"]', ["x", "", "ÿ"], V.ARRAY, V.STRING),
    ("k.i32s=arr[i32]:[1, -2, 3]", [1, -2, 3], V.ARRAY, V.INT32),
    ("k.f32s=arr[f32]:[0.5, 1e-3]", [0.5, 1e-3], V.ARRAY, V.FLOAT32),
    ("k.bools=arr[bool]:[true, false]", [True, False], V.ARRAY, V.BOOL),
    ("k.u8s=arr[u8]:[0, 255]", [0, 255], V.ARRAY, V.UINT8),
    ("k.nested=arr[arr[i32]]:[[1, 2], [3]]", [[1, 2], [3]], V.ARRAY, V.ARRAY),
]


def _plain_entries() -> list[tuple[TensorEntry, np.ndarray, Any]]:
    """One tensor of each plain GGUF type (0-d and 4-d included), with what gguf-py is given."""
    rng = np.random.default_rng(45)
    arrays = {
        "f32.weight": rng.standard_normal((3, 5)).astype("<f4"),
        "f16": rng.standard_normal((2, 3, 4)).astype("<f2"),
        "f64": rng.standard_normal(7).astype("<f8"),
        "i8": rng.integers(-128, 127, (2, 2, 2, 3)).astype("i1"),
        "i16": rng.integers(-9, 9, 5).astype("<i2"),
        "i32": rng.integers(-9, 9, (1, 6)).astype("<i4"),
        "i64.scalar": np.array(-3, dtype="<i8"),
    }
    out: list[tuple[TensorEntry, np.ndarray, Any]] = [
        (array_entry(n, a), a, None) for n, a in arrays.items()
    ]
    bits = _bf16_bits(rng.standard_normal((4, 2)))
    out.append((make_entry("bf16", DType.BF16, (4, 2), bits.tobytes()), bits, T.BF16))
    return out


def test_any_format_to_gguf_is_gguf_pys_file(run_cli, tmp_path: Path) -> None:
    plain = _plain_entries()
    src = _source(tmp_path, [e for e, _, _ in plain])
    out = tmp_path / "out.gguf"
    flags = [x for text, _, _, _ in SET_META for x in ("--set-meta", text)]
    result = run_cli("convert", src, out, "--arch", "llama", "--alignment", "64", *flags)
    assert result.code == 0, result.stderr
    with open_checkpoint(src) as ckpt:
        order = list(ckpt)  # the source's order, which the output keeps
    arrays = {e.name: (a, raw) for e, a, raw in plain}
    kvs = [(text.partition("=")[0], value, vtype, sub) for text, value, vtype, sub in SET_META]
    tensors = [(name, *arrays[name]) for name in order]
    expected = _gguf_py(tmp_path / "gguf_py.gguf", tensors, kvs, alignment=64)
    assert out.read_bytes() == expected
    reader = gguf.GGUFReader(out)
    for text, value, vtype, sub in SET_META:
        field = reader.fields[text.partition("=")[0]]
        assert field.types[0] == vtype, text
        if sub is not None:
            assert field.types[1] == sub, text
        if V.FLOAT32 in (vtype, sub):
            assert field.contents() == pytest.approx(value, rel=1e-7), text
        else:  # gguf-py gives a nested array's items flat
            flat = [x for v in value for x in v] if sub is V.ARRAY else value  # type: ignore[attr-defined]  # the nested row's value is a list of lists
            assert field.contents() == flat, text


def test_library_write_is_gguf_pys_file(tmp_path: Path) -> None:
    """save_checkpoint: metadata strings are STRING key/values after the typed ones."""
    from ckptctl.formats.gguf import TypedValue, ValueType

    plain = _plain_entries()
    out = tmp_path / "out.gguf"
    arch = {"general.architecture": TypedValue(ValueType.STRING, "gpt2")}
    save_checkpoint(out, [e for e, _, _ in plain], {"note": "ünï ✓"}, scalars=arch)
    tensors = [(e.name, a, raw) for e, a, raw in plain]
    kvs = [("note", "ünï ✓", V.STRING, None)]
    assert out.read_bytes() == _gguf_py(tmp_path / "ref.gguf", tensors, kvs, arch="gpt2")


def test_gguf_output_is_laid_out_as_llama_cpp_requires(run_cli, tmp_path: Path) -> None:
    src = _source(tmp_path, [e for e, _, _ in _plain_entries()])
    out = tmp_path / "out.gguf"
    assert run_cli("convert", src, out, "--arch", "llama").code == 0
    result = run_cli("verify", out, "--json")
    assert result.code == 0, result.stdout
    findings = {f["check"]: f for f in json.loads(result.stdout)["files"][0]["findings"]}
    assert findings["gguf-layout"]["status"] == "ok"
    reader = gguf.GGUFReader(out)
    offset = reader.tensors[0].data_offset
    for t in reader.tensors:  # each at the running padded size
        assert t.data_offset == offset, t.name
        offset += -(-t.n_bytes // 32) * 32
    assert offset == out.stat().st_size


# --- --quantize --------------------------------------------------------------------------------


def _quantize_source() -> list[tuple[str, np.ndarray, DType]]:
    rng = np.random.default_rng(7)
    return [
        ("blk.0.attn_q.weight", rng.standard_normal((4, 64)), DType.F32),
        ("blk.0.attn_norm.weight", rng.standard_normal(64), DType.F32),
        ("token_embd.weight", rng.standard_normal((3, 96)), DType.BF16),
        ("blk.0.ffn_up.weight", rng.standard_normal((2, 32)), DType.F16),
        ("blk.0.ffn_down.weight", rng.standard_normal((2, 40)), DType.F32),  # not whole blocks
        ("blk.0.ffn_gate_inp.weight", rng.standard_normal((2, 64)), DType.F32),  # kept F32
        ("blk.0.attn_q.bias", rng.standard_normal((2, 32)), DType.F64),  # not a weight
        ("positions", np.arange(6), DType.I32),  # integers stay
    ]


def _entry(name: str, values: np.ndarray, dtype: DType) -> TensorEntry:
    if dtype is DType.BF16:
        return make_entry(name, dtype, values.shape, _bf16_bits(values).tobytes())
    return array_entry(name, values.astype(dtype.numpy))


def _as_loaded(values: np.ndarray, dtype: DType) -> np.ndarray:
    """The float32 values convert_hf_to_gguf.py quantizes (torch casts to float32 first)."""
    if dtype is DType.BF16:
        return (_bf16_bits(values).astype("<u4") << 16).view("<f4")
    return values.astype(dtype.numpy).astype(np.float32)


#: What convert_hf_to_gguf.py gives each tensor of ``_quantize_source`` (Q: the chosen type).
CHOICES: dict[str, Any] = {
    "blk.0.attn_q.weight": "Q",
    "blk.0.attn_norm.weight": T.F32,
    "token_embd.weight": "Q",
    "blk.0.ffn_up.weight": "Q",
    "blk.0.ffn_down.weight": T.F16,
    "blk.0.ffn_gate_inp.weight": T.F32,
    "blk.0.attn_q.bias": T.F32,
    "positions": None,
}


@pytest.mark.parametrize(("flag", "qtype", "ftype"), [("q8_0", T.Q8_0, 7), ("q4_0", T.Q4_0, 2)])
def test_quantize_gives_gguf_pys_blocks(run_cli, tmp_path: Path, flag, qtype, ftype) -> None:
    source = _quantize_source()
    src = _source(tmp_path, [_entry(n, v, d) for n, v, d in source])
    out = tmp_path / "out.gguf"
    result = run_cli("convert", src, out, "--arch", "llama", "--quantize", flag)
    assert result.code == 0, result.stderr
    with open_checkpoint(src) as ckpt:
        order = list(ckpt)
    by_name = {n: (v, d) for n, v, d in source}
    tensors: list[tuple[str, np.ndarray, Any]] = []
    for name in order:
        values, dtype = by_name[name]
        choice = CHOICES[name]
        if choice is None:
            tensors.append((name, values.astype(dtype.numpy), None))
            continue
        target = qtype if choice == "Q" else choice
        data = gguf.quants.quantize(_as_loaded(values, dtype), target)
        tensors.append((name, data, target))
    kvs = [("general.file_type", ftype, V.UINT32, None),
           ("general.quantization_version", 2, V.UINT32, None)]  # fmt: skip
    assert out.read_bytes() == _gguf_py(tmp_path / "gguf_py.gguf", tensors, kvs)
    assert f"--quantize {flag}" in result.stderr


def test_quantize_keeps_gguf_blocks_and_sets_the_file_type_in_place(run_cli, tmp_path) -> None:
    source = GGUF / "tiny_llama.gguf"
    out = tmp_path / "out.gguf"
    result = run_cli("convert", source, out, "--quantize", "q4_0")
    assert result.code == 0, result.stderr
    before, after = _tensors(source), _tensors(out)
    for name, (kind, shape, raw) in before.items():
        if kind == "Q8_0":  # blocks are never quantized again
            assert after[name] == (kind, shape, raw)
    assert any(kind == "Q4_0" for kind, _, _ in after.values())
    reader = gguf.GGUFReader(out)
    assert reader.fields["general.file_type"].contents() == 2
    assert list(_fields(out)) == list(_fields(source)) + [
        k for k in ("general.file_type", "general.quantization_version") if k not in _fields(source)
    ]


def test_failed_write_leaves_the_destination_as_it_was(run_cli, tmp_path: Path) -> None:
    """A NaN cannot be quantized: found while streaming, after the header; DST is untouched."""
    values = np.ones((2, 32), dtype="<f4")
    values[1, 5] = np.nan
    src = _source(tmp_path, [array_entry("a.weight", np.ones((2, 32), "<f4")),
                             array_entry("b.weight", values)])  # fmt: skip
    out = tmp_path / "out.gguf"
    out.write_bytes(b"precious")
    result = run_cli("convert", src, out, "--arch", "llama", "--quantize", "q8_0", "--force")
    assert result.code == 4
    assert "'b.weight'" in result.stderr
    assert out.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.gguf", "src.safetensors"]


# --- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "no-equals",
        "k=u8",  # no TYPE:VALUE
        "=u8:1",
        "k=u9:1",
        "k=u8:256",
        "k=i8:-129",
        "k=f32:1e39",
        "k=bool:yes",
        "k=i32:1.5",
        "k=arr[i32]:1,2",
        "k=arr[i32]:[1.5]",
        "k=arr[str]:[1]",
        "k=arr[arr[i32]]:[1]",
        "k=arr[]:[]",
        "general.alignment=u32:48",
        "general.alignment=str:64",
        "general.architecture=u8:1",
    ],
)
def test_bad_set_meta_exits_2(run_cli, tmp_path: Path, text: str) -> None:
    out = tmp_path / "out.gguf"
    result = run_cli("convert", GGUF / "tiny_llama.gguf", out, "--set-meta", text)
    assert result.code == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_drop_meta_of_an_unknown_key_suggests_one(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "out.gguf"
    result = run_cli("convert", GGUF / "tiny_llama.gguf", out, "--drop-meta", "general.nam")
    assert result.code == 2
    assert "'general.name'" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    "flags",
    [
        ("--alignment", "48"),
        ("--arch", "llama", "--set-meta", "general.architecture=str:qwen2"),
        ("--set-meta", "general.name=str:a", "--drop-meta", "general.name"),
    ],
)
def test_contradictory_options_exit_2(run_cli, tmp_path: Path, flags) -> None:
    result = run_cli("convert", GGUF / "tiny_llama.gguf", tmp_path / "out.gguf", *flags)
    assert result.code == 2, result.stderr


def test_another_format_needs_an_architecture(run_cli, tmp_path: Path) -> None:
    src = _source(tmp_path, [array_entry("w", np.ones(3, "<f4"))])
    result = run_cli("convert", src, tmp_path / "out.gguf")
    assert result.code == 2
    assert "--arch" in result.stderr
    assert "general.architecture" in result.stderr


@pytest.mark.parametrize("flag", [("--arch", "llama"), ("--quantize", "q8_0"),
                                  ("--set-meta", "a=u8:1"), ("--drop-meta", "a")])  # fmt: skip
def test_gguf_options_need_a_gguf_output(run_cli, tmp_path: Path, flag) -> None:
    out = tmp_path / "out.safetensors"
    result = run_cli("convert", GGUF / "plain_types.gguf", out, *flag)
    assert result.code == 2
    assert flag[0] in result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("entry", "fact"),
    [
        (make_entry("counts", DType.U16, (2,), bytes(4)), "U16"),
        (make_entry("flags", DType.BOOL, (2,), bytes(2)), "BOOL"),
        (make_entry("n" * 64, DType.F32, (1,), bytes(4)), "GGML_MAX_NAME"),
        (make_entry("five", DType.I8, (1, 1, 1, 1, 2), bytes(2)), "GGML_MAX_DIMS"),
    ],
)
def test_what_gguf_cannot_hold_exits_4(run_cli, tmp_path: Path, entry, fact) -> None:
    src = _source(tmp_path, [array_entry("ok", np.ones(2, "<f4")), entry])
    out = tmp_path / "out.gguf"
    result = run_cli("convert", src, out, "--arch", "llama")
    assert result.code == 4, result.stderr
    assert fact in result.stderr
    assert entry.name[:20] in result.stderr
    assert not out.exists()


def test_blocks_of_a_big_endian_file_are_refused(run_cli, tmp_path: Path) -> None:
    """Their fields (f16 scales) are big-endian; nothing here swaps them."""
    path = tmp_path / "big.gguf"
    writer = gguf.GGUFWriter(path, "llama", endianess=gguf.GGUFEndian.BIG)
    writer.add_tensor("norm", np.ones(4, dtype=np.float32))  # swapped by the writer
    blocks = gguf.quants.quantize(np.ones((1, 32), np.float32), T.Q8_0)
    writer.add_tensor("q.weight", blocks, raw_dtype=T.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    out = tmp_path / "out.gguf"
    result = run_cli("convert", path, out)
    assert result.code == 4
    assert "'q.weight'" in result.stderr
    assert "big-endian" in result.stderr
    assert run_cli("convert", path, out, "--exclude", r"^q\.").code == 0
    assert _tensors(out) == {k: v for k, v in _tensors(path).items() if k == "norm"}


def test_writing_over_the_source_is_refused(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes((GGUF / "tiny_llama.gguf").read_bytes())
    result = run_cli("convert", path, path, "--set-meta", "general.name=str:x", "--force")
    assert result.code == 5
    assert path.read_bytes() == (GGUF / "tiny_llama.gguf").read_bytes()


# --- the format contract -----------------------------------------------------------------------


class TestGGUFContract(FormatContract):
    """ckptctl writes the files (metadata strings as STRING key/values)."""

    fmt = "gguf"
    ext = ".gguf"
    dtypes: ClassVar[tuple[DType, ...]] = (
        DType.F32, DType.F16, DType.BF16, DType.F64, DType.I8, DType.I16, DType.I32, DType.I64,
    )  # fmt: skip

    def write(self, tmp_path: Path, entries: list[TensorEntry], **kw: object) -> Path:
        """GGUF has no BOOL: the contract's listing and truncation files get the mask's bytes
        as I8 (the round trips pass only the dtypes GGUF holds)."""
        as_i8 = [replace(e, dtype=DType.I8) if e.dtype is DType.BOOL else e for e in entries]
        return super().write(tmp_path, as_i8, **kw)

    def holds(self, entry: TensorEntry) -> bool:
        """GGUF names are shorter than 64 bytes (GGML_MAX_NAME)."""
        return super().holds(entry) and len(entry.name.encode()) < 64

    def make_unknown_dtype_file(self, path: Path) -> None:
        """A Q4_0 tensor whose type id is patched to 4 (the removed Q4_2)."""
        writer = gguf.GGUFWriter(path, "llama")
        writer.add_tensor("w", np.zeros(18, np.uint8), raw_dtype=T.Q4_0)  # one block
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        raw = bytearray(path.read_bytes())
        info = raw.index(b"\x01\x00\x00\x00\x00\x00\x00\x00w") + 9  # name length, name
        at = info + 4 + 8  # n_dims 1, ne[0]
        assert raw[at : at + 4] == struct.pack("<I", T.Q4_0)
        raw[at : at + 4] = struct.pack("<I", 4)
        path.write_bytes(bytes(raw))

    def test_unknown_dtype_is_unsupported(self, tmp_path: Path) -> None:
        """A GGML type ckptctl does not know is listed by its id; reading it is refused."""
        path = tmp_path / "unknown.gguf"
        self.make_unknown_dtype_file(path)
        with open_checkpoint(path) as ckpt:
            assert ckpt["w"].extra["stored_type"] == "type 4"
        with pytest.raises(UnsupportedError, match="type 4"):
            read_everything(path)

    def test_truncated_is_corrupt(self, tmp_path: Path) -> None:
        """As the contract's, but cut inside the last tensor rather than in the zeros that pad
        it (gguf-py and ckptctl read a file without them)."""
        full = self.write(tmp_path, sample_entries()).read_bytes()
        with open_checkpoint(tmp_path / "out.gguf") as ckpt:
            last = ckpt.entries()[-1]
            assert last.offset is not None
            end = last.offset + last.nbytes
        cut = tmp_path / "cut.gguf"
        for size in sorted({0, 1, 7, 8, 9, 16, len(full) // 2, end - 1}):
            cut.write_bytes(full[:size])
            with pytest.raises(InputError) as info:
                read_everything(cut)
            assert str(cut) in str(info.value)
            if size > 16:
                assert isinstance(info.value, CorruptCheckpointError), (size, info.value)

"""The ONNX reader against onnx's own: ``onnx.load`` + ``numpy_helper.to_array`` are ground truth
for every data type and layout (raw_data, typed fields, external data in one file, one per
tensor, several), Constant values in subgraphs, and a real exporter's model (silero-vad).
Hostile protobufs are built here from the wire format's few rules."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, external_data_helper, helper, numpy_helper

from ckptctl import CkptError, CorruptCheckpointError, open_checkpoint
from ckptctl.errors import TruncatedError, UnsafePickleError
from ckptctl.formats import read_layout
from ckptctl.model import HeaderLayout, damaged_layout
from tests.conftest import REPO, run_measured, time_bound

ONNX = Path(__file__).resolve().parents[2] / "fixtures" / "valid" / "onnx"
SILERO = ONNX / "silero_vad_16k_op15.onnx"
MODELS = [
    ONNX / "dtypes_raw.onnx",
    ONNX / "dtypes_typed.onnx",
    ONNX / "constants.onnx",
    ONNX / "external_one" / "model.onnx",
    ONNX / "external_each" / "model.onnx",
    ONNX / "external_several" / "model.onnx",
    SILERO,
]
#: ONNX data type -> the dtype ckptctl must list (the CLI contract's safetensors codes).
DTYPES: dict[int, str] = {
    TensorProto.FLOAT: "F32", TensorProto.DOUBLE: "F64", TensorProto.FLOAT16: "F16",
    TensorProto.BFLOAT16: "BF16", TensorProto.FLOAT8E4M3FN: "F8_E4M3",
    TensorProto.FLOAT8E5M2: "F8_E5M2", TensorProto.FLOAT8E8M0: "F8_E8M0",
    TensorProto.INT8: "I8", TensorProto.INT16: "I16", TensorProto.INT32: "I32",
    TensorProto.INT64: "I64", TensorProto.UINT8: "U8", TensorProto.UINT16: "U16",
    TensorProto.UINT32: "U32", TensorProto.UINT64: "U64", TensorProto.BOOL: "BOOL",
    TensorProto.COMPLEX64: "C64", TensorProto.COMPLEX128: "C128",
    TensorProto.INT4: "I8", TensorProto.UINT4: "U8",
}  # fmt: skip


def _constant(node: onnx.NodeProto, base: str) -> tuple[np.ndarray, int] | None:
    """A Constant node's value as onnx defines it (the Constant operator's attributes)."""
    for attr in node.attribute:
        if attr.name == "value":
            return numpy_helper.to_array(attr.t, base), attr.t.data_type
        if attr.name in ("value_float", "value_floats"):
            return np.array(helper.get_attribute_value(attr), dtype=np.float32), 1
        if attr.name in ("value_int", "value_ints"):
            return np.array(helper.get_attribute_value(attr), dtype=np.int64), 7
    return None


def truth(path: Path) -> dict[str, tuple[np.ndarray, int]]:
    """Every tensor onnx reads from ``path``: (array, data type) by name, subgraphs included."""
    model = onnx.load(str(path), load_external_data=False)
    base = str(path.parent)
    out: dict[str, tuple[np.ndarray, int]] = {}

    def walk(graph: onnx.GraphProto) -> None:
        for init in graph.initializer:
            if init.data_type != TensorProto.STRING:
                out[init.name] = (numpy_helper.to_array(init, base), init.data_type)
        for node in graph.node:
            if node.op_type == "Constant":
                value = _constant(node, base)
                if value is not None and value[1] != TensorProto.STRING:
                    out[node.output[0]] = value
            for attr in node.attribute:
                for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    walk(sub)

    walk(model.graph)
    return out


def as_bits(array: np.ndarray, data_type: int) -> bytes:
    """The canonical bytes of onnx's array (ml_dtypes arrays by their bits, 4-bit unpacked)."""
    if data_type in (TensorProto.INT4, TensorProto.UINT4):
        kind = np.int8 if data_type == TensorProto.INT4 else np.uint8
        return np.ascontiguousarray(array.astype(kind)).tobytes()
    return np.ascontiguousarray(array).tobytes()


@pytest.mark.parametrize("path", MODELS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_tensor_reads_as_onnx_reads_it(path: Path) -> None:
    expected = truth(path)
    with open_checkpoint(path) as ckpt:
        assert ckpt.format == "onnx"
        assert sorted(ckpt) == sorted(expected)
        for name, (array, data_type) in expected.items():
            entry = ckpt[name]
            assert entry.dtype.value == DTYPES[data_type], name
            assert entry.shape == array.shape, name
            loaded = entry.load()
            assert loaded.shape == array.shape
            assert loaded.tobytes() == as_bits(array, data_type), name


def test_every_data_type_is_in_the_fixtures() -> None:
    listed = {dt for _, dt in truth(ONNX / "dtypes_typed.onnx").values()}
    assert listed == set(DTYPES) - {TensorProto.INT4, TensorProto.UINT4}


def test_zero_d_and_empty_tensors() -> None:
    with open_checkpoint(ONNX / "dtypes_raw.onnx") as ckpt:
        assert ckpt["w.scalar"].shape == ()
        assert ckpt["w.scalar"].load()[()] == np.float32(7.5)
        assert ckpt["w.empty"].shape == (0, 5)
        assert ckpt["w.empty"].nbytes == 0
        assert ckpt["w.empty_int64"].load().shape == (0,)


def test_detected_by_content_not_extension(tmp_path: Path, run_cli) -> None:
    renamed = tmp_path / "weights.data"
    shutil.copy(SILERO, renamed)
    result = run_cli("ls", "--json", renamed)
    assert result.code == 0, result.stderr
    listing = json.loads(result.stdout)
    assert listing["format"] == "onnx"
    assert listing["metadata"]["producer_name"] == "pytorch"


def test_silero_lists_its_initializers_and_constants(run_cli) -> None:
    model = onnx.load(str(SILERO))
    result = run_cli("ls", "--json", SILERO)
    names = [t["name"] for t in json.loads(result.stdout)["tensors"]]
    initializers = [t.name for t in model.graph.initializer]
    assert names[: len(initializers)] == initializers
    assert len(initializers) == 15
    assert len(names) - len(initializers) == 160  # Constants, most in If subgraphs


def test_state_key_initializers_selects_only_initializers(run_cli) -> None:
    result = run_cli("ls", "--json", "--state-key", "initializers", ONNX / "constants.onnx")
    assert result.code == 0, result.stderr
    names = [t["name"] for t in json.loads(result.stdout)["tensors"]]
    assert names == ["fc1.weight", "fc1.bias", "state0"]


def test_string_tensors_and_string_constants_are_left_out_with_a_note() -> None:
    with open_checkpoint(ONNX / "strings.onnx") as ckpt:
        assert list(ckpt) == ["w"]
        assert any("vocab" in note for note in ckpt.notes)
    with open_checkpoint(ONNX / "constants.onnx") as ckpt:
        assert "c_text" not in ckpt
        assert any("c_text" in note for note in ckpt.notes)


def test_a_data_type_without_a_dtype_exits_4(run_cli) -> None:
    result = run_cli("ls", ONNX / "unsupported_fnuz.onnx")
    assert result.code == 4
    assert "FLOAT8E4M3FNUZ" in result.stderr
    assert "w.fnuz" in result.stderr


# --- INT4 / UINT4 ----------------------------------------------------------------------------


def test_int4_is_listed_unpacked(run_cli) -> None:
    listing = json.loads(run_cli("ls", "--json", ONNX / "int4.onnx").stdout)
    shapes = {t["name"]: (t["dtype"], t["shape"], t["nbytes"]) for t in listing["tensors"]}
    assert shapes["q.int4_raw"] == ("I8", [3, 3], 9)
    assert shapes["q.uint4_typed"] == ("U8", [5], 5)


def test_convert_writes_int4_as_onnx_values(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "out.safetensors"
    result = run_cli("convert", ONNX / "int4.onnx", out)
    assert result.code == 0, result.stderr
    expected = truth(ONNX / "int4.onnx")
    with open_checkpoint(out) as ckpt:
        for name, (array, data_type) in expected.items():
            assert ckpt[name].load().tobytes() == as_bits(array, data_type), name


def test_int4_values_in_every_reading_command(run_cli) -> None:
    path = ONNX / "int4.onnx"
    expected = truth(path)
    digests = {m["name"]: m["digest"] for m in _manifest(run_cli, path)}
    for name, (array, data_type) in expected.items():
        assert digests[name] == "sha256:" + hashlib.sha256(as_bits(array, data_type)).hexdigest()
    shown = run_cli("show", "--json", path, "q.int4_raw")
    assert shown.code == 0, shown.stderr
    stats = json.loads(shown.stdout)["tensors"][0]["stats"]
    int4 = expected["q.int4_raw"][0].astype(np.int8)
    assert (stats["min"], stats["max"]) == (int4.min(), int4.max())
    assert run_cli("diff", path, path).code == 0
    assert run_cli("verify", "--no-nan", path).code == 0


# --- header ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", MODELS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_header_regions_tile_the_file_with_raw_data_at_its_bytes(path: Path) -> None:
    layout = read_layout(path)
    data = path.read_bytes()
    assert layout.file_size == len(data)
    pos = 0
    for region in layout.regions:
        assert region.start == pos
        pos = region.end
    assert pos == len(data)
    model = onnx.load(str(path), load_external_data=False)
    raw = {t.name: t.raw_data for t in model.graph.initializer if t.HasField("raw_data")}
    tensors = {r.name: data[r.start : r.end] for r in layout.regions if r.kind == "tensor"}
    assert set(raw) <= set(tensors)
    for name, payload in raw.items():
        assert tensors[name] == payload, name


def test_header_json_names_storage(run_cli) -> None:
    result = run_cli("header", "--json", ONNX / "external_several" / "model.onnx")
    assert result.code == 0, result.stderr
    header = json.loads(result.stdout)
    storage = {t["name"]: t["storage"] for t in header["header"]["tensors"]}
    assert storage == {
        "fc1.weight": "external", "fc1.bias": "external", "table": "external", "half": "raw_data",
    }  # fmt: skip


# --- convert and hash ------------------------------------------------------------------------


def _manifest(run_cli, path: Path) -> list[dict[str, object]]:
    result = run_cli("hash", path)
    assert result.code == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize("ext", [".safetensors", ".bpk", ".pt"])
@pytest.mark.parametrize("path", [SILERO, ONNX / "external_several" / "model.onnx"], ids=str)
def test_convert_keeps_every_digest(tmp_path: Path, run_cli, path: Path, ext: str) -> None:
    out = tmp_path / f"out{ext}"
    result = run_cli("convert", path, out)
    assert result.code == 0, result.stderr
    assert _manifest(run_cli, out) == _manifest(run_cli, path)


def test_convert_every_dtype_keeps_its_digest(tmp_path: Path, run_cli) -> None:
    src = ONNX / "dtypes_typed.onnx"
    out = tmp_path / "out.safetensors"  # safetensors has no C128
    result = run_cli("convert", src, out, "--exclude", "complex128")
    assert result.code == 0, result.stderr
    source = [m for m in _manifest(run_cli, src) if m["name"] != "w.complex128"]
    assert _manifest(run_cli, out) == source


def test_pytorch_to_burn_on_exported_names(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "out.bpk"
    src = ONNX / "constants.onnx"
    result = run_cli("convert", src, out, "--state-key", "initializers", "-a", "pytorch-to-burn")
    assert result.code == 0, result.stderr
    with open_checkpoint(out) as ckpt:
        # Burn's Linear stores [in, out]: the PyTorch-named weight comes out transposed
        assert ckpt["fc1.weight"].shape == (3, 2)
        expected = np.arange(6, dtype=np.float32).reshape(2, 3).T
        np.testing.assert_array_equal(ckpt["fc1.weight"].load(), expected)


def test_verify_passes_a_readable_model(run_cli) -> None:
    result = run_cli("verify", SILERO)
    assert result.code == 0, result.stdout + result.stderr


# --- external data outside the model's folder ------------------------------------------------


def _external_model(folder: Path, location: str) -> Path:
    """A model whose one initializer keeps its 16 bytes at ``location``."""
    init = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    init.ClearField("raw_data")
    init.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = init.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([], "g", [], [], initializer=[init])
    path = folder / "model.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    return path


def _outside(tmp_path: Path, how: str) -> tuple[Path, Path]:
    """(model, the secret outside its folder) for each way a location can leave the folder."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    if how == "symlink":
        os.symlink(secret, folder / "link.bin")
        return _external_model(folder, "link.bin"), secret
    location = {
        "dotdot": "../secret.bin",
        "dotdot-inside": "sub/../../secret.bin",
        "backslash": "..\\secret.bin",
        "absolute": str(secret),
    }[how]
    return _external_model(folder, location), secret


WAYS_OUT = ["dotdot", "dotdot-inside", "backslash", "absolute", "symlink"]


@pytest.mark.parametrize("how", WAYS_OUT)
def test_location_outside_the_folder_is_refused(tmp_path: Path, run_cli, how: str) -> None:
    model, _ = _outside(tmp_path, how)
    with pytest.raises(UnsafePickleError, match="outside the model's folder"):
        open_checkpoint(model)
    for command in ("ls", "convert"):
        args = [command, model] + ([tmp_path / "out.safetensors"] if command == "convert" else [])
        result = run_cli(*args)
        assert result.code == 3, result.stderr
        assert result.stderr.startswith("ckptctl: error:")
        assert "'w'" in result.stderr
    result = run_cli("verify", "--json", model)
    assert result.code == 1
    assert json.loads(result.stdout)["files"][0]["verdict"] == "unsafe"


#: Runs ``ckptctl ls MODEL`` with an audit hook that records every file the process opens.
_AUDITED = """
import sys
opened = []
sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == "open" else None)
from ckptctl.cli import main
try:
    main(["ls", sys.argv[1]])
except SystemExit as exc:
    print("exit", exc.code)
print("\\n".join(opened))
"""


@pytest.mark.parametrize("how", WAYS_OUT)
def test_no_byte_outside_the_folder_is_read(tmp_path: Path, how: str) -> None:
    model, secret = _outside(tmp_path, how)
    done = subprocess.run(
        [sys.executable, "-c", _AUDITED, str(model)], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120, check=False,
    )  # fmt: skip
    assert "exit 3" in done.stdout, done.stderr
    opened = done.stdout.splitlines()
    assert str(model) in opened  # the hook sees opens
    assert str(secret) not in opened
    assert not [p for p in opened if os.path.basename(p) in ("secret.bin", "link.bin")]


def test_a_symlink_inside_the_folder_is_followed(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    os.symlink(folder / "data" / "w.bin", folder / "link.bin")
    with open_checkpoint(_external_model(folder, "link.bin")) as ckpt:
        np.testing.assert_array_equal(ckpt["w"].load(), np.arange(4, dtype=np.float32))


def test_external_length_past_its_file_is_corrupt(tmp_path: Path) -> None:
    model = _external_model(tmp_path, "w.bin")
    (tmp_path / "w.bin").write_bytes(b"\0" * 8)
    with pytest.raises(CorruptCheckpointError, match=r"w\.bin"):
        open_checkpoint(model)


def test_missing_external_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(CorruptCheckpointError, match=r"w\.bin"):
        open_checkpoint(_external_model(tmp_path, "w.bin"))


# --- verify: the external-data checksum ------------------------------------------------------


def _checksummed(folder: Path, digest: Callable[[bytes], str] | str) -> Path:
    """A model whose two initializers share ``weights.bin``, each declaring its checksum (the
    digest of the whole file, as onnx.proto defines it) through onnx's own helper."""
    arrays: dict[str, np.ndarray] = {
        "a": np.arange(4, dtype=np.float32),
        "b": np.arange(6, dtype=np.int64),
    }
    blob = b"".join(a.tobytes() for a in arrays.values())
    (folder / "weights.bin").write_bytes(blob)
    declared = digest if isinstance(digest, str) else digest(blob)
    initializers, offset = [], 0
    for name, array in arrays.items():
        init = numpy_helper.from_array(array, name)
        external_data_helper.set_external_data(
            init, "weights.bin", offset, array.nbytes, checksum=declared
        )
        init.ClearField("raw_data")
        initializers.append(init)
        offset += array.nbytes
    graph = helper.make_graph([], "g", [], [], initializer=initializers)
    path = folder / "model.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    return path


def _checksum_finding(run_cli, path: Path, *args: str) -> tuple[int, dict[str, str] | None]:
    result = run_cli("verify", "--json", path, *args)
    findings = json.loads(result.stdout)["files"][0]["findings"]
    found = [f for f in findings if f["check"] == "onnx-checksum"]
    return result.code, found[0] if found else None


def _sha1(data: bytes) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


@pytest.mark.parametrize(
    "digest", [_sha1, lambda b: hashlib.sha256(b).hexdigest().upper()], ids=["sha1", "sha256"]
)
def test_verify_checks_the_declared_checksum(tmp_path: Path, run_cli, digest) -> None:
    path = _checksummed(tmp_path, digest)
    init = onnx.load(str(path), load_external_data=False).graph.initializer[0]
    assert "checksum" in {entry.key for entry in init.external_data}
    code, finding = _checksum_finding(run_cli, path)
    assert code == 0
    assert finding is not None
    assert finding["status"] == "ok"
    assert "weights.bin" in finding["message"]


def test_verify_fails_a_data_file_that_does_not_match(tmp_path: Path, run_cli) -> None:
    path = _checksummed(tmp_path, _sha1)
    blob = bytearray((tmp_path / "weights.bin").read_bytes())
    blob[-1] ^= 1  # same size: only the checksum tells
    (tmp_path / "weights.bin").write_bytes(bytes(blob))
    assert run_cli("ls", path).code == 0
    code, finding = _checksum_finding(run_cli, path)
    assert code == 1
    assert finding is not None
    assert finding["status"] == "fail"
    assert "weights.bin" in finding["message"]
    assert _sha1(bytes(blob)) in finding["message"]
    code, finding = _checksum_finding(run_cli, path, "--skip", "onnx-checksum")
    assert (code, finding) == (0, None)


def test_verify_warns_on_a_checksum_it_cannot_check(tmp_path: Path, run_cli) -> None:
    code, finding = _checksum_finding(run_cli, _checksummed(tmp_path, "crc32:1234"))
    assert code == 0
    assert finding is not None
    assert finding["status"] == "warn"
    assert "crc32:1234" in finding["message"]


def test_no_checksum_no_finding(run_cli) -> None:
    code, finding = _checksum_finding(run_cli, ONNX / "external_one" / "model.onnx")
    assert (code, finding) == (0, None)


# --- the wire format: valid variants and hostile files ---------------------------------------


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, wire: int, payload: bytes) -> bytes:
    """One protobuf field (LEN payloads get their length)."""
    key = varint(number << 3 | wire)
    return key + (varint(len(payload)) + payload if wire == 2 else payload)


def model_bytes(*tensors: bytes, graph_extra: bytes = b"") -> bytes:
    """A ModelProto (ir_version 10) whose graph holds ``tensors`` as initializers."""
    graph = b"".join(field(5, 2, t) for t in tensors) + graph_extra
    return field(1, 0, varint(10)) + field(7, 2, graph)


def tensor_bytes(name: str, dims: list[int], data_type: int, data: bytes) -> bytes:
    out = b"".join(field(1, 0, varint(d)) for d in dims)  # dims unpacked, as protobuf allows
    return out + field(2, 0, varint(data_type)) + field(8, 2, name.encode()) + data


def test_unpacked_typed_fields_read_as_onnx_reads_them(tmp_path: Path) -> None:
    floats = b"".join(field(4, 5, np.float32(v).tobytes()) for v in (1.5, -2.0, 3.0))
    ints = b"".join(field(7, 0, varint(v % (1 << 64))) for v in (-1, 2, 1 << 40))
    half = field(5, 0, varint(0x3C00)) + field(5, 2, varint(0xC000))  # one unpacked, one packed
    path = tmp_path / "model.onnx"
    path.write_bytes(
        model_bytes(
            tensor_bytes("f", [3], TensorProto.FLOAT, floats),
            tensor_bytes("i", [3], TensorProto.INT64, ints),
            tensor_bytes("h", [2], TensorProto.FLOAT16, half),
        )
    )
    expected = truth(path)
    with open_checkpoint(path) as ckpt:
        for name, (array, data_type) in expected.items():
            assert ckpt[name].load().tobytes() == as_bits(array, data_type), name


def test_every_truncation_is_one_ckpt_error(tmp_path: Path) -> None:
    data = (ONNX / "constants.onnx").read_bytes()
    refused = 0
    paths: list[str | None] = []
    source = tmp_path / "cut.onnx"
    for cut in range(1, len(data)):
        source.write_bytes(data[:cut])
        try:
            with open_checkpoint(source) as ckpt:
                for entry in ckpt.values():
                    entry.load()
        except CkptError as exc:
            paths.append(exc.path)
            refused += 1
    assert refused > len(data) // 2
    assert all(paths)  # every error names the file


def _raw_regions(path: Path) -> dict[str, tuple[int, int]]:
    """Where the whole file's layout puts each raw_data payload (checked against onnx's bytes
    by ``test_header_regions_tile_the_file_with_raw_data_at_its_bytes``)."""
    regions = read_layout(path).regions
    return {r.name: (r.start, r.end) for r in regions if r.kind == "tensor" and r.name}


def _truncated_layout(path: Path) -> HeaderLayout | None:
    with pytest.raises(TruncatedError) as info:
        read_layout(path)
    assert str(path.stat().st_size) in info.value.message
    return damaged_layout(info.value)


@pytest.mark.parametrize("path", [ONNX / "constants.onnx", ONNX / "dtypes_raw.onnx"], ids=str)
def test_truncated_layout_shows_every_whole_field(tmp_path: Path, path: Path) -> None:
    data = path.read_bytes()
    whole = _raw_regions(path)
    model_fields = [r for r in read_layout(path).regions if r.kind == "metadata"]
    top_level = {r.start for r in model_fields} | {r.end for r in model_fields}
    cut_path = tmp_path / "cut.onnx"
    for cut in range(40, len(data)):  # from inside the graph on (it starts before byte 40)
        if cut in top_level:
            continue  # between two of the model's own fields: a whole (smaller) model
        cut_path.write_bytes(data[:cut])
        layout = _truncated_layout(cut_path)
        assert layout is not None, cut
        ends = [r.start for r in layout.regions] + [cut]
        assert ends[0] == 0
        assert all(r.end == after for r, after in zip(layout.regions, ends[1:], strict=True))
        assert any("truncated" in (r.note or "") for r in layout.regions)
        # the graph field the file ends inside (shown as one region) or the file's end
        last = layout.regions[-1]
        cut_field = last.start if "truncated" in (last.note or "") else cut
        tensors = [r for r in layout.regions if r.kind == "tensor" and r.end > r.start]
        assert [(r.name, (r.start, r.end)) for r in tensors] == [
            (name, (start, end)) for name, (start, end) in whole.items() if start < end <= cut_field
        ]


def test_truncated_model_header_exits_3_with_the_layout(tmp_path: Path, run_cli) -> None:
    data = SILERO.read_bytes()
    cut = len(data) // 2
    path = tmp_path / "model.data"  # recognised by content, cut or not
    path.write_bytes(data[:cut])
    result = run_cli("header", "--json", path)
    assert result.code == 3
    assert "model.data" in result.stderr
    assert str(cut) in result.stderr
    header = json.loads(result.stdout)
    assert header["format"] == "onnx"
    assert header["regions"][-1]["end"] == cut
    assert "truncated" in header["damage"]["hint"]
    listed = {t["name"] for t in header["header"]["tensors"]}
    assert "model.encoder.1.reparam_conv.weight" in listed  # ends before the cut
    assert "model.encoder.2.reparam_conv.weight" not in listed  # the cut is inside it
    regions = {r.get("name"): (r["start"], r["end"]) for r in header["regions"]}
    name = "model.stft.forward_basis_buffer"
    assert regions[name] == _raw_regions(SILERO)[name]
    result = run_cli("ls", path)
    assert result.code == 3
    assert str(cut) in result.stderr


def _deep(levels: int) -> bytes:
    graph = b""
    for _ in range(levels):
        attribute = field(1, 2, b"then_branch") + field(6, 2, graph) + field(20, 0, varint(5))
        graph = field(1, 2, field(4, 2, b"If") + field(5, 2, attribute))
    return field(1, 0, varint(10)) + field(7, 2, graph)


HOSTILE = {
    "varint-11-bytes": (
        field(1, 0, varint(10)) + field(7, 2, field(5, 2, b"\x08" + b"\xff" * 10 + b"\x01")),
        "longer than 10 bytes",
    ),
    "length-past-end": (
        field(1, 0, varint(10)) + field(7, 2, b"\x2a" + varint(1 << 40) + b"\0" * 16),
        "declares",
    ),
    "depth-bomb": (_deep(200), "nest deeper"),
    "huge-dims": (
        model_bytes(tensor_bytes("w", [1 << 40, 1 << 40], 1, field(9, 2, b"\0" * 4))),
        "raw_data",
    ),
    "huge-dims-typed": (
        model_bytes(tensor_bytes("w", [1 << 62], 7, field(7, 2, b"\x01" * 8))),
        "int64_data",
    ),
    "raw-size-mismatch": (
        model_bytes(tensor_bytes("w", [3], 1, field(9, 2, b"\0" * 8))),
        "holds 8 bytes",
    ),
    "group-wire-type": (field(1, 0, varint(10)) + field(7, 2, b"\x0b"), "wire type 3"),
}


SHOWN_BY_HEADER = {"huge-dims", "huge-dims-typed", "raw-size-mismatch"}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_protobuf_is_one_line_exit_3(tmp_path: Path, run_cli, case: str) -> None:
    data, keyword = HOSTILE[case]
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    result = run_cli("ls", path)
    assert result.code == 3, result.stderr
    assert keyword in result.stderr
    assert "model.onnx" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.bounded
@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("command", ["ls", "header"])
def test_hostile_protobuf_is_bounded(tmp_path: Path, case: str, command: str) -> None:
    data, _ = HOSTILE[case]
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    run = run_measured([command, str(path)], tmp_path)
    # header shows what a well-formed protobuf declares, even sizes that cannot be
    expected = 0 if command == "header" and case in SHOWN_BY_HEADER else 3
    assert run.code == expected, run.output
    assert run.cpu_seconds < time_bound(10.0)
    assert run.peak_rss < 256 << 20


def test_unknown_protobuf_is_not_claimed(tmp_path: Path, run_cli) -> None:
    # a TensorFlow SavedModel: field 1 (schema version), then a long field 2 (meta graphs)
    path = tmp_path / "saved_model.pb"
    path.write_bytes(field(1, 0, varint(1)) + field(2, 2, b"tensorflow serving_default" * 400))
    result = run_cli("ls", path)
    assert result.code == 3
    assert "TensorFlow" in result.stderr

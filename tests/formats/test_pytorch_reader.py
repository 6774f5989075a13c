"""The PyTorch reader on hand-built files: containers, views, dtypes, structure, bad input.

Files are assembled opcode by opcode (no torch needed) following docs/formats/pytorch.md: the zip
container, the legacy stream, the pickle shapes of tensors and whole models.
"""

from __future__ import annotations

import io
import pickle
import struct
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ckptctl.dtypes import DType
from ckptctl.errors import CorruptCheckpointError, InputError, UnsupportedError
from ckptctl.formats import open_checkpoint, save_checkpoint
from ckptctl.model import ComputedData, FileData, Structure
from tests.conftest import VALID, time_bound
from tests.contract import assert_header_only, assert_past_sniff, list_spied, sample_entries
from tests.strategies import array_entry

# --- a tiny protocol-2 pickle assembler ----------------------------------------------------


def lit(value: object) -> bytes:
    """A primitive (int, str, tuple of primitives, bool, None) as protocol-2 opcodes."""
    return pickle.dumps(value, protocol=2)[2:-1]


def glob(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def storage_pid(stype: str, key: str, numel: int, *, legacy: bool = False) -> bytes:
    module = "torch.storage" if stype == "UntypedStorage" else "torch"
    body = b"(" + lit("storage") + glob(module, stype) + lit(key) + lit("cpu") + lit(numel)
    if legacy:
        body += b"N"
    return body + b"tQ"


def tensor_v2(pid: bytes, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
              metadata: bytes = b"") -> bytes:  # fmt: skip
    hooks = glob("collections", "OrderedDict") + b")R"
    return (
        glob("torch._utils", "_rebuild_tensor_v2")
        + b"("
        + pid
        + lit(offset)
        + lit(size)
        + lit(stride)
        + b"\x89"
        + hooks
        + metadata
        + b"tR"
    )


def tensor_v3(pid: bytes, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
              dtype: str) -> bytes:  # fmt: skip
    hooks = glob("collections", "OrderedDict") + b")R"
    return (
        glob("torch._utils", "_rebuild_tensor_v3")
        + b"("
        + pid
        + lit(offset)
        + lit(size)
        + lit(stride)
        + b"\x89"
        + hooks
        + glob("torch", dtype)
        + b"tR"
    )


def parameter(tensor: bytes) -> bytes:
    hooks = glob("collections", "OrderedDict") + b")R"
    return glob("torch._utils", "_rebuild_parameter") + b"(" + tensor + b"\x88" + hooks + b"tR"


def dict_of(items: list[tuple[bytes, bytes]], *, ordered: bool = False) -> bytes:
    out = glob("collections", "OrderedDict") + b")R" if ordered else b"}"
    if items:
        out += b"(" + b"".join(k + v for k, v in items) + b"u"
    return out


def list_of(items: list[bytes]) -> bytes:
    return b"](" + b"".join(items) + b"e"


def obj(module: str, name: str, state: bytes) -> bytes:
    """A NEWOBJ + BUILD instance, as torch.save(model) writes modules
    (docs/formats/pytorch.md#whole-models)."""
    return glob(module, name) + b")\x81" + state + b"b"


def pkl(body: bytes) -> bytes:
    return b"\x80\x02" + body + b"."


def frame(length: int) -> bytes:
    """A protocol-4 FRAME opcode announcing ``length`` bytes."""
    return b"\x95" + struct.pack("<Q", length)


def write_zip(
    path: Path,
    data_pkl: bytes,
    storages: dict[str, bytes],
    *,
    prefix: str = "archive",
    compression: int = zipfile.ZIP_STORED,
    extra: dict[str, bytes] | None = None,
) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as zf:
        zf.writestr(zipfile.ZipInfo(f"{prefix}/data.pkl"), data_pkl, zipfile.ZIP_STORED)
        zf.writestr(f"{prefix}/byteorder", b"little")
        for key, blob in storages.items():
            zf.writestr(f"{prefix}/data/{key}", blob)
        zf.writestr(f"{prefix}/version", b"3\n")
        for name, blob in (extra or {}).items():
            zf.writestr(f"{prefix}/{name}", blob)
    return path


def write_legacy(path: Path, main: bytes, storages: list[tuple[str, int, bytes]]) -> Path:
    """The five pickles of a legacy stream, then each storage as i64 count + bytes
    (docs/formats/pytorch.md#legacy-stream)."""
    sys_info = {"protocol_version": 1001, "little_endian": True,
                "type_sizes": {"short": 2, "int": 4, "long": 4}}  # fmt: skip
    out = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2)
    out += pickle.dumps(sys_info, protocol=2) + pkl(main)
    out += pickle.dumps(sorted(k for k, _, _ in storages), protocol=2)
    for _key, numel, blob in sorted(storages):
        out += struct.pack("<q", numel) + blob
    path.write_bytes(out)
    return path


def f32(*values: float) -> bytes:
    return np.array(values, dtype="<f4").tobytes()


# --- ZIP: containers ---------------------------------------------------------------------------


def _min_zip(tmp_path: Path, **kwargs: object) -> Path:
    body = dict_of(
        [
            (lit("weight"), tensor_v2(storage_pid("FloatStorage", "0", 6), 0, (2, 3), (3, 1))),
            (lit("bias"), tensor_v2(storage_pid("FloatStorage", "1", 2), 0, (2,), (1,))),
        ],
        ordered=True,
    )
    storages = {"0": f32(0, 1, 2, 3, 4, 5), "1": f32(1.5, -2.0)}
    return write_zip(tmp_path / "min.pt", pkl(body), storages, **kwargs)  # type: ignore[arg-type]


def test_zip_state_dict_zero_copy(tmp_path: Path) -> None:
    path = _min_zip(tmp_path)
    with open_checkpoint(path) as ckpt:
        assert ckpt.format == "pytorch-zip"
        assert ckpt.kind == "state_dict"
        assert list(ckpt) == ["weight", "bias"]
        assert ckpt.structure == Structure(2, {}, None, ("weight", "bias"))
        assert ckpt.metadata == {"byteorder": "little", "version": "3"}
        weight = ckpt["weight"]
        assert (weight.dtype, weight.shape, weight.nbytes) == (DType.F32, (2, 3), 24)
        assert isinstance(weight.data, FileData)
        raw = path.read_bytes()
        assert weight.offset is not None
        assert raw[weight.offset : weight.offset + 24] == f32(0, 1, 2, 3, 4, 5)
        np.testing.assert_array_equal(weight.load(), np.arange(6, dtype="f4").reshape(2, 3))
        np.testing.assert_array_equal(ckpt["bias"].load(), [1.5, -2.0])


def test_zip_any_prefix_and_deflate(tmp_path: Path) -> None:
    path = _min_zip(tmp_path, prefix="renamed_dir", compression=zipfile.ZIP_DEFLATED)
    with open_checkpoint(path) as ckpt:
        weight = ckpt["weight"]
        assert weight.offset is None  # compressed: no zero-copy range
        assert isinstance(weight.data, ComputedData)
        np.testing.assert_array_equal(weight.load().ravel(), np.arange(6, dtype="f4"))
        assert any("compressed" in note for note in ckpt.notes)


def _zero_crcs(raw: bytearray) -> None:
    """Zero every CRC field, as torch.serialization.set_crc32_options(False) writes
    (docs/formats/pytorch.md#zip-container)."""
    pos = 0
    while (pos := raw.find(b"PK\x03\x04", pos)) >= 0:
        raw[pos + 14 : pos + 18] = b"\0\0\0\0"
        pos += 4
    pos = 0
    while (pos := raw.find(b"PK\x01\x02", pos)) >= 0:
        raw[pos + 16 : pos + 20] = b"\0\0\0\0"
        pos += 4


def test_zip_without_crc(tmp_path: Path) -> None:
    path = _min_zip(tmp_path)
    raw = bytearray(path.read_bytes())
    _zero_crcs(raw)
    path.write_bytes(bytes(raw))
    with zipfile.ZipFile(path) as zf, pytest.raises(zipfile.BadZipFile):
        zf.read("archive/data/0")  # what a zipfile-based reader would hit
    with open_checkpoint(path) as ckpt:
        np.testing.assert_array_equal(ckpt["bias"].load(), [1.5, -2.0])


def test_zip_storage_size_mismatch_is_corrupt(tmp_path: Path) -> None:
    body = dict_of([(lit("w"), tensor_v2(storage_pid("FloatStorage", "0", 8), 0, (8,), (1,)))])
    path = write_zip(tmp_path / "bad.pt", pkl(body), {"0": f32(1, 2)})
    with pytest.raises(CorruptCheckpointError, match="data/0"):
        open_checkpoint(path)


def test_zip_view_past_storage_is_corrupt(tmp_path: Path) -> None:
    body = dict_of([(lit("w"), tensor_v2(storage_pid("FloatStorage", "0", 2), 1, (4,), (1,)))])
    path = write_zip(tmp_path / "bad.pt", pkl(body), {"0": f32(1, 2)})
    with pytest.raises(CorruptCheckpointError, match="'w'"):
        open_checkpoint(path)


# --- views and dtypes -----------------------------------------------------------------------


def test_views_share_one_storage(tmp_path: Path) -> None:
    base = np.arange(12, dtype="<f4")
    pid = storage_pid("FloatStorage", "0", 12)
    body = dict_of(
        [
            (lit("base"), tensor_v2(pid, 0, (12,), (1,))),
            (lit("slice"), tensor_v2(pid, 4, (4,), (1,))),
            (lit("t"), tensor_v2(pid, 0, (4, 3), (1, 4))),  # reshape(3,4).t()
            (lit("every3"), tensor_v2(pid, 0, (4,), (3,))),
            (lit("expand"), tensor_v2(pid, 0, (3, 4), (1, 0))),
            (lit("scalar"), tensor_v2(pid, 5, (), ())),
            (lit("empty"), tensor_v2(pid, 0, (0, 5), (5, 1))),
        ]
    )
    path = write_zip(tmp_path / "views.pt", pkl(body), {"0": base.tobytes()})
    with open_checkpoint(path) as ckpt:
        np.testing.assert_array_equal(ckpt["slice"].load(), base[4:8])
        assert ckpt["slice"].offset == ckpt["base"].offset + 16  # type: ignore[operator]
        np.testing.assert_array_equal(ckpt["t"].load(), base.reshape(3, 4).T)
        assert isinstance(ckpt["t"].data, ComputedData)
        np.testing.assert_array_equal(ckpt["every3"].load(), base[::3])
        np.testing.assert_array_equal(
            ckpt["expand"].load(), np.broadcast_to(base[:3, None], (3, 4))
        )
        assert ckpt["expand"].nbytes == 48
        assert ckpt["scalar"].load().shape == ()
        assert float(ckpt["scalar"].load()) == 5.0
        assert ckpt["empty"].shape == (0, 5)
        assert ckpt["empty"].load().size == 0
        assert ckpt["t"].extra == {
            "storage": "0",
            "storage_offset": "0",
            "stride": "1,4",
            "storage_nbytes": "48",
        }
        assert any("share a storage" in note for note in ckpt.notes)


def test_conj_and_neg_flags(tmp_path: Path) -> None:
    c = np.array([1 + 2j, 3 - 4j], dtype="<c8")
    conj = dict_of([(lit("conj"), b"\x88")])
    neg = dict_of([(lit("neg"), b"\x88")])
    body = dict_of(
        [
            (lit("c"), tensor_v2(storage_pid("ComplexFloatStorage", "0", 2), 0, (2,), (1,), conj)),
            (lit("n"), tensor_v2(storage_pid("FloatStorage", "1", 2), 0, (2,), (1,), neg)),
        ]
    )
    path = write_zip(tmp_path / "flags.pt", pkl(body), {"0": c.tobytes(), "1": f32(1, 2)})
    with open_checkpoint(path) as ckpt:
        np.testing.assert_array_equal(ckpt["c"].load(), np.conj(c))
        np.testing.assert_array_equal(ckpt["n"].load(), [-1.0, -2.0])


@pytest.mark.parametrize(
    ("torch_dtype", "dtype", "blob"),
    [
        ("uint16", DType.U16, np.array([1, 65535], "<u2").tobytes()),
        ("uint32", DType.U32, np.array([1, 2**32 - 1], "<u4").tobytes()),
        ("uint64", DType.U64, np.array([1, 2**64 - 1], "<u8").tobytes()),
        ("float8_e4m3fn", DType.F8_E4M3, bytes([0x38, 0xB8])),  # 1.0, -1.0
        ("float8_e5m2", DType.F8_E5M2, bytes([0x3C, 0xBC])),
        ("float8_e8m0fnu", DType.F8_E8M0, bytes([127, 128])),
        ("bfloat16", DType.BF16, np.array([0x3F80, 0xC000], "<u2").tobytes()),
    ],
)
def test_v3_dtypes(tmp_path: Path, torch_dtype: str, dtype: DType, blob: bytes) -> None:
    pid = storage_pid("UntypedStorage", "0", len(blob))
    body = dict_of([(lit("x"), tensor_v3(pid, 0, (2,), (1,), torch_dtype))])
    path = write_zip(tmp_path / "v3.pt", pkl(body), {"0": blob})
    with open_checkpoint(path) as ckpt:
        entry = ckpt["x"]
        assert entry.dtype is dtype
        assert entry.load().tobytes() == blob


@pytest.mark.parametrize("torch_dtype", ["complex32", "float8_e4m3fnuz", "float4_e2m1fn_x2"])
def test_unrepresentable_dtype_names_the_tensor(tmp_path: Path, torch_dtype: str) -> None:
    pid = storage_pid("UntypedStorage", "0", 8)
    body = dict_of([(lit("odd.tensor"), tensor_v3(pid, 0, (2,), (1,), torch_dtype))])
    path = write_zip(tmp_path / "odd.pt", pkl(body), {"0": bytes(8)})
    with pytest.raises(UnsupportedError, match=r"'odd\.tensor'.*" + torch_dtype):
        open_checkpoint(path)


def test_quantized_tensor_is_unsupported(tmp_path: Path) -> None:
    q = glob("torch._utils", "_rebuild_qtensor") + b"(" + storage_pid("QInt8Storage", "0", 2)
    q += lit(0) + lit((2,)) + lit((1,)) + b"(" + glob("torch", "per_tensor_affine")
    q += lit(0.5) + lit(0) + b"t\x89" + glob("collections", "OrderedDict") + b")RtR"
    path = write_zip(tmp_path / "q.pt", pkl(dict_of([(lit("q"), q)])), {"0": bytes(2)})
    with pytest.raises(UnsupportedError, match="'q' is a quantized tensor"):
        open_checkpoint(path)


# --- structure ------------------------------------------------------------------------------


def _module_state(params: list[tuple[str, bytes]], buffers: list[tuple[str, bytes]],
                  modules: list[tuple[str, bytes]], non_persistent: list[str] = ()) -> bytes:  # type: ignore[assignment]  # fmt: skip
    nps = glob("builtins", "set") + b"(" + list_of([lit(n) for n in non_persistent]) + b"tR"
    return dict_of(
        [
            (lit("training"), b"\x88"),
            (lit("_parameters"), dict_of([(lit(k), v) for k, v in params], ordered=True)),
            (lit("_buffers"), dict_of([(lit(k), v) for k, v in buffers], ordered=True)),
            (lit("_non_persistent_buffers_set"), nps),
            (lit("_modules"), dict_of([(lit(k), v) for k, v in modules], ordered=True)),
        ]
    )


def test_whole_module_listed_by_state_dict_names(tmp_path: Path) -> None:
    emb_w = parameter(tensor_v2(storage_pid("FloatStorage", "0", 6), 0, (3, 2), (2, 1)))
    embedding = obj(
        "torch.nn.modules.sparse", "Embedding", _module_state([("weight", emb_w)], [], [])
    )
    lin_b = parameter(tensor_v2(storage_pid("FloatStorage", "1", 3), 0, (3,), (1,)))
    # The head's weight is the embedding's weight object again (tied): a memo GET.
    emb_w_tied = b"h\x63"
    head = obj("torch.nn.modules.linear", "Linear",
               _module_state([("weight", emb_w_tied), ("bias", lin_b)], [], []))  # fmt: skip
    tmp = tensor_v2(storage_pid("FloatStorage", "2", 1), 0, (1,), (1,))
    steps = tensor_v2(storage_pid("LongStorage", "3", 1), 0, (), ())
    # Put the embedding weight into memo slot 99 as it is first built.
    embedding = embedding.replace(emb_w, emb_w + b"q\x63")
    root = obj(
        "__main__",
        "Net",
        _module_state(
            [],
            [("tmp", tmp), ("steps", steps)],
            [("embed", embedding), ("drop", b"N"), ("head", head)],
            ["tmp"],
        ),
    )
    blobs = {"0": f32(*range(6)), "1": f32(7, 8, 9), "2": f32(0), "3": struct.pack("<q", 5)}
    path = write_zip(tmp_path / "model.pt", pkl(root), blobs)
    with open_checkpoint(path) as ckpt:
        assert ckpt.kind == "module"
        assert list(ckpt) == ["steps", "embed.weight", "head.weight", "head.bias"]
        assert ckpt["embed.weight"].module_type == "Embedding"
        assert ckpt["head.bias"].module_type == "Linear"
        assert ckpt["steps"].module_type == "Net"
        assert ckpt.structure is not None
        assert ckpt.structure.module_class == "__main__.Net"
        assert ckpt.structure.top_level_tensors == 0
        assert any(
            "a pickled Net object, listed with its state_dict() names" in n for n in ckpt.notes
        )
        np.testing.assert_array_equal(ckpt["head.weight"].load(), ckpt["embed.weight"].load())


def test_nested_checkpoint_facts_and_notes(tmp_path: Path) -> None:
    pid = storage_pid("FloatStorage", "0", 4)
    t = tensor_v2(pid, 0, (4,), (1,))
    state = dict_of([(lit(0), dict_of([(lit("exp_avg"), t)]))])
    body = dict_of(
        [
            (lit("state_dict"), dict_of([(lit("fc.weight"), t), (lit("fc.bias"), t)])),
            (lit("optimizer"), dict_of([(lit("state"), state)])),
            (lit("layers"), list_of([t, b"N", t])),
            (lit("epoch"), lit(3)),
        ]
    )
    path = write_zip(tmp_path / "nested.pt", pkl(body), {"0": f32(1, 2, 3, 4)})
    with open_checkpoint(path) as ckpt:
        assert ckpt.kind == "nested"
        assert list(ckpt) == ["state_dict.fc.weight", "state_dict.fc.bias",
                              "optimizer.state.0.exp_avg", "layers.0", "layers.2"]  # fmt: skip
        assert ckpt.structure == Structure(
            0,
            {"state_dict": 2, "optimizer.state.0": 1, "layers": 2},
            None,
            ("state_dict", "optimizer", "layers", "epoch"),
        )
        assert ckpt.notes[0].startswith("nested checkpoint: tensors are under 'state_dict' (2)")


def test_bare_tensor_and_empty_file(tmp_path: Path) -> None:
    t = tensor_v2(storage_pid("FloatStorage", "0", 2), 0, (2,), (1,))
    path = write_zip(tmp_path / "t.pt", pkl(t), {"0": f32(1, 2)})
    with open_checkpoint(path) as ckpt:
        assert (ckpt.kind, list(ckpt)) == ("tensor", ["tensor"])
    path = write_zip(tmp_path / "e.pt", pkl(dict_of([(lit("epoch"), lit(1))])), {})
    with open_checkpoint(path) as ckpt:
        assert (ckpt.kind, len(ckpt)) == ("empty", 0)


def test_torchscript_uses_code_member_lists(tmp_path: Path) -> None:
    w = tensor_v2(storage_pid("FloatStorage", "0", 2), 0, (2,), (1,))
    extra_attr = tensor_v2(storage_pid("FloatStorage", "1", 1), 0, (1,), (1,))
    lin = obj("__torch__.torch.nn.modules.linear.___torch_mangle_0", "Linear",
              dict_of([(lit("training"), b"\x88"), (lit("weight"), w)]))  # fmt: skip
    root = obj("__torch__", "M", dict_of([(lit("fc"), lin), (lit("cache"), extra_attr)]))
    code = {
        "code/__torch__.py": b"class M(Module):\n  __parameters__ = []\n  __buffers__ = []\n",
        "code/__torch__/torch/nn/modules/linear.py": (
            b'class Linear(Module):\n  __parameters__ = ["weight", ]\n  __buffers__ = []\n'
        ),
        "constants.pkl": pkl(b")"),
    }
    path = write_zip(tmp_path / "ts.pt", pkl(root), {"0": f32(1, 2), "1": f32(3)}, extra=code)
    with open_checkpoint(path) as ckpt:
        assert (ckpt.format, ckpt.kind) == ("torchscript", "torchscript")
        assert list(ckpt) == ["fc.weight"]
        assert ckpt["fc.weight"].module_type == "Linear"


# --- legacy and plain pickles ---------------------------------------------------------------


def test_legacy_stream_with_storage_view(tmp_path: Path) -> None:
    # Old storage views: ('storage', type, root, loc, root_numel, (view_key, offset, size)).
    def pid(view: bytes) -> bytes:
        return b"(" + lit("storage") + glob("torch", "FloatStorage") + lit("140") + lit("cpu") \
            + lit(6) + view + b"tQ"  # fmt: skip

    body = dict_of(
        [
            (lit("whole"), tensor_v2(pid(b"N"), 0, (6,), (1,))),
            (lit("part"), tensor_v2(pid(lit(("141", 2, 3))), 1, (2,), (1,))),
        ]
    )
    path = write_legacy(tmp_path / "legacy.pt", body, [("140", 6, f32(0, 1, 2, 3, 4, 5))])
    with open_checkpoint(path) as ckpt:
        assert ckpt.format == "pytorch-legacy"
        np.testing.assert_array_equal(ckpt["whole"].load(), [0, 1, 2, 3, 4, 5])
        np.testing.assert_array_equal(ckpt["part"].load(), [3, 4])  # view offset 2 + offset 1


def test_plain_pickle_with_storage_by_value(tmp_path: Path) -> None:
    inner = bytearray()
    legacy = write_legacy(tmp_path / "inner", storage_pid("FloatStorage", "7", 2, legacy=True),
                          [("7", 2, f32(1.5, 2.5))])  # fmt: skip
    inner += legacy.read_bytes()
    storage = glob("torch.storage", "_load_from_bytes") + b"(" + glob("_codecs", "encode")
    storage += b"(" + lit(inner.decode("latin-1")) + lit("latin1") + b"tRtR"
    body = tensor_v2(b"", 0, (2,), (1,)).replace(b"(", b"(" + storage, 1)
    path = tmp_path / "plain.pkl"
    path.write_bytes(pkl(dict_of([(lit("w"), body)])))
    with open_checkpoint(path) as ckpt:
        assert ckpt.format == "pickle"
        np.testing.assert_array_equal(ckpt["w"].load(), [1.5, 2.5])


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [10, 100, 400, -30, -1])
def test_truncated_zip_is_an_input_error(tmp_path: Path, cut: int) -> None:
    raw = _min_zip(tmp_path).read_bytes()
    path = tmp_path / "cut.pt"
    path.write_bytes(raw[:cut])
    with pytest.raises(InputError):
        open_checkpoint(path).close()


def test_random_bytes_and_broken_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for index in range(30):
        path = tmp_path / f"r{index}.pt"
        head = [b"PK\x03\x04", b"\x80\x02", b"\x80\x04\x95", b""][index % 4]
        path.write_bytes(head + rng.integers(0, 256, 300, dtype=np.uint8).tobytes())
        with pytest.raises(InputError):
            open_checkpoint(path).close()
    (tmp_path / "abc.pt").write_bytes(b"abc")
    with pytest.raises(InputError):
        open_checkpoint(tmp_path / "abc.pt")


def test_memo_index_and_nesting_bombs_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "memo.pkl"
    path.write_bytes(b"\x80\x02]r\xff\xff\xff\x7f.")  # LONG_BINPUT 2**31-1: a 16 GiB memo
    with pytest.raises(CorruptCheckpointError, match="memo index"):
        open_checkpoint(path)
    path.write_bytes(b"\x80\x02)" + b"\x85" * 100_000 + b"N}(hNs.")  # tuple nested 100k deep
    with pytest.raises(CorruptCheckpointError, match="nested deeper"):
        open_checkpoint(path)
    path.write_bytes(b"\x80\x04\x8e" + struct.pack("<Q", 1 << 40) + b".")  # BINBYTES8 of 1 TiB
    with pytest.raises(CorruptCheckpointError, match="past the end"):
        open_checkpoint(path)


def test_header_only_listing(tmp_path: Path) -> None:
    """Listing a zip .pt reads no tensor bytes by any path (the format contract's spy).

    Sixty long tensor names make data.pkl long enough that every tensor lies past the fixed
    prefix format detection reads; ``big`` spans whole pages, which the memory-map guard covers.
    The legacy container is not checked: its reader scans each pickle through a bounded 64 KiB
    read-ahead window, which in a small file reaches into the storages after it.
    """
    names = [f"encoder.layers.{i}.self_attention.query_key_value.weight" for i in range(60)]
    entries = [
        *sample_entries(),
        array_entry("big", np.arange(4096, dtype="<f4")),
        *(array_entry(name, np.zeros(2, dtype="<f4")) for name in names),
    ]
    path = tmp_path / "model.pt"
    save_checkpoint(path, entries)
    listing = list_spied(path)
    assert len(listing.entries) == len(entries)
    assert_past_sniff(listing)
    assert_header_only(listing)


@pytest.mark.bounded
def test_listing_20000_tensors_is_fast(tmp_path: Path) -> None:
    n = 20_000
    items = [
        (lit(f"layer.{i}.weight"), tensor_v2(storage_pid("FloatStorage", str(i), 1), 0, (1,), (1,)))
        for i in range(n)
    ]
    blobs = {str(i): f32(i) for i in range(n)}
    path = write_zip(tmp_path / "many.pt", pkl(dict_of(items, ordered=True)), blobs)
    start = time.perf_counter()
    with open_checkpoint(path) as ckpt:
        assert len(ckpt) == n
        elapsed = time.perf_counter() - start
        assert float(ckpt["layer.19999.weight"].load()[0]) == 19999.0
    assert elapsed < time_bound(5.0), f"listing took {elapsed:.2f}s"


def test_zip_prefix_rules(tmp_path: Path) -> None:
    path = tmp_path / "two.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("a/data.pkl", pkl(b"}"))
        zf.writestr("b/data.pkl", pkl(b"}"))
    with pytest.raises(CorruptCheckpointError, match="several checkpoints"):
        open_checkpoint(path)
    with zipfile.ZipFile(path, "w") as zf:  # an .npz (NumPy's reader says what is wrong)
        zf.writestr("x.npy", b"\x93NUMPY")
    with pytest.raises(InputError, match=r"\.npy"):
        open_checkpoint(path)
    with zipfile.ZipFile(path, "w") as zf:  # .npy records after another: not an .npz either
        zf.writestr("notes.txt", b"")
        zf.writestr("x.npy", b"\x93NUMPY")
    with pytest.raises(InputError, match="npz"):
        open_checkpoint(path)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("__MACOSX/a/data.pkl", b"junk")
        zf.writestr("a/data.pkl", pkl(b"}"))
    path.write_bytes(buffer.getvalue())
    with open_checkpoint(path) as ckpt:
        assert ckpt.kind == "empty"


# --- exact bounds (issue 17: each test fails on a one-character mutant of the check) -----------


@pytest.mark.parametrize(
    ("offset", "size", "stride"),
    [
        (1, (2,), (1,)),  # contiguous from offset 1: the last element is 2
        (0, (2,), (3,)),  # strided: elements 0 and 3
        (0, (2, 2), (1, 3)),  # strided 2-d: the last element is 1 + 3 = 4
        (2, (3,), (1,)),  # contiguous from offset 2: the last element is 4
    ],
)
def test_view_one_element_past_its_storage_is_corrupt(
    tmp_path: Path, run_cli, offset: int, size: tuple[int, ...], stride: tuple[int, ...]
) -> None:
    # The storage holds one element fewer than the view needs: `last >= count` must refuse it.
    needed = offset + sum((n - 1) * st for n, st in zip(size, stride, strict=True)) + 1
    short = storage_pid("FloatStorage", "0", needed - 1)
    body = pkl(dict_of([(lit("w"), tensor_v2(short, offset, size, stride))]))
    path = write_zip(tmp_path / "past.pt", body, {"0": f32(*range(needed - 1))})
    with (
        pytest.raises(CorruptCheckpointError, match=rf"'w' reads element {needed - 1} of a"),
        open_checkpoint(path),
    ):  # closed again if a weakened check lets it open
        pass
    result = run_cli("ls", path)
    assert result.code == 3
    assert "reads element" in result.stderr
    # ... and with the missing element present, the same view loads
    fits = storage_pid("FloatStorage", "0", needed)
    body = pkl(dict_of([(lit("w"), tensor_v2(fits, offset, size, stride))]))
    whole = write_zip(tmp_path / "fits.pt", body, {"0": f32(*range(needed))})
    base = np.arange(needed, dtype="<f4")
    expected = np.lib.stride_tricks.as_strided(
        base[offset:], shape=size, strides=[st * 4 for st in stride]
    )
    with open_checkpoint(whole) as ckpt:
        np.testing.assert_array_equal(ckpt["w"].load(), expected)


def _legacy_view(tmp_path: Path, view_offset: int, view_size: int, size: int) -> Path:
    pid = (b"(" + lit("storage") + glob("torch", "FloatStorage") + lit("140") + lit("cpu")
           + lit(6) + lit(("141", view_offset, view_size)) + b"tQ")  # fmt: skip
    body = dict_of([(lit("part"), tensor_v2(pid, 0, (size,), (1,)))])
    return write_legacy(tmp_path / "legacy.pt", body, [("140", 6, f32(0, 1, 2, 3, 4, 5))])


def test_legacy_storage_view_bounds_are_exact(tmp_path: Path) -> None:
    # a view of elements 3..5 ends exactly at the storage's end: fine
    with open_checkpoint(_legacy_view(tmp_path, 3, 3, 3)) as ckpt:
        np.testing.assert_array_equal(ckpt["part"].load(), [3, 4, 5])
    with (
        pytest.raises(CorruptCheckpointError, match="view of '140' exceeds its storage"),
        open_checkpoint(_legacy_view(tmp_path, 4, 3, 2)),
    ):
        pass
    # the tensor may use the whole view but not one element more
    with (
        pytest.raises(CorruptCheckpointError, match="reads element 3"),
        open_checkpoint(_legacy_view(tmp_path, 2, 3, 4)),
    ):
        pass


def _zip_with_last_record(tmp_path: Path, grow: int) -> Path:
    """A zip whose stored ``data/0`` is the last record, its sizes grown by ``grow`` bytes.

    The central directory follows the record, so a grown record runs into the directory.
    """
    numel = 2 + grow // 4
    body = dict_of([(lit("w"), tensor_v2(storage_pid("FloatStorage", "0", numel), 0, (numel,),
                                         (1,)))])  # fmt: skip
    path = tmp_path / "grown.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", pkl(body))
        zf.writestr("archive/byteorder", b"little")
        zf.writestr("archive/version", b"3\n")
        zf.writestr("archive/data/0", f32(1.5, -2.0))
    raw = bytearray(path.read_bytes())
    entry = raw.find(b"archive/data/0", raw.find(b"PK\x01\x02")) - 46
    assert raw[entry : entry + 4] == b"PK\x01\x02"
    for field in (20, 24):  # compressed and uncompressed size
        (value,) = struct.unpack_from("<I", raw, entry + field)
        struct.pack_into("<I", raw, entry + field, value + grow)
    path.write_bytes(bytes(raw))
    return path


def test_stored_record_running_into_the_central_directory_is_corrupt(
    tmp_path: Path, run_cli
) -> None:
    # 4 bytes more than the record holds: they would be the central directory's signature
    path = _zip_with_last_record(tmp_path, 4)
    with (
        pytest.raises(CorruptCheckpointError, match="runs past the start of the central"),
        open_checkpoint(path) as ckpt,
    ):
        ckpt["w"].load()
    result = run_cli("ls", path)
    assert result.code == 3
    assert "central directory" in result.stderr
    with open_checkpoint(_zip_with_last_record(tmp_path, 0)) as ckpt:  # the unchanged record
        np.testing.assert_array_equal(ckpt["w"].load(), [1.5, -2.0])


def test_zip_local_headers_are_read_without_the_memory_map(monkeypatch):
    """A fault on a mapped page-cache folio can map all of it (up to 2 MiB): reading the local
    headers through the map once took opening a 64-record .pt from 15 to 146 MiB resident."""
    from ckptctl.formats.pytorch._zipdir import ZipRecords
    from ckptctl.sources import ByteSource

    path = VALID / "pytorch" / "min_zip.pt"
    raw = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
    expected, blind = {}, bytearray(raw)
    for info in infos:
        n, m = struct.unpack_from("<HH", raw, info.header_offset + 26)
        expected[info.filename] = info.header_offset + 30 + n + m
        blind[info.header_offset : info.header_offset + 30] = bytes(30)
    # the map shows the directory but no local header: only pread sees them
    monkeypatch.setattr(ByteSource, "buffer", property(lambda self: memoryview(bytes(blind))))
    with ByteSource(path) as source:
        records = ZipRecords(source)
        got = {name: records.data_offset(info) for name, info in records.infos.items()}
    assert got == expected
    assert len(expected) >= 4

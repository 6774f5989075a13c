"""Burn records from before 0.22 (burn-mpk, burn-mpk-gz, burn-json, burn-json-gz): read, migrate.

Fixtures come from ``fixtures/make_burn_records.py``; the real burn 0.17 record is in
``../shared/corpus/burn-records`` (corpus tier).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import struct
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest

from ckptctl import (
    CkptError,
    CorruptCheckpointError,
    InputError,
    UnsupportedError,
    open_checkpoint,
)
from ckptctl.formats import read_layout
from ckptctl.formats.burnpack import format_param_id
from tests.conftest import CORPUS, VALID, time_bound
from tests.contract import assert_header_only, list_spied

RECORDS = VALID / "burn-records"
REAL = CORPUS / "burn-records" / "modern-lstm-model.mpk"
VARIANTS = {
    "mpk": "burn-mpk",
    "mpk.gz": "burn-mpk-gz",
    "json": "burn-json",
    "json.gz": "burn-json-gz",
}

MODEL_NAMES = [
    "fc.weight",
    "fc.bias",
    "norm.gamma",
    "norm.beta",
    "norm.running_mean",
    "layers.0.weight",
    "layers.1.weight",
    "block.Conv.weight",
    "steps",
    "mask",
]


def fingerprint(path: Path) -> list[object]:
    """Names, dtypes, shapes, ids, byte hashes and scalars of every entry."""
    with open_checkpoint(path) as ckpt:
        rows: list[object] = [
            (e.name, e.dtype.value, e.shape, e.nbytes, e.param_id, _sha(e.data.read()))
            for e in ckpt.values()
        ]
        rows.append(sorted((k, json.dumps(v)) for k, v in ckpt.scalars.items()))
        return rows


def _sha(data: object) -> str:
    return hashlib.sha256(bytes(data)).hexdigest()  # type: ignore[call-overload]  # buffers


def _decoded(path: Path) -> dict[str, object]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if raw.lstrip()[:1] == b"{":
        return json.loads(raw)  # type: ignore[no-any-return]
    return msgpack.unpackb(raw, raw=False)  # type: ignore[no-any-return]


def _walk_params(node: object, path: list[str], out: dict[str, dict[str, object]]) -> None:
    if isinstance(node, dict):
        if set(node) == {"id", "param"}:
            out[".".join(path)] = node
            return
        for key, value in node.items():
            _walk_params(value, [*path, key], out)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _walk_params(value, [*path, str(i)], out)


# --- listing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_model_lists_field_paths_with_ids(variant: str) -> None:
    path = RECORDS / f"model.{variant}"
    params: dict[str, dict[str, object]] = {}
    _walk_params(_decoded(path)["item"], [], params)
    with open_checkpoint(path) as ckpt:
        assert ckpt.format == VARIANTS[variant]
        assert list(ckpt) == MODEL_NAMES
        assert set(ckpt.metadata) == {"float", "int", "format", "version", "settings"}
        assert ckpt.metadata["version"] == "0.17.0"
        for name, entry in ckpt.items():
            param = params[name]
            assert format_param_id(entry.param_id).startswith(str(param["id"]))  # type: ignore[arg-type]
            tensor = param["param"]
            assert isinstance(tensor, dict)
            assert list(entry.shape) == tensor["shape"]
            assert bytes(entry.data.read()) == bytes(tensor["bytes"])
        assert ckpt["steps"].dtype.value == "I64"
        assert ckpt["mask"].load().tolist() == [True, False, True]
        # the 10-character (6-byte, burn ~0.14) id pads with zeros
        assert ckpt["norm.running_mean"].param_id is not None
        assert ckpt["norm.running_mean"].param_id < 1 << 48


@pytest.mark.parametrize("stem", ["model", "optim-adam"])
def test_variants_give_identical_results(stem: str) -> None:
    prints = [fingerprint(RECORDS / f"{stem}.{v}") for v in VARIANTS]
    assert all(p == prints[0] for p in prints)


def test_uncompressed_payloads_are_file_ranges() -> None:
    raw = (RECORDS / "model.mpk").read_bytes()
    with open_checkpoint(RECORDS / "model.mpk") as ckpt:
        for entry in ckpt.values():
            assert entry.offset is not None
            assert raw[entry.offset : entry.offset + entry.nbytes] == bytes(entry.data.read())


def test_header_only_listing(tmp_path: Path) -> None:
    """Listing an uncompressed record reads no payload byte (spied in a child process)."""
    rec = _decoded(RECORDS / "model.mpk")
    rec["metadata"]["settings"] = "FullPrecisionSettings" + " " * 5000  # type: ignore[index]
    path = tmp_path / "long.mpk"
    path.write_bytes(msgpack.packb(rec, use_bin_type=True))
    listing = list_spied(path)
    assert [n for n, _, _ in listing.entries] == MODEL_NAMES
    assert_header_only(listing)


def test_optimizer_records_in_022_layout() -> None:
    with open_checkpoint(RECORDS / "optim-adam.mpk") as ckpt:
        names = list(ckpt)
        pid = ckpt[names[0]].param_id
        assert names[:2] == [f"{pid}.momentum.moment_1", f"{pid}.momentum.moment_2"]
        assert all(e.param_id == int(e.name.split(".")[0]) for e in ckpt.values())
        assert ckpt.scalars[f"{pid}.__rank"] == {"UInt": 2}
        assert ckpt.scalars[f"{pid}.momentum.time"] == {"UInt": 7}
        assert any("Adam/AdamW" in n for n in ckpt.notes)
    expected = {
        "optim-sgd": ("momentum.velocity", "SGD"),
        "optim-rmsprop": ("square_avg.square_avg", "RMSProp"),
        "optim-adagrad": ("lr_decay.sum", "AdaGrad"),
        "optim-custom": ("trace.history.0", "not a known burn optimizer"),
    }
    for stem, (field, note) in expected.items():
        with open_checkpoint(RECORDS / f"{stem}.mpk") as ckpt:
            assert all(n.split(".", 1)[1] for n in ckpt)
            assert any(n.endswith(field) for n in ckpt), stem
            assert any(note in n for n in ckpt.notes), (stem, ckpt.notes)
    with open_checkpoint(RECORDS / "optim-custom.mpk") as ckpt:
        pid = next(iter(ckpt.values())).param_id
        assert ckpt.scalars[f"{pid}.trace.history.len"] == {"UInt": 1}
        assert ckpt.scalars[f"{pid}.trace.decay"] == {"Float": 0.5}
        assert ckpt.scalars[f"{pid}.warm"] == {"Bool": True}


def test_scheduler_records() -> None:
    with open_checkpoint(RECORDS / "scheduler-exponential.mpk") as ckpt:
        assert len(ckpt) == 0
        assert ckpt.scalars == {"0.previous_lr": {"Float": 0.0025}}
    with open_checkpoint(RECORDS / "scheduler-composed.mpk") as ckpt:
        assert ckpt.scalars == {
            "0.0.current_iter": {"UInt": 10},
            "0.1.remaining_iters": {"UInt": 5},
            "0.2.step": {"Float": 3.0},
        }
    with open_checkpoint(RECORDS / "scheduler-cosine.mpk") as ckpt:
        assert ckpt.scalars == {}
        assert any("integer 42" in n for n in ckpt.notes)


def test_bool_stores_and_flex32() -> None:
    with open_checkpoint(RECORDS / "stores-0.21.mpk") as ckpt:
        u32 = ckpt["mask_u32"]
        assert u32.dtype.value == "BOOL"
        assert u32.nbytes == 3
        assert bytes(u32.data.read()) == b"\x01\x00\x01"
        assert u32.source_dtype == {"Bool": "U32"}
        assert ckpt["flex"].dtype.value == "F32"
        assert ckpt["flex"].source_dtype == "Flex32"


def test_uuid_ids_are_kept_without_id() -> None:
    with open_checkpoint(RECORDS / "uuid-id.mpk") as ckpt:
        assert ckpt["w"].param_id is None
        assert any("UUID" in n for n in ckpt.notes)


def test_half_precision_is_kept() -> None:
    with open_checkpoint(RECORDS / "half.mpk") as ckpt:
        assert ckpt["fc.weight"].dtype.value == "F16"
        assert any("HalfPrecisionSettings" in n for n in ckpt.notes)


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("bincode.bin", "BinFileRecorder"),
        ("legacy-0.12.mpk", "pre-0.14"),
    ],
)
def test_unsupported_records_exit_4(run_cli, name: str, text: str) -> None:
    result = run_cli("ls", RECORDS / name)
    assert result.code == 4, result
    assert text in result.stderr
    assert "hint:" in result.stderr


def test_gzipped_bincode_is_recognised(tmp_path: Path, run_cli) -> None:
    path = tmp_path / "model.bin.gz"
    path.write_bytes(gzip.compress((RECORDS / "bincode.bin").read_bytes()))
    assert run_cli("ls", path).code == 4


def test_quantized_tensor_is_unsupported(tmp_path: Path) -> None:
    rec = _decoded(RECORDS / "half.mpk")
    rec["item"]["fc"]["weight"]["param"]["dtype"] = {"QFloat": {"value": "Q8S"}}  # type: ignore[index]
    path = tmp_path / "q.mpk"
    path.write_bytes(msgpack.packb(rec, use_bin_type=True))
    with pytest.raises(UnsupportedError, match="quantized"):
        open_checkpoint(path)


def test_not_a_record_json_is_not_claimed(run_cli) -> None:
    index = {"metadata": {"total_size": 4}, "weight_map": {"a": "x.safetensors"}}
    assert run_cli("ls", "/dev/null").code == 3
    assert '"float"' not in json.dumps(index)


# --- conversion ------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_convert_to_bpk_and_safetensors(tmp_path: Path, run_cli, variant: str) -> None:
    src = RECORDS / f"model.{variant}"
    bpk, st = tmp_path / "model.bpk", tmp_path / "model.safetensors"
    assert run_cli("convert", src, bpk).code == 0
    assert run_cli("convert", src, st).code == 0
    want = fingerprint(src)
    assert fingerprint(bpk) == want
    got_st = fingerprint(st)
    assert [(r[0], r[5]) for r in got_st[:-1]] == [(r[0], r[5]) for r in want[:-1]]  # type: ignore[index]
    with open_checkpoint(bpk) as out:
        assert dict(out.metadata) == {}  # burn 0.22's ModuleRecord writes no metadata


def test_convert_bool_stores(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "s.bpk"
    assert run_cli("convert", RECORDS / "stores-0.21.mpk", out).code == 0
    with open_checkpoint(out) as ckpt:
        assert ckpt["mask_u32"].source_dtype == {"Bool": "U32"}
        assert ckpt["mask_u32"].load().tolist() == [True, False, True]
        assert ckpt["flex"].source_dtype == "Flex32"


def test_optimizer_with_paths_from_passes_verify(tmp_path: Path, run_cli) -> None:
    model, optim = tmp_path / "model.bpk", tmp_path / "optim.bpk"
    assert run_cli("convert", RECORDS / "model.mpk", model).code == 0
    result = run_cli(
        "convert", RECORDS / "optim-adam.mpk.gz", optim, "--paths-from", RECORDS / "model.json"
    )
    assert result.code == 0, result
    with open_checkpoint(optim) as ckpt, open_checkpoint(model) as m:
        names = {e.param_id: e.name for e in m.values()}
        assert ckpt.metadata
        assert all(names[int(k)] == v for k, v in ckpt.metadata.items())
        assert "norm.beta" not in ckpt.metadata.values()
        assert any(k.endswith(".__rank") for k in ckpt.scalars)
    verdict = run_cli("verify", "--optimizer", optim, model)
    assert verdict.code == 0, verdict
    assert (
        run_cli("verify", "--optimizer", RECORDS / "optim-adam.mpk", RECORDS / "model.mpk").code
        == 0
    )


def test_optimizer_without_paths_from_warns(tmp_path: Path, run_cli) -> None:
    result = run_cli("convert", RECORDS / "optim-sgd.mpk", tmp_path / "o.bpk")
    assert result.code == 0
    assert "--paths-from" in result.stderr
    with open_checkpoint(tmp_path / "o.bpk") as ckpt:
        assert dict(ckpt.metadata) == {}


def test_paths_from_needs_an_optimizer_record(tmp_path: Path, run_cli) -> None:
    result = run_cli(
        "convert", RECORDS / "model.mpk", tmp_path / "m.bpk", "--paths-from", RECORDS / "model.mpk"
    )
    assert result.code == 2
    assert not (tmp_path / "m.bpk").exists()


def test_scheduler_migration(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "scheduler.bpk"
    assert run_cli("convert", RECORDS / "scheduler-composed.mpk", out).code == 0
    with open_checkpoint(out) as ckpt:
        assert ckpt.scalars["0.0.current_iter"] == {"UInt": 10}
    refused = run_cli("convert", RECORDS / "scheduler-cosine.mpk", tmp_path / "c.bpk")
    assert refused.code == 4
    assert "cosine, linear, noam or step" in refused.stderr
    assert not (tmp_path / "c.bpk").exists()


# --- header ----------------------------------------------------------------------------------


def _tiles(regions: list[tuple[int, int]], size: int) -> bool:
    pos = 0
    for start, end in regions:
        if start != pos or end < start:
            return False
        pos = end
    return pos == size


@pytest.mark.parametrize("name", ["model.mpk", "model.json", "optim-adam.mpk"])
def test_header_regions_tile_the_file(name: str) -> None:
    layout = read_layout(RECORDS / name)
    assert _tiles([(r.start, r.end) for r in layout.regions], layout.file_size)
    tensors = [r.name for r in layout.regions if r.kind == "tensor"]
    with open_checkpoint(RECORDS / name) as ckpt:
        assert tensors == list(ckpt)
    assert any(r.kind == "metadata" for r in layout.regions)


@pytest.mark.parametrize("name", ["model.mpk.gz", "model.json.gz"])
def test_header_of_gzip_accounts_for_the_decompressed_record(name: str) -> None:
    layout = read_layout(RECORDS / name)
    assert _tiles([(r.start, r.end) for r in layout.regions], layout.file_size)
    facts = layout.facts
    inner = facts["decompressed_regions"]
    assert _tiles([(r["start"], r["end"]) for r in inner], facts["decompressed_bytes"])
    assert [r["name"] for r in inner if r["kind"] == "tensor"] == MODEL_NAMES
    plain = gzip.decompress((RECORDS / name).read_bytes())
    assert facts["decompressed_bytes"] == len(plain)


# --- cross-check with the msgpack package ----------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in RECORDS.glob("*.mpk")))
def test_scanner_agrees_with_msgpack(name: str) -> None:
    path = RECORDS / name
    decoded = msgpack.unpackb(path.read_bytes(), raw=False)
    assert set(decoded) == {"metadata", "item", "_b"}
    try:
        ckpt = open_checkpoint(path)
    except UnsupportedError:
        return
    with ckpt:
        assert dict(ckpt.metadata) == decoded["metadata"]
        blobs = _blobs(decoded["item"])
        assert sorted(
            _sha(e.data.read()) for e in ckpt.values() if "bool_store" not in e.extra
        ) == sorted(_sha(b) for b in blobs if not _is_u32_bool(b, ckpt))


def _blobs(node: object) -> list[bytes]:
    if isinstance(node, bytes):
        return [node]
    if isinstance(node, dict):
        return [b for v in node.values() for b in _blobs(v)]
    if isinstance(node, list):
        return [b for v in node for b in _blobs(v)]
    return []


def _is_u32_bool(blob: bytes, ckpt: object) -> bool:
    return blob == np.array([1, 0, 7], "<u4").tobytes()


# --- hostile input ---------------------------------------------------------------------------

HEAD = (
    b"\x83\xa8metadata\x85\xa5float\xa3f32\xa3int\xa3i64\xa6format\xa1x\xa7version\xa60.17.0"
    b"\xa8settings\xa1s\xa4item"
)


def _tensor(body: bytes, dtype: bytes = b"\xa3F32", shape: bytes = b"\x91\x01") -> bytes:
    return b"\x83\xa5bytes" + body + b"\xa5shape" + shape + b"\xa5dtype" + dtype


def _record(item: bytes) -> bytes:
    return HEAD + item + b"\xa2_b\x90"


def _param(tensor: bytes, pid: bytes = b"\xadcen5pokd0kdi0") -> bytes:
    return b"\x81\xa1w\x82\xa2id" + pid + b"\xa5param" + tensor


GOOD = _record(_param(_tensor(b"\xc4\x04" + b"\x00\x00\x80\x3f")))

HOSTILE = {
    "truncated payload": GOOD[: GOOD.index(b"\x00\x00\x80\x3f") + 2],
    "length past EOF": _record(_param(_tensor(b"\xc6\xff\xff\xff\xf0" + b"\x00" * 4))),
    "nesting 10000 deep": HEAD + b"\x91" * 10_000 + b"\xc0",
    "2^32-element array": HEAD + b"\xdd\xff\xff\xff\xff" + b"\xc0" * 16,
    "2^32-entry map": HEAD + b"\xdf\xff\xff\xff\xff" + b"\xa1a\xc0" * 8,
    "duplicate keys": _record(
        b"\x82\xa1w" + _param(_tensor(b"\xc4\x04" + b"\x00" * 4))[4:] + b"\xa1w\xc0"
    ),
    "wrong dtype name": _record(_param(_tensor(b"\xc4\x04" + b"\x00" * 4, dtype=b"\xa3F31"))),
    "bytes vs shape": _record(_param(_tensor(b"\xc4\x04" + b"\x00" * 4, shape=b"\x91\x02"))),
    "bad param id": _record(_param(_tensor(b"\xc4\x04" + b"\x00" * 4), pid=b"\xa3zzz")),
    "ext type": _record(b"\xd4\x01\x00"),
    "non-string key": _record(b"\x81\x01\xc0"),
    "no item": b"\x81\xa8metadata\x85\xa5float\xa3f32" + b"\xa3int\xa3i64" * 4,
}


def test_good_hostile_base_is_valid() -> None:
    assert msgpack.unpackb(GOOD)["item"]["w"]["param"]["shape"] == [1]


@pytest.mark.bounded
@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("wrap", ["mpk", "gz"])
def test_hostile_records_exit_3(tmp_path: Path, run_cli, case: str, wrap: str) -> None:
    data = HOSTILE[case]
    path = tmp_path / "bad.mpk"
    path.write_bytes(gzip.compress(data, mtime=0) if wrap == "gz" else data)
    started = time.monotonic()
    result = run_cli("ls", path)
    assert time.monotonic() - started < time_bound(10)
    assert result.code == 3, (case, result)
    lines = [ln for ln in result.stderr.splitlines() if not ln.startswith("hint:")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_hostile_json(tmp_path: Path, run_cli) -> None:
    head = b'{"metadata": {"float": "f32", "int": "i64", "format": "x", "version": "0.17.0", '
    head += b'"settings": "s"}, "item": '
    cases = {
        "deep": head + b"[" * 10_000 + b"]" * 10_000 + b"}",
        "dup": head + b'{"a": 1, "a": 2}}',
        "bad byte": head
        + b'{"w": {"id": "cen5pokd0kdi0", "param": {"bytes": [0, 0, 300, 63], "shape": [1], '
        b'"dtype": "F32"}}}}',
        "count": head
        + b'{"w": {"id": "cen5pokd0kdi0", "param": {"bytes": [0, 0, 0], "shape": [1], '
        b'"dtype": "F32"}}}}',
        "unclosed": head + b'{"w": [1, 2, 3',
        "trailing": head + b"null} junk",
    }
    for case, data in cases.items():
        path = tmp_path / f"{case}.json"
        path.write_bytes(data)
        result = run_cli("convert", path, tmp_path / f"{case}.safetensors")
        assert result.code == 3, (case, result)


def test_mutated_records_raise_only_ckpt_errors(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    for name in ("model.mpk", "model.json", "optim-adam.mpk"):
        good = (RECORDS / name).read_bytes()
        bad = tmp_path / name
        for _ in range(150):
            blob = bytearray(good)
            for pos in rng.integers(0, len(blob), size=int(rng.integers(1, 6))):
                blob[pos] = int(rng.integers(0, 256))
            bad.write_bytes(bytes(blob))
            try:
                with open_checkpoint(bad) as ckpt:
                    for entry in ckpt.values():
                        entry.load()
                read_layout(bad)
            except CkptError:
                pass


def test_truncations_are_corrupt(tmp_path: Path) -> None:
    for name in ("model.mpk", "model.mpk.gz", "model.json", "model.json.gz"):
        full = (RECORDS / name).read_bytes()
        cut = tmp_path / name
        for size in sorted({40, len(full) // 3, len(full) // 2, len(full) - 9, len(full) - 1}):
            cut.write_bytes(full[:size])
            # a gzip file cut very short may not even show what it compresses (unknown format)
            error = InputError if size < 100 else CorruptCheckpointError
            with pytest.raises(error), open_checkpoint(cut) as ckpt:
                for entry in ckpt.values():
                    entry.load()


def test_big_declared_string_is_refused_fast(tmp_path: Path) -> None:
    path = tmp_path / "s.mpk"
    path.write_bytes(HEAD + b"\xdb" + struct.pack(">I", 1 << 31) + b"x" * 10)
    with pytest.raises(CorruptCheckpointError, match=r"longer|limit"):
        open_checkpoint(path)


# --- the real burn 0.17 record (corpus tier) -------------------------------------------------


@pytest.mark.corpus
def test_real_record_lists_and_converts(tmp_path: Path, run_cli) -> None:
    if not REAL.exists():
        pytest.skip("../shared/corpus is not available")
    decoded = msgpack.unpackb(REAL.read_bytes(), raw=False)
    params: dict[str, dict[str, object]] = {}
    _walk_params(decoded["item"], [], params)
    with open_checkpoint(REAL) as ckpt:
        assert ckpt.format == "burn-mpk"
        assert ckpt.metadata["version"] == "0.17.0"
        assert ckpt.metadata["settings"] == "HalfPrecisionSettings"
        assert list(ckpt) == list(params)
        assert len(ckpt) == 42
        for name, entry in ckpt.items():
            param = params[name]
            tensor = param["param"]
            assert isinstance(tensor, dict)
            assert entry.dtype.value == tensor["dtype"] == "F16"
            assert list(entry.shape) == tensor["shape"]
            assert entry.nbytes == len(tensor["bytes"])
            assert entry.param_id is not None
            assert format_param_id(entry.param_id) == param["id"]
    want = fingerprint(REAL)
    for out in ("lstm.bpk", "lstm.safetensors"):
        assert run_cli("convert", REAL, tmp_path / out).code == 0
    assert fingerprint(tmp_path / "lstm.bpk") == want
    got = fingerprint(tmp_path / "lstm.safetensors")
    assert [(r[0], r[5]) for r in got[:-1]] == [(r[0], r[5]) for r in want[:-1]]  # type: ignore[index]


@pytest.mark.corpus
def test_real_record_in_every_encoding(tmp_path: Path) -> None:
    """The real record re-encoded as the gzip and JSON recorders would: identical results."""
    if not REAL.exists():
        pytest.skip("../shared/corpus is not available")
    raw = REAL.read_bytes()
    decoded = msgpack.unpackb(raw, raw=False)

    def plain(node: object) -> object:
        if isinstance(node, bytes):
            return list(node)
        if isinstance(node, dict):
            return {k: plain(v) for k, v in node.items()}
        if isinstance(node, list):
            return [plain(v) for v in node]
        return node

    text = json.dumps(plain(decoded), indent=2).encode()
    files = {
        "r.mpk.gz": gzip.compress(raw),
        "r.json": text,
        "r.json.gz": gzip.compress(json.dumps(plain(decoded), separators=(",", ":")).encode()),
    }
    want = fingerprint(REAL)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        assert fingerprint(tmp_path / name) == want, name


@pytest.mark.parametrize("mark", [64, 1 << 28])
def test_gzip_reads_in_any_order(monkeypatch: pytest.MonkeyPatch, mark: int) -> None:
    """Backward reads restart from a saved decompressor state, and give the same bytes."""
    from ckptctl.formats.burnrecord import reader

    monkeypatch.setattr(reader, "SEEK_MARK_BYTES", mark)
    with open_checkpoint(RECORDS / "model.mpk") as plain:
        want = {name: bytes(e.data.read()) for name, e in plain.items()}
    with open_checkpoint(RECORDS / "model.mpk.gz") as ckpt:
        for name in reversed(list(ckpt)):
            assert bytes(ckpt[name].data.read()) == want[name]
        entry = ckpt["layers.0.weight"]
        assert bytes(entry.data.read_range(8, 16)) == want["layers.0.weight"][8:24]
        assert bytes(entry.data.read_range(0, 8)) == want["layers.0.weight"][:8]

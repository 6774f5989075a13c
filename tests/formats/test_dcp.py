"""torch.distributed.checkpoint directories, against what torch's own ``dcp_to_torch_save``
returns for them (``fixtures/valid/distributed/truth.json``, written by make_distributed.py)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from safetensors.numpy import load_file

from ckptctl import CorruptCheckpointError, UnsafePickleError, open_checkpoint
from ckptctl.formats import read_layout, resolve_path
from ckptctl.formats.pytorch import _unpickler
from ckptctl.model import CheckpointKind
from ckptctl.safety import Verdict
from ckptctl.sources import Interleaved
from tests.conftest import VALID
from tests.formats._shares import assert_shares_equal_one_run

DIST = VALID / "distributed"
TRUTH = json.loads((DIST / "truth.json").read_text())
CASES = sorted(TRUTH)


def _hash(raw: bytes | memoryview) -> str:
    return hashlib.sha256(raw).hexdigest()


def copy_case(case: str, tmp_path: Path) -> Path:
    target = tmp_path / case
    shutil.copytree(DIST / case, target)
    return target


def test_every_producer_has_a_fixture() -> None:
    assert set(CASES) == {
        "dcp_single", "dcp_zstd", "fsdp2", "fsdp1", "dtensor_shard0", "dtensor_shard1",
        "dtensor_replicate", "dtensor_2d", "megatron_torch_dist", "dcp_safetensors",
        "dtensor_shard1_safetensors",
    }  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_tensors_equal_dcp_to_torch_save(case: str) -> None:
    """Names (in order), dtypes, global shapes and bytes, assembled from the chunks."""
    with open_checkpoint(DIST / case) as ckpt:
        assert ckpt.format == "dcp"
        got = [
            {"name": e.name, "dtype": e.dtype.value, "shape": list(e.shape),
             "sha256": _hash(e.data.read())}
            for e in ckpt.values()
        ]  # fmt: skip
    assert got == TRUTH[case]["tensors"]


@pytest.mark.parametrize("case", CASES)
def test_ranged_reads_agree_with_whole_reads(case: str) -> None:
    """Row-split tensors are read a range at a time without assembling them (what convert
    streams); odd range sizes cross chunk boundaries."""
    want = {t["name"]: t["sha256"] for t in TRUTH[case]["tensors"]}
    with open_checkpoint(DIST / case) as ckpt:
        for entry in ckpt.values():
            if not entry.data.is_ranged():
                continue
            step = 7
            raw = b"".join(
                bytes(entry.data.read_range(i, min(step, entry.nbytes - i)))
                for i in range(0, entry.nbytes, step)
            )
            assert _hash(raw) == want[entry.name]


@pytest.mark.parametrize(
    "case", ["dtensor_shard1", "dtensor_2d", "fsdp1", "dtensor_shard1_safetensors"]
)
def test_gathers_straight_into_the_tensor(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Column splits are read with preadv into their place (runs of every length here)."""
    from ckptctl.formats.dcp import _assemble

    monkeypatch.setattr(_assemble, "MIN_RUN_BYTES", 1)
    monkeypatch.setattr(_assemble, "MAX_IOVECS", 3)  # several calls per chunk
    used: list[bool] = []
    real = _assemble.scatter

    def spy(*args: Any) -> bool:
        used.append(real(*args))
        return used[-1]

    monkeypatch.setattr(_assemble, "scatter", spy)
    want = {t["name"]: t["sha256"] for t in TRUTH[case]["tensors"]}
    with open_checkpoint(DIST / case) as ckpt:
        for entry in ckpt.values():
            assert _hash(entry.data.read()) == want[entry.name]
    assert any(used)


def test_row_splits_are_copied_as_file_ranges(tmp_path: Path) -> None:
    with open_checkpoint(DIST / "dtensor_shard0") as ckpt:
        pieces = ckpt["weight"].data.file_pieces()
        assert pieces is not None
        assert [os.path.basename(s.path) for s, _, _ in pieces] == ["__0_0.distcp", "__1_0.distcp"]
        assert sum(n for _, _, n in pieces) == ckpt["weight"].nbytes
        assert ckpt["plain"].data.file_pieces() is None  # one chunk: one file range
        assert ckpt["plain"].data.file_range() is not None


@pytest.mark.parametrize("copy_bytes", [40, 4096])
@pytest.mark.parametrize("case", sorted(set(TRUTH) - {"dcp_zstd"}))
def test_convert_copies_column_splits_row_by_row_from_the_rank_files(
    case: str, copy_bytes: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tensor split by columns goes to the output as each row's part of every chunk, copied
    from the rank files (runs of every length here, many per copy buffer and across buffers;
    rows in lockstep a buffer-full of whole rows at a time), never assembled; the output is
    torch's tensors byte for byte."""
    from ckptctl.formats.dcp import _assemble
    from ckptctl.ops.convert import ConvertOptions, convert
    from ckptctl.sources import local

    monkeypatch.setattr(_assemble, "MIN_RUN_BYTES", 1)
    monkeypatch.setattr(local, "COPY_BYTES", copy_bytes)
    monkeypatch.setattr(local, "MAX_IOVECS", 3)
    ranges: list[tuple[str, int]] = []
    real = local.copy_ranges
    rows: list[int] = []
    copy_rows = local._Rows.copy

    def spy_rows(task: local._Rows, fd: int) -> int:
        rows.append(task.stop - task.first)
        return copy_rows(task, fd)

    monkeypatch.setattr(local._Rows, "copy", spy_rows)

    def spy(pieces: Any, out: Any) -> None:
        ranges.extend((os.path.basename(s.path), n) for s, _, n in pieces)
        real(pieces, out)

    monkeypatch.setattr("ckptctl.formats._base.copy_ranges", spy)
    read = _assemble.AssembledData.read
    monkeypatch.setattr(_assemble.AssembledData, "read", lambda self: pytest.fail("assembled"))
    out = tmp_path / "full.safetensors"
    with open_checkpoint(DIST / case) as ckpt:
        split = [e for e in ckpt.values() if e.data.file_pieces() is not None]
        convert(DIST / case, out, ConvertOptions())
    monkeypatch.setattr(_assemble.AssembledData, "read", read)
    raw = out.read_bytes()  # the format: 8-byte header length, JSON header, data
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    header.pop("__metadata__", None)
    got = {k: _hash(raw[8 + size + v["data_offsets"][0] : 8 + size + v["data_offsets"][1]])
           for k, v in header.items()}  # fmt: skip
    assert got == {t["name"]: t["sha256"] for t in TRUTH[case]["tensors"]}
    assert sum(n for _, n in ranges) == sum(e.nbytes for e in split)
    if case in ("dtensor_shard1", "dtensor_2d"):  # column splits: a range per row part
        assert len(ranges) > 2 * len(split)
        assert {name for name, _ in ranges} >= {"__0_0.distcp", "__1_0.distcp"}
    # dtensor_shard1's rows (24 and 8 bytes) are copied as whole rows; dtensor_2d is a mesh
    if case in ("dtensor_shard1", "dtensor_2d"):
        assert bool(rows) is (case == "dtensor_shard1")


@pytest.mark.parametrize(
    ("shape", "chunks", "lockstep"),
    [
        ((6, 8), [((0, 0), (6, 3)), ((0, 3), (6, 5))], True),  # columns, uneven widths
        ((6, 8), [((0, 5), (6, 3)), ((0, 0), (6, 5))], True),  # listed out of order
        ((2, 4, 6), [((0, 0, 0), (2, 4, 2)), ((0, 0, 2), (2, 4, 4))], True),  # last dim
        ((2, 4, 6), [((0, 0, 0), (2, 1, 6)), ((0, 1, 0), (2, 3, 6))], True),  # uneven middle
        ((2, 4, 6), [((0, 0, 0), (1, 4, 6)), ((1, 0, 0), (1, 4, 6))], True),  # first dim
        (
            (2, 4, 6),
            [
                ((0, 0, 0), (2, 2, 3)),
                ((0, 2, 3), (2, 2, 3)),
                ((0, 0, 3), (2, 2, 3)),
                ((0, 2, 0), (2, 2, 3)),
            ],
            False,
        ),  # a mesh on the last two dims
        ((4, 4), [((r, c), (2, 2)) for r in (0, 2) for c in (0, 2)], False),  # a 2x2 mesh
        ((4, 4), [((0, 0), (2, 4)), ((2, 0), (2, 4))], True),  # rows: one run each
        ((4, 4), [((2, 0), (2, 4)), ((0, 0), (2, 4))], True),
    ],
)
def test_runs_in_tensor_order(
    shape: tuple[int, ...], chunks: list[tuple[tuple[int, ...], tuple[int, ...]]], lockstep: bool
) -> None:
    """The runs of every chunk, merged into the tensor's byte order, equal the runs sorted by
    their place in the tensor, whether the chunks run in lockstep (no merge) or not."""
    from types import SimpleNamespace

    from ckptctl.dtypes import DType
    from ckptctl.formats.dcp import _assemble

    located: list[Any] = []
    truth: list[tuple[int, str, int, int]] = []
    for i, (offsets, sizes) in enumerate(chunks):
        entry = SimpleNamespace(shape=sizes, dtype=DType.F32)
        runs = _assemble.chunk_runs(shape, offsets, entry)  # type: ignore[arg-type]
        source, start = f"rank{i}", 1000 * (i + 1)
        located.append((source, start, runs))
        truth += [(place, source, start + k * runs.length, runs.length)
                  for k, place in enumerate(runs.starts())]  # fmt: skip
    truth.sort()
    assert sum(n for *_, n in truth) == 4 * math.prod(shape)
    assert _assemble._in_lockstep(located) is lockstep
    order = _assemble.in_tensor_order(located)
    assert isinstance(order, Interleaved) is lockstep
    got: list[Any] = list(order)
    assert got == [(source, offset, n) for _, source, offset, n in truth]
    assert list(_assemble._InTensorOrder(located)) == got  # the merge agrees in every case


def test_split_tensors_span_chunks_and_rank_files() -> None:
    with open_checkpoint(DIST / "dtensor_2d") as ckpt:
        assert ckpt["weight"].extra == {"chunks": "4", "rank_files": "4"}
        assert ckpt["plain"].extra["chunks"] == "1"
        assert ckpt.sharding is not None
        assert ckpt.sharding.shards == tuple(f"__{r}_0.distcp" for r in range(4))
    with open_checkpoint(DIST / "dtensor_shard0") as ckpt:
        assert ckpt["weight"].data.is_ranged()  # rows: streamed
    with open_checkpoint(DIST / "dtensor_shard1") as ckpt:
        assert not ckpt["weight"].data.is_ranged()  # columns: gathered


def test_single_process_checkpoint() -> None:
    """Model with a tied head, optimizer state, and the non-tensor values in the objects."""
    with open_checkpoint(DIST / "dcp_single") as ckpt:
        assert ckpt.kind is CheckpointKind.NESTED
        assert ckpt.structure is not None
        assert ckpt.structure.groups == {"model": 5, "optim": 9}
        assert (
            ckpt["model.head.weight"].load().tobytes()
            == ckpt["model.embed.weight"].load().tobytes()
        )
        # the values make_distributed.py saved
        assert ckpt.objects["step"] == 7
        assert ckpt.objects["run"] == "fixture"
        assert ckpt.objects["extra"] == {"milestones": [1, 2, 3], "done": False}
        assert ckpt.objects["optim"]["param_groups"]["0"]["lr"] == 0.001
        assert ckpt.objects["optim"]["param_groups"]["0"]["betas"] == [0.9, 0.999]


def test_megatron_torch_dist() -> None:
    """megatron-core's torch_dist: the DCP part, with common.pt's state in the objects."""
    with open_checkpoint(DIST / "megatron_torch_dist") as ckpt:
        assert [e.name for e in ckpt.values()] == ["decoder.weight", "decoder.bias"]
        assert ckpt.objects["iteration"] == 5
        assert ckpt.objects["args"] == {"lr": 0.1, "micro_batch_size": 2}
        assert any("Megatron-core torch_dist" in n for n in ckpt.notes)
        assert any("common.pt holds 1 tensor" in n for n in ckpt.notes)


def test_directory_resolves_to_its_metadata() -> None:
    assert resolve_path(DIST / "fsdp2") == os.path.join(DIST / "fsdp2", ".metadata")


def test_metadata_verdict_names_the_dcp_classes() -> None:
    """torch's DCP reader uses plain pickle.load: the DCP classes are safe for it, each named
    with the torch source it comes from (issue #44)."""
    with open_checkpoint(DIST / "fsdp1") as ckpt:
        assert ckpt.safety is not None
        assert ckpt.safety.verdict is Verdict.SAFE
        assert ckpt.safety.producer is not None
        assert ckpt.safety.producer.name == "DCP"
        reasons = {g.name: g.reason for g in ckpt.safety.globals}
        assert "metadata.py" in str(reasons["torch.distributed.checkpoint.metadata.Metadata"])
        assert "filesystem.py" in str(
            reasons["torch.distributed.checkpoint.filesystem._StorageInfo"]
        )
        assert any("pickle.load" in note for note in ckpt.notes)


@pytest.mark.parametrize("case", CASES)
def test_header_accounts_for_every_byte(case: str) -> None:
    layout = read_layout(DIST / case)
    assert layout.format == "dcp"
    files = {f["file"]: f for f in layout.header["files"]}
    assert sorted(files) == [f for f in TRUTH[case]["files"] if f.endswith(".distcp")]
    for name, facts in files.items():
        assert facts["bytes"] == (DIST / case / name).stat().st_size
        assert facts["unaccounted_bytes"] == 0  # torch writes items back to back
    assert layout.facts["unaccounted_bytes"] == 0


def test_missing_rank_file_fails_naming_it(tmp_path: Path, run_cli) -> None:
    case = copy_case("fsdp2", tmp_path)
    (case / "__1_0.distcp").unlink()
    with pytest.raises(CorruptCheckpointError, match=r"rank file '__1_0\.distcp' is missing"):
        open_checkpoint(case)
    result = run_cli("verify", "--trust", case)
    assert result.code == 1
    assert "__1_0.distcp" in result.stdout
    assert "is missing" in result.stdout


def test_truncated_rank_file_fails_naming_it(tmp_path: Path, run_cli) -> None:
    case = copy_case("dtensor_2d", tmp_path)
    victim = case / "__2_0.distcp"
    victim.write_bytes(victim.read_bytes()[:-100])
    with pytest.raises(CorruptCheckpointError, match=r"rank file '__2_0\.distcp' has") as caught:
        open_checkpoint(case)
    assert caught.value.path == str(victim)
    result = run_cli("verify", "--trust", case)
    assert result.code == 1
    assert "__2_0.distcp" in result.stdout
    assert run_cli("ls", case).code == 3


def test_damaged_item_fails_naming_the_rank_file(tmp_path: Path) -> None:
    case = copy_case("dtensor_shard0", tmp_path)
    victim = case / "__0_0.distcp"
    data = bytearray(victim.read_bytes())
    data[-22:-18] = b"XXXX"  # the last item's end-of-central-directory signature
    victim.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError) as caught, open_checkpoint(case) as ckpt:
        for entry in ckpt.values():  # chunks are opened when read
            entry.data.read()
    assert caught.value.path == str(victim)


#: A .metadata that names the DCP module first, then calls os.system in a BUILD.
HOSTILE_METADATA = (
    b"\x80\x04\x8c\x25torch.distributed.checkpoint.metadata\x94\x8c\x08Metadata\x94\x93\x94)\x81"
    b"\x94cposix\nsystem\n(S'echo pwned'\ntRb."
)


def test_hostile_metadata_is_unsafe_and_never_unpickled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli
) -> None:
    case = copy_case("dcp_single", tmp_path)
    (case / ".metadata").write_bytes(HOSTILE_METADATA)

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the hostile .metadata reached the unpickler")

    monkeypatch.setattr(_unpickler.SafeUnpickler, "load", refuse)
    with pytest.raises(UnsafePickleError, match=r"posix\.system"):
        open_checkpoint(case)
    result = run_cli("verify", "--trust", case)
    assert result.code == 1
    assert "unsafe" in result.stdout
    assert "posix.system" in result.stdout


def _overwrite(path: Path, offset: int, raw: bytes) -> None:
    """Replace ``len(raw)`` bytes of ``path`` at ``offset``."""
    data = bytearray(path.read_bytes())
    data[offset : offset + len(raw)] = raw
    path.write_bytes(bytes(data))


def _chunk_item(case: Path) -> tuple[Path, int, int]:
    """The rank file, offset and length of the first tensor chunk of ``case``."""
    layout = read_layout(resolve_path(case))
    chunk = layout.header["tensors"][0]["chunks"][0]
    return case / chunk["file"], chunk["offset"], chunk["length"]


def _hostile_item(length: int) -> bytes:
    """A torch.save-shaped zip whose data.pkl calls ``os.system``, padded to ``length`` bytes
    with the archive comment (so ``.metadata``'s offsets still hold)."""
    import io
    import zipfile

    def build(comment: bytes) -> bytes:
        out = io.BytesIO()
        payload = b"\x80\x02cos\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03."
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
            z.writestr("archive/data.pkl", payload)
            z.writestr("archive/version", "3\n")
            z.comment = comment
        return out.getvalue()

    raw = build(b"x" * (length - len(build(b""))))
    assert len(raw) == length
    return raw


def test_verify_judges_every_tensor_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hostile chunk fails verify as unsafe, named, although no command read its bytes."""
    import os

    from ckptctl.ops.verify import verify
    from ckptctl.report.verify import FileVerdict

    ran: list[object] = []
    monkeypatch.setattr(os, "system", lambda *a: ran.append(a))
    case = copy_case("fsdp2", tmp_path)
    rank_file, offset, length = _chunk_item(case)
    _overwrite(rank_file, offset, _hostile_item(length))
    with open_checkpoint(case) as ckpt:  # listing opens no chunk
        assert ckpt.safety is not None
        assert ckpt.safety.verdict is not Verdict.UNSAFE
    report = verify(case, trust=True)
    assert not report.ok
    result = report.files[0]
    assert result.verdict is FileVerdict.UNSAFE
    pickle = next(f for f in result.findings if f.check == "safe-pickle")
    assert pickle.safety is not None
    hostile = [g for g in pickle.safety.globals if g.name == "os.system"]
    assert hostile
    assert hostile[0].where.startswith(rank_file.name)
    assert "chunk" in hostile[0].where
    assert ran == []


def test_verify_fails_a_damaged_tensor_chunk(tmp_path: Path, run_cli) -> None:
    """A chunk item that is no zip fails ``readable``, naming its rank file and bytes."""
    case = copy_case("fsdp2", tmp_path)
    rank_file, offset, length = _chunk_item(case)
    _overwrite(rank_file, offset, bytes(length))
    assert run_cli("ls", case).code == 0  # header-only: the chunk is not opened
    result = run_cli("verify", "--trust", "--format", "json", case)
    assert result.code == 1
    findings = {f["check"]: f for f in json.loads(result.stdout)["files"][0]["findings"]}
    assert findings["readable"]["status"] == "fail"
    assert (
        f"(bytes {offset}..{offset + length} of {rank_file.name})"
        in (findings["readable"]["message"])
    )
    assert findings["safe-pickle"]["status"] != "fail"  # damaged, not hostile


def test_zstd_items_read_as_the_uncompressed_checkpoint(tmp_path: Path, run_cli) -> None:
    """torch's ZStandard extension: the same tensors, values and converted file as without."""
    with open_checkpoint(DIST / "dcp_zstd") as zstd, open_checkpoint(DIST / "dcp_single") as plain:
        assert zstd.objects == plain.objects
        assert "items compressed (stream.zstd/1)" in zstd.notes[0]
        for name, entry in plain.items():
            assert zstd[name].data.file_range() is None  # decoded in memory, not a file range
            assert bytes(zstd[name].data.read()) == bytes(entry.data.read()), name
    for case in ("dcp_zstd", "dcp_single"):
        assert run_cli("convert", DIST / case, tmp_path / f"{case}.safetensors").code == 0
    assert (tmp_path / "dcp_zstd.safetensors").read_bytes() == (
        tmp_path / "dcp_single.safetensors"
    ).read_bytes()
    assert run_cli("verify", "--trust", "--state-key", "model", DIST / "dcp_zstd").code == 0


def test_zstd_without_a_decoder_lists_but_reads_nothing_compressed(
    run_cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """ls and header read .metadata alone (issue #44); reading an item needs the decoder:
    convert exits 4 naming the item, verify fails the directory."""
    from ckptctl.formats.dcp import _read, _transform

    monkeypatch.setattr(_transform, "zstd_module", lambda: None)
    monkeypatch.setattr(_read, "zstd_module", lambda: None)
    listed = run_cli("ls", DIST / "dcp_zstd")
    assert listed.code == 0, listed.stderr
    assert "model.fc.weight" in listed.stdout
    assert "not read" in listed.stdout
    assert run_cli("header", DIST / "dcp_zstd").code == 0
    result = run_cli("convert", DIST / "dcp_zstd", tmp_path / "out.safetensors")
    assert result.code == 4
    assert "no zstd decoder is installed" in result.stderr
    assert "backports.zstd" in result.stderr
    checked = run_cli("verify", "--trust", DIST / "dcp_zstd")
    assert checked.code == 1
    assert "no zstd decoder" in checked.stdout


def test_the_zstd_decoder_comes_with_the_default_install() -> None:
    """pyproject's dependencies (not an extra) bring backports.zstd where the standard library
    has no compression.zstd."""
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    deps = project["project"]["dependencies"]
    assert any(d.startswith("backports.zstd") and "python_version < '3.14'" in d for d in deps)


def test_an_unknown_stream_transform_is_unsupported(tmp_path: Path, run_cli) -> None:
    case = copy_case("dcp_zstd", tmp_path)
    metadata = case / ".metadata"
    raw = metadata.read_bytes()
    assert b"stream.zstd/1" in raw
    metadata.write_bytes(raw.replace(b"stream.zstd/1", b"stream.lz4x/1"))
    result = run_cli("ls", case)
    assert result.code == 4
    assert "'stream.lz4x/1', which neither torch 2.13 nor ckptctl knows" in result.stderr


def test_a_damaged_zstd_chunk_fails_verify(tmp_path: Path, run_cli) -> None:
    case = copy_case("dcp_zstd", tmp_path)
    rank_file, offset, length = _chunk_item(case)
    _overwrite(rank_file, offset + length - 8, bytes(8))  # the frame's last block, cut
    result = run_cli("verify", "--trust", "--format", "json", case)
    assert result.code == 1
    readable = json.loads(result.stdout)["files"][0]["findings"][0]
    assert readable["check"] == "readable"
    assert readable["status"] == "fail"
    assert f"of {rank_file.name}" in readable["message"]
    assert "zstd" in readable["message"]


SAFETENSORS_CASES = ("dcp_safetensors", "dtensor_shard1_safetensors")


@pytest.mark.parametrize("case", SAFETENSORS_CASES)
def test_safetensors_variant_chunks_are_the_blobs_entries(case: str) -> None:
    """Each chunk is the entry of its name in its rank file's blob, as the safetensors library
    reads the blob (from the offset .metadata gives every tensor item of the file)."""
    from safetensors import deserialize

    layout = read_layout(DIST / case)
    blobs = {f["file"]: f["safetensors_blob"] for f in layout.header["files"]}
    want: dict[tuple[str, tuple[int, ...]], bytes] = {}
    for tensor in layout.header["tensors"]:
        for chunk in tensor["chunks"]:
            assert chunk["offset"] == blobs[chunk["file"]]["offset"]  # all at the blob's start
            raw = (DIST / case / chunk["file"]).read_bytes()[chunk["offset"] :]
            found = dict(deserialize(raw))[tensor["name"]]
            assert (found["dtype"], found["shape"]) == (tensor["dtype"], chunk["sizes"])
            want[tensor["name"], tuple(chunk["offsets"])] = bytes(found["data"])
    with open_checkpoint(DIST / case) as ckpt:
        for entry in ckpt.values():
            for chunk in entry.data.chunks:  # type: ignore[attr-defined]  # AssembledData
                got = chunk.entry
                assert got.data.file_range() is not None  # a range of the rank file: fast copies
                assert bytes(got.data.read()) == want[entry.name, chunk.offsets]


def test_safetensors_variant_lists_and_converts_as_the_default_one(tmp_path: Path, run_cli) -> None:
    """The same state as dcp_single: the same values, notes saying what it is and that torch
    cannot load it, and the same converted file byte for byte."""
    with (
        open_checkpoint(DIST / "dcp_safetensors") as variant,
        open_checkpoint(DIST / "dcp_single") as plain,
    ):
        assert variant.objects == plain.objects
        assert variant.safety is not None
        assert variant.safety.verdict is Verdict.SAFE  # .metadata, as for dcp_single
        assert "the safetensors variant (SerializationFormat.SAFETENSORS" in variant.notes[0]
        assert not any("safetensors variant" in n for n in plain.notes)
    result = run_cli("ls", DIST / "dcp_safetensors")
    assert result.code == 0
    assert "torch 2.13's DCP reader cannot load this directory" in result.stdout
    assert "Unsupported operand" in result.stdout
    for case in ("dcp_safetensors", "dcp_single"):
        assert run_cli("convert", DIST / case, tmp_path / f"{case}.safetensors").code == 0
    assert (tmp_path / "dcp_safetensors.safetensors").read_bytes() == (
        tmp_path / "dcp_single.safetensors"
    ).read_bytes()
    args = ("verify", "--trust", "--state-key", "model")
    assert run_cli(*args, DIST / "dcp_safetensors").code == 0
    assert run_cli("verify", "--trust", DIST / "dtensor_shard1_safetensors").code == 0


#: Damage to rank 1's blob of dtensor_shard1_safetensors (its header is at byte 1261, after the
#: value ``epoch``): the bytes replaced, and what the error says.
BLOB_DAMAGE = {
    "truncated": (None, r"tensor 'half' ends at byte 824 but the file has 814 bytes"),
    "appended": (b"", r"bytes after the end of the tensor data"),
    "json": (b'{"__metadata__"', r"not valid JSON"),
    "saved-offsets": (b'"weight\\": {\\"saved_offsets\\": [0, 3]', r"saved_offsets are \[0, 4\]"),
    "dtype": (b'"half":{"dtype":"F16"', r"holds a I16 tensor of shape \[8, 2\]"),
    "keys": (b"DCP_VERSION", r"has no DCP_SHARDING_INFO and DCP_VERSION"),
}
BLOB_REPLACEMENT = {
    "json": b'{"__metadata__!',
    "saved-offsets": b'"weight\\": {\\"saved_offsets\\": [0, 4]',
    "dtype": b'"half":{"dtype":"I16"',
    "keys": b"DCP_VERSIOM",
}


@pytest.mark.parametrize("damage", sorted(BLOB_DAMAGE))
def test_a_damaged_blob_fails_naming_the_rank_file(damage: str, tmp_path: Path, run_cli) -> None:
    case = copy_case("dtensor_shard1_safetensors", tmp_path)
    victim = case / "__1_0.distcp"
    raw = victim.read_bytes()
    old, message = BLOB_DAMAGE[damage]
    if damage == "truncated":
        raw = raw[:-10]
    elif damage == "appended":
        raw += b"\0" * 8
    else:
        assert old is not None
        assert raw.count(old) == 1, damage
        raw = raw.replace(old, BLOB_REPLACEMENT[damage])
    victim.write_bytes(raw)
    with pytest.raises(CorruptCheckpointError, match=message) as caught:
        open_checkpoint(case)
    assert caught.value.path == str(victim)
    assert "the safetensors blob at byte 1261 of rank file '__1_0.distcp'" in caught.value.message
    assert run_cli("ls", case).code == 3
    result = run_cli("verify", "--trust", case)
    assert result.code == 1
    assert "__1_0.distcp" in result.stdout


def test_a_tensor_missing_from_its_blob_is_refused(tmp_path: Path) -> None:
    """A chunk .metadata places in a blob that lacks it (another tensor's name there)."""
    case = copy_case("dtensor_shard1_safetensors", tmp_path)
    victim = case / "__0_0.distcp"
    raw = victim.read_bytes()
    assert raw.count(b'"half"') == 1
    victim.write_bytes(raw.replace(b'"half"', b'"hal_"').replace(b'\\"half\\"', b'\\"hal_\\"'))
    with pytest.raises(CorruptCheckpointError, match=r"chunk \[0, 0\]") as caught:
        open_checkpoint(case)
    assert caught.value.path == str(victim)


def test_verify_passes_a_good_directory_with_trust(run_cli) -> None:
    result = run_cli("verify", "--trust", DIST / "dtensor_2d")
    assert result.code == 0, result.stdout
    assert "dcp, 3 tensors" in result.stdout


def test_verify_walks_dcp_subdirectories_as_checkpoints(tmp_path: Path, run_cli) -> None:
    """The .distcp files are checked through their .metadata, not one by one."""
    shutil.copytree(DIST / "dtensor_shard0", tmp_path / "run" / "step-1")
    result = run_cli("verify", "--trust", "--format", "json", tmp_path / "run")
    files = [f["path"] for f in json.loads(result.stdout)["files"]]
    assert files == [str(tmp_path / "run" / "step-1" / ".metadata")]


def test_diff_of_placements_of_the_same_tensors(run_cli) -> None:
    """Shard(0), Shard(1), Replicate and a 2x2 mesh saved the same global tensors."""
    for other in ("dtensor_shard1", "dtensor_replicate", "dtensor_2d"):
        result = run_cli("diff", DIST / "dtensor_shard0", DIST / other)
        assert result.code == 0, result.stdout
    assert run_cli("diff", DIST / "dtensor_shard0", DIST / "fsdp2").code == 1


def test_convert_writes_the_consolidated_tensors(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "full.safetensors"
    assert run_cli("convert", DIST / "fsdp2", out).code == 0
    got = {k: _hash(v.tobytes()) for k, v in load_file(out).items()}
    assert got == {t["name"]: t["sha256"] for t in TRUTH["fsdp2"]["tensors"]}
    model = tmp_path / "model.safetensors"
    assert run_cli("convert", DIST / "fsdp2", model, "--state-key", "model").code == 0
    assert sorted(load_file(model)) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]


@pytest.mark.parametrize(("source", "shard_size"), [("fsdp2", "1KB"), ("dcp_single", "300")])
def test_three_shares_and_the_index_equal_one_whole_run(
    source: str, shard_size: str, tmp_path: Path, run_cli
) -> None:
    assert_shares_equal_one_run(run_cli, DIST / source, tmp_path, shard_size)


def test_shares_need_a_sharded_output_and_a_real_share(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "model.safetensors"
    result = run_cli("convert", DIST / "fsdp2", out, "--shards", "1/2")
    assert result.code == 2
    assert "--max-shard-size" in result.stderr
    for bad in ("0/3", "4/3"):
        result = run_cli("convert", DIST / "fsdp2", out, "--max-shard-size", "1KB", "--shards", bad)
        assert result.code == 2
        assert f"share {bad} does not exist" in result.stderr
    result = run_cli("convert", DIST / "fsdp2", out, "--max-shard-size", "1KB", "--shards", "x")
    assert result.code == 2
    result = run_cli("convert", DIST / "fsdp2", out, "--max-shard-size", "1KB", "--shards", "1/2",
                     "--index-only")  # fmt: skip
    assert result.code == 2
    assert not list(tmp_path.iterdir())


def test_convert_never_writes_over_a_rank_file(tmp_path: Path, run_cli) -> None:
    case = copy_case("dtensor_shard0", tmp_path)
    before = (case / "__1_0.distcp").read_bytes()
    result = run_cli("convert", case, case / "__1_0.distcp", "--to", "safetensors", "--force")
    assert result.code == 5
    assert (case / "__1_0.distcp").read_bytes() == before


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads /proc/self/smaps")
@pytest.mark.parametrize("case", ["dcp_single", "fsdp2", "dtensor_2d"])
def test_parsed_items_leave_no_rank_file_pages_mapped(case: str, tmp_path: Path) -> None:
    """Items (values at open, tensor chunks when read) are parsed through their rank file's
    map, then its pages are released: on a checkpoint of many items the resident set would
    otherwise grow by the page-cache folios every parse touched (183 MiB for 4 GiB in 128
    items on a 6.18 kernel, against a 64 MiB + largest-tensor bound), although the tensor
    bytes themselves are copied with reads. Without the release, these small files stay
    mapped (whole, by the kernel's fault-around)."""
    from tests.test_io import mapped_kib

    target = copy_case(case, tmp_path)
    rank_files = sorted(target.glob("*.distcp"))

    def mapped() -> list[int]:
        return [mapped_kib(f.resolve()) for f in rank_files]

    with open_checkpoint(target) as ckpt:
        assert mapped() == [0] * len(rank_files)  # .metadata's values were parsed: released
        assert ckpt.check_rest is not None
        ckpt.check_rest()  # every tensor chunk item
        assert mapped() == [0] * len(rank_files)
        got = {entry.name: _hash(entry.data.read()) for entry in ckpt.values()}
    assert got == {t["name"]: t["sha256"] for t in TRUTH[case]["tensors"]}  # pages map again

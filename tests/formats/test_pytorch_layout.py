"""``ckptctl header`` for PyTorch files: every byte of every container accounted for.

Ground truth: the research notes' byte table of ``min_zip.pt`` (measured on a torch 2.13 file;
the layout: docs/formats/pytorch.md#zip-container), torch's own tensor hashes in
``fixtures/valid/pytorch/truth.json``, and the corpus files written by real torch and by burn.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from ckptctl.errors import CkptError
from ckptctl.formats import open_checkpoint, read_layout
from ckptctl.formats.pytorch._layout import pickle_summary
from ckptctl.model import HeaderLayout

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures" / "valid" / "pytorch"
CORPUS = REPO / ".." / "shared" / "corpus" / "burn-pytorch-reader"
TRUTH = json.loads((FIXTURES / "truth.json").read_text())["files"]
FIXTURE_FILES = sorted(p for p in FIXTURES.iterdir() if p.suffix in (".pt", ".ckpt"))
CORPUS_FILES = (
    sorted(p for p in CORPUS.iterdir() if p.name != "broken.pt") if CORPUS.is_dir() else []
)
KINDS = {"header", "metadata", "padding", "tensor", "other"}


def assert_tiles(layout: HeaderLayout, size: int) -> None:
    assert layout.file_size == size
    position = 0
    for region in layout.regions:
        assert region.start == position, region
        assert region.end >= region.start
        assert region.kind in KINDS
        if region.kind == "tensor":
            assert region.name
        position = region.end
    assert position == size
    json.dumps(layout.header, allow_nan=False)  # the header view must be plain JSON


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
def test_regions_tile_every_fixture(path: Path) -> None:
    layout = read_layout(path)
    assert_tiles(layout, path.stat().st_size)
    assert layout.format == TRUTH[path.name]["format"]
    assert not [r for r in layout.regions if r.kind == "other" and "no structure" in (r.note or "")]


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS_FILES, reason="the shared corpus is absent")
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name)
def test_regions_tile_every_corpus_file(path: Path) -> None:
    layout = read_layout(path)
    assert_tiles(layout, path.stat().st_size)
    assert not [r for r in layout.regions if r.kind == "other"]
    with open_checkpoint(path) as ckpt:
        tensor_names = {
            n for r in layout.regions if r.kind == "tensor" for n in (r.name or "").split(",")
        }
        assert tensor_names == set(ckpt)


TORCH_ZIPS = [
    p for p in FIXTURE_FILES if TRUTH[p.name]["format"] in ("pytorch-zip", "torchscript")
    and not p.name.startswith("rezip")
]  # fmt: skip


@pytest.mark.parametrize("path", TORCH_ZIPS, ids=lambda p: p.name)
def test_torch_zip_padding_aligns_every_record_to_64(path: Path) -> None:
    layout = read_layout(path)
    regions = list(layout.regions)
    records = layout.header["records"]
    for record in records:
        if record["method"] == 0:
            assert record["data_offset"] % 64 == 0, record
    tensors = [i for i, r in enumerate(regions) if r.kind == "tensor"]
    assert tensors or not TRUTH[path.name]["tensors"]
    for index in tensors:
        before = regions[index - 1]
        assert before.kind == "padding"
        assert before.note == "zip extra field padding the record data to a 64-byte boundary"
        assert regions[index].start % 64 == 0
        assert regions[index - 2].kind == "header"
        assert (regions[index - 2].note or "").startswith("zip local header of ")


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
def test_tensor_regions_hash_to_torch_truth(path: Path) -> None:
    layout = read_layout(path)
    truth = {t["name"]: t["sha256"] for t in TRUTH[path.name]["tensors"]}
    blob = path.read_bytes()
    checked = 0
    with open_checkpoint(path) as ckpt:
        for region in layout.regions:
            name = region.name or ""
            if region.kind != "tensor" or "," in name or name not in ckpt:
                continue
            entry = ckpt[name]
            # Only a contiguous tensor over its whole storage equals its storage's bytes.
            if entry.offset != region.start or entry.nbytes != region.size:
                continue
            digest = hashlib.sha256(blob[region.start : region.end]).hexdigest()
            assert digest == truth[name], region
            checked += 1
    full = [t for t in TRUTH[path.name]["tensors"] if t["shape"] != []]
    if path.name in ("min_zip.pt", "min_legacy.pt", "dtypes.pt", "dtypes_legacy.pt"):
        assert checked == len(full)


def test_min_zip_regions_match_the_spec_table() -> None:
    layout = read_layout(FIXTURES / "min_zip.pt")
    spans = [(r.kind, r.start, r.end) for r in layout.regions]
    # the byte table: local header offsets 0, 315, 401, 530, 662, 808, 920, 1042; data at 64, 384,
    # 512, 640, 768, 896, 1024, 1152; central directory at 1208; zip64 EOCD 1731 (56 B),
    # locator 1787 (20 B), EOCD 1807 (22 B); 1829 bytes in all.
    assert spans[:4] == [("header", 0, 46), ("padding", 46, 64), ("metadata", 64, 299),
                         ("header", 299, 315)]  # fmt: skip
    assert spans[16:20] == [("header", 662, 706), ("padding", 706, 768), ("tensor", 768, 792),
                            ("header", 792, 808)]  # fmt: skip
    assert spans[-4:] == [("header", 1208, 1731), ("header", 1731, 1787),
                          ("header", 1787, 1807), ("header", 1807, 1829)]  # fmt: skip
    assert [r["offset"] for r in layout.header["records"]] == [0, 315, 401, 530, 662, 808, 920,
                                                                1042]  # fmt: skip
    assert [r["data_offset"] for r in layout.header["records"]] == [
        64,
        384,
        512,
        640,
        768,
        896,
        1024,
        1152,
    ]
    names = {r.name: r.note for r in layout.regions if r.kind == "tensor"}
    assert names == {
        "weight": "storage 0 (float32, 24 bytes)",
        "bias": "storage 1 (float32, 8 bytes)",
    }
    assert layout.header["prefix"] == "min_zip"
    assert layout.header["pickle"] == {
        "protocol": 2,
        "globals": ["collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
                    "torch.FloatStorage"],
    }  # fmt: skip
    assert layout.header["byteorder"] == "little"
    assert layout.header["version"] == "3"
    by_kind = {k: sum(r.size for r in layout.regions if r.kind == k) for k in KINDS}
    assert by_kind == {"header": 1144, "padding": 367, "metadata": 286, "tensor": 32, "other": 0}


def test_shared_storage_region_names_every_user() -> None:
    layout = read_layout(FIXTURES / "shared_storage.pt")
    with open_checkpoint(FIXTURES / "shared_storage.pt") as ckpt:
        shared = [e.name for e in ckpt.values() if e.extra.get("storage")]
    regions = [r for r in layout.regions if r.kind == "tensor" and "," in (r.name or "")]
    assert regions
    assert {n for r in regions for n in (r.name or "").split(",")} == set(shared)


def test_deflated_record_is_a_compressed_tensor_region() -> None:
    layout = read_layout(FIXTURES / "rezip_deflate.pt")
    tensors = [r for r in layout.regions if r.kind == "tensor"]
    deflated = [r for r in tensors if "deflate-compressed" in (r.note or "")]
    assert deflated
    records = {r["data_offset"]: r for r in layout.header["records"]}
    for region in deflated:
        record = records[region.start]
        assert record["method"] == 8
        assert region.size == record["compressed_size"]


def test_legacy_stream_counts_and_storages() -> None:
    path = FIXTURES / "min_legacy.pt"
    layout = read_layout(path)
    blob = path.read_bytes()
    assert layout.header["container"] == "legacy"
    notes = [r.note for r in layout.regions if r.kind == "metadata"]
    labels = ("magic number", "protocol version", "sys_info", "object", "storage keys")
    assert notes == [f"legacy stream {x} pickle" for x in labels]
    regions = list(layout.regions)
    for index, region in enumerate(regions):
        if region.kind == "tensor":
            count = regions[index - 1]
            assert count.kind == "header"
            assert count.size == 8
            (numel,) = struct.unpack("<q", blob[count.start : count.end])
            assert numel * 4 == region.size  # float32 storages
    # The first pickle is the magic number itself, as the research notes give its bytes.
    assert blob[: regions[0].end] == bytes.fromhex("80028a0a6cfc9c46f9206aa850192e")


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS_FILES, reason="the shared corpus is absent")
def test_tar_blocks_and_padding() -> None:
    path = CORPUS / "tar_weight_bias.tar"
    layout = read_layout(path)
    assert layout.header["container"] == "tar"
    assert [m["name"] for m in layout.header["members"]] == ["sys_info", "pickle", "storages"]
    for region in layout.regions:
        if region.kind == "header" and (region.note or "").startswith("tar header"):
            assert region.start % 512 == 0
            assert region.size == 512
        if region.kind == "padding":
            assert region.end % 512 == 0
            assert not any(path.read_bytes()[region.start : region.end])
    assert layout.regions[-1].note == "tar end-of-archive blocks"


def test_plain_pickle_is_one_metadata_region(tmp_path: Path) -> None:
    path = tmp_path / "plain.pkl"
    path.write_bytes(b"\x80\x02}q\x00X\x01\x00\x00\x00aK\x01s.junk")
    layout = read_layout(path)
    assert [(r.kind, r.start, r.end) for r in layout.regions] == [
        ("metadata", 0, 15),
        ("other", 15, 19),
    ]
    header = dict(layout.header)
    verdict = header.pop("pickle_verdict")
    assert header == {"format": "pickle", "container": "pickle",
                      "pickle": {"protocol": 2, "globals": []}}  # fmt: skip
    assert verdict.startswith("needs-trust: a plain pickle, not a torch.save file")


def test_pickle_summary_reads_stack_global_names() -> None:
    data = (
        b"\x80\x04\x95\x1e\x00\x00\x00\x00\x00\x00\x00\x8c\x0bcollections\x94"
        b"\x8c\x0bOrderedDict\x94\x93\x94)R\x94."
    )
    assert pickle_summary(data) == {"protocol": 4, "globals": ["collections.OrderedDict"]}


def test_truncated_and_random_zips_raise_ckpt_errors(tmp_path: Path) -> None:
    raw = (FIXTURES / "min_zip.pt").read_bytes()
    for cut in (10, 100, 700, len(raw) - 30, len(raw) - 1):
        path = tmp_path / f"cut{cut}.pt"
        path.write_bytes(raw[:cut])
        with pytest.raises(CkptError):
            read_layout(path)
    rng = np.random.default_rng(1)
    for index in range(200):
        blob = bytearray(raw)
        for _ in range(4):
            blob[int(rng.integers(0, len(blob)))] = int(rng.integers(0, 256))
        path = tmp_path / f"mut{index}.pt"
        path.write_bytes(bytes(blob))
        try:
            layout = read_layout(path)
        except CkptError:
            continue
        assert_tiles(layout, len(blob))


def test_overlapping_records_are_corrupt(tmp_path: Path) -> None:
    raw = bytearray((FIXTURES / "min_zip.pt").read_bytes())
    # Point the central directory entry of data/1 at the local header of data/0.
    pos = 0
    entries = []
    while (pos := raw.find(b"PK\x01\x02", pos)) >= 0:
        entries.append(pos)
        pos += 4
    sixth = entries[5]  # min_zip/data/1 (the byte table's order)
    assert raw[sixth + 46 : sixth + 46 + 14] == b"min_zip/data/1"
    raw[sixth + 42 : sixth + 46] = struct.pack("<I", 662)
    path = tmp_path / "overlap.pt"
    path.write_bytes(bytes(raw))
    with pytest.raises(CkptError):
        read_layout(path)


def test_header_command_explains_zip_padding(run_cli) -> None:
    result = run_cli("header", FIXTURES / "min_zip.pt")
    assert result.code == 0, result.stderr
    assert "1,829 bytes = 1,144 header + 367 padding + 286 metadata + 32 tensor" in result.stdout
    assert "64-byte boundary" in result.stdout
    report = json.loads(run_cli("header", FIXTURES / "min_legacy.pt", "--json").stdout)
    assert report["format"] == "pytorch-legacy"

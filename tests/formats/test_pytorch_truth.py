"""Every torch-made fixture reads as torch sees it (fixtures/valid/pytorch/truth.json).

The truth file was written by ``fixtures/make_fixtures.py`` with real torch 2.13: each tensor's
name, dtype, shape and the SHA-256 of its contiguous little-endian bytes (conj/neg resolved).
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from ckptctl import open_checkpoint
from tests.conftest import VALID

FOLDER = VALID / "pytorch"
TRUTH = json.loads((FOLDER / "truth.json").read_text())["files"]


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_fixture_matches_torch(name):
    truth = TRUTH[name]
    with open_checkpoint(FOLDER / name) as ckpt:
        assert ckpt.format == truth["format"]
        assert ckpt.kind == truth["kind"]
        assert list(ckpt) == [t["name"] for t in truth["tensors"]]
        for expected in truth["tensors"]:
            entry = ckpt[expected["name"]]
            assert entry.dtype.value == expected["dtype"], expected["name"]
            assert list(entry.shape) == expected["shape"], expected["name"]
            data = np.ascontiguousarray(entry.load()).tobytes()
            assert hashlib.sha256(data).hexdigest() == expected["sha256"], expected["name"]


def test_truth_covers_every_fixture():
    on_disk = {p.name for p in FOLDER.iterdir() if p.suffix in (".pt", ".ckpt")}
    assert on_disk == set(TRUTH)


def test_deflate64_archive_reads_like_its_source():
    """A .pt re-zipped with Deflate64 (by 7-Zip) holds exactly the tensors of views.pt."""
    truth = TRUTH["views.pt"]
    path = VALID / "deflate64" / "views_deflate64.pt"
    with open_checkpoint(path) as ckpt:
        assert ckpt.format == "pytorch-zip"
        assert list(ckpt) == [t["name"] for t in truth["tensors"]]
        for expected in truth["tensors"]:
            data = np.ascontiguousarray(ckpt[expected["name"]].load()).tobytes()
            assert hashlib.sha256(data).hexdigest() == expected["sha256"], expected["name"]


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("sparse_coo.pt", "a sparse tensor"),
        ("sparse_csr.pt", "a sparse tensor"),
        ("quantized.pt", "a quantized tensor"),
        ("nested.pt", "a nested tensor"),
    ],
)
def test_unsupported_tensor_kinds_from_torch(name, kind, run_cli):
    """Real torch files with tensors ckptctl cannot represent: exit 4, the tensor named."""
    path = VALID / "unsupported" / name
    result = run_cli("ls", path)
    assert result.code == 4
    assert result.stderr.startswith(f"ckptctl: error: {path}: tensor 'w' is {kind}")
    assert "hint: " in result.stderr

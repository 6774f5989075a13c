"""The reader-parity corpus against real torch 2.13 (issue 25; ``pytest -m torch``).

For every file of fixtures/hostile/parity/: ``torch.load`` with ``weights_only=True`` and with
``weights_only=False``, each in a fork in its own fresh directory (a payload can only create
its canary there), proves the manifest (``runs_payload``, ``weights_only_loads``, the tensors
torch loads); then ckptctl must agree with torch:

* a payload that runs under ``torch.load`` makes the file ``unsafe`` or refused;
* a file the weights-only loader refuses is never ``safe``;
* where torch loads the file, ``ls`` lists torch's tensor names and ``convert`` writes torch's
  values, byte for byte (read back with the ``safetensors`` library, not with ckptctl).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import HOSTILE, load_module
from tests.torch_tier.test_pickle_parity import run_torch

torch = pytest.importorskip("torch")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

pytestmark = pytest.mark.torch

PARITY = HOSTILE / "parity"
MANIFEST: dict[str, dict[str, Any]] = json.loads((PARITY / "manifest.json").read_text())
FILES = sorted(MANIFEST)
#: Every file of both parity corpora (containers here, pickles in parity_pickle/), by path.
ALL = [PARITY / n for n in FILES] + sorted((HOSTILE / "parity_pickle").glob("*.pt"))


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


TIMEOUT_S = 60


@pytest.fixture(scope="module")
def torch_says(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """``f"{file}:{weights_only}"`` -> what torch.load did."""
    base = tmp_path_factory.mktemp("parity")
    jobs: list[dict[str, Any]] = [
        {
            "id": f"{_id(path)}:{weights_only}",
            "dir": str(base / f"{i}-{int(weights_only)}"),
            "paths": [str(path)],
            "weights_only": weights_only,
            "tensors": True,
        }
        for i, path in enumerate(ALL)
        for weights_only in (True, False)
    ]
    results = run_torch(jobs)
    for job in jobs:
        results[job["id"]]["canary"] = any(
            n.startswith("ckptctl-canary-") for n in os.listdir(job["dir"])
        )
    return results


@pytest.mark.parametrize("name", FILES)
def test_manifest_is_what_torch_does(name: str, torch_says: dict[str, dict[str, Any]]) -> None:
    record = MANIFEST[name]
    weights_only, full = torch_says[f"parity/{name}:True"], torch_says[f"parity/{name}:False"]
    assert not weights_only["canary"], f"{name}: a payload ran under weights_only=True"
    assert full["canary"] == record["runs_payload"], (name, full["error"][:300])
    assert weights_only["ok"] == record["weights_only_loads"], (name, weights_only["error"][:300])
    if "tensors" in record:
        want = {
            k: np.array([float(v) for v in vals], dtype=np.float32).tobytes().hex()
            for k, vals in record["tensors"].items()
        }
        assert weights_only["tensors"] == want


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_ckptctl_agrees_with_torch(
    path: Path, torch_says: dict[str, dict[str, Any]], run_cli: Any, tmp_path: Path
) -> None:
    weights_only, full = torch_says[f"{_id(path)}:True"], torch_says[f"{_id(path)}:False"]
    name = path.name
    result = run_cli("verify", path, "--json")
    (report,) = json.loads(result.stdout)["files"]
    found = [f for f in report["findings"] if f["check"] == "safe-pickle"]
    verdict = found[0]["details"]["verdict"] if found else "refused"
    if full["canary"]:
        assert verdict in ("unsafe", "refused"), (name, found)
    if not weights_only["ok"]:
        assert verdict != "safe", (name, weights_only["error"][:300], found)
    if not weights_only["ok"] or weights_only["tensors"] is None:
        return
    listing = run_cli("ls", path, "--json")
    assert listing.code == 0, listing
    names = [t["name"] for t in json.loads(listing.stdout)["tensors"]]
    assert sorted(names) == sorted(weights_only["tensors"])
    out = tmp_path / "out.safetensors"
    converted = run_cli("convert", path, out)
    assert converted.code == 0, converted
    values = safetensors_numpy.load_file(str(out))
    assert {k: v.tobytes().hex() for k, v in values.items()} == weights_only["tensors"]


def test_case_twins_resolve_as_torchs_sorted_search(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Random archives whose storage and filler names collide once case-folded: for each one,
    the values ckptctl lists are the ones torch loads (miniz's heap sort and binary search)."""
    import random

    from ckptctl import open_checkpoint

    gen = load_module(PARITY / "make_parity.py")
    rng = random.Random(25)
    spellings = ["data/0", "DATA/0", "Data/0", "data/0", "dAtA/0"]
    paths: list[Path] = []
    for i in range(40):
        recs = [gen.Rec(b"archive/data.pkl", gen.BENIGN), gen.Rec(b"archive/version", b"3\n")]
        for k, spelling in enumerate(rng.sample([b"DATA.pkl", b"data.PKL", b"Data.Pkl"], 2)):
            if rng.random() < 0.5:  # a twin data.pkl naming its tensor otherwise
                recs.append(gen.Rec(b"archive/" + spelling, gen.state_dict([(f"v{k}", "0", 2)])))
        for j in range(rng.randint(2, 5)):
            name = rng.choice(spellings).encode()
            recs.append(gen.Rec(b"archive/" + name, gen.f32(float(i), float(j))))
        fillers = [b"archive/f" + bytes([rng.randint(97, 122)]) for _ in range(rng.randint(0, 6))]
        recs.extend(gen.Rec(name, b"x") for name in fillers)
        rng.shuffle(recs)
        path = tmp_path / f"twins{i}.pt"
        path.write_bytes(gen.archive(recs))
        paths.append(path)
    base = tmp_path_factory.mktemp("twins")
    jobs = [
        {"id": p.name, "dir": str(base / str(i)), "paths": [str(p)], "weights_only": True,
         "tensors": True}
        for i, p in enumerate(paths)
    ]  # fmt: skip
    results = run_torch(jobs)
    assert len(paths) >= 30
    for path in paths:
        torch_result = results[path.name]
        assert torch_result["ok"], (path.name, torch_result["error"])
        with open_checkpoint(path) as ckpt:
            got = {name: bytes(ckpt[name].load().tobytes()).hex() for name in ckpt}
        assert got == torch_result["tensors"], path.name

"""Issue 25, families 6 and 7, against real torch 2.13: the parity_pickle manifest is the truth.

For every file of fixtures/hostile/parity_pickle and every variant its generator builds
(``variants()``, written to a temporary directory), torch runs in a forked child in a fresh
directory (``run_torch`` of test_pickle_parity.py), once with ``weights_only=True`` and once with
``weights_only=False``:

* ``runs_payload`` is what ``weights_only=False`` does (the canary appears or not), and the
  canary never appears under ``weights_only=True``;
* ``weights_only_loads`` is what ``weights_only=True`` does;
* ckptctl's verdict is the manifest's: ``safe`` exactly when torch's weights-only loader accepts
  the file, ``unsafe`` (refused) whenever a payload runs, never ``safe`` or ``needs-trust`` then;
* ``runs_payload_from_bytesio``, where the manifest has it, is what
  ``torch.load(io.BytesIO(data), weights_only=False)`` does (a pickle read without ``peek``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.test_parity_pickle import MANIFEST, PARITY, VARIANTS
from tests.torch_tier.test_pickle_parity import ckptctl_verdict, run_torch

pytest.importorskip("torch")

pytestmark = pytest.mark.torch

CASES: dict[str, dict[str, Any]] = {
    **{name: dict(record) for name, record in MANIFEST.items()},
    **{
        name: {
            "runs_payload": entry.runs,
            "weights_only_loads": entry.loads,
            "expect": entry.expect,
            "canary": f"ckptctl-canary-{name.split('.', 1)[0]}",
        }
        for name, entry in VARIANTS.items()
    },
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Case name -> its file (committed, or a variant written here)."""
    where = tmp_path_factory.mktemp("variants")
    out = {name: PARITY / name for name in MANIFEST}
    for name, entry in VARIANTS.items():
        (where / name).write_bytes(entry.data)
        out[name] = where / name
    return out


@pytest.fixture(scope="module")
def torch_runs(
    files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, bool], tuple[Path, dict[str, Any]]]:
    """(case, weights_only) -> (the directory torch ran in, its result), every case at once."""
    base = tmp_path_factory.mktemp("torch_runs")
    jobs: list[dict[str, Any]] = [
        {
            "id": f"{weights_only}:{name}",
            "dir": str(base / f"{i}-{weights_only}"),
            "paths": [str(files[name])],
            "weights_only": weights_only,
        }
        for i, name in enumerate(sorted(CASES))
        for weights_only in (True, False)
    ]
    results = run_torch(jobs)
    return {
        (job["id"].split(":", 1)[1], job["weights_only"]): (Path(job["dir"]), results[job["id"]])
        for job in jobs
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_manifest_is_what_torch_does_and_ckptctl_agrees(
    name, files, torch_runs, run_cli, tmp_path, monkeypatch
):
    record = CASES[name]
    full_dir, full = torch_runs[(name, False)]
    wo_dir, wo = torch_runs[(name, True)]
    fired = (full_dir / record["canary"]).exists()
    assert fired == record["runs_payload"], (name, full["error"][:300])
    assert not (wo_dir / record["canary"]).exists(), f"{name}: a payload ran under weights_only"
    assert wo["ok"] == record["weights_only_loads"], (name, wo["error"][:300])

    monkeypatch.chdir(tmp_path)
    verdict, evidence = ckptctl_verdict(run_cli, files[name])
    assert list(tmp_path.iterdir()) == [], "a payload ran in ckptctl"
    if fired:
        assert verdict == "unsafe", evidence
    assert (verdict == "safe") == wo["ok"], (name, wo["error"][:300], evidence)
    expect = record["expect"]
    assert verdict == ("unsafe" if expect == "refused" else expect), evidence


BYTESIO = sorted(n for n, r in MANIFEST.items() if "runs_payload_from_bytesio" in r)
BYTESIO_CHILD = """
import io, sys, warnings
import torch
warnings.simplefilter("ignore")
with open(sys.argv[1], "rb") as fh:
    data = fh.read()
try:
    torch.load(io.BytesIO(data), weights_only=False)
except Exception as exc:
    print(type(exc).__name__, str(exc)[:300])
"""


def test_some_files_are_loaded_from_a_bytesio():
    assert BYTESIO, "the manifest has no runs_payload_from_bytesio entry"


@pytest.mark.parametrize("name", BYTESIO)
def test_a_bytesio_load_runs_what_the_manifest_says(name, tmp_path):
    """torch.load(io.BytesIO(data)) reads pickles without peek: a frame's leftover is skipped."""
    record = MANIFEST[name]
    proc = subprocess.run(
        [sys.executable, "-c", BYTESIO_CHILD, str(PARITY / name)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    fired = (tmp_path / record["canary"]).exists()
    assert fired == record["runs_payload_from_bytesio"], (name, proc.stdout, proc.stderr[-500:])

"""torch parity: ckptctl's ``safe`` verdict <=> ``torch.load(weights_only=True)`` accepts the file.

The torch tier (``pytest -m torch``; ``.ci/run`` runs it in a second venv with torch 2.13). torch
itself never runs in this process: one child process imports torch once and forks per file, each
fork in its own fresh directory (so a canary lands there and nowhere else) with a 60 s alarm. A
payload that runs can only touch that directory and that short-lived fork.

* Parity over every pickle-based file in fixtures/valid (recursively), fixtures/hostile/pickle,
  fixtures/hostile/pickle_catalogue, fixtures/hostile/bypass and ../shared/corpus (``corpus``
  tier): verdict ``safe`` exactly when torch's weights_only loader accepts the file, except for
  the files in ``EXCEPTIONS`` (each with its reason).
* Ground truth for fixtures/hostile/bypass/manifest.json: ``runs_payload`` is what
  ``torch.load(weights_only=False)`` really does (the canary appears or not), and ckptctl calls
  every one of those files ``unsafe``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CORPUS, FIXTURES, HOSTILE, VALID

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

BYPASS = HOSTILE / "bypass"
BYPASS_MANIFEST: dict[str, dict[str, Any]] = json.loads((BYPASS / "manifest.json").read_text())
PICKLE_SUFFIXES = {".pt", ".pth", ".bin", ".ckpt", ".pkl", ".tar"}
FILE_TIMEOUT_S = 60

# Files where ckptctl's verdict may differ from torch's weights_only loader, each with the reason.
# Keys are paths relative to fixtures/ (or "corpus/<path>"). Only cases where ckptctl is stricter,
# or where torch fails for a reason that has nothing to do with safety, belong here.
EXCEPTIONS: dict[str, str] = {
    "valid/pytorch/legacy_new_dtypes.pt": (
        "torch 2.13 writes this legacy file but cannot read it back at all "
        "('UntypedStorage' has no attribute 'dtype'); not a safety refusal"
    ),
}


def pickle_files(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in PICKLE_SUFFIXES)


def key(path: Path) -> str:
    if path.is_relative_to(FIXTURES):
        return path.relative_to(FIXTURES).as_posix()
    return "corpus/" + path.relative_to(CORPUS).as_posix()


FIXTURE_FILES = [
    *pickle_files(VALID),
    *pickle_files(HOSTILE / "pickle"),
    *pickle_files(HOSTILE / "pickle_catalogue"),
    *pickle_files(BYPASS),
]
CORPUS_FILES = pickle_files(CORPUS)

# The child: import torch once, then per job fork, chdir into the job's own directory, arm an
# alarm, torch.load each path, write {"ok": bool, "error": str} (and with "tensors": true in the
# job, the loaded dict's tensors as {name: hex of their bytes}) to result.json beside that
# directory, and _exit. stdout/stderr of the fork go to a log file (payloads print).
CHILD = r"""
import json, os, signal, sys, warnings
import torch

jobs = json.load(sys.stdin)
results = {}
for job in jobs:
    workdir, out = job["dir"], job["dir"] + ".result.json"
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(workdir)
            log = os.open(workdir + ".log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(log, 1)
            os.dup2(log, 2)
            signal.alarm(job["timeout"])
            warnings.simplefilter("ignore")
            result = {"ok": True, "error": ""}
            try:
                for path in job["paths"]:
                    root = torch.load(path, weights_only=job["weights_only"], map_location="cpu")
                if job.get("tensors"):  # the values torch loaded: name -> raw bytes (hex)
                    result["tensors"] = {
                        k: v.contiguous().numpy().tobytes().hex()
                        for k, v in root.items() if isinstance(v, torch.Tensor)
                    } if isinstance(root, dict) else None
            except BaseException as exc:
                text = str(exc)
                result = {"ok": False, "error": f"{type(exc).__name__}: {text[:2000]}"}
            with open(out, "w") as fh:
                json.dump(result, fh)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    try:
        with open(out) as fh:
            results[job["id"]] = json.load(fh)
    except OSError:
        results[job["id"]] = {"ok": False, "error": f"child died (wait status {status})"}
print(json.dumps(results))
"""


def run_torch(jobs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    if not hasattr(os, "fork"):  # pragma: no cover - CI is Linux
        pytest.fail("the torch tier needs os.fork (POSIX)")
    for job in jobs:
        Path(job["dir"]).mkdir(parents=True)
        job.setdefault("timeout", FILE_TIMEOUT_S)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        timeout=FILE_TIMEOUT_S * 3 + 2 * len(jobs),
        cwd=jobs[0]["dir"] if jobs else None,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: dict[str, dict[str, Any]] = json.loads(proc.stdout.splitlines()[-1])
    return results


@pytest.fixture(scope="module")
def weights_only(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """key(path) -> {"ok", "error"} of torch.load(path, weights_only=True), every file at once."""
    base = tmp_path_factory.mktemp("weights_only")
    jobs = [
        {"id": key(p), "dir": str(base / str(i)), "paths": [str(p)], "weights_only": True}
        for i, p in enumerate([*FIXTURE_FILES, *CORPUS_FILES])
    ]
    return run_torch(jobs)


@pytest.fixture(scope="module")
def full_load(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Manifest name -> (its directory, result) of torch.load(weights_only=False)."""
    base = tmp_path_factory.mktemp("full_load")
    jobs: list[dict[str, Any]] = []
    for i, (name, record) in enumerate(sorted(BYPASS_MANIFEST.items())):
        paths = [str(BYPASS / s) for s in record.get("shards", [])] or [str(BYPASS / name)]
        jobs.append({"id": name, "dir": str(base / str(i)), "paths": paths, "weights_only": False})
    results = run_torch(jobs)
    return {job["id"]: (Path(job["dir"]), results[job["id"]]) for job in jobs}


def ckptctl_verdict(run_cli, path: Path) -> tuple[str | None, dict[str, Any]]:
    """The safe-pickle verdict of ``ckptctl verify PATH --json`` (None: no such finding)."""
    result = run_cli("verify", path, "--json")
    assert "Traceback" not in result.stderr, result
    assert result.code in (0, 1), result
    (file_report,) = json.loads(result.stdout)["files"]
    found = [f for f in file_report["findings"] if f["check"] == "safe-pickle"]
    if not found:
        return None, file_report
    return found[0]["details"].get("verdict"), found[0]


def check_parity(path: Path, weights_only: dict[str, dict[str, Any]], run_cli) -> None:
    torch_result = weights_only[key(path)]
    verdict, evidence = ckptctl_verdict(run_cli, path)
    agrees = (verdict == "safe") == torch_result["ok"]
    if not agrees and key(path) in EXCEPTIONS:
        pytest.xfail(EXCEPTIONS[key(path)])
    if torch_result["ok"]:
        assert verdict == "safe", f"torch weights_only loads {key(path)}; ckptctl: {evidence}"
    else:
        assert verdict != "safe", (
            f"torch weights_only refuses {key(path)} ({torch_result['error'][:500]}); "
            f"ckptctl says safe: {evidence}"
        )


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=key)
def test_safe_iff_torch_weights_only_loads(path, weights_only, run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_parity(path, weights_only, run_cli)


@pytest.mark.corpus
@pytest.mark.parametrize("path", CORPUS_FILES, ids=key)
def test_corpus_safe_iff_torch_weights_only_loads(
    path, weights_only, run_cli, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    check_parity(path, weights_only, run_cli)


def test_trust_manifest_matches_torch_now(weights_only):
    """valid/trust/manifest.json was computed at generation time; torch must still agree."""
    manifest = json.loads((VALID / "trust" / "manifest.json").read_text())
    for name, record in manifest.items():
        now = weights_only[f"valid/trust/{name}"]
        assert now["ok"] == record["weights_only_loads"], (name, now["error"][:300])


def test_exceptions_are_still_needed(weights_only):
    for name in EXCEPTIONS:
        assert name in weights_only, f"EXCEPTIONS names {name}, which is not in the corpus"


@pytest.mark.parametrize("name", sorted(BYPASS_MANIFEST))
def test_manifest_payloads_really_run_and_ckptctl_says_unsafe(
    name, full_load, run_cli, tmp_path, monkeypatch
):
    record = BYPASS_MANIFEST[name]
    workdir, result = full_load[name]
    fired = (workdir / record["canary"]).exists()
    assert fired == record["runs_payload"], (
        f"{name}: torch.load(weights_only=False) canary={fired}, manifest says "
        f"runs_payload={record['runs_payload']} ({result['error'][:300]})"
    )
    monkeypatch.chdir(tmp_path)
    verdict, evidence = ckptctl_verdict(run_cli, BYPASS / name)
    assert verdict == "unsafe", evidence
    assert list(tmp_path.iterdir()) == []

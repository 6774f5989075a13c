"""Pickles in files that are not checkpoints are judged (issue 28, hostile/pickle_elsewhere).

Ground truth: each file's payload runs under a plain loader -- ``np.load(allow_pickle=True)``, or
unzip and ``pickle.loads`` every record -- in a subprocess with a scratch working directory,
where it creates its canary. ``verify`` must call every one ``unsafe`` naming the global, and
benign look-alikes (a numeric ``.npy``, a zip of text) get no pickle verdict at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import HOSTILE, load_module

ELSEWHERE = HOSTILE / "pickle_elsewhere"
MANIFEST: dict[str, dict[str, Any]] = json.loads((ELSEWHERE / "manifest.json").read_text())

#: The plain loaders, run in a child process (never in the test process).
LOADERS = {
    "np.load": "import numpy as np, sys\n"
    "f = np.load(sys.argv[1], allow_pickle=True)\n"
    "[f[k] for k in f.files] if hasattr(f, 'files') else f\n",
    "zip-pickle": "import pickle, sys, zipfile\n"
    "for name in zipfile.ZipFile(sys.argv[1]).namelist():\n"
    "    try:\n"
    "        pickle.loads(zipfile.ZipFile(sys.argv[1]).read(name))\n"
    "    except Exception:\n"
    "        pass\n",
}


def verify_json(run_cli, *paths: Path) -> tuple[Any, dict[str, Any]]:
    result = run_cli("verify", *paths, "--json")
    assert "Traceback" not in result.stderr, result
    return result, json.loads(result.stdout)


def test_manifest_covers_every_file() -> None:
    on_disk = {p.name for p in ELSEWHERE.iterdir()} - {
        "README.md",
        "manifest.json",
        "make_pickle_elsewhere.py",
    }
    assert on_disk == set(MANIFEST)
    assert len(MANIFEST) == 4
    readme = (ELSEWHERE / "README.md").read_text(encoding="utf-8")
    for name, record in MANIFEST.items():
        assert f"`{name}`" in readme
        assert record["expect"] == "unsafe"
        assert record["loader"] in LOADERS


def test_committed_files_match_the_generator() -> None:
    module = load_module(ELSEWHERE / "make_pickle_elsewhere.py")
    for name, (data, *_rest) in module.files().items():
        assert (ELSEWHERE / name).read_bytes() == data, name


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_payload_runs_under_the_plain_loader(name: str, tmp_path: Path) -> None:
    record = MANIFEST[name]
    subprocess.run(
        [sys.executable, "-c", LOADERS[record["loader"]], str(ELSEWHERE / name)],
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (tmp_path / record["canary"]).exists() is record["runs_payload"]


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_verify_calls_it_unsafe_naming_the_global(
    name: str, run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result, report = verify_json(run_cli, ELSEWHERE / name)
    assert result.code == 1
    (file_report,) = report["files"]
    checks = {f["check"]: f for f in file_report["findings"]}
    assert [f["status"] for f in file_report["findings"]] == ["fail"] * len(checks)
    safe = checks["safe-pickle"]
    assert safe["status"] == "fail"
    assert safe["details"]["verdict"] == "unsafe"
    classes = {g["name"]: g["class"] for g in safe["details"]["globals"]}
    assert classes[MANIFEST[name]["global"]] == "unsafe"
    assert MANIFEST[name]["global"] in safe["message"]
    assert list(tmp_path.iterdir()) == [], "a payload ran"


def test_benign_look_alikes_get_no_pickle_verdict(run_cli, tmp_path: Path) -> None:
    numeric = tmp_path / "numeric.npy"
    np.save(numeric, np.arange(4, dtype=np.float32))
    texts = tmp_path / "texts.zip"
    with zipfile.ZipFile(texts, "w") as zf:
        zf.writestr("readme.txt", "hello.\n")
        zf.writestr("data.txt", "3\n")
    _, report = verify_json(run_cli, numeric, texts)
    for file_report in report["files"]:
        assert "safe-pickle" not in [f["check"] for f in file_report["findings"]], file_report


def test_a_real_object_array_is_unsafe_listing_its_globals(run_cli, tmp_path: Path) -> None:
    """np.save of a real object array: numpy's own pickle, numpy globals only (each needs-trust,
    as torch's weights-only loader refuses numpy's reconstruct functions); an object array is
    never tensor data, so the file is unsafe as a whole (issue 46)."""
    path = tmp_path / "objects.npy"
    np.save(path, np.array([1, "two", None], dtype=object), allow_pickle=True)
    _, report = verify_json(run_cli, path)
    (safe,) = [f for f in report["files"][0]["findings"] if f["check"] == "safe-pickle"]
    assert safe["details"]["verdict"] == "unsafe"
    classes = {g["name"]: g["class"] for g in safe["details"]["globals"]}
    assert any(n.startswith("numpy.") for n in classes), classes
    assert set(classes.values()) == {"needs-trust"}


def test_a_record_too_large_to_judge_is_not_passed_over(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "big.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("blob.bin", b"\x80\x02" + b"N" * (65 << 20) + b".")
    _, report = verify_json(run_cli, path)
    (safe,) = [f for f in report["files"][0]["findings"] if f["check"] == "safe-pickle"]
    assert safe["details"]["verdict"] == "unsafe"
    assert "is too large to judge" in safe["message"]

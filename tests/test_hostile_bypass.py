"""The denylist bypasses of issue 11 are ``unsafe``; benign trust fixtures get torch's verdict.

fixtures/hostile/bypass/ (``make_bypass.py``): flat state_dicts that carry a payload through a
global or a construct a denylist misses. Every one must be ``unsafe``: ``verify`` exits 1 naming
the global, ``ls`` refuses it (exit 3, one line), no canary appears, the process is not changed
(no attribute set on ``collections.Counter``, no ``__defaults__`` rewritten). fixtures/valid/trust/
(``make_trust_fixtures.py``, real torch): benign files whose verdict (``safe`` / ``needs-trust``)
must equal what torch's ``weights_only`` loader did with them. No torch needed here; the torch
ground truth for both manifests is tests/torch_tier/test_pickle_parity.py.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import HOSTILE, REPO, VALID

BYPASS = HOSTILE / "bypass"
TRUST = VALID / "trust"
BYPASS_MANIFEST: dict[str, dict[str, Any]] = json.loads((BYPASS / "manifest.json").read_text())
TRUST_MANIFEST: dict[str, dict[str, Any]] = json.loads((TRUST / "manifest.json").read_text())
GOOD = VALID / "pytorch" / "min_zip.pt"
VERDICTS = {"safe", "needs-trust", "unsafe"}


def verify_json(run_cli, *paths: Path):
    result = run_cli("verify", *paths, "--json")
    assert "Traceback" not in result.stderr, result
    assert result.code in (0, 1), result
    return result, json.loads(result.stdout)


def safe_pickle(file_report: dict[str, Any]) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        f for f in file_report["findings"] if f["check"] == "safe-pickle"
    ]
    assert len(found) == 1, file_report
    return found[0]


def snapshot_process() -> dict[str, Any]:
    """What a BUILD aimed at a real class or function would change in this process."""
    defaults: dict[str, Any] = {}
    for name, module in list(sys.modules.items()):
        if not (name == "ckptctl" or name.startswith("ckptctl.")) or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, types.FunctionType):
                defaults[f"{name}.{attr}"] = (value.__defaults__, value.__kwdefaults__)
    return {
        "counter": dict(vars(collections.Counter)),
        "ordered_dict": dict(vars(collections.OrderedDict)),
        "defaults": defaults,
    }


def assert_unchanged(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Nothing that existed before changed (modules imported meanwhile only add entries)."""
    assert after["counter"] == before["counter"], "a BUILD changed collections.Counter"
    assert after["ordered_dict"] == before["ordered_dict"], "a BUILD changed OrderedDict"
    changed = [
        name
        for name, value in before["defaults"].items()
        if after["defaults"].get(name, value) != value
    ]
    assert not changed, f"a BUILD changed __defaults__ of {changed}"


def test_manifests_cover_every_file():
    shards = {s for record in BYPASS_MANIFEST.values() for s in record.get("shards", [])}
    on_disk = {
        p.relative_to(BYPASS).as_posix()
        for p in BYPASS.rglob("*")
        if p.is_file()
        and p.name not in {"README.md", "manifest.json", "make_bypass.py"}
        and "__pycache__" not in p.parts  # a test that imports the generator leaves its bytecode
    }
    assert on_disk == set(BYPASS_MANIFEST) | shards
    for name, record in BYPASS_MANIFEST.items():
        assert record["expect"] == "unsafe", name
        assert record["canary"].startswith("ckptctl-canary-"), name
    trust = {p.name for p in TRUST.iterdir() if p.name not in {"README.md", "manifest.json"}}
    assert trust == set(TRUST_MANIFEST)
    assert {r["expect"] for r in TRUST_MANIFEST.values()} == {"safe", "needs-trust"}
    for name, record in TRUST_MANIFEST.items():
        assert record["expect"] == ("safe" if record["weights_only_loads"] else "needs-trust"), name


@pytest.mark.parametrize("name", sorted(BYPASS_MANIFEST))
def test_bypass_is_unsafe(name, run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = snapshot_process()
    record = BYPASS_MANIFEST[name]
    path = BYPASS / name

    result, report = verify_json(run_cli, path)
    assert result.code == 1, result
    (file_report,) = report["files"]
    finding = safe_pickle(file_report)
    assert finding["status"] == "fail", finding
    assert finding["details"]["verdict"] == "unsafe", finding
    if record["global"] is not None:
        classes = {g["name"]: g["class"] for g in finding["details"]["globals"]}
        assert classes.get(record["global"]) == "unsafe", (record["global"], finding)
    for g in finding["details"]["globals"]:
        assert g["class"] in VERDICTS, g
        assert isinstance(g["where"], str), g

    listed = run_cli("ls", path)
    assert listed.code == 3, listed
    assert listed.stdout == ""
    lines = listed.stderr.splitlines()
    assert "Traceback" not in listed.stderr
    assert 1 <= len(lines) <= 2, listed
    assert "unsafe pickle" in lines[0], listed
    if record["global"] is not None:
        assert record["global"] in lines[0], listed
    if len(lines) == 2:
        assert lines[1].startswith("hint:"), listed

    assert list(tmp_path.iterdir()) == [], "a payload ran: " + str(list(tmp_path.iterdir()))
    assert_unchanged(before, snapshot_process())


def test_verify_many_bypasses_and_a_good_file(run_cli, tmp_path, monkeypatch):
    """One multi-file run: every file reported, the good one passes, JSON is still printed."""
    monkeypatch.chdir(tmp_path)
    paths = [BYPASS / name for name in sorted(BYPASS_MANIFEST)] + [GOOD]
    result, report = verify_json(run_cli, *paths)
    assert result.code == 1, result
    assert report["schema_version"] == 1
    by_path = {f["path"]: f for f in report["files"]}
    assert set(by_path) == {str(p) for p in paths}
    good = by_path.pop(str(GOOD))
    assert good["ok"] is True, good
    assert safe_pickle(good)["details"]["verdict"] == "safe"
    for path, file_report in by_path.items():
        assert file_report["ok"] is False, path
        assert safe_pickle(file_report)["details"]["verdict"] == "unsafe", path
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", sorted(TRUST_MANIFEST))
def test_trust_fixture_verdict_matches_torch(name, run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expect = TRUST_MANIFEST[name]["expect"]
    result, report = verify_json(run_cli, TRUST / name)
    (file_report,) = report["files"]
    finding = safe_pickle(file_report)
    assert finding["details"]["verdict"] == expect, finding
    classes = {g["class"] for g in finding["details"]["globals"]}
    assert "unsafe" not in classes, finding
    if expect == "needs-trust":
        assert result.code == 1, result  # verify fails needs-trust by default
        listed = run_cli("ls", TRUST / name)  # ls refuses only what is unsafe
        if "protocol0" in name:  # text persistent ids: torch.load cannot read these either
            assert listed.code == 3, listed
            assert "saved with pickle protocol 0" in listed.stderr
        else:
            assert listed.code == 0, listed
    else:
        assert classes <= {"safe"}, finding


def test_ckptctl_never_imports_torch():
    """Reading, listing and verifying a .pt file leaves torch (and numpy's torch glue) unloaded."""
    code = f"""
import sys
from ckptctl.cli import main
for args in (["ls", {str(GOOD)!r}], ["verify", {str(GOOD)!r}, "--json"],
             ["header", {str(GOOD)!r}], ["verify", {str(BYPASS / "timeit_timeit.pt")!r}]):
    try:
        main(args)
    except SystemExit:
        pass
bad = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
assert not bad, bad
print("no torch")
"""
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("no torch"), result.stdout

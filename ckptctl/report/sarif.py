"""``verify --format sarif``: a verify report as one SARIF 2.1.0 log (issue 28).

SARIF (OASIS, https://docs.oasis-open.org/sarif/sarif/v2.1.0/) is what GitHub code scanning and
other viewers read. One run; its tool's rules are the checks of :data:`report.verify.CHECKS`
(rule id = check id); every file checked is an artifact (with its verdict); every finding that
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
from ckptctl.report.verify import CHECKS, Status, VerifyReport
from ckptctl.safety import Verdict

if TYPE_CHECKING:
    from ckptctl.model import JSONValue
    from ckptctl.report.verify import FileResult, Finding

__all__ = ["RULES", "SARIF_SCHEMA", "to_sarif"]

#: The schema a log names in ``$schema`` (the OASIS 2.1.0 errata 01 schema).
SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)

#: Check id -> (short description, full description).
RULES: dict[str, tuple[str, str]] = {
    "readable": (
        "The file opens and passes every structural check of its reader",
        "The file is a checkpoint ckptctl reads (PyTorch, safetensors, Burn) and is not "
        "empty, truncated or corrupt.",
    ),
    "lfs-pointer": (
        "The file is the weights, not a git-lfs pointer to them",
        "A clone without `git lfs pull` leaves a small text pointer (oid sha256:..., size N) "
        "where each large file should be; run `git lfs pull` to fetch the weights.",
    ),
    "safe-pickle": (
        "Loading the file's pickles runs no code",
        "Every pickle stream is judged from its opcodes: safe (torch.load(weights_only=True) "
        "loads it, or a DCP or DeepSpeed checkpoint names only the inert classes its "
        "producer's loader reads), needs-trust (globals outside those allowlists) or unsafe "
        "(globals or constructs that run code when unpickled).",
    ),
    "chat-template": (
        "A GGUF chat template reaches no Python internals when rendered",
        "tokenizer.chat_template is rendered with Jinja by transformers and llama-cpp-python; a "
        "template that reaches dunder attributes (__globals__, __subclasses__), the internals of "
        "Jinja's globals (cycler, joiner, namespace, lipsum) or the attr filter can run code on "
        "the machine that renders it. Real chat templates need none of these.",
    ),
    "sharded-index": (
        "The sharded-checkpoint index agrees with its shards",
        "Every tensor the *.index.json names is in the shard it names, and nothing else is.",
    ),
    "flat-reader": (
        "A flat name -> tensor reader finds the tensors",
        "Readers such as candle's from_pth or safetensors' load expect a top-level name -> "
        "tensor map; nested checkpoints, whole pickled models and TorchScript archives fail.",
    ),
    "quant-layout": (
        "The tensors of every quantized module fit together",
        "GPTQ, AWQ, bitsandbytes, FP8 and compressed-tensors modules: the packed weight's "
        "shape, the scales, zero points and group index agree on one weight shape, bit width "
        "and group size.",
    ),
    "gguf-layout": (
        "llama.cpp's GGUF reader accepts the file's layout",
        "gguf.cpp requires every tensor offset to be the running padded size (tensors back to "
        "back in header order, each padded to general.alignment), known tensor types and names "
        "shorter than 64 bytes, where gguf-py is more lenient; a model also needs "
        "general.architecture.",
    ),
    "onnx-checksum": (
        "ONNX external data files match the checksum the model declares",
        "onnx.proto's external_data key checksum is the SHA-1 digest of the data file; onnx "
        "and ONNX Runtime never check it, so a data file swapped under the model goes unseen.",
    ),
    "min-tensors": ("The file holds at least the required number of tensors", ""),
    "expect": (
        "Tensor names and shapes match the reference checkpoint",
        "The Tensor Loading Summary against --expect REF: missing tensors or shape mismatches.",
    ),
    "no-nan": ("No float tensor holds NaN or Inf", ""),
    "optimizer": (
        "The Burn optimizer record attaches to the model's ParamIds",
        "Optimizer states whose ParamId is not in the model start from scratch on resume.",
    ),
    "hashes": (
        "Every tensor matches the --hashes manifest",
        "Each tensor's digest of its canonical bytes, dtype and shape equal the manifest's line "
        "for it (ckptctl hash), with no tensor missing or extra.",
    ),
}
assert set(RULES) == set(CHECKS)

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

#: GitHub's severity for security rules (``properties.security-severity``, 0.0 to 10.0).
_SECURITY_SEVERITY = {"safe-pickle": "9.8", "chat-template": "9.8"}


def _rule(check: str) -> dict[str, JSONValue]:
    short, full = RULES[check]
    rule: dict[str, JSONValue] = {
        "id": check,
        "name": "".join(part.capitalize() for part in check.split("-")),
        "shortDescription": {"text": short},
        "fullDescription": {"text": full or short},
        "help": {"text": f"ckptctl verify --check {check}; see ckptctl-verify(1)"},
        "defaultConfiguration": {"level": "error"},
    }
    if check in _SECURITY_SEVERITY:
        rule["properties"] = {
            "tags": ["security"],
            "security-severity": _SECURITY_SEVERITY[check],
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


def _result(index: int, result: FileResult, finding: Finding) -> dict[str, JSONValue]:
    uri = artifact_uri(result.path)
    message = _message(finding)
    digest = hashlib.sha256(f"{finding.check}\0{uri}\0{message}".encode()).hexdigest()[:32]
    properties: dict[str, JSONValue] = {"status": finding.status.value}
    if finding.safety is not None:
        properties["verdict"] = finding.safety.verdict.value
        properties["globals"] = list(_globals(finding))
    return {
        "ruleId": finding.check,
        "ruleIndex": CHECKS.index(finding.check),
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
        results += [_result(index, result, f) for f in result.findings if f.status is not Status.OK]
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
                        "rules": [_rule(c) for c in CHECKS],
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

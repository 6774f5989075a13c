"""The GitHub Action (action.yml, issue 28): its steps' shell commands run as a runner would.

The steps are read from action.yml and run with bash in a temporary git repository, with
``${{ ... }}`` expressions filled in the way GitHub does for the contexts the action uses
(``inputs``, ``github``, ``steps.*.outputs``, ``always()``, ``==``, ``!=``, ``&&``, ``||``),
and the runner's files (``GITHUB_OUTPUT``, ``GITHUB_PATH``, ``RUNNER_TEMP``). ``install: none``
with a ``ckptctl`` on PATH that runs this tree stands in for the PyPI install; the
``upload-sarif`` step is not run, but its condition and its ``sarif_file`` are checked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import HOSTILE, REPO, VALID

yaml = pytest.importorskip("yaml")

ACTION: dict[str, Any] = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
ZERO_SHA = "0" * 40


def git(repo: Path, *args: str) -> str:
    env = os.environ | {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose last commit adds three checkpoints and changes a README."""
    root = tmp_path / "repo"
    (root / "models").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# models\n")
    shutil.copy(VALID / "pytorch" / "min_zip.pt", root / "models" / "old.pt")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    base = git(root, "rev-parse", "HEAD")
    (root / "README.md").write_text("# models, more\n")
    shutil.copy(VALID / "safetensors" / "tiny.safetensors", root / "models" / "good.safetensors")
    shutil.copy(HOSTILE / "bypass" / "codecs_open.pt", root / "models" / "evil.pt")
    (root / "models" / "deep").mkdir()
    shutil.copy(VALID / "trust" / "argparse_namespace.pt", root / "models" / "deep" / "args.pt")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "add checkpoints")
    return root, base


class Runner:
    """Runs the action's steps as a GitHub runner would, in ``workspace``."""

    def __init__(self, workspace: Path, tmp_path: Path, inputs: dict[str, str]) -> None:
        self.workspace = workspace
        self.temp = tmp_path / "runner-temp"
        self.temp.mkdir()
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        shim = self.bin / "ckptctl"  # ckptctl of this tree, as `install: none` expects
        shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m ckptctl "$@"\n')
        shim.chmod(0o755)
        defaults = {k: str(v.get("default", "")) for k, v in ACTION["inputs"].items()}
        self.inputs = defaults | inputs
        self.github = {
            "action_path": str(REPO),
            "event.pull_request.base.sha": "",
            "event.before": "",
        }
        self.outputs: dict[str, dict[str, str]] = {}
        self.logs: list[subprocess.CompletedProcess[str]] = []
        self.skipped: list[dict[str, Any]] = []

    def value(self, name: str) -> str:
        head, _, rest = name.partition(".")
        if head == "inputs":
            return self.expand(self.inputs[rest])
        if head == "github":
            return self.github.get(rest, "")
        if head == "steps":
            step, _, output = rest.partition(".outputs.")
            return self.outputs.get(step, {}).get(output, "")
        raise AssertionError(f"context not handled by the test: {name}")

    def evaluate(self, expr: str) -> str | bool:
        tokens = re.findall(r"'[^']*'|&&|\|\||==|!=|always\(\)|[A-Za-z_][\w.-]*", expr)
        assert "".join(tokens) == re.sub(r"\s+", "", expr), expr
        parts = []
        for tok in tokens:
            if tok.startswith("'"):
                parts.append(repr(tok[1:-1]))
            elif tok in ("&&", "||"):
                parts.append({"&&": " and ", "||": " or "}[tok])
            elif tok in ("==", "!="):
                parts.append(f" {tok} ")
            elif tok == "always()":
                parts.append("True")
            else:
                parts.append(repr(self.value(tok)))
        result: str | bool = eval("".join(parts), {"__builtins__": {}})  # our own tokens only
        return result

    def expand(self, text: str) -> str:
        return re.sub(r"\$\{\{\s*(.*?)\s*\}\}", lambda m: str(self.evaluate(m.group(1))), text)

    def run(self) -> int:
        """Every step in order, as the runner does; the exit code of the first failing one."""
        path_file = self.temp / "path"
        path_file.write_text("")
        for step in ACTION["runs"]["steps"]:
            condition = step.get("if")
            if condition is not None:
                cond = condition.strip()
                inner = cond[3:-2] if cond.startswith("${{") else cond
                if not self.evaluate(inner):
                    continue
            if "uses" in step:
                self.skipped.append({k: self.expand(str(v)) for k, v in step["with"].items()})
                continue
            output_file = self.temp / f"output-{len(self.logs)}"
            output_file.write_text("")
            extra_path = [p for p in path_file.read_text().splitlines() if p]
            env = {k: self.expand(str(v)) for k, v in step.get("env", {}).items()}
            env |= {
                "PATH": os.pathsep.join([*extra_path, str(self.bin), os.environ["PATH"]]),
                "PYTHONPATH": str(REPO),
                "HOME": os.environ.get("HOME", "/tmp"),
                "RUNNER_TEMP": str(self.temp),
                "GITHUB_OUTPUT": str(output_file),
                "GITHUB_PATH": str(path_file),
            }
            assert step["shell"] == "bash"
            proc = subprocess.run(
                # as GitHub runs `shell: bash` steps
                [
                    "bash",
                    "--noprofile",
                    "--norc",
                    "-eo",
                    "pipefail",
                    "-c",
                    self.expand(step["run"]),
                ],
                cwd=self.workspace,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            self.logs.append(proc)
            if "id" in step:
                lines = output_file.read_text().splitlines()
                self.outputs[step["id"]] = dict(line.split("=", 1) for line in lines if "=" in line)
            if proc.returncode != 0:
                return proc.returncode
        return 0

    @property
    def stdout(self) -> str:
        return "".join(p.stdout for p in self.logs)

    @property
    def stderr(self) -> str:
        return "".join(p.stderr for p in self.logs)


def test_the_action_declares_its_interface():
    assert ACTION["runs"]["using"] == "composite"
    assert set(ACTION["inputs"]) == {
        "paths", "base", "args", "install", "version", "sarif-file", "upload-sarif",
    }  # fmt: skip
    uses = [s["uses"] for s in ACTION["runs"]["steps"] if "uses" in s]
    assert uses == ["github/codeql-action/upload-sarif@v3"]
    for step in ACTION["runs"]["steps"]:
        if "run" in step:  # inputs reach scripts through env only (no script injection)
            assert "${{" not in step["run"], step.get("id")


def test_a_pull_request_checks_the_changed_checkpoints(repo, tmp_path):
    root, base = repo
    runner = Runner(root, tmp_path, {"install": "none", "base": base})
    code = runner.run()
    assert code == 1, runner.stderr
    assert runner.outputs["select"]["files"] == "3"  # README.md and the old file are not checked
    assert runner.outputs["verify"]["exit-code"] == "1"
    (upload,) = runner.skipped
    assert upload == {"sarif_file": "ckptctl.sarif", "category": "ckptctl"}
    log = json.loads((root / "ckptctl.sarif").read_text())
    (run,) = log["runs"]
    uris = sorted(a["location"]["uri"] for a in run["artifacts"])
    assert uris == ["models/deep/args.pt", "models/evil.pt", "models/good.safetensors"]
    verdicts = {a["location"]["uri"]: a["properties"]["verdict"] for a in run["artifacts"]}
    assert verdicts["models/evil.pt"] == "unsafe"
    assert verdicts["models/deep/args.pt"] == "needs-trust"
    assert "ERROR models/evil.pt: safe-pickle: unsafe: " in runner.stdout
    assert (
        "3 files: 1 passed, 2 failed (1 safe, 1 needs-trust, 1 unsafe, 0 unreadable)"
        in runner.stdout
    )
    assert "ckptctl verify failed (exit 1)" in runner.stderr


def test_given_globs_and_args(repo, tmp_path):
    root, _ = repo
    runner = Runner(
        root,
        tmp_path,
        {
            "install": "none",
            "paths": "models/**/*.safetensors\nmodels/deep/*.pt",
            "args": "--trust --check safe-pickle",
        },
    )
    assert runner.run() == 0, runner.stderr
    assert runner.outputs["select"]["files"] == "2"
    assert runner.outputs["verify"]["exit-code"] == "0"
    log = json.loads((root / "ckptctl.sarif").read_text())
    assert [r["level"] for r in log["runs"][0]["results"]] == ["warning"]  # needs-trust, trusted


def test_nothing_changed_passes_and_skips_the_upload(repo, tmp_path):
    root, _ = repo
    head = git(root, "rev-parse", "HEAD")
    runner = Runner(root, tmp_path, {"install": "none", "base": head, "upload-sarif": "true"})
    assert runner.run() == 0
    assert runner.outputs["select"]["files"] == "0"
    assert runner.skipped == []
    assert "no checkpoint files to check" in runner.stdout


def test_no_base_and_no_paths_is_an_error(repo, tmp_path):
    root, _ = repo
    runner = Runner(root, tmp_path, {"install": "none", "base": ZERO_SHA})
    assert runner.run() == 2
    assert "no base commit to compare with; set the paths input" in runner.stderr


def test_an_unknown_install_is_an_error(repo, tmp_path):
    root, _ = repo
    runner = Runner(root, tmp_path, {"install": "conda"})
    assert runner.run() == 2
    assert "install must be pypi, repository or none, not 'conda'" in runner.stderr


def test_the_pre_commit_hook_runs_verify_on_checkpoints():
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    (hook,) = hooks
    assert hook["id"] == "ckptctl-verify"
    assert hook["entry"] == "ckptctl verify"
    pattern = re.compile(hook["files"])
    for name in ("a.pt", "B.SAFETENSORS", "m.bpk", "model.safetensors.index.json", "x.npy"):
        assert pattern.search(name), name
    assert not pattern.search("README.md")


def test_the_action_and_the_hook_select_every_name_that_says_checkpoint():
    """Issue 44: the files they pick are those ``verify DIR`` always checks (one table)."""
    from ckptctl.formats import CHECKPOINT_NAMES

    (select,) = [s for s in ACTION["runs"]["steps"] if s.get("id") == "select"]
    match = re.search(r"grep -zEi '([^']+)'", select["run"])
    assert match is not None
    action = re.compile(match.group(1), re.IGNORECASE)  # POSIX ERE: the same syntax here
    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    pattern = re.compile(hook["files"])
    for suffix in CHECKPOINT_NAMES:
        for name in (f"models/w{suffix}", f"W{suffix.upper()}"):
            assert action.search(name), name
            assert pattern.search(name), name
    for name in ("config.json", "tokenizer.model", "README.md", "w.pt.txt", "w.gz"):
        assert not action.search(name), name
        assert not pattern.search(name), name

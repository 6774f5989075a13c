"""Start-up cost: a command imports what it needs and no more (issue 26).

The text and JSON dispatch tables name report types as strings (so that rendering one report
imports no other report's module); these tests check that every name is a real type, and that
listing a safetensors file imports no other format's reader and no other report's renderer.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from ckptctl.report import json as report_json
from ckptctl.report import render as report_render
from tests.conftest import REPO, VALID


@pytest.mark.parametrize(
    "table", [report_render._RENDERERS, report_json._CONVERTERS], ids=["text", "json"]
)
def test_every_dispatch_key_names_a_type(table):
    for key in table:
        module, _, name = key.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        assert isinstance(cls, type), key
        assert f"{cls.__module__}.{cls.__qualname__}" == key


def test_an_unknown_type_is_refused_by_both_paths():
    with pytest.raises(TypeError, match="no text rendering for int"):
        report_render.render(1, None)  # type: ignore[arg-type]  # refused before it is used
    with pytest.raises(TypeError, match="no JSON rendering for int"):
        report_json.to_json(1)


def _modules_after(args: list[str]) -> set[str]:
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print(' '.join(sorted(sys.modules)), file=sys.stderr))\n"
        "from ckptctl.cli import main\n"
        f"main({args!r})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert done.returncode == 0, done.stderr
    return set(done.stderr.split())


@pytest.mark.parametrize("json", [False, True])
def test_ls_of_safetensors_imports_only_what_it_renders(json):
    path = str(VALID / "safetensors" / "bf16.safetensors")
    loaded = _modules_after(["ls", *(["--json"] if json else []), path])
    assert "ckptctl.formats.safetensors" in loaded
    unwanted = {
        "ckptctl.report.render_diff",
        "ckptctl.report.render_verify",
        "ckptctl.report.render_values",
        "ckptctl.report.render_config",
        "ckptctl.report.render_summary",
        "ckptctl.report.diff",
        "ckptctl.report.verify",
        "ckptctl.report.optimizer",
        "ckptctl._ckernels",  # imported by the first cast or transpose, not with ckptctl
    }
    assert not unwanted & loaded
    assert ("ckptctl.report.text" in loaded) is not json


def test_registering_the_formats_imports_no_reader():
    """Every command sniffs with every format; the readers come only with a file to read."""
    code = (
        "import sys\n"
        "from ckptctl.formats import _ensure_loaded\n"
        "_ensure_loaded()\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    loaded = set(done.stdout.split())
    for reader in (
        "ckptctl.formats.burnpack.reader",
        "ckptctl.formats.burnpack.writer",
        "ckptctl.formats.burnrecord.reader",
        "ckptctl.formats.deepspeed._zero",
        "ckptctl.formats.dcp._read",
        "ckptctl.formats.gguf._read",
        "ckptctl.formats.gguf._write",
        "ckptctl.formats.onnx.reader",
        "ckptctl.formats.pytorch._writer",
        "cbor2",
    ):
        assert reader not in loaded


def test_lazy_package_names_resolve():
    from ckptctl.formats import burnpack, burnrecord

    for module in (burnpack, burnrecord):
        for name in module.__all__:
            assert getattr(module, name) is not None, name
        with pytest.raises(AttributeError):
            _ = module.no_such_name


@pytest.mark.parametrize("adapter", [None, "pytorch-to-burn"])
def test_only_a_layout_adapter_imports_the_family_restructuring(adapter, tmp_path):
    source = str(VALID / "safetensors" / "bf16.safetensors")
    args = ["convert", source, str(tmp_path / "out.safetensors")]
    loaded = _modules_after(args + (["--adapter", adapter] if adapter else []))
    assert ("ckptctl.adapters.families" in loaded) is (adapter is not None)
    assert (tmp_path / "out.safetensors").stat().st_size > 0


@pytest.mark.ckernels
def test_a_cast_imports_the_compiled_kernels_only_when_it_converts(tmp_path):
    pytest.importorskip("ckptctl._ckernels")
    source = str(VALID / "safetensors" / "bf16.safetensors")
    loaded = _modules_after(["convert", source, str(tmp_path / "o.safetensors"), "-a", "cast:f32"])
    assert "ckptctl._ckernels" in loaded
    assert "ckptctl._ckernels" not in _modules_after(["ls", source])

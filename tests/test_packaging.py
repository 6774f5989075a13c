"""`pip install .` / `pipx install .` ship a working command: the wheel has everything it needs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

#: What a build must not see or write back: VCS data, caches, earlier build output, bench inputs.
NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
    "build",
    "dist",
    "*.egg-info",
    "_work",
    "*.so",  # the compiled kernels built in place by `pip install -e .`
)


def _source_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # setuptools builds in the source tree (build/, *.egg-info): build a copy, not the checkout.
    source = tmp_path_factory.mktemp("source") / "ckptctl"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE, symlinks=True)
    return source


def _build_wheel(
    tmp_path_factory: pytest.TempPathFactory, env: dict[str, str] | None = None
) -> Path:
    source = _source_copy(tmp_path_factory)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--wheel-dir",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
        env=env,
    )
    (path,) = out.glob("ckptctl-*.whl")
    return path


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return _build_wheel(tmp_path_factory)


def test_wheel_contents(wheel):
    from ckptctl import __version__

    assert wheel.name.startswith(f"ckptctl-{__version__}-")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        scripts = archive.read(entry_points).decode()
        metadata = archive.read(next(n for n in names if n.endswith("/METADATA"))).decode()
    assert "ckptctl/py.typed" in names
    pages = {n.rsplit("/", 1)[-1] for n in names if "/data/share/man/man1/" in n}
    assert {"ckptctl.1", "ckptctl-ls.1", "ckptctl-convert.1", "ckptctl-verify.1"} <= pages
    for module in ("ls", "header", "convert", "remap", "diff", "verify"):
        assert f"ckptctl/cli/{module}.py" in names
    assert "ckptctl/formats/pytorch/_writer.py" in names
    assert "ckptctl/formats/burnpack/reader.py" in names
    assert "ckptctl = ckptctl.cli:main" in scripts
    assert not any(n.startswith(("tests/", "fixtures/", "benchmarks/")) for n in names)
    for requirement in ("click", "rich", "numpy", "cbor2", "zipfile-deflate64"):
        assert f"Requires-Dist: {requirement}" in metadata
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert not any("torch" in line for line in requires)


def _compiled_kernels(names: set[str]) -> list[str]:
    return [n for n in names if n.startswith("ckptctl/_ckernels") and n.endswith((".so", ".pyd"))]


@pytest.mark.ckernels
def test_the_wheel_holds_the_compiled_kernels_and_their_stub(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert len(_compiled_kernels(names)) == 1
    assert "ckptctl/_ckernels.pyi" in names
    assert "ckptctl/_ckernels.c" not in names


def test_without_a_c_compiler_the_wheel_builds_without_the_kernels(tmp_path_factory):
    """The extension is optional: with no working compiler (``CC=false``) the build still
    succeeds and ckptctl runs on its numpy kernels."""
    import os

    path = _build_wheel(tmp_path_factory, env={**os.environ, "CC": "false"})
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
    assert not _compiled_kernels(names)
    assert "ckptctl/dtypes.py" in names


def test_the_sdist_holds_the_c_source_and_the_build_script(tmp_path_factory):
    source = _source_copy(tmp_path_factory)
    out = tmp_path_factory.mktemp("sdist")
    code = f"from setuptools import build_meta; build_meta.build_sdist({str(out)!r})"
    subprocess.run(
        [sys.executable, "-c", code],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (path,) = out.glob("ckptctl-*.tar.gz")
    with tarfile.open(path) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {"setup.py", "ckptctl/_ckernels.c", "ckptctl/_ckernels.pyi"} <= names

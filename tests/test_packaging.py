"""`pip install .` / `pipx install .` ship a working command: the wheel has everything it needs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

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
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    # setuptools builds in the source tree (build/, *.egg-info): build a copy, not the checkout.
    source = tmp_path_factory.mktemp("source") / "ckptctl"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE, symlinks=True)
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
    )
    (path,) = out.glob("ckptctl-*.whl")
    return path


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

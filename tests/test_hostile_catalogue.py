"""The malicious-pickle catalogue and the zip tricks (fixtures/hostile/{pickle_catalogue,zip}).

Every catalogue file is refused with ``UnsafePickleError`` naming the global in its file name,
through the library and through ``ckptctl ls`` / ``ckptctl verify``-style CLI runs, and its
marker file never appears. Zip tricks each have their own expected outcome (see the README).
Also checked: every file has a README line, and the committed files are what the generator
writes now.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ckptctl.errors import CkptError, CorruptCheckpointError, UnsafePickleError, UnsupportedError
from ckptctl.formats import open_checkpoint
from tests.conftest import load_module

HOSTILE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile"
CATALOGUE = HOSTILE / "pickle_catalogue"
ZIP = HOSTILE / "zip"
PAYLOADS = sorted(p for p in CATALOGUE.iterdir() if "__" in p.name)
TRICKS = sorted(ZIP.glob("*.pt"))


def _marker(path: Path) -> Path:
    stem = path.name.split(".")[0]
    return Path("/tmp") / f"ckptctl-pwned-{stem}"


def _load_all(path: Path) -> None:
    with open_checkpoint(path) as ckpt:
        for entry in ckpt.values():
            entry.load()


@pytest.fixture(autouse=True)
def _no_stale_markers() -> None:
    for marker in Path("/tmp").glob("ckptctl-pwned-*"):
        marker.unlink()


def test_catalogue_covers_the_published_techniques() -> None:
    names = " ".join(p.name for p in PAYLOADS)
    for needle in ("os.system", "posix.", "nt.", "subprocess.", "builtins.eval", "builtins.exec",
                   "builtins.compile", "builtins.getattr", "builtins.__import__", "importlib.",
                   "runpy.", "pickle.loads", "memo", "inst-", "obj-", "newobj-", "stack-global",
                   ".zip.pt", ".legacy.pt", ".ts.pt", ".pkl"):  # fmt: skip
        assert needle in names, needle
    protocols = {p.name.split("-p")[-1][0] for p in PAYLOADS if "-p" in p.name}
    assert {"0", "1", "2", "3", "4", "5"} <= protocols


@pytest.mark.parametrize("path", PAYLOADS, ids=[p.name for p in PAYLOADS])
def test_catalogue_payload_is_refused_naming_the_global(path: Path) -> None:
    name = path.name.split("__")[0]
    with pytest.raises(UnsafePickleError) as info:
        _load_all(path)
    message = str(info.value)
    module, _, attr = name.rpartition(".")
    assert attr in message
    assert module in message or (module == "builtins" and "__builtin__" in message)
    assert not _marker(path).exists(), "a pickled payload was executed"


@pytest.mark.parametrize("path", PAYLOADS[::7], ids=[p.name for p in PAYLOADS[::7]])
def test_cli_refuses_catalogue_payload_with_exit_3(run_cli, path: Path) -> None:
    result = run_cli("ls", path)
    assert result.code == 3
    assert "unsafe pickle" in result.stderr
    assert "Traceback" not in result.stderr
    assert not _marker(path).exists()


#: Zip trick -> the error types it may raise (None: opening cleanly is fine too).
TRICK_OUTCOMES: dict[str, tuple[type[CkptError], ...] | None] = {
    "duplicate_names.pt": None,  # torch reads the first; verify calls it ambiguous (unsafe)
    "encrypted_flag.pt": (UnsupportedError, CorruptCheckpointError),
    "crc_mismatch.pt": (UnsafePickleError, CorruptCheckpointError),
    "crc_mismatch_benign.pt": None,
    "path_traversal.pt": None,
    "absolute_name.pt": None,
    "hidden_pickle.pt": None,
    "polyglot_pickle_first.pt": (UnsafePickleError,),
    "polyglot_zip_first.pt": None,
    "evil_constants.pt": None,
}


def test_every_zip_trick_has_an_expected_outcome() -> None:
    assert {p.name for p in TRICKS} == set(TRICK_OUTCOMES)


@pytest.mark.parametrize("path", TRICKS, ids=[p.name for p in TRICKS])
def test_zip_trick_never_runs_anything(path: Path) -> None:
    allowed = TRICK_OUTCOMES[path.name]
    try:
        _load_all(path)
    except CkptError as exc:
        if allowed is not None:
            assert isinstance(exc, allowed), f"{type(exc).__name__}: {exc}"  # noqa: PT017
    else:
        assert allowed is None, f"{path.name} opened, expected {allowed}"
    assert not _marker(path).exists()
    assert not Path("/tmp/ckptctl-pwned-path_traversal").exists()
    assert not Path("/tmp/ckptctl-pwned-absolute_name").exists()


def test_polyglot_refusal_names_the_global() -> None:
    with pytest.raises(UnsafePickleError, match=r"os.*system"):
        open_checkpoint(ZIP / "polyglot_pickle_first.pt")


def test_every_file_has_a_readme_line() -> None:
    for folder in (CATALOGUE, ZIP):
        readme = (folder / "README.md").read_text(encoding="utf-8")
        for path in folder.iterdir():
            if path.name != "README.md":
                assert f"`{path.name}`" in readme, path


def test_committed_files_match_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    module = load_module(CATALOGUE / "make_catalogue.py")
    monkeypatch.setitem(sys.modules, "make_catalogue", module)  # its payloads pickle its classes
    for folder, files in ((CATALOGUE, module.catalogue()), (ZIP, module.zip_tricks())):
        for name, (data, _) in files.items():
            assert (folder / name).read_bytes() == data, name

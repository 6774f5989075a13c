"""A bounded run of ``fuzz/mutation_smoke.py``: mutated fixtures through ``ls`` and ``convert``.

The full run (thousands of mutants) is the script itself; here a few mutants of every valid
fixture go through the in-process CLI, and a handful through real ``python -m ckptctl``
subprocesses. Only exit codes 0/1/3/4 are allowed, no traceback, every failure explained.
"""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"
BURN_MODULES = Path(__file__).resolve().parents[1] / "fixtures" / "valid" / "burn_modules"


@pytest.fixture(scope="module")
def smoke() -> ModuleType:
    sys.path.insert(0, str(FUZZ))
    try:
        spec = importlib.util.spec_from_file_location("mutation_smoke", FUZZ / "mutation_smoke.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["mutation_smoke"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(FUZZ))
    return module


def test_in_process_smoke_run_has_only_allowed_exit_codes(smoke: ModuleType) -> None:
    summary = smoke.smoke(mutants=4, seed=7)
    assert summary.runs == 2 * 4 * len(smoke.fixtures())
    assert summary.problems == []
    codes = {code for _, code in summary.codes}
    assert codes <= {0, 1, 3, 4}
    assert {0, 3} <= codes, "mutants should both pass and fail; the mutator may be broken"
    table = summary.table()
    assert table.splitlines()[0].startswith("command")
    assert f"{summary.runs} runs, 0 problems" in table


def test_subprocess_smoke_run_has_only_allowed_exit_codes(
    smoke: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two fixtures only: each subprocess pays the interpreter start-up.
    two = sorted(smoke.fixtures(), key=lambda p: p.stat().st_size)[:2]
    monkeypatch.setattr(smoke, "fixtures", lambda: two)
    summary = smoke.smoke(mutants=2, seed=3, use_subprocess=True)
    assert summary.runs == 2 * 2 * 2
    assert summary.problems == []


def test_check_flags_tracebacks_and_unexplained_failures(smoke: ModuleType) -> None:
    summary = smoke.Summary()
    smoke.check(smoke.Outcome("ls", 70, "Traceback (most recent call last):", 0.1), "x", summary)
    smoke.check(smoke.Outcome("ls", 3, "", 0.1), "y", summary)
    smoke.check(smoke.Outcome("ls", 3, "ckptctl: error: bad", 9.0), "z", summary)
    smoke.check(smoke.Outcome("ls", 0, "", 0.1), "ok", summary)
    assert len(summary.problems) == 3
    assert "exit 70" in summary.problems[0]
    assert "traceback" in summary.problems[0]
    assert "without an error message" in summary.problems[1]
    assert "took 9.0 s" in summary.problems[2]


def _renamed_in_pickle(src: Path, dst: Path, old: bytes, new: bytes) -> None:
    """``src`` (a .pt zip) with ``old`` replaced by ``new`` (same length) in its data.pkl."""
    assert len(old) == len(new)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("/data.pkl"):
                assert data.count(old) == 1
                data = data.replace(old, new)
            zout.writestr(info, data)


def test_a_tensor_name_with_a_control_character_is_unsupported_not_an_output_error(
    smoke: ModuleType, tmp_path: Path
) -> None:
    """The smoke run's finding: a mutant of ``burn_modules/decoder_post.pt`` whose tensor name
    holds ``\\x01`` made ``convert`` exit 5. torch keeps any string key, so the input is
    valid; safetensors and burnpack readers refuse such a name, so those outputs cannot hold it:
    exit 4 (a valid input using a feature ckptctl cannot handle), as for a dtype a format
    lacks. A ``.pt`` keeps the name."""
    src = tmp_path / "bad.pt"
    name = "decoder.layers.0.self_attn.in_proj_bias"
    bad = "dec\x01der.layers.0.self_attn.in_proj_bias"
    _renamed_in_pickle(BURN_MODULES / "decoder_post.pt", src, name.encode(), bad.encode())
    assert smoke.run_in_process(["ls", str(src)])[0] == 0
    summary = smoke.Summary()
    codes = {}
    for ext in (".safetensors", ".bpk", ".pt"):
        out = tmp_path / f"out{ext}"
        code, stderr = smoke.run_in_process(["convert", str(src), str(out)])
        smoke.check(smoke.Outcome("convert", code, stderr, 0.0), ext, summary)
        codes[ext] = code
        assert out.exists() == (code == 0)
    assert summary.problems == []
    assert codes == {".safetensors": 4, ".bpk": 4, ".pt": 0}
    code, stderr = smoke.run_in_process(["convert", str(src), str(tmp_path / "again.safetensors")])
    assert stderr.splitlines() == [
        f"ckptctl: error: {tmp_path / 'again.safetensors'}: tensor name {bad!r} contains the "
        "control character '\\x01', which safetensors cannot store",
        "hint: write a .pt instead, or rename it with --remap",
    ]
    from ckptctl import open_checkpoint

    with open_checkpoint(tmp_path / "out.pt") as ckpt:
        assert bad in ckpt

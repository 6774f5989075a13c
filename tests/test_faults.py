"""Faults while writing: disk full, I/O errors and interrupts leave the destination untouched.

Faults are injected below the writers: ``os.fdopen`` (what ``atomic_write`` opens its temporary
file with) returns a file whose ``write`` fails once a byte budget is spent, and
``os.copy_file_range`` (the zero-copy path of ``copy_range``) fails the same way. Each output
format is tested with a fresh destination and with an existing one overwritten by ``--force``;
afterwards the destination holds exactly what it held before and the directory holds no
``.ckptctl-*.tmp`` file. A real SIGINT to a ``python -m ckptctl convert`` subprocess checks the
same end to end. Same input and options give byte-identical output, for every output format.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import numpy as np
import pytest

from ckptctl.errors import OutputError
from ckptctl.formats import save_checkpoint
from ckptctl.ops.convert import ConvertOptions, convert
from tests.strategies import array_entry

VALID = Path(__file__).resolve().parents[1] / "fixtures" / "valid"
REPO = Path(__file__).resolve().parents[1]
OUTPUTS = [".safetensors", ".bpk", ".pt"]
SOURCES = [
    VALID / "safetensors" / "tiny.safetensors",
    VALID / "burnpack" / "net.bpk",
    VALID / "pytorch" / "min_zip.pt",
]


class FaultyFile:
    """Wraps the temp file: ``write`` raises ``exc`` once ``budget`` bytes have been written."""

    def __init__(self, real: IO[bytes], state: dict[str, Any]) -> None:
        self._real = real
        self._state = state

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self._state["budget"] -= n
        if self._state["budget"] < 0:
            raise self._state["exc"]()
        return self._real.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def __enter__(self) -> FaultyFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._real.close()


def _disk_full() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _io_error() -> OSError:
    return OSError(errno.EIO, os.strerror(errno.EIO))


@pytest.fixture
def inject(monkeypatch: pytest.MonkeyPatch):
    """``inject(budget, exc)``: make writes and copy_file_range fail after ``budget`` bytes."""

    def arm(budget: int, exc: Any) -> dict[str, Any]:
        state: dict[str, Any] = {"budget": budget, "exc": exc}
        real_fdopen = os.fdopen
        real_cfr = getattr(os, "copy_file_range", None)

        def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
            return FaultyFile(real_fdopen(fd, *args, **kwargs), state)

        def copy_file_range(src: int, dst: int, count: int, *args: Any) -> int:
            state["budget"] -= count
            if state["budget"] < 0:
                raise state["exc"]()
            assert real_cfr is not None
            return int(real_cfr(src, dst, count, *args))

        monkeypatch.setattr(os, "fdopen", fdopen)
        if real_cfr is not None:
            monkeypatch.setattr(os, "copy_file_range", copy_file_range)
        return state

    return arm


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _output_size(src: Path, ext: str, tmp_path: Path) -> int:
    ref = tmp_path / "reference" / f"out{ext}"
    ref.parent.mkdir()
    convert(src, ref)
    return ref.stat().st_size


@pytest.mark.parametrize("ext", OUTPUTS)
@pytest.mark.parametrize(
    "exc", [_disk_full, _io_error, KeyboardInterrupt], ids=["ENOSPC", "EIO", "SIGINT"]
)
@pytest.mark.parametrize("existing", [False, True], ids=["new", "force"])
def test_fault_mid_write_leaves_destination_as_it_was(
    tmp_path: Path, inject: Any, ext: str, exc: Any, existing: bool
) -> None:
    src = VALID / "safetensors" / "tiny.safetensors"
    size = _output_size(src, ext, tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    dst = out_dir / f"model{ext}"
    if existing:
        dst.write_bytes(b"the old destination, which must survive")
    before = _snapshot(out_dir)
    for budget in (0, 1, size // 3, size // 2, size - 1):  # at the start, early, mid, at the end
        inject(budget, exc)
        expected = KeyboardInterrupt if exc is KeyboardInterrupt else OutputError
        with pytest.raises(expected) as info:
            convert(src, dst, ConvertOptions(force=existing))
        if expected is OutputError:
            assert os.strerror(errno.ENOSPC if exc is _disk_full else errno.EIO) in str(info.value)
        assert _snapshot(out_dir) == before, f"destination or temp file changed at {budget}"


@pytest.mark.parametrize("ext", OUTPUTS)
@pytest.mark.parametrize("step", ["fsync", "replace"])
def test_fault_while_committing_leaves_destination_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ext: str, step: str
) -> None:
    dst = tmp_path / f"model{ext}"
    dst.write_bytes(b"old")

    def fail(*args: object) -> None:
        raise _io_error()

    monkeypatch.setattr(os, step, fail)
    with pytest.raises(OutputError, match="Input/output error"):
        convert(VALID / "safetensors" / "tiny.safetensors", dst, ConvertOptions(force=True))
    monkeypatch.undo()
    assert _snapshot(tmp_path) == {dst.name: b"old"}


@pytest.mark.parametrize("src", SOURCES, ids=[p.name for p in SOURCES])
@pytest.mark.parametrize("ext", OUTPUTS)
def test_same_input_gives_byte_identical_output(tmp_path: Path, src: Path, ext: str) -> None:
    digests = set()
    for i in range(3):
        out = tmp_path / f"run{i}" / f"model{ext}"
        out.parent.mkdir()
        convert(src, out)
        digests.add(hashlib.sha256(out.read_bytes()).hexdigest())
        time.sleep(0.01)  # a timestamp in the output would differ across runs
    assert len(digests) == 1


def _big_input(path: Path) -> Path:
    """A 96 MiB F32 safetensors file: converting it with a cast takes well over a second."""
    rng = np.random.default_rng(0)
    block = rng.standard_normal(1 << 21, dtype=np.float32)  # 8 MiB
    entries = [array_entry(f"layer{i}.weight", block + i) for i in range(12)]
    save_checkpoint(path, entries)
    return path


@pytest.mark.parametrize("ext", OUTPUTS)
def test_real_sigint_to_convert_subprocess(tmp_path: Path, ext: str) -> None:
    src = _big_input(tmp_path / "big.safetensors")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    dst = out_dir / f"model{ext}"
    dst.write_bytes(b"old")
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "ckptctl", "convert", str(src), str(dst), "--force"]
    proc = subprocess.Popen(
        [*cmd, "--adapter", "cast:f16"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 30
    # Interrupt once the temporary output exists and has some bytes: mid-write.
    while time.monotonic() < deadline and proc.poll() is None:
        temps = list(out_dir.glob(".ckptctl-*.tmp"))
        if temps and any(t.exists() and t.stat().st_size > 0 for t in temps):
            break
        time.sleep(0.005)
    assert proc.poll() is None, "convert finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert b"Traceback" not in stderr
    assert b"interrupted" in stderr
    assert _snapshot(out_dir) == {"model" + ext: b"old"}

"""The write path's system-call helpers (issue 15): pre-sizing and early writeback."""

from __future__ import annotations

import io
import os

import numpy as np

from ckptctl import _io, save_checkpoint
from ckptctl._io import atomic_write, start_writeback
from ckptctl.formats._base import preallocate
from tests.strategies import array_entry


def test_writeback_only_for_outputs_that_will_be_fsynced(tmp_path, monkeypatch):
    calls: list[tuple[int, ...]] = []

    def record(*args: int) -> int:
        calls.append(args)
        return 0

    monkeypatch.setattr(_io, "_sync_file_range", lambda: record)
    with atomic_write(tmp_path / "a.bin", fsync=False) as out:
        out.write(b"x" * 100)
        start_writeback(out, 0, 100)
    assert calls == []
    with atomic_write(tmp_path / "b.bin") as out:
        out.write(b"x" * 100)
        start_writeback(out, 0, 100)
        start_writeback(out, 100, 0)  # nothing to write back
        fd = out.fileno()
    assert calls == [(fd, 0, 100, 2)]
    assert fd not in _io._WRITEBACK_FDS  # forgotten once the file is closed
    start_writeback(io.BytesIO(), 0, 10)  # no descriptor: nothing happens
    assert (tmp_path / "b.bin").read_bytes() == b"x" * 100


def test_writeback_is_a_no_op_on_a_real_kernel_call(tmp_path):
    with atomic_write(tmp_path / "c.bin") as out:
        out.write(b"y" * 8192)
        out.flush()
        start_writeback(out, 0, 8192)
    assert (tmp_path / "c.bin").read_bytes() == b"y" * 8192


def test_preallocate_sizes_the_file_and_ignores_memory_buffers(tmp_path):
    path = tmp_path / "d.bin"
    with open(path, "wb") as out:
        preallocate(out, 4096)
        out.write(b"z" * 4096)
    assert path.read_bytes() == b"z" * 4096
    buffer = io.BytesIO()
    preallocate(buffer, 4096)
    assert buffer.getvalue() == b""


def test_written_files_are_exactly_their_planned_size(tmp_path):
    entries = [array_entry(f"t{i}", np.arange(i + 3, dtype="<f4")) for i in range(5)]
    for ext in (".safetensors", ".bpk"):
        path = tmp_path / f"m{ext}"
        save_checkpoint(path, entries, {"k": "v"}, force=True)
        again = tmp_path / f"again{ext}"
        save_checkpoint(again, entries, {"k": "v"}, force=True, fsync=False)
        assert path.read_bytes() == again.read_bytes()
        assert os.path.getsize(path) == len(path.read_bytes())

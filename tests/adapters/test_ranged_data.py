"""Casts and transposes computed a range at a time (issue 50).

A cast or transposed entry read by ranges (any offsets, whole elements or not) must give the
bytes of the whole tensor; a writer streams such entries a step at a time on the copy threads
(``-j``), and the file is the same for any number of threads. Inputs that cannot be read by
ranges from a local file are computed whole, as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import replace

import numpy as np
import pytest

from ckptctl import ConvertOptions, convert, open_checkpoint, save_checkpoint
from ckptctl.adapters import layout
from ckptctl.adapters.cast import cast_entry
from ckptctl.adapters.layout import transposed
from ckptctl.dtypes import DType
from ckptctl.model import FileData, TensorEntry
from ckptctl.sources import ByteSource
from ckptctl.sources import local as _src
from tests.strategies import array_entry

RNG = np.random.default_rng(0)


@pytest.fixture
def stored(tmp_path):
    """``stored(array, dtype)``: an entry of ``array`` read from a safetensors file."""
    sources: list[ByteSource] = []

    def make(array: np.ndarray, dtype: DType | None = None) -> TensorEntry:
        path = tmp_path / f"in{len(sources)}.safetensors"
        save_checkpoint(path, [array_entry("w", array, dtype)])
        ckpt = open_checkpoint(path)
        sources.append(ckpt._sources[0])
        return ckpt["w"]

    yield make
    for source in sources:
        source.close()


def _whole(entry: TensorEntry) -> bytes:
    return bytes(entry.data.read())


def _values(shape: tuple[int, ...]) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "make",
    [
        lambda e: cast_entry(e, DType.BF16),
        lambda e: cast_entry(e, DType.F64),
        lambda e: transposed(e),
        lambda e: cast_entry(transposed(e), DType.F16),
        lambda e: transposed(cast_entry(e, DType.F16)),
    ],
    ids=["bf16", "f64", "transposed", "transposed-then-f16", "f16-then-transposed"],
)
def test_any_range_is_the_same_bytes_as_the_whole(stored, make):
    array = _values((300, 70))
    entry = make(stored(array))
    whole = _whole(entry)
    assert len(whole) == entry.nbytes
    for start, length in [(0, entry.nbytes), (3, 17), (1, 1), (entry.nbytes - 5, 5), (280, 4000)]:
        assert bytes(entry.data.read_range(start, length)) == whole[start : start + length]
    for start, length in [(0, 560), (560, 1120), (entry.nbytes - 280, 280)]:
        buffer = bytearray(length)
        entry.data.read_into(start, memoryview(buffer))
        assert bytes(buffer) == whole[start : start + length]


def test_cast_and_transpose_values(stored):
    array = _values((64, 48))
    pairs = {
        "bf16": (cast_entry(stored(array), DType.BF16), None),
        "t": (transposed(stored(array)), array.T),
        "t-f64": (cast_entry(transposed(stored(array)), DType.F64), array.T.astype(np.float64)),
        "f16-t": (transposed(cast_entry(stored(array), DType.F16)), array.astype(np.float16).T),
    }
    for name, (entry, want) in pairs.items():
        if want is not None:
            assert entry.load().tobytes() == np.ascontiguousarray(want).tobytes(), name
    bf16 = pairs["bf16"][0].load()
    assert bf16.tobytes() == (array.view(np.uint32) + 0x7FFF + (array.view(np.uint32) >> 16 & 1)
                              >> 16).astype(np.uint16).tobytes()  # fmt: skip


def test_only_local_ranged_data_is_computed_by_steps(stored):
    local = stored(_values((100, 30)))
    assert cast_entry(local, DType.BF16).data.compute_step() > 0
    assert transposed(local).data.compute_step() > 0
    in_memory = array_entry("m", _values((100, 30)))  # computed whole: no ranges
    assert cast_entry(in_memory, DType.BF16).data.compute_step() == 0
    assert transposed(in_memory).data.compute_step() == 0
    assert not transposed(in_memory).data.is_ranged()

    class Remote(ByteSource):
        is_remote = True

    where = local.data.file_range()
    assert where is not None
    remote = Remote(where[0].path)
    try:
        far = replace(local, data=FileData(remote, where[1], local.nbytes))
        assert cast_entry(far, DType.BF16).data.compute_step() == 0  # read by one thread
        assert transposed(far).data.compute_step() == 0
        assert _whole(transposed(far)) == _whole(transposed(local))
    finally:
        remote.close()


def test_a_transpose_unmaps_the_input_once_every_band_was_read(stored, monkeypatch):
    monkeypatch.setattr(layout, "TRANSPOSE_STEP_BYTES", 1 << 15)
    released: list[tuple[int, int]] = []
    monkeypatch.setattr(
        ByteSource, "release_pages", lambda self, offset, length: released.append((offset, length))
    )
    entry = stored(_values((512, 64)))
    out = transposed(entry).data
    step = out.compute_step()
    assert 0 < step < entry.nbytes
    buffer = memoryview(bytearray(step))
    for start in range(0, entry.nbytes - step, step):
        out.read_into(start, buffer)
    assert released == []
    last = entry.nbytes - len(range(0, entry.nbytes - step, step)) * step
    out.read_into(entry.nbytes - last, buffer[:last])
    where = entry.data.file_range()
    assert where is not None
    assert released == [(where[1], entry.nbytes)]


#: Reads the first band of a transposed tensor, truncates its file, then reads the second.
_TRUNCATED_BETWEEN_BANDS = """
import os, sys
from ckptctl import open_checkpoint
from ckptctl.adapters.layout import transposed
from ckptctl.errors import CorruptCheckpointError
path = sys.argv[1]
with open_checkpoint(path) as ckpt:
    data = transposed(ckpt["w"]).data
    step = data.compute_step()
    data.read_into(0, memoryview(bytearray(step)))
    os.truncate(path, os.path.getsize(path) // 2)
    try:
        data.read_into(step, memoryview(bytearray(step)))
    except CorruptCheckpointError as exc:
        print(exc.path, "|", exc.message)
"""


def test_a_transpose_of_a_file_truncated_meanwhile_is_an_error_not_sigbus(tmp_path):
    """A transpose reads its input through the memory map, where a page past the new end of a
    truncated file is SIGBUS: in a child process, so that a crash fails this test alone."""
    path = tmp_path / "in.safetensors"
    save_checkpoint(path, [array_entry("w", _values((2048, 1024)))])
    child = subprocess.run(
        [sys.executable, "-c", _TRUNCATED_BETWEEN_BANDS, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, (child.returncode, child.stderr)  # -7: SIGBUS
    assert child.stdout.startswith(f"{path} |")
    assert "truncated" in child.stdout


@pytest.mark.parametrize(
    "adapters",
    [("cast:bf16",), ("cast:f16",), ("pytorch-to-burn",), ("pytorch-to-burn", "cast:bf16")],
)
def test_convert_streams_casts_and_transposes_on_the_copy_threads(tmp_path, monkeypatch, adapters):
    """-j 2: the steps run on two threads; -j 1: in the calling thread; the same file."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(_src, "FILL_TASK_BYTES", 1 << 16)
    monkeypatch.setattr(layout, "TRANSPOSE_STEP_BYTES", 1 << 15)
    src = tmp_path / "in.safetensors"
    save_checkpoint(src, [array_entry("fc.weight", _values((700, 300))),
                          array_entry("fc.bias", _values((700,)))])  # fmt: skip
    seen: set[int] = set()
    run = _src._Fill.run

    def spy(self, fd):
        seen.add(threading.get_ident())
        return run(self, fd)

    monkeypatch.setattr(_src._Fill, "run", spy)
    written = {}
    for jobs in (1, 2):
        seen.clear()
        out = tmp_path / f"out{jobs}.safetensors"
        options = ConvertOptions(adapters=adapters, module_types=(".*=Linear",), jobs=jobs)
        convert(src, out, options)
        written[jobs] = out.read_bytes()
        assert seen
        assert (seen == {threading.get_ident()}) == (jobs == 1)
    assert written[1] == written[2]
    with open_checkpoint(tmp_path / "out2.safetensors") as ckpt:
        weight = ckpt[next(n for n in ckpt if n.endswith("weight"))]
        assert weight.shape == ((300, 700) if "pytorch-to-burn" in adapters else (700, 300))


@pytest.mark.parametrize("ext", [".pt", ".bpk", ".safetensors"])
def test_every_writer_streams_the_same_cast_and_transpose(tmp_path, monkeypatch, ext):
    """The ``.pt`` writer CRCs the bytes in order (``fill_chunks``), the others write them in
    place (``fill_ranges``): each file holds the whole-tensor cast of the transpose."""
    monkeypatch.setattr(layout, "TRANSPOSE_STEP_BYTES", 1 << 15)
    chunks = []
    fill_chunks = _src.fill_chunks

    def spy(fill, nbytes, step):
        chunks.append(step)
        return fill_chunks(fill, nbytes, step)

    monkeypatch.setattr("ckptctl.formats.pytorch._writer.fill_chunks", spy)
    array = _values((900, 200))
    src = tmp_path / "in.safetensors"
    save_checkpoint(src, [array_entry("fc.weight", array)])
    out = tmp_path / f"out{ext}"
    adapters = ("pytorch-to-burn", "cast:bf16")
    convert(src, out, ConvertOptions(adapters=adapters, module_types=(".*=Linear",)))
    with open_checkpoint(out) as ckpt:
        (entry,) = ckpt.values()
        assert entry.shape == (200, 900)
        want = cast_entry(transposed(array_entry("w", array)), DType.BF16).load()
        assert entry.load().tobytes() == want.tobytes()
    assert bool(chunks) == (ext == ".pt")


@pytest.mark.slow
@pytest.mark.bounded
@pytest.mark.parametrize(
    "adapters",
    [("-a", "cast:bf16"), ("-a", "cast:f64"), ("-a", "pytorch-to-burn", "-a", "cast:f16")],
)
def test_big_casts_and_transposes_stay_within_64_mib_and_the_largest_tensor(tmp_path, adapters):
    """Three 128 MiB F32 weights (a sparse file): the peak stays under 64 MiB + 128 MiB (the
    largest output tensor of ``cast:f64`` is 256 MiB: its bound is 64 MiB + 256 MiB)."""
    import json
    import struct

    from tests.conftest import run_measured

    shape, count = (4096, 8192), 3
    nbytes = shape[0] * shape[1] * 4
    header = {f"l{i}.weight": {"dtype": "F32", "shape": list(shape),
                               "data_offsets": [i * nbytes, (i + 1) * nbytes]}
              for i in range(count)}  # fmt: skip
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    src = tmp_path / "big.safetensors"
    with open(src, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        f.truncate(8 + len(blob) + count * nbytes)
    args = ["convert", str(src), str(tmp_path / "out.bpk"), "--no-fsync", "-q"]
    run = run_measured([*args, "--module-type", ".*=Linear", *adapters], cwd=tmp_path)
    assert run.code == 0, run.output
    largest = nbytes * (2 if "cast:f64" in adapters else 1)
    assert run.peak_rss < (64 << 20) + largest, f"peak RSS {run.peak_rss >> 20} MiB"

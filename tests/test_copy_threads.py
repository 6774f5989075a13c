"""``sources.copy_ranges`` on several threads (issue 26: a copy through user space is bound by
the CPU, so the output is cut into tasks written at their own places at once).

Every test compares the output with the bytes the ranges name; the thread tests make the
threads meet (a barrier, an event) so a copy that runs its tasks one after the other fails
instead of passing slowly.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from ckptctl import ConvertOptions, convert, save_checkpoint
from ckptctl.errors import CorruptCheckpointError
from ckptctl.sources import ByteSource, MemorySource
from ckptctl.sources import local as _src
from tests.strategies import array_entry

DATA = bytes(range(256)) * 4
OTHER = bytes(reversed(DATA))


@pytest.fixture
def files(tmp_path):
    (tmp_path / "a.bin").write_bytes(DATA)
    (tmp_path / "b.bin").write_bytes(OTHER)
    with ByteSource(tmp_path / "a.bin") as a, ByteSource(tmp_path / "b.bin") as b:
        yield a, b


@pytest.fixture
def cores(monkeypatch):
    """``cores(n)``: the process may run on ``n`` cores."""

    def set_cores(n: int) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(n)), raising=False)

    return set_cores


def _copy(tmp_path, ranges, threads: int) -> bytes:
    path = tmp_path / "dst.bin"
    with open(path, "wb") as out, _src.set_copy_threads(threads):
        out.write(b"HDR")
        _src.copy_ranges(ranges, out)
        out.write(b"END")  # where copy_ranges left the position
    return bytes(path.read_bytes())


def _rows(a, b, memory) -> tuple[list[tuple[ByteSource, int, int]], bytes]:
    """Ranges of a column split (two files in turn) and of a source without a descriptor."""
    ranges, want = [], b""
    for row in range(12):
        ranges += [(a, 100 + 10 * row, 10), (b, 7 + 6 * row, 6)]
        want += DATA[100 + 10 * row : 110 + 10 * row] + OTHER[7 + 6 * row : 13 + 6 * row]
    ranges += [(memory, 2, 5), (a, 500, 300), (memory, 0, 0), (b, 3, 1)]
    return ranges, want + b"cdefg" + DATA[500:800] + OTHER[3:4]


def _spy_tasks(monkeypatch) -> list[tuple[int, bool]]:
    """Record each task's thread and whether every range of it has a descriptor."""
    seen: list[tuple[int, bool]] = []
    real = _src._copy_task

    def spy(fd, task):
        seen.append((threading.get_ident(), all(r[1] is not None for r in task[1])))
        return real(fd, task)

    monkeypatch.setattr(_src, "_copy_task", spy)
    return seen


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("task_bytes", [5, 16, 100, 4096])
@pytest.mark.parametrize("copy_bytes", [7, 64])
def test_copy_ranges_in_tasks_writes_the_bytes_and_ends_after_them(
    tmp_path, files, cores, monkeypatch, threads, task_bytes, copy_bytes
):
    cores(4)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", task_bytes)
    monkeypatch.setattr(_src, "COPY_BYTES", copy_bytes)
    ranges, want = _rows(files[0], files[1], MemorySource(b"abcdefgh", "nested"))
    assert _copy(tmp_path, ranges, threads) == b"HDR" + want + b"END"


def test_copy_ranges_of_nothing_leaves_the_position(tmp_path, files, cores):
    cores(2)
    assert _copy(tmp_path, [], 2) == b"HDREND"
    assert _copy(tmp_path, [(files[0], 5, 0)], 2) == b"HDREND"


def test_tasks_cut_the_output_at_every_task_end(files, monkeypatch):
    a, b = files
    memory = MemorySource(b"abcdefgh", "nested")
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", 10)
    tasks = list(_src._tasks([(a, 0, 4), (b, 50, 13), (memory, 1, 3), (a, 7, 10)], 3))
    fa, fb = a.fileno(), b.fileno()
    assert tasks == [
        (3, [(a, fa, 0, 4), (b, fb, 50, 6)]),
        (13, [(b, fb, 56, 7), (memory, None, 1, 3)]),
        (23, [(a, fa, 7, 10)]),
    ]


def test_tasks_ask_each_source_for_its_descriptor_once(files, monkeypatch):
    # 65,536 ranges per GiB of a column split: one look-up per source, not per range
    asked: list[ByteSource] = []
    real = _src._descriptor

    def spy(src: ByteSource) -> int | None:
        asked.append(src)
        return real(src)

    monkeypatch.setattr(_src, "_descriptor", spy)
    a, b = files
    memory = MemorySource(b"abcdefgh", "nested")
    ranges = [(a, 0, 4), (b, 4, 4), (memory, 0, 2), (a, 8, 4), (b, 0, 1), (memory, 3, 1)]
    ((_, batch),) = _src._tasks(ranges, 0)  # type: ignore[misc]  # no _Rows from _tasks
    assert asked == [a, b, memory]
    fds = [fd for _, fd, _, _ in batch]
    assert fds == [a.fileno(), b.fileno(), None, a.fileno(), b.fileno(), None]


def test_tasks_check_every_range_before_it_is_copied(files):
    a, _ = files
    tasks = _src._tasks([(a, 0, 4), (a, len(DATA) - 2, 3)], 0)
    with pytest.raises(CorruptCheckpointError, match="past the end of the file"):
        list(tasks)


def test_tasks_of_local_files_run_on_threads_at_once(tmp_path, files, cores, monkeypatch):
    """Two tasks must be running together to pass the barrier: a serial copy breaks it."""
    cores(2)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", 64)
    barrier = threading.Barrier(2, timeout=20)
    real = _src._copy_task
    threads: set[int] = set()

    def meet(fd, task):
        if task[0] < 3 + 128:  # the first two tasks wait for each other
            barrier.wait()
        threads.add(threading.get_ident())
        return real(fd, task)

    monkeypatch.setattr(_src, "_copy_task", meet)
    a, b = files
    ranges = [(a, 0, 200), (b, 10, 100)]
    assert _copy(tmp_path, ranges, 2) == b"HDR" + DATA[:200] + OTHER[10:110] + b"END"
    assert len(threads) == 2
    assert threading.get_ident() not in threads


def test_tasks_without_a_descriptor_run_in_the_calling_thread(tmp_path, files, cores, monkeypatch):
    cores(2)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", 16)
    seen = _spy_tasks(monkeypatch)
    ranges, want = _rows(files[0], files[1], MemorySource(b"abcdefgh", "nested"))
    assert _copy(tmp_path, ranges, 2) == b"HDR" + want + b"END"
    me = threading.get_ident()
    assert [local for _, local in seen].count(False) == 1  # the task with the memory range
    assert all((ident == me) == (not local) for ident, local in seen)


@pytest.mark.parametrize("jobs", [1, 2])
def test_one_task_or_one_thread_copies_in_the_calling_thread(
    tmp_path, files, cores, monkeypatch, jobs
):
    cores(2)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", 300 if jobs == 2 else 64)
    seen = _spy_tasks(monkeypatch)
    a, _ = files
    assert _copy(tmp_path, [(a, 0, 300)], jobs) == b"HDR" + DATA[:300] + b"END"
    assert {ident for ident, _ in seen} == {threading.get_ident()}
    assert len(seen) == (1 if jobs == 2 else 5)


def test_copy_ranges_queues_at_most_twice_as_many_tasks_as_threads(tmp_path, files, cores,
                                                                  monkeypatch):  # fmt: skip
    """The ranges are read as the copy goes: with the threads held, the copy takes the tasks
    it runs, the ones it queues (as many again) and one more, then waits."""
    cores(2)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", 10)
    go = threading.Event()
    real = _src._copy_task

    def held(fd, task):
        assert go.wait(20)
        return real(fd, task)

    monkeypatch.setattr(_src, "_copy_task", held)
    a, _ = files
    taken: list[int] = []

    def ranges():
        for i in range(20):
            taken.append(i)
            yield a, 10 * i, 10

    result: list[bytes] = []
    copier = threading.Thread(target=lambda: result.append(_copy(tmp_path, ranges(), 2)))
    copier.start()
    deadline = time.monotonic() + 20
    while len(taken) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # time to take more, if it would
    assert len(taken) == 5
    go.set()
    copier.join(20)
    assert result == [b"HDR" + DATA[:200] + b"END"]


class _Running:
    """``_copy_task`` slowed by ``delay`` seconds, counting the tasks running and started."""

    def __init__(self, monkeypatch, delay: float) -> None:
        self.now = 0
        self.started = threading.Event()
        self._lock = threading.Lock()
        self._delay = delay
        self._real = _src._copy_task
        monkeypatch.setattr(_src, "_copy_task", self)

    def __call__(self, fd, task):
        with self._lock:
            self.now += 1
        self.started.set()
        try:
            time.sleep(self._delay)
            return self._real(fd, task)
        finally:
            with self._lock:
                self.now -= 1


def test_a_failed_task_fails_the_copy_once_no_task_runs(tmp_path, files, cores, monkeypatch):
    cores(2)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", 10)
    running = _Running(monkeypatch, 0.02)
    path = tmp_path / "shrinks.bin"
    path.write_bytes(DATA)
    with ByteSource(path) as src:
        os.truncate(path, 100)
        with pytest.raises(CorruptCheckpointError, match="file truncated") as info:
            _copy(tmp_path, [(src, 10 * i, 10) for i in range(30)], 2)
        assert running.now == 0
    assert info.value.path == str(path)


def test_a_bad_range_after_tasks_started_fails_once_no_task_runs(tmp_path, files, cores,
                                                                 monkeypatch):  # fmt: skip
    cores(2)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", 10)
    running = _Running(monkeypatch, 0.2)
    a, _ = files

    def ranges():
        yield from [(a, 0, 10), (a, 10, 10), (a, 20, 10)]
        assert running.started.wait(20)
        yield a, len(DATA) - 2, 3  # past the end: found while tasks run

    with pytest.raises(CorruptCheckpointError, match="past the end of the file"):
        _copy(tmp_path, ranges(), 2)
    assert running.now == 0


def _truncated(tmp_path):
    """A source opened at 1,024 bytes whose file then shrank to 100: reads past 100 fail."""
    path = tmp_path / "shrinks.bin"
    path.write_bytes(DATA)
    src = ByteSource(path)
    os.truncate(path, 100)
    return src


def test_a_task_failing_after_the_last_is_queued_fails_with_its_error(tmp_path, files, cores,
                                                                      monkeypatch):  # fmt: skip
    """The error of a task still running when every task is queued is the one raised."""
    cores(2)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", 10)
    a, _ = files
    with (
        _truncated(tmp_path) as src,
        pytest.raises(CorruptCheckpointError, match="file truncated") as info,
    ):
        _copy(tmp_path, [(a, 0, 10), (a, 10, 10), (src, 200, 10)], 2)
    assert info.value.path == src.path


def test_a_bad_range_is_raised_before_the_error_of_a_task(tmp_path, files, cores, monkeypatch):
    """A range found bad while a task has already failed: the bad range is the error raised
    (found first in the ranges' order), once the failed task has ended."""
    cores(2)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", 10)
    failed = threading.Event()
    real = _src._copy_task

    def spy(fd, task):
        try:
            return real(fd, task)
        except CorruptCheckpointError:
            failed.set()
            raise

    monkeypatch.setattr(_src, "_copy_task", spy)
    a, _ = files
    with _truncated(tmp_path) as src:

        def ranges():
            yield from [(a, 0, 10), (src, 200, 10)]
            assert failed.wait(20)
            yield a, len(DATA) - 2, 3  # past the end

        with pytest.raises(CorruptCheckpointError, match="past the end of the file"):
            _copy(tmp_path, ranges(), 2)


def test_a_full_queue_takes_the_next_task_as_soon_as_one_ends(tmp_path, files, cores, monkeypatch):
    """With 2 threads and 4 tasks queued, the first task to end makes room for the fifth: the
    copy does not wait for all four (here three of them wait for the fifth to be queued)."""
    cores(2)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", 10)
    fifth = threading.Event()
    waited: list[bool] = []
    real_copy, real_on_threads = _src._copy_task, _src._on_threads
    queued: list[int] = []

    def on_threads(task):
        queued.append(task[0])
        if len(queued) == 5:
            fifth.set()
        return real_on_threads(task)

    def copy(fd, task):
        if task[0] in queued[1:4]:  # the 2nd to 4th tasks: positions 13, 23, 33
            waited.append(fifth.wait(5))
        return real_copy(fd, task)

    monkeypatch.setattr(_src, "_on_threads", on_threads)
    monkeypatch.setattr(_src, "_copy_task", copy)
    a, _ = files
    assert _copy(tmp_path, [(a, 10 * i, 10) for i in range(6)], 2) == b"HDR" + DATA[:60] + b"END"
    assert waited == [True, True, True]


@pytest.mark.parametrize(("n", "want"), [(1, 1), (2, 2), (4, 4), (5, 4), (16, 4)])
def test_copy_threads_are_the_cores_up_to_a_bound(cores, n, want):
    cores(n)
    assert _src.copy_threads() == want


def test_copy_threads_without_affinity_are_the_cpu_count(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert _src.copy_threads() == 3
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert _src.copy_threads() == 1


def test_set_copy_threads_lowers_the_count_within_the_block_only(cores):
    cores(3)
    with _src.set_copy_threads(2):
        assert _src.copy_threads() == 2
        with _src.set_copy_threads(8):  # never more than the cores
            assert _src.copy_threads() == 2
        assert _src.copy_threads() == 2
    assert _src.copy_threads() == 3
    with pytest.raises(RuntimeError), _src.set_copy_threads(1):
        assert _src.copy_threads() == 1
        raise RuntimeError
    assert _src.copy_threads() == 3
    with _src.set_copy_threads(0):
        assert _src.copy_threads() == 1


def test_convert_copies_with_jobs_threads(tmp_path, cores, monkeypatch):
    """``convert -j N``: N threads copy (1: the calling thread only); the files are the same."""
    from ckptctl import open_checkpoint

    cores(2)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", 4096)
    arrays = {f"t{i}": np.arange(3000 * (i + 1), dtype=np.float32) for i in range(3)}
    src = tmp_path / "in.safetensors"
    save_checkpoint(src, [array_entry(k, v) for k, v in arrays.items()])
    tasks = sum(-(-a.nbytes // 4096) for a in arrays.values())
    written = {}
    for jobs in (1, 2):
        seen = _spy_tasks(monkeypatch)
        out = tmp_path / f"out{jobs}.bpk"
        convert(src, out, ConvertOptions(jobs=jobs))
        written[jobs] = out.read_bytes()
        assert len(seen) == tasks
        assert ({ident for ident, _ in seen} == {threading.get_ident()}) == (jobs == 1)
    assert written[1] == written[2]
    with open_checkpoint(tmp_path / "out2.bpk") as ckpt:
        for entry in ckpt.entries():
            assert bytes(entry.data.read()) == arrays[entry.name].tobytes()


@pytest.mark.parametrize(
    ("args", "threads"),
    [(("convert", "-j", "1"), False), (("convert",), True), (("remap", "-r", "^t=u"), True)],
)
def test_commands_copy_on_threads_unless_told(tmp_path, cores, monkeypatch, run_cli, args, threads):
    """``convert`` (default ``-j``: the cores) and ``remap`` copy on threads; ``-j 1`` does not."""
    cores(2)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", 4096)
    src = tmp_path / "in.safetensors"
    save_checkpoint(src, [array_entry("t", np.arange(9000, dtype=np.float32))])
    seen = _spy_tasks(monkeypatch)
    result = run_cli(args[0], src, tmp_path / "out.safetensors", *args[1:], "-q")
    assert result.code == 0, result.stderr
    assert len(seen) == 9
    assert ({ident for ident, _ in seen} != {threading.get_ident()}) == threads


# --- Interleaved ranges (the rows of a column split): whole rows a buffer-full at a time ---


@pytest.fixture
def preadv_calls(monkeypatch):
    """The buffers of every ``preadv`` of a copy, call by call."""
    calls: list[list[memoryview]] = []
    preadv = _src._preadv

    def spy(src, fd, views, offset, want):
        calls.append(views)
        preadv(src, fd, views, offset, want)

    monkeypatch.setattr(_src, "_preadv", spy)
    return calls


INTERLEAVINGS = {
    "two files": lambda a, b: [(a, 100, 10), (b, 7, 6)],
    "uneven, three parts": lambda a, b: [(b, 0, 1), (a, 3, 5), (b, 400, 9)],
    "one file twice": lambda a, b: [(a, 0, 4), (a, 500, 4)],
    "an empty part": lambda a, b: [(a, 10, 3), (b, 10, 0), (b, 20, 2)],
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("count", [1, 7, 30])
@pytest.mark.parametrize(
    ("copy_bytes", "iovecs", "task_bytes"),
    [(64, 1024, 1 << 20), (64, 2, 1 << 20), (16, 1024, 40), (4096, 5, 100)],
)
@pytest.mark.parametrize("parts", INTERLEAVINGS, ids=list(INTERLEAVINGS))
def test_interleaved_ranges_copy_as_their_ranges_in_turn(
    tmp_path,
    files,
    cores,
    monkeypatch,
    preadv_calls,
    threads,
    count,
    copy_bytes,
    iovecs,
    task_bytes,
    parts,
):
    cores(4)
    monkeypatch.setattr(_src, "COPY_BYTES", copy_bytes)
    monkeypatch.setattr(_src, "MAX_IOVECS", iovecs)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", task_bytes)
    interleaved = _src.Interleaved(tuple(INTERLEAVINGS[parts](*files)), count)
    content = {files[0]: DATA, files[1]: OTHER}
    listed = list(interleaved)
    assert len(listed) == count * len(interleaved.parts)
    assert [(s, o, n) for s, o, n in listed[: len(interleaved.parts)]] == list(interleaved.parts)
    want = b"".join(content[s][o : o + n] for s, o, n in listed)
    assert _copy(tmp_path, interleaved, threads) == b"HDR" + want + b"END"
    reads = [len(views) for views in preadv_calls]
    assert reads
    assert max(reads) <= iovecs  # runs per preadv
    row = sum(n for _, _, n in interleaved.parts)
    if count == 30 and row * iovecs <= copy_bytes:  # buffers full of rows: as many as it takes
        assert max(reads) == iovecs


@pytest.mark.parametrize(
    ("task_bytes", "bounds"),
    [(40, [(0, 2), (2, 4), (4, 6), (6, 7)]), (10, [(k, k + 1) for k in range(7)])],
)
def test_interleaved_rows_are_copied_in_tasks_of_whole_rows(files, monkeypatch, task_bytes, bounds):
    a, b = files
    monkeypatch.setattr(_src, "COPY_BYTES", 64)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", task_bytes)
    tasks = _src._row_tasks(_src.Interleaved(((a, 100, 10), (b, 7, 0), (b, 7, 6)), 7), 3)
    assert tasks is not None
    parts = ((a, a.fileno(), 100, 10, 0), (b, b.fileno(), 7, 6, 10))
    # 16-byte rows: 2 to a task of 40 bytes, 1 to a task shorter than a row
    assert list(tasks) == [_src._Rows(3 + 16 * k, parts, 16, k, stop) for k, stop in bounds]


@pytest.mark.parametrize(
    ("parts", "count"),
    [
        (lambda a, m: [(a, 0, 40), (a, 100, 25)], 3),  # a row longer than the buffer
        (lambda a, m: [(a, 0, 4), (m, 0, 2)], 3),  # a source without a descriptor
        (lambda a, m: [(a, 0, 4)], 0),  # no rounds
        (lambda a, m: [(a, 0, 0), (a, 9, 0)], 5),  # empty rows
    ],
)
def test_interleaved_ranges_the_row_copy_leaves_to_the_range_copy(
    tmp_path, files, monkeypatch, parts, count
):
    monkeypatch.setattr(_src, "COPY_BYTES", 64)
    memory = MemorySource(b"abcdefgh", "nested")
    interleaved = _src.Interleaved(tuple(parts(files[0], memory)), count)
    assert _src._row_tasks(interleaved, 0) is None
    content = {files[0]: DATA, memory: b"abcdefgh"}
    want = b"".join(content[s][o : o + n] for s, o, n in interleaved)
    assert _copy(tmp_path, interleaved, 2) == b"HDR" + want + b"END"


def test_interleaved_ranges_are_checked_before_any_row_is_copied(tmp_path, files):
    a, b = files
    # b's runs end 2 bytes past its end in the last round
    interleaved = _src.Interleaved(((a, 0, 4), (b, len(OTHER) - 5 * 7 + 2, 5)), 7)
    path = tmp_path / "dst.bin"
    with open(path, "wb") as out:
        out.write(b"HDR")
        with pytest.raises(CorruptCheckpointError) as info:
            _src.copy_ranges(interleaved, out)
    assert path.read_bytes() == b"HDR"
    assert info.value.message == (
        f"copy of 35 bytes at offset {len(OTHER) - 33} is past the end of the file "
        f"({len(OTHER)} bytes)"
    )


def test_interleaved_rows_of_one_byte_are_copied_as_rows(tmp_path, files):
    a, _ = files
    interleaved = _src.Interleaved(((a, 5, 1), (a, 40, 0)), 9)
    tasks = _src._row_tasks(interleaved, 3)
    assert tasks is not None
    assert list(tasks) == [_src._Rows(3, ((a, a.fileno(), 5, 1, 0),), 1, 0, 9)]
    assert _copy(tmp_path, interleaved, 2) == b"HDR" + DATA[5:14] + b"END"


def test_interleaved_rows_of_a_file_that_shrank_fail_naming_it(tmp_path):
    path = tmp_path / "rank.bin"
    path.write_bytes(DATA)
    with ByteSource(path) as src, open(tmp_path / "dst.bin", "wb") as out:
        os.truncate(path, 100)
        with pytest.raises(CorruptCheckpointError, match="file truncated") as info:
            _src.copy_ranges(_src.Interleaved(((src, 0, 8), (src, 96, 8)), 2), out)
    assert info.value.path == str(path)
    assert info.value.message == "read 4 of 16 bytes at offset 96: file truncated"


def test_interleaved_rows_as_long_as_the_buffer_are_copied_as_rows(tmp_path, files, monkeypatch):
    a, b = files
    monkeypatch.setattr(_src, "COPY_BYTES", 16)
    interleaved = _src.Interleaved(((a, 0, 10), (b, 30, 6)), 3)
    assert _src._row_tasks(interleaved, 0) is not None
    want = b"".join(DATA[10 * k : 10 * k + 10] + OTHER[30 + 6 * k : 36 + 6 * k] for k in range(3))
    assert _copy(tmp_path, interleaved, 1) == b"HDR" + want + b"END"


def test_range_copies_reuse_the_threads_copy_buffer(tmp_path, files, monkeypatch, preadv_calls):
    a, b = files
    monkeypatch.setattr(_src, "COPY_BYTES", 32)
    monkeypatch.setattr(_src, "_SPARE", threading.local())
    ranges = [(a, 3, 20), (b, 5, 10)]  # off their page places: read into the buffer
    for _ in range(2):  # the next copy in this thread: the same buffer
        assert _copy(tmp_path, ranges, 1) == b"HDR" + DATA[3:23] + OTHER[5:15] + b"END"
    owners = [views[0].obj for views in preadv_calls]
    assert len(owners) == 4
    assert all(owner is owners[0] for owner in owners)
    assert _src._SPARE.copy_buffer.obj is owners[0]  # given back


def test_interleaved_rows_reuse_the_threads_copy_buffer(tmp_path, files, monkeypatch, preadv_calls):
    a, b = files
    monkeypatch.setattr(_src, "COPY_BYTES", 32)
    monkeypatch.setattr(_src, "_SPARE", threading.local())
    interleaved = _src.Interleaved(((a, 0, 4), (b, 8, 4)), 9)
    _copy(tmp_path, interleaved, 1)
    _copy(tmp_path, interleaved, 1)  # the next copy in this thread: the same buffer
    owners = [views[0].obj for views in preadv_calls]
    assert len(owners) == 12  # 4 rows to a buffer: 3 buffer-fulls of 2 reads, twice
    assert all(owner is owners[0] for owner in owners)
    assert _src._SPARE.copy_buffer.obj is owners[0]  # given back


# --- Computed bytes (casts, transposes): fill_ranges, a step at a time on the threads (#50) ---


def _fill(tmp_path, nbytes: int, step: int, threads: int | None, fill=None) -> bytes:
    """``fill_ranges`` of bytes ``i % 251`` between a head and a tail."""

    def pattern(start: int, out: memoryview) -> None:
        assert len(out) <= step
        out[:] = bytes((start + i) % 251 for i in range(len(out)))

    path = tmp_path / "dst.bin"
    with open(path, "wb") as out:
        out.write(b"HDR")
        _src.fill_ranges(fill or pattern, nbytes, step, out, threads=threads)
        out.write(b"END")  # where fill_ranges left the position
    return bytes(path.read_bytes())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    ("nbytes", "step", "task_bytes"),
    [(0, 8, 64), (1, 8, 64), (1000, 7, 64), (1000, 8, 8), (999, 100, 4096)],
)
def test_fill_ranges_writes_every_step_at_its_place_and_ends_after_them(
    tmp_path, monkeypatch, threads, nbytes, step, task_bytes
):
    monkeypatch.setattr(_src, "FILL_TASK_BYTES", task_bytes)
    want = bytes(i % 251 for i in range(nbytes))
    assert _fill(tmp_path, nbytes, step, threads) == b"HDR" + want + b"END"


def test_fill_ranges_runs_tasks_on_threads_at_once(tmp_path, cores, monkeypatch):
    """Two tasks must be computing together to pass the barrier: a serial fill breaks it."""
    cores(2)
    monkeypatch.setattr(_src, "FILL_TASK_BYTES", 100)
    barrier = threading.Barrier(2, timeout=20)
    threads: set[int] = set()

    def meet(start: int, out: memoryview) -> None:
        if start in (0, 100):  # the first step of the first two tasks
            barrier.wait()
        threads.add(threading.get_ident())
        out[:] = bytes((start + i) % 251 for i in range(len(out)))

    got = _fill(tmp_path, 300, 50, None, meet)  # threads: the default, the cores
    assert got == b"HDR" + bytes(i % 251 for i in range(300)) + b"END"
    assert len(threads) == 2
    assert threading.get_ident() not in threads


def test_a_failed_fill_fails_once_every_task_ended(tmp_path, cores, monkeypatch):
    cores(2)
    monkeypatch.setattr(_src, "FILL_TASK_BYTES", 10)
    running = threading.Lock()
    ended: list[int] = []

    def fill(start: int, out: memoryview) -> None:
        with running:
            ended.append(start)
        if start == 30:
            raise CorruptCheckpointError("short read at byte 30")
        time.sleep(0.01)
        out[:] = bytes(len(out))

    with pytest.raises(CorruptCheckpointError, match="byte 30"):
        _fill(tmp_path, 200, 10, 2, fill)
    count = len(ended)
    time.sleep(0.05)
    assert len(ended) == count  # nothing runs after the failure was raised


def test_threads_asking_for_the_map_at_once_share_one(tmp_path, monkeypatch):
    """Bands of a transpose read the map on several threads: a second map of the file would
    keep every page it touched resident after the first one's pages are released."""
    import mmap

    made: list[object] = []
    real = mmap.mmap

    def slow_map(*args, **kwargs):
        time.sleep(0.05)  # widen the window two threads could both map in
        made.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(mmap, "mmap", slow_map)
    (tmp_path / "f.bin").write_bytes(DATA)
    barrier = threading.Barrier(3, timeout=20)
    views: list[bytes] = []
    with ByteSource(tmp_path / "f.bin") as source:

        def read() -> None:
            barrier.wait()
            views.append(bytes(source.view(10, 5)))

        workers = [threading.Thread(target=read) for _ in range(3)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert views == [DATA[10:15]] * 3
    assert len(made) == 1

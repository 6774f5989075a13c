"""Local byte sources: a file mapped read-only, or bytes already in memory.

``ByteSource`` maps an input file read-only and hands out zero-copy views; it is also the
interface every source offers (the remote one in ``sources/remote.py`` subclasses it).
``copy_ranges`` and ``read_chunks`` stream ranges of any source without a tensor-sized buffer.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import stat
import threading
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, TypeVar

from ckptctl.errors import CorruptCheckpointError, InputError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

_T = TypeVar("_T")

#: What to do about a file (or directory) this process may not read.
PERMISSION_HINT = "check its permissions (ls -l): ckptctl needs to read it, nothing more"

#: Chunk size for streamed copies and chunked comparisons.
CHUNK_BYTES = 8 * 1024 * 1024
#: Bytes per ``preadv`` call of :meth:`ByteSource.read_into` (Linux moves at most
#: 0x7FFFF000 bytes per read).
MAX_READ_BYTES = 1 << 30


#: Held while a source maps its file: the copy threads transposing bands of one tensor ask for
#: the map at once, and a second map of the file would hold pages that releasing the first's
#: leaves resident (a transpose's peak memory grew by the tensor's size, one run in five).
_MAP_LOCK = threading.Lock()


class ByteSource:
    """A read-only view of one input file: size, bounded reads and zero-copy slices.

    Args:
        path: the file to open.

    Raises:
        InputError: the file cannot be opened (missing, a directory, no permission).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        if "\0" in self.path:  # os.stat would raise ValueError: no file can have this name
            raise InputError("the path holds a NUL byte: no file has such a name", path=self.path)
        try:
            mode = os.stat(self.path).st_mode
        except FileNotFoundError:
            raise InputError("no such file", path=self.path) from None
        except PermissionError:  # a directory on the way that may not be searched
            raise InputError("permission denied", path=self.path, hint=PERMISSION_HINT) from None
        except OSError as exc:
            raise InputError(f"cannot open: {exc.strerror or exc}", path=self.path) from None
        if stat.S_ISDIR(mode):
            raise InputError("is a directory, not a checkpoint file", path=self.path)
        if not stat.S_ISREG(mode):  # opening a FIFO would block until a writer appears
            raise InputError(
                f"is not a regular file (a {_file_kind(mode)}), not a checkpoint file",
                path=self.path,
            )
        try:
            self._file: IO[bytes] = open(self.path, "rb")  # noqa: SIM115  # owned, closed in close()
        except PermissionError:
            raise InputError("permission denied", path=self.path, hint=PERMISSION_HINT) from None
        except OSError as exc:
            raise InputError(f"cannot open: {exc.strerror or exc}", path=self.path) from None
        self.size = os.fstat(self._file.fileno()).st_size
        self._map: mmap.mmap | None = None

    #: True for :class:`ckptctl.sources.remote.RemoteSource` (every byte costs a request).
    is_remote = False

    def fetch_all(self, reason: str) -> None:
        """Make the whole file local before a parse that reads it end to end (remote sources
        download it; a local file already is)."""

    def fileno(self) -> int:
        """The OS file descriptor (for ``os.copy_file_range``)."""
        return self._file.fileno()

    @property
    def buffer(self) -> memoryview:
        """The whole file as a read-only memoryview over a memory map (empty files: empty view)."""
        if self._map is None:
            if self.size == 0:
                return memoryview(b"")
            with _MAP_LOCK:  # threads that map at once would each fault the pages in (#50)
                if self._map is None:
                    self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        return memoryview(self._map)

    def read(self, offset: int, length: int) -> bytes:
        """Read exactly ``length`` bytes at ``offset``.

        Raises:
            CorruptCheckpointError: the range is not inside the file.
        """
        self.check_range(offset, length, "read")
        return os.pread(self._file.fileno(), length, offset) if length else b""

    def view(self, offset: int, length: int) -> memoryview:
        """A zero-copy view of ``length`` bytes at ``offset``.

        Raises:
            CorruptCheckpointError: the range is not inside the file.
        """
        self.check_range(offset, length, "view")
        if length == 0:
            return memoryview(b"")
        return self.buffer[offset : offset + length]

    def read_into(self, offset: int, out: memoryview) -> None:
        """Fill ``out`` with the ``len(out)`` bytes at ``offset``: read straight into it with
        ``preadv`` where the source has a descriptor (a buffer reused for every chunk of a pass
        costs no page faults), else read and copied.

        Raises:
            CorruptCheckpointError: the range is not inside the file, or the file shrank.
        """
        self.check_range(offset, len(out), "read")
        fd = _descriptor(self)
        if fd is None:
            out[:] = self.read(offset, len(out))
            return
        for done in range(0, len(out), MAX_READ_BYTES):  # Linux reads at most 2 GiB per call
            piece = out[done : done + MAX_READ_BYTES]
            _preadv(self, fd, [piece], offset + done, len(piece))

    def release_pages(self, offset: int, length: int) -> None:
        """Unmap the pages of ``[offset, offset+length)`` from this process (they stay in the
        page cache; a later view maps them again). A reader that parses many archives inside
        one file (DCP items) calls it after each, so its resident set holds one archive's
        headers, not every header it touched: the kernel maps whole page-cache folios (up to
        2 MiB) where a parse reads a few bytes."""
        mapped = getattr(self, "_map", None)
        advise = getattr(mmap, "MADV_DONTNEED", None)
        if mapped is None or advise is None or length <= 0:
            return
        start = offset - offset % mmap.PAGESIZE
        mapped.madvise(advise, start, min(self.size, offset + length) - start)

    def check_still_holds(self, offset: int, length: int) -> None:
        """Raise ``CorruptCheckpointError`` unless the file as it is now (one ``fstat``) still
        holds ``[offset, offset+length)``. Call it before reading a range through the memory
        map: a page of a file truncated since it was opened kills the process with SIGBUS
        when touched, where a read returns short and is reported (``file truncated``)."""
        now = self._size_now()
        if offset + length > now:
            raise CorruptCheckpointError(
                f"{length} bytes at offset {offset} are past the end of the file, now {now} "
                "bytes: file truncated while being read",
                path=self.path,
                hint="leave the checkpoint alone while ckptctl reads it",
            )

    def _size_now(self) -> int:
        """The file's size now (``size`` is its size when opened)."""
        file = getattr(self, "_file", None)
        return self.size if file is None else os.fstat(file.fileno()).st_size

    def check_range(self, offset: int, length: int, what: str) -> None:
        """Raise ``CorruptCheckpointError`` unless ``[offset, offset+length)`` is in the file."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise CorruptCheckpointError(
                f"{what} of {length} bytes at offset {offset} is past the end of the file "
                f"({self.size} bytes)",
                path=self.path,
                hint="the file looks truncated; re-download or re-save it",
            )

    def close(self) -> None:
        """Release the map and the file. Views handed out must not be used afterwards."""
        if self._map is not None:
            with contextlib.suppress(BufferError):  # a live view keeps the map; GC frees it
                self._map.close()
            self._map = None
        self._file.close()

    def __enter__(self) -> ByteSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MemorySource(ByteSource):
    """A :class:`ByteSource` over bytes in memory (an archive nested in a pickle).

    Args:
        data: the bytes.
        name: what messages call it (its ``path``).
    """

    def __init__(self, data: bytes, name: str) -> None:  # no file: ByteSource.__init__ opens one
        self.path = name
        self.size = len(data)
        self._data = data
        self._map = None

    def fileno(self) -> int:
        raise OSError(f"{self.path} is in memory, it has no file descriptor")

    @property
    def buffer(self) -> memoryview:
        return memoryview(self._data)

    def read(self, offset: int, length: int) -> bytes:
        self.check_range(offset, length, "read")
        return self._data[offset : offset + length]

    def close(self) -> None:
        """Nothing to release."""


class SliceSource(ByteSource):
    """A :class:`ByteSource` over ``length`` bytes of ``parent`` from ``base`` on (one item of a
    file that holds several concatenated archives, such as a DCP ``.distcp`` file).

    Offsets are relative to ``base``. It has no file descriptor of its own (zero-copy paths fall
    back to reads); :meth:`absolute` maps an offset to the parent's, for readers that want to
    hand out ranges of the parent instead. Closing it leaves the parent open.

    Raises:
        CorruptCheckpointError: the slice is not inside ``parent``.
    """

    def __init__(self, parent: ByteSource, base: int, length: int, name: str) -> None:
        parent.check_range(base, length, "an item")
        self.path = name
        self.size = length
        self.parent = parent
        self.base = base
        self._map = None

    def fileno(self) -> int:
        raise OSError(f"{self.path} is part of a file, it has no file descriptor of its own")

    @property
    def buffer(self) -> memoryview:
        return self.parent.view(self.base, self.size)

    def read(self, offset: int, length: int) -> bytes:
        self.check_range(offset, length, "read")
        return self.parent.read(self.base + offset, length)

    def view(self, offset: int, length: int) -> memoryview:
        self.check_range(offset, length, "view")
        return self.parent.view(self.base + offset, length)

    def absolute(self, offset: int) -> int:
        """Where byte ``offset`` of the slice is in the parent."""
        return self.base + offset

    def check_still_holds(self, offset: int, length: int) -> None:
        self.parent.check_still_holds(self.base + offset, length)

    def release_pages(self, offset: int, length: int) -> None:
        self.parent.release_pages(self.base + offset, length)

    def close(self) -> None:
        """Nothing to release: the parent owns the file."""


class FilePool:
    """Keeps at most ``capacity`` of its :class:`PooledSource` files open, closing the least
    recently used first (a file being read stays open until the read ends).

    A DCP directory has one rank file per process of the job that wrote it; opening them all
    at once failed with "Too many open files" past ``ulimit -n`` (1,100 rank files under the
    common default of 1024, issue 44).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.lock = threading.Lock()
        self._open: dict[PooledSource, None] = {}  # least recently used first

    def use(self, source: PooledSource) -> IO[bytes]:
        """``source``'s open file, now the most recently used (call with ``lock`` held)."""
        self._open.pop(source, None)
        self._open[source] = None
        file = source.reopen()
        for other in list(self._open):
            if len(self._open) <= self.capacity:
                break
            if other is not source and not other.pins:
                other.shut()
                del self._open[other]
        return file

    def remove(self, source: PooledSource) -> None:
        self._open.pop(source, None)


def open_files_limit() -> int:
    """How many files opened together may all stay open: an eighth of the soft
    ``RLIMIT_NOFILE`` (128 under Linux's usual 1024, 32 under macOS's 256; a mapped file takes
    two descriptors, and the process needs some for everything else)."""
    try:
        import resource
    except ImportError:  # Windows: no such limit to read
        return 64
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 1 << 16
    return max(8, min(soft, 1 << 16) // 8)


def file_pool(count: int) -> FilePool | None:
    """A pool for ``count`` files opened together (half of :func:`open_files_limit` open at a
    time), or None when they may all stay open."""
    limit = open_files_limit()
    return None if count <= limit else FilePool(max(4, limit // 2))


class PooledSource(ByteSource):
    """A :class:`ByteSource` whose file is open only while it is among its pool's most
    recently used; it is opened again (and checked to be the same file) when read after being
    closed. It has no lasting file descriptor: ``fileno`` raises, so zero-copy paths read.

    Raises:
        InputError: the file cannot be opened.
    """

    def __init__(self, path: str | os.PathLike[str], pool: FilePool) -> None:
        super().__init__(path)
        self.pool = pool
        self.pins = 0
        self._pooled: IO[bytes] | None = self._file
        info = os.fstat(self._file.fileno())
        self._identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        with pool.lock:
            pool.use(self)

    def reopen(self) -> IO[bytes]:
        """The open file (opened again if the pool closed it).

        Raises:
            CorruptCheckpointError: the file changed or went away since it was first opened.
        """
        if self._pooled is not None:
            return self._pooled
        try:
            file = open(self.path, "rb")  # noqa: SIM115  # owned, closed in shut()
        except OSError as exc:
            raise self._changed(f"cannot be opened again: {exc.strerror or exc}") from None
        info = os.fstat(file.fileno())
        if (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns) != self._identity:
            file.close()
            raise self._changed("was replaced or changed while it was being read")
        self._pooled = file
        return file

    def _changed(self, what: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            what, path=self.path, hint="leave the checkpoint alone while ckptctl reads it"
        )

    def shut(self) -> None:
        """Close the file and its map (a map a view still uses is left to those views)."""
        if self._map is not None:
            with contextlib.suppress(BufferError):
                self._map.close()
            self._map = None
        if self._pooled is not None:
            self._pooled.close()
            self._pooled = None

    @contextlib.contextmanager
    def _opened(self) -> Iterator[IO[bytes]]:
        with self.pool.lock:
            file = self.pool.use(self)
            self.pins += 1
        try:
            yield file
        finally:
            with self.pool.lock:
                self.pins -= 1

    def fileno(self) -> int:
        raise OSError(f"{self.path} is opened in turn with many others: no lasting descriptor")

    @property
    def buffer(self) -> memoryview:
        with self._opened() as file:
            if self._map is None:
                if self.size == 0:
                    return memoryview(b"")
                self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            return memoryview(self._map)

    def read(self, offset: int, length: int) -> bytes:
        self.check_range(offset, length, "read")
        if not length:
            return b""
        with self._opened() as file:
            return os.pread(file.fileno(), length, offset)

    def release_pages(self, offset: int, length: int) -> None:
        with self.pool.lock:
            super().release_pages(offset, length)

    def _size_now(self) -> int:
        with self._opened() as file:
            return os.fstat(file.fileno()).st_size

    def close(self) -> None:
        with self.pool.lock:
            self.pool.remove(self)
            self.shut()


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "named pipe"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


#: Bytes per step of :func:`copy_ranges`' read-and-write copy: small enough that the buffer is
#: still in the CPU's cache when it is written out. Under load a 256 KiB buffer copied 1 GiB
#: 8 bytes off its place in the page in 0.98 s (median of 7), an 8 MiB one in 3.07 s and
#: ``copy_file_range`` in 1.45 s (benchmarks/RESULTS.md, issue 26).
COPY_BYTES = 256 * 1024
#: Buffers per ``preadv`` call (Linux's ``IOV_MAX``).
MAX_IOVECS = 1024


def copy_range(src: ByteSource, offset: int, length: int, dst: IO[bytes]) -> None:
    """Copy a byte range of ``src`` to ``dst`` (a real file) without a tensor-sized buffer:
    :func:`copy_ranges` of one range."""
    copy_ranges([(src, offset, length)], dst)


def copy_ranges(ranges: Iterable[tuple[ByteSource, int, int]], dst: IO[bytes]) -> None:
    """Copy byte ranges ``(source, offset, length)``, one after the other, to ``dst`` (a real
    file) at its position, leaving it positioned after them.

    The output is cut into tasks of ``COPY_TASK_BYTES``, each written at its own place with
    ``pwrite``, so up to ``copy_threads()`` threads copy at once (a copy through user space is
    bound by the CPU: every byte is copied twice, in and out; ``cp`` copies once, in the
    kernel). Within a task, a range of at least ``COPY_BYTES`` at the same offset within a page
    as its place in ``dst`` goes through ``os.copy_file_range``, which moves whole pages in the
    kernel (or shares them: reflinks, server-side copies). The kernel splits every page of any
    other range in two, slower than a copy through a buffer that stays in the cache, so the
    others (of a local file) are read with ``preadv`` into one ``COPY_BYTES`` buffer, many short
    ranges into one buffer-full (the rows of a column-split tensor), and written with
    ``pwrite``. Ranges of sources without a file descriptor (in memory, remote) are read with
    :func:`read_chunks` and written, in the calling thread. :class:`Interleaved` ranges of
    short rows are copied a buffer-full of whole rows at a time, each part's runs with one
    ``preadv`` (no Python per range: a column split of 1 GiB is 65,536 of them).

    Raises:
        CorruptCheckpointError: a range is not inside its source, or the file shrank.
    """
    dst.flush()
    fd, start = dst.fileno(), dst.tell()
    rows = _row_tasks(ranges, start) if isinstance(ranges, Interleaved) else None
    tasks = _tasks(ranges, start) if rows is None else rows
    head = list(itertools.islice(tasks, 2))
    threads = copy_threads()
    if len(head) == 2 and threads > 1:
        end = _run_tasks(fd, itertools.chain(head, tasks), threads, _copy_task, _on_threads)
    else:  # one task, or one thread: no pool to start
        end = start
        for task in itertools.chain(head, tasks):
            end = _copy_task(fd, task)
    dst.seek(end)


#: Output bytes per task of :func:`copy_ranges`: large enough that a task's start-up (a
#: buffer, a thread hand-over) is noise, small enough that a tensor of a few hundred MiB is
#: shared among the threads.
COPY_TASK_BYTES = 16 * 1024 * 1024
#: At most this many threads copy at once, whatever the machine (the output file's writes
#: take its inode lock in turn: more threads only wait).
MAX_COPY_THREADS = 4
_copy_threads: int | None = None


def copy_threads() -> int:
    """How many threads :func:`copy_ranges` uses: ``set_copy_threads``'s number, else the
    cores this process may run on, at most ``MAX_COPY_THREADS``."""
    if _copy_threads is not None:
        return _copy_threads
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MAX_COPY_THREADS, cores or 1))


@contextlib.contextmanager
def set_copy_threads(threads: int) -> Iterator[None]:
    """Within the block, :func:`copy_ranges` uses at most ``threads`` threads (``convert -j``)."""
    global _copy_threads
    before = _copy_threads
    _copy_threads = max(1, min(threads, copy_threads()))
    try:
        yield
    finally:
        _copy_threads = before


@dataclass(frozen=True)
class Interleaved:
    """Ranges taken in rounds: round ``k`` is the ``k``-th run of every part in turn, part
    ``(source, start, length)``'s ``k``-th run being ``length`` bytes at ``start + k * length``
    (the rows of a tensor split by columns: each row is one run of every chunk). Iterating
    yields the ``(source, offset, length)`` ranges; :func:`copy_ranges` copies short rows
    without listing them.

    Attributes:
        parts: each part's source, first byte and run length, in the order of a round.
        count: the rounds.
    """

    parts: tuple[tuple[ByteSource, int, int], ...]
    count: int

    def __iter__(self) -> Iterator[tuple[ByteSource, int, int]]:
        for k in range(self.count):
            for source, start, length in self.parts:
                yield source, start + k * length, length


@dataclass(frozen=True)
class _Rows:
    """A task of whole rounds of :class:`Interleaved` ranges: rounds ``first`` to ``stop``,
    written from ``position`` on; ``parts`` hold each part's descriptor and its place in a
    row (``row`` bytes)."""

    position: int
    parts: tuple[tuple[ByteSource, int, int, int, int], ...]  # source, fd, start, length, place
    row: int
    first: int
    stop: int

    def copy(self, fd: int) -> int:
        """Copy the rounds a buffer-full at a time; returns where they end in ``fd``."""
        row, position = self.row, self.position
        per = min(COPY_BYTES // row, MAX_IOVECS)
        buffer = _take_spare("copy_buffer", COPY_BYTES)
        try:
            for k in range(self.first, self.stop, per):
                size = min(per, self.stop - k) * row
                for source, src_fd, start, length, place in self.parts:
                    views = [buffer[r : r + length] for r in range(place, size, row)]
                    _preadv(source, src_fd, views, start + k * length, len(views) * length)
                _pwrite_all(fd, buffer[:size], position)
                position += size
        finally:
            _SPARE.copy_buffer = buffer
        return position


#: One task of :func:`copy_ranges`: where its first byte goes in the output, and its ranges
#: ``(source, descriptor or None, offset, length)``; or rounds of interleaved ranges.
_Task = tuple[int, list[tuple[ByteSource, int | None, int, int]]] | _Rows


def _row_tasks(ranges: Interleaved, position: int) -> Iterator[_Rows] | None:
    """Tasks of whole rounds of ``ranges`` (about ``COPY_TASK_BYTES`` of output each), checked
    before the first is copied; None where the per-range copy is the right one: a row longer
    than the buffer (long runs, which may go through ``copy_file_range``), or a part of a
    source without a descriptor."""
    row = sum(length for _, _, length in ranges.parts)
    if not ranges.count or not 0 < row <= COPY_BYTES:
        return None
    parts, place = [], 0
    for source, start, length in ranges.parts:
        fd = _descriptor(source)
        if fd is None:
            return None
        source.check_range(start, length * ranges.count, "copy")
        if length:
            parts.append((source, fd, start, length, place))
        place += length
    per = max(1, COPY_TASK_BYTES // row)
    return (
        _Rows(position + k * row, tuple(parts), row, k, min(k + per, ranges.count))
        for k in range(0, ranges.count, per)
    )


def _tasks(ranges: Iterable[tuple[ByteSource, int, int]], position: int) -> Iterator[_Task]:
    """``ranges`` checked and cut into tasks of ``COPY_TASK_BYTES`` of output (a range that
    crosses a task's end is split there), the first one's output at ``position``."""
    descriptors: dict[ByteSource, int | None] = {}
    batch: list[tuple[ByteSource, int | None, int, int]] = []
    size = 0
    for src, offset, length in ranges:
        src.check_range(offset, length, "copy")
        fd = descriptors.get(src, -1)
        if fd == -1:
            fd = descriptors[src] = _descriptor(src)
        while length:
            take = min(length, COPY_TASK_BYTES - size)
            batch.append((src, fd, offset, take))
            offset, length, size = offset + take, length - take, size + take
            if size == COPY_TASK_BYTES:
                yield position, batch
                position, batch, size = position + size, [], 0
    if batch:
        yield position, batch


def _run_tasks(
    fd: int,
    tasks: Iterable[_T],
    threads: int,
    run: Callable[[int, _T], int],
    on_threads: Callable[[_T], bool],
) -> int:
    """Run the tasks (``run(fd, task)`` returns where the task's output ends), those
    ``on_threads`` accepts (of local files) on ``threads`` threads (at most twice as many
    queued), the others (a range of a source without a descriptor: remote sources are read by
    one thread) in this one; returns where the output ends. A failure is raised once every
    task started has ended: no thread writes after the return (nor after a failure)."""
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

    end = 0
    pending: set[Future[int]] = set()
    errors: list[BaseException] = []
    with ThreadPoolExecutor(threads) as pool:
        try:
            for task in tasks:
                if len(pending) >= 2 * threads:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    errors.extend(e for f in done if (e := f.exception()) is not None)
                if errors:
                    break
                if on_threads(task):
                    pending.add(pool.submit(run, fd, task))
                else:
                    end = max(end, run(fd, task))
        except BaseException as exc:  # a bad range, an interrupt: stop once the others end
            errors.insert(0, exc)
        for future in wait(pending).done:
            error = future.exception()
            if error is not None:
                errors.append(error)
            else:
                end = max(end, future.result())
    if errors:
        raise errors[0]
    return end


#: Output bytes per task of :func:`fill_ranges` (whole steps): small enough that a tensor of a
#: few dozen MiB is shared among the threads.
FILL_TASK_BYTES = 4 * 1024 * 1024


def fill_ranges(
    fill: Callable[[int, memoryview], None],
    nbytes: int,
    step: int,
    dst: IO[bytes],
    *,
    threads: int | None = None,
) -> None:
    """Write ``nbytes`` computed bytes (a cast or transposed tensor) to ``dst`` (a real file)
    at its position, leaving it positioned after them.

    ``fill(start, buffer)`` computes the bytes from ``start`` on into ``buffer`` (``step``
    bytes, the last one shorter), which is then written with ``pwrite`` while it is still in
    the CPU's cache. Tasks of whole steps (about ``FILL_TASK_BYTES``) run on ``threads``
    threads (default :func:`copy_threads`, ``convert -j``), each thread through one reused
    buffer: ``fill`` must be safe to call from several threads at once.
    """
    dst.flush()
    fd, position = dst.fileno(), dst.tell()
    per = max(1, FILL_TASK_BYTES // step) * step
    tasks = [
        _Fill(fill, position + s, s, min(per, nbytes - s), step) for s in range(0, nbytes, per)
    ]
    count = copy_threads() if threads is None else threads
    if len(tasks) > 1 and count > 1:
        _run_tasks(fd, tasks, count, lambda fd, task: task.run(fd), lambda _: True)
    else:
        for task in tasks:
            task.run(fd)
    dst.seek(position + nbytes)


def fill_chunks(
    fill: Callable[[int, memoryview], None], nbytes: int, step: int
) -> Iterator[memoryview]:
    """:func:`fill_ranges` for a writer that must see the bytes in order (a CRC): ``nbytes``
    computed bytes, ``step`` at a time, each piece valid until the next is taken (one reused
    buffer), computed in the calling thread."""
    with spare_buffer("fill", min(step, nbytes)) as buffer:
        for start in range(0, nbytes, step):
            piece = buffer[: min(step, nbytes - start)]
            fill(start, piece)
            yield piece


@dataclass(frozen=True)
class _Fill:
    """A task of :func:`fill_ranges`: ``length`` computed bytes from ``start`` on, written at
    ``position`` a ``step`` at a time."""

    fill: Callable[[int, memoryview], None]
    position: int
    start: int
    length: int
    step: int

    def run(self, fd: int) -> int:
        """Compute and write the task's bytes; returns where they end in ``fd``."""
        with spare_buffer("fill", self.step) as buffer:
            for done in range(0, self.length, self.step):
                piece = buffer[: min(self.step, self.length - done)]
                self.fill(self.start + done, piece)
                _pwrite_all(fd, piece, self.position + done)
        return self.position + self.length


def _on_threads(task: _Task) -> bool:
    """Whether every range of ``task`` is of a local file (one with a descriptor)."""
    return isinstance(task, _Rows) or all(src_fd is not None for _, src_fd, _, _ in task[1])


def _copy_task(fd: int, task: _Task) -> int:
    """Copy one task's ranges to their place in the output ``fd``; returns where they end."""
    if isinstance(task, _Rows):
        return task.copy(fd)
    position, ranges = task
    out = _Gather(fd, position)
    copy_file_range = getattr(os, "copy_file_range", None)
    try:
        for src, src_fd, offset, length in ranges:
            if src_fd is None:
                out.flush()
                for piece in read_chunks(src, offset, length):
                    out.write(piece)
                continue
            if (
                copy_file_range is not None
                and length >= COPY_BYTES
                and (offset - out.start - out.filled) % mmap.PAGESIZE == 0
            ):
                out.flush()
                done = _copy_in_kernel(copy_file_range, src_fd, offset, length, out)
                offset, length = offset + done, length - done
            out.add(src, src_fd, offset, length)
        out.flush()
    finally:
        out.release()
    return out.start


def _descriptor(src: ByteSource) -> int | None:
    """``src``'s file descriptor for ``preadv``, or None (in memory, remote, no ``preadv``)."""
    try:
        return src.fileno() if hasattr(os, "preadv") else None
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return None


def _copy_in_kernel(
    copy_file_range: Callable[..., int], fd: int, offset: int, length: int, out: _Gather
) -> int:
    """Bytes of ``length`` at ``offset`` copied with ``copy_file_range`` to ``out.start`` (the
    buffer is empty; advanced past them); the rest, if the call copies nothing or fails (EXDEV,
    ENOSYS, EINVAL on some filesystems), is left to the caller."""
    done = 0
    try:
        while done < length:
            n = copy_file_range(fd, out.fd, min(length - done, 1 << 30), offset + done, out.start)
            if n == 0:
                break
            done += n
            out.start += n
    except OSError:
        pass
    return done


class _Gather:
    """Output bytes collected in one ``COPY_BYTES`` buffer, to be written at ``start`` when it
    is full: ranges of local files are read into it with one ``preadv`` per run of ranges that
    follow each other in a file (up to ``MAX_IOVECS``)."""

    def __init__(self, fd: int, position: int) -> None:
        self.fd = fd
        self.start = position  # where the buffer's first byte goes in the output
        self.filled = 0
        self._size = COPY_BYTES
        self._buffer: memoryview | None = None
        self._runs: dict[int, _Run] = {}

    def add(self, src: ByteSource, fd: int, offset: int, length: int) -> None:
        """Queue ``length`` bytes of ``src`` (descriptor ``fd``) from ``offset`` on."""
        if self._buffer is None:
            self._buffer = _take_spare("copy_buffer", COPY_BYTES)
        buffer, size, runs = self._buffer, self._size, self._runs
        while length:
            filled = self.filled
            take = min(length, size - filled)
            run = runs.get(fd)
            if run is None or run.stop != offset or len(run.views) == MAX_IOVECS:
                if run is not None:
                    run.read()
                run = runs[fd] = _Run(src, fd, offset)
            run.views.append(buffer[filled : filled + take])
            run.stop = offset = offset + take
            length -= take
            self.filled = filled + take
            if filled + take == size:
                self.flush()

    def flush(self) -> None:
        """Read what is queued and write the buffer out."""
        for run in self._runs.values():
            run.read()
        self._runs.clear()
        if self.filled and self._buffer is not None:
            _pwrite_all(self.fd, self._buffer[: self.filled], self.start)
        self.start += self.filled
        self.filled = 0

    def write(self, data: bytes | memoryview) -> None:
        """Write ``data`` at ``start`` (nothing may be queued)."""
        _pwrite_all(self.fd, memoryview(data).cast("B"), self.start)
        self.start += len(data)

    def release(self) -> None:
        """Give the buffer back for the next copy in this thread."""
        if self._buffer is not None:
            _SPARE.copy_buffer = self._buffer
            self._buffer = None


def _pwrite_all(fd: int, data: memoryview, position: int) -> None:
    """Write all of ``data`` at ``position`` of ``fd``."""
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], position + done)


class _Run:
    """Ranges of one file that follow each other, to be read into their buffers at once."""

    def __init__(self, src: ByteSource, fd: int, start: int) -> None:
        self.src, self.fd, self.start, self.stop = src, fd, start, start
        self.views: list[memoryview] = []

    def read(self) -> None:
        _preadv(self.src, self.fd, self.views, self.start, self.stop - self.start)


def _preadv(src: ByteSource, fd: int, views: list[memoryview], offset: int, want: int) -> None:
    """Fill ``views`` (``want`` bytes in all) from ``offset`` of ``src`` (descriptor ``fd``).

    Raises:
        CorruptCheckpointError: the file shrank since it was opened.
    """
    got = os.preadv(fd, views, offset)
    if got != want:
        raise CorruptCheckpointError(
            f"read {got} of {want} bytes at offset {offset}: file truncated", path=src.path
        )


def _take_spare(kind: str, size: int) -> memoryview:
    """This thread's idle buffer ``kind`` (``copy_buffer``: :func:`copy_ranges`', ``buffer``:
    :func:`read_chunks`') if it holds ``size`` bytes, else a new one; taken, so a second user
    in this thread meanwhile gets its own."""
    buffer: memoryview | None = getattr(_SPARE, kind, None)
    setattr(_SPARE, kind, None)
    if buffer is None or len(buffer) < size:
        buffer = memoryview(bytearray(size))
    return buffer


@contextlib.contextmanager
def spare_buffer(kind: str, size: int) -> Iterator[memoryview]:
    """A reusable buffer ``kind`` of at least ``size`` bytes (its first ``size`` bytes are
    yielded) for the duration of the block, taken from the process's idle ones: a computed
    pass (a cast's scratch, a fill's output step) reuses the same few buffers, whichever
    thread runs it, instead of paying page faults for fresh memory each chunk. Process-wide,
    not per thread: the copy threads are new for every tensor, and buffers of a few MiB that
    each new thread allocated and freed stayed in malloc's per-thread arenas (the peak memory
    of a transposed cast grew by up to 50 MiB). Each use gets a buffer of its own."""
    with _IDLE_LOCK:
        idle = _IDLE.setdefault(kind, [])
        fits = next((i for i, b in enumerate(idle) if len(b) >= size), None)
        buffer = idle.pop(fits) if fits is not None else None
        if buffer is None and idle:
            idle.pop()  # too small for this pass: replaced by the larger one, not kept too
    if buffer is None:
        buffer = memoryview(bytearray(size))
    try:
        yield buffer[:size]
    finally:
        with _IDLE_LOCK:
            _IDLE[kind].append(buffer)


#: :func:`spare_buffer`'s idle buffers by kind (at most as many per kind as ever were in use at
#: once: one per copy thread).
_IDLE: dict[str, list[memoryview]] = {}
_IDLE_LOCK = threading.Lock()


#: Each thread's idle read buffer (:func:`read_chunks`): one allocation per thread, not per
#: tensor. Fresh 8 MiB buffers cost page faults on every use (on this project's benchmark VM
#: up to a second of system time per GiB copied, benchmarks/RESULTS.md).
_SPARE = threading.local()


def read_chunks(
    source: ByteSource, offset: int, nbytes: int, chunk: int | None = None
) -> Iterator[bytes | memoryview]:
    """``nbytes`` at ``offset`` in pieces, each valid until the next is taken (or the iteration
    ends): of ``chunk`` bytes from a local file (default ``CHUNK_BYTES``), of ``CHUNK_BYTES``
    from a source without a descriptor (a remote one: one range request per piece).

    A local file is read with ``preadv`` into one buffer, reused for every piece and by the
    next call in the same thread (no page faults for fresh memory, and no mapped pages left
    resident); a remote source, which has no descriptor, or an OS without ``preadv``, is read
    through ``read``.
    """
    fd = _descriptor(source)
    if fd is None:
        for start in range(0, nbytes, CHUNK_BYTES):
            yield source.read(offset + start, min(CHUNK_BYTES, nbytes - start))
        return
    step = chunk or CHUNK_BYTES
    buffer = _take_spare("buffer", min(step, nbytes))
    try:
        for start in range(0, nbytes, step):
            piece = buffer[: min(step, nbytes - start)]
            _preadv(source, fd, [piece], offset + start, len(piece))
            yield piece
    finally:
        _SPARE.buffer = buffer

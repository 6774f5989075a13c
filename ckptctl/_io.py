"""Byte access to input files and atomic output.

``ByteSource`` maps an input file read-only and hands out zero-copy views; ``atomic_write`` writes a
destination through a temporary file in the same directory and renames it into place only when
everything succeeded, so a failure leaves the destination exactly as it was.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import stat
import sys
import tempfile
import threading
from typing import IO, TYPE_CHECKING

from ckptctl.errors import CorruptCheckpointError, InputError, OutputError
from ckptctl.fix import Note, Option

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

#: What to do about a file (or directory) this process may not read.
PERMISSION_HINT = "check its permissions (ls -l): ckptctl needs to read it, nothing more"

#: Chunk size for streamed copies and chunked comparisons.
CHUNK_BYTES = 8 * 1024 * 1024


class ByteSource:
    """A read-only view of one input file: size, bounded reads and zero-copy slices.

    Args:
        path: the file to open.

    Raises:
        InputError: the file cannot be opened (missing, a directory, no permission).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
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

    #: True for :class:`ckptctl._remote.RemoteSource` (every byte costs a request).
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


def open_source(path: str | os.PathLike[str]) -> ByteSource:
    """A :class:`ByteSource` for a local path, or a remote one for a URL (``https://``,
    ``hf://``, ``s3://`` ...; needs the ``remote`` extra, imported only here)."""
    if isinstance(path, str) and "://" in path:
        from ckptctl._remote import is_url, open_remote

        if is_url(path):
            return open_remote(path)
    return ByteSource(path)


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


def copy_range(src: ByteSource, offset: int, length: int, dst: IO[bytes]) -> None:
    """Copy a byte range of ``src`` to ``dst`` without a tensor-sized buffer.

    Where the range and its place in ``dst`` sit at the same offset within a page,
    ``os.copy_file_range`` moves whole pages in the kernel (or shares them: reflinks, server-side
    copies). Anywhere else the kernel splits every page in two and is slower than one buffer
    (1 GiB 8 bytes off: 0.41 s against 0.25 s, benchmarks/RESULTS.md), so the bytes are read
    with :func:`read_chunks` and written, as they are where the OS has no copy_file_range.
    """
    src.check_range(offset, length, "copy")
    dst.flush()
    done = 0
    out_pos = dst.tell()
    copy_file_range = getattr(os, "copy_file_range", None)
    if copy_file_range is not None and (offset - out_pos) % mmap.PAGESIZE == 0:
        out_fd = dst.fileno()
        try:
            while done < length:
                n = copy_file_range(
                    src.fileno(), out_fd, min(length - done, 1 << 30), offset + done, out_pos + done
                )
                if n == 0:
                    break
                done += n
        except OSError:
            pass  # EXDEV, ENOSYS, EINVAL on some filesystems: fall back below
        dst.seek(out_pos + done)
    for piece in read_chunks(src, offset + done, length - done):
        dst.write(piece)


#: Each thread's idle read buffer (:func:`read_chunks`): one allocation per thread, not per
#: tensor. Fresh 8 MiB buffers cost page faults on every use (on this project's benchmark VM
#: up to a second of system time per GiB copied, benchmarks/RESULTS.md).
_SPARE = threading.local()


def read_chunks(source: ByteSource, offset: int, nbytes: int) -> Iterator[bytes | memoryview]:
    """``nbytes`` at ``offset`` in ``CHUNK_BYTES`` pieces, each valid until the next is taken
    (or the iteration ends).

    A local file is read with ``preadv`` into one buffer, reused for every piece and by the
    next call in the same thread (no page faults for fresh memory, and no mapped pages left
    resident); a remote source, which has no descriptor, or an OS without ``preadv``, is read
    through ``read``.
    """
    try:
        fd = source.fileno() if hasattr(os, "preadv") else None
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        fd = None
    if fd is None:
        for start in range(0, nbytes, CHUNK_BYTES):
            yield source.read(offset + start, min(CHUNK_BYTES, nbytes - start))
        return
    size = min(CHUNK_BYTES, nbytes)
    buffer: memoryview | None = getattr(_SPARE, "buffer", None)
    _SPARE.buffer = None  # taken: a second reader in this thread meanwhile gets its own
    if buffer is None or len(buffer) < size:
        buffer = memoryview(bytearray(size))
    try:
        for start in range(0, nbytes, CHUNK_BYTES):
            piece = buffer[: min(CHUNK_BYTES, nbytes - start)]
            got = os.preadv(fd, [piece], offset + start)
            if got != len(piece):  # the file shrank since it was opened
                raise CorruptCheckpointError(
                    f"read {got} of {len(piece)} bytes at offset {offset + start}: file truncated",
                    path=source.path,
                )
            yield piece
    finally:
        _SPARE.buffer = buffer


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], *, force: bool = False, fsync: bool = True
) -> Iterator[IO[bytes]]:
    """Write ``path`` atomically: temp file in the same directory, fsync, ``os.replace``.

    On any exception (KeyboardInterrupt included) the temporary file is removed and ``path`` is
    left exactly as it was. ``fsync=False`` skips the flush to disk: still atomic for other
    processes, but a power loss right after may leave an empty or partial file.

    Raises:
        OutputError: ``path`` exists and ``force`` is false, or it cannot be written.
    """
    dest = os.fspath(path)
    if os.path.isdir(dest):
        raise OutputError("is a directory", path=dest)
    if os.path.exists(dest) and not stat.S_ISREG(os.stat(dest).st_mode):
        # os.replace would swap a device or FIFO (/dev/null, as root) for a regular file
        raise OutputError(
            "is not a regular file; ckptctl writes files by replacing them",
            path=dest,
            hint="write to a regular file",
        )
    if os.path.lexists(dest) and not force:
        raise OutputError(
            "already exists",
            path=dest,
            hint=Note("pass {fix0} to overwrite it", (Option("force"),)),
        )
    directory = os.path.dirname(os.path.abspath(dest))
    if not os.path.exists(directory):
        raise OutputError(
            f"cannot write: the directory '{os.path.dirname(dest)}' does not exist",
            path=dest,
            hint="create it first, or write somewhere else",
        )
    mode = _mode_for(dest)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".ckptctl-", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(f"cannot write: {exc.strerror or exc}", path=dest) from None
    try:
        os.fchmod(fd, mode)  # mkstemp makes 0600; teammates must read what we write
        if fsync:
            _WRITEBACK_FDS.add(fd)
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            if fsync:
                os.fsync(out.fileno())
        os.replace(tmp, dest)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise OutputError(f"cannot write: {exc.strerror or exc}", path=dest) from None
    except BaseException:
        _unlink_quietly(tmp)
        raise
    finally:
        _WRITEBACK_FDS.discard(fd)


#: Descriptors of outputs that :func:`atomic_write` will fsync when they are complete.
_WRITEBACK_FDS: set[int] = set()
_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback, do not wait for it


def start_writeback(out: IO[bytes], offset: int, length: int) -> None:
    """Start writing ``length`` bytes at ``offset`` of ``out`` to disk, without waiting.

    Only for outputs :func:`atomic_write` will ``fsync``: the disk then writes one tensor while
    the next is copied, and the final ``fsync`` has little left to do (1 GiB: copy + fsync
    0.66 s -> 0.43 s, benchmarks/RESULTS.md, round two). A no-op elsewhere, on other systems,
    and when ``sync_file_range(2)`` is missing: the ``fsync`` still makes the file durable.
    """
    try:
        fd = out.fileno()
    except (OSError, ValueError):  # BytesIO and friends
        return
    if fd not in _WRITEBACK_FDS or length <= 0:
        return
    call = _sync_file_range()
    if call is not None:
        call(fd, offset, length, _SYNC_FILE_RANGE_WRITE)  # errors: fsync reports what matters


@functools.cache
def _sync_file_range() -> Callable[..., int] | None:
    return libc_function("sync_file_range", "c_int", "c_int64", "c_int64", "c_uint")


def libc_function(name: str, *argtypes: str) -> Callable[..., int] | None:
    """The C library's ``name`` through ctypes (Linux only), returning an ``int``; None where it
    is missing. ``argtypes`` are ctypes type names (``"c_int64"``)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # 1.5 ms, only on the writing path

    try:
        call = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    call.argtypes = tuple(getattr(ctypes, kind) for kind in argtypes)
    call.restype = ctypes.c_int
    return call  # type: ignore[no-any-return]


def _mode_for(dest: str) -> int:
    """The mode a new file gets under the user's umask, or the mode of the file replaced."""
    try:
        return stat.S_IMODE(os.stat(dest).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """True when both paths name the same existing file (hard links and symlinks included)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def refuse_sources(
    targets: Sequence[str | os.PathLike[str]], sources: Sequence[str | os.PathLike[str]]
) -> None:
    """Refuse to write any of ``targets`` when it is one of the input files (or a link to one).

    Raises:
        OutputError: a target is a source; writing it would destroy the data being read.
    """
    for target in targets:
        for src in sources:
            if same_file(src, target):
                raise OutputError(
                    "is also an input; writing it would destroy the data being read",
                    path=os.fspath(target),
                    hint="write to a new file, then rename it",
                )

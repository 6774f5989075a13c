"""Byte sources and output safety: ``ckptctl.sources`` (local files, in-memory and slice
sources, ``copy_range``) and ``ckptctl._io`` (atomic writes, refusing to overwrite an input).

Refusals are checked by class, exit code, path and a keyword plus the facts (what was read, how
many bytes, at which offset, the file's size). ``copy_range`` is checked
on both of its paths: ``os.copy_file_range`` for a range that keeps its place in the page (here a
stand-in with the kernel's semantics that can return short counts, give up with 0 or fail
part-way) and ``read_chunks`` + write for any other range, or where the kernel call fails.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import stat
import sys
import threading
from collections.abc import Callable

import numpy as np
import pytest

from ckptctl import _io, save_checkpoint, sources
from ckptctl._io import _unlink_quietly, refuse_sources
from ckptctl.errors import CkptError, CorruptCheckpointError, ExitCode, InputError, OutputError
from ckptctl.sources import ByteSource, copy_range
from ckptctl.sources import local as _src
from ckptctl.sources.local import _file_kind
from tests.strategies import array_entry

DATA = bytes(range(256)) * 4  # 1024 distinct-enough bytes: a misplaced byte shows


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "src.bin"
    path.write_bytes(DATA)
    with ByteSource(path) as src:
        yield src


# --- ByteSource: opening --------------------------------------------------------------------


def test_missing_file_error_names_the_path(tmp_path):
    path = tmp_path / "missing.safetensors"
    with pytest.raises(InputError) as info:
        ByteSource(path)
    assert info.value.message == "no such file"
    assert info.value.path == str(path)
    assert info.value.exit_code == ExitCode.INPUT


def test_unreadable_path_error_gives_the_os_reason(tmp_path):
    (tmp_path / "plain").write_bytes(b"x")
    path = tmp_path / "plain" / "inside.pt"  # a file used as a directory: ENOTDIR from stat
    with pytest.raises(InputError) as info:
        ByteSource(path)
    assert info.value.message == f"cannot open: {os.strerror(errno.ENOTDIR)}"
    assert info.value.path == str(path)


@pytest.mark.parametrize(
    ("error", "message", "hint"),
    [
        (OSError(errno.EMFILE, os.strerror(errno.EMFILE)),
         f"cannot open: {os.strerror(errno.EMFILE)}", None),
        (PermissionError(errno.EACCES, os.strerror(errno.EACCES)), "permission denied",
         _src.PERMISSION_HINT),  # root ignores chmod 000: the open is made to fail
    ],
    ids=["too-many-files", "permission"],
)  # fmt: skip
def test_open_failure_after_stat_gives_the_os_reason(tmp_path, monkeypatch, error, message, hint):
    path = tmp_path / "busy.bin"
    path.write_bytes(b"x")

    def refuse(*args: object, **kwargs: object) -> object:
        raise error

    monkeypatch.setattr(_src, "open", refuse, raising=False)
    with pytest.raises(InputError) as info:
        ByteSource(path)
    assert (info.value.message, info.value.path, info.value.hint) == (message, str(path), hint)


def assert_past_end(
    err: CkptError, what: str, nbytes: object, offset: object, size: object
) -> None:
    """``err`` says ``what`` of ``nbytes`` at ``offset`` is past the end of a ``size``-byte file."""
    pattern = rf"^{what} of {nbytes} bytes at offset {offset} .*past the end\b.*\({size} bytes\)$"
    assert re.search(pattern, err.message), err.message


def test_directory_error_text(tmp_path):
    with pytest.raises(InputError) as info:
        ByteSource(tmp_path)
    assert re.search(r"\bdirectory\b", info.value.message)
    assert info.value.path == str(tmp_path)


def test_special_file_errors_name_the_kind(tmp_path):
    fifo = tmp_path / "pipe.pt"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock.pt"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(sock_path))
        cases = [(fifo, "named pipe"), ("/dev/null", "character device"), (sock_path, "socket")]
        for path, kind in cases:
            with pytest.raises(InputError) as info:
                ByteSource(path)
            assert re.search(rf"\bnot a regular file \(a {kind}\)", info.value.message)
            assert info.value.path == str(path)
    finally:
        sock.close()


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        (stat.S_IFIFO | 0o644, "named pipe"),
        (stat.S_IFCHR | 0o644, "character device"),
        (stat.S_IFBLK | 0o660, "block device"),  # mknod needs privileges a test may not have
        (stat.S_IFSOCK | 0o755, "socket"),
        (0o644, "special file"),  # no file-type bits: none of the above
    ],
)
def test_file_kind_names(mode, kind):
    assert _file_kind(mode) == kind


def test_size_and_buffer_of_a_regular_and_an_empty_file(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    with ByteSource(tmp_path / "empty") as src:
        assert src.size == 0
        assert bytes(src.buffer) == b""
        assert src.read(0, 0) == b""
    with ByteSource(tmp_path / "empty") as src, pytest.raises(CorruptCheckpointError):
        src.read(0, 1)


# --- ByteSource: bounds -----------------------------------------------------------------------


@pytest.mark.parametrize("what", ["read", "view"])
def test_range_error_text_names_the_operation(source, what):
    with pytest.raises(CorruptCheckpointError) as info:
        getattr(source, what)(1020, 8)
    err = info.value
    assert_past_end(err, what, 8, 1020, 1024)
    assert err.path == source.path
    assert "truncated" in str(err.hint)
    assert str(err) == f"{source.path}: {err.message}"
    assert err.exit_code == ExitCode.INPUT


@pytest.mark.parametrize(
    ("offset", "length"),
    [(-1, 1), (0, -1), (1024, 1), (0, 1025), (1023, 2)],
)
def test_ranges_outside_the_file_are_refused(source, offset, length):
    with pytest.raises(CorruptCheckpointError):
        source.check_range(offset, length, "read")


@pytest.mark.parametrize(("offset", "length"), [(0, 0), (0, 1024), (1023, 1), (1024, 0)])
def test_ranges_inside_the_file_are_accepted(source, offset, length):
    source.check_range(offset, length, "read")
    assert source.read(offset, length) == DATA[offset : offset + length]
    assert bytes(source.view(offset, length)) == DATA[offset : offset + length]


def test_zero_length_read_and_view_are_empty(source):
    assert source.read(7, 0) == b""
    assert source.read(1024, 0) == b""
    assert bytes(source.view(7, 0)) == b""


def test_close_releases_map_and_file(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(DATA)
    src = ByteSource(path)
    assert bytes(src.view(0, 4)) == DATA[:4]  # creates the map
    fd = src.fileno()
    src.close()
    assert src._map is None
    with pytest.raises(OSError, match="Bad file descriptor"):  # the descriptor is closed
        os.fstat(fd)
    with pytest.raises(ValueError, match="closed file"):
        src.fileno()


def test_close_with_a_live_view_still_closes_the_file(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(DATA)
    src = ByteSource(path)
    view = src.view(10, 4)  # keeps the map exported: mmap.close() raises BufferError
    src.close()
    assert src._map is None
    with pytest.raises(ValueError, match="closed file"):
        src.fileno()
    assert bytes(view) == DATA[10:14]  # the map lives on until the view is dropped
    view.release()


# --- copy_range -------------------------------------------------------------------------------


class FakeCopyFileRange:
    """``os.copy_file_range`` with the kernel's semantics, copying at most ``cap`` bytes a call.

    ``fail_after`` calls raise ``OSError(EXDEV)``; ``give_up`` makes every call return 0 (what the
    kernel does at the source's end of file).
    """

    def __init__(self, cap: int, *, fail_after: int | None = None, give_up: bool = False) -> None:
        self.cap, self.fail_after, self.give_up = cap, fail_after, give_up
        self.calls: list[tuple[int, int, int, int | None, int | None]] = []
        self.copied = 0

    def __call__(
        self,
        src: int,
        dst: int,
        count: int,
        offset_src: int | None = None,
        offset_dst: int | None = None,
    ) -> int:
        self.calls.append((src, dst, count, offset_src, offset_dst))
        assert len(self.calls) < 10_000, "copy_range keeps calling copy_file_range"
        if self.fail_after is not None and len(self.calls) > self.fail_after:
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        if self.give_up:
            return 0
        n = min(count, self.cap)
        data = os.pread(src, n, offset_src) if offset_src is not None else os.read(src, n)
        written = os.write(dst, data) if offset_dst is None else os.pwrite(dst, data, offset_dst)
        self.copied += written
        return written


def _copy(tmp_path, src, offset, length):
    """copy_range into a file that already holds a 3-byte head; returns the file's bytes."""
    path = tmp_path / "dst.bin"
    with open(path, "wb") as out:
        out.write(b"HDR")
        copy_range(src, offset, length, out)
        out.write(b"END")
    return path.read_bytes()


# _copy writes a 3-byte head first: a range starting at byte 3 (or a page later) keeps its
# place in the page, any other start does not.
ALIGNED = 3


def test_copy_range_uses_copy_file_range_for_the_whole_range(tmp_path, source, monkeypatch):
    monkeypatch.setattr(_src, "COPY_BYTES", 350)  # a range of at least one copy buffer
    fake = FakeCopyFileRange(cap=100)
    monkeypatch.setattr(os, "copy_file_range", fake)
    # 350 bytes in 100-byte calls: three full and one short, every one at the right offsets
    assert _copy(tmp_path, source, ALIGNED, 350) == b"HDR" + DATA[3:353] + b"END"
    assert fake.copied == 350  # nothing left to the fallback
    src_fd = source.fileno()
    assert [(c[0], c[3], c[4]) for c in fake.calls] == [
        (src_fd, 3, 3),
        (src_fd, 103, 103),
        (src_fd, 203, 203),
        (src_fd, 303, 303),
    ]
    assert [c[2] for c in fake.calls] == [350, 250, 150, 50]  # asks only for what is left


@pytest.mark.parametrize("offset", [0, 1, 2, 4, 17, 1 + ALIGNED, 1023])
def test_copy_range_reads_and_writes_a_range_off_its_place_in_the_page(
    tmp_path, source, monkeypatch, offset
):
    fake = FakeCopyFileRange(cap=100)
    monkeypatch.setattr(os, "copy_file_range", fake)
    length = len(DATA) - offset
    assert _copy(tmp_path, source, offset, length) == b"HDR" + DATA[offset:] + b"END"
    assert fake.calls == []  # the kernel would split every page: one buffer is faster


def test_copy_range_page_congruence_is_taken_modulo_the_page_size(tmp_path, monkeypatch):
    page = os.sysconf("SC_PAGE_SIZE")
    data = DATA * (2 * page // len(DATA) + 1)
    (tmp_path / "big.bin").write_bytes(data)
    fake = FakeCopyFileRange(cap=1 << 20)
    monkeypatch.setattr(os, "copy_file_range", fake)
    monkeypatch.setattr(_src, "COPY_BYTES", 10)
    with ByteSource(tmp_path / "big.bin") as big:
        assert (
            _copy(tmp_path, big, page + ALIGNED, 10) == b"HDR" + data[page + 3 : page + 13] + b"END"
        )
    assert [(c[3], c[4]) for c in fake.calls] == [(page + 3, 3)]


def test_copy_range_does_not_copy_past_the_range_after_short_counts(tmp_path, source, monkeypatch):
    monkeypatch.setattr(os, "copy_file_range", FakeCopyFileRange(cap=64))
    assert _copy(tmp_path, source, ALIGNED, 100) == b"HDR" + DATA[3:103] + b"END"


def test_copy_range_falls_back_when_copy_file_range_copies_nothing(tmp_path, source, monkeypatch):
    fake = FakeCopyFileRange(cap=100, give_up=True)
    monkeypatch.setattr(os, "copy_file_range", fake)
    monkeypatch.setattr(_src, "COPY_BYTES", 64)
    assert _copy(tmp_path, source, ALIGNED, 200) == b"HDR" + DATA[3:203] + b"END"
    assert len(fake.calls) == 1  # a 0 return ends the copy_file_range loop


def test_copy_range_finishes_with_the_fallback_after_a_failure(tmp_path, source, monkeypatch):
    fake = FakeCopyFileRange(cap=100, fail_after=2)
    monkeypatch.setattr(os, "copy_file_range", fake)
    monkeypatch.setattr(_src, "COPY_BYTES", 64)
    assert _copy(tmp_path, source, ALIGNED, 450) == b"HDR" + DATA[3:453] + b"END"
    assert fake.copied == 200  # two calls went through, the rest was streamed


@pytest.mark.parametrize(("offset", "length"), [(0, 0), (11, 1), (11, 5), (11, 23), (1, 1023)])
def test_copy_range_fallback_streams_chunks(tmp_path, source, monkeypatch, offset, length):
    monkeypatch.delattr(os, "copy_file_range")  # an OS without it
    monkeypatch.setattr(_src, "COPY_BYTES", 5)  # ranges cross several buffers
    expected = b"HDR" + DATA[offset : offset + length] + b"END"
    assert _copy(tmp_path, source, offset, length) == expected


def test_copy_range_fallback_reads_at_most_one_buffer_at_a_time(tmp_path, source, monkeypatch):
    monkeypatch.delattr(os, "copy_file_range")
    monkeypatch.setattr(_src, "COPY_BYTES", 8)
    reads: list[tuple[int, int]] = []
    preadv = os.preadv

    def spy(fd: int, buffers: list[memoryview], offset: int) -> int:
        reads.append((offset, sum(len(b) for b in buffers)))
        return preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", spy)
    assert _copy(tmp_path, source, 100, 30) == b"HDR" + DATA[100:130] + b"END"
    assert reads == [(100, 8), (108, 8), (116, 8), (124, 6)]


@pytest.mark.parametrize("offset", [ALIGNED, 255])
def test_copy_range_with_the_real_system_calls(tmp_path, source, offset):
    assert _copy(tmp_path, source, offset, 700) == b"HDR" + DATA[offset : offset + 700] + b"END"


def test_copy_range_leaves_a_short_congruent_range_to_the_buffer(tmp_path, source, monkeypatch):
    fake = FakeCopyFileRange(cap=100)
    monkeypatch.setattr(os, "copy_file_range", fake)
    monkeypatch.setattr(_src, "COPY_BYTES", 351)
    assert _copy(tmp_path, source, ALIGNED, 350) == b"HDR" + DATA[3:353] + b"END"
    assert fake.calls == []  # shorter than the buffer: no cheaper in the kernel


def _copy_ranges(tmp_path, ranges):
    path = tmp_path / "dst.bin"
    with open(path, "wb") as out:
        out.write(b"HDR")
        _src.copy_ranges(ranges, out)
        out.write(b"END")
    return path.read_bytes()


def test_copy_ranges_takes_a_range_s_place_after_the_bytes_gathered_before_it(
    tmp_path, source, monkeypatch
):
    # 100 bytes gathered after the 3-byte head put the next range's place at byte 103, where
    # its source offset 103 is: the same place in the page, so the kernel copies it
    monkeypatch.setattr(_src, "COPY_BYTES", 350)
    fake = FakeCopyFileRange(cap=1 << 20)
    monkeypatch.setattr(os, "copy_file_range", fake)
    got = _copy_ranges(tmp_path, [(source, 0, 100), (source, 103, 400)])
    assert got == b"HDR" + DATA[:100] + DATA[103:503] + b"END"
    assert [(c[2], c[3], c[4]) for c in fake.calls] == [(400, 103, 103)]


def test_copy_ranges_gathers_runs_of_two_files_one_read_per_file_and_buffer(
    tmp_path, source, monkeypatch
):
    """Rows of a column-split tensor: parts of two files, interleaved; each file's parts follow
    each other, so a buffer-full is one ``preadv`` per file and one ``pwrite``."""
    other_data = bytes(reversed(DATA))
    (tmp_path / "other.bin").write_bytes(other_data)
    monkeypatch.setattr(_src, "COPY_BYTES", 40)
    reads: list[tuple[int, int, int]] = []
    writes: list[tuple[int, int]] = []
    preadv, pwrite = os.preadv, os.pwrite

    def spy_read(fd: int, buffers: list[memoryview], offset: int) -> int:
        reads.append((offset, len(buffers), sum(len(b) for b in buffers)))
        return preadv(fd, buffers, offset)

    def spy_write(fd: int, data: memoryview, offset: int) -> int:
        writes.append((offset, len(data)))
        return pwrite(fd, data, offset)

    monkeypatch.setattr(os, "preadv", spy_read)
    monkeypatch.setattr(os, "pwrite", spy_write)
    with ByteSource(tmp_path / "other.bin") as other:
        ranges = []
        for row in range(5):  # 5 rows of 10 bytes from `source` and 6 from `other`
            ranges += [(source, 100 + 10 * row, 10), (other, 7 + 6 * row, 6)]
        want = b"".join(DATA[100 + 10 * r : 110 + 10 * r] + other_data[7 + 6 * r : 13 + 6 * r]
                        for r in range(5))  # fmt: skip
        assert _copy_ranges(tmp_path, ranges) == b"HDR" + want + b"END"
    assert writes == [(3, 40), (43, 40)]  # two buffer-fulls, written where they go
    # the first buffer: rows 0-1 and 8 bytes of row 2 (cut mid-range), one read per file
    assert reads[:2] == [(100, 3, 28), (7, 2, 12)]
    assert sum(n for _, _, n in reads) == 80


def test_copy_ranges_reads_at_most_max_iovecs_buffers_a_call(tmp_path, source, monkeypatch):
    monkeypatch.setattr(_src, "MAX_IOVECS", 2)
    counts: list[int] = []
    preadv = os.preadv

    def spy(fd: int, buffers: list[memoryview], offset: int) -> int:
        counts.append(len(buffers))
        return preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", spy)
    ranges = [(source, 10 + 3 * i, 3) for i in range(5)]  # one run of the file, five ranges
    assert _copy_ranges(tmp_path, ranges) == b"HDR" + DATA[10:25] + b"END"
    assert counts == [2, 2, 1]


def test_copy_ranges_of_a_file_in_memory_and_a_file(tmp_path, source):
    memory = sources.MemorySource(b"abcdefgh", "nested")
    ranges = [(source, 5, 4), (memory, 2, 3), (source, 9, 2), (memory, 0, 0)]
    assert _copy_ranges(tmp_path, ranges) == b"HDR" + DATA[5:9] + b"cde" + DATA[9:11] + b"END"


def test_copy_ranges_refuses_a_range_outside_its_file(tmp_path, source):
    with pytest.raises(CorruptCheckpointError, match=r"\bpast the end\b"):
        _copy_ranges(tmp_path, [(source, 0, 4), (source, len(DATA) - 2, 3)])


def test_copy_ranges_names_a_file_that_shrank(tmp_path, monkeypatch):
    path = tmp_path / "shrinks.bin"
    path.write_bytes(DATA)
    with ByteSource(path) as src:
        os.truncate(path, 100)
        with pytest.raises(CorruptCheckpointError, match="file truncated") as info:
            _copy_ranges(tmp_path, [(src, 50, 200)])
    assert info.value.path == str(path)


def test_copy_ranges_finishes_a_short_write(tmp_path, source, monkeypatch):
    pwrite = os.pwrite

    def short(fd: int, data: memoryview, offset: int) -> int:
        return pwrite(fd, data[:7], offset)  # a signal, a full disk: at most 7 bytes a call

    monkeypatch.setattr(os, "pwrite", short)
    assert _copy_ranges(tmp_path, [(source, 3, 30)]) == b"HDR" + DATA[3:33] + b"END"


# --- read_chunks ------------------------------------------------------------------------------


def test_read_chunks_reuses_one_buffer(source, monkeypatch):
    monkeypatch.setattr(_src, "CHUNK_BYTES", 16)
    monkeypatch.setattr(_src, "_SPARE", threading.local())
    pieces, owners = [], []
    for piece in _src.read_chunks(source, 10, 40):
        assert isinstance(piece, memoryview)
        pieces.append(bytes(piece))
        owners.append(piece.obj)
    assert pieces == [DATA[10:26], DATA[26:42], DATA[42:50]]
    assert len(owners[0]) == 16  # type: ignore[arg-type]  # the bytearray behind the views
    assert owners[1] is owners[0]
    assert owners[2] is owners[0]
    again = next(_src.read_chunks(source, 0, 5))  # the next call in this thread: the same buffer
    assert isinstance(again, memoryview)
    assert bytes(again) == DATA[:5]
    assert again.obj is owners[0]
    assert list(_src.read_chunks(source, 7, 0)) == []


def test_read_chunks_in_pieces_of_the_size_asked_for(source, monkeypatch):
    monkeypatch.setattr(_src, "_SPARE", threading.local())
    assert [bytes(p) for p in _src.read_chunks(source, 10, 25, 10)] == [
        DATA[10:20],
        DATA[20:30],
        DATA[30:35],
    ]
    monkeypatch.setattr(_src, "CHUNK_BYTES", 5)
    remote = _NoDescriptor(source)  # a range request costs more than a big piece
    got = [bytes(p) for p in _src.read_chunks(remote, 3, 7, 4)]  # type: ignore[arg-type]
    assert (got, remote.reads) == ([DATA[3:8], DATA[8:10]], [(3, 5), (8, 2)])


def test_read_chunks_grows_the_spare_buffer_to_a_chunk(source, monkeypatch):
    monkeypatch.setattr(_src, "CHUNK_BYTES", 16)
    monkeypatch.setattr(_src, "_SPARE", threading.local())
    small = next(_src.read_chunks(source, 0, 4))
    assert isinstance(small, memoryview)
    assert len(small.obj) == 4  # type: ignore[arg-type]  # no chunk-sized buffer for 4 bytes
    big = [bytes(p) for p in _src.read_chunks(source, 4, 20)]
    assert big == [DATA[4:20], DATA[20:24]]
    assert len(_src._SPARE.buffer) == 16


def test_read_chunks_readers_in_one_thread_never_share_a_buffer(source, monkeypatch):
    monkeypatch.setattr(_src, "CHUNK_BYTES", 8)
    monkeypatch.setattr(_src, "_SPARE", threading.local())
    first = _src.read_chunks(source, 0, 32)
    second = _src.read_chunks(source, 500, 32)
    got = [(bytes(a), bytes(b)) for a, b in zip(first, second, strict=True)]
    assert got == [(DATA[i : i + 8], DATA[500 + i : 508 + i]) for i in range(0, 32, 8)]


def test_read_chunks_threads_have_their_own_buffers(source, monkeypatch):
    monkeypatch.setattr(_src, "CHUNK_BYTES", 8)
    monkeypatch.setattr(_src, "_SPARE", threading.local())

    def owner() -> object:
        piece = next(_src.read_chunks(source, 0, 8))
        assert isinstance(piece, memoryview)
        return piece.obj

    mine = owner()
    theirs: list[object] = []
    thread = threading.Thread(target=lambda: theirs.append(owner()))
    thread.start()
    thread.join()
    assert theirs[0] is not mine


class _NoDescriptor:
    """A source without a file descriptor (as a remote one is)."""

    def __init__(self, src: ByteSource) -> None:
        self.src = src
        self.reads: list[tuple[int, int]] = []

    def fileno(self) -> int:
        raise OSError("no descriptor")

    def read(self, offset: int, length: int) -> bytes:
        self.reads.append((offset, length))
        return bytes(self.src.read(offset, length))


def test_read_chunks_reads_a_source_without_descriptor(source, monkeypatch):
    monkeypatch.setattr(_src, "CHUNK_BYTES", 16)
    remote = _NoDescriptor(source)
    got = b"".join(bytes(p) for p in _src.read_chunks(remote, 10, 40))  # type: ignore[arg-type]
    assert got == DATA[10:50]
    assert remote.reads == [(10, 16), (26, 16), (42, 8)]


def test_read_chunks_without_preadv_reads_through_the_source(source, monkeypatch):
    monkeypatch.setattr(_src, "CHUNK_BYTES", 16)
    monkeypatch.delattr(os, "preadv")
    reads: list[tuple[int, int]] = []
    read = source.read

    def spy(offset: int, length: int) -> bytes:
        reads.append((offset, length))
        return bytes(read(offset, length))

    monkeypatch.setattr(source, "read", spy)
    assert b"".join(bytes(p) for p in _src.read_chunks(source, 1, 20)) == DATA[1:21]
    assert reads == [(1, 16), (17, 4)]


def test_read_chunks_refuses_a_file_that_shrank(tmp_path):
    path = tmp_path / "shrinks.bin"
    path.write_bytes(DATA)
    with ByteSource(path) as src:
        os.truncate(path, 100)
        with pytest.raises(CorruptCheckpointError) as info:
            list(_src.read_chunks(src, 90, 20))
    assert info.value.message == "read 10 of 20 bytes at offset 90: file truncated"
    assert info.value.path == str(path)


def test_copy_range_refuses_a_range_past_the_end(tmp_path, source):
    with open(tmp_path / "dst.bin", "wb") as out, pytest.raises(CorruptCheckpointError) as info:
        copy_range(source, 1000, 25, out)
    assert_past_end(info.value, "copy", 25, 1000, 1024)
    assert info.value.path == source.path
    assert (tmp_path / "dst.bin").read_bytes() == b""


# --- refuse_sources, _unlink_quietly ---------------------------------------------------------


def test_refuse_sources_error_text(tmp_path):
    src = tmp_path / "model.safetensors"
    src.write_bytes(b"x")
    link = tmp_path / "link.safetensors"
    link.symlink_to(src)
    other = tmp_path / "new.safetensors"
    refuse_sources([other], [src])  # a new file: fine
    with pytest.raises(OutputError) as info:
        refuse_sources([other, link], [tmp_path / "missing", src])
    err = info.value
    assert re.search(r"\balso an input\b", err.message)
    assert err.path == str(link)
    assert "new file" in str(err.hint)
    assert err.exit_code == ExitCode.OUTPUT


def test_convert_onto_its_own_input_prints_the_error_and_hint(tmp_path, run_cli):
    path = tmp_path / "m.safetensors"
    save_checkpoint(path, [array_entry("w", np.arange(4, dtype="<f4"))])
    before = path.read_bytes()
    result = run_cli("convert", path, path, "--force")
    assert result.code == ExitCode.OUTPUT
    error, hint = result.stderr.splitlines()
    assert re.search(rf"^ckptctl: error: {re.escape(str(path))}: .*\balso an input\b", error)
    assert hint.startswith("hint: ")
    assert path.read_bytes() == before


def test_unlink_quietly_ignores_a_missing_file(tmp_path):
    path = tmp_path / "gone.tmp"
    path.write_bytes(b"x")
    _unlink_quietly(str(path))
    assert not path.exists()
    _unlink_quietly(str(path))  # already gone: no error


# --- open_source ------------------------------------------------------------------------------


def test_open_source_sends_urls_to_the_remote_source(monkeypatch):
    from ckptctl.sources import remote as _remote

    opened: list[str] = []
    remote = object()

    def open_remote(url: str) -> object:
        opened.append(url)
        return remote

    monkeypatch.setattr(_remote, "open_remote", open_remote)
    assert sources.open_source("https://example.invalid/m.safetensors") is remote
    assert opened == ["https://example.invalid/m.safetensors"]


def test_open_source_opens_local_paths_even_with_a_scheme_like_part(tmp_path):
    folder = tmp_path / "a:"
    folder.mkdir()
    (folder / "m.bin").write_bytes(DATA)
    for path in (f"{tmp_path}/a://m.bin", folder / "m.bin"):
        with sources.open_source(path) as src:
            assert type(src) is ByteSource
            assert src.read(0, 4) == DATA[:4]


# --- atomic_write -----------------------------------------------------------------------------


def test_atomic_write_error_texts(tmp_path):
    with pytest.raises(OutputError) as info, _io.atomic_write(tmp_path):
        pass
    assert (info.value.message, info.value.path) == ("is a directory", str(tmp_path))
    dest = tmp_path / "out.bin"
    dest.write_bytes(b"x")
    with pytest.raises(OutputError) as info, _io.atomic_write(dest):
        pass
    assert (info.value.message, info.value.path) == ("already exists", str(dest))
    assert info.value.exit_code == ExitCode.OUTPUT
    nowhere = tmp_path / "no-such-dir" / "out.bin"
    with pytest.raises(OutputError) as info, _io.atomic_write(nowhere):
        pass
    assert info.value.message == f"cannot write: the directory '{nowhere.parent}' does not exist"
    assert info.value.path == str(nowhere)


def test_atomic_write_refuses_a_dangling_symlink_without_force(tmp_path):
    dest = tmp_path / "link.bin"
    dest.symlink_to(tmp_path / "missing")
    with pytest.raises(OutputError, match="already exists"), _io.atomic_write(dest):
        pass
    with _io.atomic_write(dest, force=True) as out:
        out.write(b"new")
    assert dest.read_bytes() == b"new"
    assert not dest.is_symlink()  # replaced, not written through


def test_atomic_write_writes_through_a_hidden_temp_file(tmp_path):
    dest = tmp_path / "out.bin"
    with _io.atomic_write(dest) as out:
        out.write(b"data")
        (tmp,) = os.listdir(tmp_path)
        assert tmp.startswith(".ckptctl-")
        assert tmp.endswith(".tmp")
        assert not dest.exists()  # nothing at the destination until the end
    assert dest.read_bytes() == b"data"
    assert os.listdir(tmp_path) == ["out.bin"]


@pytest.mark.parametrize("fsync", [True, False])
def test_atomic_write_fsyncs_only_when_asked(tmp_path, monkeypatch, fsync):
    synced: list[int] = []
    real = os.fsync

    def fsync_spy(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync_spy)
    with _io.atomic_write(tmp_path / "out.bin", fsync=fsync) as out:
        out.write(b"data")
        fd = out.fileno()
        assert (fd in _io._WRITEBACK_FDS) is fsync
    assert synced == ([fd] if fsync else [])
    assert fd not in _io._WRITEBACK_FDS


def test_atomic_write_forgets_the_descriptor_after_a_failure(tmp_path):
    with pytest.raises(RuntimeError), _io.atomic_write(tmp_path / "out.bin") as out:
        fd = out.fileno()
        raise RuntimeError("boom")
    assert fd not in _io._WRITEBACK_FDS
    assert os.listdir(tmp_path) == []


def test_new_files_get_the_umask_mode_and_replaced_files_keep_theirs(tmp_path):
    old = os.umask(0o027)
    try:
        fresh = tmp_path / "fresh.bin"
        with _io.atomic_write(fresh) as out:
            out.write(b"a")
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o640
        kept = tmp_path / "kept.bin"
        kept.write_bytes(b"old")
        kept.chmod(0o604)
        with _io.atomic_write(kept, force=True) as out:
            out.write(b"new")
        assert stat.S_IMODE(kept.stat().st_mode) == 0o604
        assert os.umask(0o027) == 0o027  # the umask is left as it was
    finally:
        os.umask(old)


# --- start_writeback --------------------------------------------------------------------------


def test_sync_file_range_takes_64_bit_offsets_and_reports_errors(tmp_path):
    import ctypes
    import sys

    _io._sync_file_range.cache_clear()
    call = _io._sync_file_range()
    if not sys.platform.startswith("linux"):
        assert call is None
        return
    assert call is not None
    with open(tmp_path / "f.bin", "wb") as out:
        out.write(b"x" * 4096)
        out.flush()
        assert call(out.fileno(), 1 << 33, 4096, 2) == 0  # past 4 GiB: no 32-bit truncation
        ctypes.set_errno(0)
        assert call(out.fileno(), -1, 4096, 2) == -1
        assert ctypes.get_errno() == errno.EINVAL


def test_sync_file_range_is_not_looked_up_off_linux(monkeypatch):
    import sys

    _io._sync_file_range.cache_clear()
    monkeypatch.setattr(sys, "platform", "darwin")
    try:
        assert _io._sync_file_range() is None
    finally:
        _io._sync_file_range.cache_clear()


def test_writeback_without_sync_file_range_is_a_no_op(tmp_path, monkeypatch):
    monkeypatch.setattr(_io, "_sync_file_range", lambda: None)
    with _io.atomic_write(tmp_path / "out.bin") as out:
        out.write(b"z" * 10)
        _io.start_writeback(out, 0, 10)
    assert (tmp_path / "out.bin").read_bytes() == b"z" * 10


def _recorder(calls: list[tuple[int, ...]]) -> Callable[..., int]:
    """A stand-in for ``sync_file_range`` that records its arguments and succeeds."""

    def call(*args: int) -> int:
        calls.append(args)
        return 0

    return call


def test_writeback_of_a_closed_file_is_a_no_op(tmp_path, monkeypatch):
    calls: list[tuple[int, ...]] = []
    monkeypatch.setattr(_io, "_sync_file_range", lambda: _recorder(calls))
    out = open(tmp_path / "f.bin", "wb")  # noqa: SIM115
    out.close()
    _io.start_writeback(out, 0, 10)  # fileno() raises ValueError
    assert calls == []


def test_writeback_of_a_single_byte_is_started(tmp_path, monkeypatch):
    calls: list[tuple[int, ...]] = []
    monkeypatch.setattr(_io, "_sync_file_range", lambda: _recorder(calls))
    with _io.atomic_write(tmp_path / "out.bin") as out:
        out.write(b"z")
        _io.start_writeback(out, 0, 1)
        _io.start_writeback(out, 1, 0)
        _io.start_writeback(out, 1, -1)
        fd = out.fileno()
    assert calls == [(fd, 0, 1, 2)]


def test_read_chunks_reports_the_offset_of_the_short_piece(tmp_path, monkeypatch):
    monkeypatch.setattr(_src, "CHUNK_BYTES", 16)
    path = tmp_path / "shrinks.bin"
    path.write_bytes(DATA)
    with ByteSource(path) as src:
        os.truncate(path, 100)
        reader = _src.read_chunks(src, 80, 40)
        assert bytes(next(reader)) == DATA[80:96]
        with pytest.raises(CorruptCheckpointError) as info:
            next(reader)
    assert info.value.message == "read 4 of 16 bytes at offset 96: file truncated"


def test_read_chunks_keeps_a_spare_of_exactly_the_size_asked(source, monkeypatch):
    monkeypatch.setattr(_src, "CHUNK_BYTES", 16)
    monkeypatch.setattr(_src, "_SPARE", threading.local())
    first = next(_src.read_chunks(source, 0, 16))
    again = next(_src.read_chunks(source, 16, 16))
    assert isinstance(first, memoryview)
    assert isinstance(again, memoryview)
    assert again.obj is first.obj
    assert bytes(again) == DATA[16:32]


class _CountingCopy:
    """``os.copy_file_range`` that claims every byte asked for and copies none (counts only)."""

    def __init__(self) -> None:
        self.counts: list[int] = []

    def __call__(self, src: int, dst: int, count: int, *offsets: int) -> int:
        self.counts.append(count)
        return count


def test_copy_range_asks_the_kernel_for_at_most_1_gib_a_call(tmp_path, monkeypatch):
    big = tmp_path / "sparse.bin"
    with open(big, "wb") as f:
        f.truncate((5 << 29) + ALIGNED)  # 2.5 GiB + the head, sparse: no disk used
    fake = _CountingCopy()
    monkeypatch.setattr(os, "copy_file_range", fake)
    monkeypatch.setattr(_src, "COPY_TASK_BYTES", 4 << 30)  # one task
    with ByteSource(big) as src, open(tmp_path / "out.bin", "wb") as out:
        out.write(b"HDR")
        copy_range(src, ALIGNED, 5 << 29, out)
    assert fake.counts == [1 << 30, 1 << 30, 1 << 29]  # what is left, at most 1 GiB a call


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="libc through ctypes: Linux")
def test_libc_function_on_linux_passes_64_bit_arguments_and_keeps_errno(tmp_path):
    call = _io.libc_function("sync_file_range", "c_int", "c_int64", "c_int64", "c_uint")
    assert call is not None
    with open(tmp_path / "f.bin", "wb") as f:
        f.write(b"x" * 4096)
        f.flush()
        assert call(f.fileno(), 0, 1 << 40, 2) == 0  # a 64-bit length, an int result
    import ctypes

    assert call(-1, 0, 4096, 2) == -1
    assert ctypes.get_errno() == errno.EBADF  # the call's errno is kept for the caller
    assert _io.libc_function("no_such_function_in_libc", "c_int") is None


def test_libc_function_is_none_off_linux(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert _io.libc_function("sync_file_range", "c_int") is None


def test_memory_source_reads_inside_and_names_itself_when_a_read_runs_past_its_end():
    src = _src.MemorySource(b"abcdef", "outer.pt/inner.pt")
    assert (src.path, src.size, src.read(2, 3), bytes(src.buffer)) == (
        "outer.pt/inner.pt",
        6,
        b"cde",
        b"abcdef",
    )
    with pytest.raises(CorruptCheckpointError) as info:
        src.read(4, 3)
    assert info.value.path == "outer.pt/inner.pt"
    assert_past_end(info.value, "read", 3, 4, 6)
    with pytest.raises(OSError, match=r"^outer\.pt/inner\.pt .*in memory\b.* no file descr"):
        src.fileno()


def test_slice_source_reads_its_window_and_names_what_ran_past_it(monkeypatch):
    parent = _src.MemorySource(b"0123456789", "__0_0.distcp")
    item = _src.SliceSource(parent, 2, 5, "__0_0.distcp@2")
    assert (item.path, item.size, item.read(1, 3), bytes(item.view(0, 5))) == (
        "__0_0.distcp@2",
        5,
        b"345",
        b"23456",
    )
    assert (bytes(item.buffer), item.absolute(4)) == (b"23456", 6)
    for call, what in ((item.read, "read"), (item.view, "view")):
        with pytest.raises(CorruptCheckpointError) as info:
            call(3, 3)
        assert info.value.path == "__0_0.distcp@2"
        assert_past_end(info.value, what, 3, 3, 5)
    with pytest.raises(CorruptCheckpointError) as info:
        _src.SliceSource(parent, 8, 5, "__0_0.distcp@8")
    assert info.value.path == "__0_0.distcp"
    assert_past_end(info.value, "an item", 5, 8, 10)
    with pytest.raises(OSError, match=r"^__0_0\.distcp@2 .*part of a file\b.* no file desc"):
        item.fileno()
    released: list[tuple[int, int]] = []
    monkeypatch.setattr(parent, "release_pages", lambda *at: released.append(at))
    item.release_pages(3, 2)
    assert released == [(5, 2)]  # the parent's bytes [base + 3, base + 5)
    item.close()
    assert parent.read(0, 2) == b"01"  # closing the slice leaves the parent open


# --- ByteSource.release_pages: the map's pages leave the resident set ----------------------------

_SMAPS = "/proc/self/smaps"
needs_smaps = pytest.mark.skipif(
    not os.path.exists(_SMAPS) or not hasattr(__import__("mmap"), "MADV_DONTNEED"),
    reason="reads this process's mappings from /proc/self/smaps (Linux)",
)


def mapped_kib(path) -> int:
    """Resident KiB of this process's mappings of ``path``."""
    import re

    total, ours = 0, False
    with open(_SMAPS, encoding="utf-8", errors="replace") as smaps:
        for line in smaps:
            if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):
                ours = line.rstrip("\n").endswith(" " + str(path))
            elif ours and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


MIB = 1 << 20


@pytest.fixture
def four_mib(tmp_path):
    path = tmp_path / "rank.bin"
    path.write_bytes((np.arange(4 * MIB, dtype=np.uint32) % 251).astype(np.uint8).tobytes())
    return path


def touch_every_page(view: memoryview) -> int:
    return sum(view[::4096])


@needs_smaps
def test_release_pages_unmaps_the_range_rounded_out_to_pages(four_mib):
    # At least the range's pages leave (the kernel may drop a whole huge-page mapping that
    # the range cuts into, so more can go: the counts are bounds).
    expected = four_mib.read_bytes()
    with ByteSource(four_mib) as src:
        view = src.view(0, src.size)
        touch_every_page(view)
        assert mapped_kib(four_mib) == 4096
        src.release_pages(MIB + 5, 2 * MIB)  # [1 MiB, 3 MiB + 5): 512 pages and the one with 5
        assert mapped_kib(four_mib) <= 4096 - 2048 - 4
        assert bytes(view) == expected  # every page maps again on use
        assert mapped_kib(four_mib) == 4096
        src.release_pages(4 * MIB - 10, 100)  # runs past the end: only what is in the file
        assert mapped_kib(four_mib) <= 4096 - 4
        src.release_pages(0, src.size)
        assert mapped_kib(four_mib) == 0
        src.release_pages(0, 0)
        touch_every_page(view)
        src.release_pages(0, 0)  # nothing
        assert mapped_kib(four_mib) == 4096


@needs_smaps
def test_release_pages_of_one_byte_unmaps_its_page_and_nothing_far_past_it(four_mib):
    with ByteSource(four_mib) as src:
        touch_every_page(src.view(0, src.size))
        src.release_pages(MIB + 5, 1)
        assert mapped_pages(four_mib, MIB, MIB + 1) == [False]
        # the other huge page's worth stays whole (the range's own may be split, no more)
        assert all(mapped_pages(four_mib, 2 * MIB, 4 * MIB))


@needs_smaps
@pytest.mark.parametrize("length", [0, -3])
def test_release_pages_of_no_bytes_unmaps_nothing(four_mib, length):
    with ByteSource(four_mib) as src:
        touch_every_page(src.view(0, src.size))
        src.release_pages(2 * MIB + 4096 + 5, length)
        assert all(mapped_pages(four_mib, 0, 4 * MIB))


@needs_smaps
def test_release_pages_without_madv_dontneed_is_a_no_op(four_mib, monkeypatch):
    import mmap

    monkeypatch.delattr(mmap, "MADV_DONTNEED")
    with ByteSource(four_mib) as src:
        touch_every_page(src.view(0, src.size))
        src.release_pages(0, src.size)
        assert mapped_kib(four_mib) == 4096


def mapped_pages(path, start: int, end: int) -> list[bool]:
    """For each page of bytes ``[start, end)`` of ``path``: is it mapped in this process
    (/proc/self/pagemap's present bit of the one mapping of ``path``)?"""
    import re
    import struct

    with open(_SMAPS, encoding="utf-8", errors="replace") as smaps:
        heads = [line for line in smaps if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line)]
    (head,) = [h for h in heads if h.rstrip("\n").endswith(" " + str(path))]
    low, offset = int(head.split("-")[0], 16), int(head.split()[2], 16)
    first, last = (low + start - offset) // 4096, (low + end - offset - 1) // 4096
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(first * 8)
        raw = pagemap.read((last - first + 1) * 8)
    return [bool(word >> 63) for (word,) in struct.iter_unpack("<Q", raw)]


@needs_smaps
def test_a_slice_releases_its_own_range_of_the_parent(four_mib):
    with ByteSource(four_mib) as parent:
        touch_every_page(parent.view(0, parent.size))
        item = _src.SliceSource(parent, 3 * MIB, MIB, "rank.bin@3145728")
        item.release_pages(0, MIB)  # the parent's last MiB
        assert not any(mapped_pages(four_mib, 3 * MIB, 4 * MIB))
        # the first half stays (the kernel may drop the huge page the range is in, no more)
        assert all(mapped_pages(four_mib, 0, 2 * MIB))
        touch_every_page(parent.view(0, parent.size))
        item.release_pages(0, 0)
        assert mapped_kib(four_mib) == 4096


def test_release_pages_without_a_map_maps_nothing(four_mib):
    with ByteSource(four_mib) as src:
        src.release_pages(0, src.size)
        assert src._map is None
    memory = _src.MemorySource(b"abc", "m")
    memory.release_pages(0, 3)  # no map: nothing to do
    assert memory.read(0, 3) == b"abc"


def test_a_path_with_a_nul_byte_is_an_input_error() -> None:
    """No file can be named so (the OS refuses it): one clear refusal, not a ValueError."""
    from ckptctl import InputError, open_checkpoint
    from ckptctl.ops.verify import verify

    with pytest.raises(InputError, match="NUL"):
        open_checkpoint("bad\0.pt")
    (result,) = verify(["bad\0.pt"]).files
    assert [(f.check, f.status.value) for f in result.findings] == [("readable", "fail")]
    assert "NUL" in str(result.findings[0].message)

"""``FormatContract``: the tests every readable and writable format must pass.

Subclass it in ``tests/formats/test_<fmt>.py`` as ``TestXContract(FormatContract)`` and set
``fmt`` (registered name), ``ext`` (output extension), ``dtypes`` (what it round-trips) and
``keeps_metadata``; implement :meth:`make_unknown_dtype_file`.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import json
import mmap
import os
import signal
import traceback
import warnings
from pathlib import Path
from typing import IO, Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from ckptctl import (
    CkptError,
    CkptWarning,
    CorruptCheckpointError,
    DType,
    InputError,
    UnsupportedError,
    open_checkpoint,
    read_layout,
    save_checkpoint,
)
from ckptctl.formats import get_format
from ckptctl.formats._base import SNIFF_BYTES
from ckptctl.model import TensorEntry
from ckptctl.sources import ByteSource
from tests.strategies import array_entry, checkpoints, make_entry, metadata_maps


def sample_entries() -> list[TensorEntry]:
    """A small mixed checkpoint: two f32 tensors in non-sorted order, an int and a bool."""
    return [
        array_entry("fc.weight", np.arange(12, dtype="<f4").reshape(3, 4)),
        array_entry("fc.bias", np.array([0.5, -1.0, 2.0], dtype="<f4")),
        array_entry("step", np.array(7, dtype="<i8")),
        make_entry("mask", DType.BOOL, (4,), bytes([1, 0, 0, 1])),
    ]


def assert_same(written: list[TensorEntry], path: Path) -> None:
    """``path`` holds exactly ``written``: names, dtypes, shapes and bytes."""
    with open_checkpoint(path) as ckpt:
        assert sorted(ckpt) == sorted(e.name for e in written)
        for entry in written:
            got = ckpt[entry.name]
            assert got.dtype is entry.dtype, entry.name
            assert got.shape == entry.shape, entry.name
            assert got.nbytes == entry.nbytes, entry.name
            assert bytes(got.data.read()) == bytes(entry.data.read()), entry.name


def read_everything(path: Path) -> None:
    """Open ``path`` and load every tensor (raises what the reader raises)."""
    with open_checkpoint(path) as ckpt:
        for entry in ckpt.values():
            entry.load()


def exercise(path: Path) -> CkptError | None:
    """What ``ls``, ``convert`` and ``header`` do with an input; return the reader's CkptError.

    Any other exception escapes (a bug); warnings from odd but readable files are ignored.
    """
    error: CkptError | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CkptWarning)
        try:
            read_everything(path)
        except CkptError as exc:
            error = exc
        with contextlib.suppress(CkptError):
            read_layout(path)
    return error


class FormatContract:
    """Tests shared by every format. Subclasses set the class attributes below."""

    fmt: ClassVar[str]
    ext: ClassVar[str]
    dtypes: ClassVar[tuple[DType, ...]] = tuple(DType)
    keeps_metadata: ClassVar[bool] = True
    #: Tensor names the format cannot hold (its writer refuses them with UnsupportedError).
    reserved_names: ClassVar[frozenset[str]] = frozenset()

    def make_unknown_dtype_file(self, path: Path) -> None:
        """Write a file at ``path`` that is valid but for one tensor's unknown dtype."""
        raise NotImplementedError

    def holds(self, entry: TensorEntry) -> bool:
        """Whether the format can hold ``entry``: its dtype, and a name it allows."""
        return entry.dtype in self.dtypes and entry.name not in self.reserved_names

    def write(self, tmp_path: Path, entries: list[TensorEntry], **kw: object) -> Path:
        path = tmp_path / f"out{self.ext}"
        save_checkpoint(path, entries, force=True, **kw)  # type: ignore[arg-type]  # test helper
        return path

    def test_round_trip(self, tmp_path: Path) -> None:
        entries = [e for e in sample_entries() if e.dtype in self.dtypes]
        path = self.write(tmp_path, entries)
        assert_same(entries, path)
        with open_checkpoint(path) as ckpt:
            assert ckpt.format.startswith(self.fmt.split("-")[0])
            np.testing.assert_array_equal(
                ckpt["fc.weight"].load(), np.arange(12, dtype="<f4").reshape(3, 4)
            )

    def test_detected_by_content_not_extension(self, tmp_path: Path) -> None:
        path = self.write(tmp_path, sample_entries()[:2])
        renamed = tmp_path / "weights.data"
        os.rename(path, renamed)
        with open_checkpoint(renamed) as ckpt:
            assert sorted(ckpt) == ["fc.bias", "fc.weight"]

    def write_listing_file(self, tmp_path: Path) -> Path:
        """A file for the header-only test: every tensor's bytes lie past ``SNIFF_BYTES``.

        Format detection reads a fixed ``SNIFF_BYTES`` prefix, which in a tiny file would cover
        tensor bytes; a long metadata value pushes the data section past it. A format without
        metadata overrides this. ``big`` spans whole pages, so the memory-map guard covers it.
        """
        entries = [*sample_entries(), array_entry("big", np.arange(4096, dtype="<f4"))]
        metadata = {"padding": "x" * SNIFF_BYTES} if self.keeps_metadata else None
        return self.write(tmp_path, entries, metadata=metadata)

    def test_header_only_listing(self, tmp_path: Path) -> None:
        """Opening and listing never touches tensor bytes, by any path (see ``list_spied``)."""
        path = self.write_listing_file(tmp_path)
        listing = list_spied(path)
        assert sorted(name for name, _, _ in listing.entries) == sorted(
            [*(e.name for e in sample_entries()), "big"]
        )
        assert_past_sniff(listing)
        assert_header_only(listing)

    def test_metadata_kept(self, tmp_path: Path) -> None:
        if not self.keeps_metadata:
            pytest.skip(f"{self.fmt} has no metadata")
        meta = {"producer": "ckptctl-tests", "note": "ünïcode ✓"}
        path = self.write(tmp_path, sample_entries()[:1], metadata=meta)
        with open_checkpoint(path) as ckpt:
            assert {k: ckpt.metadata[k] for k in meta} == meta

    def test_unknown_dtype_is_unsupported(self, tmp_path: Path) -> None:
        path = tmp_path / f"unknown{self.ext}"
        self.make_unknown_dtype_file(path)
        with pytest.raises(UnsupportedError) as info:
            open_checkpoint(path)
        assert info.value.path == os.fspath(path)

    def test_truncated_is_corrupt(self, tmp_path: Path) -> None:
        path = self.write(tmp_path, sample_entries())
        full = path.read_bytes()
        cut = tmp_path / f"cut{self.ext}"
        for size in sorted({0, 1, 7, 8, 9, 16, len(full) // 2, len(full) - 1}):
            cut.write_bytes(full[:size])
            with pytest.raises(InputError) as info:
                read_everything(cut)
            assert str(cut) in str(info.value)
            if size > 16:
                assert isinstance(info.value, CorruptCheckpointError), (size, info.value)

    def test_writer_is_registered_for_extension(self) -> None:
        spec = get_format(self.fmt)
        assert self.ext in spec.extensions
        assert spec.write is not None

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    @given(data=checkpoints(), metadata=metadata_maps)
    def test_property_round_trip(
        self, tmp_path: Path, data: list[TensorEntry], metadata: dict[str, str]
    ) -> None:
        entries = [e for e in data if self.holds(e)]
        path = self.write(tmp_path, entries, metadata=metadata if self.keeps_metadata else None)
        assert_same(entries, path)
        if self.keeps_metadata:
            with open_checkpoint(path) as ckpt:
                for key, value in metadata.items():
                    assert ckpt.metadata[key] == value

    def test_random_bytes_raise_only_ckpt_errors(self, tmp_path: Path) -> None:
        rng = np.random.default_rng(0)
        good = self.write(tmp_path, sample_entries()).read_bytes()
        bad = tmp_path / f"mutant{self.ext}"
        for _ in range(200):
            blob = bytearray(good)
            for pos in rng.integers(0, len(blob), size=int(rng.integers(1, 8))):
                blob[pos] = int(rng.integers(0, 256))
            bad.write_bytes(bytes(blob))
            with contextlib.suppress(CkptError):
                read_everything(bad)


# --- header-only listing: a spy on every way to read bytes from a ByteSource -------------------

#: ByteSource's public members and how the spy covers each. A new member fails
#: ``test_spy_knows_every_byte_source_member`` until it is added here (and spied on if it reads).
BYTE_SOURCE_MEMBERS = {
    "read": "recorded: (offset, length)",
    "read_into": "recorded: (offset, length of the buffer)",
    "view": "recorded: (offset, length)",
    "buffer": "a memory map with tensor pages PROT_NONE: touching them kills the spied child",
    "fileno": "os.pread/os.preadv/os.read on any descriptor of the file are recorded; mmap.mmap "
    "is guarded",
    "check_range": "reads nothing",
    "check_still_holds": "reads nothing: one fstat of the file's size",
    "close": "reads nothing",
    "is_remote": "a class constant (False), reads nothing",
    "fetch_all": "reads nothing for a local file (a remote source downloads itself)",
    "release_pages": "reads nothing: unmaps pages of the memory map (madvise MADV_DONTNEED)",
}

_PROT_NONE = 0


class Listing:
    """What one spied listing saw: the entries and every byte range read outside the spy."""

    def __init__(self, path: Path, entries: list[list[Any]], accesses: list[list[Any]]) -> None:
        self.path = path
        #: (name, offset, nbytes); offset is None for entries not backed by a byte range.
        self.entries: list[tuple[str, int | None, int]] = [(n, o, b) for n, o, b in entries]
        #: (how, offset, length) of every read: ByteSource.read/view, os.pread/os.read, _file.
        self.accesses: list[tuple[str, int, int]] = [(h, o, n) for h, o, n in accesses]

    def tensor_ranges(self) -> dict[str, tuple[int, int]]:
        """name -> [start, end) of each entry's bytes in the file (empty tensors left out)."""
        return {n: (o, o + b) for n, o, b in self.entries if o is not None and b > 0}


def assert_header_only(listing: Listing) -> None:
    """No recorded access overlaps the bytes of any tensor."""
    ranges = listing.tensor_ranges()
    assert ranges, "the listing file has no tensor backed by a byte range: nothing to check"
    hits = [
        f"{how}({offset}, {length}) overlaps {name!r} [{start}, {end})"
        for how, offset, length in listing.accesses
        for name, (start, end) in ranges.items()
        if offset < end and start < offset + length
    ]
    assert not hits, f"listing {listing.path.name} read tensor bytes:\n" + "\n".join(hits)


def assert_past_sniff(listing: Listing) -> None:
    """Every tensor lies past the fixed ``SNIFF_BYTES`` prefix that format detection reads."""
    starts = {name: start for name, (start, _) in listing.tensor_ranges().items()}
    early = {name: start for name, start in starts.items() if start < SNIFF_BYTES}
    assert not early, f"make the header longer: these tensors start within SNIFF_BYTES: {early}"


def list_spied(path: Path, *, dump_traceback: bool = True) -> Listing:
    """Open and list ``path`` in a forked child with every byte-reading path spied on.

    ``ByteSource.read``/``view`` and ``os.pread``/``os.read`` on any descriptor of the file
    record ``(offset, length)``; the file object behind a ``ByteSource`` is wrapped to record its
    reads; ``ByteSource.buffer`` and ``mmap.mmap`` of the file return maps whose whole pages of
    tensor data are ``PROT_NONE``, so reading them through the map kills the child (SIGSEGV/
    SIGBUS), which fails the test. Only recording and guarding happen; nothing is banned.
    A first, unspied open gives the tensor ranges to guard. ``dump_traceback=False`` keeps the
    dying child from printing its traceback (for tests that expect it to die).
    """
    with open_checkpoint(path) as ckpt:
        guard = [(e.offset, e.offset + e.nbytes) for e in ckpt.values() if e.offset is not None]
    st = os.stat(path)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe and never returns
        status = 1
        try:
            os.close(read_fd)
            if not dump_traceback:
                faulthandler.disable()
            payload = json.dumps(_spied_listing(path, (st.st_dev, st.st_ino), guard))
            status = 0
        except BaseException:
            payload = json.dumps({"error": traceback.format_exc()})
        with os.fdopen(write_fd, "w") as out:
            out.write(payload)
        os._exit(status)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        pytest.fail(
            f"listing {path.name} touched tensor bytes through the memory map (the child died of "
            f"{sig} on a guarded page; faulthandler printed its traceback to stderr)"
        )
    result = json.loads(data)
    if "error" in result:
        pytest.fail(f"listing {path.name} failed in the spied child:\n{result['error']}")
    return Listing(path, result["entries"], result["accesses"])


def _spied_listing(
    path: Path, file_id: tuple[int, int], guard: list[tuple[int, int]]
) -> dict[str, list[list[Any]]]:
    """In the forked child: patch freely (the process is thrown away), list, return the log."""
    accesses: list[list[Any]] = []
    depth = [0]  # > 0 inside a spied ByteSource method: its own inner reads are not recorded again
    page = mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    real_mmap, real_pread, real_read = mmap.mmap, os.pread, os.read
    real_preadv = os.preadv

    def ours(fd: int) -> bool:
        with contextlib.suppress(OSError):
            st = os.fstat(fd)
            return (st.st_dev, st.st_ino) == file_id
        return False

    def record(how: str, offset: int, length: int) -> None:
        if depth[0] == 0:
            accesses.append([how, offset, length])

    def guarded_mmap(fd: int, length: int, *args: Any, **kwargs: Any) -> mmap.mmap:
        mapped = real_mmap(fd, length, *args, **kwargs)
        if ours(fd) and len(mapped):
            base = int(kwargs.get("offset", args[4] if len(args) > 4 else 0))
            address = np.frombuffer(mapped, dtype=np.uint8).ctypes.data
            for start, end in guard:
                lo = max(-(-(start - base) // page) * page, 0)
                hi = min((end - base) // page * page, len(mapped) // page * page)
                if hi > lo and libc.mprotect(address + lo, hi - lo, _PROT_NONE) != 0:
                    raise OSError(ctypes.get_errno(), "mprotect failed")
        return mapped

    def pread(fd: int, length: int, offset: int) -> bytes:
        if ours(fd):
            record("os.pread", offset, length)
        return real_pread(fd, length, offset)

    def preadv(fd: int, buffers: Any, offset: int, flags: int = 0) -> int:
        if ours(fd):
            record("os.preadv", offset, sum(len(b) for b in buffers))
        return real_preadv(fd, buffers, offset, flags)

    def read(fd: int, length: int) -> bytes:
        if ours(fd):
            record("os.read", os.lseek(fd, 0, os.SEEK_CUR), length)
        return real_read(fd, length)

    def method(how: str, real: Any) -> Any:
        def spy(self: ByteSource, offset: int, length: int) -> Any:
            record(f"ByteSource.{how}", offset, length)
            depth[0] += 1
            try:
                return real(self, offset, length)
            finally:
                depth[0] -= 1

        return spy

    def read_into(self: ByteSource, offset: int, out: memoryview) -> None:
        record("ByteSource.read_into", offset, len(out))
        depth[0] += 1
        try:
            real_read_into(self, offset, out)
        finally:
            depth[0] -= 1

    real_read_into = ByteSource.read_into
    maps: dict[int, mmap.mmap] = {}

    def buffer(self: ByteSource) -> memoryview:
        if self.size == 0:
            return memoryview(b"")
        if id(self) not in maps:
            maps[id(self)] = guarded_mmap(self.fileno(), 0, access=mmap.ACCESS_READ)
        return memoryview(maps[id(self)])

    real_init = ByteSource.__init__

    def init(self: ByteSource, source_path: str | os.PathLike[str]) -> None:
        real_init(self, source_path)
        self._file = _RecordingFile(self._file, record)  # type: ignore[assignment]  # a proxy

    mmap.mmap = guarded_mmap  # type: ignore[misc,assignment]  # the child is thrown away
    os.pread, os.read, os.preadv = pread, read, preadv
    ByteSource.read_into = read_into  # type: ignore[method-assign]
    ByteSource.read = method("read", ByteSource.read)  # type: ignore[method-assign]
    ByteSource.view = method("view", ByteSource.view)  # type: ignore[method-assign]
    ByteSource.buffer = property(buffer)  # type: ignore[method-assign,assignment]
    ByteSource.__init__ = init  # type: ignore[method-assign,assignment]  # the child is thrown away
    with open_checkpoint(path) as ckpt:
        entries = [[e.name, e.offset, e.nbytes] for e in ckpt.values()]
    return {"entries": entries, "accesses": accesses}


class _RecordingFile:
    """The file object of a ByteSource, recording reads made through it directly."""

    def __init__(self, inner: IO[bytes], record: Any) -> None:
        self._inner = inner
        self._record = record

    def _log(self, length: int) -> None:
        self._record("file.read", self._inner.tell(), length)

    def read(self, size: int = -1) -> bytes:
        self._log(size if size >= 0 else os.fstat(self._inner.fileno()).st_size)
        return self._inner.read(size)

    def readinto(self, buffer: Any) -> int | None:
        self._log(len(memoryview(buffer)))
        return self._inner.readinto(buffer)  # type: ignore[attr-defined,no-any-return]  # BufferedReader

    def __getattr__(self, name: str) -> Any:
        if name.startswith("read") or name == "peek":
            self._log(os.fstat(self._inner.fileno()).st_size)  # readline & co.: assume the rest
        return getattr(self._inner, name)

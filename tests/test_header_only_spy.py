"""The header-only spy of ``tests/contract.py`` catches tensor reads through every path.

Each case opens a file whose ``ByteSource.close`` (not spied) first reads tensor bytes one way;
the spy must report it. If one of these passes, the contract's header-only test has a blind spot.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ckptctl import save_checkpoint
from ckptctl.sources import ByteSource, open_source
from tests.contract import (
    BYTE_SOURCE_MEMBERS,
    assert_header_only,
    list_spied,
    sample_entries,
)
from tests.strategies import array_entry

#: ``big`` is the f32 tensor of 4096 elements; its bytes are at [offset, offset + 16384).
Naughty = Callable[[ByteSource, int], object]

NAUGHTY: dict[str, Naughty] = {
    "read": lambda src, at: src.read(at, 4),
    "view": lambda src, at: src.view(at, 4),
    "os.pread": lambda src, at: os.pread(src.fileno(), 4, at),
    "file.read": lambda src, at: (src._file.seek(at), src._file.read(4)),
    "file.readinto": lambda src, at: (
        src._file.seek(at),
        src._file.readinto(bytearray(4)),  # type: ignore[attr-defined]  # a BufferedReader
    ),
}

#: Reads through the memory map: the guarded page kills the spied child.
MAPPED: dict[str, Naughty] = {
    "buffer": lambda src, at: bytes(src.buffer[at + 8192 : at + 8196]),
    "numpy": lambda src, at: np.frombuffer(src.buffer, np.uint8, 4, at + 8192).sum(),
}


@pytest.fixture
def listing_file(tmp_path: Path) -> tuple[Path, int]:
    path = tmp_path / "x.safetensors"
    entries = [*sample_entries(), array_entry("big", np.arange(4096, dtype="<f4"))]
    save_checkpoint(path, entries, metadata={"padding": "x" * 4096})
    (offset,) = [o for n, o, _ in list_spied(path).entries if n == "big"]
    assert offset is not None
    return path, offset


def naughty_close(monkeypatch: pytest.MonkeyPatch, at: int, how: Naughty) -> None:
    real_close = ByteSource.close

    def close(self: ByteSource) -> None:
        how(self, at)
        real_close(self)

    monkeypatch.setattr(ByteSource, "close", close)


@pytest.mark.parametrize("how", sorted(NAUGHTY))
def test_recorded_reads_of_tensor_bytes_fail(listing_file, monkeypatch, how):
    path, offset = listing_file
    naughty_close(monkeypatch, offset, NAUGHTY[how])
    listing = list_spied(path)
    with pytest.raises(AssertionError, match="read tensor bytes"):
        assert_header_only(listing)


@pytest.mark.parametrize("how", sorted(MAPPED))
def test_reads_through_the_memory_map_fail(listing_file, monkeypatch, how):
    path, offset = listing_file
    naughty_close(monkeypatch, offset, MAPPED[how])
    with pytest.raises(pytest.fail.Exception, match="through the memory map"):
        list_spied(path, dump_traceback=False)


def test_a_clean_listing_passes(listing_file):
    path, _ = listing_file
    assert_header_only(list_spied(path))


def test_spy_knows_every_byte_source_member():
    """A new way to get at bytes must be taught to the spy before the contract can trust it."""
    # "xǁByteSourceǁ..." are mutmut's copies of the methods
    public = {name for name in vars(ByteSource) if not name.startswith(("_", "xǁ"))}
    assert public == set(BYTE_SOURCE_MEMBERS), (
        "ByteSource changed: describe (and spy on) its members in tests/contract.py "
        "BYTE_SOURCE_MEMBERS"
    )


@pytest.mark.parametrize("registration", ["as loaded", "reversed"])
def test_detection_reads_only_the_head_whatever_the_import_order(
    registration: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyTorch's text-pickle sniffer reads up to 64 KiB, and a burnpack starts with ``N`` (a
    pickle opcode); detection must try it last even when ``formats.pytorch`` registered first."""
    from ckptctl import formats
    from ckptctl.formats._base import SNIFF_BYTES

    formats._ensure_loaded()
    specs = list(formats._REGISTRY.items())
    if registration == "reversed":
        monkeypatch.setattr(formats, "_REGISTRY", dict(reversed(specs)))
    entries = [*sample_entries(), array_entry("big", np.zeros(8192, dtype="<f4"))]
    for suffix in (".bpk", ".safetensors"):
        save_checkpoint(tmp_path / f"m{suffix}", entries)
    reads: list[tuple[int, int]] = []
    real = ByteSource.read

    def spy(self: ByteSource, offset: int, length: int) -> bytes:
        reads.append((offset, length))
        return real(self, offset, length)

    monkeypatch.setattr(ByteSource, "read", spy)
    for name, expected in (("m.bpk", "burnpack"), ("m.safetensors", "safetensors")):
        reads.clear()
        with open_source(tmp_path / name) as source:
            assert formats._sniff(source).name == expected
        assert all(offset + length <= SNIFF_BYTES for offset, length in reads), reads

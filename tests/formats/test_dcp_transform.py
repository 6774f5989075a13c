"""The zstd stream transform of DCP items, decoded in bounded steps, against frames made by the
zstd library itself (``backports.zstd`` / ``compression.zstd``)."""

from __future__ import annotations

import pytest

from ckptctl import CorruptCheckpointError
from ckptctl.formats.dcp import _transform

zstd = _transform.zstd_module()
pytestmark = pytest.mark.skipif(zstd is None, reason="needs the zstd extra")

DESCRIPTORS = ("stream.zstd/1",)


def _frame(data: bytes) -> bytes:
    """A frame as torch's writer makes it: streamed, so without a content size."""
    assert zstd is not None
    compressor = zstd.ZstdCompressor()
    return bytes(compressor.compress(data) + compressor.flush())


def _decode(raw: bytes, limit: int = 1 << 20) -> bytes:
    return _transform.decode(raw, DESCRIPTORS, limit, "tensor 'w' chunk [0]", "__0_0.distcp")


def test_a_frame_decodes_to_its_bytes() -> None:
    data = bytes(range(256)) * 1000
    assert _decode(_frame(data)) == data
    assert _decode(_frame(b"")) == b""


def test_decoding_steps_past_the_step_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_transform, "STEP_BYTES", 1000)
    data = bytes(range(256)) * 40
    assert _decode(_frame(data), limit=len(data)) == data


def test_a_frame_that_decodes_past_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_transform, "STEP_BYTES", 4096)
    bomb = _frame(bytes(64 << 20))  # 64 MiB of zeros in a few KiB
    assert len(bomb) < 1 << 16
    with pytest.raises(CorruptCheckpointError, match=r"decodes to more than 10,000 bytes"):
        _decode(bomb, limit=10_000)
    assert _decode(_frame(bytes(10_000)), limit=10_000) == bytes(10_000)  # exactly the limit


def test_a_frame_cut_short_is_refused() -> None:
    raw = _frame(bytes(range(256)) * 100)
    with pytest.raises(CorruptCheckpointError, match="cut short") as caught:
        _decode(raw[:-5])
    assert caught.value.path == "__0_0.distcp"
    assert "tensor 'w' chunk [0]" in caught.value.message
    with pytest.raises(CorruptCheckpointError, match="cut short"):
        _decode(b"")


def test_bytes_after_the_frame_are_refused() -> None:
    """zstandard (torch's first choice) stops after one frame, pyzstd reads on: refuse both."""
    raw = _frame(b"first") + _frame(b"second")
    with pytest.raises(CorruptCheckpointError, match=r"bytes follow its zstd frame"):
        _decode(raw)


def test_damaged_data_is_refused() -> None:
    with pytest.raises(CorruptCheckpointError, match="damaged zstd data"):
        _decode(b"not a zstd frame at all")


def test_repeated_transforms_decode_in_turn() -> None:
    data = b"twice" * 100
    twice = _transform.decode(_frame(_frame(data)), DESCRIPTORS * 2, 1 << 20, "value", "f")
    assert twice == data

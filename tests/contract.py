"""``FormatContract``: the tests every readable and writable format must pass.

Subclass it in ``tests/formats/test_<fmt>.py`` as ``TestXContract(FormatContract)`` and set
``fmt`` (registered name), ``ext`` (output extension), ``dtypes`` (what it round-trips) and
``keeps_metadata``; implement :meth:`make_unknown_dtype_file`.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path
from typing import ClassVar

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
from ckptctl._io import ByteSource
from ckptctl.formats import get_format
from ckptctl.model import TensorEntry
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

    def make_unknown_dtype_file(self, path: Path) -> None:
        """Write a file at ``path`` that is valid but for one tensor's unknown dtype."""
        raise NotImplementedError

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

    def test_header_only_listing(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Opening and listing never touches tensor bytes."""
        path = self.write(tmp_path, sample_entries())
        touched: list[tuple[int, int]] = []
        original = ByteSource.view

        def spy(self: ByteSource, offset: int, length: int) -> memoryview:
            touched.append((offset, length))
            return original(self, offset, length)

        monkeypatch.setattr(ByteSource, "view", spy)
        with open_checkpoint(path) as ckpt:
            listed = [(e.name, e.dtype, e.shape, e.nbytes) for e in ckpt.values()]
            data_ranges = {(e.offset, e.nbytes) for e in ckpt.values() if e.offset is not None}
        assert len(listed) == 4
        assert not data_ranges & set(touched), "listing read tensor bytes"

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
        entries = [e for e in data if e.dtype in self.dtypes]
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

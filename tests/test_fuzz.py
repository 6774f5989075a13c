"""Fuzzing with hypothesis: every reader, fed mutated valid files and random bytes, raises only
``CkptError`` subclasses.

Each example runs what a command does: ``open_checkpoint`` + ``load()`` of every tensor +
``read_layout``. Readers are also driven directly (``spec.open`` / ``spec.layout`` on a
``ByteSource``), bypassing detection, so random bytes reach every parser and not just the
detector. The long coverage-guided campaign is ``fuzz/fuzz_readers.py`` (see fuzz/README.md);
this file is its bounded version and stays well under 60 s. Findings of those campaigns are
pinned as regression cases at the bottom.
"""

from __future__ import annotations

import contextlib
import pickle
import shutil
import struct
import time
import warnings
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptctl.errors import CkptError, CkptWarning, CorruptCheckpointError, UnsupportedError
from ckptctl.formats import get_format, open_checkpoint
from ckptctl.sources import ByteSource
from tests.conftest import time_bound
from tests.contract import exercise

VALID = Path(__file__).resolve().parents[1] / "fixtures" / "valid"
#: Slowest single example allowed (the issue's bound is 5 s; ours is far below it).
MAX_SECONDS = time_bound(5.0)

SEEDS: dict[str, list[bytes]] = {
    "safetensors": [p.read_bytes() for p in sorted((VALID / "safetensors").glob("*.safetensors"))],
    "burnpack": [p.read_bytes() for p in sorted((VALID / "burnpack").glob("*.bpk"))],
    "pytorch": [
        p.read_bytes()
        for p in sorted((VALID / "pytorch").glob("*.pt"))
        if p.stat().st_size < 8192  # small seeds keep each example fast
    ]
    + [pickle.dumps({"a": [1, 2.5, "x"], "b": {"c": None}}, protocol=p) for p in range(6)],
}
FUZZ_SETTINGS = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI failures reproduce
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _run_everything(path: Path) -> None:
    """What ``ls`` + ``convert`` + ``header`` do with an input; only CkptError may escape."""
    start = time.monotonic()
    exercise(path)
    assert time.monotonic() - start < MAX_SECONDS


def _run_reader(fmt: str, path: Path) -> None:
    """Drive one reader directly, skipping content detection."""
    spec = get_format(fmt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CkptWarning)
        with ByteSource(path) as source:
            try:
                ckpt = spec.open(source)
                for entry in ckpt.values():
                    entry.load()
            except CkptError:
                pass
            if spec.layout is not None:
                with contextlib.suppress(CkptError):
                    spec.layout(source)


@st.composite
def mutants(draw: st.DrawFn, fmt: str) -> bytes:
    """A valid file of ``fmt`` with a few bytes flipped, overwritten, inserted or cut."""
    buf = bytearray(draw(st.sampled_from(SEEDS[fmt])))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "int"]))
        pos = draw(st.integers(0, len(buf)))
        if op == "flip" and buf:
            i = min(pos, len(buf) - 1)
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and buf:
            buf[min(pos, len(buf) - 1)] = draw(st.integers(0, 255))
        elif op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del buf[pos : pos + draw(st.integers(1, 16))]
        elif op == "truncate":
            del buf[pos:]
        else:
            value = draw(st.sampled_from([0, 2**31, 2**32 - 1, 2**63 - 1, 2**64 - 1]))
            buf[pos : pos + 8] = struct.pack("<Q", value)
    return bytes(buf)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.parametrize("fmt", sorted(SEEDS))
def test_mutated_valid_files_raise_only_ckpt_errors(scratch: Path, fmt: str) -> None:
    path = scratch / f"mutant-{fmt}"

    @FUZZ_SETTINGS
    @given(data=mutants(fmt))
    def check(data: bytes) -> None:
        path.write_bytes(data)
        _run_everything(path)
        _run_reader(fmt, path)

    check()


@pytest.mark.parametrize("fmt", ["safetensors", "burnpack", "pytorch", "safetensors-index"])
def test_random_bytes_raise_only_ckpt_errors(scratch: Path, fmt: str) -> None:
    path = scratch / f"random-{fmt}"
    prefix = {
        "safetensors": st.just(b""),
        "burnpack": st.sampled_from([b"", b"BURN\x01\x00"]),  # magic, then random
        "pytorch": st.sampled_from([b"", b"\x80\x02", b"PK\x03\x04", b"c", b"("]),
        "safetensors-index": st.just(b'{"weight_map": '),
    }[fmt]

    @FUZZ_SETTINGS
    @given(head=prefix, body=st.binary(max_size=512))
    def check(head: bytes, body: bytes) -> None:
        path.write_bytes(head + body)
        _run_everything(path)
        if fmt != "safetensors-index":
            _run_reader(fmt, path)

    check()


def test_sharded_index_mutants_raise_only_ckpt_errors(tmp_path: Path) -> None:
    for shard in (VALID / "safetensors" / "sharded").glob("*.safetensors"):
        shutil.copy(shard, tmp_path)
    index = (VALID / "safetensors" / "sharded" / "model.safetensors.index.json").read_bytes()
    path = tmp_path / "model.safetensors.index.json"

    @FUZZ_SETTINGS
    @given(pos=st.integers(0, len(index)), junk=st.binary(min_size=1, max_size=8))
    def check(pos: int, junk: bytes) -> None:
        path.write_bytes(index[:pos] + junk + index[pos + len(junk) :])
        _run_everything(path)

    check()


# --- regression cases found by fuzz/fuzz_readers.py ----------------------------------------------


def _min_zip(tmp_path: Path) -> bytes:
    return (VALID / "pytorch" / "min_zip.pt").read_bytes()


def test_zip_with_damaged_version_field_is_corrupt(tmp_path: Path) -> None:
    # Found by the plain loop: zipfile raised NotImplementedError("zip file version 25.5")
    # from a central-directory entry whose "version needed to extract" byte was mutated.
    data = bytearray(_min_zip(tmp_path))
    cd = data.rfind(b"PK\x01\x02")
    while cd != -1:
        data[cd + 6] = 255  # "version needed" low byte: 25.5
        cd = data.rfind(b"PK\x01\x02", 0, cd)
    path = tmp_path / "version.pt"
    path.write_bytes(bytes(data))
    # The zip reader may ignore the field or refuse the archive; nothing else may escape.
    try:
        with open_checkpoint(path) as ckpt:
            assert len(ckpt) >= 0
    except CkptError as exc:
        assert isinstance(exc, CorruptCheckpointError | UnsupportedError), exc  # noqa: PT017


def test_zip_with_broken_deflate_stream_is_corrupt(tmp_path: Path) -> None:
    # Found by the plain loop: a damaged deflate stream raised zlib.error from decompress().
    src = tmp_path / "deflated.pt"
    with (
        zipfile.ZipFile(VALID / "pytorch" / "min_zip.pt") as zin,
        zipfile.ZipFile(src, "w", zipfile.ZIP_DEFLATED) as zout,
    ):
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))
    data = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("data.pkl"))
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
        # Every stored byte of the stream set to 0xff: an invalid block type at once.
        data[start : start + info.compress_size] = b"\xff" * info.compress_size
    src.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="cannot decompress"):
        open_checkpoint(src)

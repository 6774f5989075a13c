"""The core: dtypes, errors, byte sources, atomic writes, sanitising."""

from __future__ import annotations

import os
import stat
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptctl import (
    CkptError,
    CorruptCheckpointError,
    DType,
    ExitCode,
    InputError,
    OutputError,
    SelectionError,
    UnsupportedError,
)
from ckptctl._io import atomic_write
from ckptctl.dtypes import from_float, to_float
from ckptctl.report.sanitize import sanitize
from ckptctl.sources import ByteSource, copy_range


def test_exit_codes_follow_the_contract():
    assert InputError("x").exit_code == 3
    assert CorruptCheckpointError("x").exit_code == 3
    assert UnsupportedError("x").exit_code == 4
    assert SelectionError("x").exit_code == 2
    assert OutputError("x").exit_code == 5
    assert int(ExitCode.INTERRUPTED) == 130


def test_error_message_names_the_file_and_selection_error_is_unquoted():
    err = SelectionError("unknown tensor 'a'", path="m.safetensors")
    assert str(err) == "m.safetensors: unknown tensor 'a'"
    assert isinstance(err, KeyError)
    assert str(CkptError("plain")) == "plain"


@pytest.mark.parametrize(
    ("dtype", "size"),
    [(DType.F64, 8), (DType.BF16, 2), (DType.F8_E4M3, 1), (DType.C128, 16), (DType.BOOL, 1)],
)
def test_itemsize(dtype, size):
    assert dtype.itemsize == size
    assert dtype.numpy.itemsize == size


def test_parse_aliases():
    assert DType.parse("f32") is DType.F32
    assert DType.parse("bfloat16") is DType.BF16
    assert DType.parse("half") is DType.F16
    with pytest.raises(ValueError, match="unknown dtype"):
        DType.parse("f33")


def test_bf16_widening_is_exact():
    bits = np.array([0x3F80, 0xC000, 0x7F80, 0x0001], dtype="<u2")
    out = to_float(bits, DType.BF16)
    assert out.dtype == np.float32
    assert out[0] == 1.0
    assert out[1] == -2.0
    assert np.isinf(out[2])
    assert out[3] == np.float32(9.183549615799121e-41)


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, allow_nan=False))
def test_bf16_rounding_matches_reference(value):
    """Round to nearest even, checked against exact rational rounding."""
    f32 = np.array([value], dtype=np.float32)
    got = from_float(f32, DType.BF16)[0]
    bits = int(f32.view(np.uint32)[0])
    lower, rest = bits >> 16, bits & 0xFFFF
    expected = lower + (1 if rest > 0x8000 or (rest == 0x8000 and lower & 1) else 0)
    assert int(got) == expected & 0xFFFF


def test_bf16_nan_stays_nan():
    out = from_float(np.array([np.nan], dtype=np.float32), DType.BF16)
    assert np.isnan(to_float(out, DType.BF16))[0]


def test_fp8_tables_against_known_values():
    e4m3 = to_float(np.array([0x38, 0x7E, 0x7F, 0x01, 0xB8], dtype=np.uint8), DType.F8_E4M3)
    assert e4m3[0] == 1.0
    assert e4m3[1] == 448.0  # largest finite E4M3FN
    assert np.isnan(e4m3[2])
    assert e4m3[3] == 2.0**-9  # smallest subnormal
    assert e4m3[4] == -1.0
    e5m2 = to_float(np.array([0x3C, 0x7B, 0x7C, 0x7D], dtype=np.uint8), DType.F8_E5M2)
    assert e5m2[0] == 1.0
    assert e5m2[1] == 57344.0
    assert np.isinf(e5m2[2])
    assert np.isnan(e5m2[3])
    e8m0 = to_float(np.array([127, 130, 255], dtype=np.uint8), DType.F8_E8M0)
    assert list(e8m0[:2]) == [1.0, 8.0]
    assert np.isnan(e8m0[2])


def test_byte_source_views_and_bounds(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(100)))
    with ByteSource(path) as src:
        assert src.size == 100
        assert bytes(src.view(10, 5)) == bytes(range(10, 15))
        assert src.read(95, 5) == bytes(range(95, 100))
        with pytest.raises(CorruptCheckpointError, match="past the end"):
            src.view(96, 5)
        with pytest.raises(CorruptCheckpointError):
            src.read(-1, 2)


def test_byte_source_missing_and_directory(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        ByteSource(tmp_path / "missing")
    with pytest.raises(InputError, match="directory"):
        ByteSource(tmp_path)


def test_copy_range_copies_exact_bytes(tmp_path):
    data = os.urandom(3 * 1024 * 1024 + 17)
    (tmp_path / "src").write_bytes(data)
    with ByteSource(tmp_path / "src") as src, open(tmp_path / "dst", "wb") as out:
        out.write(b"head")
        copy_range(src, 5, len(data) - 10, out)
        out.write(b"tail")
    assert (tmp_path / "dst").read_bytes() == b"head" + data[5:-5] + b"tail"


def test_atomic_write_keeps_destination_on_failure(tmp_path):
    dest = tmp_path / "out.bin"
    dest.write_bytes(b"original")
    with pytest.raises(RuntimeError), atomic_write(dest, force=True) as out:
        out.write(b"partial")
        raise RuntimeError("boom")
    assert dest.read_bytes() == b"original"
    assert os.listdir(tmp_path) == ["out.bin"]


def test_atomic_write_keeps_destination_on_interrupt(tmp_path):
    dest = tmp_path / "out.bin"
    with pytest.raises(KeyboardInterrupt), atomic_write(dest) as out:
        out.write(b"partial")
        raise KeyboardInterrupt
    assert not dest.exists()
    assert os.listdir(tmp_path) == []


def test_atomic_write_never_replaces_a_fifo_or_device(tmp_path):
    # as root, --force onto /dev/null used to swap the device for a regular file (issue 27)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="not a regular file"), atomic_write(fifo, force=True):
        pass
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert os.listdir(tmp_path) == ["pipe"]


def test_atomic_write_disk_full_is_output_error(tmp_path):
    dest = tmp_path / "out.bin"
    with pytest.raises(OutputError, match="No space left"), atomic_write(dest):
        raise OSError(28, "No space left on device")
    assert os.listdir(tmp_path) == []


def test_atomic_write_refuses_existing_without_force(tmp_path):
    dest = tmp_path / "out.bin"
    dest.write_bytes(b"x")
    with pytest.raises(OutputError, match="already exists") as info, atomic_write(dest):
        pass
    assert str(info.value.hint) == "pass force=True to overwrite it"  # the CLI spells --force


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("fc.weight", "fc.weight"),
        ("a\x1b[31mred", "a\\x1b[31mred"),
        ("evil\u202etxt.exe", "evil\\u202etxt.exe"),
        ("line\nbreak\r", "line\\x0abreak\\x0d"),
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("ünïcode ✓", "ünïcode ✓"),
    ],
)
def test_sanitize(raw, shown):
    assert sanitize(raw) == shown


def test_struct_sanity_for_fixture_builders():
    # the hostile-file builders rely on little-endian packing
    assert struct.pack("<Q", 1) == b"\x01" + b"\x00" * 7


def test_public_api_names_resolve():
    import ckptctl

    for name in ckptctl.__all__:
        assert getattr(ckptctl, name) is not None, name
    with pytest.raises(AttributeError):
        _ = ckptctl.no_such_name


def test_cli_import_does_not_load_numpy():
    import subprocess
    import sys

    code = "import sys, ckptctl.cli; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_listing_and_raw_copies_do_not_load_numpy(tmp_path):
    """Header-only work and raw byte copies never decode a tensor, so numpy stays unloaded."""
    import subprocess
    import sys

    from tests.conftest import VALID

    code = (
        "import sys\n"
        "from ckptctl.ops.inspect import list_tensors\n"
        "from ckptctl.ops.convert import convert\n"
        f"list_tensors({str(VALID / 'safetensors' / 'tiny.safetensors')!r})\n"
        f"convert({str(VALID / 'burnpack' / 'net.bpk')!r}, {str(tmp_path / 'o.safetensors')!r})\n"
        "print('numpy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_byte_source_refuses_special_files_without_blocking(tmp_path):
    """A named pipe would block open() until a writer appears: refuse it after a stat."""
    fifo = tmp_path / "weights.pt"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"not a regular file \(a named pipe\)"):
        ByteSource(fifo)
    with pytest.raises(InputError, match=r"a character device"):
        ByteSource("/dev/null")


def test_option_spelling_in_python_distinguishes_flags_from_value_options():
    from ckptctl.fix import Command, Note, Option

    note = Note(
        "pass {fix0}, {fix1} or {fix2}",
        (Option("force"), Option("state_key", takes_value=True), Option("to", "burnpack")),
    )
    assert str(note) == "pass force=True, state_key=... or to='burnpack'"
    assert str(
        Note("{fix0}", (Command("convert", ("a.pt",), (Option("remap", takes_value=True),)),))
    ) == ("convert('a.pt', remap=...)")

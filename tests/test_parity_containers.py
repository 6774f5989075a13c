"""Reader parity with torch (issue 25): ckptctl reads what torch 2.13's own reader reads.

fixtures/hostile/parity/ holds files on which torch's zip reader (miniz under
``PyTorchStreamReader``) or its legacy loader order sees something else than a
``zipfile``-style reader, and files torch refuses that other readers accept. Its manifest says
what torch does with each (proven against real torch by
tests/torch_tier/test_parity_containers_torch.py) and the verdict ckptctl must give:

* a file whose payload runs under ``torch.load`` is ``unsafe`` (or refused), never ``safe``
  or ``needs-trust``;
* a file torch refuses is never ``safe``, and the verdict says torch refuses it and why;
* where two readers would see different pickles or bytes, the file is ``unsafe`` and the
  verdict says so;
* where torch loads the file, ckptctl lists torch's tensors with torch's values.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ckptctl import open_checkpoint
from ckptctl.formats.pytorch import _torchzip
from tests.conftest import HOSTILE, load_module

PARITY = HOSTILE / "parity"
MANIFEST: dict[str, dict[str, Any]] = json.loads((PARITY / "manifest.json").read_text())
FILES = sorted(MANIFEST)


def verdict_of(run_cli: Any, path: Path) -> tuple[str, dict[str, Any] | None, int]:
    result = run_cli("verify", path, "--json")
    assert "Traceback" not in result.stderr, result
    (report,) = json.loads(result.stdout)["files"]
    found = [f for f in report["findings"] if f["check"] == "safe-pickle"]
    if not found:
        return "refused", None, result.code
    return found[0]["details"]["verdict"], found[0], result.code


def expected_values(values: list[str]) -> list[float]:
    return [float(v) for v in values]  # the manifest keeps floats as repr() text: nan, inf


@pytest.mark.parametrize("name", FILES)
def test_verdict_is_the_manifests(name: str, run_cli: Any) -> None:
    record = MANIFEST[name]
    verdict, finding, code = verdict_of(run_cli, PARITY / name)
    assert verdict == record["expect"], finding
    if record["runs_payload"]:
        assert verdict in ("unsafe", "refused")
    if not record["weights_only_loads"]:
        assert verdict != "safe"
        assert "loads it" not in (finding or {}).get("message", "")
    if verdict != "safe":
        assert code == 1


@pytest.mark.parametrize(
    "name", [n for n in FILES if MANIFEST[n]["expect"] == "needs-trust"], ids=str
)
def test_torch_refusal_is_named(name: str, run_cli: Any) -> None:
    _, finding, _ = verdict_of(run_cli, PARITY / name)
    assert finding is not None
    if "TAR format" in finding["message"]:  # torch refuses TAR files under weights_only=True
        return
    assert finding["message"].startswith("torch.load refuses this file: ")
    assert finding["message"].startswith(
        "torch.load refuses this file: " + finding["details"]["torch_refuses"]
    )
    assert "weights_only=False would run" not in finding["message"]


@pytest.mark.parametrize(
    "name",
    [n for n in FILES if MANIFEST[n]["expect"] == "unsafe" and MANIFEST[n]["weights_only_loads"]],
)
def test_ambiguous_files_say_two_readers_differ(name: str, run_cli: Any) -> None:
    _, finding, _ = verdict_of(run_cli, PARITY / name)
    assert finding is not None
    assert "two readers see different" in finding["message"]


@pytest.mark.parametrize("name", [n for n in FILES if "tensors" in MANIFEST[n]])
def test_listing_holds_torchs_tensors(name: str) -> None:
    want = MANIFEST[name]["tensors"]
    with open_checkpoint(PARITY / name) as ckpt:
        assert sorted(ckpt.keys()) == sorted(want)
        for tensor, values in want.items():
            np.testing.assert_array_equal(ckpt[tensor].load(), expected_values(values))


def test_nan_values_torch_reads_fail_no_nan(run_cli: Any) -> None:
    # the bug of family 5: verify --no-nan passed a file whose torch-loaded values are NaN/Inf
    result = run_cli("verify", PARITY / "key_slash.pt", "--no-nan")
    assert result.code == 1
    assert "no-nan" in result.stdout


def test_fixtures_are_what_the_generator_writes(tmp_path: Path) -> None:
    module = load_module(PARITY / "make_parity.py")
    for build in (module._family1, module._family2, module._family3, module._family4,
                  module._family5, module._family7):  # fmt: skip
        build()
    cases = module.CASES
    assert sorted(cases) == FILES
    readme = (PARITY / "README.md").read_text(encoding="utf-8")
    for name, case in cases.items():
        assert (PARITY / name).read_bytes() == case.data, f"{name} is stale: regenerate"
        assert f"`{name}`" in readme
        assert MANIFEST[name]["family"] == case.family


# --- the emulation's own rules, each against a hand-built case ---------------------------------


def test_stoull_reads_like_cpp() -> None:
    assert _torchzip._stoull(b"3\n") == 3
    assert _torchzip._stoull(b" \t3abc") == 3
    assert _torchzip._stoull(b"+7") == 7
    assert _torchzip._stoull(b"-1") == (1 << 64) - 1
    assert _torchzip._stoull(b"3\x005") == 3
    assert _torchzip._stoull(b"abc") is None
    assert _torchzip._stoull(b"") is None
    assert _torchzip._stoull(b"-") is None
    assert _torchzip._stoull(b"99999999999999999999999") is None


def test_heap_sort_is_minizs() -> None:
    # sorted by folded name; ties are left where miniz's heap sort leaves them
    keys = [b"a/data.pkl", b"a/data.pkl", b"a/version"]
    order = _torchzip._heap_sort(keys)
    assert sorted(order) == [0, 1, 2]
    assert [keys[i] for i in order] == sorted(keys)
    assert _torchzip._heap_sort([]) == []
    assert _torchzip._heap_sort([b"x"]) == [0]
    # traced by hand through mz_zip_reader_sort_central_dir_offsets_by_filename: heapify gives
    # [2, 1, 0, 3]; the sort steps give [0, 1, 3, 2], [3, 1, 0, 2], then [1, 3, 0, 2]
    assert _torchzip._heap_sort([b"b", b"a", b"c", b"a"]) == [1, 3, 0, 2]


def _eocd_only(size: int, at: int) -> bytes:
    data = bytearray(size)
    data[at : at + 4] = b"PK\x05\x06"
    return bytes(data)


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)
        self.reads: list[tuple[int, int]] = []

    def read(self, offset: int, length: int) -> bytes:
        self.reads.append((offset, length))
        return self.data[offset : offset + length]


@pytest.mark.parametrize(
    ("size", "at", "found"),
    [
        (100, 78, 78),  # exactly 22 bytes after it
        (100, 79, None),  # 21 bytes: no room
        (100, 0, 0),
        (70_000, 70_000 - 22, 70_000 - 22),
        (70_000, 4000, 4000),  # far back, still inside the windows miniz reads
        (200_000, 100_000, None),  # past 65,557 bytes from the end: not searched
    ],
)
def test_end_record_search_is_minizs(size: int, at: int, found: int | None) -> None:
    source = _Bytes(_eocd_only(size, at))
    if found is None:
        with pytest.raises(_torchzip.TorchRefusal):
            _torchzip._locate_eocd(source)  # type: ignore[arg-type]  # duck-typed byte source
    else:
        assert _torchzip._locate_eocd(source) == found  # type: ignore[arg-type]  # as above


def test_end_record_search_reads_only_the_last_window_when_it_is_there() -> None:
    source = _Bytes(_eocd_only(1 << 20, (1 << 20) - 22))
    assert _torchzip._locate_eocd(source) == (1 << 20) - 22  # type: ignore[arg-type]  # duck-typed
    assert source.reads == [((1 << 20) - 4096, 4096)]


def test_last_end_record_wins_even_when_its_comment_overruns() -> None:
    data = bytearray(_eocd_only(300, 100))
    data[200:204] = b"PK\x05\x06"
    data[220:222] = struct.pack("<H", 5000)  # comment length far past the end
    assert _torchzip._locate_eocd(_Bytes(bytes(data))) == 200  # type: ignore[arg-type]  # duck


def test_nan_and_inf_compare_as_torch_gave_them() -> None:
    assert [math.isnan(v) for v in expected_values(["nan", "inf"])] == [True, False]


def test_legacy_magic_pickle_holding_a_stop_byte_is_still_a_legacy_stream(tmp_path: Path) -> None:
    # BINPUT 46 (b"q.") inside the magic pickle: cutting it at the first "." misread the file
    from ckptctl.formats.pytorch._read import _is_legacy
    from ckptctl.sources import ByteSource

    magic = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19q\x2e."
    path = tmp_path / "m.pt"
    path.write_bytes(magic + b"\x80\x02M\xe9\x03." + b"\0" * 64)
    with ByteSource(path) as source:
        assert _is_legacy(source)
    path.write_bytes(magic.replace(b"\x19q", b"\x18q") + b"\0" * 64)  # another number
    with ByteSource(path) as source:
        assert not _is_legacy(source)

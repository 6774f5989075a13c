"""Issue 25, families 6 and 7: ckptctl's pickle verdict matches what torch 2.13 really does.

fixtures/hostile/parity_pickle/ (``make_parity_pickle.py``) holds hand-built files, and the
generator's ``variants()`` builds the same constructs in every spelling (first/last, stored/
deflated zip, legacy stream, every BUILD state on every allowlisted type ...). Per file the
manifest says what torch does (``runs_payload``, ``weights_only_loads``, proven by
tests/torch_tier/test_parity_pickle_torch.py) and which ``safe-pickle`` verdict ckptctl must
give: ``safe`` exactly when torch's weights-only loader accepts the file, never ``safe`` or
``needs-trust`` when a payload runs (those files are refused before they are unpickled).
No torch here.
"""

from __future__ import annotations

import json
import struct
import zipfile
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest

from ckptctl.formats.pytorch import _safety, _verdict
from ckptctl.formats.pytorch._verdict import assess_pickle, assess_stream
from ckptctl.safety import Verdict
from tests.conftest import HOSTILE, load_module
from tests.formats.test_pytorch_reader import frame

PARITY = HOSTILE / "parity_pickle"
MANIFEST: dict[str, dict[str, Any]] = json.loads((PARITY / "manifest.json").read_text())
EXPECTS = {"safe", "needs-trust", "unsafe", "refused"}


GENERATOR = load_module(PARITY / "make_parity_pickle.py")
VARIANTS: dict[str, Any] = GENERATOR.variants()


def verdict_of(run_cli, path: Path) -> tuple[int, dict[str, Any]]:
    result = run_cli("verify", path, "--json")
    assert "Traceback" not in result.stderr, result
    assert result.code in (0, 1), result
    (file_report,) = json.loads(result.stdout)["files"]
    (finding,) = [f for f in file_report["findings"] if f["check"] == "safe-pickle"]
    return result.code, finding


def check_expected(run_cli, path: Path, expect: str) -> None:
    code, finding = verdict_of(run_cli, path)
    verdict = finding["details"]["verdict"]
    if expect == "refused":
        assert verdict == "unsafe", finding
        assert code == 1, finding
        listed = run_cli("ls", path)  # refused before anything of it is unpickled
        assert listed.code == 3, listed
        assert "unsafe pickle" in listed.stderr.splitlines()[0], listed
        trusted = run_cli("verify", path, "--trust")
        assert trusted.code == 1, trusted  # --trust never passes a payload
        return
    assert verdict == expect, finding
    if expect == "safe":
        assert finding["status"] == "ok", finding
    else:
        assert finding["status"] == "fail", finding
        message = finding["message"]
        assert "refuses" in message or "fails" in message, message


# --- the committed corpus ----------------------------------------------------------------------


def test_manifest_covers_every_file_and_the_readme_names_each():
    on_disk = {p.name for p in PARITY.iterdir() if p.suffix == ".pt"}
    assert on_disk == set(MANIFEST)
    readme = (PARITY / "README.md").read_text(encoding="utf-8")
    for name, record in MANIFEST.items():
        assert f"`{name}`" in readme, name
        assert record["expect"] in EXPECTS, name
        assert record["family"] in (6, 7), name
        assert record["canary"] == f"ckptctl-canary-{name.split('.', 1)[0]}", name
        if record["runs_payload"]:  # a payload that runs is never merely needs-trust
            assert record["expect"] in ("unsafe", "refused"), name
        assert (record["expect"] == "safe") == record["weights_only_loads"], name
        assert (PARITY / name).stat().st_size < 64 << 10, name


def test_committed_files_match_the_generator():
    files = GENERATOR.build_all()
    assert set(files) == set(MANIFEST)
    for name, entry in files.items():
        assert (PARITY / name).read_bytes() == entry.data, name
        record = MANIFEST[name]
        assert (entry.runs, entry.loads, entry.expect) == (
            record["runs_payload"],
            record["weights_only_loads"],
            record["expect"],
        ), name


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_committed_file_gets_torchs_verdict(name, run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_expected(run_cli, PARITY / name, MANIFEST[name]["expect"])
    assert list(tmp_path.iterdir()) == [], "a payload ran"


# --- variants, built here -------------------------------------------------------------------


def test_variants_cover_each_construct_both_ways():
    expects = {e.expect for e in VARIANTS.values()}
    assert expects == {"safe", "needs-trust", "refused"}
    for prefix in ("v_build_", "v_newobj_", "v_sbs_"):
        kinds = {e.expect for n, e in VARIANTS.items() if n.startswith(prefix)}
        assert kinds == {"safe", "needs-trust"}, prefix  # controls beside each refusal
    for name, entry in VARIANTS.items():
        assert (entry.expect == "safe") == entry.loads, name
        assert not entry.runs or entry.expect == "refused", name
        assert name.removeprefix("v_") not in MANIFEST, name


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_gets_torchs_verdict(name, run_cli, tmp_path, monkeypatch):
    path = tmp_path / name
    path.write_bytes(VARIANTS[name].data)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    check_expected(run_cli, path, VARIANTS[name].expect)
    assert list(work.iterdir()) == [], "a payload ran"


def test_build_rules_follow_the_weights_only_table():
    """The table in the generator is the rule of ``_safety._build``, state by state."""
    for target, make in GENERATOR.BUILD_TARGETS.items():
        for state, spelled in GENERATOR.BUILD_STATES.items():
            data = b"\x80\x02" + make + spelled + b"b."
            found = assess_pickle(data, "t").verdict
            expected = (
                Verdict.SAFE if GENERATOR.build_accepted(target, state) else Verdict.NEEDS_TRUST
            )
            assert found is expected, (target, state)


# --- frames: the C unpickler over a BytesIO skips what is left of a frame -----------------------


def frame_verdicts(data: bytes) -> list[str]:
    return [p.message for p in assess_pickle(data, "t").problems if "frames that hide" in p.message]


# Each opcode split across a frame end at every byte inside one of its reads.
READS = {
    "SHORT_BINUNICODE": b"\x8c\x03abc",
    "BINUNICODE": b"X\x03\x00\x00\x00abc",
    "BINUNICODE8": b"\x8d\x03" + b"\x00" * 7 + b"abc",
    "SHORT_BINBYTES": b"C\x03abc",
    "SHORT_BINSTRING": b"U\x03abc",
    "LONG1": b"\x8a\x02\x01\x02",
    "BININT": b"J\x01\x00\x00\x00",
    "BININT2": b"M\x01\x00",
    "BINFLOAT": b"G" + b"\x00" * 8,
    "LONG_BINGET": b"N\x94j\x00\x00\x00\x000",
    "GLOBAL": b"cbuiltins\nlen\n",
}
SPLITS = {  # offsets inside the opcode where the C unpickler starts a new read
    "SHORT_BINUNICODE": {1, 2},
    "BINUNICODE": {1, 5},
    "BINUNICODE8": {1, 9},
    "SHORT_BINBYTES": {1, 2},
    "SHORT_BINSTRING": {1, 2},
    "LONG1": {1, 2},
    "BININT": {1},
    "BININT2": {1},
    "BINFLOAT": {1},
    "LONG_BINGET": {1, 2, 3, 7},  # NONE, MEMOIZE, LONG_BINGET (reads at 2 and 3), POP
    "GLOBAL": {1, 10},
}


@pytest.mark.parametrize("op", sorted(READS))
def test_a_frame_ending_inside_a_read_hides_a_pickle(op):
    body = READS[op]
    for cut in range(1, len(body)):
        data = b"\x80\x04" + frame(cut) + body + b"."
        found = frame_verdicts(data)
        straddles = cut not in SPLITS[op]
        assert bool(found) == straddles, (op, cut, found)
        if found:
            assert assess_pickle(data, "t").verdict is Verdict.UNSAFE


def test_frames_that_agree_with_the_opcodes_are_only_needs_trust():
    body = b"}\x8c\x01a\x8c\x01bs"
    for data in (
        b"\x80\x04" + frame(len(body) + 1) + body + b".",  # STOP inside the frame
        b"\x80\x04" + frame(len(body)) + body + frame(1) + b".",  # back to back
        b"\x80\x04" + frame(len(body) + 10) + body + frame(1) + b".",  # a frame in a frame
        b"\x80\x04" + frame(0) + body + b".",
    ):
        safety = assess_pickle(data, "t")
        assert not frame_verdicts(data), data
        assert safety.verdict in (Verdict.SAFE, Verdict.NEEDS_TRUST), data


def test_a_frame_inside_a_frame_is_checked_only_when_it_fits():
    fits = b"\x80\x04" + frame(12) + b"N0" + frame(1) + b"N0."
    assert not frame_verdicts(fits)
    too_long = b"\x80\x04" + frame(12) + b"N" + frame(5) + b"0N0N0."
    assert frame_verdicts(too_long)


def test_a_frame_left_over_before_the_next_pickle_of_a_stream_is_unsafe():
    first = b"\x80\x04" + frame(4) + b"K\x01.K"  # STOP, then one byte of the frame unread
    rest = b"\x80\x02K\x02."
    found = assess_stream(first + rest, "s")
    assert found.verdict is Verdict.UNSAFE
    assert any("bytes left after the pickle's STOP" in p.message for p in found.problems)
    alone = assess_stream(first, "s")  # nothing follows: nothing is hidden
    assert alone.verdict is not Verdict.UNSAFE


def test_a_stream_malformed_before_its_stop_leaves_no_frame_to_judge():
    # TUPLE2 across a MARK: malformed for the verdict, though within bounds, before the STOP
    # that leaves a byte of the frame unread. The verdict stops at the damage, as pickle.load
    # does, so it never sees that STOP: needs-trust, not a hidden pickle (#47).
    first = b"\x80\x04" + frame(8) + b"N(N\x860.K"
    rest = b"\x80\x02K\x02."
    found = assess_stream(first + rest, "s")
    assert found.verdict is Verdict.NEEDS_TRUST
    assert any("malformed" in p.message for p in found.problems)
    assert not any("bytes left after the pickle's STOP" in p.message for p in found.problems)


# --- nested archives -------------------------------------------------------------------------


def nested(blob: bytes) -> bytes:
    """A pickle calling ``torch.storage._load_from_bytes(blob)`` (protocol 3 bytes)."""
    arg = b"B" + struct.pack("<I", len(blob)) + blob
    return b"\x80\x03ctorch.storage\n_load_from_bytes\n(" + arg + b"tR."


def archive(records: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> bytes:
    buf = BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in records.items():
            zf.writestr(zipfile.ZipInfo(name), data, compress_type=method)
    return buf.getvalue()


EXEC = b"\x80\x02cbuiltins\nexec\n(X\x04\x00\x00\x00passtR."


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
@pytest.mark.parametrize("name", ["archive/data.pkl", "x/data.pkl", "data.pkl", "a/b/other.pkl"])
def test_every_pickle_record_of_a_nested_zip_is_judged(method, name):
    found = assess_pickle(nested(archive({"archive/version": b"3\n", name: EXEC}, method)), "d")
    assert found.verdict is Verdict.UNSAFE
    assert any(g.name == "builtins.exec" and g.where.endswith(name) for g in found.globals)


def test_a_nested_zip_ckptctl_cannot_read_is_unsafe():
    found = assess_pickle(nested(b"PK\x03\x04" + b"\x00" * 64), "d")
    assert found.verdict is Verdict.UNSAFE
    assert any("nested zip archive ckptctl cannot read" in p.message for p in found.problems)


def test_a_nested_torchscript_archive_needs_trust():
    blob = archive(
        {"m/data.pkl": b"\x80\x02}.", "m/constants.pkl": b"\x80\x02).", "m/version": b"3"}
    )
    found = assess_pickle(nested(blob), "d")
    assert found.verdict is Verdict.NEEDS_TRUST
    assert any("torch.jit.load" in p.message for p in found.problems)


def test_nested_zips_are_bounded(monkeypatch):
    blob = archive({"archive/data.pkl": b"\x80\x02}."})
    monkeypatch.setattr(_verdict, "MAX_NESTED_RECORD_BYTES", 2)
    found = assess_pickle(nested(blob), "d")
    assert found.verdict is Verdict.UNSAFE
    assert any("too large to judge" in p.message for p in found.problems)
    monkeypatch.undo()
    deep = b"\x80\x02}."
    for _ in range(_safety.MAX_NESTED_STREAMS + 1):
        deep = nested(archive({"archive/data.pkl": deep}))
    found = assess_pickle(deep, "d")
    assert found.verdict is Verdict.UNSAFE
    assert any("too many nested" in p.message for p in found.problems)


def test_a_safe_verdict_of_an_unreadable_file_does_not_claim_torch_loads_it(run_cli, tmp_path):
    # a storage record is missing: every opcode is allowlisted, but ckptctl cannot read it
    gen = load_module(HOSTILE / "parity" / "make_parity.py")
    path = tmp_path / "missing_storage.pt"
    path.write_bytes(gen.archive(gen.torch_records(gen.BENIGN, {})))
    _, finding = verdict_of(run_cli, path)
    assert finding["details"]["verdict"] == "safe"
    assert finding["status"] == "ok"
    assert "loads it" not in finding["message"]
    assert "unreadable" in finding["message"]
    _, readable = verdict_of(run_cli, PARITY / "sbs_ascii_ok.pt")
    assert readable["message"].startswith("safe: torch.load(weights_only=True) loads it")

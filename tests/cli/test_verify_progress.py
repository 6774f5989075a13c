"""``verify`` shows the bar of every command that reads tensor data (issue 48): with
``--no-nan`` and ``--hashes``, on a terminal only, one line of an 80-column terminal; never in a
pipe, with ``--json``, or when no check reads tensor data. The library's ``progress`` callback
is told every byte each pass reads."""

from __future__ import annotations

import json
import shutil

import pytest

from ckptctl.ops.verify import verify
from tests.cli._terminal import run_on_terminal

COLUMNS = 80
#: Eight 128x128 F32 tensors.
TENSOR_BYTES = 8 * 128 * 128 * 4


@pytest.fixture
def manifest(eight, run_cli):
    out = eight.with_suffix(".manifest")
    assert run_cli("hash", eight, "-o", out).code == 0
    return out


def _reading(eight, manifest) -> dict[str, tuple[list[str], str]]:
    """Checks that read tensor data, with the bytes the bar ends at (one pass per check)."""
    return {
        "no-nan": (["--no-nan"], "512.0 KiB/512.0 KiB"),
        "hashes": (["--hashes", str(manifest)], "512.0 KiB/512.0 KiB"),
        "both": (["--no-nan", "--hashes", str(manifest)], "1.0 MiB/1.0 MiB"),
    }


@pytest.mark.parametrize("case", ["no-nan", "hashes", "both"])
def test_the_bar_of_a_reading_check_fits_an_80_column_terminal(case, eight, manifest):
    options, end = _reading(eight, manifest)[case]
    run = run_on_terminal("verify", eight, *options, columns=COLUMNS)
    assert run.code == 0, run.terminal
    bars = run.bar_lines()
    assert any(end in line for line in bars), bars
    for line in bars:
        assert len(line) < COLUMNS, line
        assert line.split()[0] == "verifying", line
    assert "passed" in run.stdout  # the report itself is on stdout, after the bar


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_directory_gets_one_bar_in_worker_processes_too(jobs, eight, run_cli):
    shutil.copy(eight, eight.with_name("copy.safetensors"))
    run = run_on_terminal("verify", eight.parent, "--no-nan", "-j", jobs, columns=COLUMNS)
    assert run.code == 0, run.terminal
    bars = run.bar_lines()
    assert bars, run.terminal
    assert all(len(line) < COLUMNS for line in bars), bars
    assert run.stdout == run_cli("verify", eight.parent, "--no-nan", "-j", jobs).stdout


@pytest.mark.parametrize("case", ["no-nan", "hashes"])
def test_no_bar_in_a_pipe_or_with_json(case, eight, manifest, run_cli):
    options, _ = _reading(eight, manifest)[case]
    piped = run_cli("verify", eight, *options)
    assert piped.code == 0, piped.stderr
    assert "━" not in piped.stderr
    assert "KiB/" not in piped.stderr
    json_run = run_on_terminal("verify", eight, *options, "--json")
    assert json_run.code == 0, json_run.terminal
    assert not json_run.bar_lines(), json_run.terminal
    assert json.loads(json_run.stdout)["ok"] is True


def test_quiet_hides_the_bar_as_it_does_for_the_writing_commands(eight):
    run = run_on_terminal("verify", eight, "--no-nan", "-q", columns=COLUMNS)
    assert run.code == 0, run.terminal
    assert not run.bar_lines(), run.terminal


def test_no_bar_when_no_check_reads_tensor_data(eight):
    run = run_on_terminal("verify", eight, columns=COLUMNS)
    assert run.code == 0, run.terminal
    assert not run.bar_lines(), run.terminal


def test_progress_is_told_every_byte_of_every_pass(eight, manifest):
    calls: list[tuple[int, int | None]] = []
    report = verify(eight, no_nan=True, hashes=manifest, progress=lambda n, t: calls.append((n, t)))
    assert report.ok
    assert sum(n for n, _ in calls) == 2 * TENSOR_BYTES  # no-nan's pass, then hashes'
    assert calls[-1] == (TENSOR_BYTES // 8, 2 * TENSOR_BYTES)
    assert max(t or 0 for _, t in calls) == 2 * TENSOR_BYTES  # never past the end


def test_progress_from_worker_processes_counts_each_file_once(eight):
    copy = shutil.copy(eight, eight.with_name("copy.safetensors"))
    calls: list[tuple[int, int | None]] = []
    report = verify([eight, copy], no_nan=True, jobs=2, progress=lambda n, t: calls.append((n, t)))
    assert report.ok
    assert calls == [(TENSOR_BYTES, None), (TENSOR_BYTES, None)]  # each file when it is done

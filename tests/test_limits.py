"""Resource limits: small hostile files never take more than 5 s or 256 MiB.

Each file in fixtures/hostile/limits/ declares a huge size, count or depth. It is opened (every
tensor loaded, the header layout read) in-process under ``tracemalloc`` (which sees Python and
NumPy allocations) and a wall clock; only a ``CkptError`` may come out. Memory maps are not
allocations and are not counted.

Issue 25 adds the commands themselves: every command (``ls``, ``header``, ``verify`` with and
without ``--no-nan``, ``convert``, ``diff``) on each hostile file of at most 2 MB runs as a child
process, measured by its own peak RSS and CPU time (its wall clock on an idle core; a shared
machine inflates wall clocks, so those only catch a command that waits): it finishes within 10 s
and 256 MiB with the expected outcome, or is refused with a message naming the limit.
"""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from ckptctl import open_checkpoint
from ckptctl.ops.convert import convert
from tests.conftest import load_module, run_measured, time_bound
from tests.contract import exercise

pytestmark = pytest.mark.bounded

LIMITS = Path(__file__).resolve().parents[1] / "fixtures" / "hostile" / "limits"
SUFFIXES = (".safetensors", ".bpk", ".pkl", ".pt", ".npy", ".npz")
FILES = sorted(p for p in LIMITS.iterdir() if p.suffix in SUFFIXES)
MAX_SECONDS = time_bound(5.0)
MAX_BYTES = 256 << 20
#: Files a reader may open cleanly (their declared sizes are consistent and tiny).
MAY_OPEN = {
    "st_many_tensors.safetensors",
    "pkl_many_marks.pkl",
    "pt_pickle_self_list.pt",
    "pt_expanded_view.pt",
    "pt_expanded_view_huge.pt",
}
#: Files whose bound is the pickle budget (about a million opcodes): tracemalloc slows those
#: allocation-heavy passes tenfold, so they are measured as child processes (peak RSS) below.
CHILD_ONLY = {
    "pt_pickle_appends_dict.pt",
    "pt_pickle_dups.pt",
    "pt_pickle_memoize.pt",
    "pt_pickle_self_list.pt",
    "pt_pickle_sets.pt",
}
#: Known failures, reported for a fix in files this suite's author does not own.
KNOWN: dict[str, str] = {}  # files whose bound is a known, open bug
#: The rest are measured as child processes only (test_command_on_hostile_file_is_bounded): a
#: skip in the bounded tier fails CI (CKPTCTL_REQUIRE_TIERS).
IN_PROCESS = [p for p in FILES if p.name not in CHILD_ONLY]


@pytest.mark.parametrize("path", IN_PROCESS, ids=[p.name for p in IN_PROCESS])
def test_hostile_limit_file_is_bounded(path: Path) -> None:
    if path.name in KNOWN:
        pytest.xfail(KNOWN[path.name])
    tracemalloc.start()
    start = time.monotonic()
    try:
        error = exercise(path)
        seconds = time.monotonic() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seconds < MAX_SECONDS, f"took {seconds:.1f} s"
    assert peak < MAX_BYTES, f"peak {peak >> 20} MiB"
    if path.name not in MAY_OPEN:
        assert error is not None, "a file declaring impossible sizes was accepted"
        assert error.path is not None
        assert error.message[:1].islower()


def test_every_limit_file_has_a_readme_line() -> None:
    readme = (LIMITS / "README.md").read_text(encoding="utf-8")
    assert FILES
    for path in FILES:
        assert f"`{path.name}`" in readme, path.name


# --- the commands, as child processes (issue 25) ----------------------------------------------

#: The bound is the command's own CPU time (user + system: its wall clock on an idle core),
#: which other processes on a shared machine do not inflate the way they do the wall clock;
#: ``CHILD_WALL_SECONDS`` still catches a command that waits instead of working.
CHILD_SECONDS = time_bound(10.0)
CHILD_WALL_SECONDS = time_bound(60.0)
CHILD_BYTES = 256 << 20
BUDGET = "asks for more than 33554432 bytes of objects and work"
#: file -> command -> (exit code, text the output or the error must hold). ``{dst}`` is a
#: fresh output path; "diff" compares the file with itself.
EXPECTED: dict[str, dict[str, tuple[int, str]]] = {
    **{
        name: {
            "ls": (3, BUDGET),
            "header": (3, BUDGET),
            "verify": (1, BUDGET),
            "verify --no-nan": (1, BUDGET),
            "convert": (3, BUDGET),
            "diff": (3, BUDGET),
        }
        for name in (
            "pt_pickle_appends_dict.pt",
            "pt_pickle_dups.pt",
            "pt_pickle_memoize.pt",
            "pt_pickle_sets.pt",
        )
    },
    "pt_pickle_inflates_huge.pt": {
        cmd: (1 if cmd.startswith("verify") else 3, "inflates to 69206020 bytes, more than")
        for cmd in ("ls", "header", "verify", "verify --no-nan", "convert", "diff")
    },
    "pt_pickle_self_list.pt": {
        "ls": (0, "0 tensors, 0 parameters"),
        "header": (0, "data.pkl"),
        "verify": (1, "the file holds no tensors"),
        "verify --no-nan": (1, "the file holds no tensors"),
        "convert": (0, "0 tensors, 16 B"),
        "diff": (0, "identical: 0 tensors"),
    },
    "pt_expanded_view.pt": {
        "ls": (0, "[67108864, 4]"),
        "header": (0, "data.pkl"),
        "verify": (0, "1 passed"),
        "verify --no-nan": (1, "67,108,864 NaN"),
        "convert --max-output-size 100MB": (4, "--max-output-size"),
        "diff --max-compare-size 100MB": (4, "--max-compare-size"),
    },
    "pt_expanded_view_huge.pt": {
        "ls": (0, "[274877906944, 4]"),
        "header": (0, "data.pkl"),
        "verify": (0, "1 passed"),
        "verify --no-nan": (1, "274,877,906,944 NaN"),
        "convert": (4, "would write 4398046511104 bytes of tensors, more than the limit of"),
        "diff": (4, "would read 4398046511104 bytes of tensors, more than the limit of"),
    },
    "pt_extra_pickles_huge.pt": {
        "ls": (0, "streams torch.load does not read are needs-trust"),
        "verify": (1, "the file holds no tensors"),
        "verify --json": (1, "not judged: its 67108861 bytes would take the pickles"),
        "convert": (0, "0 tensors, 16 B"),
        "diff": (0, "identical: 0 tensors"),
    },
    **{
        f"pt_stored_{name}.pt": {
            "ls": (code, listed),
            "header": (code, "data.pkl" if code == 0 else listed),
            "verify": (1, verdict),
            "verify --no-nan": (1, verdict),
            "convert": (code, "0 tensors, 16 B" if code == 0 else listed),
            "diff": (code, "identical: 0 tensors" if code == 0 else listed),
        }
        for name, code, listed, verdict in (
            ("dups", 0, "needs-trust: opcode DUP", "needs trust: opcode DUP"),
            ("memoize", 0, "needs-trust: opcode MEMOIZE", "needs trust: opcode MEMOIZE"),
            ("marks", 0, "needs-trust: opcode POP_MARK", "needs trust: opcode POP_MARK"),
            ("appends", 0, "pickle: safe", "the file holds no tensors"),
            ("stack_globals", 3, "unsafe pickle: global '.' in data.pkl", "unsafe: globals ."),
        )
    },
    "npz_declared_huge.npz": {
        "ls": (0, "1,073,741,760 parameters"),
        "verify": (0, "1 passed"),
        "verify --no-nan": (1, "1100:1"),
        "convert --max-output-size 8GB": (3, "1100:1"),
        "convert": (4, "--max-output-size"),
        "diff": (4, "--max-compare-size"),
    },
    "npy_shape_huge.npy": {
        cmd: (1 if cmd.startswith("verify") else 3, "bytes end at byte")
        for cmd in ("ls", "header", "verify", "convert", "diff")
    },
    "pt_many_deflated_storages.pt": {
        "ls": (0, "6000 storage record(s) are compressed"),
        "verify --no-nan": (0, "1 passed"),
        "convert": (0, "6000 tensors"),
        "diff": (0, "identical: 6,000 tensors"),
    },
}
#: The 2 MB stored pickles take seconds per command by design (their bound is the time limit
#: itself): marked slow, so a mutation run, whose trampolines slow the parser several times over,
#: leaves them out (pyproject.toml, ``[tool.mutmut] pytest_add_cli_args``).
CASES = [
    pytest.param(name, cmd, marks=[pytest.mark.slow] if name.startswith("pt_stored_") else [])
    for name, cmds in EXPECTED.items()
    for cmd in cmds
]


@pytest.fixture(scope="module")
def large_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cases of ``make_limits.large_cases()`` (too large to commit), built once."""
    make_limits = load_module(LIMITS / "make_limits.py")
    out = tmp_path_factory.mktemp("large_limits")
    for name, (data, _) in make_limits.large_cases().items():
        assert len(data) <= 2_000_000, name
        (out / name).write_bytes(data)
    return out


#: Runs the CLI and writes its own peak RSS (VmHWM of the process after exec) and CPU seconds to
#: a file: the ``ru_maxrss`` that ``wait4`` reports also counts the (large) pytest process it
#: forked from.
def run_child(args: list[str], cwd: Path) -> tuple[int, str, float, int]:
    """Run ``ckptctl ARGS``; return (exit code, stdout + stderr, CPU seconds, peak RSS in bytes).

    Raises:
        AssertionError: the command took more than ``CHILD_WALL_SECONDS`` of wall clock.
    """
    run = run_measured(args, cwd)
    assert run.wall_seconds < CHILD_WALL_SECONDS, f"took {run.wall_seconds:.1f} s of wall clock"
    return run.code, run.output, run.cpu_seconds, run.peak_rss


@pytest.mark.parametrize(
    ("name", "command"), CASES, ids=[f"{c.values[0]}-{c.values[1]}" for c in CASES]
)
def test_command_on_hostile_file_is_bounded(
    name: str, command: str, large_files: Path, tmp_path: Path
) -> None:
    path = LIMITS / name if (LIMITS / name).exists() else large_files / name
    assert path.stat().st_size <= 2_000_000
    words = command.split()
    args = [words[0], str(path)]
    if words[0] == "convert":
        args.append(str(tmp_path / "out.safetensors"))
    elif words[0] == "diff":
        args.append(str(path))
    args += words[1:]
    code, output, seconds, rss = run_child(args, tmp_path)
    expected_code, text = EXPECTED[name][command]
    assert seconds < CHILD_SECONDS, f"took {seconds:.1f} s of CPU time"
    assert rss < CHILD_BYTES, f"peak RSS {rss >> 20} MiB"
    assert (code, text in output) == (expected_code, True), output[-2000:]


def test_expanded_view_converts_in_chunks(tmp_path: Path) -> None:
    # [1, 2, 3, nan] expanded to [2**22, 4]: 64 MiB written, never held whole.
    make_limits = load_module(LIMITS / "make_limits.py")
    src = tmp_path / "expanded.pt"
    src.write_bytes(make_limits._expanded_view(4, (2**22, 4), (0, 1)))
    dst = tmp_path / "out.safetensors"
    tracemalloc.start()
    try:
        report = convert(src, dst)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.written
    assert peak < 40 << 20, f"peak {peak >> 20} MiB for a 64 MiB output"
    with open_checkpoint(dst) as ckpt:
        values = ckpt["w"].load()
        assert values.shape == (2**22, 4)
        np.testing.assert_array_equal(values[:: 2**20], [[1, 2, 3, np.nan]] * 4)
        np.testing.assert_array_equal(values[-1], [1, 2, 3, np.nan])


def test_expanded_view_loads_as_a_view() -> None:
    with open_checkpoint(LIMITS / "pt_expanded_view_huge.pt") as ckpt:
        values = ckpt["w"].load()
        assert values.shape == (2**38, 4)
        assert values.strides == (0, 4)
        assert not values.flags.writeable
        np.testing.assert_array_equal(values[2**37], [1, 2, 3, np.nan])


@pytest.mark.slow
def test_expanded_view_converts_whole_within_the_limits(tmp_path: Path) -> None:
    # The default limit lets the 1 GiB output of pt_expanded_view.pt through; it is streamed.
    dst = tmp_path / "out.safetensors"
    code, output, seconds, rss = run_child(
        ["convert", str(LIMITS / "pt_expanded_view.pt"), str(dst), "--no-fsync"], tmp_path
    )
    assert (code, seconds < 20, rss < CHILD_BYTES) == (0, True, True), (output, seconds, rss)
    assert dst.stat().st_size > 1 << 30
    with open_checkpoint(dst) as ckpt:
        values = ckpt["w"].load()
        np.testing.assert_array_equal(values[2**25], [1, 2, 3, np.nan])


def test_dense_stored_pickles_are_within_the_budget() -> None:
    # An optimizer-like state pickled on its own (a legacy .pt is nearly all pickle): a stored
    # pickle gets 128 per byte of its file, so dense real pickles (30 to 46 per byte) pass.
    import pickle

    from ckptctl.formats.pytorch._walker import scan_pickle

    state = {
        i: {"step": i, "lr": 0.1 * i, "name": f"p{i}", "ids": (i, i + 1)} for i in range(2**18)
    }
    data = pickle.dumps(state, protocol=2)
    assert scan_pickle(data, 0, "state", len(data)) == len(data)

"""Shared fixtures: fixture paths, the CLI runner, golden files, required test tiers.

Test tiers are markers: ``torch`` (needs torch installed; ``tests/torch_tier/``), ``quant``
(beside ``torch``: needs bitsandbytes and compressed-tensors) and ``corpus`` (needs
``../shared/corpus``; given automatically to every test that uses the ``corpus`` fixture).
Such tests skip when what they need is absent -- fine in a user's clone, not in CI. With
``CKPTCTL_REQUIRE_TIERS=torch,corpus`` (comma-separated), a skipped test of a listed tier fails
instead, and so does a run that selects no test of a listed tier (see ``.ci/run``), also when
pytest-xdist runs the tests in worker processes.

``ckernels`` marks the tests that need the compiled kernels (``ckptctl._ckernels``, which
``pip install`` builds where it finds a C compiler): they skip without them, and CI requires the
tier so that it cannot test only the numpy fallback.

``bounded`` marks the tests that assert a time or memory bound on work (hostile inputs): the
README's command leaves them out and runs the rest in parallel; ``.ci/run`` runs them on their
own, serially (``-m bounded -p no:xdist``), where their CPU and wall-clock limits hold.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis
import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
VALID = FIXTURES / "valid"
HOSTILE = FIXTURES / "hostile"
GOLDEN = FIXTURES / "golden"
SHARED = REPO.parent / "shared"
CORPUS = SHARED / "corpus"
#: What ``git lfs pointer --file`` writes for valid/safetensors/tiny.safetensors (issue 44).
LFS_POINTER = HOSTILE / "lfs" / "model.safetensors"


def write_unfetched_clone(top: Path) -> Path:
    """Issue 44's model directory: a Hugging Face clone without `git lfs pull` and two damaged
    files beside its config, tokenizer and README. ``top`` is created; returns it."""
    import hashlib

    top.mkdir(parents=True)
    shutil.copy(LFS_POINTER, top / "model.safetensors")
    (top / "weights.pt").write_bytes(
        b"".join(hashlib.sha256(bytes([i])).digest() for i in range(32))
    )
    (top / "empty.safetensors").write_bytes(b"")
    (top / "config.json").write_text('{"model_type": "llama", "hidden_size": 8}\n')
    (top / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE"}}\n')
    (top / "README.md").write_text("# a model\n")
    return top


# Tests never write into the checkout. Hypothesis keeps its example database and caches in
# ./.hypothesis unless told otherwise; keep them (failing examples included, so reruns replay
# them) in a per-user directory under the system temp dir instead. Read lazily, so setting it
# here, before any test runs, is in time.
os.environ.setdefault(
    "HYPOTHESIS_STORAGE_DIRECTORY",
    os.path.join(tempfile.gettempdir(), f"ckptctl-hypothesis-{os.getuid()}"),
)
# Hypothesis fails an example that takes longer than its deadline (200 ms by default): on a
# loaded machine, with pytest-xdist workers sharing its cores, an ordinary example can. Time
# bounds on work are the ``bounded`` tier's, measured in its serial run.
hypothesis.settings.register_profile("ckptctl", deadline=None)
hypothesis.settings.load_profile("ckptctl")


#: Time bounds in tests (wall clock or CPU) guard against runaway work (a hang, a quadratic
#: parse), not speed, which benchmarks/ measures. Under mutmut (it sets ``MUTANT_UNDER_TEST``)
#: every call into a mutated module goes through a trampoline and two workers share the cores,
#: so the bounds stretch there (also in its clean run, where the variable is set but empty); a
#: mutant that loops forever still hits mutmut's own timeout.
TIME_SLACK = 4.0 if "MUTANT_UNDER_TEST" in os.environ else 1.0
# mutmut's stats run (which tests reach which function) records calls in this process only; a
# child process (a CLI run by a test) that inherits MUTANT_UNDER_TEST=stats would look for
# mutmut's configuration in its own working directory and fail. mutmut keeps its own copy of
# the value for this process, so the children alone lose it (and run the original code).
if os.environ.get("MUTANT_UNDER_TEST") == "stats":
    del os.environ["MUTANT_UNDER_TEST"]

#: Address space of a process that runs a mutant's tests: a mutant that allocates without end
#: (a loop that grows a list) then fails with MemoryError, a kill, instead of taking the
#: machine's memory until the kernel's OOM killer ends it (SIGKILL, which mutmut calls
#: "suspicious"; seen here: 20 GB). No test comes near it.
MUTANT_ADDRESS_SPACE = 16 << 30


def pytest_configure(config: pytest.Config) -> None:
    """Under mutmut, bound the address space of the process that runs a mutant."""
    if "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", ""):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY or soft > MUTANT_ADDRESS_SPACE:
            resource.setrlimit(resource.RLIMIT_AS, (MUTANT_ADDRESS_SPACE, hard))


#: Runs ``ckptctl ARGV...`` and, whatever happens, writes its peak RSS and CPU time to the
#: file named by its last argument (``/proc/self/status``'s ``VmHWM``).
_MEASURED_CHILD = """
import os, sys
from ckptctl.cli import main
report = sys.argv.pop()
try:
    main()
finally:
    with open("/proc/self/status") as status, open(report, "w") as out:
        out.write(next(line for line in status if line.startswith("VmHWM:")))
        times = os.times()
        out.write(f"cpu: {times.user + times.system}\\n")
"""


@dataclass(frozen=True)
class ChildRun:
    """What :func:`run_measured` saw: exit code, output, CPU seconds, wall seconds, peak RSS."""

    code: int
    output: str
    cpu_seconds: float
    wall_seconds: float
    peak_rss: int


#: Whether the running test is marked ``bounded`` (set by :func:`_note_bounded_test`).
_in_bounded_test = False


@pytest.fixture(autouse=True)
def _note_bounded_test(request: pytest.FixtureRequest) -> Generator[None, None, None]:
    global _in_bounded_test
    _in_bounded_test = request.node.get_closest_marker("bounded") is not None
    yield
    _in_bounded_test = False


def run_measured(args: list[str], cwd: Path, timeout: float = 120) -> ChildRun:
    """Run ``ckptctl ARGS`` in a child Python (this checkout first on its path) and measure it.

    Only a test marked ``bounded`` may call it: its measures hold only in that tier's serial run.
    """
    import subprocess
    import sys
    import time

    assert _in_bounded_test, "a test that measures a child process must be marked bounded"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    report = Path(tempfile.mkdtemp(prefix="child-")) / "measured"
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED_CHILD, *args, str(report)], capture_output=True,
        text=True, cwd=cwd, env=env, timeout=timeout, check=False,
    )  # fmt: skip
    wall = time.monotonic() - start
    fields = dict(line.split(":", 1) for line in report.read_text(encoding="ascii").splitlines())
    shutil.rmtree(report.parent)
    kib = int(fields["VmHWM"].split()[0])
    return ChildRun(
        done.returncode, done.stdout + done.stderr, float(fields["cpu"]), wall, kib * 1024
    )


def time_bound(bound: float) -> float:
    """``bound``, stretched by ``TIME_SLACK`` under mutation testing."""
    return bound * TIME_SLACK


TIERS = ("torch", "corpus", "quant", "bounded", "ckernels")
_tier_counts = pytest.StashKey[dict[str, int]]()
REQUIRE_TIERS_ENV = "CKPTCTL_REQUIRE_TIERS"


def load_module(path: Path) -> Any:
    """Import the script at ``path`` (a fixture generator) as a module, without running main.

    No bytecode is written beside it: a ``__pycache__`` in a fixture folder would be one more
    file to the tests that check every file there is described (and a second run would fail).
    """
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up while being made
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes
        del sys.modules[path.stem]
    return module


def copy_benchmarks(tmp_path: Path) -> Path:
    """The benchmark scripts in ``tmp_path/benchmarks``: inputs they generate in ``_work/``
    beside themselves land in tmp_path, not in the checkout."""
    target = tmp_path / "benchmarks"
    target.mkdir()
    for script in (REPO / "benchmarks").glob("*.py"):
        shutil.copy2(script, target / script.name)
    return target


def required_tiers() -> set[str]:
    """The tiers named in ``$CKPTCTL_REQUIRE_TIERS``; unknown names are a usage error."""
    names = {t.strip() for t in os.environ.get(REQUIRE_TIERS_ENV, "").split(",") if t.strip()}
    unknown = names - set(TIERS)
    if unknown:
        raise pytest.UsageError(f"{REQUIRE_TIERS_ENV}: unknown tier(s) {sorted(unknown)}")
    return names


# A whole module of a tier may skip at collection (``pytest.importorskip`` at module level), before
# its ``pytestmark`` exists: modules under these directories belong to the tier.
TIER_DIRS = {"torch": "torch_tier"}


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, None]:
    outcome = yield
    report = outcome.get_result()
    if not report.skipped:
        return
    parts = Path(str(collector.path)).parts
    tiers = [t for t in sorted(required_tiers()) if TIER_DIRS.get(t) in parts]
    if tiers:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (
            f"{collector.nodeid}: skipped ({reason}) but {REQUIRE_TIERS_ENV} requires the "
            f"{'/'.join(tiers)} tier to run"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "corpus" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.corpus)


def pytest_collection_finish(session: pytest.Session) -> None:
    counts = {tier: 0 for tier in required_tiers()}
    for item in session.items:
        for tier in counts:
            if item.get_closest_marker(tier) is not None:
                counts[tier] += 1
    session.config.stash[_tier_counts] = counts


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    # A test of several tiers (torch and corpus) must run only when all of them are required;
    # ``bounded`` is how a test runs, not something it needs (a torch test may be bounded).
    tiers = {t for t in TIERS if item.get_closest_marker(t) is not None}
    required = required_tiers()
    if tiers & required and tiers - {"bounded"} <= required:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid}: skipped ({reason}) but {REQUIRE_TIERS_ENV} requires the "
            f"{'/'.join(sorted(tiers))} tier to run"
        )


#: Where a pytest-xdist worker hands its counts to the controller, which collects nothing.
_WORKER_COUNTS = "ckptctl_tier_counts"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist's controller: keep a worker's counts (every worker collects every test)."""
    counts = getattr(node, "workeroutput", {}).get(_WORKER_COUNTS)
    if counts is not None:
        node.config.stash[_tier_counts] = counts


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    counts = session.config.stash.get(_tier_counts, {})
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the controller checks and reports
        workeroutput[_WORKER_COUNTS] = counts
        return
    empty = sorted(tier for tier, n in counts.items() if n == 0)
    if empty and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if empty:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = f"{REQUIRE_TIERS_ENV}: no test of the required tier(s) {empty} was selected"
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_sep("=", message, red=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden", action="store_true", help="rewrite fixtures/golden from current output"
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
def corpus() -> Path:
    """The shared corpus of real files from other projects; skips when absent."""
    path = CORPUS / "burn-pytorch-reader"
    if not path.is_dir():
        pytest.skip("../shared/corpus is not available")
    return path


class CliResult:
    """What one ``ckptctl`` invocation did: exit code, stdout, stderr."""

    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.code = code
        self.stdout = stdout
        self.stderr = stderr

    def __repr__(self) -> str:
        return f"CliResult(code={self.code}, stdout={self.stdout!r}, stderr={self.stderr!r})"


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Run ``ckptctl.cli.main(args)`` in-process: the real error mapping, fixed width, no colour."""
    from ckptctl.cli import main

    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("CKPTCTL_DEBUG", raising=False)

    def invoke(*args: str | Path) -> CliResult:
        capsys.readouterr()
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        else:  # pragma: no cover - main always exits
            code = -1
        out = capsys.readouterr()
        return CliResult(code, out.out, out.err)

    return invoke


def check_golden(text: str, path: Path, update: bool) -> None:
    """Compare ``text`` with the golden file ``path`` (or rewrite it with --update-golden)."""
    if update or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if not update:
            pytest.fail(f"golden file {path} was missing and has been written; review and rerun")
    assert text == path.read_text(encoding="utf-8")

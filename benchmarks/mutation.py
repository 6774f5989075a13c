"""Mutation testing of the core, one module at a time, in bounded time (issue 17).

Each module listed in ``[tool.mutmut] only_mutate`` (pyproject.toml) is a *unit*. A unit runs in
its own copy of the repository under ``benchmarks/_work/mutation/<unit>/`` with ``mutmut run``
restricted to that unit, so two units run side by side on a 2-core machine and a run that is
stopped (``--budget``, Ctrl-C) resumes where it stopped: mutmut keeps each verdict in the copy's
``mutants/`` directory, and the harness in ``benchmarks/mutation_verdicts.json`` (kept in the
repository), from which a new copy on another machine starts: a unit larger than one sitting is
finished over several. The fast test tiers are the test command (see ``pytest_add_cli_args``).

Results go to ``benchmarks/mutation_results.json`` (machine-readable, kept in the repository)
and ``benchmarks/MUTATION.md`` (the table: mutants, killed, survived, equivalent, score per unit,
then every survivor and every equivalent mutant with its reason). Reasons are written by hand in
``benchmarks/mutation_reasons.toml``: ``[[equivalent]]`` entries (the same behaviour as the
original: left out of the score) and ``[[survivor]]`` entries (a real change no test catches,
and why it is left: still counted as survived). An entry whose mutated line no longer matches
the mutant of that name is stale: the mutant is then an unexplained survivor again.

    python benchmarks/mutation.py --list
    python benchmarks/mutation.py dtypes.py _io.py --jobs 2 --budget 900
    python benchmarks/mutation.py dtypes.py --rerun-survivors   # after adding tests
    python benchmarks/mutation.py dtypes.py --rerun-survivors --skip-equivalent
    python benchmarks/mutation.py --report                      # rewrite MUTATION.md only
    python benchmarks/mutation.py --report --renumber           # ... after editing a module

Needs ``mutmut`` (3.x) in the running environment: ``pip install -e '.[dev]' mutmut``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
# resolved, so that mutmut runs in one real directory whichever worktree starts it (in a
# second worktree, _work may be a symlink to the first one's)
WORK = (REPO / "benchmarks" / "_work" / "mutation").resolve()
RESULTS_JSON = REPO / "benchmarks" / "mutation_results.json"
VERDICTS_JSON = REPO / "benchmarks" / "mutation_verdicts.json"
RESULTS_MD = REPO / "benchmarks" / "MUTATION.md"
REASONS_TOML = REPO / "benchmarks" / "mutation_reasons.toml"

#: mutmut's verdicts, grouped the way the score counts them.
KILLED = {"killed", "timeout", "segfault", "caught by type check"}
SURVIVED = {"survived", "no tests", "suspicious"}
PENDING = {"not checked", "skipped"}


def units() -> list[str]:
    """The ``only_mutate`` patterns of pyproject.toml, in order."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return list(config["tool"]["mutmut"]["only_mutate"])


def slug(unit: str) -> str:
    """``ckptctl/formats/burnpack/*`` -> ``formats.burnpack``; the unit's name on the CLI."""
    return unit.removeprefix("ckptctl/").removesuffix("/*").removesuffix(".py").replace("/", ".")


def resolve(names: list[str]) -> list[str]:
    """Units for command-line names: ``dtypes.py``, ``dtypes``, ``formats/pytorch/_scan.py`` ..."""
    known = {slug(u): u for u in units()}
    out = []
    for name in names:
        key = slug(name if name.startswith("ckptctl/") else "ckptctl/" + name)
        if key not in known:
            sys.exit(f"mutation.py: unknown unit {name!r}; --list shows them")
        out.append(known[key])
    return out


def tracked_files(source: Path) -> list[str]:
    """Files git tracks plus new files it does not ignore: the tree a test run sees.

    A ``source`` other than the repository (an unpacked ``git archive``) is taken whole.
    """
    if source != REPO:
        return sorted(
            p.relative_to(source).as_posix()
            for p in source.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        )
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return sorted({f for f in listed.split("\0") if f and (REPO / f).is_file()})


def sync(work: Path, source: Path) -> None:
    """Make ``work`` a copy of ``source``'s tree, copying only files that changed.

    Unchanged files keep their modification time, so mutmut does not regenerate (and forget
    the verdicts of) mutants of source files that did not change.
    """
    wanted = set(tracked_files(source))
    for name in wanted:
        src, dst = source / name, work / name
        if dst.is_file() and dst.read_bytes() == src.read_bytes():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)  # a new mtime: mutmut regenerates mutants of changed files
    tops = {name.split("/")[0] for name in wanted}
    for path in work.rglob("*.*"):
        rel = path.relative_to(work).as_posix()
        if rel.split("/")[0] not in tops or "__pycache__" in rel or not path.is_file():
            continue  # mutants/, mutmut.log, caches
        if rel not in wanted:
            path.unlink()


def refresh_mutants(work: Path, unit: str) -> None:
    """Bring the unmutated modules in mutmut's ``mutants/`` copy up to date.

    mutmut copies a source file into ``mutants/`` only when it is not there yet, so after a
    change outside the unit it would go on testing the old code; and it never deletes one, so
    modules and tests removed from the tree are removed here.
    """
    for src in (work / "ckptctl").rglob("*.py"):
        rel = src.relative_to(work).as_posix()
        dst = work / "mutants" / rel
        if fnmatch.fnmatch(rel, unit) or not dst.exists():
            continue
        if dst.read_bytes() != src.read_bytes():
            shutil.copy2(src, dst)
    for top in ("ckptctl", "tests"):
        for dst in (work / "mutants" / top).rglob("*.py"):
            if not (work / dst.relative_to(work / "mutants")).exists():
                dst.unlink()


def configure(work: Path, unit: str, deselect: list[str]) -> None:
    """Restrict the copy's ``[tool.mutmut]`` to ``unit``, copy benchmarks/ (no _work/ there)."""
    path = work / "pyproject.toml"
    text = path.read_text(encoding="utf-8")
    text, n = re.subn(
        r"^only_mutate = \[.*?\]$",
        f'only_mutate = ["{unit}"]\nuse_git_change_detection = false',
        text,
        count=1,
        flags=re.MULTILINE | re.DOTALL,
    )
    assert n == 1, "pyproject.toml has no [tool.mutmut] only_mutate"
    text, n = re.subn(r"^also_copy = \[$", 'also_copy = [\n    "benchmarks/",', text, flags=re.M)
    assert n == 1, "pyproject.toml has no [tool.mutmut] also_copy"
    extra = "".join(f' "--deselect", "{d}",' for d in deselect)
    text, n = re.subn(
        r"^pytest_add_cli_args = \[$", "pytest_add_cli_args = [" + extra, text, flags=re.M
    )
    assert n == 1, "pyproject.toml has no [tool.mutmut] pytest_add_cli_args"
    path.write_text(text, encoding="utf-8")


def mutmut(
    work: Path, *args: str, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the ``mutmut`` of this interpreter's environment in ``work``.

    On ``timeout`` the run gets SIGINT (mutmut stops its workers and keeps every verdict so
    far), then SIGKILL if it does not stop.
    """
    exe = Path(sys.executable).with_name("mutmut")
    cmd = [str(exe) if exe.exists() else "mutmut", *args]
    log = open(work / "mutmut.log", "a", encoding="utf-8")  # noqa: SIM115 - closed below
    log.write(f"\n$ {' '.join(cmd)}  ({dt.datetime.now():%Y-%m-%d %H:%M:%S})\n")
    log.flush()
    if args[0] != "run":
        done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, check=False)
        log.close()
        return done
    proc = subprocess.Popen(
        cmd, cwd=work, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    finally:
        log.close()
    return subprocess.CompletedProcess(cmd, proc.returncode, "", "")


def _meta_files(work: Path, unit: str) -> dict[str, Path]:
    """Source file (relative to the copy) -> mutmut's ``.meta`` file of it, for ``unit``."""
    out = {}
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        source = meta.relative_to(work / "mutants").as_posix().removesuffix(".meta")
        if fnmatch.fnmatch(source, unit):
            out[source] = meta
    return out


def _stored_verdicts() -> dict[str, dict[str, dict[str, object]]]:
    """Unit -> source file -> what :func:`keep_verdicts` stored (empty when nothing is)."""
    if not VERDICTS_JSON.exists():
        return {}
    stored: dict[str, dict[str, dict[str, object]]] = json.loads(VERDICTS_JSON.read_text("utf-8"))
    return stored


def _write_verdicts(stored: dict[str, dict[str, dict[str, object]]]) -> None:
    text = json.dumps(stored, indent=1, sort_keys=True, ensure_ascii=False)
    VERDICTS_JSON.write_text(text + "\n", "utf-8")


def keep_verdicts(unit: str, work: Path) -> None:
    """Store the copy's verdicts of ``unit`` in ``mutation_verdicts.json`` (kept in the
    repository), each function's with the hash mutmut gave its code.

    A unit can take longer than one sitting (a machine's session, a CI job), and ``_work/`` does
    not travel: :func:`seed_verdicts` puts these back into a new copy, and mutmut keeps those of
    every function whose code is unchanged, so the next run goes on where this one stopped.
    Verdicts are exit codes as mutmut keeps them, comma-separated by mutant number (empty: not
    run yet).
    """
    stored = _stored_verdicts()
    files: dict[str, dict[str, object]] = {}
    for source, meta in _meta_files(work, unit).items():
        data = json.loads(meta.read_text(encoding="utf-8"))
        by_function: dict[str, list[str]] = {}
        for name, code in data["exit_code_by_key"].items():
            function, _, number = name.rpartition("__mutmut_")
            codes = by_function.setdefault(function, [])
            codes.extend([""] * (int(number) - len(codes)))
            codes[int(number) - 1] = "" if code is None else str(code)
        files[source] = {
            "hashes": data.get("hash_by_function_name", {}),
            "verdicts": {f: ",".join(codes) for f, codes in sorted(by_function.items())},
        }
    stored[unit] = files
    _write_verdicts(stored)


def seed_verdicts(unit: str, work: Path) -> int:
    """Write the verdicts :func:`keep_verdicts` stored for ``unit`` as mutmut's ``.meta`` files
    where the copy has no mutants of a file yet; returns how many verdicts were written.

    mutmut generates a file's mutants when it finds none, and keeps a verdict from the ``.meta``
    file already there only if the function's code hashes as before: an edited function is run
    again, the rest is not (its callers neither, where a copy that stayed on one machine would
    re-run them too; ``--fresh`` when an edit may have changed what they do).
    """
    stored = _stored_verdicts()
    count = 0
    for source, data in stored.get(unit, {}).items():
        meta = work / "mutants" / (source + ".meta")
        if meta.exists() or (work / "mutants" / source).exists():
            continue
        codes = {
            f"{function}__mutmut_{number}": int(code) if code else None
            for function, joined in data["verdicts"].items()
            for number, code in enumerate(joined.split(","), start=1)
        }
        count += sum(code is not None for code in codes.values())
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(
            json.dumps(
                {
                    "exit_code_by_key": codes,
                    "hash_by_function_name": data["hashes"],
                    "type_check_error_by_key": {},
                    "durations_by_key": {},
                    "estimated_durations_by_key": {},
                }
            ),
            encoding="utf-8",
        )
    return count


def verdicts(work: Path) -> dict[str, str]:
    """Mutant name -> mutmut's verdict, for every mutant of the copy."""
    done = mutmut(work, "results", "--all", "true")
    out = {}
    for line in done.stdout.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name.startswith("ckptctl."):
            out[name] = status
    return out


# Run in the copy by mutmut's interpreter: every diff in one process (`mutmut show` per
# mutant costs a second of start-up each, a quarter of an hour for a module's survivors).
_DIFFS = """
import json, sys
from pathlib import Path
from mutmut.mutation.diff_apply import get_diff_for_mutant
out = {}
for name in json.load(sys.stdin):
    module = Path(*name.rpartition(".")[0].split("."))
    path = module.with_suffix(".py")
    path = path if path.exists() else module / "__init__.py"
    out[name] = get_diff_for_mutant(name, path=path)
json.dump(out, sys.stdout)
"""


def mutated_lines(work: Path, names: list[str]) -> dict[str, list[str]]:
    """Mutant name -> the ``-``/``+`` lines of its diff, for each of ``names``."""
    if not names:
        return {}
    done = subprocess.run(
        [sys.executable, "-c", _DIFFS],
        cwd=work,
        input=json.dumps(names),
        capture_output=True,
        text=True,
        check=True,
    )
    return {
        name: [
            line
            for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        for name, diff in json.loads(done.stdout).items()
    }


def reasons(kind: str) -> dict[str, tuple[str, str]]:
    """Mutant name -> (mutated line, reason) for ``kind``: ``equivalent`` or ``survivor``."""
    if not REASONS_TOML.exists():
        return {}
    data = tomllib.loads(REASONS_TOML.read_text(encoding="utf-8"))
    return {e["mutant"]: (e["mutated"], e["reason"]) for e in data.get(kind, [])}


@dataclass
class UnitResult:
    unit: str
    mutants: int = 0
    killed: int = 0
    pending: int = 0
    survivors: list[dict[str, object]] = field(default_factory=list)
    equivalent: list[dict[str, object]] = field(default_factory=list)
    seconds: float = 0.0
    date: str = ""

    @property
    def score(self) -> float | None:
        """Killed over checked, non-equivalent mutants (None: nothing checked yet)."""
        denominator = self.killed + len(self.survivors)
        return None if denominator == 0 else self.killed / denominator


def _mutated(diff: list[str]) -> list[str]:
    """The lines a reason's ``mutated`` text is looked for in: the ``+`` lines, or the ``-``
    lines of a mutant that only deletes."""
    return [line for line in diff if line[:1] == "+"] or [line for line in diff if line[:1] == "-"]


def summarise(unit: str, work: Path, seconds: float) -> UnitResult:
    known, explained = reasons("equivalent"), reasons("survivor")
    result = UnitResult(unit, seconds=seconds, date=f"{dt.date.today():%Y-%m-%d}")
    found = sorted(verdicts(work).items(), key=lambda kv: _natural(kv[0]))
    diffs = mutated_lines(work, [n for n, s in found if s not in KILLED and s not in PENDING])
    for name, status in found:
        result.mutants += 1
        if status in KILLED:
            result.killed += 1
        elif status in PENDING:
            result.pending += 1
        else:
            lines = diffs[name]
            entry: dict[str, object] = {"mutant": name, "status": status, "diff": lines}
            added = _mutated(lines)
            if name in known and any(known[name][0] in line for line in added):
                entry["reason"] = known[name][1]
                result.equivalent.append(entry)
            else:
                if name in explained and any(explained[name][0] in line for line in added):
                    entry["reason"] = explained[name][1]
                result.survivors.append(entry)
    return result


def renumber(result: UnitResult) -> list[tuple[str, str]]:
    """Move stale reasons to the mutants they now describe; return the ``(old, new)`` names.

    An edit to a function renumbers its mutants. A survivor without a reason takes over the one
    stale entry of the same function whose mutated line it contains (none or several: it is
    left for a person to judge). mutation_reasons.toml is rewritten in place when one moves.
    """
    if not REASONS_TOML.exists():
        return []
    text = REASONS_TOML.read_text(encoding="utf-8")
    data = tomllib.loads(text)
    entries = [entry for kind in ("equivalent", "survivor") for entry in data.get(kind, [])]
    found = result.survivors + result.equivalent
    used = {str(e["mutant"]) for e in found if "reason" in e}
    moved: list[tuple[str, str]] = []
    for survivor in result.survivors:
        if "reason" in survivor:
            continue
        name = str(survivor["mutant"])
        function = name.rpartition("__mutmut_")[0]
        added = _mutated(survivor["diff"])  # type: ignore[arg-type]  # list[str]
        stale = [
            entry["mutant"]
            for entry in entries
            if entry["mutant"].rpartition("__mutmut_")[0] == function
            and entry["mutant"] not in used
            and any(entry["mutated"] in line for line in added)
        ]
        if len(stale) == 1:
            used.add(stale[0])
            moved.append((stale[0], name))
    if moved:
        # all at once: moved one after the other, 133 -> 134 then 134 -> 135 would move the
        # first entry twice and leave the second
        new_name = dict(moved)
        text = re.sub(
            r'^mutant = "([^"]+)"$',
            lambda m: f'mutant = "{new_name.pop(m.group(1), m.group(1))}"',
            text,
            flags=re.MULTILINE,
        )
        REASONS_TOML.write_text(text, encoding="utf-8")
    return moved


def _natural(name: str) -> tuple[str, int]:
    head, _, number = name.rpartition("_")
    return (head, int(number)) if number.isdigit() else (name, 0)


def forget(work: Path, names: list[str]) -> None:
    """Mark the mutants ``names`` not checked, so that a plain ``mutmut run`` runs them again.

    Not ``mutmut run NAME...``: its clean run is the union of those mutants' tests in set (hash)
    order, and a few tests of this suite leak state into later ones (remote traffic counters,
    for one), so it fails at random; a plain run's clean run is the whole suite in file order.
    """
    wanted = set(names)
    for meta in (work / "mutants").rglob("*.meta"):
        data = json.loads(meta.read_text(encoding="utf-8"))
        codes = data.get("exit_code_by_key", {})
        if wanted & codes.keys():
            codes.update(dict.fromkeys(wanted & codes.keys()))
            meta.write_text(json.dumps(data), encoding="utf-8")


def rerun_names(found: dict[str, str], equivalent: dict[str, tuple[str, str]]) -> list[str]:
    """The mutants ``--rerun-survivors`` runs again: survivors and those not run yet (a run
    stopped, or failed, after forgetting survivors leaves them so), less the ``equivalent``
    ones (``--skip-equivalent``: no new test can kill those)."""
    return [n for n, s in found.items() if s in SURVIVED | PENDING and n not in equivalent]


def run_unit(
    unit: str,
    *,
    budget: float,
    children: int,
    rerun_survivors: bool,
    deselect: list[str],
    source: Path,
    skip_equivalent: bool = False,
) -> UnitResult:
    work = WORK / slug(unit)
    work.mkdir(parents=True, exist_ok=True)
    sync(work, source)
    refresh_mutants(work, unit)
    configure(work, unit, deselect)
    seeded = seed_verdicts(unit, work)
    if seeded:
        print(
            f"{slug(unit)}: {seeded} verdicts of earlier runs (mutation_verdicts.json)", flush=True
        )
    names: list[str] = []
    if rerun_survivors:
        # pending ones too: a run stopped (or failed) after forgetting the survivors left them so
        known = reasons("equivalent") if skip_equivalent else {}
        names = rerun_names(verdicts(work), known)
        # new tests must be seen by the stats run that maps tests to functions
        (work / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
        forget(work, names)
        if not names:
            print(f"{slug(unit)}: no survivors to re-run", flush=True)
    start = time.monotonic()
    if names or not rerun_survivors:
        print(f"{slug(unit)}: mutmut run (budget {budget:.0f} s)", flush=True)
        done = mutmut(work, "run", "--max-children", str(children), timeout=budget)
        if done.returncode not in (0, -signal.SIGINT, -signal.SIGKILL):
            print(f"{slug(unit)}: mutmut failed; see {work / 'mutmut.log'}", flush=True)
    result = summarise(unit, work, time.monotonic() - start)
    keep_verdicts(unit, work)
    print(f"{slug(unit)}: {_row(result)}", flush=True)
    return result


def load_results() -> dict[str, dict[str, object]]:
    if RESULTS_JSON.exists():
        loaded: dict[str, dict[str, object]] = json.loads(RESULTS_JSON.read_text("utf-8"))
        return loaded
    return {}


def save(results: dict[str, dict[str, object]]) -> None:
    order = {u: i for i, u in enumerate(units())}
    ordered = dict(sorted(results.items(), key=lambda kv: order.get(kv[0], len(order))))
    RESULTS_JSON.write_text(json.dumps(ordered, indent=1) + "\n", encoding="utf-8")
    RESULTS_MD.write_text(render(ordered), encoding="utf-8")


def _row(r: UnitResult) -> str:
    score = "-" if r.score is None else f"{r.score:.1%}"
    left = f", {r.pending} not run" if r.pending else ""
    return (
        f"{r.mutants} mutants, {r.killed} killed, {len(r.survivors)} survived, "
        f"{len(r.equivalent)} equivalent{left}: {score}"
    )


def _from_json(data: dict[str, object]) -> UnitResult:
    return UnitResult(**data)  # type: ignore[arg-type]  # the JSON was written from a UnitResult


def render(results: dict[str, dict[str, object]]) -> str:
    rows = [_from_json(d) for d in results.values()]
    lines = [
        "# Mutation testing",
        "",
        "Written by `python benchmarks/mutation.py` (mutmut, config in `pyproject.toml`",
        "`[tool.mutmut]`); see README, Development. Score = killed / (killed + survived);",
        "equivalent mutants (the same behaviour as the original, reasons below and in",
        "`benchmarks/mutation_reasons.toml`) and mutants not run yet are left out. Every survivor",
        "is listed with the reason no test kills it (`[[survivor]]` in the same file); one marked",
        "*no tests* is code the fast tiers never reach.",
        "",
        "| unit | mutants | killed | survived | equivalent | not run | score | run on | run time |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    total = UnitResult("total")
    for r in rows:
        score = "-" if r.score is None else f"{r.score:.1%}"
        lines.append(
            f"| `{r.unit}` | {r.mutants} | {r.killed} | {len(r.survivors)} | "
            f"{len(r.equivalent)} | {r.pending} | {score} | {r.date} | {r.seconds:.0f} s |"
        )
        total.mutants += r.mutants
        total.killed += r.killed
        total.pending += r.pending
        total.survivors += r.survivors
        total.equivalent += r.equivalent
    score = "-" if total.score is None else f"{total.score:.1%}"
    lines.append(
        f"| **total** | {total.mutants} | {total.killed} | {len(total.survivors)} | "
        f"{len(total.equivalent)} | {total.pending} | **{score}** | | |"
    )
    lines += ["", "## Survivors", ""]
    if not total.survivors:
        lines.append("None.")
    unexplained = sum(1 for s in total.survivors if not s.get("reason"))
    if unexplained:
        lines += [f"**{unexplained} without a recorded reason yet.**", ""]
    for s in total.survivors:
        diff = "; ".join(f"`{d}`" for d in s["diff"])  # type: ignore[attr-defined]  # list[str]
        lines.append(f"- `{s['mutant']}` ({s['status']}): {diff}")
        if s.get("reason"):
            lines.append(f"  {s['reason']}")
    lines += ["", "## Equivalent mutants", ""]
    if not total.equivalent:
        lines.append("None.")
    for e in total.equivalent:
        plus = [d for d in e["diff"] if d.startswith("+")]  # type: ignore[attr-defined]  # list[str]
        lines.append(f"- `{e['mutant']}`: `{'; '.join(plus)}` — {e['reason']}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("units", nargs="*", help="units to run (default: all), e.g. dtypes.py")
    parser.add_argument("--list", action="store_true", help="list the units and exit")
    parser.add_argument("--jobs", type=int, default=2, help="units run side by side")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="cores to use")
    parser.add_argument(
        "--budget", type=float, default=1200, help="seconds per unit before it is stopped"
    )
    parser.add_argument(
        "--rerun-survivors", action="store_true", help="re-run only survivors (after new tests)"
    )
    parser.add_argument(
        "--skip-equivalent",
        action="store_true",
        help="with --rerun-survivors: leave out the survivors recorded as equivalent",
    )
    parser.add_argument("--fresh", action="store_true", help="forget earlier verdicts")
    parser.add_argument(
        "--deselect",
        action="append",
        default=[],
        metavar="NODEID",
        help="leave a test out (one failing for reasons outside the unit); repeatable",
    )
    parser.add_argument(
        "--report", action="store_true", help="only re-read the verdicts, rewrite MUTATION.md"
    )
    parser.add_argument(
        "--renumber",
        action="store_true",
        help="with --report: move stale reasons to the renumbered mutants they describe",
    )
    parser.add_argument(
        "--source",
        type=Path,
        default=REPO,
        help="tree to test (default: this working tree), e.g. an unpacked `git archive HEAD`",
    )
    args = parser.parse_args()
    if args.list:
        for unit in units():
            print(f"{slug(unit):28} {unit}")
        return
    results = load_results()
    if args.report:  # re-read the verdicts (and mutation_reasons.toml) of every copy
        for unit in units():
            work = WORK / slug(unit)
            if (work / "mutants").is_dir():
                seconds = float(results.get(unit, {}).get("seconds", 0.0))  # type: ignore[arg-type]  # a float in the JSON
                result = summarise(unit, work, seconds)
                if args.renumber and (moved := renumber(result)):
                    for old, new in moved:
                        print(f"{old} -> {new}")
                    result = summarise(unit, work, seconds)
                results[unit] = result.__dict__
                keep_verdicts(unit, work)
        save(results)
        return
    chosen = resolve(args.units) if args.units else units()
    if args.fresh:
        stored = _stored_verdicts()
        for unit in chosen:
            shutil.rmtree(WORK / slug(unit) / "mutants", ignore_errors=True)
            stored.pop(unit, None)
        if VERDICTS_JSON.exists():
            _write_verdicts(stored)
    jobs = max(1, min(args.jobs, len(chosen)))
    children = max(1, args.cores // jobs)
    with ThreadPoolExecutor(jobs) as pool:
        futures = [
            pool.submit(
                run_unit,
                unit,
                budget=args.budget,
                children=children,
                rerun_survivors=args.rerun_survivors,
                skip_equivalent=args.skip_equivalent,
                deselect=args.deselect,
                source=args.source.resolve(),
            )
            for unit in chosen
        ]
        for future in futures:
            result = future.result()
            results[result.unit] = result.__dict__
            save(results)  # after every unit: a stopped run keeps what it finished
    print(f"wrote {RESULTS_MD.relative_to(REPO)}")


if __name__ == "__main__":
    main()

"""benchmarks/mutation.py: how verdicts and hand-written reasons become MUTATION.md (issue 17).

mutmut itself is not needed: the harness's calls into it are replaced by fixed verdicts.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import tomllib

from tests.conftest import REPO

REASONS = REPO / "benchmarks" / "mutation_reasons.toml"


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation", REPO / "benchmarks" / "mutation.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "mutation", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _fake_run(
    harness: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, reasons: str
) -> ModuleType:
    toml = tmp_path / "reasons.toml"
    toml.write_text(reasons, encoding="utf-8")
    monkeypatch.setattr(harness, "REASONS_TOML", toml)
    verdicts = {
        "ckptctl.m.x_f__mutmut_1": "killed",
        "ckptctl.m.x_f__mutmut_2": "survived",  # equivalent
        "ckptctl.m.x_f__mutmut_3": "survived",  # explained survivor
        "ckptctl.m.x_f__mutmut_4": "survived",  # stale entry: the mutant changed
        "ckptctl.m.x_f__mutmut_10": "no tests",  # no entry
        "ckptctl.m.x_f__mutmut_5": "not checked",
    }
    diffs = {
        "ckptctl.m.x_f__mutmut_2": ["-    a = 1", "+    a = 1.0"],
        "ckptctl.m.x_f__mutmut_3": ["-    b = x", "+    b = None"],
        "ckptctl.m.x_f__mutmut_4": ["-    c = y", "+    c = z"],
        "ckptctl.m.x_f__mutmut_10": ["-    d = 0", "+    d = 1"],
    }
    monkeypatch.setattr(harness, "verdicts", lambda work: verdicts)
    monkeypatch.setattr(
        harness, "mutated_lines", lambda work, names: {name: diffs[name] for name in names}
    )
    return harness


def test_reasons_sort_mutants_into_equivalent_explained_and_unexplained(
    harness: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    reasons = """
[[equivalent]]
mutant = "ckptctl.m.x_f__mutmut_2"
mutated = "a = 1.0"
reason = "an int and a float compare equal here"

[[survivor]]
mutant = "ckptctl.m.x_f__mutmut_3"
mutated = "b = None"
reason = "only reachable with a 100 MiB input"

[[survivor]]
mutant = "ckptctl.m.x_f__mutmut_4"
mutated = "c = w"
reason = "stale: the mutant now writes z"
"""
    result = _fake_run(harness, monkeypatch, tmp_path, reasons).summarise("u", tmp_path, 1.0)
    assert (result.mutants, result.killed, result.pending) == (6, 1, 1)
    assert [e["mutant"] for e in result.equivalent] == ["ckptctl.m.x_f__mutmut_2"]
    survivors = {s["mutant"]: s.get("reason") for s in result.survivors}
    assert survivors == {
        "ckptctl.m.x_f__mutmut_3": "only reachable with a 100 MiB input",
        "ckptctl.m.x_f__mutmut_4": None,
        "ckptctl.m.x_f__mutmut_10": None,  # natural order: 10 after 4
    }
    assert list(survivors) == sorted(survivors, key=lambda n: int(n.rpartition("_")[2]))
    assert result.score == pytest.approx(1 / 4)
    text = harness.render({"u": result.__dict__})
    assert "| `u` | 6 | 1 | 3 | 1 | 1 | 25.0% |" in text
    assert "**2 without a recorded reason yet.**" in text
    assert "  only reachable with a 100 MiB input" in text
    assert "`+    a = 1.0` — an int and a float compare equal here" in text


def test_no_reason_line_when_every_survivor_is_explained(
    harness: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    reasons = "".join(
        f'[[survivor]]\nmutant = "ckptctl.m.x_f__mutmut_{n}"\nmutated = "{m}"\nreason = "r{n}"\n'
        for n, m in ((2, "a = 1.0"), (3, "b = None"), (4, "c = z"), (10, "d = 1"))
    )
    result = _fake_run(harness, monkeypatch, tmp_path, reasons).summarise("u", tmp_path, 1.0)
    assert [s["reason"] for s in result.survivors] == ["r2", "r3", "r4", "r10"]
    assert result.equivalent == []
    assert "without a recorded reason" not in harness.render({"u": result.__dict__})


def test_a_reason_for_a_deletion_matches_its_minus_line(
    harness: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    reasons = """
[[equivalent]]
mutant = "ckptctl.m.x_f__mutmut_3"
mutated = "None,"
reason = "the default is None"
"""
    module = _fake_run(harness, monkeypatch, tmp_path, reasons)
    deleted = {"ckptctl.m.x_f__mutmut_3": ["-        None,"]}
    plain = module.mutated_lines
    monkeypatch.setattr(
        module, "mutated_lines", lambda work, names: {**plain(work, names), **deleted}
    )
    result = module.summarise("u", tmp_path, 1.0)
    assert [(e["mutant"], e["reason"]) for e in result.equivalent] == [
        ("ckptctl.m.x_f__mutmut_3", "the default is None")
    ]


def test_renumber_moves_a_stale_reason_to_the_mutant_it_describes(
    harness: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # An edit renumbered f's mutants: the reason written for mutant 9 ("c = z") now belongs to
    # mutant 4, the one for 7 ("d = 1") to 10; mutant 8's line matches no survivor, and g's
    # entry ("b = None", like f's mutant 3) stays with g.
    reasons = """
[[survivor]]
mutant = "ckptctl.m.x_f__mutmut_9"
mutated = "c = z"
reason = "r9"

[[equivalent]]
mutant = "ckptctl.m.x_f__mutmut_7"
mutated = "d = 1"
reason = "r7"

[[survivor]]
mutant = "ckptctl.m.x_f__mutmut_8"
mutated = "q = 0"
reason = "r8"

[[survivor]]
mutant = "ckptctl.m.x_g__mutmut_4"
mutated = "b = None"
reason = "another function: never moved to f"
"""
    module = _fake_run(harness, monkeypatch, tmp_path, reasons)
    result = module.summarise("u", tmp_path, 1.0)
    assert module.renumber(result) == [
        ("ckptctl.m.x_f__mutmut_9", "ckptctl.m.x_f__mutmut_4"),
        ("ckptctl.m.x_f__mutmut_7", "ckptctl.m.x_f__mutmut_10"),
    ]
    again = module.summarise("u", tmp_path, 1.0)
    assert [e["mutant"] for e in again.equivalent] == ["ckptctl.m.x_f__mutmut_10"]
    assert {s["mutant"]: s.get("reason") for s in again.survivors} == {
        "ckptctl.m.x_f__mutmut_2": None,
        "ckptctl.m.x_f__mutmut_3": None,
        "ckptctl.m.x_f__mutmut_4": "r9",
    }
    assert module.renumber(again) == []  # nothing stale left that matches


def test_renumber_moves_a_chain_of_reasons_each_once(
    harness: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # every mutant of f moved up by one: 2's reason is now 3's, 3's is now 4's
    reasons = """
[[survivor]]
mutant = "ckptctl.m.x_f__mutmut_2"
mutated = "b = None"
reason = "r2"

[[survivor]]
mutant = "ckptctl.m.x_f__mutmut_3"
mutated = "c = z"
reason = "r3"
"""
    module = _fake_run(harness, monkeypatch, tmp_path, reasons)
    assert module.renumber(module.summarise("u", tmp_path, 1.0)) == [
        ("ckptctl.m.x_f__mutmut_2", "ckptctl.m.x_f__mutmut_3"),
        ("ckptctl.m.x_f__mutmut_3", "ckptctl.m.x_f__mutmut_4"),
    ]
    again = module.summarise("u", tmp_path, 1.0)
    assert {s["mutant"]: s.get("reason") for s in again.survivors} == {
        "ckptctl.m.x_f__mutmut_2": None,
        "ckptctl.m.x_f__mutmut_3": "r2",
        "ckptctl.m.x_f__mutmut_4": "r3",
        "ckptctl.m.x_f__mutmut_10": None,
    }


def test_the_reasons_file_is_well_formed() -> None:
    data = tomllib.loads(REASONS.read_text(encoding="utf-8"))
    assert set(data) <= {"equivalent", "survivor"}
    seen: set[str] = set()
    for entries in data.values():
        for entry in entries:
            assert set(entry) == {"mutant", "mutated", "reason"}, entry
            assert entry["mutant"].startswith("ckptctl."), entry
            assert "__mutmut_" in entry["mutant"], entry
            assert entry["mutated"].strip(), entry
            assert entry["reason"].strip(), entry
            assert entry["mutant"] not in seen, f"{entry['mutant']} listed twice"
            seen.add(entry["mutant"])


def test_rerun_names_are_survivors_and_pending_less_the_equivalent(harness: ModuleType) -> None:
    found = {
        "m.x_f__mutmut_1": "killed",
        "m.x_f__mutmut_2": "survived",
        "m.x_f__mutmut_3": "survived",
        "m.x_f__mutmut_4": "no tests",
        "m.x_f__mutmut_5": "not checked",
        "m.x_f__mutmut_6": "timeout",
    }
    every = ["m.x_f__mutmut_2", "m.x_f__mutmut_3", "m.x_f__mutmut_4", "m.x_f__mutmut_5"]
    assert harness.rerun_names(found, {}) == every
    equivalent = {"m.x_f__mutmut_2": ("a = 1.0", "the same float"), "m.x_f__mutmut_9": ("", "")}
    assert harness.rerun_names(found, equivalent) == [n for n in every if n != every[0]]


def _meta(codes: dict[str, int | None], hashes: dict[str, str]) -> dict[str, object]:
    return {
        "exit_code_by_key": codes,
        "hash_by_function_name": hashes,
        "type_check_error_by_key": {},
        "durations_by_key": {},
        "estimated_durations_by_key": {},
    }


def test_verdicts_kept_in_the_repository_seed_a_new_copy(
    harness: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A unit's verdicts travel to another machine: kept compactly, written back as mutmut's
    .meta files of a copy that has none, for mutmut to keep where a function is unchanged."""
    import json

    monkeypatch.setattr(harness, "VERDICTS_JSON", tmp_path / "verdicts.json")
    old = tmp_path / "old" / "mutants" / "ckptctl" / "adapters"
    old.mkdir(parents=True)
    codes = {
        "ckptctl.adapters.m.x_f__mutmut_1": 1,
        "ckptctl.adapters.m.x_f__mutmut_2": 0,
        "ckptctl.adapters.m.x_f__mutmut_4": None,
        "ckptctl.adapters.m.x_f__mutmut_3": -24,
        "ckptctl.adapters.m.xǁCǁg__mutmut_1": 33,
    }
    hashes = {"x_f": "aa", "xǁCǁg": "bb"}
    (old / "m.py.meta").write_text(json.dumps(_meta(codes, hashes)), encoding="utf-8")
    (tmp_path / "old" / "mutants" / "ckptctl" / "other.py.meta").write_text(
        json.dumps(_meta({"ckptctl.other.x_h__mutmut_1": 1}, {})), encoding="utf-8"
    )
    harness.keep_verdicts("ckptctl/adapters/*", tmp_path / "old")
    stored = json.loads((tmp_path / "verdicts.json").read_text(encoding="utf-8"))
    assert stored == {
        "ckptctl/adapters/*": {
            "ckptctl/adapters/m.py": {
                "hashes": hashes,
                "verdicts": {
                    "ckptctl.adapters.m.x_f": "1,0,-24,",
                    "ckptctl.adapters.m.xǁCǁg": "33",
                },
            }
        }
    }
    new = tmp_path / "new"
    assert harness.seed_verdicts("ckptctl/adapters/*", new) == 4
    seeded = json.loads((new / "mutants" / "ckptctl" / "adapters" / "m.py.meta").read_text("utf-8"))
    assert seeded == _meta(codes, hashes)
    assert not (new / "mutants" / "ckptctl" / "other.py.meta").exists()  # another unit's
    assert harness.seed_verdicts("ckptctl/dtypes.py", new) == 0  # nothing kept for it


def test_seeding_leaves_a_copy_with_mutants_alone(
    harness: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import json

    monkeypatch.setattr(harness, "VERDICTS_JSON", tmp_path / "verdicts.json")
    stored = {"ckptctl/m.py": {"hashes": {"x_f": "aa"}, "verdicts": {"ckptctl.m.x_f": "1,1"}}}
    (tmp_path / "verdicts.json").write_text(json.dumps({"ckptctl/m.py": stored}), "utf-8")
    mutants = tmp_path / "work" / "mutants" / "ckptctl"
    mutants.mkdir(parents=True)
    (mutants / "m.py").write_text("# mutants of this run\n", encoding="utf-8")
    assert harness.seed_verdicts("ckptctl/m.py", tmp_path / "work") == 0
    assert not (mutants / "m.py.meta").exists()
    (mutants / "m.py").unlink()
    (mutants / "m.py.meta").write_text("{}", encoding="utf-8")
    assert harness.seed_verdicts("ckptctl/m.py", tmp_path / "work") == 0
    assert (mutants / "m.py.meta").read_text(encoding="utf-8") == "{}"
    (mutants / "m.py.meta").unlink()
    assert harness.seed_verdicts("ckptctl/m.py", tmp_path / "work") == 2


@pytest.mark.parametrize(
    ("under_test", "before", "bounded"),
    [
        ("ckptctl.m.x_f__mutmut_3", -1, True),  # a mutant's run, no limit yet
        ("ckptctl.m.x_f__mutmut_3", 64 << 30, True),
        ("ckptctl.m.x_f__mutmut_3", 1 << 30, False),  # a lower limit stays
        ("", -1, False),  # mutmut's clean run
        ("stats", -1, False),
        (None, -1, False),  # not under mutmut
    ],
)
def test_a_mutants_test_process_gets_a_bounded_address_space(
    monkeypatch: pytest.MonkeyPatch, under_test: str | None, before: int, bounded: bool
) -> None:
    import resource

    from tests import conftest

    if under_test is None:
        monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
    else:
        monkeypatch.setenv("MUTANT_UNDER_TEST", under_test)
    before = resource.RLIM_INFINITY if before == -1 else before
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (before, resource.RLIM_INFINITY))
    set_to: list[tuple[int, tuple[int, int]]] = []
    monkeypatch.setattr(resource, "setrlimit", lambda kind, limits: set_to.append((kind, limits)))
    conftest.pytest_configure(None)  # type: ignore[arg-type]  # the hook does not use it
    want = [(resource.RLIMIT_AS, (16 << 30, resource.RLIM_INFINITY))] if bounded else []
    assert set_to == want

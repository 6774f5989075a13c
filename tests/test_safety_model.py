"""``ckptctl.safety``: how globals and problems add up to a verdict and its one-line summary.

The verdict model of issue #11, checked exactly (issue #17): the order of the verdicts, what an
unreached stream changes (nothing), what ``--allow-global`` may trust (needs-trust only), and the
text ``ls``/``verify`` print.
"""

from __future__ import annotations

import pytest

from ckptctl.safety import GlobalUse, PickleSafety, Problem, Verdict, worst

SAFE, TRUST, UNSAFE = Verdict.SAFE, Verdict.NEEDS_TRUST, Verdict.UNSAFE


def use(name: str, verdict: Verdict, *, reached: bool = True, **kw: object) -> GlobalUse:
    return GlobalUse(name, verdict, "data.pkl", reached=reached, **kw)  # type: ignore[arg-type]


def test_verdicts_are_ordered_and_spelled_as_in_the_cli_contract() -> None:
    assert [(v.value, v.rank) for v in Verdict] == [
        ("safe", 0),
        ("needs-trust", 1),
        ("unsafe", 2),
    ]


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        ([], SAFE),
        ([SAFE], SAFE),
        ([TRUST, SAFE], TRUST),
        ([SAFE, UNSAFE, TRUST], UNSAFE),
        ([UNSAFE, TRUST], UNSAFE),
        ([TRUST, TRUST], TRUST),
    ],
)
def test_worst(verdicts: list[Verdict], expected: Verdict) -> None:
    assert worst(verdicts) is expected
    assert worst(iter(verdicts)) is expected  # any iterable, read once


def test_defaults_describe_a_reached_named_global() -> None:
    g = GlobalUse("torch._utils._rebuild_tensor_v2", SAFE, "data.pkl")
    assert (g.reason, g.called, g.reached) == (None, False, True)
    assert Problem("m", TRUST, "data.pkl").reached is True
    assert PickleSafety().verdict is SAFE
    assert PickleSafety().unreached_verdict is None


def test_only_reached_streams_decide_the_verdict() -> None:
    unreached_only = PickleSafety(
        (use("os.system", UNSAFE, reached=False), use("collections.OrderedDict", SAFE)),
        (Problem("EXT1 code", UNSAFE, "extra.pkl", reached=False),),
    )
    assert unreached_only.verdict is SAFE
    assert unreached_only.unreached_verdict is UNSAFE
    by_problem = PickleSafety((use("collections.OrderedDict", SAFE),), (Problem("x", TRUST, "d"),))
    assert by_problem.verdict is TRUST
    assert by_problem.unreached_verdict is None
    by_global = PickleSafety((use("argparse.Namespace", TRUST),))
    assert by_global.verdict is TRUST


def test_unreached_verdict_takes_globals_and_problems() -> None:
    from_problem = PickleSafety(
        (use("a.B", TRUST, reached=False),), (Problem("p", UNSAFE, "x", reached=False),)
    )
    assert from_problem.unreached_verdict is UNSAFE
    from_global = PickleSafety((use("a.B", TRUST, reached=False),))
    assert from_global.unreached_verdict is TRUST
    safe_but_present = PickleSafety((use("collections.OrderedDict", SAFE, reached=False),))
    assert safe_but_present.unreached_verdict is SAFE


def test_untrusted_lists_reached_globals_worst_first_then_in_order() -> None:
    safety = PickleSafety(
        (
            use("a.First", TRUST),
            use("b.Second", UNSAFE),
            use("c.Safe", SAFE),
            use("d.Third", TRUST),
            use("e.Unreached", UNSAFE, reached=False),
            use("f.Fourth", UNSAFE),
        )
    )
    assert [g.name for g in safety.untrusted()] == ["b.Second", "f.Fourth", "a.First", "d.Third"]


def test_allowing_trusts_only_needs_trust_globals() -> None:
    safety = PickleSafety(
        (
            use("m.Model", TRUST, called=True, reason="not in torch's allowlist"),
            use("os.system", UNSAFE, reason="runs a shell command"),
            use("m.Other", TRUST),
        )
    )
    assert safety.allowing([]) is safety
    allowed = safety.allowing(["m.Model", "os.system", "not.Used"])
    model, system, other = allowed.globals
    assert model == GlobalUse(
        "m.Model", SAFE, "data.pkl", reason="explicitly allowed", called=True, reached=True
    )
    assert system == safety.globals[1]  # an unsafe global stays unsafe
    assert other == safety.globals[2]
    assert allowed.verdict is UNSAFE
    assert safety.allowing(["m.Model", "m.Other"]).globals[2].verdict is SAFE
    only_trust = PickleSafety((safety.globals[0], safety.globals[2]))
    assert only_trust.allowing(["m.Model"]).verdict is TRUST
    assert only_trust.allowing(("m.Model", "m.Other")).verdict is SAFE  # any collection


def test_merge_prefixes_the_other_streams() -> None:
    mine = PickleSafety((use("a.A", TRUST),), (Problem("p1", TRUST, "data.pkl"),))
    nested = PickleSafety(
        (GlobalUse("b.B", UNSAFE, "inner.pkl", called=True),),
        (Problem("p2", UNSAFE, "inner.pkl", reached=False),),
    )
    merged = mine.merge(nested, prefix="data.pkl > ")
    assert [(g.name, g.where, g.called) for g in merged.globals] == [
        ("a.A", "data.pkl", False),
        ("b.B", "data.pkl > inner.pkl", True),
    ]
    assert [(p.message, p.where, p.reached) for p in merged.problems] == [
        ("p1", "data.pkl", True),
        ("p2", "data.pkl > inner.pkl", False),
    ]
    assert mine.merge(nested).globals[1].where == "inner.pkl"  # no prefix by default


def test_describe_safe() -> None:
    assert PickleSafety().describe() == "safe (only what torch.load(weights_only=True) accepts)"


def test_describe_names_the_untrusted_globals_up_to_the_limit() -> None:
    names = [f"m.C{i}" for i in range(6)]
    safety = PickleSafety((*tuple(use(n, UNSAFE) for n in names), use("m.C0", UNSAFE)))
    assert safety.describe() == "unsafe: m.C0, m.C1, m.C2, m.C3 and 2 more"
    assert safety.describe(limit=6) == "unsafe: m.C0, m.C1, m.C2, m.C3, m.C4, m.C5"
    assert safety.describe(limit=5) == "unsafe: m.C0, m.C1, m.C2, m.C3, m.C4 and 1 more"
    four = PickleSafety(tuple(use(n, TRUST) for n in names[:4]))
    assert four.describe() == "needs-trust: m.C0, m.C1, m.C2, m.C3"


def test_describe_falls_back_to_the_first_problem_of_that_verdict() -> None:
    safety = PickleSafety(
        (use("collections.OrderedDict", SAFE),),
        (
            Problem("a needs-trust construct", TRUST, "data.pkl"),
            Problem("an unreached call", UNSAFE, "extra.pkl", reached=False),
            Problem("EXT1 extension code", UNSAFE, "data.pkl"),
            Problem("a second unsafe construct", UNSAFE, "data.pkl"),
        ),
    )
    assert safety.describe() == (
        "unsafe: EXT1 extension code; streams torch.load does not read are unsafe"
    )


def test_describe_adds_unreached_streams_only_when_they_need_trust() -> None:
    base = (use("collections.OrderedDict", SAFE),)
    quiet = PickleSafety((*base, use("collections.OrderedDict", SAFE, reached=False)))
    assert quiet.describe() == "safe (only what torch.load(weights_only=True) accepts)"
    loud = PickleSafety((*base, use("m.Model", TRUST, reached=False)))
    assert loud.describe() == (
        "safe (only what torch.load(weights_only=True) accepts); streams torch.load does not "
        "read are needs-trust"
    )

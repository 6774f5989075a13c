"""The registry of ``verify``'s checks: each module of ``ckptctl/ops/verify/`` is one check,
and what it declares reaches ``--check``, the configuration file, the run and SARIF."""

from __future__ import annotations

import pkgutil

import pytest

import ckptctl.ops.verify as package
from ckptctl.errors import ExitCode, SelectionError
from ckptctl.ops.config import CONFIG_KEYS, SETTINGS
from ckptctl.ops.verify import ALWAYS_REPORTED, CHECKS, verify
from ckptctl.ops.verify._check import Phase
from ckptctl.ops.verify._registry import REGISTRY
from tests.conftest import VALID

MIN_ZIP = VALID / "pytorch" / "min_zip.pt"


def test_every_public_module_is_one_check_named_after_it():
    modules = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name[0] != "_")
    assert sorted(c.name.replace("-", "_") for c in REGISTRY) == modules
    assert tuple(c.name for c in REGISTRY) == CHECKS
    assert [c.order for c in REGISTRY] == sorted({c.order for c in REGISTRY})


def test_the_check_list_keeps_its_order():
    # --check choices, the "checks:" hint and SARIF's rule indexes follow this order
    assert CHECKS[:3] == ("readable", "lfs-pointer", "safe-pickle")
    assert CHECKS.index("flat-reader") < CHECKS.index("gguf-layout") < CHECKS.index("hashes")
    assert ALWAYS_REPORTED == ("readable", "lfs-pointer")


def test_what_a_check_declares_is_consistent():
    for check in REGISTRY:
        assert check.short, check.name
        # the runner makes the OPEN findings and the flat-reader gate; every other check runs
        assert (check.run is None) == (check.phase in (Phase.OPEN, Phase.SELECT)), check.name
        if check.option is not None:
            assert check.phase is Phase.ENTRIES, check.name
        assert not (check.reported_only and check.fails_as is not None), check.name


def test_options_of_checks_are_settings_or_verify_keywords():
    params = {s.param for s in SETTINGS.values()}
    keywords = set(verify.__kwdefaults__ or {})
    for check in REGISTRY:
        if check.option is not None:
            assert check.option in keywords, check.name
    assert {"no_nan", "min_tensors"} <= params & keywords
    assert tuple(SETTINGS) == CONFIG_KEYS


def test_unknown_check_names_the_first_in_sorted_order_and_lists_them_all():
    with pytest.raises(SelectionError, match="'alpha'") as info:
        verify([MIN_ZIP], checks=["zeta", "alpha"])
    assert info.value.hint == "checks: " + ", ".join(CHECKS)
    assert info.value.exit_code == ExitCode.USAGE
    with pytest.raises(SelectionError, match="'bogus'"):
        verify([MIN_ZIP], skip=["bogus"])


@pytest.mark.parametrize("check", ALWAYS_REPORTED)
def test_always_reported_checks_cannot_be_skipped(check):
    with pytest.raises(SelectionError, match=rf"\b{check}\b.*cannot be skipped") as info:
        verify([MIN_ZIP], skip=[check])
    assert info.value.hint is None


def test_the_report_describes_every_check_for_sarif():
    report = verify([MIN_ZIP])
    assert [r.check for r in report.rules] == list(CHECKS)
    security = {r.check for r in report.rules if r.security_severity is not None}
    assert security == {"safe-pickle", "chat-template"}

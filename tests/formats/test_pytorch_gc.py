"""Opening a ``.pt`` pauses the cyclic GC while it parses, and always turns it back on (#15)."""

from __future__ import annotations

import contextlib
import gc

import pytest

from ckptctl import open_checkpoint
from ckptctl.errors import CkptError
from tests.conftest import HOSTILE, VALID


@pytest.fixture
def gc_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:  # pragma: no cover - pytest runs with the collector on
        gc.disable()


@pytest.mark.usefixtures("gc_on")
def test_gc_is_back_on_after_a_good_file():
    with open_checkpoint(VALID / "pytorch" / "module.pt") as ckpt:
        assert len(ckpt) > 0
    assert gc.isenabled()


@pytest.mark.usefixtures("gc_on")
@pytest.mark.parametrize(
    "path", sorted((HOSTILE / "limits").glob("pkl_*.pkl")), ids=lambda p: p.name
)
def test_gc_is_back_on_after_a_hostile_file(path):
    with contextlib.suppress(CkptError):  # most are refused; either way the GC is back
        open_checkpoint(path).close()
    assert gc.isenabled()


def test_gc_stays_off_when_the_caller_turned_it_off():
    was = gc.isenabled()
    gc.disable()
    try:
        with open_checkpoint(VALID / "pytorch" / "module.pt"):
            pass
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()

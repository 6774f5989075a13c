"""How many tests copy the words of a product message (issue 47), and the ratchet on it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests._pins import REPO, Pin, pins, product_grams, share

if TYPE_CHECKING:
    from pathlib import Path

#: The highest share of test functions that may copy five or more consecutive words of a
#: product message. It is a ratchet: set to the share measured when it was last lowered,
#: rounded up, so a new pin fails this test and the share can only go down. Lower it whenever
#: an area's tests are rewritten to check the error class and the facts instead of the
#: sentence; issue 47 is done at 0.10. Measured: 26.8 % (517 of 1930 test functions) when it
#: was set; 24.7 % (471 of 1908) after the adapters' mutant files were folded into their areas;
#: 21.2 % (434 of 2045) after those of convert, matching and the structural match were;
#: 16.3 % (335 of 2053) after six of the formats' and io's mutant files were (each measured
#: alone); 14.3 % (291 of 2038) with both; 11.2 % (226 of 2023) with verify's folded too;
#: 8.7 % (181 of 2092) with burnpack's, the unpickler's and the last adapters' folded;
#: 6.0 % (125 of 2089) with the PyTorch containers' (TAR, legacy, plain, ZIP) folded.
CEILING = 0.06


def test_the_share_of_tests_that_pin_messages_only_goes_down() -> None:
    found = pins()
    pinned = [f"{p.path.relative_to(REPO)}::{p.name}" for p in found if p.words is not None]
    assert len(found) > 1000  # the whole tree was read
    assert share(found) <= CEILING, f"{len(pinned)} of {len(found)} tests pin messages"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_a_copy_counts_through_helpers_and_tables_but_not_docstrings(tmp_path: Path) -> None:
    write(
        tmp_path / "ckptctl" / "m.py",
        '"""the module docstring has five words or more"""\n'
        'def f(n):\n    raise ValueError(f"quokka {n} naps beside the ferns of Rottnest")\n',
    )
    grams = product_grams(tmp_path / "ckptctl")
    assert ("naps", "beside", "the", "ferns", "of") in grams
    assert ("the", "module", "docstring", "has", "five") not in grams
    tests = write(
        tmp_path / "tests" / "test_m.py",
        "import pytest\n"
        "WHOLE = 'Naps beside the FERNS of Rottnest'\n"
        "def expected():\n    return WHOLE\n"
        "def test_helper():\n    assert expected()\n"
        "@pytest.mark.parametrize('m', [r'beside\\ the\\ ferns\\ of\\ rottnest'])\n"
        "def test_table(m):\n    pass\n"
        "def test_four_words():\n    assert 'beside the ferns of'\n"
        "def test_docstring():\n    '''naps beside the ferns of Rottnest'''\n"
        "class TestC:\n    def test_method(self):\n        assert 'naps beside the ferns of'\n",
    )
    found = pins(tests.parent, grams)
    assert [(p.name, p.words is not None) for p in found] == [
        ("test_helper", True),
        ("test_table", True),
        ("test_four_words", False),
        ("test_docstring", False),
        ("test_method", True),
    ]
    assert share(found) == 3 / 5
    assert share([]) == 0.0
    assert Pin(tests, "t", None).words is None

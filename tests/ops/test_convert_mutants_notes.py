"""What ``convert`` advises and how it names a sharded output, pinned where mutation testing
found gaps (issue 17).

Covers three helpers of ``ckptctl.ops.convert``: the RoPE note (``_rope_note``: its text word
for word, spelled for Python and for the command line, shown when Hugging Face's q/k
projections land on Meta's ``wq``/``wk`` without a target), the ``ties`` a target suggests
(``_suggest_ties``: the first nine missing names are tried, one passed over does not end the
search, each copy is checked as the conversion runs, module classes of a whole-model file
included, and a copy the pipeline would drop or rename is never suggested), and the format a
sharded output reports (``_sharded_format``: the index written alone). Expected values come
from the README ("What ports do in code has options too", "A consolidated output bigger than
one machine"), the option names in man/ckptctl-convert.1, the burn_modules fixtures
(make_burn_modules.py) and tensors written in each test.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pytest

from ckptctl.ops.convert import ConvertOptions, convert
from tests.conftest import VALID
from tests.ops.test_convert_mutants_matching import ties_of
from tests.ops.test_ports_unproven import write

if TYPE_CHECKING:
    from pathlib import Path

BURN_MODULES = VALID / "burn_modules"


# --- ties a target suggests ---------------------------------------------------------------------


def test_ties_are_suggested_for_the_first_nine_missing_names_only(tmp_path: Path) -> None:
    # ten missing names, each with exactly one source of its shape and kind; the search is
    # bounded to the first nine (sorted), three times the names a grouped warning shows
    sources = {f"s{k}.weight": np.zeros(k + 1, "<f4") for k in range(10)}
    missing = {f"m{k}.weight": np.zeros(k + 1, "<f4") for k in range(10)}
    src = write(tmp_path / "s.safetensors", sources)
    ref = write(tmp_path / "t.safetensors", {**sources, **missing})
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(target=str(ref)))
    assert report.summary is not None
    assert [m.name for m in report.summary.missing] == sorted(missing)
    assert ties_of(report) == [f"m{k}.weight=s{k}.weight" for k in range(9)]


def test_an_ambiguous_missing_name_does_not_end_the_search_for_ties(tmp_path: Path) -> None:
    # blk.x and blk.y could each be blk.a or blk.b (listed as ambiguous); head.weight, sorted
    # after them, has exactly one source of its shape: emb.weight
    rng = np.random.default_rng(0)
    src = write(tmp_path / "s.safetensors", {
        "blk.a.weight": rng.standard_normal((4, 4)).astype("<f4"),
        "blk.b.weight": rng.standard_normal((4, 4)).astype("<f4"),
        "emb.weight": np.zeros((5, 3), "<f4"),
    })  # fmt: skip
    ref = write(tmp_path / "t.safetensors", {
        "blk.x.weight": np.zeros((4, 4), "<f4"),
        "blk.y.weight": np.zeros((4, 4), "<f4"),
        "emb.weight": np.zeros((5, 3), "<f4"),
        "head.weight": np.zeros((5, 3), "<f4"),
    })  # fmt: skip
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(target=str(ref)))
    assert report.summary is not None
    assert [a.name for a in report.summary.ambiguous] == ["blk.x.weight", "blk.y.weight"]
    assert [m.name for m in report.summary.missing] == [
        "blk.x.weight",
        "blk.y.weight",
        "head.weight",
    ]
    assert ties_of(report) == ["head.weight=emb.weight"]


def test_a_missing_name_no_source_fits_does_not_end_the_search_for_ties(tmp_path: Path) -> None:
    # a.weight (5 elements) has no source of its shape; b.weight (2) has one: p.weight
    src = write(tmp_path / "s.safetensors", {"p.weight": np.zeros(2, "<f4")})
    ref = write(tmp_path / "t.safetensors", {
        "p.weight": np.zeros(2, "<f4"),
        "a.weight": np.zeros(5, "<f4"),
        "b.weight": np.zeros(2, "<f4"),
    })  # fmt: skip
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(target=str(ref)))
    assert report.summary is not None
    assert [m.name for m in report.summary.missing] == ["a.weight", "b.weight"]
    assert ties_of(report) == ["b.weight=p.weight"]


def test_a_tie_the_pipeline_refuses_does_not_end_the_search_for_ties(tmp_path: Path) -> None:
    # the copy a.weight=p.weight would be renamed onto q.weight, which the source has (two
    # tensors under one name: refused); b.weight=q.weight, sorted after it, still works
    src = write(tmp_path / "s.safetensors", {
        "p.weight": np.zeros(2, "<f4"),
        "q.weight": np.zeros(3, "<f4"),
    })  # fmt: skip
    ref = write(tmp_path / "t.safetensors", {
        "p.weight": np.zeros(2, "<f4"),
        "q.weight": np.zeros(3, "<f4"),
        "a.weight": np.zeros(2, "<f4"),
        "b.weight": np.zeros(3, "<f4"),
    })  # fmt: skip
    opts = ConvertOptions(target=str(ref), remap=(r"^a\.(.*)=q.$1",))
    report = convert(src, tmp_path / "o.safetensors", opts)
    assert report.summary is not None
    assert [m.name for m in report.summary.missing] == ["a.weight", "b.weight"]
    assert ties_of(report) == ["b.weight=q.weight"]


def tied_head(tmp_path: Path) -> tuple[Path, Path]:
    """A source that stores embed.weight only, and a target that also wants head.weight."""
    emb = np.arange(12, dtype="<f4").reshape(4, 3)
    src = write(tmp_path / "s.safetensors", {"embed.weight": emb})
    ref = write(tmp_path / "t.safetensors", {"embed.weight": emb, "head.weight": emb})
    return src, ref


def test_a_tie_is_suggested_when_the_copy_would_fill_the_missing_name(tmp_path: Path) -> None:
    src, ref = tied_head(tmp_path)
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(target=str(ref)))
    assert ties_of(report) == ["head.weight=embed.weight"]


@pytest.mark.parametrize(
    "options",
    [
        ConvertOptions(exclude=(r"^head\.",)),  # the filter would drop the copy
        ConvertOptions(remap=(r"^head\.=out.",)),  # a rule would rename the copy
    ],
    ids=["excluded", "renamed"],
)
def test_no_tie_is_suggested_where_the_copy_would_not_keep_the_missing_name(
    tmp_path: Path, options: ConvertOptions
) -> None:
    src, ref = tied_head(tmp_path)
    opts = replace(options, target=str(ref))
    report = convert(src, tmp_path / "o.safetensors", opts)
    assert report.summary is not None
    assert [m.name for m in report.summary.missing] == ["head.weight"]
    assert ties_of(report) == []


def test_a_tie_is_checked_with_the_files_module_classes(tmp_path: Path) -> None:
    """The copy is checked as the conversion runs: with the classes a whole-model file names.

    ``mixed_module.pt`` (make_burn_modules.py) holds ``embed = nn.Embedding(10, 8)`` and a
    2-layer bidirectional ``nn.LSTM(4, 6)``. With layer 1 left out, the tensors show one layer;
    the file's class says two, as the declaration does, so the conversion keeps Burn's Vec of
    layers. A check that ignored the class would see the declaration contradicted and drop the
    tie.
    """
    target: dict[str, np.ndarray] = {
        "embed.weight": np.zeros((10, 8), "<f4"),
        "head.weight": np.zeros((10, 8), "<f4"),
    }
    # Burn's BiLstm (forward, reverse), each of 4 gates of two Linears [d_input, d_output]
    for direction in ("forward", "reverse"):
        for gate in ("input", "forget", "output", "cell"):
            prefix = f"lstm.0.{direction}.{gate}_gate."
            target[prefix + "input_transform.weight"] = np.zeros((4, 6), "<f4")
            target[prefix + "input_transform.bias"] = np.zeros(6, "<f4")
            target[prefix + "hidden_transform.weight"] = np.zeros((6, 6), "<f4")
            target[prefix + "hidden_transform.bias"] = np.zeros(6, "<f4")
    ref = write(tmp_path / "t.bpk", target)
    opts = ConvertOptions(
        adapters=("pytorch-to-burn",),
        exclude=(r"^(encoder|gru|act|inst|fc)\.", "_l1"),
        module_types=("^lstm=LSTM(num_layers=2)",),
        target=str(ref),
    )
    report = convert(BURN_MODULES / "mixed_module.pt", tmp_path / "o.bpk", opts)
    assert report.summary is not None
    assert [m.name for m in report.summary.missing] == ["head.weight"]
    assert report.summary.errors == ()
    assert ties_of(report) == ["head.weight=embed.weight"]

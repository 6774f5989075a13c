"""Unproven mappings are listed and refused, never counted as applied (issue 24, point 2).

Two kinds: two source tensors that could fill one target (same parameters, shapes and kind,
no deciding name), and a square rank-2 weight whose module type nothing decides (a Linear
arrives transposed in Burn, anything else as is; the shape cannot tell).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import pytest

from ckptctl import open_checkpoint, save_checkpoint
from ckptctl.fix import Note, Option
from ckptctl.ops.convert import ConvertOptions, convert
from ckptctl.report.summary import AmbiguityKind, AmbiguousTensor
from tests.strategies import array_entry

if TYPE_CHECKING:
    from pathlib import Path

TO_BURN = ("pytorch-to-burn",)


def write(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    save_checkpoint(path, [array_entry(n, a) for n, a in tensors.items()], {}, force=True)
    return path


def square_case(tmp_path: Path) -> tuple[Path, Path, np.ndarray]:
    mix = np.arange(16, dtype="<f4").reshape(4, 4)
    src = write(tmp_path / "src.safetensors",
                {"blk.mix.weight": mix, "blk.fc.weight": np.ones((3, 4), "<f4")})  # fmt: skip
    ref = write(tmp_path / "ref.bpk", {"blk.mix.weight": np.zeros((4, 4), "<f4"),
                                       "blk.fc.weight": np.zeros((4, 3), "<f4")})  # fmt: skip
    return src, ref, mix


def test_a_square_weight_of_unknown_type_is_not_applied(tmp_path: Path) -> None:
    src, ref, _ = square_case(tmp_path)
    report = convert(src, tmp_path / "o.bpk", ConvertOptions(adapters=TO_BURN, target=str(ref)))
    summary = report.summary
    assert summary is not None
    assert summary.applied == ("blk.fc.weight",)  # the non-square one: the shape decided it
    assert summary.missing == ()
    assert summary.errors == ()
    assert summary.ambiguous == (
        AmbiguousTensor("blk.mix.weight", AmbiguityKind.LAYOUT, ("blk.mix.weight",)),
    )
    assert not summary.ok
    assert not report.ok
    assert not report.written
    assert not (tmp_path / "o.bpk").exists()


def test_declaring_the_module_type_proves_the_layout(tmp_path: Path) -> None:
    src, ref, mix = square_case(tmp_path)
    opts = ConvertOptions(adapters=TO_BURN, target=str(ref), module_types=(r"\.mix\.=Linear",))
    report = convert(src, tmp_path / "o.bpk", opts)
    assert report.ok
    assert report.summary is not None
    assert report.summary.applied == ("blk.mix.weight", "blk.fc.weight")
    assert report.summary.ambiguous == ()
    with open_checkpoint(tmp_path / "o.bpk") as ckpt:
        np.testing.assert_array_equal(ckpt["blk.mix.weight"].load(), mix.T)
    opts = ConvertOptions(adapters=TO_BURN, target=str(ref), module_types=(r"\.mix\.=Other",),
                          force=True)  # fmt: skip
    assert convert(src, tmp_path / "o.bpk", opts).ok
    with open_checkpoint(tmp_path / "o.bpk") as ckpt:
        np.testing.assert_array_equal(ckpt["blk.mix.weight"].load(), mix)


def test_the_cli_refuses_naming_the_unproven_tensor(run_cli, tmp_path: Path) -> None:
    src, ref, _ = square_case(tmp_path)
    dst = tmp_path / "o.bpk"
    result = run_cli("convert", src, dst, "-a", "pytorch-to-burn", "--target", ref)
    assert result.code == 1
    assert not dst.exists()
    assert "│ ✓ Successfully applied: 1 tensors" in result.stdout
    assert "├─ Ambiguous (not applied: nothing decides; name them)" in result.stdout
    assert "│    • blk.mix.weight\n│        square weight from 'blk.mix.weight'" in result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        f"ckptctl: nothing written to {dst}: 1 target tensor is unproven ('blk.mix.weight'): "
        "nothing decides which source or layout fills it; name it with --remap or "
        "--module-type, or pass --allow-partial"
    )
    result = run_cli("convert", src, dst, "-a", "pytorch-to-burn", "--target", ref, "--json")
    assert result.code == 1
    data = json.loads(result.stdout)["summary"]
    assert data["ok"] is False
    assert data["counts"]["applied"] == 1
    assert data["counts"]["ambiguous"] == 1
    assert data["ambiguous"] == [
        {"name": "blk.mix.weight", "kind": "layout", "candidates": ["blk.mix.weight"]}
    ]
    result = run_cli("convert", src, dst, "-a", "pytorch-to-burn", "--target", ref,
                     "--allow-partial")  # fmt: skip
    assert result.code == 1  # written, but the check still fails
    assert dst.exists()


def two_sources(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    src = write(tmp_path / "src.safetensors", {
        "blk.a.weight": rng.standard_normal((4, 4)).astype("<f4"),
        "blk.b.weight": rng.standard_normal((4, 4)).astype("<f4"),
        "blk.c.weight": rng.standard_normal((4, 6)).astype("<f4"),
    })  # fmt: skip
    ref = write(tmp_path / "ref.bpk", {"blk.x.weight": np.zeros((4, 4), "<f4"),
                                       "blk.y.weight": np.zeros((4, 4), "<f4"),
                                       "blk.z.weight": np.zeros((4, 6), "<f4")})  # fmt: skip
    return src, ref


def test_two_sources_for_one_target_are_listed_and_refused(run_cli, tmp_path: Path) -> None:
    src, ref = two_sources(tmp_path)
    report = convert(src, tmp_path / "o.bpk", ConvertOptions(target=str(ref)))
    summary = report.summary
    assert summary is not None
    assert summary.applied == ("blk.z.weight",)  # blk.c: the only source that fits
    assert [m.name for m in summary.missing] == ["blk.x.weight", "blk.y.weight"]
    pair = ("blk.a.weight", "blk.b.weight")
    assert summary.ambiguous == (
        AmbiguousTensor("blk.x.weight", AmbiguityKind.SOURCE, pair),
        AmbiguousTensor("blk.y.weight", AmbiguityKind.SOURCE, pair),
    )
    assert report.inferred == ((r"^blk\.c\.(weight)$", "blk.z.$1",
                                "the only source module whose parameters fit"),)  # fmt: skip
    result = run_cli("convert", src, tmp_path / "o.bpk", "--target", ref)
    assert result.code == 1
    assert "│        could be 'blk.a.weight' or 'blk.b.weight': same parameters and shapes; " \
        "add a remap rule" in result.stdout  # fmt: skip
    assert "2 target tensors are unproven ('blk.x.weight', 'blk.y.weight')" in result.stderr


def test_a_rule_that_names_them_resolves_the_ambiguity(tmp_path: Path) -> None:
    src, ref = two_sources(tmp_path)
    opts = ConvertOptions(target=str(ref), remap=(r"^blk\.a\.=blk.x.", r"^blk\.b\.=blk.y."))
    report = convert(src, tmp_path / "o.bpk", opts)
    assert report.ok
    assert report.summary is not None
    assert report.summary.ambiguous == ()
    assert report.summary.applied == ("blk.x.weight", "blk.y.weight", "blk.z.weight")


def test_a_tie_writes_a_copy_under_the_new_name(run_cli, tmp_path: Path) -> None:
    emb = np.arange(12, dtype="<f4").reshape(4, 3)
    src = write(tmp_path / "src.safetensors", {"embed.weight": emb})
    dst = tmp_path / "o.safetensors"
    result = run_cli("convert", src, dst, "--tie", "head.weight=embed.weight")
    assert result.code == 0, result.stderr
    with open_checkpoint(dst) as ckpt:
        assert list(ckpt) == ["embed.weight", "head.weight"]
        np.testing.assert_array_equal(ckpt["head.weight"].load(), emb)


def test_bad_ties_are_refused_by_name(run_cli, tmp_path: Path) -> None:
    from ckptctl.errors import SelectionError
    from ckptctl.ops._select import add_ties

    src = write(tmp_path / "src.safetensors", {"embed.weight": np.zeros((2, 2), "<f4")})
    with open_checkpoint(src) as ckpt:
        entries = list(ckpt.values())
    cases = {
        "head.weight": "tie 'head.weight' is not NAME=SOURCE",
        "=embed.weight": "tie '=embed.weight' is not NAME=SOURCE",
        "head.weight=embed.weigth": "tie 'head.weight=embed.weigth': no tensor 'embed.weigth' in "
        "the source; did you mean 'embed.weight'?",
        "embed.weight=embed.weight": "tie 'embed.weight=embed.weight': the source already has "
        "a tensor 'embed.weight'",
    }
    for text, message in cases.items():
        with pytest.raises(SelectionError) as info:
            add_ties(entries, [text])
        assert info.value.message == message
    result = run_cli("convert", src, tmp_path / "o.safetensors", "--tie", "x=nothing")
    assert result.code == 2
    assert "tie 'x=nothing': no tensor 'nothing' in the source" in result.stderr


# --- value evidence (point 4): a target record with real values decides ---------------------

VALUES = "values equal the target's (bytes, or the transpose)"


def test_the_targets_values_decide_between_two_sources(tmp_path: Path) -> None:
    src, _ = two_sources(tmp_path)
    with open_checkpoint(src) as ckpt:
        sd = {n: np.array(e.load()) for n, e in ckpt.items()}
    ref = write(tmp_path / "trained.bpk", {"blk.x.weight": sd["blk.b.weight"],
                                           "blk.y.weight": sd["blk.a.weight"].T.copy(),
                                           "blk.z.weight": sd["blk.c.weight"]})  # fmt: skip
    rules = tmp_path / "rules.txt"
    report = convert(src, tmp_path / "o.safetensors",
                     ConvertOptions(target=str(ref), write_rules=str(rules)))  # fmt: skip
    assert report.ok
    assert report.inferred == (
        (r"^blk\.c\.(weight)$", "blk.z.$1", "the only source module whose parameters fit"),
        (r"^blk\.b\.(weight)$", "blk.x.$1", VALUES),
        (r"^blk\.a\.(weight)$", "blk.y.$1", "the only source module whose parameters fit"),
    )
    assert f"^blk\\.b\\.(weight)$=blk.x.$1  # {VALUES}" in rules.read_text().splitlines()
    with open_checkpoint(tmp_path / "o.safetensors") as ckpt:
        np.testing.assert_array_equal(ckpt["blk.x.weight"].load(), sd["blk.b.weight"])
        np.testing.assert_array_equal(ckpt["blk.y.weight"].load(), sd["blk.a.weight"])


def test_values_that_equal_no_candidate_decide_nothing(tmp_path: Path) -> None:
    src, _ = two_sources(tmp_path)
    with open_checkpoint(src) as ckpt:
        sd = {n: np.array(e.load()) for n, e in ckpt.items()}
    # the same bytes as F16 are no evidence: dtypes differ
    ref = write(tmp_path / "trained.bpk", {"blk.x.weight": sd["blk.b.weight"].astype("<f2"),
                                           "blk.y.weight": sd["blk.b.weight"] + 1,
                                           "blk.z.weight": sd["blk.c.weight"]})  # fmt: skip
    report = convert(src, tmp_path / "o.safetensors", ConvertOptions(target=str(ref)))
    assert report.summary is not None
    assert [a.name for a in report.summary.ambiguous] == ["blk.x.weight", "blk.y.weight"]
    assert not report.ok


def test_the_targets_values_decide_a_square_layout(tmp_path: Path) -> None:
    src, _, mix = square_case(tmp_path)
    fc = np.ones((4, 3), "<f4")
    for held, want, said in ((mix.T.copy(), mix.T, "transposed: a Linear"),
                             (mix, mix, "as they are: kept")):  # fmt: skip
        ref = write(tmp_path / "trained.bpk", {"blk.mix.weight": held, "blk.fc.weight": fc})
        report = convert(src, tmp_path / "o.bpk",
                         ConvertOptions(adapters=TO_BURN, target=str(ref), force=True))  # fmt: skip
        assert report.ok, report.summary
        assert report.summary is not None
        assert report.summary.applied == ("blk.mix.weight", "blk.fc.weight")
        notes = [w for w in report.warnings if str(w).startswith("value check")]
        kind = "Linear" if said.endswith("Linear") else "Other"
        assert notes == [Note(
            f"value check: the target's 'blk.mix.weight' holds the source's values {said}; to "
            "keep this without the target pass {fix0}",
            (Option("module_types", rf"^blk\.mix\.weight$={kind}"),),
        )]  # fmt: skip
        with open_checkpoint(tmp_path / "o.bpk") as ckpt:
            np.testing.assert_array_equal(ckpt["blk.mix.weight"].load(), want)
        # the rules file carries the decision, as the flag to pass without the target
        rules = tmp_path / "rules.txt"
        convert(src, tmp_path / "o2.bpk", ConvertOptions(
            adapters=TO_BURN, target=str(ref), force=True, write_rules=str(rules)))  # fmt: skip
        flag = f"# --module-type '^blk\\.mix\\.weight$={kind}'  (value check: the target's"
        assert any(line.startswith(flag) for line in rules.read_text().splitlines())
        declared = (rf"^blk\.mix\.weight$={kind}",)
        options = ConvertOptions(adapters=TO_BURN, module_types=declared, force=True)
        again = convert(src, tmp_path / "o3.bpk", options)
        assert again.ok
        with open_checkpoint(tmp_path / "o3.bpk") as ckpt:
            np.testing.assert_array_equal(ckpt["blk.mix.weight"].load(), want)

"""``convert --target`` finishes the ports where a person sees the answer at a glance (#49).

Ground truth, none of it from the matcher under test (``fixtures/make_ports.py``):

* ``albert_tied.pt`` -- transformers' ``AlbertForMaskedLM`` state_dict saved by ``torch.save``:
  ``predictions.bias`` and its tied copy ``predictions.decoder.bias`` (one storage);
* ``squeezenet.pt`` -- torchvision's own ``SqueezeNet(version="1_1")``/``Fire`` classes (widths
  / 16); its record is squeezenet-burn's, whose burn-import names are ``conv2d1`` ... ``conv2d26``
  in graph order;
* ``llama_meta.pt`` -- Meta's reference ``Transformer`` (llama-models) state_dict: ``w1``/``w2``/
  ``w3``, ``attention_norm``/``ffn_norm``;

each ``<case>_target.bpk`` holds only the names and shapes of the port's record (random values),
and ``<case>_expected.safetensors`` what the port loads (its own rules, computed with torch).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from safetensors.numpy import load_file

from ckptctl import open_checkpoint, save_checkpoint
from ckptctl.ops.convert import ConvertOptions, convert
from tests.strategies import array_entry

if TYPE_CHECKING:
    from collections.abc import Callable

FIXTURES = Path(__file__).parents[2] / "fixtures" / "valid" / "ports"
TO_BURN = ("pytorch-to-burn",)


def read(path: Path) -> dict[str, np.ndarray]:
    with open_checkpoint(path) as ckpt:
        return {name: np.array(entry.load()) for name, entry in ckpt.items()}


def write(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    save_checkpoint(path, [array_entry(n, a) for n, a in tensors.items()], {}, force=True)
    return path


def assert_record(got: dict[str, np.ndarray], case: str) -> None:
    """Every tensor of the port's record, with the port's values; nothing else but what Burn
    ignores as unused (source tensors the record has no field for)."""
    want = load_file(str(FIXTURES / f"{case}_expected.safetensors"))
    with open_checkpoint(FIXTURES / f"{case}_target.bpk") as ckpt:
        assert sorted(want) == sorted(ckpt)  # the port fills every field
    for name, array in want.items():
        assert name in got, name
        assert got[name].shape == array.shape, name
        assert got[name].tobytes() == np.ascontiguousarray(array).tobytes(), name


def suggested(stdout: str) -> list[str]:
    """The flags the CLI suggests ("try: ..." lines), split as a shell would paste them."""
    return [arg for line in stdout.splitlines() if line.startswith("  try: ")
            for arg in shlex.split(line.removeprefix("  try: "))]  # fmt: skip


def convert_pasting(run_cli, case: str, tmp_path: Path) -> tuple[list[str], Path]:
    """``convert --target``, then again with every suggested flag pasted; the flags and the
    record written."""
    args = ["convert", FIXTURES / f"{case}.pt", tmp_path / "o.bpk", "-a", "pytorch-to-burn",
            "--target", FIXTURES / f"{case}_target.bpk"]  # fmt: skip
    first = run_cli(*args)
    flags = suggested(first.stdout)
    if first.code != 0:
        again = run_cli(*args, *flags)
        assert again.code == 0, (flags, again.stdout[-2000:], again.stderr)
        assert not suggested(again.stdout)
    return flags, tmp_path / "o.bpk"


# --- 1. candidates that hold the same bytes are not ambiguous --------------------------------


def test_albert_with_its_tied_decoder_bias_gets_one_tie_and_the_ports_record(
    run_cli, tmp_path: Path
) -> None:
    flags, out = convert_pasting(run_cli, "albert_tied", tmp_path)
    assert flags == ["--tie", "mlm_decoder_bias=predictions.bias"]  # the shorter name
    assert_record(read(out), "albert_tied")


def test_the_equal_copies_are_named(tmp_path: Path) -> None:
    opts = ConvertOptions(adapters=TO_BURN, target=str(FIXTURES / "albert_tied_target.bpk"))
    report = convert(FIXTURES / "albert_tied.pt", tmp_path / "o.bpk", opts)
    assert not report.ok
    assert report.summary is not None
    assert [m.name for m in report.summary.missing] == ["mlm_decoder_bias"]
    assert [f.value for f in report.fixes if f.name == "ties"] == [
        "mlm_decoder_bias=predictions.bias"
    ]
    notes = [str(w) for w in report.warnings if "same bytes" in str(w)]
    assert len(notes) == 1
    assert "'predictions.decoder.bias'" in notes[0]


def candidates(tmp_path: Path, second: Callable[[np.ndarray], np.ndarray]) -> Path:
    """A target ``head_bias`` (a Param, no module) and two biases of its shape."""
    rng = np.random.default_rng(0)
    first = rng.standard_normal(6).astype("<f4")
    src = write(tmp_path / "src.safetensors", {
        "head.bias": first, "head.decoder.bias": second(first),
        "head.dense.weight": rng.standard_normal((6, 4)).astype("<f4"),
    })  # fmt: skip
    return src


@pytest.mark.parametrize(
    ("second", "tie"),
    [
        (lambda first: first.copy(), "head_bias=head.bias"),  # equal bytes: one is suggested
        (lambda first: np.zeros(6, "<f4"), None),  # different bytes: two sources, nothing decides
        (lambda first: first.astype("<f2"), None),  # the same numbers as F16 are no copy
    ],
    ids=["equal", "different", "other-dtype"],
)
def test_only_byte_identical_candidates_are_one(
    tmp_path: Path, second: Callable[[np.ndarray], np.ndarray], tie: str | None
) -> None:
    src = candidates(tmp_path, second)
    ref = write(tmp_path / "ref.bpk", {"head_bias": np.zeros(6, "<f4"),
                                       "head.dense.weight": np.zeros((4, 6), "<f4")})  # fmt: skip
    report = convert(src, tmp_path / "o.bpk", ConvertOptions(adapters=TO_BURN, target=str(ref)))
    assert not report.ok
    ties = [f.value for f in report.fixes if f.name == "ties"]
    assert ties == ([tie] if tie else [])


# --- 3. the role names people use, as data ---------------------------------------------------


def test_meta_llama_converts_to_llama_burns_record_by_the_role_table(
    run_cli, tmp_path: Path
) -> None:
    flags, out = convert_pasting(run_cli, "llama_meta", tmp_path)
    assert flags == []  # nothing to paste: w1 and w3 are decided, not suggested
    assert_record(read(out), "llama_meta")


def test_the_rules_say_which_row_and_file_decided(tmp_path: Path) -> None:
    opts = ConvertOptions(adapters=TO_BURN, target=str(FIXTURES / "llama_meta_target.bpk"))
    report = convert(FIXTURES / "llama_meta.pt", tmp_path / "o.bpk", opts)
    assert report.ok
    by_pattern = {p: (r, e) for p, r, e in report.inferred}
    inner = by_pattern[r"^layers\.([0-9]+)\.feed_forward\.w1\.(weight)$"]
    assert inner[0] == "layers.$1.feed_forward.swiglu.linear_inner.$2"
    assert "role table" in inner[1]
    assert "llama-models" in inner[1]  # the file that says w1 is the gated branch
    assert "swiglu.rs" in inner[1]


SWIGLU_TARGET = {"blk.0.feed_forward.swiglu.linear_inner.weight": (4, 6),
                 "blk.0.feed_forward.swiglu.linear_outer.weight": (4, 6)}  # fmt: skip


@pytest.mark.parametrize(
    ("gate", "up"),
    [
        ("blk.0.feed_forward.w1", "blk.0.feed_forward.w3"),  # Meta
        ("blk.0.mlp.gate_proj", "blk.0.mlp.up_proj"),  # Hugging Face
        ("blk.0.DenseReluDense.wi_0", "blk.0.DenseReluDense.wi_1"),
    ],  # T5 v1.1's gated GELU
    ids=["meta", "hugging-face", "t5"],
)
@pytest.mark.parametrize("up_first", [False, True], ids=["gate-first", "up-first"])
def test_a_table_row_decides_between_equal_shapes_whatever_the_order(
    gate: str, up: str, up_first: bool
) -> None:
    from ckptctl.ops._structure import infer_rules

    pair = [(f"{up}.weight", (6, 4)), (f"{gate}.weight", (6, 4))]
    source = dict(pair if up_first else pair[::-1])
    found = infer_rules(source, SWIGLU_TARGET)
    assert found.ambiguous == ()
    pairs = {(m.source, m.target) for m in found.matches}
    assert pairs == {(gate, "blk.0.feed_forward.swiglu.linear_inner"),
                     (up, "blk.0.feed_forward.swiglu.linear_outer")}  # fmt: skip


@pytest.mark.parametrize(
    "names",
    [
        ("blk.0.feed_forward.a", "blk.0.feed_forward.b"),  # no row names the sources
        ("blk.0.feed_forward.w1", "blk.0.mlp.gate_proj"),
    ],  # one row names both
    ids=["no-row", "both-in-one-row"],
)
def test_where_no_row_decides_the_pair_stays_ambiguous(names: tuple[str, str]) -> None:
    from ckptctl.ops._structure import infer_rules

    found = infer_rules({f"{n}.weight": (6, 4) for n in names}, SWIGLU_TARGET)
    assert found.matches == ()
    assert {a.target + ".weight" for a in found.ambiguous} == set(SWIGLU_TARGET)


def test_every_row_cites_where_each_spelling_comes_from() -> None:
    from ckptctl.ops._roles import ROLE_ALIASES

    seen = set()
    for row in ROLE_ALIASES:
        assert len(row.spellings) >= 2, row.role
        for ending, source in row.spellings:
            assert "/" in source, (row.role, ending)  # a repository path or package file
            seen.add(ending)
    assert {"feed_forward.w1", "mlp.gate_proj", "swiglu.linear_inner"} <= seen


# --- 2. modules in order when names tell nothing ---------------------------------------------


def test_squeezenet_converts_to_squeezenet_burns_record_by_module_order(
    run_cli, tmp_path: Path
) -> None:
    flags, out = convert_pasting(run_cli, "squeezenet", tmp_path)
    assert flags == []
    assert_record(read(out), "squeezenet")


def test_order_is_said_and_the_written_rules_reproduce_it_without_the_target(
    tmp_path: Path,
) -> None:
    rules = tmp_path / "rules.txt"
    opts = ConvertOptions(adapters=TO_BURN, target=str(FIXTURES / "squeezenet_target.bpk"),
                          write_rules=str(rules))  # fmt: skip
    report = convert(FIXTURES / "squeezenet.pt", tmp_path / "a.bpk", opts)
    assert report.ok
    by_order = [(p, r) for p, r, e in report.inferred if e.startswith("module order")]
    # conv2d3/conv2d6 (the two first Fires' expand1x1) have one shape: the order decides
    assert (r"^features\.3\.expand1x1\.(bias|weight)$", "conv2d3.$1") in by_order
    again = convert(FIXTURES / "squeezenet.pt", tmp_path / "b.bpk",
                    ConvertOptions(adapters=TO_BURN, remap_file=str(rules)))  # fmt: skip
    assert again.written
    assert_record(read(tmp_path / "b.bpk"), "squeezenet")


def test_a_safetensors_file_says_no_module_order_so_it_stays_refused(tmp_path: Path) -> None:
    # the safetensors library writes names sorted (features.10 before features.3): no order
    opts = ConvertOptions(adapters=TO_BURN, target=str(FIXTURES / "squeezenet_target.bpk"))
    report = convert(FIXTURES / "squeezenet.safetensors", tmp_path / "o.bpk", opts)
    assert not report.ok
    assert not report.written
    assert report.summary is not None
    unproven = {a.name for a in report.summary.ambiguous}
    assert {"conv2d3.weight", "conv2d6.weight"} <= unproven
    assert not [e for _, _, e in report.inferred if e.startswith("module order")]


def test_the_full_size_squeezenet1_1_shapes_leave_one_alignment() -> None:
    import json

    from ckptctl.ops._structure import infer_rules

    data = json.loads((FIXTURES / "squeezenet1_1_shapes.json").read_text())
    source = {name: tuple(shape) for name, shape in data["source"]}
    target = {name: tuple(shape) for name, shape in data["target"]}
    found = infer_rules(source, target, ordered=True)
    assert found.ambiguous == ()
    convs = list(dict.fromkeys(n.rpartition(".")[0] for n in source))
    assert {(m.source, m.target) for m in found.matches} == {
        (c, f"conv2d{k}") for k, c in enumerate(convs, 1)}  # fmt: skip
    assert infer_rules(source, target).ambiguous  # without the order: open


X, Z = (4, 3, 1, 1), (5, 3, 3, 3)


@pytest.mark.parametrize(
    ("source", "decided"),
    [
        ([("f.0", X), ("f.1", X)], {("f.0", "conv2d1"), ("f.1", "conv2d2")}),
        ([("f.0", X), ("f.1", Z), ("f.2", X)], {("f.0", "conv2d1"), ("f.2", "conv2d2")}),
        ([("f.0", X), ("f.1", X), ("f.2", X)], set()),  # three ways to place two: refused
        ([("f.0", Z), ("f.1", X)], set()),  # a target shape the order cannot place: refused
    ],
    ids=["same-sequence", "a-source-skipped", "several-alignments", "no-alignment"],
)
def test_order_decides_only_when_the_shapes_leave_exactly_one_alignment(
    source: list[tuple[str, tuple[int, ...]]], decided: set[tuple[str, str]]
) -> None:
    from ckptctl.ops._structure import infer_rules

    src = {f"{path}.weight": shape for path, shape in source}
    target = {"conv2d1.weight": X, "conv2d2.weight": X}
    found = infer_rules(src, target, ordered=True)
    assert {(m.source, m.target) for m in found.matches} == decided
    assert any(m.evidence.startswith("module order") for m in found.matches) == bool(decided)
    assert {(m.source, m.target) for m in infer_rules(src, target).matches} == set()

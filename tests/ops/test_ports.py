"""``convert -a pytorch-to-burn --target REF`` on the Burn team's model ports (issue 24).

Ground truth, none of it from the matcher under test (``fixtures/make_ports.py``):

* the sources are the upstream checkpoints, written by transformers' ``save_pretrained``
  (bert, minilm, roberta, albert, llama) or the state_dict of torch modules laid out as
  torchvision's (resnet, mobilenetv2), read here with the ``safetensors`` library;
* REF holds only the names and shapes of the ports' Rust structs (tracel-ai/models cb0d97e);
* the expected record is what the port loads: its own ``KeyRemapper`` rules (its loader.rs),
  burn-store's ``PyTorchToBurnAdapter`` and what it does in code, computed with torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from ckptctl import open_checkpoint
from ckptctl.ops.convert import ConvertOptions, convert, read_rules_file
from ckptctl.report.summary import AmbiguityKind

FIXTURES = Path(__file__).parents[2] / "fixtures" / "valid" / "ports"
TO_BURN = ("pytorch-to-burn",)
EXACT = ["bert", "minilm", "resnet", "mobilenetv2", "yolox"]


def read(path: Path) -> dict[str, np.ndarray]:
    with open_checkpoint(path) as ckpt:
        return {name: np.array(entry.load()) for name, entry in ckpt.items()}


def target_names(case: str) -> list[str]:
    with open_checkpoint(FIXTURES / f"{case}_target.bpk") as ckpt:
        return list(ckpt)


def assert_port_record(
    got: dict[str, np.ndarray], want: dict[str, np.ndarray], unused: frozenset[str] = frozenset()
) -> None:
    for name, array in want.items():
        assert name in got, name
        assert got[name].shape == array.shape, name
        assert got[name].tobytes() == np.ascontiguousarray(array).tobytes(), name
    # what Burn has no field for, and ignores as unused, is all that is left over
    extra = set(got) - set(want) - unused
    assert {n.rpartition(".")[2] for n in extra} <= {"num_batches_tracked"}


def to_burn(case: str, out: Path, **options: object) -> object:
    opts = ConvertOptions(adapters=TO_BURN, target=str(FIXTURES / f"{case}_target.bpk"),
                          **options)  # type: ignore[arg-type]  # fmt: skip
    return convert(FIXTURES / f"{case}.safetensors", out, opts)


@pytest.mark.parametrize("case", EXACT)
def test_target_alone_writes_the_ports_record(case: str, tmp_path: Path) -> None:
    report = to_burn(case, tmp_path / "o.bpk")
    assert report.ok, report.summary  # type: ignore[attr-defined]
    want = load_file(str(FIXTURES / f"{case}_expected.safetensors"))
    assert sorted(want) == sorted(target_names(case))  # the port fills every field
    assert_port_record(read(tmp_path / "o.bpk"), want)


@pytest.mark.parametrize("case", EXACT)
def test_write_rules_then_remap_file_reproduces_it_without_the_target(
    case: str, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.txt"
    to_burn(case, tmp_path / "a.bpk", write_rules=str(rules))
    listed = read_rules_file(str(rules))
    assert listed
    assert all(rule.startswith("^") and comment for rule, comment in listed)  # anchored, explained
    report = convert(FIXTURES / f"{case}.safetensors", tmp_path / "b.bpk",
                     ConvertOptions(adapters=TO_BURN, remap_file=str(rules)))  # fmt: skip
    assert report.written
    assert_port_record(read(tmp_path / "b.bpk"),
                       load_file(str(FIXTURES / f"{case}_expected.safetensors")))  # fmt: skip


def test_rules_as_rust_source(tmp_path: Path) -> None:
    to_burn("bert", tmp_path / "a.bpk", write_rules=str(tmp_path / "rules.rs"))
    text = (tmp_path / "rules.rs").read_text()
    assert text.startswith("KeyRemapper::from_patterns(vec![")
    assert r'(r#"^pooler\.dense\.(bias|weight)$"#, r#"pooler.output.$1"#),' in text


def test_llama_without_the_rope_adapter_is_refused_naming_q_and_k(tmp_path: Path) -> None:
    # llama-burn permutes wq/wk after loading (Hugging Face's half-split RoPE layout): without
    # the adapter they are unproven, never applied
    report = to_burn("llama", tmp_path / "o.bpk")
    assert not report.ok  # type: ignore[attr-defined]
    assert not report.written  # type: ignore[attr-defined]
    summary = report.summary  # type: ignore[attr-defined]
    qk = [f"layers.{i}.attention.{w}.weight" for i in range(2) for w in ("wq", "wk")]
    assert sorted(a.name for a in summary.ambiguous) == sorted(qk)
    assert {a.kind for a in summary.ambiguous} == {AmbiguityKind.ROPE}
    assert ("model.layers.0.self_attn.q_proj.weight",) in [a.candidates for a in summary.ambiguous]
    assert len(summary.applied) == len(target_names("llama")) - 4
    assert summary.missing == ()


def test_llama_without_the_rope_adapter_is_the_port_but_for_the_permutation(
    tmp_path: Path,
) -> None:
    # every other tensor, square wq/wo included, must be the port's
    report = to_burn("llama", tmp_path / "o.bpk", allow_partial=True)
    assert report.written  # type: ignore[attr-defined]
    got, want = read(tmp_path / "o.bpk"), load_file(str(FIXTURES / "llama_expected.safetensors"))
    assert sorted(got) == sorted(want)
    for name, array in want.items():
        assert got[name].shape == array.shape, name
        if name.endswith((".wq.weight", ".wk.weight")):
            assert got[name].tobytes() != array.tobytes(), name  # the permutation is not applied
        else:
            assert got[name].tobytes() == array.tobytes(), name
    sd = load_file(str(FIXTURES / "llama.safetensors"))
    # square wq/wo (8x8): transposed as Linear by name, never left in PyTorch layout
    np.testing.assert_array_equal(got["layers.0.attention.wo.weight"],
                                  sd["model.layers.0.self_attn.o_proj.weight"].T)  # fmt: skip
    np.testing.assert_array_equal(got["layers.0.attention.wq.weight"],
                                  sd["model.layers.0.self_attn.q_proj.weight"].T)  # fmt: skip
    # the LM head is the output Linear, never the token embeddings (same shape)
    np.testing.assert_array_equal(got["output.weight"], sd["lm_head.weight"].T)
    np.testing.assert_array_equal(got["tok_embeddings.weight"], sd["model.embed_tokens.weight"])


@pytest.mark.parametrize("in_folder", [True, False], ids=["model-dir", "file-beside"])
def test_llama_head_counts_come_from_config_json(tmp_path: Path, run_cli, in_folder: bool) -> None:
    """The config.json beside the weights says the head counts (issue 48): the RoPE adapter is
    added with them, and the record is llama-burn's port, as with the adapter given."""
    import json
    import shutil

    model = tmp_path / "llama"
    model.mkdir()
    shutil.copy(FIXTURES / "llama.safetensors", model / "model.safetensors")
    config = {"model_type": "llama", "num_attention_heads": 2, "num_key_value_heads": 1}
    (model / "config.json").write_text(json.dumps(config))
    src = model if in_folder else model / "model.safetensors"
    target = FIXTURES / "llama_target.bpk"
    result = run_cli("convert", src, tmp_path / "o.bpk", "-a", "pytorch-to-burn",
                     "--target", target)  # fmt: skip
    assert result.code == 0, result.stderr
    assert "rope-interleaved:2,1" in result.stderr
    assert str(model / "config.json") in result.stderr
    assert_port_record(read(tmp_path / "o.bpk"),
                       load_file(str(FIXTURES / "llama_expected.safetensors")))  # fmt: skip


@pytest.mark.parametrize(
    "config",
    [{"model_type": "llama"}, {"num_attention_heads": "2"}, [2, 1], {"num_attention_heads": 0}],
    ids=["no-heads", "text", "not-an-object", "zero"],
)
def test_a_config_json_that_does_not_say_leaves_the_refusal(
    tmp_path: Path, run_cli, config: object
) -> None:
    import json
    import shutil

    shutil.copy(FIXTURES / "llama.safetensors", tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(config))
    target = FIXTURES / "llama_target.bpk"
    result = run_cli("convert", tmp_path / "model.safetensors", tmp_path / "o.bpk",
                     "-a", "pytorch-to-burn", "--target", target)  # fmt: skip
    assert result.code == 1
    assert "rope-interleaved:HEADS,KV_HEADS" in result.stderr
    assert not (tmp_path / "o.bpk").exists()


def test_without_a_target_the_rope_adapter_is_a_warning(tmp_path: Path) -> None:
    rules = tmp_path / "rules.txt"
    to_burn("llama", tmp_path / "a.bpk", write_rules=str(rules), dry_run=True)
    opts = ConvertOptions(adapters=TO_BURN, remap_file=str(rules))
    report = convert(FIXTURES / "llama.safetensors", tmp_path / "b.bpk", opts)
    assert report.written
    rope = [str(w) for w in report.warnings if "RoPE" in str(w)]
    assert len(rope) == 1
    assert rope[0].startswith("4 q/k projections go from Hugging Face's q_proj/k_proj to wq/wk")


LLAMA_ROPE = "rope-interleaved:2,1"  # the fixture's num_attention_heads, num_key_value_heads


@pytest.mark.parametrize("adapters", [(*TO_BURN, LLAMA_ROPE), (LLAMA_ROPE, *TO_BURN)])
def test_llama_with_the_rope_adapter_is_the_ports_record(
    adapters: tuple[str, ...], tmp_path: Path
) -> None:
    # before or after the transpose: the adapter permutes the output features either way
    opts = ConvertOptions(adapters=adapters, target=str(FIXTURES / "llama_target.bpk"))
    report = convert(FIXTURES / "llama.safetensors", tmp_path / "o.bpk", opts)
    assert report.ok
    assert not [w for w in report.warnings if "RoPE" in str(w)]
    got, want = read(tmp_path / "o.bpk"), load_file(str(FIXTURES / "llama_expected.safetensors"))
    assert sorted(got) == sorted(want)
    assert_port_record(got, want)


def test_llama_rules_reproduce_it_without_the_target(tmp_path: Path) -> None:
    rules = tmp_path / "rules.txt"
    to_burn("llama", tmp_path / "a.bpk", write_rules=str(rules))
    to_burn("llama", tmp_path / "r.bpk", write_rules=str(tmp_path / "rules.rs"), dry_run=True)
    text = (tmp_path / "rules.rs").read_text()
    assert r'(r#"^model\.embed_tokens\.(weight)$"#, r#"tok_embeddings.$1"#),' in text
    opts = ConvertOptions(adapters=(*TO_BURN, LLAMA_ROPE), remap_file=str(rules))
    report = convert(FIXTURES / "llama.safetensors", tmp_path / "b.bpk", opts)
    assert report.written
    assert_port_record(read(tmp_path / "b.bpk"),
                       load_file(str(FIXTURES / "llama_expected.safetensors")))  # fmt: skip


# Hugging Face drops tied duplicates on save (transformers' _tied_weights_keys): RoBERTa's
# lm_head.decoder.weight is the word embeddings and lm_head.decoder.bias is lm_head.bias;
# ALBERT's predictions.decoder.bias is predictions.bias (the port loads it as mlm_decoder_bias)
TIES = {
    "roberta": ("lm_head.decoder.bias=lm_head.bias",
                "lm_head.decoder.weight=roberta.embeddings.word_embeddings.weight"),
    "albert": ("mlm_decoder_bias=predictions.bias",),
}  # fmt: skip


def tied_expected(case: str) -> dict[str, np.ndarray]:
    want = load_file(str(FIXTURES / f"{case}_expected.safetensors"))
    if case == "albert":  # what the port loads from a checkpoint that keeps the tied copy
        source = load_file(str(FIXTURES / "albert.safetensors"))
        want["mlm_decoder_bias"] = source["predictions.bias"]
    return want


@pytest.mark.parametrize(
    ("case", "refused"),
    [
        ("roberta", {"lm_head.decoder.weight", "lm_head.decoder.bias"}),
        # the port's Param mlm_decoder_bias has no module to match a source module against
        ("albert", {"mlm_decoder_bias"}),
    ],
)
def test_what_the_names_cannot_prove_is_refused_by_name_and_the_tie_suggested(
    case: str, refused: set[str], tmp_path: Path
) -> None:
    report = to_burn(case, tmp_path / "o.bpk")
    assert not report.ok  # type: ignore[attr-defined]
    assert not report.written  # type: ignore[attr-defined]
    summary = report.summary  # type: ignore[attr-defined]
    assert {m.name for m in summary.missing} == refused
    assert all(
        m.suggestion is None or m.suggestion.rpartition(".")[2] == m.name.rpartition(".")[2]
        for m in summary.missing
    )  # no bias for a weight
    assert [f.value for f in summary.fixes if f.name == "ties"] == list(TIES[case])
    report = to_burn(case, tmp_path / "p.bpk", allow_partial=True)
    want = load_file(str(FIXTURES / f"{case}_expected.safetensors"))
    got = read(tmp_path / "p.bpk")
    unused = frozenset(summary.unused)  # left as they are: lm_head.bias, predictions.bias
    assert len(unused) == 1
    assert_port_record(got, {k: v for k, v in want.items() if k not in refused}, unused)


@pytest.mark.parametrize("case", sorted(TIES))
def test_with_the_suggested_ties_the_record_is_the_ports(case: str, tmp_path: Path) -> None:
    report = to_burn(case, tmp_path / "o.bpk", ties=TIES[case])
    assert report.ok, report.summary  # type: ignore[attr-defined]
    want = tied_expected(case)
    assert sorted(want) == sorted(target_names(case))  # now the port fills every field
    unused = report.summary.unused  # type: ignore[attr-defined]
    assert unused == (("lm_head.bias",) if case == "roberta" else ("predictions.bias",))
    assert_port_record(read(tmp_path / "o.bpk"), want, frozenset(unused))


@pytest.mark.parametrize("case", sorted(TIES))
def test_ties_and_written_rules_reproduce_it_without_the_target(case: str, tmp_path: Path) -> None:
    rules = tmp_path / "rules.txt"
    to_burn(case, tmp_path / "a.bpk", ties=TIES[case], write_rules=str(rules))
    opts = ConvertOptions(adapters=TO_BURN, ties=TIES[case], remap_file=str(rules))
    report = convert(FIXTURES / f"{case}.safetensors", tmp_path / "b.bpk", opts)
    assert report.written
    got = read(tmp_path / "b.bpk")
    assert_port_record(got, tied_expected(case), frozenset(set(got) - set(target_names(case))))


@pytest.mark.parametrize(
    ("case", "ties"),
    [*((c, ()) for c in (*EXACT, "llama", "roberta", "albert")), *TIES.items()],
)
def test_no_tensor_lands_in_a_wrong_role_target(
    case: str, ties: tuple[str, ...], tmp_path: Path
) -> None:
    """Every tensor the inferred rules place is where the port's own rules place it."""
    report = to_burn(case, tmp_path / "o.bpk", dry_run=True, ties=ties)
    want = load_file(str(FIXTURES / f"{case}_expected.safetensors"))
    sd = load_file(str(FIXTURES / f"{case}.safetensors"))
    by_value: dict[str, set[str]] = {}
    for name, array in want.items():
        for src, value in sd.items():
            if value.shape in (array.shape, array.T.shape) and (
                np.array_equal(value, array) or np.array_equal(value.T, array)
            ):
                by_value.setdefault(name, set()).add(src)
    origin = dict(t.split("=") for t in ties)  # a tie's copy is read from its SOURCE
    placed = 0
    for row in report.plan:  # type: ignore[attr-defined]
        if row.target in want and row.target in by_value:
            assert origin.get(row.source, row.source) in by_value[row.target], row
            placed += 1
    made = {row.target for row in report.plan}  # type: ignore[attr-defined]
    assert placed == len(by_value.keys() & made) >= len(want) - 4  # not vacuous


def test_the_wrong_suggestions_of_the_issue_are_gone(tmp_path: Path) -> None:
    wrong = [r"^lm_head\.=embeddings.", r"^lm_head\.=tok_embeddings.", r"\.1\.=.linear.",
             r"^predictions\.=mlm_dense.", r"\.out_proj\.=.key."]  # fmt: skip
    for case in ("roberta", "llama", "albert", "mobilenetv2", "yolox"):
        for options in ({}, {"infer": False}):
            report = to_burn(case, tmp_path / f"{case}.bpk", dry_run=True, **options)
            values = [f.value or "" for f in report.fixes]  # type: ignore[attr-defined]
            assert not [v for v in values if v in wrong], (case, values)
            # the adapter the command line has is never suggested again
            assert "pytorch-to-burn" not in values, (case, values)
            assert all(v.startswith("^") for f, v in zip(report.fixes, values, strict=True)  # type: ignore[attr-defined]
                       if f.name == "remap")  # fmt: skip


def test_two_sources_with_nothing_to_decide_are_ambiguous_not_guessed() -> None:
    from ckptctl.ops._structure import infer_rules

    source = {"blk.a.weight": (4, 4), "blk.b.weight": (4, 4), "blk.c.weight": (4, 6)}
    target = {"blk.x.weight": (4, 4), "blk.y.weight": (4, 4), "blk.z.weight": (4, 6)}
    found = infer_rules(source, target)
    assert [(m.source, m.target) for m in found.matches] == [("blk.c", "blk.z")]
    assert {(a.target, a.candidates) for a in found.ambiguous} == {
        ("blk.x", ("blk.a", "blk.b")), ("blk.y", ("blk.a", "blk.b"))}  # fmt: skip
    assert [r[:2] for r in found.rules] == [(r"^blk\.c\.(weight)$", "blk.z.$1")]


def test_a_linear_never_fills_an_embedding_of_the_same_shape() -> None:
    from ckptctl.ops._structure import infer_rules

    source = {"lm_head.weight": (24, 8), "model.embed_tokens.weight": (24, 8)}
    target = {"output.weight": (8, 24), "tok_embeddings.weight": (24, 8)}
    pairs = {(m.source, m.target) for m in infer_rules(source, target).matches}
    assert pairs == {("lm_head", "output"), ("model.embed_tokens", "tok_embeddings")}


def test_a_rules_file_with_a_bad_rule_is_refused_by_line(tmp_path: Path) -> None:
    from ckptctl.errors import SelectionError

    path = tmp_path / "rules.txt"
    path.write_text("# header\n^a\\.=b.  # why\n\n(=x\n")
    with pytest.raises(SelectionError, match="line 4"):
        read_rules_file(str(path))
    path.write_text("# header\n^a\\.=b.  # why\n")
    assert read_rules_file(str(path)) == [("^a\\.=b.", "why")]


def test_block_indices_align_by_name_first_then_in_order() -> None:
    from ckptctl.ops._structure import alignment

    # under a name both paths have, the same index (YOLOX's dark3.1 Sequential position is
    # yolox-burn's c3 field; its m.N stays m.N)
    assert alignment("dark3.1.m.2.conv1.conv", "dark3.c3.m.2.conv1.conv") == (3,)
    assert alignment("dark3.1.m.0.conv1.conv", "dark3.c3.m.2.conv1.conv") is None
    # otherwise in order from the first: layer.N -> layers.N, features.N.conv.0.0 -> pw.conv
    assert alignment("encoder.layer.3.output.dense", "encoder.layers.3.pwff.linear_outer") == (2,)
    assert alignment("encoder.layer.3.output.dense", "encoder.layers.4.pwff.linear_outer") is None
    assert alignment("features.2.conv.0.0", "features.2.InvertedResidual.pw.conv") == (1,)
    assert alignment("head.cls_convs.1.0.dconv", "head.cls_convs.1.conv0.DwsConv.dconv") == (2,)
    assert alignment("head.cls_convs.1.0.dconv", "head.cls_convs.0.conv0.DwsConv.dconv") is None
    assert alignment("a.0.b", "a.b") == ()
    assert alignment("a.b", "a.0.b") is None


def test_a_sequential_position_meets_the_numbered_field_in_its_place() -> None:
    from ckptctl.ops._structure import _positions_agree, infer_rules

    assert _positions_agree("head.cls_convs.0.1.dconv", "head.cls_convs.0.conv1.DwsConv.dconv") == 1
    assert _positions_agree("head.cls_convs.0.1.dconv", "head.cls_convs.0.conv0.DwsConv.dconv") == 0
    assert _positions_agree("dark2.1.conv2.conv", "dark2.c3.conv1.conv") == 0  # not in its place
    source = {"blk.0.0.weight": (3, 3, 1, 1), "blk.0.1.weight": (3, 3, 1, 1)}
    target = {"blk.0.conv1.weight": (3, 3, 1, 1), "blk.0.conv0.weight": (3, 3, 1, 1)}
    pairs = {(m.source, m.target) for m in infer_rules(source, target).matches}
    assert pairs == {("blk.0.0", "blk.0.conv0"), ("blk.0.1", "blk.0.conv1")}


def test_enclosing_blocks_decide_between_modules_of_one_shape() -> None:
    from ckptctl.ops._structure import infer_rules

    # a DWConv (dconv, pconv) and a Bottleneck's DWConv hold dconvs of one shape; the one
    # whose enclosing modules hold the same tensors on both sides wins, whatever the names
    source = {"d.0.dconv.weight": (2, 1, 3, 3), "d.0.pconv.weight": (4, 2, 1, 1),
              "d.1.m.0.conv2.dconv.weight": (2, 1, 3, 3),
              "d.1.m.0.conv2.pconv.weight": (2, 2, 1, 1)}  # fmt: skip
    target = {"d.conv.DwsConv.dconv.weight": (2, 1, 3, 3),
              "d.conv.DwsConv.pconv.weight": (4, 2, 1, 1),
              "d.c3.m.0.conv2.DwsConv.dconv.weight": (2, 1, 3, 3),
              "d.c3.m.0.conv2.DwsConv.pconv.weight": (2, 2, 1, 1)}  # fmt: skip
    pairs = {(m.source, m.target) for m in infer_rules(source, target).matches}
    assert pairs == {
        ("d.0.dconv", "d.conv.DwsConv.dconv"), ("d.0.pconv", "d.conv.DwsConv.pconv"),
        ("d.1.m.0.conv2.dconv", "d.c3.m.0.conv2.DwsConv.dconv"),
        ("d.1.m.0.conv2.pconv", "d.c3.m.0.conv2.DwsConv.pconv"),
    }  # fmt: skip


def test_a_rule_must_rename_exactly_what_it_claims() -> None:
    from ckptctl.ops._structure import _exact

    source = {"a.w": (1,), "b.w": (1,), "ba.w": (1,)}
    expected = {"a.w": "x.w"}
    anchored = (r"^a\.(w)$", "x.$1", "")
    loose = (r"a\.(w)$", "x.$1", "")  # also renames ba.w
    assert _exact([anchored], source, expected)
    assert not _exact([loose], source, expected)
    assert _exact([], source, expected)  # a claim left undone is no wrong rename
    assert not _exact([(r"^a\.(w)$", "y.$1", "")], source, expected)
    # together: a rule that renames what an earlier one made
    assert not _exact([anchored, (r"^x\.(w)$", "z.$1", "")], {"a.w": (1,)}, expected)


def test_the_cli_names_the_rope_adapter_to_add(run_cli, tmp_path: Path) -> None:
    args = ("convert", FIXTURES / "llama.safetensors", tmp_path / "o.bpk", "-a", "pytorch-to-burn",
            "--target", FIXTURES / "llama_target.bpk")  # fmt: skip
    result = run_cli(*args)
    assert result.code == 1
    assert not (tmp_path / "o.bpk").exists()
    stderr = " ".join(result.stderr.split())
    assert "4 target tensors" in stderr
    assert "rope-interleaved:HEADS,KV_HEADS" in stderr
    assert "'layers.0.attention.wk.weight'" in stderr
    assert "│ ✓ Successfully applied: 17 tensors" in result.stdout  # 21 less q, k
    # the shared reason once, each tensor with its source under it
    assert result.stdout.count("half-split RoPE layout") == 1
    assert (
        "• layers.0.attention.wk.weight (from 'model.layers.0.self_attn.k_proj.weight')"
        in result.stdout
    )
    result = run_cli(*args, "-a", LLAMA_ROPE)
    assert result.code == 0, result.stderr
    assert "RoPE" not in result.stderr


def test_a_modules_signature_is_its_tensors_whatever_their_names_and_layout() -> None:
    from ckptctl.ops._structure import _keyed, _signatures

    source = _signatures({"y.l.weight": (5, 3), "y.n.weight": (3,), "y.bn.num_batches_tracked": ()},
                         target=False)  # fmt: skip
    target = _signatures({"x.Var.lin.weight": (3, 5), "x.norm.gamma": (3,)}, target=True)
    assert source["y"] == target["x"]  # transposed Linear, gamma ~ weight, no counter
    assert source[""] == target[""]
    assert set(target) == {"", "x", "x.lin", "x.norm"}  # the variant is no module of its own
    other = _signatures({"x.lin.weight": (3, 4), "x.norm.gamma": (3,)}, target=True)
    assert other["x"] != source["y"]
    bias = _signatures({"y.l.bias": (5, 3), "y.n.weight": (3,)}, target=False)
    assert bias["y"] != source["y"]  # the kind counts: a bias is no weight
    assert _keyed("a.0.1.b.2") == [("a#0", 1), ("a#1", 2), ("b#0", 4)]
    assert _keyed("a.b") == []


def test_agreement_counts_enclosing_modules_from_the_parent_up_to_the_first_difference() -> None:
    from ckptctl.ops._structure import _agreement, _modules

    src = _modules({"p.q.a.weight": (2, 2, 1, 1), "p.q.b.weight": (3,), "p.z.weight": (7,)},
                   target=False)  # fmt: skip
    dst = _modules({"r.s.a.weight": (2, 2, 1, 1), "r.s.b.gamma": (3,), "r.t.weight": (8,)},
                   target=True)  # fmt: skip
    assert _agreement(src["p.q.a"], dst["r.s.a"]) == 1  # p.q ~ r.s; p (with z) differs from r
    assert _agreement(src["p.q.a"], dst["r.t"]) == 0
    same = _modules({"r.s.a.weight": (2, 2, 1, 1), "r.s.b.gamma": (3,), "r.t.weight": (7,)},
                    target=True)  # fmt: skip
    assert _agreement(src["p.q.a"], same["r.s.a"]) == 3  # p.q, p and the root


def test_rules_that_differ_only_in_a_number_are_one_rule(tmp_path: Path) -> None:
    """ResNet's four stages and two convolutions per block: one rule per part of a block, not
    one per stage and part (issue 48, #49), and the rules still make the port's record."""
    rules = tmp_path / "rules.txt"
    report = to_burn("resnet", tmp_path / "a.bpk", write_rules=str(rules))
    assert report.ok  # type: ignore[attr-defined]
    patterns = [rule for rule, _ in read_rules_file(str(rules))]
    assert len(patterns) == 4, patterns
    assert all(p.startswith(r"^layer([0-9]+)\.([0-9]+)\.") for p in patterns), patterns
    assert_port_record(read(tmp_path / "a.bpk"),
                       load_file(str(FIXTURES / "resnet_expected.safetensors")))  # fmt: skip

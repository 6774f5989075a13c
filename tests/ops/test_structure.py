"""``ops/_structure.py``: the structural match behind ``convert --target``'s inferred rules.

``infer_rules`` and ``match_modules`` pair source modules with target modules by their
parameters' shapes, the blocks that enclose them, their names' tokens, positions and matched
siblings, and write one remap rule per template; the helpers that score a pair (tokens, block
keys, rule templates, the score, what taking a pair records) are checked on their own where
the rules alone cannot show them. Evidence is checked for its facts (how many blocks, which
names agree), not its words. Expected values are the module paths and shapes built in each
test (torchvision's ``layer1.0.conv1``, YOLO's ``cls_convs.0.1``, BERT's
``encoder.layer.0.attention.self.query``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from ckptctl.ops import _structure as st


def _module(
    path: str,
    tokens: frozenset[str] | set[str] = frozenset(),
    ancestry: tuple[int, ...] = (),
    params: dict[str, tuple[int, ...]] | None = None,
) -> st._Module:
    params = params or {"weight": (4, 3)}
    return st._Module(path, params, {p: p for p in params}, st._indices(path),
                      frozenset(tokens), 0, ancestry)  # fmt: skip


@pytest.mark.parametrize(
    ("parts", "tokens"),
    [
        ([], set()),
        (["x", "y", "LayerNorm"], {"layer", "norm"}),  # the whole segment's synonym too
        (["x", "y", "QueryLNProj"], {"q", "norm", "proj", "querylnproj"}),
        (["Value"], {"v"}),
    ],
)
def test_tokens_of_last_segment(parts: list[str], tokens: set[str]) -> None:
    """Words of the last segment and the segment itself, through the synonyms, lowercased."""
    assert st._tokens_of_last(parts) == tokens


def test_keyed_numbers_by_the_name_before_them() -> None:
    assert st._keyed("cls_convs.0.1") == [("cls_convs#0", 1), ("cls_convs#1", 2)]
    assert st._keyed("a.0.1.2.b.3") == [("a#0", 1), ("a#1", 2), ("a#2", 3), ("b#0", 5)]
    assert st._keyed("0.x") == [("#0", 0)]


def test_fill_join_and_text() -> None:
    assert st._fill("a+b.{}.c.{}", ["1", "2"]) == r"a\+b\.1\.c\.2"
    assert st._fill("a+b.{}.c.{}", ["$1", "$2"], escape=False) == "a+b.$1.c.$2"
    assert st._fill("{}.{}.{}", ["x", "y", "z"], escape=False) == "x.y.z"
    assert st._join("", "weight") == "weight"
    assert st._join("fc", "weight") == "fc.weight"
    assert st._text("^a=b", "c=d") == r"^a\=b=c=d"


def test_score_weighs_blocks_names_positions_siblings_and_depth() -> None:
    src = _module("cls_convs.0.1", {"=a", "q"}, (1, 2, 3))
    dst = _module("cls_convs.0.conv1", {"=b", "q", "k"}, (1, 2, 9))
    assert st._agreement(src, dst) == 2
    assert st._positions_agree(src.path, dst.path) == 1
    # 2 blocks x 100, one shared name x 2, one position x 2; the indices differ in number
    assert st._score(src, dst, {}) == 204
    assert st._score(src, dst, {"cls_convs.0": "cls_convs.0"}) == 209  # sibling matched
    assert st._score(src, dst, {"cls_convs.0": "other"}) == 204
    same_depth = _module("cls_convs.0.conv1.Basic", {"=b"}, (5,))
    assert st._score(_module("cls_convs.0.x", {"=c"}, (6,)), same_depth, {}) == 1
    # a top-level module has no parent to be a sibling under
    assert st._score(_module("a"), _module("b"), {"": ""}) == 1


def test_take_records_the_parents_and_frees_both() -> None:
    s, other = _module("enc.layer.0.attn"), _module("enc.layer.1.attn")
    edges = {"enc.layers.0.Basic.mha": [s, other], "enc.layers.1.mha": [other, s]}
    parents: dict[str, str] = {}
    st._take(s, "enc.layers.0.Basic.mha", edges, parents)
    assert parents == {"enc.layer.0": "enc.layers.0"}  # the variant segment left out
    assert edges == {"enc.layers.1.mha": [other]}


def test_evidence_names_blocks_only_when_they_decide() -> None:
    dst = _module("t", {"=t", "q", "attn"}, (1, 2))
    src = _module("s", {"=s", "q", "attn"}, (1, 2))
    rival = _module("r", {"=r"}, (1, 7))
    evidence = st._evidence(src, dst, [rival])
    assert evidence.startswith("2 enclosing ")  # the rival's blocks agree less: they decide
    assert evidence.endswith("names agree (attn, q)")
    even = _module("e", {"=e"}, (1, 2))  # as many blocks agree for the rival: names decide
    assert st._evidence(src, dst, [even]) == "names agree (attn, q)"
    assert st._evidence(_module("s", {"=s"}, (3,)), dst, []) == "names agree (a matched sibling)"


def test_fits_keeps_embeddings_and_other_ranks_as_they_are() -> None:
    def fits(path: str, shape: tuple[int, ...], want: tuple[int, ...]) -> bool:
        return st._fits(_module(path, params={"weight": shape}),
                        _module(path + "_t", params={"weight": want}))  # fmt: skip

    assert fits("wte", (10, 4), (10, 4))
    assert not fits("wte", (10, 4), (4, 10))  # an Embedding keeps its layout
    assert fits("fc", (10, 4), (4, 10))  # a Linear arrives transposed
    assert not fits("fc", (10, 4), (10, 4))
    assert not fits("conv", (2, 3, 4), (2, 3, 5))
    assert fits("conv", (2, 3, 4), (2, 3, 4))


def test_rules_list_block_indices_in_numeric_order_when_blocks_differ() -> None:
    """One source template, two target templates: each rule lists its blocks (2 before 10)."""
    source = {f"layer.{i}.fc.weight": (6, 7) if i in (2, 10) else (4, 3) for i in (0, 1, 2, 10)}
    target = {**{f"a.{i}.fc.weight": (3, 4) for i in (0, 1)},
              **{f"b.{i}.fc.weight": (7, 6) for i in (2, 10)}}  # fmt: skip
    rules = st.infer_rules(source, target).rules
    assert [(p, r) for p, r, _ in rules] == [
        (r"^layer\.(0|1)\.fc\.(weight)$", "a.$1.fc.$2"),
        (r"^layer\.(2|10)\.fc\.(weight)$", "b.$1.fc.$2"),
    ]
    assert [blocks(evidence) for _, _, evidence in rules] == ["2 blocks", "2 blocks"]
    assert all("only source module" in evidence for _, _, evidence in rules)


def blocks(evidence: str) -> str | None:
    """How many blocks a rule's evidence says it covers (``"2 blocks"``), or None."""
    head, sep, _ = evidence.partition(": ")
    return head if sep and head.split()[-1] in ("block", "blocks") else None


def rules_of(source: Mapping[str, tuple[int, ...]], target: Mapping[str, tuple[int, ...]]):
    """``(pattern, replacement, blocks)`` of each rule ``infer_rules`` writes, each proven by
    being the only source module whose parameters fit."""
    rules = st.infer_rules(source, target).rules
    assert all("only source module" in evidence for _, _, evidence in rules)
    return [(p, r, blocks(evidence)) for p, r, evidence in rules]


def test_rules_list_the_blocks_when_the_template_would_rename_more() -> None:
    """layer.0 keeps its name: a rule for every block would rename it too."""
    source = {"layer.0.fc.weight": (4, 3), "layer.1.fc.weight": (5, 3)}
    target = {"layer.0.fc.weight": (4, 3), "layers.1.fc.weight": (3, 5)}
    assert rules_of(source, target) == [
        (r"^layer\.(1)\.fc\.(weight)$", "layers.$1.fc.$2", "1 block")
    ]


def test_rules_onto_a_root_parameter_and_a_single_block() -> None:
    assert rules_of({"head.weight": (4, 3)}, {"weight": (3, 4)}) == [
        (r"^head\.(weight)$", "$1", None)
    ]
    source = {"encoder.layer.0.attention.self.query.weight": (4, 3),
              "encoder.layer.0.attention.self.query.bias": (4,)}  # fmt: skip
    target = {"encoder.layers.0.mha.query.weight": (3, 4),
              "encoder.layers.0.mha.query.bias": (4,)}  # fmt: skip
    assert rules_of(source, target) == [
        (r"^encoder\.layer\.([0-9]+)\.attention\.self\.query\.(bias|weight)$",
         "encoder.layers.$1.mha.query.$2", "1 block"),
    ]  # fmt: skip


def _pairs(
    source: Mapping[str, tuple[int, ...]],
    target: Mapping[str, tuple[int, ...]],
    same: Callable[[str, str], bool] | None = None,
) -> list[tuple[str, str]]:
    matches, _ = st.match_modules(source, target, same)
    return [(m.source, m.target) for m in matches]


def test_a_target_without_candidates_does_not_end_the_search() -> None:
    source = {"a.fc.weight": (4, 3)}
    assert _pairs(source, {"x.zz.weight": (9, 9), "y.fc.weight": (3, 4)}) == [("a.fc", "y.fc")]


def test_a_source_as_good_for_another_target_is_not_taken() -> None:
    """One source module, two targets it fits equally well: neither is proven, and neither
    target is ambiguous (each has one candidate: the source's own choice is what is open)."""
    target = {"x.fc.weight": (3, 4), "y.fc.weight": (3, 4)}
    assert _pairs({"a.fc.weight": (4, 3)}, target) == []
    assert st.match_modules({"a.fc.weight": (4, 3)}, target)[1] == []


def test_values_decide_after_a_target_without_candidates() -> None:
    source = {"a.fc.weight": (4, 3), "b.fc.weight": (4, 3)}
    target = {"x.other.weight": (7, 7), "y.fc.weight": (3, 4)}
    assert _pairs(source, target) == []  # names and shapes cannot decide

    def same(s: str, t: str) -> bool:  # only b's values equal y's
        return s.startswith("b.")

    assert _pairs(source, target, same) == [("b.fc", "y.fc")]


def test_rules_exact_alone_but_not_together_are_all_withdrawn() -> None:
    """blk.5 -> layer.5, then the rule for layer.N -> layers.N takes it on to layers.5."""
    source = {"blk.5.fc.weight": (4, 3), "layer.0.fc.weight": (5, 3)}
    target = {"layer.5.fc.weight": (3, 4), "layers.0.fc.weight": (3, 5)}
    found = st.infer_rules(source, target)
    assert [(m.source, m.target) for m in found.matches] == [
        ("blk.5.fc", "layer.5.fc"),
        ("layer.0.fc", "layers.0.fc"),
    ]
    rules = st._rules(found.matches, source)
    expected = {"blk.5.fc.weight": "layer.5.fc.weight", "layer.0.fc.weight": "layers.0.fc.weight"}
    assert len(rules) == 2
    assert all(st._exact([rule], source, expected) for rule in rules)
    assert not st._exact(rules, source, expected)
    assert found.rules == ()


@pytest.mark.parametrize(
    ("path", "target", "tokens"),
    [
        ("encoder.layer.0.attention.self.query", False,
         {"=encoder", "encoder", "=layer", "layer", "=attention", "attn", "=self", "self",
          "=query", "q"}),
        # a segment that names where a norm sits stands for its tokens; later ones still count
        ("blk.input_layernorm.sub", False, {"=blk", "blk", "attn", "norm", "=sub", "sub"}),
        # Burn's norm_1 is the attention's norm in a target, a plain name in a source
        ("enc.norm_1.inner", True, {"=enc", "enc", "attn", "norm", "=inner", "inner"}),
        ("enc.norm_1.inner", False, {"=enc", "enc", "=norm_1", "norm", "1", "=inner", "inner"}),
        # the segment without underscores is looked up too
        ("x.inter_mediate", False, {"=x", "x", "=inter_mediate", "inter", "mediate", "inner"}),
        ("x.post_norm", False, {"=x", "x", "=post_norm", "post:norm"}),  # after "post"
    ],
)  # fmt: skip
def test_tokens_of_a_module_path(path: str, target: bool, tokens: set[str]) -> None:
    assert st._tokens(path, target=target) == tokens


def test_signatures_equate_transposed_matrices_only() -> None:
    """A rank-2 shape counts unordered (a Linear arrives transposed); no other rank does."""
    assert (
        st._signatures({"a.w": (3, 4)}, target=False)["a"]
        == st._signatures({"a.w": (4, 3)}, target=False)["a"]
    )
    assert (
        st._signatures({"a.w": (2, 3, 4)}, target=False)["a"]
        != st._signatures({"a.w": (4, 3, 2)}, target=False)["a"]
    )
    # a parameter at the root counts once for the root, as one inside a module does
    assert (
        st._signatures({"weight": (3,)}, target=False)[""]
        == st._signatures({"x.weight": (3,)}, target=False)[""]
    )

"""Structural matching of source modules onto a target's (issue 24): rules that are right, or none.

Source and target names are module trees. Each *module* (a name without its last segment) has
a signature: its parameters (norm ``gamma``/``beta`` count as ``weight``/``bias``, BatchNorm's
``num_batches_tracked`` is left out, as Burn has none) and their shapes. A source module can
fill a target module only with the same parameters, each of the same shape or, for a rank-2
weight, the transposed one; a source named like a Linear (``lm_head``, ``*_proj``, ``dense``)
must arrive transposed (unless square), one named like an Embedding (``embed_tokens``,
``word_embeddings``) must not. Block indices must agree (:func:`alignment`): an index under
a name both paths have is equal (``dark3.1.m.0`` -> ``dark3.c3.m.0``), the others are the
source's first, in order (``encoder.layer.3.x`` -> ``encoder.layers.3.y``,
``features.2.conv.0.0`` -> ``features.2.InvertedResidual.pw.conv``).

Among the pairs that fit, the evidence, strongest first: enclosing blocks that hold the same
tensors on both sides (blocks matched to blocks: a DWConv's ``dconv`` is not a Bottleneck's of
the same shape); shared name tokens, with role synonyms such as ``LayerNorm`` ~ ``norm``,
``q_proj`` ~ ``wq``, ``intermediate`` ~ ``inner``; a Sequential position against the
numbered field in its place (``cls_convs.0.1`` ~ ``cls_convs.0.conv1``); a matched sibling (a
BatchNorm beside its matched Conv). A pair is proven when it is the only one left for both
sides, or its evidence is strictly the best for both; then, for a target record with real
values, when exactly one candidate holds the target's values. Anything else is *ambiguous* and
named, never guessed: no Jaro similarity. Enum-variant segments of the target (``Basic``,
``InvertedResidual``) are carried into the replacement.

Each proven pair becomes one anchored rule ``^<source module>\\.(<params>)$ =
<target module>.$N`` (block indices as groups when the same rule holds for every block), and the
whole list is checked on every source name before it is returned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ckptctl.adapters.families import is_enum_variant_segment
from ckptctl.adapters.rename import parse_rules, remap_name
from ckptctl.ops._generalize import generalize
from ckptctl.ops._roles import describe, role_of

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

Shape = tuple[int, ...]

#: Parameters Burn has no field for (BatchNorm's counter): left out of a module's signature.
_DROPPED = frozenset({"num_batches_tracked"})
_PARAM = {"gamma": "weight", "beta": "bias"}
_LINEAR = re.compile(
    r"^(fc\d*|linear\w*|\w*_proj|proj|query|key|value|dense|\w+_dense|lm_head|classifier"
    r"|w[123qkvo]|out_proj|decoder)$",
    re.IGNORECASE,
)
_EMBEDDING = re.compile(r"^(embed_\w+|\w*_?embeddings?|wte|wpe|tok_embeddings)$", re.IGNORECASE)
# one canonical token per role, so that the producers' names meet Burn's (sources in comments)
_SYNONYMS = {
    "query": "q", "wq": "q", "key": "k", "wk": "k", "value": "v", "wv": "v",
    "wo": "o", "out": "o", "output": "o",
    "attention": "attn", "attn": "attn", "mha": "attn", "self_attn": "attn",
    "layernorm": "norm", "layer_norm": "norm", "ln": "norm", "rmsnorm": "norm", "bn": "norm",
    "intermediate": "inner", "inner": "inner", "outer": "outer",
    "embeddings": "embed", "embedding": "embed", "embed": "embed",
    "tok": "tok", "token": "tok", "tokens": "tok",
    "predictions": "mlm", "mlm": "mlm", "feed_forward": "ffn", "mlp": "ffn", "ffn": "ffn",
    # Burn's SwiGlu is silu(linear_inner(x)) * linear_outer(x) (burn-nn swiglu.rs); Hugging
    # Face's LlamaMLP is down(act(gate(x)) * up(x)) (modeling_llama.py)
    "gate": "inner", "up": "outer",
}  # fmt: skip
# whole segments that name where a norm sits: Hugging Face Llama applies input_layernorm before
# attention and post_attention_layernorm before the MLP (modeling_llama.py LlamaDecoderLayer),
# llama-burn attention_norm / ffn_norm likewise (transformer.rs TransformerBlock::forward);
# ALBERT's full_layer_layer_norm ends the feed-forward (modeling_albert.py AlbertLayer)
_SEGMENTS = {
    "input_layernorm": ("attn", "norm"), "post_attention_layernorm": ("ffn", "norm"),
    "attention_norm": ("attn", "norm"), "ffn_norm": ("ffn", "norm"),
    "full_layer_layer_norm": ("ffn", "norm"),
}  # fmt: skip
# Burn's post-norm TransformerEncoderLayer: norm_1 follows attention, norm_2 the feed-forward
# (burn-nn transformer/encoder.rs forward, norm_first = false, as every BERT port sets); a
# source norm is on the attention side only when it sits under an attention module
_BURN_NORMS = {"norm_1": ("attn", "norm"), "norm_2": ("ffn", "norm")}
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


@dataclass(frozen=True)
class Match:
    """A proven pair of modules and why.

    Attributes:
        source: the source module path.
        target: the target module path.
        params: the source parameter names it renames.
        evidence: why this pair and no other.
    """

    source: str
    target: str
    params: tuple[str, ...]
    evidence: str


@dataclass(frozen=True)
class Ambiguity:
    """A target module more than one source module could fill, with nothing to decide.

    Attributes:
        target: the target module path.
        candidates: the source module paths that fit it.
        names: the target tensor names left missing.
        sources: for each of ``names``, the source tensor names that could fill it.
    """

    target: str
    candidates: tuple[str, ...]
    names: tuple[str, ...]
    sources: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class Inference:
    """What :func:`infer_rules` found.

    Attributes:
        matches: proven pairs (identity pairs left out).
        ambiguous: target modules with several candidates.
        rules: ``(pattern, replacement, evidence)``, verified on every source name.
    """

    matches: tuple[Match, ...]
    ambiguous: tuple[Ambiguity, ...]
    rules: tuple[tuple[str, str, str], ...]


@dataclass
class _Module:
    path: str
    params: dict[str, Shape]  # normalised parameter name -> shape
    names: dict[str, str]  # normalised parameter name -> real parameter name
    indices: tuple[str, ...]
    tokens: frozenset[str]
    order: int
    ancestry: tuple[int, ...] = ()  # signatures of the enclosing modules, parent first


def _split(name: str) -> tuple[str, str]:
    prefix, _, param = name.rpartition(".")
    return prefix, param


def _modules(shapes: Mapping[str, Shape], *, target: bool) -> dict[str, _Module]:
    signatures = _signatures(shapes, target=target)
    out: dict[str, _Module] = {}
    for name, shape in shapes.items():
        path, param = _split(name)
        if param in _DROPPED:
            continue
        module = out.get(path)
        if module is None:
            module = _Module(path, {}, {}, _indices(path), _tokens(path, target=target), len(out),
                             _ancestry(path, signatures, target=target))  # fmt: skip
            out[path] = module
        norm = _PARAM.get(param, param)
        module.params[norm] = shape
        module.names[norm] = param
    return out


def _signatures(shapes: Mapping[str, Shape], *, target: bool) -> dict[str, int]:
    """Every enclosing module's signature: the multiset of its tensors' kinds and shapes (a
    rank-2 shape unordered, as a Linear arrives transposed); enum variants left out of the
    target's paths. Two modules with equal signatures hold the same tensors under any names."""
    found: dict[str, list[tuple[str, Shape]]] = {}
    for name, shape in shapes.items():
        path, param = _split(name)
        if param in _DROPPED:
            continue
        key = (_PARAM.get(param, param), tuple(sorted(shape)) if len(shape) == 2 else shape)
        parts = (_drop_variants(path) if target else path).split(".") if path else []
        for i in range(len(parts) + 1):
            found.setdefault(".".join(parts[:i]), []).append(key)
    return {p: hash(tuple(sorted(keys))) for p, keys in found.items()}


def _ancestry(path: str, signatures: Mapping[str, int], *, target: bool) -> tuple[int, ...]:
    parts = (_drop_variants(path) if target else path).split(".")
    return tuple(signatures[".".join(parts[:i])] for i in range(len(parts) - 1, -1, -1))


def _agreement(src: _Module, dst: _Module) -> int:
    """How many enclosing modules, from the parent up, hold the same tensors on both sides:
    blocks matched to blocks (a DWConv's dconv is not a Bottleneck's of the same shape)."""
    count = 0
    for a, b in zip(src.ancestry, dst.ancestry, strict=False):
        if a != b:
            break
        count += 1
    return count


def _keyed(path: str) -> list[tuple[str, int]]:
    """Each numeric segment of ``path`` keyed by the name before it and how many numbers
    since (``cls_convs.0.1`` -> ``cls_convs#0``, ``cls_convs#1``), with its position."""
    out, name, run = [], "", 0
    for i, part in enumerate(path.split(".")):
        if part.isdigit():
            out.append((f"{name}#{run}", i))
            run += 1
        else:
            name, run = part, 0
    return out


@lru_cache(maxsize=1 << 16)
def alignment(source: str, target: str) -> tuple[int, ...] | None:
    """The segment positions of ``source`` that hold the target module's block indices, in
    the target's order, or None when the indices disagree.

    An index under a name both paths have must be equal (``dark3.1.m.0`` -> ``dark3.c3.m.0``:
    ``m``'s, whatever the Sequential position before it); the others are matched in order from
    the first (``encoder.layer.3`` -> ``encoder.layers.3``, ``features.2.conv.0.0`` ->
    ``features.2.pw.conv``).
    """
    src_parts, dst_parts = source.split("."), _drop_variants(target).split(".")
    src, dst = _keyed(source), _keyed(_drop_variants(target))
    src_keys = {k for k, _ in src}
    dst_keys = {k for k, _ in dst}
    by_key = {k: i for k, i in src}
    free = [i for k, i in src if k not in dst_keys]
    out: list[int] = []
    for key, i in dst:
        if key in src_keys:
            j = by_key[key]
        elif free:
            j = free.pop(0)
        else:
            return None
        if src_parts[j] != dst_parts[i] or (out and j <= out[-1]):
            return None
        out.append(j)
    return tuple(out)


_NUMBERED = re.compile(r"^[A-Za-z_]+?_?([0-9]+)$")


@lru_cache(maxsize=1 << 16)
def _positions_agree(source: str, target: str) -> int:
    """Order as evidence: a Sequential position right after a block index (``cls_convs.0.1``)
    against the numbered name in the same place (``cls_convs.0.conv1``, yolox-burn's
    ConvBlock { conv0, conv1 } for YOLOX's Sequential(Conv, Conv)); how many agree."""
    holes = alignment(source, target)
    if not holes:
        return 0
    src, dst = source.split("."), _drop_variants(target).split(".")
    agree = 0
    for j, i in zip(holes, _numeric(".".join(dst)), strict=True):
        if j + 1 < len(src) and i + 1 < len(dst) and src[j + 1].isdigit():
            numbered = _NUMBERED.match(dst[i + 1])
            agree += numbered is not None and numbered.group(1) == src[j + 1]
    return agree


def _indices(path: str) -> tuple[str, ...]:
    return tuple(p for p in path.split(".") if p.isdigit())


def _tokens(path: str, *, target: bool) -> frozenset[str]:
    parts = [p for p in path.split(".") if p and not p.isdigit()]
    if target:
        parts = [p for p in parts if not is_enum_variant_segment(p)]
    out: set[str] = set()
    under_attention = False
    for i, part in enumerate(parts):
        low = part.lower()
        if low in _SEGMENTS:
            out.update(_SEGMENTS[low])
            continue
        if target and low in _BURN_NORMS:
            out.update(_BURN_NORMS[low])
            continue
        out.add("=" + low)  # the whole segment: conv1 is not conv2
        words = [w.lower() for w in _WORD.findall(part)]
        joined = low.replace("_", "")
        if joined in _SYNONYMS:
            words.append(joined)
        post = False
        for word in words:
            token = _SYNONYMS.get(word, word)
            if word == "post":
                post = True
                continue
            out.add(f"post:{token}" if post else token)
        if "attn" in out and i < len(parts) - 1:
            under_attention = True
    if not target and under_attention and "norm" in _tokens_of_last(parts):
        out.add("attn")
    return frozenset(out)


def _tokens_of_last(parts: Sequence[str]) -> set[str]:
    if not parts:
        return set()
    return {_SYNONYMS.get(w.lower(), w.lower()) for w in _WORD.findall(parts[-1])} | {
        _SYNONYMS.get(parts[-1].lower(), parts[-1].lower())
    }


def _fits(src: _Module, dst: _Module) -> bool:
    if set(src.params) != set(dst.params):
        return False
    last = src.path.rpartition(".")[2]
    for param, shape in src.params.items():
        want = dst.params[param]
        if len(shape) == 2 and param == "weight" and shape != want[::-1] and shape != want:
            return False
        if len(shape) == 2 and param == "weight" and shape[0] != shape[1]:
            if _LINEAR.match(last) and shape == want:
                return False  # a Linear arrives transposed in Burn
            if _EMBEDDING.match(last) and shape != want:
                return False  # an Embedding keeps its layout
        elif len(shape) != 2 and shape != want:
            return False
    return alignment(src.path, dst.path) is not None


#: Score per enclosing module that agrees (:func:`_agreement`): structure before names.
_BLOCK_WEIGHT = 100


def _score(src: _Module, dst: _Module, parents: Mapping[str, str]) -> int:
    score = _BLOCK_WEIGHT * _agreement(src, dst) + 2 * len(src.tokens & dst.tokens)
    score += 2 * _positions_agree(src.path, dst.path)
    sp, tp = src.path.rpartition(".")[0], _drop_variants(dst.path).rpartition(".")[0]
    if sp and parents.get(sp) == tp:
        score += 5  # its sibling is matched: a BatchNorm beside its Conv
    if len(src.indices) == len(dst.indices):
        score += 1
    return score


def _drop_variants(path: str) -> str:
    return ".".join(p for p in path.split(".") if not is_enum_variant_segment(p))


def match_modules(
    source: Mapping[str, Shape],
    target: Mapping[str, Shape],
    same: Callable[[str, str], bool] | None = None,
    *,
    ordered: bool = False,
) -> tuple[list[Match], list[Ambiguity]]:
    """Pair the source modules the target lacks with the target modules the source lacks.

    With ``same``, a target module several source modules fit goes to the one candidate whose
    every tensor holds the target's values (a target record with real values). With
    ``ordered`` (both mappings list their tensors in the modules' definition order), what is
    still open is decided by that order when it leaves one alignment (:func:`_by_order`).
    """
    src = _modules(source, target=False)
    dst = _modules(target, target=True)
    free_src = {p: m for p, m in src.items() if p not in dst}
    free_dst = {p: m for p, m in dst.items() if p not in src}
    edges = {t: [s for s in free_src.values() if _fits(s, m)] for t, m in free_dst.items()}
    aligned = _order_alignment(list(free_src.values()), list(free_dst.values())) if ordered else {}
    matches: list[Match] = []
    parents: dict[str, str] = {}
    progress = True
    while progress:
        progress = False
        by_source: dict[str, list[str]] = {}
        for t, cands in edges.items():
            for s in cands:
                by_source.setdefault(s.path, []).append(t)
        for t, cands in list(edges.items()):
            if t not in edges or not cands:
                continue
            scores = {s.path: _score(s, free_dst[t], parents) for s in cands}
            best = max(scores.values())
            top = [s for s in cands if scores[s.path] == best]
            if len(top) != 1:
                continue
            s = top[0]
            rivals = [_score(s, free_dst[o], parents) for o in by_source[s.path] if o != t]
            if any(r >= best for r in rivals):
                continue
            if len(cands) == 1 and not rivals:
                evidence = "the only source module whose parameters fit"
            else:
                evidence = _evidence(s, free_dst[t], [c for c in cands if c is not s])
            matches.append(Match(s.path, t, tuple(s.names.values()), evidence))
            _take(s, t, edges, parents)
            progress = True
            break
        decided = [] if progress else _decide(edges, free_dst, same)
        if not decided and not progress and aligned:
            decided = _by_order(edges, free_dst, aligned, matches, parents)
        for s, t, evidence in decided:  # names and shapes decide nothing more: other evidence
            matches.append(Match(s.path, t, tuple(s.names.values()), evidence))
            _take(s, t, edges, parents)
            progress = True
    ambiguous = [
        Ambiguity(t, tuple(s.path for s in cands),
                  tuple(_join(t, n) for n in dst[t].names.values()),
                  tuple(tuple(_join(s.path, s.names[p]) for s in cands) for p in dst[t].names))
        for t, cands in edges.items() if len(cands) > 1
    ]  # fmt: skip
    return matches, ambiguous


def _evidence(src: _Module, dst: _Module, others: Sequence[_Module]) -> str:
    """Why ``src`` and not ``others`` fills ``dst``: the blocks, when they decide, and the names."""
    shared = sorted(x.lstrip("=") for x in src.tokens & dst.tokens)
    names = f"names agree ({', '.join(shared) or 'a matched sibling'})"
    levels = _agreement(src, dst)
    if levels and any(_agreement(o, dst) < levels for o in others):
        return f"{levels} enclosing modules hold the same tensors; {names}"
    return names


def _take(s: _Module, t: str, edges: dict[str, list[_Module]], parents: dict[str, str]) -> None:
    """Record the pair ``s`` -> ``t``: neither is free any more."""
    parents[s.path.rpartition(".")[0]] = _drop_variants(t).rpartition(".")[0]
    del edges[t]
    for other in edges.values():
        if s in other:
            other.remove(s)


def _decide(
    edges: Mapping[str, list[_Module]], free_dst: Mapping[str, _Module],
    same: Callable[[str, str], bool] | None,
) -> list[tuple[_Module, str, str]]:  # fmt: skip
    """A pair among candidates names and shapes leave open, and its evidence: the role table
    (``_roles``), then the target's values; none when neither decides."""
    found = _by_roles(edges, free_dst)
    if found is not None:
        return [found]
    by_values = None if same is None else _by_values(edges, free_dst, same)
    if by_values is None:
        return []
    return [(*by_values, "values equal the target's (bytes, or the transpose)")]


def _by_roles(
    edges: Mapping[str, list[_Module]], free_dst: Mapping[str, _Module]
) -> tuple[_Module, str, str] | None:
    """The first target module whose role row (``_roles.ROLE_ALIASES``) exactly one of its
    candidates shares, when that candidate could fill no other target of the row."""
    for t, cands in edges.items():
        row = role_of(_drop_variants(t)) if len(cands) > 1 else None
        if row is None:
            continue
        same_role = [c for c in cands if role_of(c.path) is row]
        if len(same_role) != 1:
            continue
        s = same_role[0]
        if any(o != t and s in others and role_of(_drop_variants(o)) is row
               for o, others in edges.items()):  # fmt: skip
            continue
        return s, t, describe(row, s.path, _drop_variants(free_dst[t].path))
    return None


#: Most free modules per side aligned by order: counting the alignments checks every pair.
MAX_ORDERED_MODULES = 512
_MANY = 2  # alignment counts are capped here: one or more than one is all that matters


def _order_alignment(src: Sequence[_Module], dst: Sequence[_Module]) -> dict[str, _Module]:
    """Target module -> source module when, in definition order, exactly one order-keeping
    assignment gives every free target module a free source module that fits (the same
    sequence of parameter shapes, extra source modules skipped); else empty."""
    n, m = len(src), len(dst)
    if not 0 < m <= n <= MAX_ORDERED_MODULES:
        return {}
    # ways[i][j]: how many ways (capped) dst[i:] goes into src[j:] in order
    ways = [bytearray(n + 1) for _ in range(m + 1)]
    ways[m] = bytearray([1] * (n + 1))
    fit = [[_fits(s, d) for s in src] for d in dst]
    for i in range(m - 1, -1, -1):
        for j in range(n - 1, -1, -1):
            ways[i][j] = min(_MANY, ways[i][j + 1] + (ways[i + 1][j + 1] if fit[i][j] else 0))
    if ways[0][0] != 1:
        return {}
    out: dict[str, _Module] = {}
    j = 0
    for i, d in enumerate(dst):  # the one path: skip a source module only when it must be
        while not (fit[i][j] and ways[i + 1][j + 1]):
            j += 1
        out[d.path] = src[j]
        j += 1
    return out


def _by_order(
    edges: Mapping[str, list[_Module]],
    free_dst: Mapping[str, _Module],
    aligned: Mapping[str, _Module],
    matches: Sequence[Match],
    parents: Mapping[str, str],
) -> list[tuple[_Module, str, str]]:
    """The open target modules that the one order alignment gives a candidate of the best
    name evidence, all at once (the alignment is fixed), when every pair proven so far agrees
    with the alignment."""
    if any(m.target in aligned and aligned[m.target].path != m.source for m in matches):
        return []  # the order disagrees with the names: it is no evidence here
    position = {t: k for k, t in enumerate(aligned, 1)}
    out = []
    for t, cands in edges.items():
        s = aligned.get(t)
        if s is None or s not in cands or len(cands) < 2:
            continue
        best = max(_score(c, free_dst[t], parents) for c in cands)
        if _score(s, free_dst[t], parents) < best:
            continue  # a name hint points elsewhere: not for the order to overrule
        out.append((s, t, f"module order: the {_ordinal(position[t])} of {len(aligned)} modules "
                          "with the same sequence of parameter shapes in both files, the only "
                          "alignment"))  # fmt: skip
    return out


def _ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _by_values(
    edges: Mapping[str, list[_Module]], free_dst: Mapping[str, _Module],
    same: Callable[[str, str], bool],
) -> tuple[_Module, str] | None:  # fmt: skip
    """The first target module that exactly one of its candidates fills with equal values."""
    for t, cands in edges.items():
        if len(cands) < 2:
            continue
        dst = free_dst[t]
        equal = [
            c for c in cands
            if all(same(_join(c.path, c.names[p]), _join(t, dst.names[p])) for p in dst.params)
        ]  # fmt: skip
        if len(equal) == 1:
            return equal[0], t
    return None


def infer_rules(
    source: Mapping[str, Shape],
    target: Mapping[str, Shape],
    same: Callable[[str, str], bool] | None = None,
    *,
    ordered: bool = False,
) -> Inference:
    """Rules that rename source modules onto the target's, proven pair by pair.

    Args:
        source: source tensor names and shapes (before any layout adapter).
        target: target tensor names and shapes.
        same: compares a source tensor's values with a target tensor's (a target record with
            real values): decides among candidates names and shapes leave open.
        ordered: both mappings list their tensors in the modules' definition order: what is
            still open is mapped in that order when the shapes leave one alignment.

    Returns:
        The proven matches, the ambiguities and the verified rules: each rule alone renames
        only tensors it claims, to their targets (others are left out, their tensors keep
        their names), and so does the list as a whole (else no rule at all).
    """
    matches, ambiguous = match_modules(source, target, same, ordered=ordered)
    expected = {}
    for m in matches:
        for param in m.params:
            expected[_join(m.source, param)] = _join(m.target, param)
    rules = [r for r in _rules(matches, source) if _exact([r], source, expected)]
    if not _exact(rules, source, expected):
        rules = []  # not exact together (one renames what another made): propose none
    rules = generalize(rules, lambda trial: _exact(trial, source, expected))
    return Inference(tuple(matches), tuple(ambiguous), tuple(rules))


def _exact(
    rules: Sequence[tuple[str, str, str]], source: Mapping[str, Shape], expected: Mapping[str, str]
) -> bool:
    """Whether every source name ``rules`` rename goes where ``expected`` says."""
    parsed = parse_rules([_text(p, r) for p, r, _ in rules])
    for name in source:
        new, _ = remap_name(name, parsed)
        if new != name and new != expected.get(name):
            return False
    return True


def _join(module: str, param: str) -> str:
    return f"{module}.{param}" if module else param


def _text(pattern: str, replacement: str) -> str:
    return pattern.replace("=", "\\=") + "=" + replacement


def _rules(matches: Sequence[Match], source: Mapping[str, Shape]) -> list[tuple[str, str, str]]:
    """One rule per (source template, target template), block indices as groups."""
    groups: dict[tuple[str, str, tuple[str, ...]], list[Match]] = {}
    for m in matches:
        holes = alignment(m.source, m.target) or ()
        key = (_template(m.source, holes), _template(m.target, _numeric(m.target)), m.params)
        groups.setdefault(key, []).append(m)
    by_pattern: dict[str, int] = {}
    for s, _, _ in groups:
        by_pattern[s] = by_pattern.get(s, 0) + 1
    modules = {_split(n)[0] for n in source}
    out = []
    for (s, t, params), members in groups.items():
        alternatives = "|".join(re.escape(p) for p in sorted(set(params)))
        n = s.count("{}")
        general = _instances(s, modules)
        if by_pattern[s] == 1 and len(general) == len(members):
            pattern = _fill(s, ["([0-9]+)"] * n)
        else:  # the same source shape means different targets per block: list the indices
            idx = [sorted({_indices(m.target)[k] for m in members}, key=int) for k in range(n)]
            pattern = _fill(s, ["(" + "|".join(i) + ")" for i in idx])
        replacement = _fill(t, [f"${k + 1}" for k in range(n)], escape=False)
        pattern = "^" + pattern + r"\.(" + alternatives + ")$"
        replacement = (replacement + "." if replacement else "") + f"${n + 1}"
        blocks = f"{len(members)} block{'s' if len(members) != 1 else ''}: " if n else ""
        out.append((pattern, replacement, blocks + members[0].evidence))
    return out


def _numeric(path: str) -> list[int]:
    return [i for i, part in enumerate(path.split(".")) if part.isdigit()]


def _template(path: str, holes: Sequence[int]) -> str:
    """``path`` with the segments at ``holes`` as ``{}``."""
    parts = path.split(".")
    for i in holes:
        parts[i] = "{}"
    return ".".join(parts)


def _fill(template: str, values: Sequence[str], *, escape: bool = True) -> str:
    parts = template.split(".")
    out, k = [], 0
    for part in parts:
        if part == "{}":
            out.append(values[k])
            k += 1
        else:
            out.append(re.escape(part) if escape else part)
    return (r"\." if escape else ".").join(out)


def _instances(template: str, modules: set[str]) -> list[str]:
    regex = re.compile("^" + _fill(template, ["[0-9]+"] * template.count("{}")) + "$")
    return [m for m in modules if regex.match(m)]

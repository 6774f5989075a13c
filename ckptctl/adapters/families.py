"""Layers Burn stores as several modules: split, fuse, rename and renumber, both directions.

PyTorch keeps some layers as fused tensors that Burn 0.22 keeps as separate ``Linear``s
(tracel-ai/burn at 2c06be3, ``crates/burn-nn/src/modules``; every Burn ``Linear`` weight is
``[in, out]``, linear.rs:25-37):

* ``MultiheadAttention``: ``in_proj_weight [3d, d]`` rows ``[0:d]``, ``[d:2d]``, ``[2d:3d]`` are
  Burn's ``query``, ``key``, ``value`` (attention/mha.rs:73-81, forward 212-227: one Linear per
  projection, heads split as ``[b, s, n_heads, d_k]`` like torch); ``out_proj`` is ``output``.
* ``LSTM``: ``weight_ih_l{k}`` rows are gates i, f, g, o (torch.nn.LSTM docs), Burn's
  ``input_gate``, ``forget_gate``, ``cell_gate``, ``output_gate``, each a ``GateController`` of
  ``input_transform`` (x) and ``hidden_transform`` (h) Linears with their own biases
  (rnn/gate_controller.rs:8-11, 42-44; lstm/lstm_module.rs:61-70, 229-264). Layer ``k`` is
  ``Vec`` index ``k`` (Burn has no multi-layer Lstm); ``_reverse`` is ``BiLstm.reverse``
  (lstm/bilstm_module.rs:51-55). ``proj_size`` has no Burn counterpart.
* ``GRU``: rows r, z, n are ``reset_gate``, ``update_gate``, ``new_gate`` (rnn/gru.rs:60-66).
  Burn's default ``reset_after = true`` multiplies the *hidden* transform's output, bias
  included, by r (gru.rs:35, 247-268), which is torch's ``r * (W_hn h + b_hn)``: the biases stay
  apart. ``BiGru`` has ``forward``/``reverse`` (gru.rs:36-40).
* ``RNN``: one ``gate`` (rnn/basic.rs:57-59, 199-204); ``BiRnn`` forward/reverse (basic.rs:254-258).
* ``TransformerEncoderLayer``: ``self_attn`` -> ``mha``, ``linear1``/``linear2`` ->
  ``pwff.linear_inner``/``linear_outer`` (transformer/encoder.rs:211-225, pwff.rs). Post-norm:
  Burn's ``norm_1`` follows attention and ``norm_2`` ends the layer, as torch's norm1/norm2; with
  ``norm_first`` Burn normalises attention's input with ``norm_2`` and the feed-forward's with
  ``norm_1`` (encoder.rs:275-310), so torch norm1 -> norm_2, norm2 -> norm_1.
* ``TransformerDecoderLayer``: ``self_attn``, ``multihead_attn`` -> ``cross_attn``; post-norm
  normN -> norm_N; pre-norm norm3 before self-attention, norm_1 before cross-attention, norm_2
  before the feed-forward (transformer/decoder.rs:182-198, 291-354): norm1 -> norm_3,
  norm2 -> norm_1, norm3 -> norm_2.

One table of *slots* per layer (torch name, row range, Burn name, transposed) drives both
directions, so ``burn-to-pytorch`` is the exact inverse of ``pytorch-to-burn``. Splits read row
ranges of the source lazily and fuses build the fused tensor once (``adapters._rows``).

Also here: Burn's ``PytorchStore`` renumbers gapped ``nn.Sequential`` indices by default,
*after* key remapping (burn-store src/pytorch/store.rs:422-430, ``map_indices_contiguous`` in
keyremapper.rs:225-330): :func:`contiguous_names` is that algorithm, applied in the same place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.adapters._base import Action, ActionKind, PlanItem
from ckptctl.adapters._rows import concat_rows, row_slice
from ckptctl.adapters.modules import FAMILY_TYPES
from ckptctl.errors import SelectionError, UnsupportedError
from ckptctl.fix import Note, Option

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from ckptctl.adapters.modules import ModuleRule
    from ckptctl.model import JSONValue, TensorEntry

#: The two directions, by adapter name.
TO_BURN, TO_TORCH = "pytorch-to-burn", "burn-to-pytorch"

# torch row order of the fused gate matrices (torch.nn.LSTM/GRU docs: W_ii|W_if|W_ig|W_io,
# W_ir|W_iz|W_in) -> Burn's GateController fields
_GATES = {
    "LSTM": ("input_gate", "forget_gate", "cell_gate", "output_gate"),
    "GRU": ("reset_gate", "update_gate", "new_gate"),
    "RNN": ("gate",),
}
# Burn's field-declaration order (the order Burn writes a record in), per segment
_BURN_ORDER = {
    "query": 0, "key": 1, "value": 2, "output": 3,
    "input_gate": 0, "forget_gate": 1, "output_gate": 2, "cell_gate": 3,
    "update_gate": 0, "reset_gate": 1, "new_gate": 2, "gate": 0,
    "input_transform": 0, "hidden_transform": 1, "forward": 0, "reverse": 1,
    "weight": 0, "bias": 1, "gamma": 0, "beta": 1,
    "mha": 0, "cross_attn": 0, "self_attn": 1, "pwff": 2, "linear_inner": 0, "linear_outer": 1,
    "norm_1": 3, "norm_2": 4, "norm_3": 5,
}  # fmt: skip
_POST_NORM = {1: 1, 2: 2, 3: 3}
_PRE_NORM = {
    "TransformerEncoderLayer": {1: 2, 2: 1},
    "TransformerDecoderLayer": {1: 3, 2: 1, 3: 2},
}
_EXCLUDE = Note("leave the layer out with {fix0}", (Option("exclude", takes_value=True),))
_INDEX = re.compile(r"\+?[0-9]+")
_MAX_INDEX = 2**64 - 1  # Rust usize on 64-bit targets


def _j(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def _under(names: Sequence[str], prefix: str) -> list[str]:
    """The names inside module ``prefix`` (all of them for the root): ``attn.query.weight`` is
    inside ``attn``, ``attn2.weight_ih_l0`` is not."""
    return [n for n in names if n.startswith(prefix + ".")] if prefix else list(names)


@dataclass(frozen=True)
class Slot:
    """One piece of one layer: rows of a torch tensor that are one Burn tensor.

    Attributes:
        torch: the torch tensor name.
        rows: ``(first, count)`` rows of it, or None for the whole tensor.
        burn: the Burn tensor name.
        transpose: the Burn tensor is the transpose of those rows (a Burn Linear weight).
        module_type: the Burn module owning the Burn tensor (``Linear``, ``LayerNorm``).
    """

    torch: str
    rows: tuple[int, int] | None
    burn: str
    transpose: bool
    module_type: str


@dataclass(frozen=True)
class Layer:
    """A recognised layer: its family, prefixes on both sides, facts and where they came from."""

    family: str
    torch_prefix: str
    burn_prefix: str
    facts: Mapping[str, object]
    evidence: str
    assumed_post_norm: bool = False


@dataclass(frozen=True)
class Built:
    """One output tensor of the family stage.

    Attributes:
        sources: the input tensor names it was built from.
        entry: the output entry.
        actions: what was done (a split or fuse is one action naming its source rows).
        module_type: the owning Burn/torch module for later adapters (``half``), or None when
            the entry passed through untouched.
    """

    sources: tuple[str, ...]
    entry: TensorEntry
    actions: tuple[Action, ...] = ()
    module_type: str | None = None


@dataclass(frozen=True)
class FamilyResult:
    """The family stage's output.

    Attributes:
        placed: input name -> the outputs that take its place in file order (a layer's outputs
            go where its first input was; its other inputs get none).
        warnings: what the file could not tell (pre- vs post-norm).
    """

    placed: dict[str, list[Built]]
    warnings: list[str | Note] = field(default_factory=list)


# --- slot tables (one per family; the same table serves both directions) -------------------


def _linear(torch: str, burn: str) -> list[Slot]:
    return [
        Slot(f"{torch}.weight", None, f"{burn}.weight", True, "Linear"),
        Slot(f"{torch}.bias", None, f"{burn}.bias", False, "Linear"),
    ]


def _mha(torch: str, burn: str, d: int) -> list[Slot]:
    slots = [
        Slot(_j(torch, "in_proj_weight"), (k * d, d), _j(burn, role, "weight"), True, "Linear")
        for k, role in enumerate(("query", "key", "value"))
    ]
    slots += [
        Slot(_j(torch, "in_proj_bias"), (k * d, d), _j(burn, role, "bias"), False, "Linear")
        for k, role in enumerate(("query", "key", "value"))
    ]
    return slots + _linear(_j(torch, "out_proj"), _j(burn, "output"))


def _recurrent(layer: Layer, hidden: int) -> list[Slot]:
    gates = _GATES[layer.family]
    layers = int(layer.facts.get("num_layers", 1))  # type: ignore[call-overload]  # int by parse
    directions = ("", "_reverse") if layer.facts.get("bidirectional") else ("",)
    vec = bool(layer.facts.get("vec", layers > 1))
    slots = []
    for k in range(layers):
        for direction in directions:
            base = _j(layer.burn_prefix, str(k) if vec else "")
            if len(directions) == 2:
                base = _j(base, "reverse" if direction else "forward")
            for kind, transform in (
                ("weight_ih", "input_transform"), ("weight_hh", "hidden_transform"),
                ("bias_ih", "input_transform"), ("bias_hh", "hidden_transform"),
            ):  # fmt: skip
                torch = _j(layer.torch_prefix, f"{kind}_l{k}{direction}")
                param = kind.split("_")[0]
                slots += [
                    Slot(torch, (j * hidden, hidden), _j(base, gate, transform, param),
                         param == "weight", "Linear")
                    for j, gate in enumerate(gates)
                ]  # fmt: skip
    return slots


def _transformer(layer: Layer, d: int) -> list[Slot]:
    t, b = layer.torch_prefix, layer.burn_prefix
    decoder = layer.family == "TransformerDecoderLayer"
    slots = _mha(_j(t, "self_attn"), _j(b, "self_attn" if decoder else "mha"), d)
    if decoder:
        slots += _mha(_j(t, "multihead_attn"), _j(b, "cross_attn"), d)
    slots += _linear(_j(t, "linear1"), _j(b, "pwff.linear_inner"))
    slots += _linear(_j(t, "linear2"), _j(b, "pwff.linear_outer"))
    norms = _PRE_NORM[layer.family] if layer.facts.get("norm_first") else _POST_NORM
    for n in (1, 2, 3) if decoder else (1, 2):
        for tp, bp in (("weight", "gamma"), ("bias", "beta")):
            slots.append(Slot(_j(t, f"norm{n}", tp), None, _j(b, f"norm_{norms[n]}", bp), False,
                              "LayerNorm"))  # fmt: skip
    return slots


def slots_of(layer: Layer, entries: Mapping[str, TensorEntry]) -> list[Slot]:
    """The slot table of ``layer``, sized from its tensors (``entries`` on either side)."""
    if layer.family in _GATES:
        return _recurrent(layer, int(layer.facts["hidden"]))  # type: ignore[call-overload]
    d = int(layer.facts["d_model"])  # type: ignore[call-overload]  # set by the recognisers
    if layer.family == "MultiheadAttention":
        return _mha(layer.torch_prefix, layer.burn_prefix, d)
    return _transformer(layer, d)


# --- recognising layers from names, shapes, classes and declarations ----------------------


def _prefixes(names: Iterable[str], suffix: str) -> list[str]:
    """Prefixes ``p`` with ``p.suffix`` (or ``suffix`` itself: prefix ``''``) among names."""
    out = []
    for name in names:
        if name == suffix:
            out.append("")
        elif name.endswith("." + suffix):
            out.append(name[: -len(suffix) - 1])
    return out


def _declared(
    rules: Sequence[ModuleRule], names: Iterable[str]
) -> tuple[ModuleRule | None, str | None]:
    """The first family rule matching one of ``names``, and that name."""
    listed = list(names)
    for rule in rules:
        if rule.is_family:
            for name in listed:
                if rule.matches(name):
                    return rule, name
    return None, None


def _module_info(
    modules: Mapping[str, tuple[str, Mapping[str, JSONValue]]], prefix: str
) -> tuple[str, Mapping[str, JSONValue]] | None:
    return modules.get(prefix)


def _facts(
    family: str,
    found: dict[str, object],
    members: Sequence[str],
    rules: Sequence[ModuleRule],
    modules: Mapping[str, tuple[str, Mapping[str, JSONValue]]],
    prefix: str,
    evidence: str,
) -> tuple[dict[str, object], str]:
    """Facts from names and shapes, overridden by the file's class attributes, then by a rule."""
    facts = dict(found)
    info = _module_info(modules, prefix)
    if info is not None:
        klass, attrs = info
        if klass.lower() == family.lower():
            for key in FAMILY_TYPES[family]:
                if key in attrs and isinstance(attrs[key], bool | int):
                    facts[key] = attrs[key]
            evidence = f"class {klass} from file"
    rule, name = _declared(rules, members)
    if rule is not None:
        if rule.module_type != family:
            raise SelectionError(
                f"tensor {name!r}: {rule.label} says {rule.module_type}, but its tensors are a "
                f"{family} ({evidence})",
                hint="fix the rule's pattern or type",
            )
        for key, value in rule.options.items():
            shown = facts.get(key)
            if key in ("num_layers", "bidirectional") and shown is not None and shown != value:
                raise SelectionError(
                    f"tensor {name!r}: {rule.label} says {key}={value}, but the file holds "
                    f"{key}={shown}",
                    hint="fix or remove the option",
                )
            facts[key] = value
        evidence = rule.label
    return facts, evidence


def _torch_layers(
    by_name: Mapping[str, TensorEntry],
    rules: Sequence[ModuleRule],
    modules: Mapping[str, tuple[str, Mapping[str, JSONValue]]],
    target: Mapping[str, object] | None,
) -> list[Layer]:
    names = list(by_name)
    layers: list[Layer] = []
    taken: set[str] = set()
    # Transformer layers: the self_attn/linear1/linear2/norm1/norm2 group (+ multihead_attn/norm3)
    for prefix in _prefixes(names, "self_attn.in_proj_weight"):
        group = ("linear1.weight", "linear2.weight", "norm1.weight", "norm2.weight")
        if not all(_j(prefix, g) in by_name for g in group):
            continue
        decoder = _j(prefix, "multihead_attn.in_proj_weight") in by_name
        family = "TransformerDecoderLayer" if decoder else "TransformerEncoderLayer"
        d = by_name[_j(prefix, "self_attn.in_proj_weight")].shape[1]
        members = _under(names, prefix)
        text = "names: self_attn, linear1, linear2, norm1, norm2" + (
            ", multihead_attn, norm3" if decoder else ""
        )
        facts, evidence = _facts(family, {"d_model": d}, members, rules, modules, prefix, text)
        assumed = "norm_first" not in facts
        layers.append(Layer(family, prefix, prefix, facts, evidence, assumed_post_norm=assumed))
        taken.add(prefix)
    for prefix in _prefixes(names, "q_proj_weight"):
        raise UnsupportedError(
            f"tensor {_j(prefix, 'q_proj_weight')!r}: a MultiheadAttention with kdim/vdim other "
            "than embed_dim has no Burn counterpart (Burn's query, key and value are all "
            "[d_model, d_model], mha.rs:133)",
            hint=_EXCLUDE,
        )
    for prefix in _prefixes(names, "in_proj_weight"):
        owner = (
            prefix.rpartition(".")[0] if prefix.endswith(("self_attn", "multihead_attn")) else None
        )
        if owner is not None and owner in taken:
            continue
        weight = by_name[_j(prefix, "in_proj_weight")]
        d = weight.shape[1] if len(weight.shape) == 2 else 0
        if len(weight.shape) != 2 or weight.shape[0] != 3 * d:
            raise UnsupportedError(
                f"tensor {weight.name!r} has shape {list(weight.shape)}: a MultiheadAttention "
                "in_proj_weight is [3 * embed_dim, embed_dim]"
            )
        members = _under(names, prefix)
        facts, evidence = _facts(
            "MultiheadAttention", {"d_model": d}, members, rules, modules, prefix,
            "name: in_proj_weight",
        )  # fmt: skip
        layers.append(Layer("MultiheadAttention", prefix, prefix, facts, evidence))
    for prefix in _prefixes(names, "weight_ih_l0"):
        hh = by_name.get(_j(prefix, "weight_hh_l0"))
        ih = by_name[_j(prefix, "weight_ih_l0")]
        if hh is None or len(hh.shape) != 2 or len(ih.shape) != 2:
            continue
        if _j(prefix, "weight_hr_l0") in by_name:
            raise UnsupportedError(
                f"tensor {_j(prefix, 'weight_hr_l0')!r}: an LSTM with proj_size has no Burn "
                "counterpart (Burn's Lstm has no projection)",
                hint=_EXCLUDE,
            )
        hidden = hh.shape[1]
        ratio = ih.shape[0] // hidden if hidden else 0
        kind = {4: "LSTM", 3: "GRU", 1: "RNN"}.get(ratio)
        if kind is None or ih.shape[0] != ratio * hidden:
            raise UnsupportedError(
                f"tensor {ih.name!r} has {ih.shape[0]} rows for hidden size {hidden}: not an "
                "LSTM (4 gates), GRU (3) or RNN (1)"
            )
        count = 0
        while _j(prefix, f"weight_ih_l{count}") in by_name:
            count += 1
        bidirectional = _j(prefix, "weight_ih_l0_reverse") in by_name
        members = [n for n in names if n.startswith(_j(prefix, "weight_"))
                   or n.startswith(_j(prefix, "bias_"))]  # fmt: skip
        family = kind
        text = f"names: weight_ih_l0 with {ratio} x {hidden} rows"
        found: dict[str, object] = {
            "hidden": hidden,
            "num_layers": count,
            "bidirectional": bidirectional,
        }
        facts, evidence = _facts(family, found, members, rules, modules, prefix, text)
        if facts.get("proj_size"):
            raise UnsupportedError(
                f"{evidence}: an LSTM with proj_size has no Burn counterpart",
                hint=_EXCLUDE,
            )
        if target is not None and count == 1:
            vec_name = _j(prefix, "0", "reverse" if bidirectional else "")
            facts.setdefault("vec", any(str(t).startswith(vec_name + ".") for t in target))
        layers.append(Layer(family, prefix, prefix, facts, evidence))
    return layers


def _burn_recurrent(by_name: Mapping[str, TensorEntry]) -> list[tuple[str, str, int]]:
    """``(prefix, family, hidden)`` of every Burn Lstm/Gru/Rnn (one direction, one layer)."""
    out = []
    for family, gates in _GATES.items():
        first = _j(gates[0], "hidden_transform.weight")
        for prefix in _prefixes(by_name, first):
            if all(_j(prefix, g, "input_transform.weight") in by_name for g in gates):
                if family == "RNN" and _j(prefix, "input_gate.input_transform.weight") in by_name:
                    continue
                out.append((prefix, family, by_name[_j(prefix, first)].shape[0]))
    return out


def _burn_layers(by_name: Mapping[str, TensorEntry], rules: Sequence[ModuleRule]) -> list[Layer]:
    names = list(by_name)
    layers: list[Layer] = []
    taken: set[str] = set()
    for family, attn, group in (
        ("TransformerEncoderLayer", "mha", ("norm_1.gamma", "norm_2.gamma")),
        ("TransformerDecoderLayer", "self_attn", ("cross_attn.query.weight", "norm_3.gamma")),
    ):
        for prefix in _prefixes(names, f"{attn}.query.weight"):
            needed = ("pwff.linear_inner.weight", "pwff.linear_outer.weight", *group)
            if prefix in taken or not all(_j(prefix, g) in by_name for g in needed):
                continue
            d = by_name[_j(prefix, attn, "query.weight")].shape[0]
            members = _under(names, prefix)
            text = f"names: {attn}, pwff, norm_1, norm_2" + (", norm_3" if attn != "mha" else "")
            facts, evidence = _facts(family, {"d_model": d}, members, rules, {}, prefix, text)
            layers.append(Layer(family, prefix, prefix, facts, evidence,
                                assumed_post_norm="norm_first" not in facts))  # fmt: skip
            taken.add(prefix)
    for prefix in _prefixes(names, "query.weight"):
        owner, _, last = prefix.rpartition(".")
        if last in ("mha", "self_attn", "cross_attn") and owner in taken:
            continue
        if not all(_j(prefix, r, "weight") in by_name for r in ("key", "value", "output")):
            continue
        d = by_name[_j(prefix, "query.weight")].shape[0]
        members = _under(names, prefix)
        facts, evidence = _facts("MultiheadAttention", {"d_model": d}, members, rules, {}, prefix,
                                 "names: query, key, value, output")  # fmt: skip
        layers.append(Layer("MultiheadAttention", prefix, prefix, facts, evidence))
    # recurrent: one direction of one layer each; pair forward/reverse, then stack layers
    single = {prefix: (family, hidden) for prefix, family, hidden in _burn_recurrent(by_name)}
    units: dict[str, tuple[str, int, bool]] = {}
    for prefix, (family, hidden) in single.items():
        owner, _, last = prefix.rpartition(".")
        if last == "forward" and single.get(_j(owner, "reverse")) == (family, hidden):
            units[owner] = (family, hidden, True)
        elif last == "reverse" and single.get(_j(owner, "forward")) == (family, hidden):
            continue
        else:
            units[prefix] = (family, hidden, False)
    stacks: dict[str, list[int]] = {}
    for prefix in units:
        base, _, last = prefix.rpartition(".")
        if _INDEX.fullmatch(last):
            stacks.setdefault(base, []).append(int(last))
    done: set[str] = set()
    for base, indexes in stacks.items():
        family, hidden, bidir = units[_j(base, str(indexes[0]))]
        same = all(units.get(_j(base, str(i))) == (family, hidden, bidir) for i in indexes)
        members = _under(names, base)
        rule, _ = _declared(rules, members)
        declared = None if rule is None else rule.options.get("num_layers")
        if sorted(indexes) != list(range(len(indexes))) or not same:
            continue
        if (len(indexes) < 2 and declared is None) or declared == 1:
            continue
        text = f"names: {len(indexes)} Burn {family} layers (Vec indices)"
        found: dict[str, object] = {
            "hidden": hidden,
            "num_layers": len(indexes),
            "bidirectional": bidir,
            "vec": True,
        }
        facts, evidence = _facts(family, found, members, rules, {}, base, text)
        layers.append(Layer(family, base, base, facts, evidence))
        done.update(_j(base, str(i)) for i in indexes)
    for prefix, (family, hidden, bidir) in units.items():
        if prefix in done:
            continue
        members = _under(names, prefix)
        text = f"names: Burn {'Bi' if bidir else ''}{family.title()} gates"
        found = {"hidden": hidden, "num_layers": 1, "bidirectional": bidir, "vec": False}
        facts, evidence = _facts(family, found, members, rules, {}, prefix, text)
        layers.append(Layer(family, prefix, prefix, facts, evidence))
    return layers


# --- building the outputs -------------------------------------------------------------------


def _burn_key(name: str, prefix: str) -> tuple[int, ...]:
    rest = name[len(prefix) :].lstrip(".").split(".") if prefix else name.split(".")
    return tuple(int(p) if p.isdigit() else _BURN_ORDER.get(p, 9) for p in rest)


def _rows_text(slot: Slot) -> str:
    return f"[{slot.rows[0]}:{slot.rows[0] + slot.rows[1]}]" if slot.rows else ""


def _to_burn(layer: Layer, by_name: Mapping[str, TensorEntry]) -> list[Built]:
    from ckptctl.adapters.layout import transposed  # imports numpy: only when there is a layer

    slots = [s for s in slots_of(layer, by_name) if s.torch in by_name]
    reason = f"{layer.family} ({layer.evidence})"
    out = []
    for slot in sorted(slots, key=lambda s: _burn_key(s.burn, layer.burn_prefix)):
        source = by_name[slot.torch]
        if slot.rows is not None:
            first, count = slot.rows
            if source.shape[0] < first + count:
                raise UnsupportedError(
                    f"tensor {source.name!r} has {source.shape[0]} rows; {reason} needs "
                    f"{first + count}"
                )
            piece = row_slice(source, first, count, slot.burn)
        else:
            piece = source.renamed(slot.burn)
        entry = transposed(piece) if slot.transpose and len(piece.shape) == 2 else piece
        how = ", transposed" if entry is not piece else ""
        kind = (
            ActionKind.SPLIT if slot.rows else
            ActionKind.TRANSPOSE if entry is not piece else ActionKind.RENAME
        )  # fmt: skip
        detail = f"{slot.torch}{_rows_text(slot)} → {slot.burn}{how}"
        out.append(Built((slot.torch,), entry, (Action(kind, detail, reason, TO_BURN),),
                         slot.module_type))  # fmt: skip
    return out


def _to_torch(layer: Layer, by_name: Mapping[str, TensorEntry]) -> list[Built]:
    from ckptctl.adapters.layout import transposed  # imports numpy: only when there is a layer

    groups: dict[str, list[Slot]] = {}
    for slot in slots_of(layer, by_name):
        groups.setdefault(slot.torch, []).append(slot)
    reason = f"{layer.family} ({layer.evidence})"
    out = []
    for torch, slots in groups.items():
        present = [s for s in slots if s.burn in by_name]
        if not present:
            continue
        if len(present) != len(slots):
            missing = next(s.burn for s in slots if s.burn not in by_name)
            raise SelectionError(
                f"cannot build {torch!r}: {reason} needs {missing!r}, which the file lacks"
            )
        parts = tuple(
            (by_name[s.burn], s.transpose and len(by_name[s.burn].shape) == 2) for s in slots
        )
        sources = tuple(s.burn for s in slots)
        if slots[0].rows is not None:
            entry = concat_rows(parts, torch, by_name[slots[0].burn])
            rows = ", ".join(f"{s.burn} → {_rows_text(s)}" for s in slots)
            how = ", transposed" if parts[0][1] else ""
            action = Action(ActionKind.FUSE, f"{rows} of {torch}{how}", reason, TO_TORCH)
        else:
            source, transpose = parts[0]
            entry = transposed(source.renamed(torch)) if transpose else source.renamed(torch)
            how = ", transposed" if transpose else ""
            kind = ActionKind.TRANSPOSE if transpose else ActionKind.RENAME
            action = Action(kind, f"{slots[0].burn} → {torch}{how}", reason, TO_TORCH)
        out.append(Built(sources, entry, (action,), slots[0].module_type))
    return out


def contiguous_names(names: Iterable[str]) -> dict[str, str]:
    """Burn's ``map_indices_contiguous`` (keyremapper.rs:225-330): every numeric segment is
    renumbered 0, 1, 2 ... among the indices seen after the same *original* prefix.

    Returns:
        old name -> new name, for the names that change.
    """
    listed = list(names)
    seen: dict[str, set[int]] = {}
    for name in listed:
        parts = name.split(".")
        for i, part in enumerate(parts):
            if _INDEX.fullmatch(part) and int(part) <= _MAX_INDEX:
                seen.setdefault(".".join(parts[:i]), set()).add(int(part))
    maps = {prefix: {old: new for new, old in enumerate(sorted(s))} for prefix, s in seen.items()}
    out = {}
    for name in listed:
        parts = name.split(".")
        new = [
            str(maps[".".join(parts[:i])][int(p)]) if _INDEX.fullmatch(p) and int(p) <= _MAX_INDEX
            else p
            for i, p in enumerate(parts)
        ]  # fmt: skip
        if new != parts:
            out[name] = ".".join(new)
    return out


def _renumber(entries: list[TensorEntry], target: Mapping[str, object] | None) -> list[Built]:
    mapping = contiguous_names(e.name for e in entries)
    if target is not None and sum(mapping.get(e.name, e.name) in target for e in entries) < sum(
        e.name in target for e in entries
    ):
        mapping = {}  # the target has these gaps (a Burn Vec of enum variants)
    out = []
    for entry in entries:
        new = mapping.get(entry.name)
        if new is None:
            out.append(Built((entry.name,), entry))
            continue
        action = Action(
            ActionKind.RENAME, f"{entry.name} → {new}",
            "gapped indices renumbered as Burn's PytorchStore does (map_indices_contiguous)",
            TO_BURN,
        )  # fmt: skip
        out.append(Built((entry.name,), entry.renamed(new), (action,)))
    return out


def _post_norm_warning(layers: Sequence[Layer], direction: str) -> list[str | Note]:
    assumed = [layer for layer in layers if layer.assumed_post_norm]
    if not assumed:
        return []
    shown = ", ".join(repr(layer.torch_prefix) for layer in assumed[:3])
    shown += ", ..." if len(assumed) > 3 else ""
    example = assumed[0]
    pattern = re.sub(r"(?<=\\\.)\d+$", r"\\d+", re.escape(example.torch_prefix)) + r"\."
    rule = f"{pattern}={example.family}(norm_first=True)"
    n = len(assumed)
    return [
        Note(
            f"{n} Transformer layer{'s' if n != 1 else ''} ({shown}) assumed post-norm "
            "(norm_first=False, PyTorch's default): a state_dict cannot tell, and pre-norm "
            f"layers swap their norms in Burn; if they are pre-norm, pass {{fix0}}",
            (Option("module_types", rule),),
        )
    ]


def restructure(
    entries: list[TensorEntry],
    direction: str,
    *,
    rules: Sequence[ModuleRule] = (),
    modules: Mapping[str, tuple[str, Mapping[str, JSONValue]]] | None = None,
    target: Mapping[str, object] | None = None,
) -> FamilyResult:
    """Split, fuse, rename and renumber the layers Burn stores differently from PyTorch.

    Args:
        entries: tensors after selection and remapping, in file order.
        direction: ``pytorch-to-burn`` or ``burn-to-pytorch``.
        rules: module-type rules; family rules (``LSTM(bidirectional=True)``) declare layers.
        modules: module path -> (class, attributes) from a whole-model file, when known.
        target: names the output must fit (for the Vec index of a 1-layer LSTM, and to keep
            a gapped index the target really has).

    Returns:
        The entries in order (each layer's outputs where its first input was) and warnings.

    Raises:
        UnsupportedError: a layer with no Burn counterpart (LSTM ``proj_size``, MHA with
            ``bias_k``/``kdim``), or a fused tensor of the wrong shape.
        SelectionError: a declaration contradicts the file, or a fuse lacks a part.
    """
    if direction == TO_BURN:
        staged = _renumber(entries, target)
    else:
        staged = [Built((e.name,), e) for e in entries]
    origin = {b.entry.name: b for b in staged}
    by_name = {b.entry.name: b.entry for b in staged}
    if direction == TO_BURN:
        layers = _torch_layers(by_name, rules, modules or {}, target)
    else:
        layers = _burn_layers(by_name, rules)
    consumed: dict[str, Layer] = {}
    outputs: dict[str, list[Built]] = {}
    for layer in layers:
        built = _to_burn(layer, by_name) if direction == TO_BURN else _to_torch(layer, by_name)
        sources = {s for b in built for s in b.sources}
        own = layer.torch_prefix if direction == TO_BURN else layer.burn_prefix
        for name in by_name:
            if not own or name in sources or not name.startswith(own + "."):
                continue  # a top-level layer (no prefix) shares the file with other modules
            raise UnsupportedError(
                f"tensor {name!r} of {layer.family} {own!r} has no Burn counterpart ({direction})",
                hint=_EXCLUDE,
            )
        first = next(n for n in by_name if n in sources)
        outputs[first] = [
            Built(tuple(src for s in b.sources for src in origin[s].sources), b.entry,
                  tuple(a for s in b.sources[:1] for a in origin[s].actions) + b.actions,
                  b.module_type)
            for b in built
        ]  # fmt: skip
        consumed.update(dict.fromkeys(sources, layer))
    placed: dict[str, list[Built]] = {}
    for original, item in zip(entries, staged, strict=True):
        name = item.entry.name
        if name in outputs:
            placed[original.name] = outputs[name]
        elif name not in consumed:
            placed[original.name] = [item]
    return FamilyResult(placed, _post_norm_warning(layers, direction))


def is_enum_variant_segment(segment: str) -> bool:
    """Burn's CamelCase test: ``BaseConv`` yes, ``conv``/``X``/``FC`` no.

    Step 1 of ``docs/formats/burn-store.md#did-you-mean``.
    """
    return (
        len(segment.encode()) > 1 and segment[0].isupper() and any(c.islower() for c in segment[1:])
    )


def _without_variants(name: str) -> str:
    parts = name.split(".")
    inner = [p for p in parts[1:-1] if not is_enum_variant_segment(p)]
    return ".".join([parts[0], *inner, parts[-1]]) if len(parts) > 1 else name


def fit_target_names(
    items: list[PlanItem],
    direction: str,
    rules: Sequence[ModuleRule],
    target: Mapping[str, object] | None,
) -> list[PlanItem]:
    """Enum-variant segments and gapped indices, from declarations and the target's names.

    A per-tensor rule with ``variant=NAME`` puts Burn's variant segment before the parameter
    (``norm.gamma`` -> ``norm.Layer.gamma``, ``docs/formats/burn-store.md#module-types``) for
    Burn, and takes it out for PyTorch. Without a rule, a name the target lacks takes the target's
    spelling when that is the same name with variant segments, or the same name before Burn's index
    compaction (so ``burn-to-pytorch --target model.pt`` gives ``fc.0``, ``fc.2``, ``fc.4`` back).
    """
    variants = [r for r in rules if not r.is_family and r.options.get("variant")]
    inverse: dict[str, str] = {}
    spelled: dict[str, str] = {}
    if target is not None:
        for old, new in contiguous_names(target).items():
            inverse.setdefault(new, old)
        for name in target:
            spelled.setdefault(_without_variants(name), name)
    names = [item.entry.name for item in items if item.entry is not None]
    # Burn's compaction undone as a whole, and only when it makes more names fit the target
    undo = target is not None and sum(inverse.get(n, n) in target for n in names) > sum(
        n in target for n in names
    )
    out = []
    for item in items:
        entry = item.entry
        if entry is None:
            out.append(item)
            continue
        name = entry.name
        rule = next((r for r in variants if r.matches(name)), None)
        parts = name.split(".")
        why = ""
        if rule is not None and len(parts) > 1:
            variant = str(rule.options["variant"])
            if direction == TO_BURN and parts[-2] != variant:
                name, why = ".".join([*parts[:-1], variant, parts[-1]]), rule.label
            elif direction == TO_TORCH and parts[-2] == variant:
                name, why = ".".join([*parts[:-2], parts[-1]]), rule.label
        if undo and name in inverse:
            name, why = inverse[name], "the target's index for it (before Burn's compaction)"
        elif target is not None and name not in target:
            if direction == TO_BURN and name in spelled:
                name, why = spelled[name], "the target's enum-variant path"
            elif direction == TO_TORCH and _without_variants(name) in target:
                name, why = _without_variants(name), "the target's name without enum variants"
        if name == entry.name:
            out.append(item)
            continue
        action = Action(ActionKind.RENAME, f"{entry.name} → {name}", why, direction)
        out.append(PlanItem(item.source, entry.renamed(name), (*item.actions, action)))
    return out

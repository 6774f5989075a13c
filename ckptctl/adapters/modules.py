"""Module-type decisions: which Burn layer owns each tensor.

See ``docs/formats/burn-store.md#module-types``.

Burn decides transposes and renames from the *target module tree*; a file has none. ckptctl
decides each tensor's module type from the strongest evidence available and records why:

1. **rules** -- explicit ``REGEX=Type`` rules (``--module-type``), first match wins;
2. **target** -- the checkpoint the output must fit: a rank-2 ``weight`` whose source shape
   ``[a, b]`` is ``[b, a]`` in the target (``a != b``) is a Linear to transpose; equal non-square
   shapes mean "do not transpose"; a target ``p.gamma`` for a source ``p.weight`` (or the
   reverse) is a norm rename; a target holding the exact source name means "do not rename";
3. **class** -- ``TensorEntry.module_type`` (class names from a whole-model or TorchScript file);
4. **pattern** -- name and shape heuristics.

Rules override classes and patterns. The target's shapes are facts: when they contradict a rule
or a class (e.g. a class ``Linear`` whose target shape equals the source shape, a Col-layout
Linear, ``docs/formats/burn-store.md#hazards``) the decision fails with a
:class:`SelectionError` naming both. A square rank-2 ``weight`` decided only by a pattern, or not
decided at all, is *flagged*: shape cannot tell a Linear from an already transposed one.

Module types are Burn's struct names without ``Struct:`` (``Linear``, ``LayerNorm`` ...), or
``Other`` for a user struct (never transposed, renamed or halved).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.adapters.rename import compile_pattern
from ckptctl.errors import SelectionError, quote

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ckptctl.dtypes import DType
    from ckptctl.model import TensorEntry

#: Burn layer types the adapters know (docs/formats/burn-store.md#module-types), plus ``Other``.
MODULE_TYPES = (
    "Linear", "Embedding", "BatchNorm", "LayerNorm", "GroupNorm", "RmsNorm", "InstanceNorm",
    "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "DeformConv2d", "PRelu", "Other",
)  # fmt: skip
#: Norms whose PyTorch ``weight``/``bias`` are Burn ``gamma``/``beta``
#: (``docs/formats/burn-store.md#pytorch-adapters``). Burn's own adapter leaves InstanceNorm
#: alone (``docs/formats/burn-store.md#hazards``), but Burn's ``InstanceNorm`` stores
#: ``gamma``/``beta`` (burn-nn src/modules/norm/instance.rs:30-34), so a converted file must
#: hold those names.
RENAMED_NORMS = frozenset({"BatchNorm", "LayerNorm", "GroupNorm", "RmsNorm", "InstanceNorm"})
#: Layers stored as several Burn modules (split, fused, renamed; ``adapters.families``), with
#: the options a declaration may give each, and their value types.
FAMILY_TYPES: dict[str, dict[str, type]] = {
    "MultiheadAttention": {},
    "LSTM": {"bidirectional": bool, "num_layers": int, "proj_size": int},
    "GRU": {"bidirectional": bool, "num_layers": int},
    "RNN": {"bidirectional": bool, "num_layers": int},
    "TransformerEncoderLayer": {"norm_first": bool},
    "TransformerDecoderLayer": {"norm_first": bool},
}
#: The option every per-tensor type takes: the Burn enum variant holding the module
#: (``norm.Layer.gamma``; docs/formats/burn-store.md#module-types, burn-derive codegen_enum.rs).
VARIANT_OPTION = "variant"

_CANONICAL = {t.lower(): t for t in (*MODULE_TYPES, *FAMILY_TYPES)}
# Burn's names for the same families (burn-nn src/modules/attention/mha.rs:73,
# rnn/lstm/lstm_module.rs:61, rnn/lstm/bilstm_module.rs:51, rnn/gru.rs:60, rnn/basic.rs:57/254)
_BURN_FAMILIES = {
    "multiheadattention": ("MultiheadAttention", {}),
    "lstm": ("LSTM", {}), "bilstm": ("LSTM", {"bidirectional": True}),
    "gru": ("GRU", {}), "bigru": ("GRU", {"bidirectional": True}),
    "rnn": ("RNN", {}), "birnn": ("RNN", {"bidirectional": True}),
}  # fmt: skip
# PyTorch class names (last dotted component) -> Burn type
_TORCH_CLASSES = {
    "linear": "Linear", "nondynamicallyquantizablelinear": "Linear", "lazylinear": "Linear",
    "batchnorm1d": "BatchNorm", "batchnorm2d": "BatchNorm", "batchnorm3d": "BatchNorm",
    "syncbatchnorm": "BatchNorm", "rmsnorm": "RmsNorm", "prelu": "PRelu",
    "instancenorm1d": "InstanceNorm", "instancenorm2d": "InstanceNorm",
    "instancenorm3d": "InstanceNorm", "multiheadattention": "MultiheadAttention",
    "lstm": "LSTM", "gru": "GRU", "rnn": "RNN",
    "transformerencoderlayer": "TransformerEncoderLayer",
    "transformerdecoderlayer": "TransformerDecoderLayer",
}  # fmt: skip
_NORM_PARAMS = {"weight": "gamma", "bias": "beta"}

_MODULE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), t)
    for p, t in (
        (r"^(c_attn|c_fc|c_proj)$", "Conv1D"),
        (r"^prelu\d*$", "PRelu"),
        (r"embed|^wte$|^wpe$", "Embedding"),
        (r"rms", "RmsNorm"),
        (r"group_?norm|^gn\d*$", "GroupNorm"),
        (r"instance_?norm", "InstanceNorm"),
        (r"batch_?norm|^bn\d*$", "BatchNorm"),
        (r"norm|^ln(_?\w+)?$", "LayerNorm"),
        (
            # w1..w3, wq/wk/wv/wo and linear_inner/linear_outer are Linear names in the wild
            # (Meta's Llama, llama-burn transformer.rs, Burn's SwiGlu and PositionWiseFeedForward)
            r"^(fc\d*|linear\d*|linear_\w+|proj|\w*_proj|query|key|value|dense|lm_head|classifier"
            r"|head|w[123qkvo]|[qkvo]|out|output|gate|up|down)$",
            "Linear",
        ),
    )
)


def normalize_type(name: str, *, strict: bool = False) -> str:
    """Map a class or type name to a Burn module type.

    Accepts Burn names in any case (``linear``), ``Struct:Linear``, PyTorch class names with
    or without their module path (``torch.nn.modules.batchnorm.BatchNorm2d``,
    ``__torch__.torch.nn.modules.linear.Linear``).

    Args:
        name: the name to map.
        strict: raise for names that are not known types (user rules); otherwise unknown
            class names map to ``Other`` (a user struct, which Burn never transforms).

    Raises:
        SelectionError: ``strict`` and the name is unknown.
    """
    base = name.strip().removeprefix("Struct:").rsplit(".", 1)[-1]
    key = base.lower()
    found = _CANONICAL.get(key) or _TORCH_CLASSES.get(key)
    if found is not None:
        return found
    if key in _BURN_FAMILIES:
        return _BURN_FAMILIES[key][0]
    if strict:
        raise SelectionError(
            f"unknown module type {name!r}",
            hint="valid module types: " + ", ".join((*MODULE_TYPES, *FAMILY_TYPES)),
        )
    return "Other"


_CALL = re.compile(r"^\s*([A-Za-z_][\w.:]*)\s*(?:\((.*)\))?\s*$", re.DOTALL)
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _option_value(text: str, kind: type, where: str) -> object:
    value = text.strip()
    if kind is bool:
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
    elif kind is int and value.isdigit():
        return int(value)
    elif kind is str and re.fullmatch(r"[A-Za-z_]\w*", value):
        return value
    raise SelectionError(f"{where}: {value!r} is not a {kind.__name__}")


def parse_type_call(text: str, where: str) -> tuple[str, dict[str, object]]:
    """``TransformerEncoderLayer(norm_first=True)`` -> ``("TransformerEncoderLayer", {...})``.

    The vocabulary: every per-tensor type takes ``variant=NAME`` (the Burn enum variant that
    holds the module); the families of :data:`FAMILY_TYPES` take their listed options. Burn's
    names of the families are accepted too (``BiLstm`` is ``LSTM(bidirectional=True)``).

    Raises:
        SelectionError: not a type call, unknown type or option, or a value of the wrong type.
    """
    match = _CALL.match(text)
    if match is None:
        raise SelectionError(f"{where}: {text!r} is not Type or Type(option=value, ...)")
    name, args = match.group(1), match.group(2)
    base = name.removeprefix("Struct:").rsplit(".", 1)[-1].lower()
    module_type = normalize_type(name, strict=True)
    options: dict[str, object] = dict(_BURN_FAMILIES.get(base, ("", {}))[1])
    allowed = FAMILY_TYPES.get(module_type, {VARIANT_OPTION: str})
    for item in (a for a in (args or "").split(",") if a.strip()):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in allowed:
            known = ", ".join(f"{k}=" for k in allowed) or "none"
            raise SelectionError(
                f"{where}: {module_type} takes no option {item.strip()!r}",
                hint=f"options of {module_type}: {known}",
            )
        options[key] = _option_value(value, allowed[key], f"{where}: option {key}")
    return module_type, options


@dataclass(frozen=True)
class ModuleRule:
    """An explicit ``REGEX=Type`` rule, matched (unanchored, Rust dialect) on tensor names.

    ``module_type`` may be a call with options (:func:`parse_type_call`), kept in ``options``.
    """

    pattern: str
    module_type: str
    number: int = 1
    options: Mapping[str, object] = field(default_factory=dict)
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"module rule #{self.number}"
        module_type, options = parse_type_call(self.module_type, where)
        object.__setattr__(self, "module_type", module_type)
        object.__setattr__(self, "options", {**options, **self.options})
        object.__setattr__(self, "regex", compile_pattern(self.pattern, self.label))

    @property
    def is_family(self) -> bool:
        """Whether the rule declares a layer ``adapters.families`` splits or fuses."""
        return self.module_type in FAMILY_TYPES

    @property
    def label(self) -> str:
        """``module rule #1 'fc=Linear'`` for messages and evidence."""
        args = ", ".join(f"{k}={v}" for k, v in self.options.items())
        call = f"{self.module_type}({args})" if args else self.module_type
        return f"module rule #{self.number} '{self.pattern}={call}'"

    def matches(self, name: str) -> bool:
        """True when the pattern is found anywhere in ``name``."""
        return self.regex.search(name) is not None


def parse_module_rules(texts: Iterable[str]) -> tuple[ModuleRule, ...]:
    """Parse ``REGEX=Type`` or ``REGEX=Type(option=value, ...)`` strings; the split is at the
    **last** ``=`` before the type's options (types have none).

    Raises:
        SelectionError: no ``=``, bad pattern, unknown type or option.
    """
    rules = []
    for number, text in enumerate(texts, start=1):
        call = text.rfind("(") if text.rstrip().endswith(")") else -1
        head = text[:call] if call >= 0 else text
        pattern, sep, type_name = head.rpartition("=")
        type_name += text[call:] if call >= 0 else ""
        if not sep or not pattern:
            raise SelectionError(
                f"module rule #{number} {quote(text)} is not REGEX=Type",
                hint="e.g. 'fc\\d+=Linear'",
            )
        rules.append(ModuleRule(pattern, type_name, number))
    return tuple(rules)


def module_rules_from_mapping(mapping: Mapping[str, object]) -> tuple[ModuleRule, ...]:
    """Rules from a JSON object ``{regex: type}`` (a ``--module-type`` map file), in order.

    Raises:
        SelectionError: a value is not a string, a bad pattern or an unknown type.
    """
    rules = []
    for number, (pattern, type_name) in enumerate(mapping.items(), start=1):
        if not isinstance(type_name, str):
            raise SelectionError(
                f"module rule #{number} {quote(pattern)}: the type must be a string"
            )
        rules.append(ModuleRule(pattern, type_name, number))
    return tuple(rules)


@dataclass(frozen=True)
class Decision:
    """The module type decided for one tensor, and why.

    Attributes:
        name: the tensor name (as the adapters will see it, after ``--remap``).
        module_type: a Burn type (``Linear``), ``Other``, ``Conv1D`` (GPT-2's ``[in, out]``
            layer), or None when nothing decided.
        evidence: which source decided, e.g. ``class Linear from file``, ``pattern 'fc'``.
        flagged: the decision is a guess that may be wrong (square rank-2 weight decided by
            a pattern, or undecided rank-2 weight); show it to the user.
        transpose: a verdict from the target's shapes that overrides the type-based rule.
        rename: a verdict from the target's names that overrides the type-based rule.
        done: the tensor was already built in its final layout by ``adapters.families`` (a
            split, fuse or family rename); the layout adapters leave it alone.
    """

    name: str
    module_type: str | None
    evidence: str
    flagged: bool = False
    transpose: bool | None = None
    rename: bool | None = None
    done: bool = False


def _split(name: str) -> tuple[str, str]:
    prefix, _, param = name.rpartition(".")
    return prefix, param


def _join(prefix: str, param: str) -> str:
    return f"{prefix}.{param}" if prefix else param


def _fmt(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


@dataclass(frozen=True)
class _Evidence:
    module_type: str | None
    text: str
    transpose: bool | None = None
    rename: bool | None = None


def _pattern_type(prefix: str, members: Mapping[str, TensorEntry]) -> _Evidence | None:
    """Name/shape heuristics for the module at ``prefix`` (its tensors are ``members``)."""
    if "running_mean" in members or "running_var" in members:
        return _Evidence("BatchNorm", "pattern: sibling running_mean/running_var")
    if set(members) == {"alpha"} and len(members["alpha"].shape) == 1:
        return _Evidence("PRelu", "pattern: a lone 1-D alpha (Burn's PRelu)")
    segment = prefix.rpartition(".")[2]
    weight = members.get("weight")
    rank = len(weight.shape) if weight is not None else None
    for regex, module_type in _MODULE_PATTERNS:
        if not regex.search(segment):
            continue
        if module_type in ("Linear", "Conv1D") and rank != 2:
            continue
        if module_type.endswith("Norm") and rank not in (1, None):
            continue
        if module_type == "Conv1D":
            return _Evidence("Conv1D", f"pattern {segment!r}: GPT-2 Conv1D, already [in, out]")
        return _Evidence(module_type, f"pattern {segment!r}")
    bias = members.get("bias")
    if (
        weight is not None
        and rank == 2
        and bias is not None
        and len(bias.shape) == 1
        and bias.shape[0] in weight.shape
    ):
        return _Evidence("Linear", "pattern: rank-2 weight with a matching rank-1 bias")
    if weight is not None and rank in (3, 4, 5):
        conv = "ConvTranspose" if re.search("transpose|deconv", segment, re.I) else "Conv"
        return _Evidence(f"{conv}{rank - 2}d", f"pattern: rank-{rank} weight")
    return None


def _target_evidence(
    entry: TensorEntry, prefix: str, param: str, target: Mapping[str, tuple[DType, tuple[int, ...]]]
) -> _Evidence | None:
    own = target.get(entry.name)
    if param == "weight" and len(entry.shape) == 2 and own is not None and len(own[1]) == 2:
        a, b = entry.shape
        if a == b:
            return None  # square: the shape cannot tell
        src, dst = _fmt(entry.shape), _fmt(own[1])
        if own[1] == (b, a):
            return _Evidence("Linear", f"target shape {dst} is the transpose of {src}", True)
        if own[1] == (a, b):
            return _Evidence(None, f"target shape {dst} equals the source shape", False)
        return None
    if own is not None:
        return _Evidence(None, "the target has this exact name", rename=False)
    prelu = {"weight": "alpha", "alpha": "weight"}.get(param)
    if prelu is not None and len(entry.shape) == 1 and _join(prefix, prelu) in target:
        return _Evidence("PRelu", f"target has {_join(prefix, prelu)!r}: a PRelu", rename=True)
    burn = _NORM_PARAMS.get(param)
    torch = {v: k for k, v in _NORM_PARAMS.items()}.get(param)
    other = burn or torch
    if other is not None and _join(prefix, other) in target:
        text = f"target has {_join(prefix, other)!r}: a norm"
        return _Evidence("norm", text, rename=True)
    return None


def _compatible(target: str, declared: str) -> bool:
    """Whether a declared module type fits what the target's names and shapes show (a target
    shows ``norm`` for any norm whose parameters Burn renames)."""
    return declared == target or (target == "norm" and declared in RENAMED_NORMS)


def decide_module_types(
    entries: Iterable[TensorEntry],
    *,
    target: Mapping[str, tuple[DType, tuple[int, ...]]] | None = None,
    rules: Iterable[ModuleRule] = (),
) -> dict[str, Decision]:
    """Decide every tensor's module type from the strongest evidence available.

    Args:
        entries: the tensors, named as the adapters will see them (after ``--remap``).
        target: name -> (dtype, shape) of the checkpoint the output must fit, if any.
        rules: explicit rules, first match wins.

    Returns:
        A decision per tensor name, in input order.

    Raises:
        SelectionError: the target's shapes or names contradict a rule or a class.
    """
    items = list(entries)
    rule_list = list(rules)
    modules: dict[str, dict[str, TensorEntry]] = {}
    for entry in items:
        prefix, param = _split(entry.name)
        modules.setdefault(prefix, {})[param] = entry

    decisions: dict[str, Decision] = {}
    for prefix, members in modules.items():
        classes = [e.module_type for e in members.values() if e.module_type]
        klass = (
            _Evidence(normalize_type(classes[0]), f"class {classes[0]} from file")
            if classes
            else None
        )
        pattern = _pattern_type(prefix, members)
        targets = {p: _target_evidence(e, prefix, p, target) for p, e in members.items() if target}
        # a Linear found through the weight's shapes also owns its bias
        module_target = next(
            (
                _Evidence("Linear", ev.text)
                for ev in targets.values()
                if ev is not None and ev.module_type == "Linear"
            ),
            None,
        )
        for param, entry in members.items():
            rule = next((r for r in rule_list if not r.is_family and r.matches(entry.name)), None)
            ruled = _Evidence(rule.module_type, rule.label) if rule else None
            tev = targets.get(param) or module_target
            decisions[entry.name] = _decide(entry, param, ruled, tev, klass, pattern)
    return {entry.name: decisions[entry.name] for entry in items}


def _decide(
    entry: TensorEntry,
    param: str,
    ruled: _Evidence | None,
    tev: _Evidence | None,
    klass: _Evidence | None,
    pattern: _Evidence | None,
) -> Decision:
    for strong in (ruled, klass):
        if strong is None or tev is None:
            continue
        clash = (
            tev.module_type is not None
            and not _compatible(tev.module_type, strong.module_type or "")
        ) or (tev.transpose is False and strong.module_type == "Linear" and param == "weight")
        if clash:
            raise SelectionError(
                f"tensor {entry.name!r}: {strong.text} says {strong.module_type}, but {tev.text}",
                hint="fix or remove the rule, or check that the target is the right model",
            )
    transpose = tev.transpose if tev else None
    rename = tev.rename if tev else None
    chosen = ruled or (tev if tev and tev.module_type else None) or klass or pattern
    if chosen is None:
        module_type, evidence = None, tev.text if tev else "no evidence"
    else:
        module_type, evidence = chosen.module_type, chosen.text
        if module_type == "norm":  # the target says "a norm"; name the kind if we can
            kind = klass or pattern
            module_type = (
                kind.module_type if kind and kind.module_type in RENAMED_NORMS else "LayerNorm"
            )
        if chosen is not tev and tev is not None:
            evidence += f"; {tev.text}"
    square_guess = (
        param == "weight"
        and len(entry.shape) == 2
        and transpose is None
        and (chosen is None or chosen is pattern)
    )
    if square_guess and chosen is None:
        evidence = "no evidence for this rank-2 weight; declare its module type"
    elif square_guess and entry.shape[0] == entry.shape[1]:
        evidence += " (square: the shape cannot confirm it)"
    flagged = square_guess and (chosen is None or entry.shape[0] == entry.shape[1])
    if module_type == "Conv1D":
        flagged = True
    return Decision(entry.name, module_type, evidence, flagged, transpose, rename)


def resolve(entry: TensorEntry, decisions: Mapping[str, Decision]) -> Decision | None:
    """The decision for ``entry``: from ``decisions``, else from its own ``module_type``."""
    found = decisions.get(entry.name)
    if found is not None:
        return found
    if entry.module_type:
        module_type = normalize_type(entry.module_type)
        return Decision(entry.name, module_type, f"class {entry.module_type} from file")
    return None

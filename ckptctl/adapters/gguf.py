"""``gguf-to-hf`` and ``hf-to-gguf``: llama.cpp's tensor names and q/k row order, both ways.

``convert_hf_to_gguf.py`` renames a Hugging Face llama-family model's tensors with gguf-py's
``TensorNameMap`` (``model.layers.0.self_attn.q_proj.weight`` -> ``blk.0.attn_q.weight``) and,
for the ``llama`` architecture only (Llama, Mistral), reorders the rows of the q and k
projections with ``permute``: ``w.reshape(heads, 2, rows / heads / 2, ...).swapaxes(1, 2)``,
Hugging Face's half-split RoPE layout to the interleaved one llama.cpp rotates (``heads`` is
``n_head`` for q, ``n_head_kv`` for k; biases too). That is ``rope.permute_rows(...,
interleave=True)``; ``gguf-to-hf`` applies its inverse. For Gemma 1-3 it stores every norm
weight plus 1 (Gemma's RMSNorm scales by ``1 + w``), computed in F32 (F16 data: in F16) and
written as F32; ``gguf-to-hf`` subtracts 1 in F32 (exactness: ``NORM_SHIFT_NOTE``,
docs/formats/gguf.md). The name rows, which architecture permutes and which shifts norms are
data (``_gguf_names``).

The head counts come from the GGUF source's ``{arch}.attention.head_count[_kv]``, from the
``config.json`` beside a Hugging Face source (``num_attention_heads``,
``num_key_value_heads``), or from the adapter's parameter (``hf-to-gguf:32,8``); they are only
needed where rows move.

A block-quantized GGUF entry (stored blocks as U8, ``model.STORED_TYPE``) moves without
decoding: a row of a GGUF tensor is ``ne[0]`` elements, whole blocks, so its bytes
(``ne[0] / block_size * type_size``) are contiguous and permuting rows permutes byte runs.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from functools import cache, partial
from typing import TYPE_CHECKING, Any

from ckptctl.adapters._base import Action, ActionKind, Adapted, BaseAdapter, PlanItem
from ckptctl.adapters._gguf_names import (
    ARCH_OF_HF_CLASS,
    ARCH_OF_MODEL_TYPE,
    COMPUTED,
    EXPERT_MODULES,
    NAME_ROWS,
    NORM_PLUS_ONE,
    PERMUTES_QK,
    SKIPPED,
)
from ckptctl.adapters.rope import parse_head_counts
from ckptctl.dtypes import DType
from ckptctl.errors import SelectionError, UnsupportedError
from ckptctl.model import STORED_TYPE, ComputedData, Piece, PiecesData, listed_shape

if TYPE_CHECKING:
    from collections.abc import Mapping

    from numpy.typing import NDArray

    from ckptctl.adapters._base import Chain
    from ckptctl.model import JSONValue, TensorEntry

#: The adapter names: to Hugging Face's names, to GGUF's.
GGUF_ADAPTERS = ("gguf-to-hf", "hf-to-gguf")

#: The dtypes of a Gemma norm weight the adapters shift by 1.
_NORM_DTYPES = (DType.F32, DType.F16, DType.BF16, DType.F64)

#: The report's note on a shifted Gemma norm weight, by direction (``to_hf``): what is computed
#: and when it is exact (docs/formats/gguf.md, "Gemma's norm weights").
NORM_SHIFT_NOTE = {
    False: "w + 1 in F32 (F16 data: in F16), written as F32",
    True: "w = stored - 1 in F32 (a BF16 w comes back exactly where |w| >= 2**-16; "
    "docs/formats/gguf.md)",
}


@dataclass(frozen=True)
class ModelFacts:
    """What the name adapters know about the model, and where each fact was read.

    Attributes:
        arch: the GGUF architecture (``general.architecture``; from ``config.json``'s
            ``architectures``/``model_type`` for a Hugging Face source).
        heads: attention heads (query).
        kv_heads: key/value heads.
        origin: where the facts were read, for messages (``GGUF metadata``, a path).
    """

    arch: str | None = None
    heads: int | None = None
    kv_heads: int | None = None
    origin: str = ""


def facts_from_gguf(metadata: Mapping[str, str], origin: str = "GGUF metadata") -> ModelFacts:
    """The architecture and head counts in a GGUF file's key/values (as ``Checkpoint.metadata``
    strings); a count that is not one positive integer (a per-layer array) is unknown."""
    arch = metadata.get("general.architecture")
    if not arch:
        return ModelFacts(origin=origin)
    heads = _count(metadata.get(f"{arch}.attention.head_count"))
    kv_heads = _count(metadata.get(f"{arch}.attention.head_count_kv"))
    return ModelFacts(arch, heads, kv_heads if heads else None, origin)


def facts_from_config(config: Mapping[str, JSONValue], origin: str = "config.json") -> ModelFacts:
    """The architecture and head counts in a Hugging Face ``config.json``."""
    classes = config.get("architectures")
    first = classes[0] if isinstance(classes, list) and classes else None
    arch = ARCH_OF_HF_CLASS.get(first) if isinstance(first, str) else None
    model_type = config.get("model_type")
    if arch is None and isinstance(model_type, str):
        arch = ARCH_OF_MODEL_TYPE.get(model_type)
    if arch is None:  # a model the table does not know keeps its name: refused, not guessed
        arch = next((n for n in (first, model_type) if isinstance(n, str)), None)
    heads = _count(config.get("num_attention_heads"))
    kv_heads = _count(config.get("num_key_value_heads")) if heads else None
    return ModelFacts(arch, heads, kv_heads, origin)


def _count(value: object) -> int | None:
    text = str(value).strip() if isinstance(value, (int, str)) else ""
    return int(text) if text.isdigit() and int(text) > 0 else None


@dataclass(frozen=True)
class GGUFNames(BaseAdapter):
    """Rename between GGUF and Hugging Face names; move q/k rows where llama.cpp does.

    Attributes:
        to_hf: GGUF names to Hugging Face's (``gguf-to-hf``), else the reverse.
        arch: the GGUF architecture whose rows apply.
        heads: attention heads (None: no rows move).
        kv_heads: key/value heads.
        experts: the pipeline cuts stacked experts before it and stacks them after it (it heads
            the adapter list: ``run_pipeline``); else an expert tensor is refused.
    """

    to_hf: bool
    arch: str
    heads: int | None = None
    kv_heads: int | None = None
    experts: bool = True

    @classmethod
    def parse(
        cls, spec: str, facts: ModelFacts | None = None, *, experts: bool = True
    ) -> GGUFNames:
        """``gguf-to-hf``, ``hf-to-gguf:32,8`` ... with the source's facts.

        Raises:
            SelectionError: bad head counts, or the counts are needed and unknown (exit 2).
            UnsupportedError: an architecture this adapter does not rename.
        """
        name, _, counts = spec.strip().lower().partition(":")
        known = facts or ModelFacts()
        heads, kv_heads = (
            parse_head_counts(name, counts) if counts else (known.heads, known.kv_heads)
        )
        arch = known.arch or "llama"  # no config: the family's base, which permutes
        if arch not in PERMUTES_QK:
            raise UnsupportedError(
                f"adapter {name!r}: no name table for architecture {arch!r}",
                hint="supported architectures: " + ", ".join(PERMUTES_QK),
            )
        if PERMUTES_QK[arch] and heads is None:
            where = known.origin or "the source"
            raise SelectionError(
                f"adapter {name!r} needs the attention head counts to move {arch}'s q/k rows, "
                f"and {where} does not give them",
                hint=f"write {name}:HEADS,KV_HEADS (num_attention_heads, num_key_value_heads "
                "of the model's config.json)",
            )
        return cls(name == GGUF_ADAPTERS[0], arch, heads, kv_heads or heads, experts)

    def apply(self, entry: TensorEntry) -> Adapted:
        stem, dot, last = entry.name.rpartition(".")
        if not dot:
            stem, last = entry.name, ""
        if stem.rpartition(".")[2] in EXPERT_MODULES:  # whole: split_experts did not cut it
            _refuse_experts(entry.name)
        dropped = self._dropped(stem)
        if dropped:
            return None, (Action(ActionKind.DROP, entry.name, dropped, self.describe()),)
        found = _lookup(stem, self.arch, to_hf=self.to_hf)
        if found is None:
            reason = "no name for it in the GGUF name table"
            return entry, (Action(ActionKind.KEEP, entry.name, reason, self.describe()),)
        new_name, module = found
        if module in EXPERT_MODULES and not self.experts:
            _refuse_experts(entry.name)
        out = replace(entry, name=f"{new_name}{dot}{last}")
        actions = [Action(ActionKind.RENAME, f"{entry.name} -> {out.name}", "GGUF name table",
                          self.describe())]  # fmt: skip
        heads = {"attn_q": self.heads, "attn_k": self.kv_heads}.get(module)
        if heads is not None and PERMUTES_QK[self.arch] and last in ("weight", "bias"):
            out = _permuted(out, entry.name, heads, interleave=not self.to_hf)
            order = "interleaved (llama.cpp)" if not self.to_hf else "half-split (Hugging Face)"
            actions.append(Action(ActionKind.CUSTOM, f"rows of {heads} heads -> {order}",
                                  "convert_hf_to_gguf permute", self.describe()))  # fmt: skip
        hf_name = out.name if self.to_hf else entry.name
        if self.arch in NORM_PLUS_ONE and hf_name.endswith("norm.weight"):
            out = _norm_shifted(out, entry.name, to_hf=self.to_hf)
            actions.append(Action(ActionKind.CUSTOM, NORM_SHIFT_NOTE[self.to_hf],
                                  f"llama.cpp stores norms as w + 1 ({NORM_PLUS_ONE[self.arch]})",
                                  self.describe()))  # fmt: skip
        return out, tuple(actions)

    def _dropped(self, stem: str) -> str | None:
        """Why llama.cpp has no counterpart of the tensor ``stem``, or None."""
        if self.to_hf and any(stem == n and self.arch in a for n, a in COMPUTED):
            return "llama.cpp computes it from config.json; no Hugging Face tensor"
        if not self.to_hf and any(stem == n and self.arch in a for n, a in SKIPPED):
            return "convert_hf_to_gguf skips it (llama.cpp ties the output to token_embd)"
        return None

    def describe(self) -> str:
        name = GGUF_ADAPTERS[0 if self.to_hf else 1]
        if self.heads is None:
            return f"{name} ({self.arch})"
        counts = f"{self.heads},{self.kv_heads}" if self.kv_heads != self.heads else f"{self.heads}"
        return f"{name}:{counts} ({self.arch})"


def split_experts(
    entries: list[TensorEntry], renamers: Chain
) -> tuple[list[TensorEntry], dict[str, tuple[str, Action]]]:
    """Before ``gguf-to-hf`` renames: each stacked expert tensor (``blk.N.ffn_up_exps.weight``,
    first axis the expert) as one lazy entry per expert (``blk.N.ffn_up_exps.E.weight``), a byte
    range of it (quantized blocks stay blocks); and the source name and split of each piece.

    Raises:
        UnsupportedError: a stacked tensor whose bytes do not split into its first axis.
    """
    if not any(isinstance(a, GGUFNames) and a.to_hf for a in renamers.adapters):
        return entries, {}
    out: list[TensorEntry] = []
    origin: dict[str, tuple[str, Action]] = {}
    for entry in entries:
        stem, dot, last = entry.name.rpartition(".")
        if not dot or stem.rpartition(".")[2] not in EXPERT_MODULES:
            out.append(entry)
            continue
        pieces = _expert_pieces(entry, stem, last)
        for xid, piece in enumerate(pieces):
            out.append(piece)
            detail = f"expert {xid} of {len(pieces)} -> {list(listed_shape(piece))}"
            split = Action(ActionKind.SPLIT, detail, "llama.cpp stacks experts", GGUF_ADAPTERS[0])
            origin[piece.name] = (entry.name, split)
    return out, origin


def _expert_pieces(entry: TensorEntry, stem: str, last: str) -> list[TensorEntry]:
    shape = listed_shape(entry)
    experts = shape[0] if len(shape) >= 2 else 0
    if not experts or entry.nbytes % experts:
        raise UnsupportedError(
            f"tensor {entry.name!r}: {entry.nbytes} bytes of shape {list(shape)} do not split "
            "into experts along the first axis"
        )
    size = entry.nbytes // experts
    extra = dict(entry.extra)
    if STORED_TYPE in extra:  # blocks: one U8 vector per expert, of its logical shape
        extra["logical_shape"] = json.dumps(list(shape[1:]))
    piece_shape = (size,) if STORED_TYPE in extra else shape[1:]
    return [
        replace(entry, name=f"{stem}.{xid}.{last}", shape=piece_shape, nbytes=size,
                offset=None if entry.offset is None else entry.offset + xid * size,
                data=PiecesData((Piece(entry.data, xid * size, size),), size), extra=extra)
        for xid in range(experts)
    ]  # fmt: skip


#: A per-expert GGUF name (``hf-to-gguf``'s output before stacking).
_EXPERT_PIECE = re.compile(r"(blk\.\d+\.(?:" + "|".join(EXPERT_MODULES) + r"))\.(\d+)\.(\w+)")


def stack_experts(items: list[PlanItem]) -> list[PlanItem]:
    """After ``hf-to-gguf`` renames: each layer's experts (``blk.N.ffn_up_exps.E.weight``) as
    one tensor of the experts in order, as ``torch.stack(datas, dim=0)``: a lazy concatenation
    of their bytes, each read once when written. The item of expert 0 carries it; the others'
    items go (as a fuse's parts do).

    Raises:
        UnsupportedError: the experts are not 0 .. E-1, or differ in shape or dtype.
    """
    groups: dict[str, list[tuple[int, int]]] = {}
    for index, item in enumerate(items):
        match = _EXPERT_PIECE.fullmatch(item.entry.name) if item.entry is not None else None
        if match is not None:
            groups.setdefault(f"{match[1]}.{match[3]}", []).append((int(match[2]), index))
    replaced: dict[int, PlanItem] = {}
    gone: set[int] = set()
    for name, members in groups.items():
        members.sort()
        parts = [entry for _, i in members if (entry := items[i].entry) is not None]
        _check_experts(name, [x for x, _ in members], parts)
        lead = items[members[0][1]]
        replaced[members[0][1]] = PlanItem(lead.source, *_stacked(name, parts, lead.actions))
        gone.update(i for _, i in members[1:])
    return [replaced.get(i, item) for i, item in enumerate(items) if i not in gone]


def _stacked(
    name: str, parts: list[TensorEntry], actions: tuple[Action, ...]
) -> tuple[TensorEntry, tuple[Action, ...]]:
    first, size = parts[0], sum(p.nbytes for p in parts)
    data = PiecesData(tuple(Piece(p.data, 0, p.nbytes) for p in parts), size)
    entry = replace(first, name=name, shape=(len(parts), *first.shape), nbytes=size,
                    offset=None, data=data, param_id=None)  # fmt: skip
    action = Action(ActionKind.FUSE, f"{len(parts)} experts -> {name} {list(entry.shape)}",
                    "convert_hf_to_gguf stacks experts", GGUF_ADAPTERS[1])  # fmt: skip
    return entry, (*actions, action)


def _check_experts(name: str, xids: list[int], parts: list[TensorEntry]) -> None:
    if xids != list(range(len(xids))):
        raise UnsupportedError(
            f"tensor {name!r}: experts {xids} are not numbered 0 to {len(xids) - 1}",
            hint="select all of a layer's experts",
        )
    if any(p.shape != parts[0].shape or p.dtype != parts[0].dtype for p in parts):
        raise UnsupportedError(f"tensor {name!r}: its experts differ in shape or dtype")
    if any(STORED_TYPE in p.extra for p in parts):
        raise UnsupportedError(
            f"tensor {name!r}: quantized experts, which ckptctl stacks only as plain values",
            hint="decode them first with --dequantize",
        )


@cache
def _templates(arch: str, *, to_hf: bool) -> tuple[tuple[re.Pattern[str], str, str], ...]:
    """(pattern of the source name, target template, GGUF module) per row of ``arch``."""
    rows = []
    for gguf, hf, archs in NAME_ROWS:
        if arch in archs:
            source, target = (gguf, hf) if to_hf else (hf, gguf)
            pattern = re.escape(source).replace(re.escape("{bid}"), r"(?P<bid>\d+)")
            pattern = pattern.replace(re.escape("{xid}"), r"(?P<xid>\d+)")
            rows.append(
                (re.compile(pattern), target, gguf.removesuffix(".{xid}").rpartition(".")[2])
            )
    return tuple(rows)


def _lookup(stem: str, arch: str, *, to_hf: bool) -> tuple[str, str] | None:
    for pattern, target, module in _templates(arch, to_hf=to_hf):
        match = pattern.fullmatch(stem)
        if match is not None:
            found = match.groupdict()
            name = target.replace("{bid}", found.get("bid") or "")
            return name.replace("{xid}", found.get("xid") or ""), module
    return None


def _permuted(entry: TensorEntry, source: str, heads: int, *, interleave: bool) -> TensorEntry:
    """``entry`` (the tensor named ``source`` in the input) with its rows (first logical axis)
    permuted per head; quantized blocks move as byte runs of one row each."""
    shape = listed_shape(entry)
    rows = shape[0] if shape else 0
    if rows % (2 * heads):
        raise SelectionError(
            f"tensor {source!r}: {rows} rows are not {heads} heads of an even size",
            hint="check the head counts (num_attention_heads, num_key_value_heads)",
        )
    if STORED_TYPE in entry.extra and entry.nbytes % rows:
        raise UnsupportedError(
            f"tensor {source!r}: {entry.nbytes} bytes of {entry.extra[STORED_TYPE]} blocks "
            f"do not split into {rows} rows",
            hint="decode it first with --dequantize",
        )
    load = partial(_load_permuted, entry, rows, heads, interleave)
    return replace(entry, offset=None, data=ComputedData(load))


def _refuse_experts(name: str) -> None:
    """Refuse a mixture-of-experts tensor the pipeline did not cut or stack around the adapter.

    Raises:
        UnsupportedError: always.
    """
    raise UnsupportedError(
        f"tensor {name!r}: llama.cpp's stacked experts, which {GGUF_ADAPTERS[0]} and "
        f"{GGUF_ADAPTERS[1]} cut and stack only at the head of convert's adapter list",
        hint="list the GGUF adapter first",
    )


def _norm_shifted(entry: TensorEntry, source: str, *, to_hf: bool) -> TensorEntry:
    """``entry`` (named ``source`` in the input) minus 1 (``to_hf``) or plus 1, as F32."""
    if STORED_TYPE in entry.extra or entry.dtype not in _NORM_DTYPES:
        kind = entry.extra.get(STORED_TYPE, entry.dtype.value)
        raise UnsupportedError(
            f"tensor {source!r}: a Gemma norm weight of {kind} values, which llama.cpp stores "
            "plus 1 and ckptctl shifts only as plain floats (F32, F16, BF16, F64)",
            hint="decode it first with --dequantize" if STORED_TYPE in entry.extra else None,
        )
    numel = math.prod(entry.shape)
    load = partial(_load_norm_shifted, entry, to_hf)
    return replace(entry, dtype=DType.F32, nbytes=numel * 4, offset=None,
                   data=ComputedData(load), source_dtype=None)  # fmt: skip


def _load_norm_shifted(entry: TensorEntry, to_hf: bool) -> NDArray[Any]:
    """llama.cpp's ``w + 1``: in F16 for F16 data (``prepare_tensors`` keeps F16 and F32, widens
    the rest to F32), then F32; the inverse subtracts 1 in F32."""
    import numpy as np

    from ckptctl.dtypes import to_float

    raw = entry.load()
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and inf stay what they are
        if not to_hf and entry.dtype is DType.F16:
            return (raw + np.float16(1)).astype(np.float32)
        values = to_float(raw, entry.dtype).astype(np.float32)
        return values - np.float32(1) if to_hf else values + np.float32(1)


def _load_permuted(entry: TensorEntry, rows: int, heads: int, interleave: bool) -> NDArray[Any]:
    from ckptctl.adapters.rope import permute_rows

    array = entry.load()
    if STORED_TYPE in entry.extra:  # blocks: one row of whole blocks is nbytes / rows bytes
        flat = array.reshape(rows, entry.nbytes // rows)
        return permute_rows(flat, heads, interleave=interleave).reshape(array.shape)
    return permute_rows(array, heads, interleave=interleave)

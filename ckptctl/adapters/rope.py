"""``rope-interleaved:H[,KV]`` and ``rope-half-split:H[,KV]``: Llama's q/k rotary layouts.

Meta's Llama rotates interleaved pairs of each head's features ``(0, 1), (2, 3), ...``;
Hugging Face's ``rotate_half`` rotates the halves ``(i, i + d/2)``. transformers'
``convert_llama_weights_to_hf.py`` turns Meta's q/k projections into Hugging Face's with
``permute``: ``w.view(heads, d_head // 2, 2, d_in).transpose(1, 2)`` on ``[out, in]``
(``rope-half-split``). Its inverse, ``w.view(heads, 2, d_head // 2, d_in).transpose(1, 2)``,
is what llama-burn applies after loading Hugging Face weights (``permute_rotary_weights``,
llama-burn/src/llama.rs: the Burn ``[in, out]`` weight reshaped ``[in, heads, 2, out / heads
/ 2]`` with dims 2 and 3 swapped): ``rope-interleaved``. Only the output features of
``q_proj``/``wq`` (``heads``) and ``k_proj``/``wk`` (``kv_heads``) move; a rank-1 bias moves
the same way. Nothing is computed from values: this is a fixed reindexing.

Which axis holds the output features follows the layout at the adapter's place in the chain:
a Linear weight is ``[in, out]`` after ``pytorch-to-burn`` transposed it, or before
``burn-to-pytorch`` will; otherwise ``[out, in]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from ckptctl.adapters._base import Action, ActionKind, Adapted, BaseAdapter
from ckptctl.adapters.modules import Decision, resolve
from ckptctl.errors import SelectionError
from ckptctl.model import ComputedData

if TYPE_CHECKING:
    from collections.abc import Mapping

    from numpy.typing import NDArray

    from ckptctl.model import TensorEntry

#: The adapter names, by the layout they produce.
ROPE_ADAPTERS = ("rope-interleaved", "rope-half-split")
#: Module names of the query and key projections (Hugging Face, Meta and llama-burn).
_QUERY = frozenset({"q_proj", "wq"})
_KEY = frozenset({"k_proj", "wk"})


def permute_rows(array: NDArray[Any], heads: int, *, interleave: bool) -> NDArray[Any]:
    """Reorder the first axis of ``array`` head by head (see the module docstring).

    ``interleave``: Hugging Face's half-split layout to Meta's interleaved one (the inverse of
    transformers' ``permute``); otherwise ``permute`` itself.
    """
    import numpy as np

    rows = array.shape[0]
    half = rows // heads // 2
    split = (heads, 2, half) if interleave else (heads, half, 2)
    rest = array.shape[1:]
    moved = array.reshape(*split, *rest).swapaxes(1, 2)
    return np.ascontiguousarray(moved.reshape(rows, *rest))


def parse_head_counts(name: str, counts: str) -> tuple[int, int]:
    """``"32,8"`` -> ``(32, 8)``, ``"32"`` -> ``(32, 32)``: the ``HEADS[,KV_HEADS]`` parameter
    of the adapter ``name``.

    Raises:
        SelectionError: no head count, a count that is not a positive integer, or key/value
            heads that do not divide the heads.
    """
    example = f"{name}:HEADS or {name}:HEADS,KV_HEADS (e.g. {name}:32,8)"
    if not counts:
        raise SelectionError(
            f"adapter {name!r} needs the attention head count", hint=f"write {example}"
        )
    parts = counts.split(",")
    if len(parts) > 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise SelectionError(
            f"adapter '{name}:{counts}': the head counts must be one or two positive integers",
            hint=f"write {example}",
        )
    heads, kv_heads = int(parts[0]), int(parts[-1])
    if kv_heads > heads or heads % kv_heads:
        raise SelectionError(
            f"adapter '{name}:{counts}': {kv_heads} key/value heads do not divide {heads} heads",
            hint=f"write {example}",
        )
    return heads, kv_heads


def _load(entry: TensorEntry, heads: int, interleave: bool, columns: bool) -> NDArray[Any]:
    array = entry.load()
    if columns:  # Burn's [in, out]: the output features are the columns
        return permute_rows(array.T, heads, interleave=interleave).T.copy()
    return permute_rows(array, heads, interleave=interleave)


@dataclass(frozen=True)
class RopePermute(BaseAdapter):
    """Move q/k projection features between the half-split and interleaved RoPE layouts.

    Attributes:
        heads: attention heads (the query projection).
        kv_heads: key/value heads (the key projection; grouped-query attention).
        interleave: to Meta's interleaved layout (``rope-interleaved``), else to Hugging
            Face's half-split one (``rope-half-split``).
        decisions: module-type decisions, to know which weights a layout adapter transposes.
        columns_if_linear: the output features of a transposed Linear weight are its columns
            here (``pytorch-to-burn`` came before, or ``burn-to-pytorch`` comes after).
    """

    heads: int
    kv_heads: int
    interleave: bool
    decisions: Mapping[str, Decision] = field(default_factory=dict)
    columns_if_linear: bool = False
    names: ClassVar[tuple[str, str]] = ROPE_ADAPTERS

    @classmethod
    def parse(cls, spec: str, **context: Any) -> RopePermute:  # noqa: ANN401  # passed through
        """``rope-interleaved:32,8`` -> ``RopePermute(32, 8, interleave=True)``.

        Raises:
            SelectionError: no head count, a count that is not a positive integer, or more
                key/value heads than heads.
        """
        name, _, counts = spec.strip().lower().partition(":")
        heads, kv_heads = parse_head_counts(name, counts)
        return cls(heads, kv_heads, name == ROPE_ADAPTERS[0], **context)

    def apply(self, entry: TensorEntry) -> Adapted:
        prefix, _, param = entry.name.rpartition(".")
        module = prefix.rpartition(".")[2]
        heads = self.heads if module in _QUERY else self.kv_heads if module in _KEY else None
        if heads is None or param not in ("weight", "bias") or len(entry.shape) not in (1, 2):
            return entry, ()
        columns = (
            len(entry.shape) == 2 and self.columns_if_linear and _transposed(entry, self.decisions)
        )
        features = entry.shape[1 if columns else 0]
        if features % (2 * heads):
            raise SelectionError(
                f"tensor {entry.name!r}: {features} output features are not {heads} heads of an "
                "even size",
                hint=f"check the head counts of {self.describe()}",
            )
        out = replace(entry, offset=None, data=ComputedData(
            partial(_load, entry, heads, self.interleave, columns)))  # fmt: skip
        layout = "interleaved" if self.interleave else "half-split"
        detail = f"{features} features, {heads} heads -> {layout}"
        return out, (Action(ActionKind.CUSTOM, detail, "RoPE q/k layout", self.describe()),)

    def describe(self) -> str:
        counts = f"{self.heads},{self.kv_heads}" if self.kv_heads != self.heads else f"{self.heads}"
        return f"{ROPE_ADAPTERS[0 if self.interleave else 1]}:{counts}"


def needs_interleaving(
    renames: list[tuple[str, str]], adapters: tuple[str, ...]
) -> list[tuple[str, str]]:
    """The ``(source, output)`` names that move a Hugging Face ``q_proj``/``k_proj``
    (half-split RoPE layout, always: ``modeling_llama.py`` ``rotate_half``) onto Meta's or
    llama-burn's ``wq``/``wk`` (interleaved), with no RoPE adapter in ``adapters``. After
    ``gguf-to-hf`` a GGUF ``attn_q``/``attn_k`` is in Hugging Face's layout too."""
    kinds = [a.strip().lower().partition(":")[0] for a in adapters]
    if any(kind in ROPE_ADAPTERS for kind in kinds):
        return []
    hf = {"q_proj": "wq", "k_proj": "wk"}
    if "gguf-to-hf" in kinds:
        hf |= {"attn_q": "wq", "attn_k": "wk"}
    return [
        (source, output)
        for source, output in renames
        if (m := source.rpartition(".")[0].rpartition(".")[2]) in hf
        and output.rpartition(".")[0].rpartition(".")[2] == hf[m]
    ]


def _transposed(entry: TensorEntry, decisions: Mapping[str, Decision]) -> bool:
    from ckptctl.adapters.layout import will_transpose  # numpy: only when a tensor moves

    return will_transpose(entry, resolve(entry, decisions))

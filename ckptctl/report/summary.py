"""The Tensor Loading Summary: Burn's ``ApplyResult`` and ckptctl's extras.

See ``docs/formats/burn-store.md#tensor-loading-summary``.

Types only: :func:`ckptctl.ops.summary.summarize` computes it, ``report.render_summary`` draws
Burn's box and ``report.json`` gives its JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptctl.model import StrEnum

if TYPE_CHECKING:
    from ckptctl.dtypes import DType
    from ckptctl.fix import Option

Shape = tuple[int, ...]

#: Burn shows (and suggests for) the first ten names of each list; so do ckptctl's listings.
DISPLAY_LIMIT = 10


class SummaryErrorKind(StrEnum):
    """Why a found tensor cannot be applied."""

    SHAPE_MISMATCH = "shape_mismatch"
    LOAD_ERROR = "load_error"


@dataclass(frozen=True)
class MissingTensor:
    """A target name not found in the source.

    Attributes:
        name: the target tensor name.
        container: Burn's dotted container stack, when a module map gives it.
        suggestion: the "Did you mean" candidate (first ten missing tensors only).
    """

    name: str
    container: str | None = None
    suggestion: str | None = None


@dataclass(frozen=True)
class SummaryError:
    """A tensor that was found but cannot be applied.

    Attributes:
        name: the target tensor name.
        kind: a shape mismatch or a load error.
        expected: the target's shape (shape mismatch).
        found: the source's shape (shape mismatch).
        message: the load error text (load error).
    """

    name: str
    kind: SummaryErrorKind
    expected: Shape | None = None
    found: Shape | None = None
    message: str = ""


class AmbiguityKind(StrEnum):
    """What is unproven about a target tensor (issue 24): never counted as applied."""

    #: several source tensors could fill it (same parameters, shapes and kind), nothing decides
    SOURCE = "source"
    #: a square rank-2 weight no evidence types: PyTorch ``[out, in]`` or Burn ``[in, out]``?
    LAYOUT = "layout"
    #: a Hugging Face q/k projection (half-split RoPE layout) filling Meta's or llama-burn's
    #: ``wq``/``wk`` (interleaved) with no RoPE adapter
    ROPE = "rope"


@dataclass(frozen=True)
class AmbiguousTensor:
    """A target tensor whose filling is unproven: listed, refused, never applied.

    Attributes:
        name: the target tensor name.
        kind: which choice nothing decides.
        candidates: the source tensor names that could fill it (``layout``: the one source).
    """

    name: str
    kind: AmbiguityKind
    candidates: tuple[str, ...]


@dataclass(frozen=True)
class DTypeNote:
    """An applied tensor whose dtype differs from the target's (not an error in Burn)."""

    name: str
    expected: DType
    found: DType


@dataclass(frozen=True)
class LoadingSummary:
    """Burn's ``ApplyResult`` plus ckptctl extras; render with ``report.render_summary``.

    ``enum_paths`` counts missing names that contain an enum variant (from container stacks
    when known, else by Burn's CamelCase test); it triggers the enum hint block. ``ambiguous``
    (a ckptctl extra) lists the target tensors whose filling is unproven: a ``layout`` one is in
    the output but not counted as applied, a ``source`` one is missing.
    """

    applied: tuple[str, ...]
    skipped: tuple[str, ...]
    missing: tuple[MissingTensor, ...]
    unused: tuple[str, ...]
    errors: tuple[SummaryError, ...]
    dtype_notes: tuple[DTypeNote, ...] = ()
    fixes: tuple[Option, ...] = ()
    enum_paths: int = 0
    ambiguous: tuple[AmbiguousTensor, ...] = ()
    #: each unused tensor by the source name it was read under (before remap rules and
    #: adapters), in the order of ``unused``; empty when not known
    unused_sources: tuple[str, ...] = ()
    #: an ``--exclude`` regex that drops exactly the unused tensors, when a short one does
    unused_exclude: str | None = None

    @property
    def ok(self) -> bool:
        """True when nothing is missing, unproven or failed (unused never fails a load)."""
        return not self.missing and not self.errors and not self.ambiguous

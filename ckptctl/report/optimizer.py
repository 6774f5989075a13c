"""The Optimizer State Check of ``verify --optimizer``: types only.

See ``docs/formats/burn-store.md#optimizer-check``.

:func:`ckptctl.ops.verify.verify` computes it; ``report.render_verify`` draws its box and
``report.json`` gives its JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptctl.model import StrEnum

if TYPE_CHECKING:
    from ckptctl.fix import Command


class OptimizerVerdict(StrEnum):
    """Will the record's state attach to the model's parameters?"""

    OK = "ok"
    PARTIAL = "partial"
    LOST = "lost"
    NO_IDS = "no-ids"


@dataclass(frozen=True)
class Orphan:
    """An optimizer state whose ParamId no model tensor has.

    Attributes:
        param_id: the id the state is keyed by.
        path: the parameter path the record gives for it, if any.
        model_id: the ParamId of the model tensor at ``path``, when there is one.
    """

    param_id: int
    path: str | None
    model_id: int | None = None


@dataclass(frozen=True)
class OptimizerCheck:
    """Will a Burn optimizer record attach to a model's parameters?

    See ``docs/formats/burn-store.md#optimizer-check``.

    Counts follow the spec: ``O`` the record's state ids, ``M`` the model's ParamIds.

    Attributes:
        verdict: ok, partial, lost or no-ids.
        model: the model file; ``optimizer``: the record.
        model_format: the model's format.
        model_has_ids: the model carries at least one ParamId.
        states: ``|O|``.
        matched: ``|O ∩ M|``.
        trainable: trainable model tensors (float, not running stats).
        trainable_with_state: ``|O ∩ M_trainable|``.
        running_stats: float tensors ignored as running statistics.
        without_ids: trainable tensors that carry no ParamId.
        path_disagreements: ``(id, recorded path, model tensor name)`` for matched ids.
        shape_disagreements: one sentence per disagreement.
        reinitialized: orphans whose recorded path names a model tensor.
        foreign: orphans whose path is unknown or names no model tensor.
        cohorts: the largest number of ids recorded for one path (1: no growth).
        cohort_times: ``(min, max)`` of ``momentum.time`` per cohort, when recorded.
        rebindable: every state can be re-keyed by its recorded path (same name and shape).
        repair: the command that writes a model whose ParamIds match the record.
    """

    verdict: OptimizerVerdict
    model: str
    optimizer: str
    model_format: str
    model_has_ids: bool
    states: int
    matched: int
    trainable: int
    trainable_with_state: int
    running_stats: int
    without_ids: tuple[str, ...] = ()
    path_disagreements: tuple[tuple[int, str, str], ...] = ()
    shape_disagreements: tuple[str, ...] = ()
    reinitialized: tuple[Orphan, ...] = ()
    foreign: tuple[Orphan, ...] = ()
    cohorts: int = 0
    cohort_times: tuple[tuple[int, int] | None, ...] = ()
    rebindable: bool = False
    repair: Command | None = None

    @property
    def ok(self) -> bool:
        """True only for the ``ok`` verdict."""
        return self.verdict is OptimizerVerdict.OK

    @property
    def match_rate(self) -> float | None:
        """``|O ∩ M| / |O|``; None without ParamIds in the model or without states."""
        if not self.model_has_ids or not self.states:
            return None
        return self.matched / self.states

    @property
    def coverage(self) -> float | None:
        """``|O ∩ M_trainable| / |M_trainable|``; None without ParamIds or trainable tensors."""
        if not self.model_has_ids or not self.trainable:
            return None
        return self.trainable_with_state / self.trainable

"""The optimizer check of ``verify --optimizer`` (burn-store spec §7.5).

Will a Burn optimizer record attach to a model's parameters? A record keys each parameter's
state by its ParamId (decimal, in tensor names and metadata) and remembers the parameter's path;
a model carries ParamIds only when it is a burnpack written by Burn (or by ``ckptctl convert
--param-ids-from``). :func:`check_optimizer` compares the two and gives a verdict: ``ok``,
``partial``, ``lost`` or ``no-ids``, with the repair command where one exists.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptctl.errors import CkptError
from ckptctl.formats import open_checkpoint

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping

    from ckptctl.model import Checkpoint, JSONValue, TensorEntry

    Shape = tuple[int, ...]

#: Float tensors that hold running statistics, not trainable parameters.
RUNNING_STATS = ("running_mean", "running_var")


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
    """Will a Burn optimizer record attach to a model's parameters (burn-store spec §7.5)?

    Counts follow the spec: ``O`` the record's state ids, ``M`` the model's ParamIds.

    Attributes:
        verdict: ``ok``, ``partial``, ``lost`` or ``no-ids``.
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

    verdict: str
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
    repair: str | None = None

    @property
    def ok(self) -> bool:
        """True only for the ``ok`` verdict."""
        return self.verdict == "ok"

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

    def to_dict(self) -> dict[str, JSONValue]:
        """A JSON-able dict with deterministic key order."""

        def orphan(o: Orphan) -> dict[str, JSONValue]:
            return {"param_id": o.param_id, "path": o.path, "model_id": o.model_id}

        return {
            "verdict": self.verdict,
            "model": self.model,
            "optimizer": self.optimizer,
            "model_format": self.model_format,
            "model_has_ids": self.model_has_ids,
            "states": self.states,
            "matched": self.matched,
            "match_rate": self.match_rate,
            "trainable": self.trainable,
            "trainable_with_state": self.trainable_with_state,
            "coverage": self.coverage,
            "running_stats": self.running_stats,
            "without_ids": list(self.without_ids),
            "path_disagreements": [
                {"param_id": i, "recorded": p, "model": m} for i, p, m in self.path_disagreements
            ],
            "shape_disagreements": list(self.shape_disagreements),
            "orphans": {
                "reinitialized": [orphan(o) for o in self.reinitialized],
                "foreign": [orphan(o) for o in self.foreign],
            },
            "cohorts": self.cohorts,
            "cohort_times": [
                None if t is None else {"min": t[0], "max": t[1]} for t in self.cohort_times
            ],
            "rebindable": self.rebindable,
            "repair": self.repair,
        }


@dataclass(frozen=True)
class OptimizerRecord:
    """What a Burn optimizer record says about each parameter state, keyed by ParamId."""

    path: str
    ids: frozenset[int]
    paths: Mapping[int, str]
    ranks: Mapping[int, int]
    shapes: Mapping[int, tuple[tuple[str, Shape], ...]]
    times: Mapping[int, int]
    order: tuple[int, ...]  # ids in the order the metadata lists them


def _scalar_int(value: JSONValue) -> int | None:
    if isinstance(value, dict) and len(value) == 1:
        ((tag, inner),) = value.items()
        if tag in ("UInt", "Int") and isinstance(inner, int) and not isinstance(inner, bool):
            return inner
    return None


def load_record(path: str | os.PathLike[str]) -> OptimizerRecord | CkptError:
    """Parse a Burn optimizer record (spec §7.3); the error when it is none."""
    try:
        with open_checkpoint(path) as ckpt:
            return _parse_record(ckpt)
    except CkptError as exc:
        return exc


def _parse_record(ckpt: Checkpoint) -> OptimizerRecord:
    hint = "pass the optim-<epoch>.bpk file burn-train writes next to model-<epoch>.bpk"
    if ckpt.format != "burnpack":
        raise CkptError(
            f"is a {ckpt.format} file, not a Burn optimizer record (a burnpack)", hint=hint
        )
    shapes: dict[int, list[tuple[str, Shape]]] = {}
    for entry in ckpt.values():
        head, _, rest = entry.name.partition(".")
        if not (head.isdigit() and rest and entry.param_id == int(head)):
            raise CkptError(
                f"is not a Burn optimizer record: tensor {entry.name!r} is not named "
                "<ParamId>.<field> with a matching param_id",
                hint=hint,
            )
        shapes.setdefault(int(head), []).append((rest, entry.shape))
    ranks: dict[int, int] = {}
    times: dict[int, int] = {}
    for key, value in ckpt.scalars.items():
        head, _, rest = key.partition(".")
        if not head.isdigit():
            continue
        number = _scalar_int(value)
        if rest == "__rank" and number is not None:
            ranks[int(head)] = number
        elif rest == "momentum.time" and number is not None:
            times[int(head)] = number
    paths = {int(k): v for k, v in ckpt.metadata.items() if k.isdigit()}
    ids = frozenset(shapes) | frozenset(ranks)
    if not ids and not paths:
        raise CkptError(
            "is not a Burn optimizer record: no <ParamId>.<field> tensors, no <ParamId>.__rank "
            "scalars",
            hint=hint,
        )
    order = tuple(int(k) for k in ckpt.metadata if k.isdigit())
    return OptimizerRecord(
        path=ckpt.path,
        ids=ids,
        paths=paths,
        ranks=ranks,
        shapes={k: tuple(v) for k, v in shapes.items()},
        times=times,
        order=order,
    )


def _shape_problems(record: OptimizerRecord, pid: int, name: str, shape: Shape) -> list[str]:
    out = [
        f"state {pid}.{fld} has shape {list(s)} but {name!r} has {list(shape)}"
        for fld, s in record.shapes.get(pid, ())
        if s != shape
    ]
    rank = record.ranks.get(pid)
    if rank is not None and rank != len(shape):
        out.append(f"state {pid}.__rank is {rank} but {name!r} has rank {len(shape)}")
    return out


def _cohorts(record: OptimizerRecord) -> tuple[int, tuple[tuple[int, int] | None, ...]]:
    """How many ids share a recorded path at most, and ``momentum.time`` per cohort.

    Ids of one path are ranked by ``momentum.time`` (ids without one last); cohort ``k`` is the
    ``k``-th id of every path. This is a heuristic: the record keeps no creation order.
    """
    by_path: dict[str, list[int]] = {}
    for pid in sorted(record.ids):
        if pid in record.paths:
            by_path.setdefault(record.paths[pid], []).append(pid)
    if not record.ids:
        return 0, ()
    count = max((len(v) for v in by_path.values()), default=1)
    cohorts: list[list[int]] = [[] for _ in range(count)]
    for pids in by_path.values():
        ranked = sorted(pids, key=lambda p: (p not in record.times, record.times.get(p, 0)))
        for k, pid in enumerate(ranked):
            if pid in record.times:
                cohorts[k].append(record.times[pid])
    times = tuple((min(c), max(c)) if c else None for c in cohorts)
    return count, times


def check_optimizer(
    model_path: str,
    model_format: str,
    entries: list[TensorEntry],
    record: OptimizerRecord,
    state_key: str | None = None,
) -> OptimizerCheck:
    """Compare a model's ParamIds with an optimizer record (burn-store spec §7.5 checks 1-7)."""
    by_name = {e.name: e for e in entries}
    floats = [e for e in entries if e.dtype.is_float]
    trainable = [e for e in floats if not e.name.endswith(RUNNING_STATS)]
    model_ids: dict[int, TensorEntry] = {}
    for e in entries:
        if e.param_id is not None:
            model_ids.setdefault(e.param_id, e)
    has_ids = bool(model_ids)
    ids = record.ids
    matched = sorted(pid for pid in ids if pid in model_ids) if has_ids else []
    trainable_ids = {e.param_id for e in trainable if e.param_id is not None}
    path_dis: list[tuple[int, str, str]] = []
    shape_dis: list[str] = []
    for pid in matched:
        entry = model_ids[pid]
        recorded = record.paths.get(pid)
        if recorded is not None and recorded != entry.name:
            path_dis.append((pid, recorded, entry.name))
        shape_dis += _shape_problems(record, pid, entry.name, entry.shape)
    orphan_ids = sorted(pid for pid in ids if pid not in model_ids)
    reinit: list[Orphan] = []
    foreign: list[Orphan] = []
    for pid in orphan_ids:
        path = record.paths.get(pid)
        if path is not None and path in by_name:
            reinit.append(Orphan(pid, path, by_name[path].param_id))
        else:
            foreign.append(Orphan(pid, path))
    # Rebinding by path: every state (all of them without model ids) lands on a same-shape tensor.
    candidates = orphan_ids if has_ids else sorted(ids)
    rebindable = (
        bool(ids)
        and not matched
        and all(
            record.paths.get(pid) in by_name
            and not _shape_problems(
                record, pid, record.paths[pid], by_name[record.paths[pid]].shape
            )
            for pid in candidates
        )
    )
    cohorts, times = _cohorts(record)
    if not has_ids:
        verdict = "no-ids"
    elif not ids or (len(matched) == len(ids) and not path_dis and not shape_dis):
        verdict = "ok"
    elif not matched:
        verdict = "lost"
    else:
        verdict = "partial"
    repair = None
    if verdict != "ok" and (rebindable or (not has_ids and ids)):
        key = f" --state-key {shlex.quote(state_key)}" if state_key is not None else ""
        repair = (
            f"ckptctl convert {shlex.quote(model_path)} fixed.bpk --param-ids-from "
            f"{shlex.quote(record.path)}{key}"
        )
    return OptimizerCheck(
        verdict=verdict,
        model=model_path,
        optimizer=record.path,
        model_format=model_format,
        model_has_ids=has_ids,
        states=len(ids),
        matched=len(matched),
        trainable=len(trainable),
        trainable_with_state=len(trainable_ids & ids) if has_ids else 0,
        running_stats=len(floats) - len(trainable),
        without_ids=tuple(e.name for e in trainable if e.param_id is None),
        path_disagreements=tuple(path_dis),
        shape_disagreements=tuple(shape_dis),
        reinitialized=tuple(reinit),
        foreign=tuple(foreign),
        cohorts=cohorts,
        cohort_times=times,
        rebindable=rebindable,
        repair=repair,
    )

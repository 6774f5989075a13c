"""The optimizer check of ``verify --optimizer`` (docs/formats/burn-store.md#optimizer-check).

Will a Burn optimizer record attach to a model's parameters? A record keys each parameter's
state by its ParamId (decimal, in tensor names and metadata) and remembers the parameter's path;
a model carries ParamIds only when it is a burnpack written by Burn (or by ``ckptctl convert
--param-ids-from``). :func:`check_optimizer` compares the two and gives a verdict: ``ok``,
``partial``, ``lost`` or ``no-ids``, with the repair command where one exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptctl.errors import CkptError
from ckptctl.fix import Command, Option
from ckptctl.formats import open_checkpoint
from ckptctl.report.optimizer import OptimizerCheck, OptimizerVerdict, Orphan

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping

    from ckptctl.model import Checkpoint, JSONValue, TensorEntry

    Shape = tuple[int, ...]

#: Float tensors that hold running statistics, not trainable parameters.
RUNNING_STATS = ("running_mean", "running_var")


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
    """Parse a Burn optimizer record; the error when it is none.

    Layout: ``docs/formats/burn-store.md#optimizer-records``.
    """
    try:
        with open_checkpoint(path) as ckpt:
            return _parse_record(ckpt)
    except CkptError as exc:
        return exc


def _parse_record(ckpt: Checkpoint) -> OptimizerRecord:
    hint = "pass the optim-<epoch>.bpk file burn-train writes next to model-<epoch>.bpk"
    if ckpt.format != "burnpack" and not ckpt.format.startswith("burn-"):  # old Burn records
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
    """Compare a model's ParamIds with an optimizer record.

    The checks: ``docs/formats/burn-store.md#optimizer-check``.
    """
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
        verdict = OptimizerVerdict.NO_IDS
    elif not ids or (len(matched) == len(ids) and not path_dis and not shape_dis):
        verdict = OptimizerVerdict.OK
    elif not matched:
        verdict = OptimizerVerdict.LOST
    else:
        verdict = OptimizerVerdict.PARTIAL
    repair = None
    if verdict is not OptimizerVerdict.OK and (rebindable or (not has_ids and ids)):
        options = [Option("param_ids_from", record.path)]
        if state_key is not None:
            options.append(Option("state_key", state_key))
        repair = Command("convert", (model_path, "fixed.bpk"), tuple(options))
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

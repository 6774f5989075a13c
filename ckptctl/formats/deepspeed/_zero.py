"""Reading a DeepSpeed tag folder's rank files and consolidating them as ``zero_to_fp32.py``
does (see the package docstring for the layout and the rules)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.errors import CkptError, CorruptCheckpointError, UnsupportedError
from ckptctl.formats.deepspeed._names import MODEL_FILE, OPTIM_FILE
from ckptctl.formats.deepspeed._pieces import as_f32, pieces_entry, slice_elements, truncate
from ckptctl.model import TensorEntry
from ckptctl.safety import PickleSafety
from ckptctl.sources import open_source

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ckptctl.model import Checkpoint, Piece
    from ckptctl.sources import ByteSource

#: Most rank files in one tag folder.
MAX_RANKS = 65_536
#: What torch says of every DeepSpeed file since 2.6 made ``weights_only=True`` the default.
TORCH_NOTE = (
    "torch.load(weights_only=True), the default since torch 2.6, refuses {which}: they name "
    "{names}, which are not on its allowlist; ckptctl reads them as inert data"
)


# --- reading the object trees --------------------------------------------------------------------


def _get(tree: object, *keys: str, default: object = None) -> object:
    node = tree
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def _int_of(value: object, what: str, where: str) -> int:
    """An int, or the int an ``IntEnum`` stand-in (``ZeroStageEnum(2)``) was built from."""
    from ckptctl.formats.pytorch._unpickler import Stub

    if isinstance(value, Stub) and len(value.args) == 1:
        value = value.args[0]
    if type(value) is not int or value < 0:
        raise CorruptCheckpointError(f"{where}: {what} is {value!r}, not a count")
    return value


def _shapes(value: object, what: str, where: str) -> dict[str, tuple[int, ...]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CorruptCheckpointError(f"{where}: {what} is not a mapping of names to shapes")
    out: dict[str, tuple[int, ...]] = {}
    for name, shape in value.items():
        if not isinstance(name, str) or not isinstance(shape, tuple | list):
            raise CorruptCheckpointError(f"{where}: {what} has a bad entry {name!r}")
        if not all(type(d) is int and d >= 0 for d in shape):
            raise CorruptCheckpointError(f"{where}: {what} gives {name!r} the shape {shape!r}")
        out[name] = tuple(shape)
    return out


@dataclass
class RankFile:
    """One rank file: its name in the tag folder, its checkpoint (entries) and object tree."""

    name: str
    ckpt: Checkpoint
    tree: object
    source: ByteSource

    def tensor(self, *keys: object) -> TensorEntry:
        name = ".".join(str(k) for k in keys)
        if name not in self.ckpt:
            raise CorruptCheckpointError(f"{self.name}: no tensor {name!r}")
        return self.ckpt[name]


def _open_file(folder: str, name: str, opened: list[RankFile]) -> RankFile:
    from ckptctl.formats._lfs import refuse_pointer
    from ckptctl.formats.pytorch import open_pytorch_tree

    path = os.path.join(folder, name)
    source = open_source(path)
    try:
        refuse_pointer(source)  # a partition never fetched (issue 44)
        ckpt, tree = open_pytorch_tree(source)
    except CkptError as exc:
        source.close()
        if exc.safety is not None and isinstance(exc.safety, PickleSafety):
            exc.safety = PickleSafety().merge(exc.safety, prefix=f"{name}: ")
        exc.message, exc.path = f"{name}: {exc.message}", folder  # the save, then the file
        raise exc from None
    except BaseException:
        source.close()
        raise
    if not isinstance(tree, dict):
        ckpt.close()
        raise CorruptCheckpointError(f"{name} does not hold a dict", path=path)
    found = RankFile(name, ckpt, tree, source)
    opened.append(found)
    return found


@dataclass
class Layout:
    """What the tag folder holds, read."""

    folder: str
    stage: int
    world: int
    models: list[RankFile]
    optims: list[RankFile]
    notes: list[str] = field(default_factory=list)


def _rank_files(folder: str) -> tuple[dict[int, str], dict[int, str]]:
    models: dict[int, str] = {}
    optims: dict[int, str] = {}
    for name in sorted(os.listdir(folder)):
        model, optim = MODEL_FILE.fullmatch(name), OPTIM_FILE.fullmatch(name)
        match, ranks, mp = (model, models, 2) if model else (optim, optims, 3)
        if match is None:
            continue
        if int(match.group(mp)) != 0:
            raise UnsupportedError(
                f"{name}: tensor-parallel (mp_rank > 0) DeepSpeed checkpoints are not supported",
                hint="consolidate them with deepspeed's ds_to_universal first",
            )
        rank = int(match.group(1) or 0) if model else int(match.group(2))
        if rank >= MAX_RANKS:
            raise CorruptCheckpointError(f"{name}: rank {rank} is past the limit of {MAX_RANKS}")
        ranks[rank] = name
    return models, optims


def read_layout(folder: str, opened: list[RankFile]) -> Layout:
    models, optims = _rank_files(folder)
    if not optims:
        raise CorruptCheckpointError(
            "the save holds no *_optim_states.pt files (the ZeRO partitions of the weights)"
        )
    first = _open_file(folder, optims[min(optims)], opened)
    where = first.name
    opt = _get(first.tree, "optimizer_state_dict")
    if not isinstance(opt, dict) or "zero_stage" not in opt:
        raise CorruptCheckpointError(f"{where} is not a ZeRO optimizer state file (no zero_stage)")
    stage = _int_of(opt["zero_stage"], "zero_stage", where)
    count = opt.get("partition_count")
    counts = count if isinstance(count, list) else [count]
    world = max(_int_of(c, "partition_count", where) for c in counts)
    if stage not in (1, 2, 3):
        raise UnsupportedError(f"{where}: ZeRO stage {stage} is not supported (1, 2 or 3 are)")
    if not 0 < world <= MAX_RANKS:
        raise CorruptCheckpointError(f"{where}: partition_count {world} is out of range")
    prefix = "bf16_" if first.name.startswith("bf16_") else ""
    for rank in range(world):
        if rank not in optims:
            expected = f"{prefix}zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"
            raise CorruptCheckpointError(
                f"rank {rank}'s optimizer states {expected} are missing: partition_count says "
                f"{world} ranks, the folder has {len(optims)} *_optim_states.pt files",
                path=folder,
                hint="copy every rank's file; a save interrupted on one rank is incomplete",
            )
    extra = sorted(set(optims) - set(range(world)))
    if extra:
        raise CorruptCheckpointError(
            f"{optims[extra[0]]} is rank {extra[0]}, but partition_count says {world} ranks",
            hint="a file left over from another save? (deepspeed refuses this folder too)",
        )
    model_ranks = range(world) if stage == 3 else range(1)
    for rank in model_ranks:
        if rank not in models:
            expected = (
                f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt"
                if stage == 3
                else "mp_rank_00_model_states.pt"
            )
            raise CorruptCheckpointError(
                f"the model states {expected} are missing",
                path=folder,
                hint="copy every rank's file",
            )
    optim_files = [first] + [_open_file(folder, optims[r], opened) for r in range(1, world)]
    model_files = [_open_file(folder, models[r], opened) for r in model_ranks]
    return Layout(folder, stage, world, model_files, optim_files)


# --- consolidation --------------------------------------------------------------------------------


@dataclass
class Param:
    """A trainable parameter: its name, shape, and where its elements are in each rank."""

    name: str
    shape: tuple[int, ...]
    group: int
    offset: int  # first element in the group's merged vector (1/2) or each rank's groups (3)


def _groups_key(stage: int) -> str:
    return "fp32_flat_groups" if stage == 3 else "single_partition_of_fp32_groups"


def _flat_groups(layout: Layout, rank: int) -> list[TensorEntry]:
    optim = layout.optims[rank]
    key = _groups_key(layout.stage)
    groups = _get(optim.tree, "optimizer_state_dict", key)
    if not isinstance(groups, list | tuple) or not groups:
        raise CorruptCheckpointError(f"{optim.name}: no {key} list")
    out = [optim.tensor("optimizer_state_dict", key, i) for i in range(len(groups))]
    for entry in out:
        if len(entry.shape) != 1 or entry.dtype is not out[0].dtype:
            raise CorruptCheckpointError(f"{optim.name}: {entry.name} is not a flat partition")
    return out


def _base_states(layout: Layout, rank: int) -> tuple[object, tuple[str, ...]]:
    """The base optimizer's per-group states of one rank, and their key path."""
    optim = layout.optims[rank]
    keys = ("optimizer_state_dict", "base_optimizer_state")
    if layout.stage == 3:
        keys = ("optimizer_state_dict", "optimizer_state_dict")
    base = _get(optim.tree, *keys)
    if isinstance(base, dict) and "state" in base:  # torch's Optimizer.state_dict()
        return base["state"], (*keys, "state")
    return base, keys  # older zero stage 1/2: a list of per-group states


def trainable_params(layout: Layout) -> list[Param]:
    model = layout.models[0]
    shapes = _get(model.tree, "param_shapes")
    if not isinstance(shapes, list):
        raise CorruptCheckpointError(f"{model.name}: no param_shapes list")
    groups = [_shapes(g, f"param_shapes[{i}]", model.name) for i, g in enumerate(shapes)]
    flat = [_flat_groups(layout, r) for r in range(layout.world)]
    for rank, parts in enumerate(flat):
        # stages 1/2 may split a group unevenly (the last rank padded); stage 3 may not
        same = [p.numel for p in parts] == [p.numel for p in flat[0]]
        if len(parts) != len(flat[0]) or (layout.stage == 3 and not same):
            raise CorruptCheckpointError(
                f"{layout.optims[rank].name}: its partitions differ from rank 0's"
            )
    out: list[Param] = []
    if layout.stage == 3:
        offset = 0
        for g, group in enumerate(groups):
            for name, shape in group.items():
                out.append(Param(name, shape, g, offset))
                offset += -(-math.prod(shape) // layout.world)  # ceil: the padded partition
        avail = sum(p.numel for p in flat[0])
        if offset != avail:
            raise CorruptCheckpointError(
                f"param_shapes need {offset} elements per rank but each rank holds {avail}",
                hint="zero_to_fp32 refuses this save too",
            )
        return out
    if len(groups) != len(flat[0]):
        raise CorruptCheckpointError(
            f"{model.name} has {len(groups)} parameter groups, the optimizer {len(flat[0])}"
        )
    paddings = _get(layout.optims[0].tree, "optimizer_state_dict", "param_alignment_paddings")
    align = 2 * layout.world
    for g, group in enumerate(groups):
        pad = paddings[g] if isinstance(paddings, list) and g < len(paddings) else None
        if isinstance(pad, list) and len(pad) != len(group):
            raise CorruptCheckpointError(
                f"group {g} has {len(group)} parameters but {len(pad)} alignment paddings"
            )
        offset = 0
        for i, (name, shape) in enumerate(group.items()):
            out.append(Param(name, shape, g, offset))
            offset += math.prod(shape)
            if isinstance(pad, list):
                offset += _int_of(pad[i], "param_alignment_paddings", layout.optims[0].name)
        avail = sum(parts[g].numel for parts in flat)
        if align * math.ceil(offset / align) != align * math.ceil(avail / align):
            raise CorruptCheckpointError(
                f"parameter group {g} needs {offset} elements but the ranks hold {avail}",
                hint="zero_to_fp32 refuses this save too ('something is wrong')",
            )
    return out


def _gather(
    layout: Layout, param: Param, parts_of: Callable[[int], list[TensorEntry]]
) -> list[Piece]:
    """The pieces of ``param`` in the flat tensors ``parts_of(rank)`` (weights or states)."""
    numel = math.prod(param.shape)
    if layout.stage == 3:
        per_rank = -(-numel // layout.world)
        pieces = [
            p
            for r in range(layout.world)
            for p in slice_elements(parts_of(r), param.offset, per_rank)
        ]
        itemsize = parts_of(0)[0].dtype.itemsize
        return list(truncate(pieces, numel * itemsize))
    merged = [parts_of(r)[param.group] for r in range(layout.world)]
    return slice_elements(merged, param.offset, numel)


def _module_entries(layout: Layout) -> dict[str, TensorEntry]:
    model = layout.models[0]
    prefix = "module."
    return {
        e.name[len(prefix) :]: e.renamed(e.name[len(prefix) :])
        for e in model.ckpt.values()
        if e.name.startswith(prefix)
    }


def _frozen(layout: Layout, module: Mapping[str, TensorEntry], skip: set[str]) -> list[TensorEntry]:
    model = layout.models[0]
    shapes = _shapes(_get(model.tree, "frozen_param_shapes"), "frozen_param_shapes", model.name)
    out: list[TensorEntry] = []
    if _get(model.tree, "frozen_param_shapes") is None and layout.stage < 3:
        kept = [e for n, e in module.items() if n not in skip]
        if kept:
            layout.notes.append(
                f"{len(kept)} frozen parameter{'s' if len(kept) != 1 else ''} "
                f"({', '.join(e.name for e in kept[:3])}{', ...' if len(kept) > 3 else ''}) "
                "taken from the module state: deepspeed's zero_to_fp32 leaves them out at stage 1"
            )
        return kept
    for name, shape in shapes.items():
        if layout.stage == 3:
            frags = [m.tensor("frozen_param_fragments", name) for m in layout.models]
            pieces = truncate(slice_elements(frags, 0, sum(f.numel for f in frags)),
                               math.prod(shape) * frags[0].dtype.itemsize)  # fmt: skip
            out.append(pieces_entry(name, frags[0].dtype, shape, pieces))
        else:  # stage 2: the fragment as stored (zero_to_fp32 does not reshape it)
            out.append(model.tensor("frozen_param_fragments", name).renamed(name))
    return out


def _shared(layout: Layout) -> dict[str, str]:
    pairs = _get(layout.models[0].tree, "shared_params", default={})
    if not isinstance(pairs, dict):
        raise CorruptCheckpointError(f"{layout.models[0].name}: shared_params is not a mapping")
    return {str(k): str(v) for k, v in pairs.items() if isinstance(v, str)}


def _tie(entries: dict[str, TensorEntry], shared: Mapping[str, str]) -> None:
    """Add ``shared_params`` aliases, marked as one storage so writers and reports see ties."""
    for alias, name in shared.items():
        if name not in entries:
            continue
        target = entries[name]
        strides = [math.prod(target.shape[i + 1 :]) for i in range(len(target.shape))]
        mark = {**target.extra, "storage": f"shared:{name}", "storage_offset": "0",
                "stride": ",".join(map(str, strides)),
                "storage_nbytes": str(target.nbytes)}  # fmt: skip
        entries[name] = TensorEntry(
            name, target.dtype, target.shape, target.nbytes, target.offset, target.data, extra=mark
        )
        entries[alias] = entries[name].renamed(alias)


def model_view(layout: Layout, params: list[Param]) -> list[TensorEntry]:
    model = layout.models[0]
    module = _module_entries(layout)
    buffer_names = _get(model.tree, "buffer_names", default=[])
    if not isinstance(buffer_names, list):
        raise CorruptCheckpointError(f"{model.name}: buffer_names is not a list")
    names = {str(n) for n in buffer_names}
    buffers = [as_f32(e) for n, e in module.items() if n in names]
    shared = _shared(layout)
    skip = {e.name for e in buffers} | {p.name for p in params} | set(shared)
    entries: dict[str, TensorEntry] = {e.name: e for e in buffers}
    entries.update((e.name, e) for e in _frozen(layout, module, skip))
    flats = [_flat_groups(layout, r) for r in range(layout.world)]
    for param in params:
        pieces = _gather(layout, param, flats.__getitem__)
        dtype = flats[0][param.group if layout.stage < 3 else 0].dtype  # fp32, as a rule
        entries[param.name] = pieces_entry(param.name, dtype, param.shape, pieces)
    _tie(entries, shared)
    return list(entries.values())


def state_view(layout: Layout, params: list[Param], key: str) -> list[TensorEntry]:
    """Optimizer state ``key`` of every trainable parameter, by parameter name."""
    out: list[TensorEntry] = []
    cache: dict[int, list[TensorEntry]] = {}

    def states_of(rank: int) -> list[TensorEntry]:
        if rank not in cache:
            _, path = _base_states(layout, rank)
            flat = _flat_groups(layout, rank)
            found = [layout.optims[rank].tensor(*path, g, key) for g in range(len(flat))]
            # laid out like the fp32 partitions; the last rank's states keep the group padding
            # its stored fp32 partition drops (group_paddings), which lies past every parameter
            last = rank == layout.world - 1
            if found[0].shape != () and not all(
                e.numel == f.numel or (last and e.numel > f.numel)
                for e, f in zip(found, flat, strict=True)
            ):
                raise CorruptCheckpointError(
                    f"{layout.optims[rank].name}: optimizer state {key!r} is not laid out like "
                    "the fp32 partitions (other element counts)"
                )
            cache[rank] = found
        return cache[rank]

    starts = [0]
    for part in _flat_groups(layout, 0):
        starts.append(starts[-1] + part.numel)
    for param in params:
        first = states_of(0)[0]
        if first.shape == ():  # ``step``: the group's count, one per parameter
            group = param.group
            if layout.stage == 3:
                group = max(i for i, s in enumerate(starts[:-1]) if s <= param.offset)
            out.append(states_of(0)[group].renamed(param.name))
            continue
        pieces = _gather(layout, param, states_of)
        out.append(pieces_entry(param.name, first.dtype, param.shape, pieces))
    return out


def state_keys(layout: Layout) -> list[str]:
    states, _ = _base_states(layout, 0)
    if isinstance(states, dict):
        group = states.get(0)
    else:
        group = states[0] if isinstance(states, list | tuple) and states else None
    if not isinstance(group, dict):
        return []
    return [str(k) for k in group if isinstance(k, str)]


def save_objects(layout: Layout, tag: str | None) -> dict[str, object]:
    from ckptctl.formats.pytorch._structure import _plain

    model = layout.models[0].tree
    facts: dict[str, object] = {
        "zero_stage": layout.stage,
        "world_size": layout.world,
        "tag": tag or os.path.basename(layout.folder),
        "files": [f.name for f in (*layout.models, *layout.optims)],
    }
    for key in ("ds_version", "global_steps", "global_samples", "skipped_steps", "dp_world_size"):
        value = _get(model, key)
        if isinstance(value, int | str | float):
            facts[key] = value
    objects: dict[str, object] = {"deepspeed": facts}
    config = layout.models[0].ckpt.objects.get("ds_config")
    if config is not None:
        objects["ds_config"] = config
    groups = _get(layout.optims[0].tree, *_base_states(layout, 0)[1][:-1], "param_groups")
    if isinstance(groups, list):
        objects["param_groups"] = [
            {str(k): _plain(v) for k, v in g.items() if k != "params"}
            for g in groups
            if isinstance(g, dict)
        ]
    return objects


def merged_safety(files: list[RankFile]) -> tuple[PickleSafety, list[str]]:
    """Every file's verdict, its stream names prefixed with the file's, and the note on what
    torch's weights-only loading makes of the files that name deepspeed's classes."""
    safety = PickleSafety()
    refused: list[str] = []
    for f in files:
        if f.ckpt.safety is not None:
            safety = safety.merge(f.ckpt.safety, prefix=f"{f.name}: ")
            if any(g.name.startswith("deepspeed.") for g in f.ckpt.safety.untrusted()):
                refused.append(f.name)
    names = sorted({g.name for g in safety.untrusted() if g.name.startswith("deepspeed.")})
    if not names:
        return safety, []
    which = (
        "every rank file" if len(refused) == len(files)
        else f"{len(refused)} of the {len(files)} rank files ({', '.join(refused[:2])}"
        + (", ..." if len(refused) > 2 else "") + ")"
    )  # fmt: skip
    return safety, [TORCH_NOTE.format(which=which, names=", ".join(names))]

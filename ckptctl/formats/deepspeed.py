"""DeepSpeed ZeRO checkpoints (stages 1, 2 and 3), read as one checkpoint without torch.

A checkpoint folder, as deepspeed 0.19.8's ``engine.save_checkpoint(CKPT)`` writes it::

    CKPT/latest                      text: the tag of the newest save, e.g. ``global_step2``
    CKPT/zero_to_torch.py            deepspeed's converter, copied in (zero_to_fp32.py before 0.19)
    CKPT/global_step2/mp_rank_00_model_states.pt                 stages 1 and 2: one file
    CKPT/global_step2/zero_pp_rank_R_mp_rank_00_model_states.pt  stage 3: one per rank R
    CKPT/global_step2/[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt  one per rank R

Every ``.pt`` is a ``torch.save`` zip, read (and judged) by :mod:`ckptctl.formats.pytorch`.
The model states hold ``module`` (the state_dict in the training dtype; at stage 3 empty
placeholders), ``buffer_names``, ``param_shapes`` (one ``{name: torch.Size}`` per parameter
group, in flattening order), ``frozen_param_shapes`` / ``frozen_param_fragments`` (written from
stage 2 on only), ``shared_params`` (``{alias: name}`` of tied parameters), ``ds_version`` and
``ds_config``. The optimizer states hold ``optimizer_state_dict`` with ``zero_stage`` (a
``deepspeed.runtime.zero.config.ZeroStageEnum``), ``partition_count`` (the ranks), the rank's
fp32 master partition of every group (``single_partition_of_fp32_groups`` at stages 1/2,
``fp32_flat_groups`` at 3), ``param_alignment_paddings`` (0.19), ``loss_scaler`` (a
``deepspeed.runtime.fp16.loss_scaler.LossScaler``), ``param_slice_mappings``
(``deepspeed.utils.tensor_fragment.fragment_address``) and the base optimizer's state per group
(``base_optimizer_state`` at 1/2, ``optimizer_state_dict`` at 3: ``exp_avg``, ``exp_avg_sq``
laid out like the fp32 partition, a 0-d ``step``).

The consolidated tensors are ``deepspeed/utils/zero_to_fp32.py``'s
(``get_fp32_state_dict_from_zero_checkpoint``), computed the same way:

* buffers first (``module`` entries named in ``buffer_names``; floating ones as F32, ``.float()``),
  then frozen parameters, then the trainable ones, then ``shared_params`` aliases;
* stages 1/2: a group's flat vector is the ranks' partitions concatenated; its parameters lie in
  ``param_shapes`` order from element 0, each followed by its ``param_alignment_paddings``; the
  vector must then end within ``2 * world_size`` elements (zero_to_fp32's ``zero2_align``);
* stage 3: every parameter is split over the ranks, ``ceil(numel / world_size)`` elements each
  (the last rank padded), at the same offset in every rank's concatenated groups;
* frozen parameters: stage 2 takes ``frozen_param_fragments`` as stored, stage 3 concatenates the
  ranks' fragments. At stage 1 the engine writes no ``frozen_param_shapes`` and zero_to_fp32
  drops frozen parameters; ckptctl keeps them, from ``module`` (in the training dtype, as stage 2
  would give them), and says so in the notes.

No tensor is assembled in memory: each is a list of byte ranges in the rank files (``_Pieces``),
copied straight into the output. ``--state-key exp_avg`` (``exp_avg_sq``, ``step``) selects the
optimizer state of every trainable parameter, by parameter name, laid out like the weights.

Every file is judged by the allowlist (``safety``): deepspeed's globals make each one
needs-trust, and torch 2.6+ refuses them with ``weights_only=True`` (its default).
"""

from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckptctl.dtypes import DType
from ckptctl.errors import CkptError, CorruptCheckpointError, InputError, UnsupportedError
from ckptctl.formats._base import FormatSpec
from ckptctl.model import (
    Checkpoint,
    CheckpointKind,
    ComputedData,
    HeaderLayout,
    Region,
    RegionKind,
    TensorData,
    TensorEntry,
)
from ckptctl.safety import PickleSafety
from ckptctl.sources import ByteSource, open_source

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from numpy.typing import NDArray

__all__ = ["SPEC", "SPECS", "find_checkpoint", "is_deepspeed_dir", "open_deepspeed"]

#: Largest ``latest`` file read (it holds one tag).
MAX_TAG_BYTES = 4096
#: Most rank files in one tag folder.
MAX_RANKS = 65_536
#: The file whose bytes name the tag folder (``engine.save_checkpoint`` writes it).
LATEST = "latest"

_TAG = re.compile(rb"\s*([A-Za-z0-9_.\-]+)\s*")
_MODEL = re.compile(r"(?:zero_pp_rank_(\d+)_)?mp_rank_(\d+)_model_states\.pt")
_OPTIM = re.compile(r"(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt")
_STEP_DIR = re.compile(r"global_step\d+")
#: What torch says of every DeepSpeed file since 2.6 made ``weights_only=True`` the default.
TORCH_NOTE = (
    "torch.load(weights_only=True), the default since torch 2.6, refuses these files: they name "
    "{names}, which are not on its allowlist; ckptctl reads them as inert data"
)


# --- finding the files ---------------------------------------------------------------------


def _model_files(folder: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(folder) if _MODEL.fullmatch(n))
    except OSError:
        return []


def _has_optim_files(folder: str) -> bool:
    try:
        return any(_OPTIM.fullmatch(n) for n in os.listdir(folder))
    except OSError:
        return False


def _rank0_model_file(folder: str) -> str | None:
    names = _model_files(folder)
    for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt"):
        if name in names:
            return os.path.join(folder, name)
    return os.path.join(folder, names[0]) if names else None


def _read_tag(path: str) -> str | None:
    try:
        if os.path.getsize(path) > MAX_TAG_BYTES:
            return None
        with open(path, "rb") as f:
            match = _TAG.fullmatch(f.read())
    except OSError:
        return None
    return match.group(1).decode() if match else None


def find_checkpoint(folder: str) -> str | None:
    """The file that stands for a DeepSpeed checkpoint folder, or None if it is not one.

    ``CKPT`` (with ``latest``, or one ``global_step*`` folder) and ``CKPT/global_stepN`` are
    both DeepSpeed checkpoints: the first stands for its ``latest`` file, the tag folder for its
    rank-0 model states file (either is what :func:`sniff` recognises).

    Raises:
        InputError: a folder of several ``global_step*`` saves and no ``latest`` file.
    """
    if _model_files(folder) and _has_optim_files(folder):
        return _rank0_model_file(folder)
    latest = os.path.join(folder, LATEST)
    tag = _read_tag(latest) if os.path.isfile(latest) else None
    if tag is not None:
        return latest
    try:
        steps = sorted(n for n in os.listdir(folder) if _STEP_DIR.fullmatch(n))
    except OSError:
        return None
    steps = [s for s in steps if _model_files(os.path.join(folder, s))]
    if len(steps) == 1:
        return _rank0_model_file(os.path.join(folder, steps[0]))
    if steps:
        shown = ", ".join(steps[:5]) + (f" and {len(steps) - 5} more" if len(steps) > 5 else "")
        raise InputError(
            f"is a DeepSpeed folder with {len(steps)} saves ({shown}) and no 'latest' file",
            path=folder,
            hint=f"name the save, e.g. {os.path.join(folder, steps[-1])}",
        )
    return None


def is_deepspeed_dir(folder: str) -> bool:
    """Whether ``folder`` is a DeepSpeed checkpoint (its root or a tag folder). Never raises."""
    try:
        return find_checkpoint(folder) is not None
    except CkptError:
        return True  # several saves: opening it says which to choose


def _tag_folder(source: ByteSource) -> tuple[str, str | None]:
    """The tag folder ``source`` stands for, and the tag read from ``latest`` (if it is one)."""
    path = os.path.abspath(source.path)
    if os.path.basename(path) != LATEST:
        return os.path.dirname(path), None
    match = _TAG.fullmatch(source.read(0, min(source.size, MAX_TAG_BYTES)))
    if match is None:
        raise CorruptCheckpointError("the 'latest' file does not hold a checkpoint tag")
    tag = match.group(1).decode()
    folder = os.path.join(os.path.dirname(path), tag)
    if not os.path.isdir(folder):
        raise CorruptCheckpointError(
            f"'latest' names the save {tag!r}, but there is no folder {tag!r} beside it",
            hint="copy the whole checkpoint folder, or name a global_step* folder that exists",
        )
    return folder, tag


def sniff(head: bytes, source: ByteSource) -> bool:
    """A ``latest`` file whose tag folder holds DeepSpeed model states, or a model states file
    with optimizer states beside it. Never raises."""
    try:
        if source.is_remote:
            return False
        path = os.path.abspath(source.path)
        name = os.path.basename(path)
        if name == LATEST:  # opening it says when the save it names is missing
            return source.size <= MAX_TAG_BYTES and _TAG.fullmatch(head) is not None
        return (
            head.startswith(b"PK\x03\x04")
            and _MODEL.fullmatch(name) is not None
            and _has_optim_files(os.path.dirname(path))
        )
    except Exception:  # sniffing must never raise
        return False


# --- tensors made of byte ranges ---------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    """``length`` bytes from byte ``start`` of ``data``."""

    data: TensorData
    start: int
    length: int


@dataclass(frozen=True, eq=False)
class _Pieces(TensorData):
    """A tensor whose bytes are byte ranges of other tensors, one after the other."""

    pieces: tuple[_Piece, ...]
    nbytes: int

    def read(self) -> memoryview:
        if len(self.pieces) == 1:
            p = self.pieces[0]
            return memoryview(p.data.read_range(p.start, p.length)).cast("B")
        out = bytearray(self.nbytes)
        done = 0
        for p in self.pieces:
            out[done : done + p.length] = p.data.read_range(p.start, p.length)
            done += p.length
        return memoryview(out)

    def file_range(self) -> tuple[ByteSource, int] | None:
        if len(self.pieces) != 1:
            return None
        p = self.pieces[0]
        where = p.data.file_range()
        return None if where is None else (where[0], where[1] + p.start)

    def read_range(self, start: int, length: int) -> bytes | memoryview:
        if start < 0 or length < 0 or start + length > self.nbytes:
            raise ValueError(f"range {start}+{length} outside a tensor of {self.nbytes} bytes")
        parts: list[bytes | memoryview] = []
        at = 0
        for p in self.pieces:
            lo, hi = max(start, at), min(start + length, at + p.length)
            if lo < hi:
                parts.append(p.data.read_range(p.start + lo - at, hi - lo))
            at += p.length
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def is_ranged(self) -> bool:
        return True


def _slice(parts: Sequence[TensorEntry], first: int, count: int) -> list[_Piece]:
    """Elements ``first .. first + count - 1`` of the 1-D tensors ``parts`` concatenated."""
    out: list[_Piece] = []
    at = 0
    for part in parts:
        n = part.numel
        lo, hi = max(first, at), min(first + count, at + n)
        if lo < hi:
            size = part.dtype.itemsize
            out.append(_Piece(part.data, (lo - at) * size, (hi - lo) * size))
        at += n
        if at >= first + count:
            break
    if sum(p.length for p in out) != count * (parts[0].dtype.itemsize if parts else 0):
        raise CorruptCheckpointError(
            f"elements {first}..{first + count - 1} lie past the end of the fp32 partitions "
            f"({at} elements)"
        )
    return out


def _truncate(pieces: list[_Piece], nbytes: int) -> tuple[_Piece, ...]:
    out: list[_Piece] = []
    left = nbytes
    for p in pieces:
        if left <= 0:
            break
        out.append(_Piece(p.data, p.start, min(p.length, left)))
        left -= out[-1].length
    return tuple(out)


def _entry(
    name: str, dtype: DType, shape: tuple[int, ...], pieces: Sequence[_Piece]
) -> TensorEntry:
    nbytes = math.prod(shape) * dtype.itemsize
    data = _Pieces(tuple(pieces), nbytes)
    where = data.file_range()
    return TensorEntry(name, dtype, shape, nbytes, where[1] if where else None, data)


def _as_f32(entry: TensorEntry) -> TensorEntry:
    """``tensor.float()`` of a floating buffer (zero_to_fp32 widens F16/BF16/F64 buffers)."""
    if entry.dtype not in (DType.F16, DType.BF16, DType.F64):
        return entry
    import numpy as np

    from ckptctl.dtypes import to_float

    def compute() -> NDArray[Any]:
        return np.ascontiguousarray(to_float(entry.load(), entry.dtype), dtype="<f4")

    nbytes = entry.numel * 4
    return TensorEntry(entry.name, DType.F32, entry.shape, nbytes, None, ComputedData(compute))


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
class _File:
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


def _open_file(folder: str, name: str, opened: list[_File]) -> _File:
    from ckptctl.formats.pytorch import open_pytorch_tree

    path = os.path.join(folder, name)
    source = open_source(path)
    try:
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
    found = _File(name, ckpt, tree, source)
    opened.append(found)
    return found


@dataclass
class _Layout:
    """What the tag folder holds, read."""

    folder: str
    stage: int
    world: int
    models: list[_File]
    optims: list[_File]
    notes: list[str] = field(default_factory=list)


def _rank_files(folder: str) -> tuple[dict[int, str], dict[int, str]]:
    models: dict[int, str] = {}
    optims: dict[int, str] = {}
    for name in sorted(os.listdir(folder)):
        model, optim = _MODEL.fullmatch(name), _OPTIM.fullmatch(name)
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


def _read_layout(folder: str, opened: list[_File]) -> _Layout:
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
    return _Layout(folder, stage, world, model_files, optim_files)


# --- consolidation --------------------------------------------------------------------------------


@dataclass
class _Param:
    """A trainable parameter: its name, shape, and where its elements are in each rank."""

    name: str
    shape: tuple[int, ...]
    group: int
    offset: int  # first element in the group's merged vector (1/2) or each rank's groups (3)


def _groups_key(stage: int) -> str:
    return "fp32_flat_groups" if stage == 3 else "single_partition_of_fp32_groups"


def _flat_groups(layout: _Layout, rank: int) -> list[TensorEntry]:
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


def _base_states(layout: _Layout, rank: int) -> tuple[object, tuple[str, ...]]:
    """The base optimizer's per-group states of one rank, and their key path."""
    optim = layout.optims[rank]
    keys = ("optimizer_state_dict", "base_optimizer_state")
    if layout.stage == 3:
        keys = ("optimizer_state_dict", "optimizer_state_dict")
    base = _get(optim.tree, *keys)
    if isinstance(base, dict) and "state" in base:  # torch's Optimizer.state_dict()
        return base["state"], (*keys, "state")
    return base, keys  # older zero stage 1/2: a list of per-group states


def _params(layout: _Layout) -> list[_Param]:
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
    out: list[_Param] = []
    if layout.stage == 3:
        offset = 0
        for g, group in enumerate(groups):
            for name, shape in group.items():
                out.append(_Param(name, shape, g, offset))
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
            out.append(_Param(name, shape, g, offset))
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
    layout: _Layout, param: _Param, parts_of: Callable[[int], list[TensorEntry]]
) -> list[_Piece]:
    """The pieces of ``param`` in the flat tensors ``parts_of(rank)`` (weights or states)."""
    numel = math.prod(param.shape)
    if layout.stage == 3:
        per_rank = -(-numel // layout.world)
        pieces = [
            p for r in range(layout.world) for p in _slice(parts_of(r), param.offset, per_rank)
        ]
        itemsize = parts_of(0)[0].dtype.itemsize
        return list(_truncate(pieces, numel * itemsize))
    merged = [parts_of(r)[param.group] for r in range(layout.world)]
    return _slice(merged, param.offset, numel)


def _module_entries(layout: _Layout) -> dict[str, TensorEntry]:
    model = layout.models[0]
    prefix = "module."
    return {
        e.name[len(prefix) :]: e.renamed(e.name[len(prefix) :])
        for e in model.ckpt.values()
        if e.name.startswith(prefix)
    }


def _frozen(
    layout: _Layout, module: Mapping[str, TensorEntry], skip: set[str]
) -> list[TensorEntry]:
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
            pieces = _truncate(_slice(frags, 0, sum(f.numel for f in frags)),
                               math.prod(shape) * frags[0].dtype.itemsize)  # fmt: skip
            out.append(_entry(name, frags[0].dtype, shape, pieces))
        else:  # stage 2: the fragment as stored (zero_to_fp32 does not reshape it)
            out.append(model.tensor("frozen_param_fragments", name).renamed(name))
    return out


def _shared(layout: _Layout) -> dict[str, str]:
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
        mark = {"storage": f"shared:{name}", "storage_offset": "0", "stride": "",
                "storage_nbytes": str(target.nbytes)}  # fmt: skip
        entries[name] = TensorEntry(
            name, target.dtype, target.shape, target.nbytes, target.offset, target.data, extra=mark
        )
        entries[alias] = entries[name].renamed(alias)


def _model_view(layout: _Layout, params: list[_Param]) -> list[TensorEntry]:
    model = layout.models[0]
    module = _module_entries(layout)
    buffer_names = _get(model.tree, "buffer_names", default=[])
    if not isinstance(buffer_names, list):
        raise CorruptCheckpointError(f"{model.name}: buffer_names is not a list")
    buffers = [_as_f32(e) for n, e in module.items() if n in set(buffer_names)]
    shared = _shared(layout)
    skip = {e.name for e in buffers} | {p.name for p in params} | set(shared)
    entries: dict[str, TensorEntry] = {e.name: e for e in buffers}
    entries.update((e.name, e) for e in _frozen(layout, module, skip))
    for param in params:
        pieces = _gather(layout, param, lambda r: _flat_groups(layout, r))
        entries[param.name] = _entry(param.name, DType.F32, param.shape, pieces)
    _tie(entries, shared)
    return list(entries.values())


def _state_view(layout: _Layout, params: list[_Param], key: str) -> list[TensorEntry]:
    """Optimizer state ``key`` of every trainable parameter, by parameter name."""
    out: list[TensorEntry] = []
    cache: dict[int, list[TensorEntry]] = {}

    def states_of(rank: int) -> list[TensorEntry]:
        if rank not in cache:
            _, path = _base_states(layout, rank)
            groups = len(_flat_groups(layout, 0))
            cache[rank] = [layout.optims[rank].tensor(*path, g, key) for g in range(groups)]
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
        out.append(_entry(param.name, first.dtype, param.shape, pieces))
    return out


def _state_keys(layout: _Layout) -> list[str]:
    states, _ = _base_states(layout, 0)
    if isinstance(states, dict):
        group = states.get(0)
    else:
        group = states[0] if isinstance(states, list | tuple) and states else None
    if not isinstance(group, dict):
        return []
    return [str(k) for k in group if isinstance(k, str)]


def _objects(layout: _Layout, tag: str | None) -> dict[str, object]:
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


def _safety(files: list[_File]) -> tuple[PickleSafety, list[str]]:
    safety = PickleSafety()
    for f in files:
        if f.ckpt.safety is not None:
            safety = safety.merge(f.ckpt.safety, prefix=f"{f.name}: ")
    names = sorted({g.name for g in safety.untrusted() if g.name.startswith("deepspeed.")})
    notes = [TORCH_NOTE.format(names=", ".join(names))] if names else []
    return safety, notes


def open_deepspeed(source: ByteSource) -> Checkpoint:
    """Open a DeepSpeed ZeRO checkpoint as one checkpoint of consolidated fp32 weights.

    ``source`` is the ``latest`` file or a rank-0 model states file (what
    ``formats.resolve_path`` gives for the folder). Entries are what deepspeed's
    ``get_fp32_state_dict_from_zero_checkpoint`` returns, plus frozen parameters at stage 1;
    ``views`` holds each optimizer state (``exp_avg``, ``exp_avg_sq``, ``step``) by parameter name.

    Raises:
        CorruptCheckpointError: a missing, truncated or inconsistent rank file (named).
        UnsupportedError: tensor parallelism, or a ZeRO stage other than 1-3.
    """
    folder, tag = _tag_folder(source)
    opened: list[_File] = []
    try:
        layout = _read_layout(folder, opened)
        params = _params(layout)
        entries = _model_view(layout, params)
        safety, torch_notes = _safety(opened)
    except BaseException:
        for f in opened:
            f.ckpt.close()
        source.close()
        raise
    views: dict[str, Callable[[], list[TensorEntry]]] = {
        key: functools.partial(_state_view, layout, params, key) for key in _state_keys(layout)
    }
    trainable = len(params)
    notes = [
        f"DeepSpeed ZeRO stage {layout.stage} checkpoint on {layout.world} "
        f"rank{'s' if layout.world != 1 else ''} ({os.path.basename(folder)}): fp32 master "
        f"weights of {trainable} trainable parameters, consolidated as deepspeed's "
        "zero_to_fp32 does",
        *layout.notes,
        *torch_notes,
    ]
    if views:
        notes.append("optimizer states by parameter name: state keys " + ", ".join(sorted(views)))
    sources = [source, *(f.source for f in opened)]
    return Checkpoint(
        entries,
        path=folder,
        format="deepspeed-zero",
        kind=CheckpointKind.STATE_DICT,
        notes=notes,
        objects=_objects(layout, tag),
        sources=sources,
        safety=safety,
        views=views,
    )


def _region_counts(regions: Iterator[Region]) -> dict[str, int]:
    out: dict[str, int] = {}
    for region in regions:
        out[str(region.kind)] = out.get(str(region.kind), 0) + region.size
    return out


def layout_deepspeed(source: ByteSource) -> HeaderLayout:
    """The save decoded: stage, ranks, every file with its bytes by region kind (from the
    PyTorch layout of each), the parameter shapes; regions are those of ``source`` itself.

    Raises:
        CorruptCheckpointError: as :func:`open_deepspeed`.
    """
    from ckptctl.formats.pytorch import layout_pytorch

    folder, tag = _tag_folder(source)
    opened: list[_File] = []
    try:
        layout = _read_layout(folder, opened)
        params = _params(layout)
        files = []
        for f in opened:
            with open_source(os.path.join(folder, f.name)) as part:
                regions = layout_pytorch(part).regions
                files.append({"file": f.name, "bytes": part.size,
                              "regions": _region_counts(iter(regions))})  # fmt: skip
    finally:
        for f in opened:
            f.ckpt.close()
    header = {
        "tag": tag or os.path.basename(folder),
        "zero_stage": layout.stage,
        "world_size": layout.world,
        "files": files,
        "param_shapes": {p.name: list(p.shape) for p in params},
    }
    if os.path.basename(source.path) == LATEST:
        own: tuple[Region, ...] = (
            (Region(RegionKind.METADATA, 0, source.size, note="the tag of the save"),)
            if source.size
            else ()
        )
    else:
        own = layout_pytorch(source).regions
    return HeaderLayout(
        "deepspeed-zero",
        source.size,
        header,
        own,
        {"files": len(files), "bytes": sum(int(f["bytes"]) for f in files)},  # type: ignore[call-overload]  # JSON
    )


SPEC = FormatSpec(
    name="deepspeed-zero",
    extensions=(),
    sniff=sniff,
    open=open_deepspeed,
    layout=layout_deepspeed,
    write=None,
)

#: The formats this module adds to the registry (``ckptctl.formats``).
SPECS = (SPEC,)

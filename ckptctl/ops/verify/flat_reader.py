"""``flat-reader``: a reader that expects a top-level name → tensor map (candle's ``from_pth``,
``safetensors``' ``load``) would find tensors.

Nested checkpoints, whole pickled models, TorchScript archives, bare tensors and empty files
fail, saying where the tensors are and how to fix it; with ``state_key`` the gate applies below
that key. It is also the gate of the checks after it: they see the entries it selects.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ckptctl.errors import SelectionError
from ckptctl.fix import Command, Note, Option
from ckptctl.model import CheckpointKind, describe_groups
from ckptctl.ops._select import select_state_key, top_level_groups
from ckptctl.ops.verify._check import MESSAGE_LIMIT, Check, Phase, fail_from, plural
from ckptctl.report.verify import Finding, Status

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ckptctl.model import Checkpoint, JSONValue, TensorEntry

CHECK = Check(
    "flat-reader",
    60,
    Phase.SELECT,
    "A flat name -> tensor reader finds the tensors",
    "Readers such as candle's from_pth or safetensors' load expect a top-level name -> "
    "tensor map; nested checkpoints, whole pickled models and TorchScript archives fail.",
)

_FLAT_READERS = "a flat name → tensor reader (candle's from_pth, safetensors' load)"
#: Checkpoints no flat reader opens (each read by its producer's loader), and what they are.
_NO_FLAT_READER = {
    "dcp": "torch.distributed.checkpoint directory",
    "deepspeed-zero": "DeepSpeed ZeRO save",
}


def _short_class(ckpt: Checkpoint) -> str:
    module_class = ckpt.structure.module_class if ckpt.structure is not None else None
    if not module_class:
        return "model"
    return module_class.rsplit(".", 1)[-1]


def _is_optimizer_key(key: str) -> bool:
    lower = key.lower()
    return "optim" in lower or "scheduler" in lower


def _best_key(groups: Mapping[str, int]) -> str:
    """The key most likely to hold the weights: the largest group that is not optimizer state."""
    weights = {k: n for k, n in groups.items() if not _is_optimizer_key(k)} or dict(groups)
    return max(weights, key=lambda k: weights[k])  # max keeps the first of equal counts


def flat_reader(
    ckpt: Checkpoint, state_key: str | None, path: str | None = None
) -> tuple[Finding, list[TensorEntry] | None]:
    """The flat-reader gate, and the entries the other checks look at (None: none below key).

    ``path`` is the checkpoint as the user named it (a DCP directory rather than its
    ``.metadata``; default: the checkpoint's path): the commands suggested name it so.
    """
    path = ckpt.path if path is None else path
    entries = ckpt.entries()
    kind = ckpt.kind
    whole = _whole_object(ckpt, entries, path)
    if whole is not None:
        return whole, entries
    if state_key is not None:
        return _below_state_key(ckpt, entries, state_key)
    if not entries:
        scalars = f" (only {plural(len(ckpt.scalars), 'scalar')})" if ckpt.scalars else ""
        return Finding(
            "flat-reader",
            Status.FAIL,
            f"the file holds no tensors{scalars}",
            "a weights file needs at least one tensor; was the wrong file saved?",
        ), entries
    if kind is CheckpointKind.NESTED and ckpt.format in _NO_FLAT_READER:
        return _nested_directory(ckpt, path), entries
    if kind is CheckpointKind.NESTED:
        return _nested(ckpt, entries, path), entries
    how = (
        "a flat name → tensor map" if kind is CheckpointKind.STATE_DICT else "flat by construction"
    )
    return Finding(
        "flat-reader", Status.OK, f"{plural(len(entries), 'tensor')} at the top level ({how})"
    ), entries


def _whole_object(ckpt: Checkpoint, entries: list[TensorEntry], path: str) -> Finding | None:
    """The failure of a file that is one object rather than a map: a pickled model, a
    TorchScript archive, a bare tensor (None: it is a map)."""
    kind = ckpt.kind
    cls = _short_class(ckpt)
    convert = Command("convert", (path, "model.safetensors"))
    if not entries and kind in (CheckpointKind.MODULE, CheckpointKind.TORCHSCRIPT):
        what = "TorchScript archive" if kind is CheckpointKind.TORCHSCRIPT else "pickled object"
        return Finding(
            "flat-reader",
            Status.FAIL,
            f"a {what} of {cls} with no tensors: there are no weights to load",
            "was the wrong file saved? (re-saving its state_dict() would be empty too)",
        )
    if kind is CheckpointKind.MODULE:
        return Finding(
            "flat-reader",
            Status.FAIL,
            f"a pickled {cls} object, not a state_dict: re-save model.state_dict() "
            "(or save safetensors)",
            Note(
                f"loading it needs {cls}'s code; {_FLAT_READERS} finds no tensors. "
                "Without torch: {fix0}",
                (convert,),
            ),
        )
    if kind is CheckpointKind.TORCHSCRIPT:
        return Finding(
            "flat-reader",
            Status.FAIL,
            f"a TorchScript archive of {cls}, not a state_dict: re-save "
            "torch.jit.load(f).state_dict() (or save safetensors)",
            Note(f"{_FLAT_READERS} finds no tensors in it. Without torch: {{fix0}}", (convert,)),
        )
    if kind is CheckpointKind.TENSOR:
        return Finding(
            "flat-reader",
            Status.FAIL,
            "a single bare tensor, not a name → tensor map: a flat reader finds no tensor names",
            "save a dict instead, e.g. torch.save({'weight': t}, path)",
        )
    return None


def _below_state_key(
    ckpt: Checkpoint, entries: list[TensorEntry], state_key: str
) -> tuple[Finding, list[TensorEntry] | None]:
    """The gate below ``state_key``: tensors directly in it pass; only deeper ones fail."""
    try:
        selected = select_state_key(entries, state_key, ckpt)
    except SelectionError as exc:
        return fail_from("flat-reader", exc), None
    deeper = _deeper_than(ckpt, state_key)
    if deeper:
        best = max(deeper, key=lambda k: deeper[k])
        where = describe_groups(dict(list(deeper.items())[:MESSAGE_LIMIT]))
        return Finding(
            "flat-reader",
            Status.FAIL,
            f"no tensors directly under state key {state_key!r}: they are deeper, under "
            f"{where}; a flat reader given {state_key!r} finds none",
            Note("pass {fix0}", (Option("state_key", best),)),
            details={"state_key": state_key, "deeper": deeper},
        ), selected
    return Finding(
        "flat-reader",
        Status.OK,
        f"{plural(len(selected), 'tensor')} below state key {state_key!r}",
    ), selected


def _deeper_than(ckpt: Checkpoint, state_key: str) -> dict[str, int]:
    """Containers below ``state_key`` when no tensor sits directly in it (a flat reader given
    the key would see only dicts); empty when some do, or the format has no containers."""
    if ckpt.structure is None:
        return {}
    key = state_key.strip(".")
    containers = ckpt.structure.containers
    if containers.get(key):
        return {}
    return {c: n for c, n in containers.items() if c.startswith(key + ".")}


def _nested_directory(ckpt: Checkpoint, path: str) -> Finding:
    """A nested DCP directory (``{model, optim, ...}``): healthy, since no flat reader opens it
    (issue #44); the hint says how to write one part of it as a flat file."""
    groups = top_level_groups(ckpt)
    where = describe_groups(groups)
    key = _best_key(groups) if groups else None
    details: dict[str, JSONValue] = {"groups": groups, "state_key": key}
    convert = Command(
        "convert", (path, "model.safetensors"), (Option("state_key", key),) if key else ()
    )
    return Finding(
        "flat-reader",
        Status.OK,
        f"tensors under {where}: no flat name → tensor reader opens a "
        f"{_NO_FLAT_READER[ckpt.format]}, so a nested one is as its loader expects",
        Note("a flat copy of one part without torch: {fix0}", (convert,)),
        details=details,
    )


def _nested(ckpt: Checkpoint, entries: list[TensorEntry], path: str) -> Finding:
    groups = top_level_groups(ckpt)
    top = ckpt.structure.top_level_tensors if ckpt.structure is not None else 0
    if not groups:  # facts missing: fall back on the names
        groups = dict(Counter(e.name.split(".", 1)[0] for e in entries if "." in e.name))
    # torch.save([t0, t1]): tensors nested in a list or tuple, under no key at all
    where = describe_groups(groups) or "no key (in a list or tuple)"
    keys = ckpt.structure.top_level_keys if ckpt.structure is not None else ()
    if {"state", "param_groups"} <= set(keys):
        return Finding(
            "flat-reader",
            Status.FAIL,
            "an optimizer state_dict (state, param_groups), not model weights: "
            f"{_FLAT_READERS} finds no tensors at the top level",
            Note(
                "to gate optimizer files on safety and readability alone: {fix0}",
                (Command("verify", (path,), (Option("checks", "safe-pickle"),)),),
            ),
            details={"top_level_tensors": top, "groups": groups, "state_key": None},
        )
    key = _best_key(groups) if groups else None
    fix: str | Note = "re-save model.state_dict()"
    if key:
        fix = Note("pass {fix0}, or re-save model.state_dict()", (Option("state_key", key),))
    details: dict[str, JSONValue] = {"top_level_tensors": top, "groups": groups, "state_key": key}
    if top:
        nested = len(entries) - top
        return Finding(
            "flat-reader",
            Status.WARN,
            f"{plural(top, 'tensor')} at the top level, but {nested:,} more are nested under "
            f"{where}; a flat reader skips those",
            fix,
            details=details,
        )
    head = f"{_FLAT_READERS} finds no tensors at the top level: tensors are under {where}: "
    if not key:
        return Finding("flat-reader", Status.FAIL, head + str(fix), None, details=details)
    convert = Command("convert", (path, "model.safetensors"), (Option("state_key", key),))
    return Finding(
        "flat-reader",
        Status.FAIL,
        Note(head + "pass {fix0}, or re-save model.state_dict()", (Option("state_key", key),)),
        Note("a flat copy without torch: {fix0}", (convert,)),
        details=details,
    )

"""Migrating Burn records from before 0.22 (``convert``): refusals and optimizer path metadata.

A burn 0.22 optimizer record (``docs/formats/burn-store.md#optimizer-records``) maps each
decimal ParamId to the module path of its parameter in the burnpack ``metadata``; burn uses it to
give each parameter the optimizer of its parameter group. Old optimizer records do not know those
paths: the model record of the same checkpoint does (its parameters carry the same ids).
:func:`migration_plan` reads them from ``paths_from`` and says what could not be matched.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ckptctl.errors import SelectionError, UnsupportedError
from ckptctl.fix import Note, Option
from ckptctl.formats import open_checkpoint
from ckptctl.formats.burnrecord import refusal_of

if TYPE_CHECKING:
    from ckptctl.model import Checkpoint

_RANK_SUFFIX = ".__rank"


def optimizer_ids(ckpt: Checkpoint) -> list[int] | None:
    """The ParamIds of an optimizer record in burn 0.22's layout (``<id>.__rank`` scalars and
    ``<id>.<field>`` tensors), in first-seen order; None when ``ckpt`` is not one."""
    ids: dict[int, None] = {}
    for key in ckpt.scalars:
        head = key[: -len(_RANK_SUFFIX)]
        if key.endswith(_RANK_SUFFIX) and head.isdigit():
            ids[int(head)] = None
    for entry in ckpt.values():
        head, _, rest = entry.name.partition(".")
        if not (head.isdigit() and rest and entry.param_id == int(head)):
            return None
        ids[int(head)] = None
    return list(ids) if ids else None


def read_paths(path: str | os.PathLike[str]) -> dict[int, str]:
    """ParamId -> tensor name from a model file that carries ParamIds (Burn record or .bpk).

    Raises:
        SelectionError: the file carries no ParamIds.
    """
    with open_checkpoint(path) as model:
        paths: dict[int, str] = {}
        for entry in model.values():
            if entry.param_id is not None:
                paths.setdefault(entry.param_id, entry.name)
    if not paths:
        raise SelectionError(
            "carries no ParamIds: pass the model record saved with the optimizer record "
            "(model-N.mpk or its converted .bpk)",
            path=os.fspath(path),
        )
    return paths


def migration_plan(
    ckpt: Checkpoint, out_format: str, paths_from: str | os.PathLike[str] | None
) -> tuple[dict[str, str], list[str | Note]]:
    """Metadata to add to the output and warnings, for a conversion of ``ckpt``.

    Args:
        ckpt: the opened source.
        out_format: the output format's name (``burnpack`` ...).
        paths_from: a model file whose ParamIds name the optimizer record's parameters.

    Returns:
        ``(metadata, warnings)``: ``{decimal id: module path}`` for the optimizer states whose
        id the model has, and what the user should know.

    Raises:
        UnsupportedError: the source is a Burn record that cannot be written in burn 0.22's
            layout (e.g. a scheduler record that does not say which scheduler it is).
        SelectionError: ``paths_from`` is given but the source is no optimizer record, or the
            model file has no ParamIds.
    """
    refusal = refusal_of(ckpt)
    if refusal is not None:
        raise UnsupportedError(
            f"cannot migrate: {refusal}",
            path=ckpt.path,
            hint="burn 0.22 restarts a scheduler without a record from its config; resume "
            "without the scheduler file, or write its record with the new burn",
        )
    ids = optimizer_ids(ckpt)
    warnings: list[str | Note] = []
    if paths_from is None:
        has_paths = any(k.isdigit() for k in ckpt.metadata)
        if ids and out_format == "burnpack" and not has_paths:
            warnings.append(
                Note(
                    "the optimizer record is written without its ParamId -> parameter path "
                    "metadata, which burn 0.22 uses to choose each parameter group's optimizer; "
                    "to add it, pass the model record of the same checkpoint with {fix0}",
                    (Option("paths_from", "model-N.mpk"),),
                )
            )
        return {}, warnings
    if ids is None:
        raise SelectionError(
            "is not an optimizer record: parameter paths can only be added to one "
            "(<ParamId>.<field> tensors and <ParamId>.__rank scalars)",
            path=ckpt.path,
        )
    paths = read_paths(paths_from)
    metadata = {str(pid): paths[pid] for pid in ids if pid in paths}
    if len(metadata) < len(ids):
        warnings.append(
            f"parameter paths from {os.fspath(paths_from)}: only {len(metadata)} of {len(ids)} "
            f"optimizer states match a parameter there; {len(ids) - len(metadata)} are written "
            "without a path (are both files from the same checkpoint?)"
        )
    return metadata, warnings

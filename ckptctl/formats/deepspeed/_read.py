"""Opening a DeepSpeed save and its byte layout (``deepspeed/__init__.py`` finds the tag folder
and imports this when a save is opened)."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from ckptctl.formats.deepspeed._zero import (
    RankFile,
    merged_safety,
    model_view,
    read_layout,
    save_objects,
    state_keys,
    state_view,
    trainable_params,
)
from ckptctl.formats.pytorch._producers import DEEPSPEED
from ckptctl.model import Checkpoint, CheckpointKind, HeaderLayout, Region, RegionKind
from ckptctl.sources import open_source

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ckptctl.model import TensorEntry
    from ckptctl.sources import ByteSource


def open_save(source: ByteSource, folder: str, tag: str | None) -> Checkpoint:
    """What :func:`~ckptctl.formats.deepspeed.open_deepspeed` returns for the tag folder
    ``folder`` (``tag``: as read from ``latest``, None when ``source`` is a rank file)."""
    opened: list[RankFile] = []
    try:
        layout = read_layout(folder, opened)
        params = trainable_params(layout)
        entries = model_view(layout, params)
        safety, torch_notes = merged_safety(opened)
        safety = safety.written_by(DEEPSPEED)  # its files, read by its loader (issue #44)
    except BaseException:
        for f in opened:
            f.ckpt.close()
        source.close()
        raise
    views: dict[str, Callable[[], list[TensorEntry]]] = {
        key: functools.partial(state_view, layout, params, key) for key in state_keys(layout)
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
        objects=save_objects(layout, tag),
        sources=sources,
        safety=safety,
        views=views,
    )


def _region_counts(regions: Iterator[Region]) -> dict[str, int]:
    out: dict[str, int] = {}
    for region in regions:
        out[str(region.kind)] = out.get(str(region.kind), 0) + region.size
    return out


def layout_save(source: ByteSource, folder: str, tag: str | None) -> HeaderLayout:
    """What :func:`~ckptctl.formats.deepspeed.layout_deepspeed` returns for the tag folder
    ``folder`` (``tag`` as for :func:`open_save`)."""
    from ckptctl.formats.pytorch import layout_pytorch

    opened: list[RankFile] = []
    try:
        layout = read_layout(folder, opened)
        params = trainable_params(layout)
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
    if tag is not None:  # source is the `latest` file
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
        {
            "files": len(files),
            "bytes": sum(int(f["bytes"]) for f in files),  # type: ignore[call-overload]  # JSON
            "regions_of": os.path.basename(source.path),  # the file the regions tile
        },
    )

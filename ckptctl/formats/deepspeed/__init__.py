"""DeepSpeed ZeRO checkpoints (stages 1, 2 and 3), read as one checkpoint without torch.

Format notes: ``docs/formats/deepspeed.md``.

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

No tensor is assembled in memory: each is a list of byte ranges in the rank files
(``model.PiecesData``), copied straight into the output. ``--state-key exp_avg`` (``exp_avg_sq``,
``step``) selects the optimizer state of every trainable parameter, by parameter name, laid out
like the weights.

Every file is judged by the allowlist (``safety``): deepspeed's globals make each one
needs-trust, and torch 2.6+ refuses them with ``weights_only=True`` (its default).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, NoReturn

from ckptctl.errors import CkptError, CorruptCheckpointError, InputError
from ckptctl.formats._base import FormatSpec
from ckptctl.formats.deepspeed._names import MODEL_FILE, OPTIM_FILE

if TYPE_CHECKING:
    from ckptctl.model import Checkpoint, HeaderLayout
    from ckptctl.sources import ByteSource

__all__ = ["SPEC", "SPECS", "find_checkpoint", "is_deepspeed_dir", "open_deepspeed", "stand_in"]

#: Largest ``latest`` file read (it holds one tag).
MAX_TAG_BYTES = 4096
#: The file whose bytes name the tag folder (``engine.save_checkpoint`` writes it).
LATEST = "latest"

_TAG = re.compile(rb"\s*([A-Za-z0-9_.\-]+)\s*")
_STEP_DIR = re.compile(r"global_step\d+")


# --- finding the files ---------------------------------------------------------------------


def _model_files(folder: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(folder) if MODEL_FILE.fullmatch(n))
    except OSError:
        return []


def _has_optim_files(folder: str) -> bool:
    try:
        return any(OPTIM_FILE.fullmatch(n) for n in os.listdir(folder))
    except OSError:
        return False


def _rank0_model_file(folder: str) -> str | None:
    names = _model_files(folder)
    for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt"):
        if name in names:
            return os.path.join(folder, name)
    return os.path.join(folder, names[0]) if names else None


def _plain_tag(raw: bytes) -> str | None:
    """The tag ``latest`` holds when it is a plain folder name (never ``.`` or ``..``)."""
    match = _TAG.fullmatch(raw)
    tag = match.group(1).decode() if match else None
    return None if tag in (".", "..") else tag


def _read_tag(path: str) -> tuple[bytes, str | None] | None:
    """What ``latest`` holds (its bytes and its plain tag, if any), or None when unreadable."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TAG_BYTES + 1)
    except OSError:
        return None
    return raw, _plain_tag(raw) if len(raw) <= MAX_TAG_BYTES else None


def _names_a_save(folder: str, tag: str) -> bool:
    """A ``latest`` tag is DeepSpeed's when its folder holds model states, or when it is
    spelled as the engine spells tags (``global_stepN``: opening it says the folder is gone)."""
    return _STEP_DIR.fullmatch(tag) is not None or bool(_model_files(os.path.join(folder, tag)))


def find_checkpoint(folder: str) -> str | None:
    """What stands for a DeepSpeed checkpoint folder, or None if it is not one.

    ``CKPT`` (with ``latest``, or one ``global_step*`` folder) and ``CKPT/global_stepN`` are
    both DeepSpeed checkpoints: the first stands for its ``latest`` file (what :func:`sniff`
    recognises), the tag folder for itself (:func:`stand_in` gives the file to read it from).
    A rank file named alone is not the save: it opens as the one ``.pt`` it is, so ``verify``
    judges just that file, as ``torch.load`` would load it.

    Raises:
        InputError: a folder of several ``global_step*`` saves and no ``latest`` file.
    """
    if _model_files(folder) and _has_optim_files(folder):
        return folder
    latest = os.path.join(folder, LATEST)
    read = _read_tag(latest) if os.path.isfile(latest) else None
    if read is not None and read[1] is not None and _names_a_save(folder, read[1]):
        return latest
    try:
        steps = sorted(n for n in os.listdir(folder) if _STEP_DIR.fullmatch(n))
    except OSError:
        return None
    steps = [s for s in steps if _model_files(os.path.join(folder, s))]
    if read is not None and (steps or read[0].strip() in (b".", b"..")):
        _broken_latest(latest, read[0])
    if len(steps) == 1:
        return os.path.join(folder, steps[0])
    if steps:
        shown = ", ".join(steps[:5]) + (f" and {len(steps) - 5} more" if len(steps) > 5 else "")
        raise InputError(
            f"is a DeepSpeed folder with {len(steps)} saves ({shown}) and no 'latest' file",
            path=folder,
            hint=f"name the save, e.g. {os.path.join(folder, steps[-1])}",
        )
    return None


def _broken_latest(latest: str, raw: bytes) -> NoReturn:
    """A ``latest`` beside saves that does not name one of them is an error, never replaced
    by a guess (a tag of ``..`` would read the folder above the checkpoint)."""
    tag = _TAG.fullmatch(raw) if len(raw) <= MAX_TAG_BYTES else None
    shown = repr(tag.group(1).decode()) if tag else "no tag"
    raise CorruptCheckpointError(
        f"'latest' holds {shown}, not the name of a save in its folder",
        path=latest,
        hint="write the tag of a save (e.g. global_step2) into 'latest', or name the save's folder",
    )


def stand_in(folder: str) -> str | None:
    """The file a DeepSpeed tag folder is read through (its rank-0 model states), or None when
    ``folder`` is not one."""
    if not (_model_files(folder) and _has_optim_files(folder)):
        return None
    return _rank0_model_file(folder)


def is_deepspeed_dir(folder: str) -> bool:
    """Whether ``folder`` is a DeepSpeed checkpoint (its root or a tag folder). Never raises."""
    try:
        return find_checkpoint(folder) is not None
    except CkptError:
        return True  # several saves: opening it says which to choose


def _tag_folder(source: ByteSource) -> tuple[str, str | None]:
    """The tag folder ``source`` stands for (relative as the path given), and the tag read from
    ``latest`` when it is that file."""
    path = source.path
    if os.path.basename(path) != LATEST:
        return os.path.dirname(path) or os.curdir, None
    tag = _plain_tag(source.read(0, min(source.size, MAX_TAG_BYTES)))
    if tag is None:
        raise CorruptCheckpointError(
            "the 'latest' file does not hold a checkpoint tag (a plain folder name)"
        )
    folder = os.path.join(os.path.dirname(path), tag)
    if not os.path.isdir(folder):
        raise CorruptCheckpointError(
            f"'latest' names the save {tag!r}, but there is no folder {tag!r} beside it",
            hint="copy the whole checkpoint folder, or name a global_step* folder that exists",
        )
    return folder, tag


def sniff(head: bytes, source: ByteSource) -> bool:
    """A ``latest`` file naming a DeepSpeed save beside it. Never raises. (A tag folder has no
    file of its own: ``formats`` opens it through :func:`stand_in` without sniffing.)"""
    try:
        path = os.path.abspath(source.path)
        if source.is_remote or os.path.basename(path) != LATEST or source.size > MAX_TAG_BYTES:
            return False
        tag = _plain_tag(head)
        return tag is not None and _names_a_save(os.path.dirname(path), tag)
    except Exception:  # sniffing must never raise
        return False


# The reader (``_read.py``, ``_zero.py``) is imported when a save is opened, not when the formats
# are registered (every command registers them all).


def open_deepspeed(source: ByteSource) -> Checkpoint:
    """Open a DeepSpeed ZeRO checkpoint as one checkpoint of consolidated fp32 weights.

    ``source`` is the ``latest`` file, or the :func:`stand_in` of a tag folder. Entries are
    what deepspeed's ``get_fp32_state_dict_from_zero_checkpoint`` returns, plus frozen
    parameters at stage 1; ``views`` holds each optimizer state (``exp_avg``, ``exp_avg_sq``,
    ``step``) by parameter name.

    Raises:
        CorruptCheckpointError: a missing, truncated or inconsistent rank file (named).
        UnsupportedError: tensor parallelism, or a ZeRO stage other than 1-3.
    """
    from ckptctl.formats.deepspeed._read import open_save

    folder, tag = _tag_folder(source)
    return open_save(source, folder, tag)


def layout_deepspeed(source: ByteSource) -> HeaderLayout:
    """The save decoded: stage, ranks, every file with its bytes by region kind (from the
    PyTorch layout of each), the parameter shapes; regions are those of ``source`` itself.

    Raises:
        CorruptCheckpointError: as :func:`open_deepspeed`.
    """
    from ckptctl.formats.deepspeed._read import layout_save

    folder, tag = _tag_folder(source)
    return layout_save(source, folder, tag)


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

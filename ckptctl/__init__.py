"""ckptctl: inspect, verify and convert deep-learning checkpoints without torch.

The public API mirrors the command line::

    from ckptctl import open_checkpoint, save_checkpoint

    with open_checkpoint("model.safetensors") as ckpt:
        for entry in ckpt.values():
            print(entry.name, entry.dtype.value, entry.shape)
"""

from __future__ import annotations

from ckptctl._version import __version__
from ckptctl.dtypes import DType
from ckptctl.errors import (
    CkptError,
    CkptWarning,
    CorruptCheckpointError,
    ExitCode,
    InputError,
    OutputError,
    SelectionError,
    UnknownFormatError,
    UnsafePickleError,
    UnsupportedError,
)
from ckptctl.formats import open_checkpoint, read_layout, save_checkpoint
from ckptctl.model import Checkpoint, TensorEntry

__all__ = [
    "Checkpoint",
    "CkptError",
    "CkptWarning",
    "CorruptCheckpointError",
    "DType",
    "ExitCode",
    "InputError",
    "OutputError",
    "SelectionError",
    "TensorEntry",
    "UnknownFormatError",
    "UnsafePickleError",
    "UnsupportedError",
    "__version__",
    "open_checkpoint",
    "read_layout",
    "save_checkpoint",
]

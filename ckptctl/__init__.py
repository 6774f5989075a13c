"""ckptctl: inspect, verify and convert deep-learning checkpoints without torch.

The public API mirrors the command line::

    from ckptctl import open_checkpoint, save_checkpoint

    with open_checkpoint("model.safetensors") as ckpt:
        for entry in ckpt.values():
            print(entry.name, entry.dtype.value, entry.shape)

Names are imported on first use (PEP 562), so ``ckptctl --help`` does not pay for numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl._lazy import lazy_attributes
from ckptctl._version import __version__
from ckptctl.errors import (
    CkptError,
    CkptWarning,
    CorruptCheckpointError,
    ExitCode,
    InputError,
    LfsPointerError,
    OutputError,
    SelectionError,
    UnknownFormatError,
    UnsafePickleError,
    UnsupportedError,
)

if TYPE_CHECKING:
    from ckptctl.dtypes import DType
    from ckptctl.formats import open_checkpoint, read_layout, save_checkpoint
    from ckptctl.model import Checkpoint, TensorEntry
    from ckptctl.ops.convert import ConvertOptions, convert
    from ckptctl.ops.diff import diff_checkpoints
    from ckptctl.ops.hash import hash_tensors
    from ckptctl.ops.inspect import describe_header, list_tensors
    from ckptctl.ops.verify import verify
    from ckptctl.report.diff import DiffOptions

_LAZY = {
    "DType": "ckptctl.dtypes",
    "open_checkpoint": "ckptctl.formats",
    "read_layout": "ckptctl.formats",
    "save_checkpoint": "ckptctl.formats",
    "Checkpoint": "ckptctl.model",
    "TensorEntry": "ckptctl.model",
    "ConvertOptions": "ckptctl.ops.convert",
    "convert": "ckptctl.ops.convert",
    "DiffOptions": "ckptctl.report.diff",
    "diff_checkpoints": "ckptctl.ops.diff",
    "describe_header": "ckptctl.ops.inspect",
    "list_tensors": "ckptctl.ops.inspect",
    "hash_tensors": "ckptctl.ops.hash",
    "verify": "ckptctl.ops.verify",
}


__getattr__ = lazy_attributes(__name__, _LAZY, globals())


__all__ = [
    "Checkpoint",
    "CkptError",
    "CkptWarning",
    "ConvertOptions",
    "CorruptCheckpointError",
    "DType",
    "DiffOptions",
    "ExitCode",
    "InputError",
    "LfsPointerError",
    "OutputError",
    "SelectionError",
    "TensorEntry",
    "UnknownFormatError",
    "UnsafePickleError",
    "UnsupportedError",
    "__version__",
    "convert",
    "describe_header",
    "diff_checkpoints",
    "hash_tensors",
    "list_tensors",
    "open_checkpoint",
    "read_layout",
    "save_checkpoint",
    "verify",
]

"""``onnx-checksum``: ONNX models only, each external data file a tensor declares a
``checksum`` for, hashed (streamed) and compared (``ops/_external_checksum.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.errors import CkptError
from ckptctl.fix import hint_of
from ckptctl.ops.verify._check import Check, Phase
from ckptctl.report.verify import Finding, Status

if TYPE_CHECKING:
    from ckptctl.ops.verify._check import Subject


def onnx_checksum(subject: Subject) -> Finding | None:
    """The declared checksums checked (None: not ONNX, or no tensor declares one)."""
    from ckptctl.ops._external_checksum import check_external_checksums

    ckpt = subject.checkpoint
    if ckpt.format != "onnx":
        return None
    try:
        return check_external_checksums(list(ckpt.values()))
    except CkptError as exc:
        return Finding("onnx-checksum", Status.FAIL, exc.message, hint_of(exc))


CHECK = Check(
    "onnx-checksum",
    85,
    Phase.CHECKPOINT,
    "ONNX external data files match the checksum the model declares",
    "onnx.proto's external_data key checksum is the SHA-1 digest of the data file; onnx and "
    "ONNX Runtime never check it, so a data file swapped under the model goes unseen.",
    run=onnx_checksum,
)

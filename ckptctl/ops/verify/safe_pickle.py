"""``safe-pickle``: pickle-based files only, the verdict of :mod:`ckptctl.safety`.

Every global is named and classified. ``unsafe`` always fails (and the file is never
unpickled), ``needs-trust`` fails unless ``trust`` is set or every global at fault is in
``allow_globals``; streams ``torch.load`` would not read only warn. The runner makes the
finding (:func:`ckptctl.ops._pickle_check.safe_pickle_finding`) from the verdict the reader
carries, also for a file that is no checkpoint or cannot be read to the end.
"""

from __future__ import annotations

from ckptctl.ops.verify._check import Check, Phase

CHECK = Check(
    "safe-pickle",
    30,
    Phase.OPEN,
    "Loading the file's pickles runs no code",
    "Every pickle stream is judged from its opcodes: safe (torch.load(weights_only=True) "
    "loads it, or a DCP or DeepSpeed checkpoint names only the inert classes its "
    "producer's loader reads), needs-trust (globals outside those allowlists) or unsafe "
    "(globals or constructs that run code when unpickled).",
    security_severity="9.8",
)

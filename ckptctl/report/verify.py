"""What ``verify`` found: per file, named findings (types only).

:func:`ckptctl.ops.verify.verify` computes it; ``report.render_verify`` prints it and
``report.json`` gives its JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ckptctl.fix import Note
    from ckptctl.model import CheckpointKind, JSONValue
    from ckptctl.report.manifest import HashCheck
    from ckptctl.report.optimizer import OptimizerCheck
    from ckptctl.report.summary import LoadingSummary
    from ckptctl.safety import PickleSafety

#: Every check id, in the order findings appear.
CHECKS = (
    "readable",
    "lfs-pointer",
    "safe-pickle",
    "chat-template",
    "sharded-index",
    "flat-reader",
    "quant-layout",
    "gguf-layout",
    "onnx-checksum",
    "min-tensors",
    "expect",
    "no-nan",
    "optimizer",
    "hashes",
)

#: Checks reported whatever ``checks``/``skip`` say: what a file that cannot be read fails.
ALWAYS_REPORTED = ("readable", "lfs-pointer")


class FileVerdict(Enum):
    """What a file is, for the summary's counts: the pickle verdict, or unreadable.

    ``unsafe`` wins over ``unreadable`` (a file that is no checkpoint but holds an unsafe pickle
    is unsafe), which wins over ``needs-trust``; files without pickles that read are ``safe``.
    """

    SAFE = "safe"
    NEEDS_TRUST = "needs-trust"
    UNSAFE = "unsafe"
    UNREADABLE = "unreadable"


class Status(Enum):
    """A finding's outcome; only ``FAIL`` fails a file."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Finding:
    """The outcome of one check on one file.

    Attributes:
        check: the check id (one of :data:`CHECKS`).
        status: ok, warn or fail.
        message: what was found (strings from files are raw; renderers escape them); a
            :class:`~ckptctl.fix.Note` when it names an option.
        hint: what to do next, when there is something to do.
        details: machine-readable facts for ``--json`` (NaN counts, index problems ...).
        summary: the Tensor Loading Summary (``expect``).
        optimizer: the optimizer state check (``optimizer``).
        safety: the pickle safety verdict (``safe-pickle``).
        hashes: the file against a manifest (``hashes``).
    """

    check: str
    status: Status
    message: str | Note
    hint: str | Note | None = None
    details: Mapping[str, JSONValue] = field(default_factory=dict)
    summary: LoadingSummary | None = None
    optimizer: OptimizerCheck | None = None
    safety: PickleSafety | None = None
    hashes: HashCheck | None = None


@dataclass(frozen=True)
class FileResult:
    """Every finding about one file.

    Attributes:
        path: the file as given.
        format: the detected format, None when detection failed.
        kind: what the file is as a whole (PyTorch), when known.
        tensors: tensors found (below ``state_key`` when given), None when unreadable.
        findings: in check order.
        label: what the file is when it is no checkpoint ("a JSON file, not a checkpoint").
        verdict: safe, needs-trust, unsafe or unreadable, from every check that ran (also
            those ``--check``/``--skip`` leave out of ``findings``).
    """

    path: str
    format: str | None
    kind: CheckpointKind | None
    tensors: int | None
    findings: tuple[Finding, ...]
    label: str | None = None
    verdict: FileVerdict = FileVerdict.SAFE

    @property
    def ok(self) -> bool:
        """True when no finding failed."""
        return all(f.status is not Status.FAIL for f in self.findings)

    @property
    def failures(self) -> tuple[Finding, ...]:
        """The failed findings."""
        return tuple(f for f in self.findings if f.status is Status.FAIL)


@dataclass(frozen=True)
class VerifyReport:
    """The result of :func:`verify`: one :class:`FileResult` per file, in the order given
    (a directory's files in sorted order, where it stands).

    Attributes:
        files: every file checked.
        skipped_paths: the files found in directories that were not checked: no reader
            accepts them, they hold no pickle and their names do not say checkpoint (configs,
            tokenizers, READMEs), in walk order.
    """

    files: tuple[FileResult, ...]
    skipped_paths: tuple[str, ...] = ()

    @property
    def skipped(self) -> int:
        """How many files were skipped (``len(skipped_paths)``)."""
        return len(self.skipped_paths)

    @property
    def ok(self) -> bool:
        """True when every file passed."""
        return all(f.ok for f in self.files)

    @property
    def passed(self) -> int:
        """Files without a failed finding."""
        return sum(1 for f in self.files if f.ok)

    @property
    def failed(self) -> int:
        """Files with at least one failed finding."""
        return len(self.files) - self.passed

    @property
    def warned(self) -> int:
        """Passing files with at least one warning."""
        return sum(
            1 for f in self.files if f.ok and any(x.status is Status.WARN for x in f.findings)
        )

    def verdicts(self) -> dict[FileVerdict, int]:
        """Files by verdict, every verdict present (safe, needs-trust, unsafe, unreadable)."""
        counts = dict.fromkeys(FileVerdict, 0)
        for f in self.files:
            counts[f.verdict] += 1
        return counts

    def verdict_line(self) -> str:
        """``by verdict: 2 safe, 1 needs-trust, 0 unsafe, 0 unreadable`` (and the skipped)."""
        line = "by verdict: " + ", ".join(f"{n} {v.value}" for v, n in self.verdicts().items())
        if self.skipped:
            noun = "file" if self.skipped == 1 else "files"
            line += f"; {self.skipped} {noun} skipped (not checkpoints, no pickle in them)"
        return line

    def summary_line(self) -> str:
        """``3 files: 2 passed, 1 failed`` (plus warnings when there are any)."""
        n = len(self.files)
        line = f"{n} file{'s' if n != 1 else ''}: {self.passed} passed, {self.failed} failed"
        if self.warned:
            line += f" ({self.warned} with warnings)"
        return line

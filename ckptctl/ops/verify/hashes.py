"""``hashes``: with ``hashes`` (``--hashes MANIFEST``), every tensor's name, dtype, shape and
digest match a manifest written by ``ckptctl hash`` (:mod:`ckptctl.ops.manifest`), with no
tensor missing and none extra."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.errors import CkptError
from ckptctl.ops.manifest import check_hashes, read_manifest
from ckptctl.ops.verify._check import MESSAGE_LIMIT, Check, Phase, fail_from, more, plural
from ckptctl.report.verify import Finding, Status

if TYPE_CHECKING:
    import os

    from ckptctl.ops.verify._check import Subject
    from ckptctl.report.manifest import HashCheck, TensorHash


def load_manifest(path: str | os.PathLike[str]) -> tuple[TensorHash, ...] | CkptError:
    """The manifest, read once for every file (or why it cannot be)."""
    try:
        return read_manifest(path)
    except CkptError as exc:
        return exc


def hashes(subject: Subject) -> Finding:
    """The file's tensors against the manifest."""
    manifest, where = subject.opts.manifest, subject.opts.hashes
    if isinstance(manifest, CkptError):
        return fail_from("hashes", manifest, f"manifest {where!r}: ")
    if manifest is None or where is None:  # only run with hashes, whose manifest has been read
        raise AssertionError("no manifest")
    check = check_hashes(subject.tensors, manifest, where, subject.opts.progress)
    if check.ok:
        return Finding(
            "hashes",
            Status.OK,
            f"all {plural(check.checked, 'tensor')} match the manifest {where!r}",
            hashes=check,
        )
    return Finding(
        "hashes",
        Status.FAIL,
        f"does not match the manifest {where!r}: " + "; ".join(_differences(check)),
        "the file is not the checkpoint the manifest was written from (or it was damaged on "
        "the way); compare it with the original, or re-download it",
        hashes=check,
    )


def _differences(check: HashCheck) -> list[str]:
    """The tensors that differ, are missing and are extra, each kind listed to the limit."""
    parts = []
    if check.mismatched:
        listed = ", ".join(
            f"{m.name!r} ({m.field})" for m in check.mismatched[:MESSAGE_LIMIT]
        ) + more(len(check.mismatched))
        parts.append(f"{plural(len(check.mismatched), 'tensor')} differ: {listed}")
    for names, what in (
        (check.missing, "missing from the file"),
        (check.extra, "not in the manifest"),
    ):
        if names:
            listed = ", ".join(repr(n) for n in names[:MESSAGE_LIMIT]) + more(len(names))
            parts.append(f"{plural(len(names), 'tensor')} {what}: {listed}")
    return parts


CHECK = Check(
    "hashes",
    130,
    Phase.ENTRIES,
    "Every tensor matches the --hashes manifest",
    "Each tensor's digest of its canonical bytes, dtype and shape equal the manifest's line "
    "for it (ckptctl hash), with no tensor missing or extra.",
    run=hashes,
    option="hashes",
)

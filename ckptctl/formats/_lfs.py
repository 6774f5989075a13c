"""git-lfs pointer files: what a clone without ``git lfs pull`` leaves instead of the weights.

Layout (https://github.com/git-lfs/git-lfs/blob/main/docs/spec.md, "The Pointer"): UTF-8 text,
one ``{key} {value}\\n`` line per key, ``version`` first and the others sorted by key::

    version https://git-lfs.github.com/spec/v1
    oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393
    size 12345

``oid`` is the SHA-256 of the real file, ``size`` its length in bytes; a pointer written through
extensions adds ``ext-N-NAME sha256:...`` lines before ``oid``.

A file is a pointer exactly when ``git lfs pointer --check --file FILE`` (git-lfs 3.3.0) says
so, which is more lenient than the spec: git-lfs reads the first 1024 bytes, strips white space
around them, skips empty lines, drops a ``\\r`` before each ``\\n``, accepts the ``version`` URLs
of its two earlier names and a size with a leading ``+`` or zeros. ``fixtures/hostile/lfs/``
holds pointers and near-pointers with git-lfs's verdict on each (``make_lfs.py``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NamedTuple

from ckptctl.errors import LfsPointerError

if TYPE_CHECKING:
    from ckptctl.sources import ByteSource

#: Bytes git-lfs reads to decide whether a blob is a pointer (its ``blobSizeCutoff``).
MAX_POINTER_BYTES = 1024

#: ``version`` values git-lfs reads: the current URL and those of its alpha and pre-release.
VERSIONS = (
    b"https://git-lfs.github.com/spec/v1",
    b"https://hawser.github.com/spec/v1",
    b"http://git-media.io/v/2",
)
#: Keys in the order a pointer gives them; extension keys may come between them.
_KEYS = (b"version", b"oid", b"size")
_EXTENSION = re.compile(rb"ext-[0-9]-[0-9A-Za-z_]+")
_OID = re.compile(rb"sha256:[0-9a-f]{64}")
_SIZE = re.compile(rb"[+-]?[0-9]+")
#: Largest size git-lfs accepts (a signed 64-bit integer).
_MAX_SIZE = (1 << 63) - 1

#: What to do about a pointer.
HINT = "run `git lfs pull` (or download the file itself, not its pointer)"


class LfsPointer(NamedTuple):
    """A pointer's facts: the real file's oid (``sha256:<64 hex digits>``) and size in bytes."""

    oid: str
    size: int


def read_pointer(head: bytes) -> LfsPointer | None:
    """The pointer whose text ``head`` is, or None when git-lfs would not read it as one.

    Args:
        head: the file's first bytes (:data:`MAX_POINTER_BYTES` or more, or the whole file).
    """
    values: dict[bytes, bytes] = {}
    for line in head[:MAX_POINTER_BYTES].strip().split(b"\n"):
        line = line.removesuffix(b"\r")
        if not line:
            continue
        key, space, value = line.partition(b" ")
        if not space or len(values) == len(_KEYS):
            return None
        if key == _KEYS[len(values)]:
            values[key] = value
        elif not _EXTENSION.match(key) or not _OID.fullmatch(value):
            return None
    return _checked(values)


def _checked(values: dict[bytes, bytes]) -> LfsPointer | None:
    if len(values) < len(_KEYS) or values[b"version"] not in VERSIONS:
        return None
    oid, size = values[b"oid"], values[b"size"]
    if not _OID.fullmatch(oid) or not _SIZE.fullmatch(size) or not 0 <= int(size) <= _MAX_SIZE:
        return None
    return LfsPointer(oid.decode("ascii"), int(size))


def pointer_error(pointer: LfsPointer, what: str = "") -> LfsPointerError:
    """The error for ``pointer``: ``a git-lfs pointer (oid sha256:..., size N), not the
    weights``, after ``what`` when the error is about another file (``shard 'x' is ``)."""
    return LfsPointerError(
        f"{what}a git-lfs pointer (oid {pointer.oid}, size {pointer.size}), not the weights",
        oid=pointer.oid,
        size=pointer.size,
        hint=HINT,
    )


def refuse_pointer(source: ByteSource, what: str = "") -> None:
    """Raise :func:`pointer_error` when ``source`` is a git-lfs pointer: for the files a
    format reads without sniffing them (a DCP rank file, a DeepSpeed partition).

    Raises:
        LfsPointerError: it is one; ``what`` as for :func:`pointer_error`.
    """
    pointer = read_pointer(source.read(0, min(source.size, MAX_POINTER_BYTES)))
    if pointer is not None:
        raise pointer_error(pointer, what).with_path(source.path)

"""Format-independent tensor digests, shared by ``hash`` (``ops/hash.py``) and ``verify --hashes``.

A tensor's digest is the SHA-256 of its canonical bytes: the elements in C order, each in its
dtype's little-endian encoding (what a safetensors file stores; ``.pt`` strided views gathered,
big-endian storages swapped by the reader). A checkpoint saved by torch, converted to
safetensors and to burnpack has the same digests in all three files, so a converted file can be
checked without the original and a download against a published manifest.

The manifest is JSON lines, one object per tensor in file order::

    {"name": "fc.weight", "dtype": "F32", "shape": [2, 3], "digest": "sha256:9f86d0..."}
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING

from ckptctl.errors import InputError
from ckptctl.model import listed_dtype, listed_shape
from ckptctl.ops._stream import iter_bytes, tracked
from ckptctl.report.manifest import (
    DIGEST_ALGORITHM,
    HashCheck,
    HashMismatch,
    TensorHash,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ckptctl.model import Progress, TensorEntry

#: Largest manifest read (a line per tensor: 100,000 tensors take about 15 MB).
MAX_MANIFEST_BYTES = 256 << 20
_KEYS = ("name", "dtype", "shape", "digest")


def digest_entry(entry: TensorEntry) -> str:
    """``sha256:<hex>`` of ``entry``'s canonical bytes, streamed a chunk at a time."""
    digest = hashlib.new(DIGEST_ALGORITHM)
    for piece in iter_bytes(entry):
        digest.update(piece)
    return f"{DIGEST_ALGORITHM}:{digest.hexdigest()}"


def hash_entries(
    entries: Iterable[TensorEntry], jobs: int = 1, progress: Progress | None = None
) -> list[TensorHash]:
    """One :class:`TensorHash` per entry, in order; ``jobs`` > 1 hashes that many tensors at
    once on threads (``hashlib`` and ``preadv`` release the GIL). ``progress(nbytes, total)``
    is told of each tensor as its digest arrives."""
    entries = list(entries)
    if jobs > 1 and len(entries) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(jobs, len(entries))) as pool:
            digests = list(tracked(entries, pool.map(digest_entry, entries), progress))
    else:
        digests = list(tracked(entries, (digest_entry(e) for e in entries), progress))
    return [
        TensorHash(e.name, listed_dtype(e), listed_shape(e), d)
        for e, d in zip(entries, digests, strict=True)
    ]


def read_manifest(path: str | os.PathLike[str]) -> tuple[TensorHash, ...]:
    """Parse a manifest written by ``ckptctl hash``.

    Raises:
        InputError: the file cannot be read, is too large, or a line is not a manifest line
            (the message names the line).
    """
    where = os.fspath(path)
    try:
        size = os.path.getsize(where)
        if size > MAX_MANIFEST_BYTES:
            raise InputError(
                f"manifest of {size:,} bytes is larger than the limit of "
                f"{MAX_MANIFEST_BYTES:,} bytes",
                path=where,
            )
        with open(where, "rb") as fh:
            text = fh.read().decode("utf-8")
    except FileNotFoundError:
        raise InputError("no such manifest", path=where) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the manifest: {exc}", path=where) from None
    rows: list[TensorHash] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            rows.append(_parse_line(line, number, where))
    return tuple(rows)


def _parse_line(line: str, number: int, path: str) -> TensorHash:
    hint = "a manifest has one JSON object per line, as `ckptctl hash FILE` writes it"
    try:
        item = json.loads(line)
    except ValueError:
        raise InputError(f"line {number} is not JSON", path=path, hint=hint) from None
    if not isinstance(item, dict) or any(k not in item for k in _KEYS):
        raise InputError(
            f"line {number} is not a manifest line (it needs {', '.join(_KEYS)})",
            path=path,
            hint=hint,
        )
    name, dtype, shape, digest = (item[k] for k in _KEYS)
    if not (
        isinstance(name, str)
        and isinstance(dtype, str)
        and isinstance(digest, str)
        and isinstance(shape, list)
        and all(type(d) is int and d >= 0 for d in shape)
    ):
        raise InputError(
            f"line {number}: name, dtype and digest must be strings and shape a list of "
            "non-negative integers",
            path=path,
            hint=hint,
        )
    return TensorHash(name, dtype, tuple(shape), digest)


def check_hashes(
    entries: Sequence[TensorEntry],
    manifest: Sequence[TensorHash],
    manifest_path: str,
    progress: Progress | None = None,
) -> HashCheck:
    """Compare ``entries`` with a manifest: names, dtypes, shapes, then digests.

    A tensor whose dtype or shape already differs is not hashed. Returns every difference.
    ``progress(nbytes, total)`` is told of each tensor hashed.
    """
    expected = {row.name: row for row in manifest}
    present = {e.name for e in entries}
    mismatched: list[HashMismatch] = []
    to_hash: list[TensorEntry] = []
    for entry in entries:
        row = expected.get(entry.name)
        if row is None:
            continue
        if row.dtype != listed_dtype(entry):
            mismatched.append(HashMismatch(entry.name, "dtype", row.dtype, listed_dtype(entry)))
        elif row.shape != listed_shape(entry):
            mismatched.append(
                HashMismatch(
                    entry.name, "shape", str(list(row.shape)), str(list(listed_shape(entry)))
                )
            )
        else:
            to_hash.append(entry)
    for found in hash_entries(to_hash, progress=progress):
        want = expected[found.name].digest
        if found.digest != want:
            mismatched.append(HashMismatch(found.name, "digest", want, found.digest))
    order = {e.name: i for i, e in enumerate(entries)}
    mismatched.sort(key=lambda m: order[m.name])
    return HashCheck(
        manifest=manifest_path,
        checked=len(to_hash),
        mismatched=tuple(mismatched),
        missing=tuple(row.name for row in manifest if row.name not in present),
        extra=tuple(e.name for e in entries if e.name not in expected),
    )

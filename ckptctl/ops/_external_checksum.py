"""The ``onnx-checksum`` check: ONNX external data files against the checksum the model declares.

``onnx.proto`` (TensorProto.external_data) defines the optional key ``checksum``: "SHA1 digest
of file specified in under 'location' key", i.e. of the whole data file, not of the tensor's
range. onnx's helpers pass a given value through (``set_external_data(checksum=...)``) but never
compute or check one, and neither does ONNX Runtime, so a data file swapped or damaged under a
model that declares its digest goes unseen there. Each file a tensor declares a checksum for is
hashed once, streamed in chunks. A value of 64 hex digits is taken as SHA-256 (tools that write
a checksum of their own choosing use it); any other value cannot be checked and warns.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptctl.report.verify import Finding, Status
from ckptctl.sources import read_chunks

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ckptctl.model import JSONValue, TensorEntry
    from ckptctl.sources import ByteSource

CHECK = "onnx-checksum"
#: Hash algorithm by the number of hex digits of a declared checksum.
_ALGORITHMS = {40: "sha1", 64: "sha256"}
_SPELLED = {"sha1": "SHA-1", "sha256": "SHA-256"}
#: Data files named in the message when they all match.
_SHOWN = 5
_HEX = re.compile(r"[0-9a-fA-F]+")
_HINT = (
    "the external data file is not the one the model was saved with; download the model and "
    "its data files again, or re-export it"
)


@dataclass
class _DataFile:
    """One external data file: its source (when a tensor reads it as a byte range) and the
    tensors that declare each checksum for it."""

    location: str
    source: ByteSource | None = None
    claims: dict[str, list[str]] = field(default_factory=dict)


def _data_files(entries: Iterable[TensorEntry]) -> dict[str, _DataFile]:
    files: dict[str, _DataFile] = {}
    for entry in entries:
        location = entry.extra.get("location")
        if location is None:
            continue
        where = entry.data.file_range()
        data_file = files.setdefault(location, _DataFile(location))
        if where is not None:
            data_file.source = where[0]
        digest = entry.extra.get("checksum")
        if digest is not None:
            data_file.claims.setdefault(digest, []).append(entry.name)
    return {location: f for location, f in files.items() if f.claims}


def _digest(source: ByteSource, algorithm: str) -> str:
    hasher = hashlib.new(algorithm, usedforsecurity=False)
    for piece in read_chunks(source, 0, source.size):
        hasher.update(piece)
    return hasher.hexdigest()


def _names(names: list[str]) -> str:
    more = f" and {len(names) - 1} more" if len(names) > 1 else ""
    return f"tensor {names[0]!r}{more}"


def _check_file(data_file: _DataFile) -> tuple[list[str], list[str], list[JSONValue]]:
    """(mismatches, values not checked, details) for one data file."""
    bad: list[str] = []
    unchecked: list[str] = []
    details: list[JSONValue] = []
    found: dict[str, str] = {}
    for declared, names in data_file.claims.items():
        algorithm = _ALGORITHMS.get(len(declared)) if _HEX.fullmatch(declared) else None
        if algorithm is None or data_file.source is None:
            why = "not a SHA-1 digest" if algorithm is None else "its tensors are not read as bytes"
            unchecked.append(f"{_names(names)} of {data_file.location!r}: {declared!r} ({why})")
            continue
        if algorithm not in found:
            found[algorithm] = _digest(data_file.source, algorithm)
        ok = found[algorithm] == declared.lower()
        details.append(
            {"location": data_file.location, "algorithm": algorithm, "declared": declared,
             "found": found[algorithm], "ok": ok, "tensors": list(names)}
        )  # fmt: skip
        if not ok:
            bad.append(
                f"{data_file.location!r} has {_SPELLED[algorithm]} {found[algorithm]} but "
                f"{_names(names)} declare {declared}"
            )
    return bad, unchecked, details


def check_external_checksums(entries: Iterable[TensorEntry]) -> Finding | None:
    """Each external data file against the checksum its tensors declare (None: none declares
    one). Reads every such file once, whole.

    Raises:
        CkptError: a data file cannot be read.
    """
    files = _data_files(entries)
    if not files:
        return None
    bad: list[str] = []
    unchecked: list[str] = []
    details: list[JSONValue] = []
    for data_file in files.values():
        more_bad, more_unchecked, more_details = _check_file(data_file)
        bad += more_bad
        unchecked += more_unchecked
        details += more_details
    facts: dict[str, JSONValue] = {"files": details, "not_checked": list(unchecked)}
    if bad:
        return Finding(CHECK, Status.FAIL, "; ".join(bad), _HINT, details=facts)
    if unchecked:
        return Finding(CHECK, Status.WARN, "checksum not checked: " + "; ".join(unchecked),
                       details=facts)  # fmt: skip
    shown = ", ".join(repr(location) for location in list(files)[:_SHOWN])
    shown += f" and {len(files) - _SHOWN} more" if len(files) > _SHOWN else ""
    what = (
        "1 external data file matches"
        if len(files) == 1
        else f"{len(files)} external data files match"
    )
    return Finding(
        CHECK, Status.OK, f"{what} the checksum the model declares: {shown}", details=facts
    )

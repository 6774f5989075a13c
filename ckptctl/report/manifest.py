"""What ``ckptctl hash`` computes: one digest per tensor, independent of the file format."""

from __future__ import annotations

from dataclasses import dataclass

#: The digest every manifest line carries, as ``ALGORITHM:HEX``.
DIGEST_ALGORITHM = "sha256"


@dataclass(frozen=True)
class TensorHash:
    """One manifest line: a tensor's name, dtype, shape and the digest of its canonical bytes
    (little-endian, C order: the bytes a safetensors file stores), ``sha256:<hex>``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    digest: str


@dataclass(frozen=True)
class HashReport:
    """Every tensor of a checkpoint with its digest, in file order.

    ``path`` and ``format`` say what was read; the manifest itself (:attr:`tensors`) names
    neither, so the same checkpoint as ``.pt``, ``.safetensors`` or ``.bpk`` gives the same lines.
    """

    path: str
    format: str
    tensors: tuple[TensorHash, ...]
    algorithm: str = DIGEST_ALGORITHM


@dataclass(frozen=True)
class HashMismatch:
    """A tensor whose manifest line and file disagree: ``field`` is ``digest``, ``dtype`` or
    ``shape``; ``expected`` comes from the manifest, ``found`` from the file."""

    name: str
    field: str
    expected: str
    found: str


@dataclass(frozen=True)
class HashCheck:
    """A file against a manifest: what differs, what is missing, what is extra."""

    manifest: str
    checked: int
    mismatched: tuple[HashMismatch, ...] = ()
    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Every tensor of the manifest is in the file, with its dtype, shape and digest."""
        return not (self.mismatched or self.missing or self.extra)

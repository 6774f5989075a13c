"""Writing GGUF v3, little-endian, laid out as gguf-py's ``GGUFWriter`` and gguf.cpp lay it out.

The plan comes first, from metadata alone: the fixed header, the key/values (in the order
given), the tensor infos (``ne`` the reversed shape, the GGML type, the offset: the sum of the
padded sizes of the tensors before it, which gguf.cpp requires), zeros up to the aligned data
section. Then each tensor's bytes are streamed (a range of the source file is copied, never
decoded) and padded with zeros to the alignment, the last one too, as ``GGUFWriter`` does: given
the same key/values and tensors in the same order, the file is ``GGUFWriter``'s byte for byte.
A file without tensors ends after its header, as ``GGUFWriter``'s vocab-only files do.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from ckptctl.errors import CorruptCheckpointError, UnsupportedError
from ckptctl.fix import Note, Option
from ckptctl.formats._base import preallocate, write_entry_bytes
from ckptctl.formats.gguf._ggml import GGML_TYPE_OF, GGML_TYPES_BY_NAME, GGMLType, ValueType
from ckptctl.formats.gguf._kv import encode_key_value, utf8
from ckptctl.formats.gguf._parse import (
    DEFAULT_ALIGNMENT,
    MAGIC,
    MAX_ALIGNMENT,
    MAX_DIMS,
    MAX_NAME_BYTES,
    align_up,
)
from ckptctl.formats.gguf._read import BYTE_ORDER
from ckptctl.model import STORED_TYPE

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ckptctl.model import JSONValue, TensorEntry

#: The version written (gguf-py's ``GGUF_VERSION``).
VERSION = 3


@dataclass(frozen=True)
class _Planned:
    entry: TensorEntry
    ne: tuple[int, ...]
    ggml: GGMLType
    name: bytes


def _type_of(entry: TensorEntry) -> tuple[GGMLType, tuple[int, ...]]:
    """The GGML type and the logical shape of an entry."""
    stored = entry.extra.get(STORED_TYPE)
    if stored is None:
        ggml = GGML_TYPE_OF.get(entry.dtype)
        if ggml is None:
            exclude = Option("exclude", takes_value=True)
            raise UnsupportedError(
                f"tensor {entry.name!r} is {entry.dtype.value}, which GGUF has no type for "
                "(it holds F32, F16, BF16, F64, I8, I16, I32 and I64)",
                hint=Note("cast it with {fix0}, or leave it out with {fix1}",
                          (Option("adapters", "cast:f16"), exclude))
                if entry.dtype.is_float else Note("leave it out with {fix0}", (exclude,)),
            )  # fmt: skip
        return ggml, entry.shape
    known = GGML_TYPES_BY_NAME.get(stored)
    if known is None or "quantized" not in entry.extra:
        raise UnsupportedError(
            f"tensor {entry.name!r} has GGML {stored}, unknown to ckptctl: its blocks cannot be "
            "copied",
            hint=Note("leave it out with {fix0}", (Option("exclude", takes_value=True),)),
        )
    if entry.extra.get(BYTE_ORDER) == "big":
        raise UnsupportedError(
            f"tensor {entry.name!r} holds {stored} blocks of a big-endian GGUF file, whose "
            "fields ckptctl does not swap",
            hint=Note("leave it out with {fix0}", (Option("exclude", takes_value=True),)),
        )
    return known, tuple(int(d) for d in json.loads(entry.extra["logical_shape"]))


def _plan(entry: TensorEntry) -> _Planned:
    ggml, shape = _type_of(entry)
    name = utf8(entry.name, "tensor name")
    if len(name) >= MAX_NAME_BYTES:
        raise UnsupportedError(
            f"tensor name {entry.name!r} has {len(name)} bytes; GGUF allows at most "
            f"{MAX_NAME_BYTES - 1} (GGML_MAX_NAME)",
            hint=Note("rename it with {fix0}", (Option("remap", takes_value=True),)),
        )
    if len(shape) > MAX_DIMS:
        raise UnsupportedError(
            f"tensor {entry.name!r} has {len(shape)} dimensions {list(shape)}; GGUF allows at "
            f"most {MAX_DIMS} (GGML_MAX_DIMS)"
        )
    ne = tuple(reversed(shape))
    numel = math.prod(ne)
    if (ne and ne[0] % ggml.block_size) or ggml.nbytes(numel) != entry.nbytes:
        raise CorruptCheckpointError(
            f"tensor {entry.name!r} has {entry.nbytes} bytes, not what {ggml.name} of shape "
            f"{list(shape)} takes"
        )
    return _Planned(entry, ne, ggml, name)


def valid_alignment(value: object) -> bool:
    """A power of two up to :data:`MAX_ALIGNMENT` (gguf.cpp takes any power of two; the
    reader refuses larger ones)."""
    return isinstance(value, int) and 0 < value <= MAX_ALIGNMENT and not value & (value - 1)


def _alignment(values: Mapping[str, object]) -> int:
    """``general.alignment``, checked as gguf.cpp and our reader check it."""
    found = values.get("general.alignment")
    if found is None:
        return DEFAULT_ALIGNMENT
    kind = getattr(found, "type", ValueType.STRING)
    value = getattr(found, "value", found)
    if kind is not ValueType.UINT32 or not valid_alignment(value):
        raise UnsupportedError(
            f"general.alignment must be a UINT32 power of two up to {MAX_ALIGNMENT}, not "
            f"{value!r} ({kind.name})",
            hint=Note("set it with {fix0}", (Option("alignment", "32"),)),
        )
    assert isinstance(value, int)
    return value


def plan_header(
    entries: Sequence[TensorEntry], values: Mapping[str, object]
) -> tuple[bytes, list[_Planned], int]:
    """The header's bytes, the tensors' plan and the alignment.

    Raises:
        UnsupportedError: a dtype or stored type GGUF cannot hold, a name of 64 bytes or more,
            more than 4 dimensions, a ``general.alignment`` that is no UINT32 power of two.
    """
    alignment = _alignment(values)
    planned = [_plan(e) for e in entries]
    parts = [struct.pack("<4sIQQ", MAGIC, VERSION, len(planned), len(values))]
    parts.extend(encode_key_value(key, value) for key, value in values.items())
    offset = 0
    for p in planned:
        parts.append(struct.pack("<Q", len(p.name)) + p.name)
        parts.append(struct.pack(f"<I{len(p.ne)}QIQ", len(p.ne), *p.ne, p.ggml.id, offset))
        offset += align_up(p.entry.nbytes, alignment)
    return b"".join(parts), planned, alignment


def write(
    out: IO[bytes],
    entries: Sequence[TensorEntry],
    metadata: Mapping[str, str],
    scalars: Mapping[str, JSONValue],
) -> None:
    """Write a GGUF v3 file to ``out``: the header planned from metadata, then each tensor.

    Args:
        out: a binary stream positioned at 0.
        entries: tensors in write order: plain dtypes GGUF has a type for, and GGUF's
            block-quantized entries (``extra["stored_type"]``), whose blocks are copied.
        metadata: more key/values, written as STRINGs after ``scalars`` (keys ``scalars``
            has are skipped).
        scalars: the key/values, in order: ``StoredValue`` (kept as the source stores it),
            ``TypedValue`` or ``str``.

    Raises:
        UnsupportedError: see :func:`plan_header`.
    """
    values: dict[str, object] = dict(scalars)
    values.update((k, v) for k, v in metadata.items() if k not in scalars)
    header, planned, alignment = plan_header(entries, values)
    # no tensors, no data section: as GGUFWriter's vocab-only files end (llama.cpp's models/)
    data_start = align_up(len(header), alignment) if planned else len(header)
    total = data_start + sum(align_up(p.entry.nbytes, alignment) for p in planned)
    preallocate(out, total)
    out.write(header)
    out.write(bytes(data_start - len(header)))
    for p in planned:
        write_entry_bytes(out, p.entry)
        out.write(bytes(align_up(p.entry.nbytes, alignment) - p.entry.nbytes))

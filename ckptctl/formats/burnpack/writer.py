"""Writing burnpack files byte-identically to burn: plan the whole layout, then stream."""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from ckptctl.dtypes import DType
from ckptctl.errors import SelectionError, UnsupportedError
from ckptctl.fix import Note, Option
from ckptctl.formats._base import preallocate, read_entry_bytes, write_entry_bytes
from ckptctl.formats.burnpack._cbor import encode_cbor
from ckptctl.formats.burnpack._schema import (
    BOOL_STORE_ITEMSIZE,
    DEFAULT_BOOL,
    DTYPE_NAMES,
    HEADER_BYTES,
    MAGIC,
    MAX_METADATA_BYTES,
    MAX_TENSORS,
    VERSION,
    align_up,
    check_scalar,
    describe,
    has_bad_name,
    is_uint,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ckptctl.model import JSONValue, TensorEntry


@dataclass(frozen=True)
class _Item:
    entry: TensorEntry
    start: int
    length: int
    u32_bools: bool


@dataclass(frozen=True)
class BurnpackPlan:
    """A burnpack file laid out from metadata alone, before any tensor bytes are read.

    Attributes:
        head: header, CBOR metadata and zero padding: the file's first ``data_start`` bytes.
        metadata_length: N, the CBOR length.
        data_start: D, where the data section begins.
        offsets: ``(name, start, end)`` relative to ``data_start``, in write order.
        file_size: the total length of the file.
    """

    head: bytes
    metadata_length: int
    data_start: int
    offsets: tuple[tuple[str, int, int], ...]
    file_size: int
    _items: tuple[_Item, ...] = field(repr=False, compare=False)


def _logical_shape(entry: TensorEntry) -> list[int] | None:
    """The stored shape of a quantized entry, or None when the entry no longer is one."""
    text = entry.extra.get("logical_shape")
    if text is None or entry.dtype is not DType.U8 or entry.shape != (entry.nbytes,):
        return None
    try:
        shape = json.loads(text)
    except ValueError:
        return None
    if isinstance(shape, list) and all(is_uint(dim) for dim in shape):
        return shape
    return None


def _descriptor_dtype(entry: TensorEntry) -> tuple[JSONValue, list[int], int, bool]:
    """``(dtype value, stored shape, payload bytes, is a u32 bool store)`` for one entry."""
    src = entry.source_dtype
    if isinstance(src, dict) and len(src) == 1:
        ((kind, arg),) = src.items()
        if kind == "QFloat" and isinstance(arg, dict):
            shape = _logical_shape(entry)
            if shape is not None:
                return src, shape, entry.nbytes, False
        if kind == "Bool" and entry.dtype is DType.BOOL and arg in BOOL_STORE_ITEMSIZE:
            size = BOOL_STORE_ITEMSIZE[arg] * entry.numel
            return src, list(entry.shape), size, arg == "U32"
    if src == "Flex32" and entry.dtype is DType.F32:
        return src, list(entry.shape), entry.nbytes, False
    # burn 0.19-0.20's bare "Bool" is not copied: current burn rejects it (one byte per element,
    # the same bytes as {"Bool": "Native"})
    if entry.dtype is DType.BOOL:
        return dict(DEFAULT_BOOL), list(entry.shape), entry.nbytes, False
    name = DTYPE_NAMES.get(entry.dtype)
    if name is None:
        raise UnsupportedError(
            f"tensor {entry.name!r} has dtype {entry.dtype.value}, which burnpack cannot store",
            hint=Note("cast it first, e.g. {fix0}", (Option("adapters", "cast:f32"),))
            if entry.dtype.is_float
            else Note(
                "write a .pt instead, or leave it out with {fix0}",
                (Option("exclude", f"^{re.escape(entry.name)}$"),),
            ),
        )
    return name, list(entry.shape), entry.nbytes, False


def plan_layout(
    entries: Sequence[TensorEntry],
    metadata: Mapping[str, str],
    scalars: Mapping[str, JSONValue],
) -> BurnpackPlan:
    """Lay out a burnpack file byte-identically to burn's writer.

    Placement: ``docs/formats/burnpack.md#placement``.

    Args:
        entries: tensors in write order (the data section keeps it; the CBOR map is sorted).
        metadata: text key/values (the ``metadata`` map is written only when non-empty).
        scalars: typed scalars like ``{"step": {"UInt": 42}}`` (written only when non-empty).

    Returns:
        The plan; its ``head`` is the first ``data_start`` bytes of the file.

    Raises:
        SelectionError: two entries share a name.
        UnsupportedError: a dtype, name, param_id, scalar or size burnpack cannot hold.
    """
    if len(entries) > MAX_TENSORS:
        raise UnsupportedError(f"{len(entries)} tensors exceed burnpack's limit of {MAX_TENSORS}")
    descriptors: dict[str, dict[str, JSONValue]] = {}
    items: list[_Item] = []
    end = 0
    for entry in entries:
        if entry.name in descriptors:
            raise SelectionError(
                f"tensor name {entry.name!r} appears twice",
                hint="check the remap rules: two tensors were renamed to the same name",
            )
        if has_bad_name(entry.name):
            raise UnsupportedError(f"tensor name {entry.name!r} is empty or has control characters")
        dtype_value, shape, length, u32_bools = _descriptor_dtype(entry)
        if entry.nbytes != math.prod(entry.shape) * entry.dtype.itemsize:
            raise UnsupportedError(
                f"tensor {entry.name!r} has {entry.nbytes} bytes, but shape {list(entry.shape)} "
                f"of {entry.dtype.value} needs {math.prod(entry.shape) * entry.dtype.itemsize}"
            )
        start = align_up(end)
        end = start + length
        desc: dict[str, JSONValue] = {
            "dtype": dtype_value,
            "shape": shape,
            "data_offsets": [start, end],
        }
        if entry.param_id is not None:
            if not is_uint(entry.param_id):
                raise UnsupportedError(
                    f"tensor {entry.name!r}: param_id {entry.param_id!r} is not a u64"
                )
            desc["param_id"] = entry.param_id
        descriptors[entry.name] = desc
        items.append(_Item(entry, start, length, u32_bools))
    top: dict[str, JSONValue] = {"tensors": {k: descriptors[k] for k in sorted(descriptors)}}
    for key, value in metadata.items():
        if not _is_text_pair(key, value):
            raise UnsupportedError(f"metadata {key!r}: {describe(value)} is not text to text")
    if metadata:
        top["metadata"] = {k: metadata[k] for k in sorted(metadata)}
    for key, value in scalars.items():
        check_scalar(key, value, UnsupportedError)
    if scalars:
        top["scalars"] = {k: scalars[k] for k in sorted(scalars)}
    try:
        blob = encode_cbor(top)
    except (TypeError, ValueError) as exc:  # e.g. a QFloat scheme holding odd data
        raise UnsupportedError(f"cannot encode burnpack metadata: {exc}") from None
    if len(blob) > MAX_METADATA_BYTES:
        raise UnsupportedError(
            f"metadata of {len(blob)} bytes exceeds burnpack's limit of {MAX_METADATA_BYTES}"
        )
    data_start = align_up(HEADER_BYTES + len(blob))
    head = MAGIC + struct.pack("<HI", VERSION, len(blob)) + blob
    head += bytes(data_start - len(head))
    return BurnpackPlan(
        head=head,
        metadata_length=len(blob),
        data_start=data_start,
        offsets=tuple((i.entry.name, i.start, i.start + i.length) for i in items),
        file_size=data_start + end,
        _items=tuple(items),
    )


def _is_text_pair(key: object, value: object) -> bool:
    return isinstance(key, str) and isinstance(value, str)


def _write_payload(item: _Item, out: IO[bytes]) -> None:
    if item.u32_bools:  # canonical 0/1 bytes re-encoded as the u32 bool store
        import numpy as np  # here, not above: a raw copy must not pay numpy's import (0.1 s)

        data = read_entry_bytes(item.entry)
        out.write((np.frombuffer(data, dtype=np.uint8) != 0).astype("<u4").tobytes())
    else:
        write_entry_bytes(out, item.entry)


def write_burnpack(
    out: IO[bytes],
    entries: Sequence[TensorEntry],
    metadata: Mapping[str, str],
    scalars: Mapping[str, JSONValue],
) -> None:
    """Write a burnpack file: plan the layout, write the head, then stream one tensor at a time.

    Args:
        out: a binary file positioned at its start.
        entries: tensors in write order.
        metadata: text key/values.
        scalars: typed scalars (``{"lr": {"Float": 0.001}}``).

    Raises:
        SelectionError: duplicate tensor names.
        UnsupportedError: something burnpack cannot hold (see :func:`plan_layout`).
        CorruptCheckpointError: a source tensor's bytes are not ``nbytes`` long.

    Example:
        >>> with open("out.bpk", "wb") as f:  # doctest: +SKIP
        ...     write_burnpack(f, ckpt.entries(), ckpt.metadata, ckpt.scalars)
    """
    plan = plan_layout(entries, metadata, scalars)
    preallocate(out, plan.file_size)
    out.write(plan.head)
    pos = plan.data_start
    for item in plan._items:
        target = plan.data_start + item.start
        out.write(bytes(target - pos))
        _write_payload(item, out)
        pos = target + item.length

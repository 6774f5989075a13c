"""Burn's burnpack (``.bpk``) format: reader, streaming writer and byte layout.

Byte layout (``docs/formats/burnpack.md#layout``, burn >= 0.20)::

    0       4 bytes  magic "NRUB" (u32 LE 0x4255524E)
    4       u16 LE   format version: 1 (0 is read the same; > 1 is unsupported)
    6       u32 LE   N, the length of the CBOR metadata (at most 100 MiB)
    10      N bytes  one CBOR map {"tensors": {name: descriptor}, "metadata"?: {str: str},
                     "scalars"?: {str: {"Int"|"UInt"|"Float"|"Bool": value}}}
    10+N    zeros    up to D = ceil((10+N)/256)*256
    D       payloads each at D + start, start a multiple of 256, in write order (not name order)

A descriptor is ``{"dtype", "shape", "data_offsets": [start, end], "param_id"?}`` with keys in
that order; ``data_offsets`` are relative to ``D``. Burn 0.19 wrote the same version 1 but no
padding (``D = 10+N``, payloads contiguous); the reader detects that layout with the rule of
``docs/formats/burnpack.md#burn-019-files`` and says so in ``Checkpoint.notes`` and
``HeaderLayout.facts["layout"]``.

How burnpack dtypes map onto :class:`~ckptctl.dtypes.DType` (``source_dtype`` keeps the file's
spelling whenever it says more, so that a burnpack-to-burnpack copy is byte-identical):

* ``"F32"`` ... ``"U8"``: the DType of the same name;
* ``"Flex32"``: F32 (plain binary32 bytes);
* ``"Bool"`` (burn 0.19-0.20), ``{"Bool": "Native" | "U8" | "U32"}``: BOOL. A ``U32`` store has
  4-byte elements on disk; its entry still presents canonical 1-byte bools (0/1) and the writer
  re-encodes them as u32;
* ``{"QFloat": scheme}``: there is no DType for quantized tensors, so the entry is the opaque
  payload as U8 with shape ``(payload bytes,)``; ``extra["quantized"]`` names the value kind and
  ``extra["logical_shape"]`` holds the stored shape as JSON. This writer restores the ``QFloat``
  descriptor from those; other writers store the payload as a plain U8 vector.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl._lazy import lazy_attributes
from ckptctl.formats._base import FormatSpec, lazy_layout, lazy_open, lazy_write
from ckptctl.formats.burnpack._schema import (
    ALIGNMENT_BYTES,
    LEGACY_LAYOUT_NOTE,
    MAGIC,
    MAX_METADATA_BYTES,
    MAX_TENSORS,
    format_param_id,
    parse_param_id,
)

if TYPE_CHECKING:
    from ckptctl.formats.burnpack.reader import layout_burnpack, open_burnpack
    from ckptctl.formats.burnpack.writer import BurnpackPlan, plan_layout, write_burnpack
    from ckptctl.sources import ByteSource

__all__ = [
    "ALIGNMENT_BYTES",
    "LEGACY_LAYOUT_NOTE",
    "MAGIC",
    "MAX_METADATA_BYTES",
    "MAX_TENSORS",
    "BurnpackPlan",
    "format_param_id",
    "layout_burnpack",
    "open_burnpack",
    "parse_param_id",
    "plan_layout",
    "sniff_burnpack",
    "write_burnpack",
]


def sniff_burnpack(head: bytes, source: ByteSource) -> bool:
    """True when the file starts with the burnpack magic ``NRUB``."""
    return head[:4] == MAGIC


# The reader (cbor2) and the writer are imported when a burnpack file is opened or written, not
# when the formats are registered (every command registers them all).

_READER = "ckptctl.formats.burnpack.reader"
_WRITER = "ckptctl.formats.burnpack.writer"

#: public name -> the module that defines it, imported on first use (PEP 562)
_LAZY = {
    "layout_burnpack": _READER,
    "open_burnpack": _READER,
    "BurnpackPlan": _WRITER,
    "plan_layout": _WRITER,
    "write_burnpack": _WRITER,
}


__getattr__ = lazy_attributes(__name__, _LAZY, globals())


#: The formats this module adds to the registry (``ckptctl.formats``), in detection order.
SPECS = (
    FormatSpec(
        name="burnpack",
        extensions=(".bpk",),
        sniff=sniff_burnpack,
        open=lazy_open(_READER, "open_burnpack"),
        layout=lazy_layout(_READER, "layout_burnpack"),
        write=lazy_write(_WRITER, "write_burnpack"),
    ),
)

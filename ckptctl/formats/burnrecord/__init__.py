"""Burn records written before burn 0.22 (the removed ``Recorder`` API): read-only.

Format notes: ``docs/formats/burn-record.md``.

A record file is serde's encoding of ``BurnRecord { metadata, item }`` (burn-core
``record/recorder.rs`` at the parent of burn commit 862ef266a)::

    {"metadata": {"float": "f32" | "half::binary16::f16" | ..., "int": "i64" | ...,
                  "format": "<recorder type name>", "version": "0.17.0",
                  "settings": "FullPrecisionSettings" | "HalfPrecisionSettings" | ...},
     "item": <the record tree: module, optimizer or scheduler record>}

Encodings, each detected from content (never the extension):

* ``burn-mpk``: NamedMpkFileRecorder, MessagePack with named fields (``rmp_serde::write_named``):
  starts ``82 a8 "metadata" 85 a5 "float"``. Tensor bytes are MessagePack byte strings
  (``c4``/``c5``/``c6`` + length), so each tensor is a contiguous byte range of the file.
* ``burn-mpk-gz``: NamedMpkGzFileRecorder, the same bytes in one gzip member.
* ``burn-json``: PrettyJsonFileRecorder, ``serde_json`` pretty-printed; tensor bytes are arrays
  of numbers 0-255, one per line.
* ``burn-json-gz``: JsonGzFileRecorder, compact ``serde_json`` in one gzip member.
* ``burn-bin``: BinFileRecorder / BinGzFileRecorder (bincode): recognised and refused (exit 4),
  since bincode is not self-describing.

A tensor is ``TensorData {"bytes", "shape": [usize], "dtype": DType}``; a parameter wraps one as
``{"id": ParamId text, "param": TensorData}``. ParamId text is the u64's 8 little-endian bytes in
lower-case unpadded base32hex (13 characters; 10 for burn ~0.14's 6-byte ids; UUIDs before 0.13).
See :mod:`ckptctl.formats.burnrecord._record` for the three kinds of record and how optimizer
and scheduler records map onto burn 0.22's burnpack layout
(``docs/formats/burn-store.md#optimizer-records``).
"""

from __future__ import annotations

import re
import sys
from functools import partial
from typing import TYPE_CHECKING

from ckptctl._lazy import lazy_attributes
from ckptctl.formats._base import FormatSpec, lazy_layout, lazy_open
from ckptctl.formats.burnrecord._stream import inflate_head, is_gzip

if TYPE_CHECKING:
    from ckptctl.formats.burnrecord._record import RecordKind
    from ckptctl.formats.burnrecord.reader import BurnRecordCheckpoint
    from ckptctl.model import Checkpoint, HeaderLayout
    from ckptctl.sources import ByteSource

__all__ = ["BurnRecordCheckpoint", "RecordKind", "refusal_of"]

_READER = "ckptctl.formats.burnrecord.reader"

#: public name -> the module that defines it, imported on first use (PEP 562)
_LAZY = {"BurnRecordCheckpoint": _READER, "RecordKind": "ckptctl.formats.burnrecord._record"}


__getattr__ = lazy_attributes(__name__, _LAZY, globals())


def refusal_of(ckpt: object) -> str | None:
    """Why a checkpoint read from a Burn record cannot be migrated to burn 0.22, or None."""
    reader = sys.modules.get(_READER)  # no record was opened before the reader was imported
    return ckpt.refusal if reader and isinstance(ckpt, reader.BurnRecordCheckpoint) else None


# --- sniffing: needs no reader (every command sniffs with every format) ----------------------


def _is_map_head(byte: int) -> bool:
    # MessagePack: fixmap (0x80-0x8f), map 16 (0xde), map 32 (0xdf)
    return 0x80 <= byte <= 0x8F or byte in (0xDE, 0xDF)


def _is_mpk_head(head: bytes) -> bool:
    # serde derives write BurnRecord's fields in order: a 2-entry map, "metadata" first, whose
    # value is the BurnMetadata map starting with "float".
    return (
        len(head) > 20
        and _is_map_head(head[0])
        and b"\xa8metadata" in head[:12]
        and b"\xa5float" in head[:24]
    )


def _is_json_record_head(head: bytes) -> bool:
    """True when ``head`` starts like a serde_json Burn record: ``{"metadata": {"float": ...``."""
    return re.match(rb'\s*\{\s*"metadata"\s*:\s*\{\s*"float"\s*:', head) is not None


_BIN_FLOATS = (b"f32", b"f64", b"half::binary16::f16", b"half::bfloat::bf16")


def is_bincode_head(head: bytes) -> bool:
    """A bincode ``BurnRecord`` (BinFileRecorder): varint-length float type name, then more."""
    if not head:
        return False
    n = head[0]
    return (
        head[1 : 1 + n] in _BIN_FLOATS
        and b"Recorder" in head[:1024]
        and (b"BinFileRecorder" in head[:1024] or b"BinGzFileRecorder" in head[:1024])
    )


def sniff_mpk(head: bytes, source: ByteSource) -> bool:
    """NamedMpkFileRecorder: a MessagePack ``BurnRecord``."""
    return _is_mpk_head(head)


def sniff_mpk_gz(head: bytes, source: ByteSource) -> bool:
    """NamedMpkGzFileRecorder: the same, gzip-compressed."""
    return is_gzip(head) and _is_mpk_head(inflate_head(head))


def sniff_json(head: bytes, source: ByteSource) -> bool:
    """PrettyJsonFileRecorder (and any serde_json record)."""
    return _is_json_record_head(head)


def sniff_json_gz(head: bytes, source: ByteSource) -> bool:
    """JsonGzFileRecorder."""
    return is_gzip(head) and _is_json_record_head(inflate_head(head))


def sniff_bin(head: bytes, source: ByteSource) -> bool:
    """BinFileRecorder / BinGzFileRecorder (bincode, refused)."""
    return is_bincode_head(head) or (is_gzip(head) and is_bincode_head(inflate_head(head, 1024)))


# --- the reader, imported when a record is opened --------------------------------------------


def _open(source: ByteSource, *, variant: str) -> Checkpoint:
    from ckptctl.formats.burnrecord.reader import VARIANTS, open_record

    return open_record(source, VARIANTS[variant])


def _layout(source: ByteSource, *, variant: str) -> HeaderLayout:
    from ckptctl.formats.burnrecord.reader import VARIANTS, layout_record

    return layout_record(source, VARIANTS[variant])


#: The formats this module adds to the registry (``ckptctl.formats``), in detection order.
SPECS = (
    *(
        FormatSpec(
            name=name,
            extensions=(),
            sniff=sniff,
            open=partial(_open, variant=name),
            layout=partial(_layout, variant=name),
        )
        for sniff, name in (
            (sniff_mpk, "burn-mpk"),
            (sniff_mpk_gz, "burn-mpk-gz"),
            (sniff_json, "burn-json"),
            (sniff_json_gz, "burn-json-gz"),
        )
    ),
    FormatSpec(
        name="burn-bin",
        extensions=(),
        sniff=sniff_bin,
        open=lazy_open(_READER, "open_bin"),
        layout=lazy_layout(_READER, "layout_bin"),
    ),
)

"""Burn records written before burn 0.22 (the removed ``Recorder`` API): read-only.

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
and scheduler records map onto burn 0.22's burnpack layout (burn-store spec §7.3).
"""

from __future__ import annotations

from functools import partial

from ckptctl.formats._base import FormatSpec
from ckptctl.formats.burnrecord._record import RecordKind
from ckptctl.formats.burnrecord.reader import (
    JSON,
    JSON_GZ,
    MPK,
    MPK_GZ,
    BurnRecordCheckpoint,
    layout_bin,
    layout_record,
    open_bin,
    open_record,
    sniff_bin,
    sniff_json,
    sniff_json_gz,
    sniff_mpk,
    sniff_mpk_gz,
)

__all__ = ["BurnRecordCheckpoint", "RecordKind", "refusal_of"]


def refusal_of(ckpt: object) -> str | None:
    """Why a checkpoint read from a Burn record cannot be migrated to burn 0.22, or None."""
    return ckpt.refusal if isinstance(ckpt, BurnRecordCheckpoint) else None


#: The formats this module adds to the registry (``ckptctl.formats``), in detection order.
SPECS = (
    *(
        FormatSpec(
            name=variant.name,
            extensions=(),
            sniff=sniff,
            open=partial(open_record, variant=variant),
            layout=partial(layout_record, variant=variant),
        )
        for sniff, variant in (
            (sniff_mpk, MPK),
            (sniff_mpk_gz, MPK_GZ),
            (sniff_json, JSON),
            (sniff_json_gz, JSON_GZ),
        )
    ),
    FormatSpec(name="burn-bin", extensions=(), sniff=sniff_bin, open=open_bin, layout=layout_bin),
)

"""llama.cpp's GGUF format: detection, lazy reading and the byte layout (issue 45).

Byte layout (gguf-py 0.19.0 and ``ggml/src/gguf.cpp``; spec:
https://github.com/ggml-org/ggml/blob/master/docs/gguf.md; notes: ``docs/formats/gguf.md``),
every integer in the file's byte order::

    0       4 bytes  magic "GGUF"
    4       u32      version: 2 or 3 (a big-endian file's version read little-endian has its
                     low 16 bits zero: that is how the byte order is detected)
    8       u64      tensor count T
    16      u64      key/value count K
    24      K key/values: string key, u32 value type, value
                     (string: u64 length + UTF-8 bytes; array: u32 item type, u64 count, items)
    ...     T tensor infos: string name, u32 n_dims (<= 4), u64 ne[n_dims] (fastest dimension
                     first), u32 GGML type, u64 offset (from the data section's start)
    ...     zeros    up to D, the next multiple of ``general.alignment`` (a UINT32; default 32)
    D       tensor data; gguf.cpp requires each offset to be the sum of the padded sizes of the
            tensors before it (``_parse`` records where a file breaks that; ``verify`` says so)

How entries are made (``TensorEntry.dtype`` is a :class:`~ckptctl.dtypes.DType`, which has no
member for block formats):

* plain GGML types (F32, F16, BF16, F64, I8 ... I64): ordinary entries, the DType of the same
  name, ``shape`` the reverse of ``ne``, a byte range of the file. In a big-endian file their
  bytes are swapped when read (canonical bytes are little-endian), so the entry has no offset.
* block-quantized types (Q4_0, Q8_0, Q4_K, IQ4_XS, MXFP4 ...): like burnpack's quantized tensors,
  the entry is its stored blocks as a U8 vector of shape ``(nbytes,)``, so ``hash`` digests and
  ``diff`` compares the blocks. ``extra["stored_type"]`` (``model.STORED_TYPE``) holds the GGML
  type name and ``extra["logical_shape"]`` the shape; ``model.listed_dtype``/``listed_shape``
  give those to ``ls``, ``show``, ``diff`` and ``hash``, so ``ls --json`` says ``Q4_K`` with the
  logical shape and the stored ``nbytes``. ``source_dtype`` is the type name too, for a GGUF
  writer to keep the blocks. Writers of value formats refuse such entries (``convert`` exits 4
  naming ``--dequantize``). Values come from :func:`dequantized`, the one place the decoding
  kernels (``_quants.dequantize``) are reached.
* an unknown type id: listed as ``type 42`` with the bytes up to the next tensor; never read.

A split model's parts (``NAME-00001-of-00003.gguf`` with ``split.*`` keys) open as one
checkpoint whatever part is named: the first part's key/values, every part's tensors.
Key/values become ``Checkpoint.metadata`` strings (``_values``); long arrays also get a summary
(``Checkpoint.metadata_summary``) for listings; ``Checkpoint.typed_metadata`` keeps each with
its type and bytes (``_kv.StoredValue``) for the writer.

Writing (``_write``): GGUF v3, little-endian, laid out as gguf-py's ``GGUFWriter`` lays it out
(byte for byte, given the same key/values and tensors in the same order). A quantized entry's
blocks are copied as they are; ``convert`` edits the key/values and quantizes with ``_edit``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ckptctl._lazy import lazy_attributes
from ckptctl.formats._base import FormatSpec, lazy_layout, lazy_open, lazy_write
from ckptctl.formats.gguf._ggml import GGML_TYPES, GGML_TYPES_BY_NAME, GGMLType, ValueType

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ckptctl.formats.gguf._edit import QUANTIZE_TYPES, edit_key_values, quantize_entries
    from ckptctl.formats.gguf._kv import StoredValue, TypedValue, parse_set_meta
    from ckptctl.formats.gguf._read import layout_gguf, open_gguf
    from ckptctl.model import TensorEntry
    from ckptctl.sources import ByteSource

__all__ = [
    "GGML_TYPES",
    "GGML_TYPES_BY_NAME",
    "MAGIC",
    "QUANTIZE_TYPES",
    "GGMLType",
    "StoredValue",
    "TypedValue",
    "ValueType",
    "can_decode",
    "dequantized",
    "edit_key_values",
    "layout_gguf",
    "open_gguf",
    "parse_set_meta",
    "quantize_entries",
    "sniff_gguf",
]

MAGIC = b"GGUF"


def sniff_gguf(head: bytes, source: ByteSource) -> bool:
    """True when the file starts with the GGUF magic."""
    return head[:4] == MAGIC


#: public name -> the module that defines it, imported on first use (PEP 562)
_LAZY = {
    "QUANTIZE_TYPES": "ckptctl.formats.gguf._edit",
    "StoredValue": "ckptctl.formats.gguf._kv",
    "TypedValue": "ckptctl.formats.gguf._kv",
    "edit_key_values": "ckptctl.formats.gguf._edit",
    "layout_gguf": "ckptctl.formats.gguf._read",
    "open_gguf": "ckptctl.formats.gguf._read",
    "parse_set_meta": "ckptctl.formats.gguf._kv",
    "quantize_entries": "ckptctl.formats.gguf._edit",
}

__getattr__ = lazy_attributes(__name__, _LAZY, globals())


def can_decode(entry: TensorEntry) -> bool:
    """Whether :func:`dequantized` can decode ``entry``'s blocks: a quantized GGML type whose
    blocks gguf-py decodes (``_quants.DEQUANTIZABLE``)."""
    from ckptctl.formats.gguf._kernels import DEQUANTIZABLE
    from ckptctl.model import STORED_TYPE

    # a big-endian file's blocks hold byte-swapped fields (llama.cpp's gguf_convert_endian swaps
    # each type's scales): the kernels read little-endian blocks only
    big = entry.extra.get("byte_order") == "big"
    return not big and entry.extra.get(STORED_TYPE, "") in DEQUANTIZABLE


def dequantized(entry: TensorEntry) -> TensorEntry:
    """A block-quantized GGUF entry as an F32 entry of its logical shape, decoded when read.

    Other entries come back as they are.

    Raises:
        UnsupportedError: (when the values are read) an unknown type, or one no kernel decodes.
    """
    from dataclasses import replace
    from functools import partial

    from ckptctl.dtypes import DType
    from ckptctl.model import STORED_TYPE, ComputedData, listed_shape

    name = entry.extra.get(STORED_TYPE)
    if name is None:
        return entry
    shape = listed_shape(entry)
    numel = math.prod(shape)
    return replace(
        entry,
        dtype=DType.F32,
        shape=shape,
        nbytes=numel * 4,
        offset=None,
        data=ComputedData(partial(_decode, entry, name, numel)),
        source_dtype=None,
        extra={},
    )


def _decode(entry: TensorEntry, name: str, count: int) -> NDArray[Any]:
    import numpy as np

    from ckptctl.errors import CkptError, UnsupportedError
    from ckptctl.formats.gguf._quants import dequantize

    ggml = GGML_TYPES_BY_NAME.get(name)
    if ggml is None:
        raise UnsupportedError(f"tensor {entry.name!r} has GGML {name}, unknown to ckptctl")
    raw = np.frombuffer(entry.data.read(), dtype=np.uint8)
    try:
        return dequantize(raw, ggml, count)
    except CkptError as exc:
        where = entry.data.file_range()
        message = f"tensor {entry.name!r}: {exc.message}"
        raise type(exc)(message, path=where[0].path if where else None, hint=exc.hint) from None


#: The formats this module adds to the registry (``ckptctl.formats``), in detection order.
SPECS = (
    FormatSpec(
        name="gguf",
        extensions=(".gguf",),
        sniff=sniff_gguf,
        open=lazy_open("ckptctl.formats.gguf._read", "open_gguf"),
        layout=lazy_layout("ckptctl.formats.gguf._read", "layout_gguf"),
        write=lazy_write("ckptctl.formats.gguf._write", "write"),
    ),
)

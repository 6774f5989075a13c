"""torch.distributed.checkpoint (DCP) directories, read without torch.

Format notes: ``docs/formats/dcp.md``.

What torch 2.13 writes (``torch/distributed/checkpoint/metadata.py`` and ``filesystem.py``;
checked against the files it writes, ``fixtures/make_distributed.py``)::

    DIR/.metadata       a pickle of Metadata(state_dict_metadata, planner_data, storage_data,
                        storage_meta, version)
    DIR/__R_N.distcp    rank R's N-th file: items back to back, each a complete torch.save zip

* ``state_dict_metadata``: flat name -> ``TensorStorageMetadata(properties=TensorProperties(dtype,
  ...), size, chunks=[ChunkStorageMetadata(offsets, sizes), ...])`` for tensors (a DTensor or
  FSDP parameter has one chunk per shard), ``BytesStorageMetadata()`` for other values;
* ``storage_data``: ``MetadataIndex(fqn, offset, index)`` -> ``_StorageInfo(relative_path, offset,
  length, transform_descriptors)``: where each chunk (keyed by its offsets; ``index`` is only a
  hint) or value (offset None) is stored;
* ``planner_data``: flat name -> the nested key path it came from (``('optim', 'state', 0,
  'exp_avg')``);
* each item is ``torch.save`` of the chunk (a tensor of the chunk's ``sizes``) or, for a value,
  of the object (``BYTE_IO``). ``transform_descriptors`` (``stream.zstd/1``) name stream
  transforms applied to the item's bytes. In the safetensors variant
  (``serialization_format=SAFETENSORS``) the tensor chunks of a rank file are instead the
  entries of one safetensors blob at its end (``_files.py``).

torch's reader loads ``.metadata`` with a plain ``pickle.load``. Here it is judged first (the
allowlist verdict of ``pytorch/_safety.py``: the DCP classes are outside torch's weights-only
list, so the verdict is needs-trust; a hostile one is unsafe and never unpickled), then read by
the inert unpickler, whose stand-ins this module reads as data. Every item is opened with the
PyTorch zip reader and gets its own verdict: the non-tensor values at once (torch's
``DefaultLoadPlanner.load_bytes`` loads them with ``weights_only=False``; their verdicts join the
checkpoint's), the tensor chunks when their bytes are first read (torch loads them with
``weights_only=True``; an unsafe one is refused then), so listing 100,000 chunks opens none.

Opening checks that every referenced file exists, every item lies inside its file with no two
overlapping, and every tensor's chunks tile it with no gap or overlap. Entries are the tensors in
``.metadata`` order, named by their flat names (``model.fc.weight``, which is how ``ls`` names
the nested ``.pt`` torch's ``dcp_to_torch_save`` writes); their bytes are assembled from the
chunks on demand: a tensor stored whole is a range of its rank file, one split by rows is read a
range at a time, and any other split is gathered into one tensor-sized buffer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.formats._base import FormatSpec, lazy_layout, lazy_open

if TYPE_CHECKING:
    from ckptctl.sources import ByteSource

__all__ = ["SPEC", "SPECS", "layout_dcp", "open_dcp", "sniff"]

#: The module every DCP metadata pickle names first (``Metadata``'s).
_MODULE = b"torch.distributed.checkpoint.metadata"


def sniff(head: bytes, source: ByteSource) -> bool:
    """A protocol 2+ pickle that names ``torch.distributed.checkpoint.metadata`` at once."""
    try:
        return head[:1] == b"\x80" and _MODULE in head[:512]
    except Exception:  # sniffing must never raise
        return False


# The reader is imported when a DCP directory is opened, not when the formats are registered
# (every command registers them all).


#: Open a DCP directory from its ``.metadata`` (``_read.open_dcp``).
open_dcp = lazy_open("ckptctl.formats.dcp._read", "open_dcp")
#: The decoded ``.metadata`` and how every byte of every rank file is used (``_read.layout_dcp``).
layout_dcp = lazy_layout("ckptctl.formats.dcp._read", "layout_dcp")


SPEC = FormatSpec(name="dcp", extensions=(), sniff=sniff, open=open_dcp, layout=layout_dcp)

#: The formats this module adds to the registry (``ckptctl.formats``).
SPECS = (SPEC,)

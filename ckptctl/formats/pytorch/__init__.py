"""PyTorch checkpoints (``.pt``/``.pth``/``.bin``/``.ckpt``) read without torch.

Containers are detected by content (``docs/formats/pytorch.md#detection``):

* ZIP (torch >= 1.6): ``PK\\x03\\x04`` at offset 0, ``<prefix>/data.pkl`` + ``<prefix>/data/<key>``
  records; TorchScript when ``<prefix>/constants.pkl`` exists.
* legacy stream: a pickle of the magic int ``0x1950A86A20F9469CFC6C``, then 1001, sys_info, the
  object, the storage keys, and each storage as an i64 count plus raw elements.
* TAR (torch < 0.1.10): ``ustar`` at offset 257, members ``sys_info``, ``pickle``, ``tensors``,
  ``storages``.
* plain pickle: any other pickle (storages pickled by value through ``_load_from_bytes``).

Nothing from a pickle is imported or executed: see ``_unpickler.py``. ``Checkpoint.format`` is
one of ``pytorch-zip``, ``pytorch-legacy``, ``pytorch-tar``, ``pickle``, ``torchscript``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl._gc import gc_paused
from ckptctl.errors import CkptError, CorruptCheckpointError
from ckptctl.formats._base import FormatSpec, lazy_write
from ckptctl.formats.pytorch._read import parse, sniff_pytorch
from ckptctl.model import Checkpoint, HeaderLayout

if TYPE_CHECKING:
    from ckptctl.sources import ByteSource

__all__ = ["layout_pytorch", "open_pytorch", "open_pytorch_tree", "sniff_pytorch"]


def open_pytorch(source: ByteSource) -> Checkpoint:
    """Open a PyTorch checkpoint lazily: unpickle the structure, read no tensor bytes.

    Args:
        source: the input file.

    Returns:
        A checkpoint whose ``format``, ``kind``, ``notes``, ``structure`` and ``safety`` describe
        the file.

    Raises:
        UnsafePickleError: the pickle names a global that only makes sense as an attack.
        CorruptCheckpointError: truncated or malformed container or pickle.
        UnsupportedError: a tensor uses a dtype or layout ckptctl cannot represent.
    """
    return open_pytorch_tree(source)[0]


def open_pytorch_tree(source: ByteSource) -> tuple[Checkpoint, object]:
    """:func:`open_pytorch`, and the unpickled object tree itself: plain values as they are,
    tensors as ``TensorRef``, unknown globals as inert ``Stub`` objects (formats built on
    ``torch.save`` files, such as DeepSpeed's, read their own metadata from it).

    Raises:
        UnsafePickleError, CorruptCheckpointError, UnsupportedError: as :func:`open_pytorch`.
    """
    from ckptctl.formats.pytorch._structure import analyse, make_entries
    from ckptctl.formats.pytorch._verdict import Ledger

    ledger = Ledger()
    try:
        with gc_paused():
            parsed = parse(source, ledger)
            analysis = analyse(parsed)
            entries, shared_notes = make_entries(parsed, analysis, source)
    except CkptError as exc:
        if exc.safety is None and (ledger.safety.globals or ledger.safety.problems):
            exc.safety = ledger.safety  # the verdict of what was read before the error
        raise exc.with_path(source.path) from None
    except (MemoryError, RecursionError) as exc:  # belt and braces: limits should catch these
        raise CorruptCheckpointError(
            f"checkpoint exceeds a resource limit ({type(exc).__name__})", path=source.path
        ) from None
    ckpt = Checkpoint(
        entries,
        path=source.path,
        format=parsed.format,
        metadata=parsed.metadata,
        kind=analysis.kind,
        notes=[*parsed.notes, *analysis.notes, *shared_notes],
        structure=analysis.structure,
        objects=analysis.objects,
        sources=[source],
        safety=parsed.ledger.safety,
    )
    return ckpt, parsed.root


def layout_pytorch(source: ByteSource) -> HeaderLayout:
    """Decode the container and account for every byte (``ckptctl header``).

    Raises:
        CorruptCheckpointError: malformed container or pickle.
        UnsafePickleError: a pickle names a refused global.
    """
    from ckptctl.formats.pytorch._layout import layout_pytorch as layout

    try:
        return layout(source)
    except (MemoryError, RecursionError) as exc:
        raise CorruptCheckpointError(
            f"checkpoint exceeds a resource limit ({type(exc).__name__})", path=source.path
        ) from None


#: The format this module adds to the registry (``ckptctl.formats``).
SPEC = FormatSpec(
    name="pytorch",
    extensions=(".pt", ".pth", ".bin"),
    sniff=sniff_pytorch,
    open=open_pytorch,
    layout=layout_pytorch,
    write=lazy_write("ckptctl.formats.pytorch._writer", "write_zip"),  # reading never needs it
    weak_sniff=True,
)
SPECS = (SPEC,)

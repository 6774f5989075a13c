"""PyTorch checkpoints (``.pt``/``.pth``/``.bin``/``.ckpt``) read without torch.

Containers are detected by content (spec: /work/shared/spec/pytorch-pt.md, section 1):

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

import contextlib
import gc
import tarfile
from typing import IO, TYPE_CHECKING

from ckptctl.errors import CkptError, CorruptCheckpointError
from ckptctl.formats import register_format
from ckptctl.formats._base import FormatSpec
from ckptctl.model import Checkpoint, HeaderLayout

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from ckptctl._io import ByteSource
    from ckptctl.formats.pytorch._containers import Parsed
    from ckptctl.formats.pytorch._safety import Ledger
    from ckptctl.model import JSONValue, TensorEntry

__all__ = ["layout_pytorch", "open_pytorch", "sniff_pytorch"]

#: Opcodes a protocol 0 or 1 pickle can start with (a value, a global, a MARK, an empty box).
_TEXT_PICKLE_STARTS = frozenset(b"c(]})VSLIFNXUTJKMGPi")
#: Bytes of a text pickle scanned to tell it from other files.
_TEXT_SNIFF_BYTES = 1 << 16


def _opens_as_tar(source: ByteSource) -> bool:
    """Whether ``tarfile.open(mode="r:")`` accepts the file, as ``torch.load`` first tries.

    ``torch.serialization._legacy_load`` calls ``tarfile.open`` on every real file that is not
    a zip before it reads a legacy stream, and only a ``TarError`` sends it on: an old-style
    (non-``ustar``) tar header with a valid checksum is enough (issue 25, family 4). Opening
    reads one 512-byte header; nothing is extracted.
    """
    if source.size < 512:
        return False
    try:  # cheap first: the first header's checksum and fields
        tarfile.TarInfo.frombuf(source.read(0, 512), "utf-8", "surrogateescape")
    except tarfile.TarError:
        return False
    from ckptctl.formats.pytorch._containers import ViewReader

    source.fetch_all("a file that opens as a TAR archive is read whole")
    try:
        with tarfile.open(fileobj=ViewReader(source.buffer), mode="r:"):
            return True
    except tarfile.TarError:
        return False


def _container(head: bytes, source: ByteSource) -> str | None:
    """Which container the file is (``zip``, ``tar``, ``pickle``), or None.

    The order is ``torch.load``'s: a zip by its first four bytes, then whatever ``tarfile``
    opens, then a pickle (legacy stream or plain).
    """
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    if (len(head) >= 262 and head[257:262] == b"ustar") or _opens_as_tar(source):
        return "tar"
    if len(head) >= 3 and head[0] == 0x80 and head[1] <= 5 and head[2] != 0:
        # Protocol 2+ pickle. A safetensors header length can start with 0x80 too, but then
        # bytes 2..7 are zero (no opcode is 0x00) and byte 8 opens the JSON header.
        return None if head[8:10] == b'{"' else "pickle"
    if head[:1] and head[0] in _TEXT_PICKLE_STARTS and head[8:10] != b'{"' and source.size > 2:
        # Protocol 0/1 pickle (no PROTO opcode): its opcodes must scan up to a STOP.
        from ckptctl.formats.pytorch._scan import PickleTruncatedError, scan_pickle

        try:
            scan_pickle(source.read(0, min(source.size, _TEXT_SNIFF_BYTES)), 0, "the file")
        except PickleTruncatedError:
            return "pickle" if source.size > _TEXT_SNIFF_BYTES else None
        except CkptError:
            return None
        return "pickle"
    return None


def sniff_pytorch(head: bytes, source: ByteSource) -> bool:
    """True when the content is a PyTorch ZIP, TAR, legacy stream or pickle. Never raises."""
    try:
        return _container(head, source) is not None
    except Exception:  # sniffers must never raise
        return False


def _is_legacy(source: ByteSource) -> bool:
    from ckptctl.formats.pytorch._containers import LEGACY_MAGIC
    from ckptctl.formats.pytorch._unpickler import load_pickle

    head = source.read(0, min(source.size, 64))  # the magic pickle is tiny, framed or not
    try:
        value, _ = load_pickle(head, "the first pickle", complete=False)
    except CkptError:
        return False
    return value == LEGACY_MAGIC


def _parse(source: ByteSource, ledger: Ledger | None = None) -> Parsed:
    from ckptctl.formats.pytorch import _containers

    head = source.read(0, min(source.size, 512))
    kind = _container(head, source)
    if kind == "zip":
        return _containers.read_zip(source, ledger)
    if kind in ("tar", "pickle"):  # read from start to end: a remote file is fetched whole
        source.fetch_all(f"a {'TAR' if kind == 'tar' else 'legacy or pickle'} .pt is read whole")
    if kind == "tar":
        return _read_tar_first(source, ledger)
    if kind == "pickle" and _is_legacy(source):
        return _containers.read_legacy(source, ledger)
    if kind == "pickle":
        return _containers.read_plain(source, ledger)
    raise CorruptCheckpointError("not a PyTorch checkpoint")


def _read_tar_first(source: ByteSource, ledger: Ledger | None) -> Parsed:
    """A file ``tarfile`` opens is what torch reads as a TAR checkpoint, even if it is a
    legacy stream too: then two readers see different pickles (issue 25, family 4)."""
    from ckptctl.formats.pytorch import _containers
    from ckptctl.formats.pytorch._safety import Ledger
    from ckptctl.safety import Verdict

    ledger = ledger or Ledger()
    legacy = _is_legacy(source)
    try:
        parsed = _containers.read_tar(source, ledger)
    except CorruptCheckpointError as exc:
        if not legacy:
            raise
        # torch fails on it as a TAR archive; a pickle reader sees a legacy stream
        parsed = _containers.read_legacy(source, ledger)
        why = f"its first 512 bytes open as a TAR archive, which torch reads it as: {exc.message}"
        ledger.torch_refuses_file(why, "the file")
        return parsed
    if legacy:
        ledger.note(
            "two readers see different pickles: torch.load reads the file as a TAR archive, "
            "a pickle reader as a legacy stream",
            Verdict.UNSAFE,
            "the file",
        )
    return parsed


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a pickle is parsed.

    Parsing allocates a few container objects per opcode and keeps nearly all of them; the
    collector, triggered every 700 allocations, then re-scans the growing heap again and again.
    For a 20,000-tensor ``.pt`` that was 0.22 s of ``ls``'s 0.95 s (benchmarks/RESULTS.md, round
    two). Reference counting still frees everything acyclic; cycles a hostile pickle might build
    are bounded by ``MAX_PICKLE_BYTES`` and collected once the collector is back on.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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
    from ckptctl.formats.pytorch._safety import Ledger
    from ckptctl.formats.pytorch._structure import analyse, make_entries

    ledger = Ledger()
    try:
        with _gc_paused():
            parsed = _parse(source, ledger)
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
    return Checkpoint(
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


def _write(
    out: IO[bytes],
    entries: Sequence[TensorEntry],
    metadata: Mapping[str, str],
    scalars: Mapping[str, JSONValue],
) -> None:
    from ckptctl.formats.pytorch._writer import write_zip  # lazily: reading never needs it

    write_zip(out, entries, metadata, scalars)


register_format(
    FormatSpec(
        name="pytorch",
        extensions=(".pt", ".pth", ".bin"),
        sniff=sniff_pytorch,
        open=open_pytorch,
        layout=layout_pytorch,
        write=_write,
        weak_sniff=True,
    )
)

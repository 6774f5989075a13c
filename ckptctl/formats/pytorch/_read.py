"""Which container a ``.pt`` is, in ``torch.load``'s order, and reading it (``parse``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.errors import CkptError, CorruptCheckpointError

if TYPE_CHECKING:
    from ckptctl.formats.pytorch._containers import Parsed
    from ckptctl.formats.pytorch._verdict import Ledger
    from ckptctl.sources import ByteSource


#: Opcodes a protocol 0 or 1 pickle can start with (a value, a global, a MARK, an empty box).
TEXT_PICKLE_STARTS = frozenset(b"c(]})VSLIFNXUTJKMGPi")
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
    import tarfile

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
    if head[:1] and head[0] in TEXT_PICKLE_STARTS and head[8:10] != b'{"' and source.size > 2:
        # Protocol 0/1 pickle (no PROTO opcode): its opcodes must scan up to a STOP.
        from ckptctl.formats.pytorch._scan import PickleTruncatedError
        from ckptctl.formats.pytorch._walker import scan_pickle

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


def parse(source: ByteSource, ledger: Ledger | None = None) -> Parsed:
    """The file's container (zip, TAR, legacy stream or plain pickle), read as torch.load would."""
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
    from ckptctl.formats.pytorch._verdict import Ledger
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

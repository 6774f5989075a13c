"""Stream transforms of DCP items: ``stream.zstd/1``, the one torch 2.13 has.

torch's ``FileSystemWriter(_extensions=[ZStandard()])`` (``torch/distributed/checkpoint/
_extension.py``) writes each item as one zstd frame of its ``torch.save`` bytes and records
``transform_descriptors=['stream.zstd/1']``; its reader accepts any version ``1.*``. It decodes
with ``zstandard``'s ``stream_reader``, which stops at the end of the first frame, or, without it,
``pyzstd``'s ``EndlessZstdDecompressor``, which reads every frame: an item with bytes after its
first frame reads differently under the two, so it is refused here. Decoded with the standard
library's ``compression.zstd`` (Python 3.14+) or its backport ``backports.zstd`` (a dependency
of ckptctl on older Pythons), in bounded steps: an item never decodes to more than its limit (a
zstd bomb stops there). Only reading an item needs the decoder: listing a directory and its
header read ``.metadata`` alone (issue #44).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.errors import CorruptCheckpointError, UnsupportedError
from ckptctl.fix import Note

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType

#: The one stream transform torch writes.
ZSTD = "stream.zstd"
#: Bytes decoded per step (the limit is checked after each).
STEP_BYTES = 16 << 20

__all__ = ["ZSTD", "check_transforms", "decode", "no_decoder", "zstd_module"]


def zstd_module() -> ModuleType | None:
    """``compression.zstd`` or ``backports.zstd``, whichever is there; None without either."""
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python 3.14+
    except ImportError:
        try:
            from backports import zstd  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            return None
    return zstd  # type: ignore[no-any-return,unused-ignore]


def check_transforms(descriptors: Sequence[str], what: str, path: str) -> None:
    """Refuse, before anything is read, an item stored with a transform no reader knows.

    Raises:
        UnsupportedError: a transform other than ``stream.zstd/1.*``.
    """
    for descriptor in descriptors:
        name, _, version = descriptor.partition("/")
        if name != ZSTD or version.partition(".")[0] != "1":
            raise UnsupportedError(
                f"{what} is stored with the stream transform {descriptor!r}, which neither "
                f"torch 2.13 nor ckptctl knows (only {ZSTD}/1)",
                path=path,
            )


def no_decoder(descriptors: Sequence[str], what: str, path: str) -> UnsupportedError:
    """The error of an item that cannot be read here: no zstd decoder is installed."""
    return UnsupportedError(
        f"{what} is compressed with zstd ({', '.join(descriptors)}), and no zstd decoder is "
        "installed",
        path=path,
        hint=Note(
            "ckptctl depends on backports.zstd below Python 3.14: reinstall it with its "
            "dependencies (pip install --force-reinstall ckptctl)"
        ),
    )


def decode(raw: bytes, descriptors: Sequence[str], limit: int, what: str, path: str) -> bytes:
    """The bytes of an item stored with ``descriptors`` (each ``stream.zstd/1``), at most
    ``limit`` of them.

    Raises:
        CorruptCheckpointError: damaged zstd data, a frame cut short, bytes after the frame, or
            more than ``limit`` bytes decoded.
        UnsupportedError: no zstd decoder is installed.
    """
    zstd = zstd_module()
    if zstd is None:
        raise no_decoder(descriptors, what, path)
    data = raw
    for _ in descriptors:
        data = _one_frame(zstd, data, limit, what, path)
    return data


def _one_frame(zstd: ModuleType, raw: bytes, limit: int, what: str, path: str) -> bytes:
    decoder = zstd.ZstdDecompressor()
    out = bytearray()
    pending = raw
    try:
        while not decoder.eof:
            if decoder.needs_input and not pending:
                raise CorruptCheckpointError(f"{what}: its zstd frame is cut short", path=path)
            out += decoder.decompress(pending, max_length=min(STEP_BYTES, limit + 1 - len(out)))
            pending = b""
            if len(out) > limit:
                raise CorruptCheckpointError(
                    f"{what}: its zstd frame decodes to more than {limit:,} bytes, more than "
                    "the item can hold",
                    path=path,
                )
    except zstd.ZstdError as exc:
        raise CorruptCheckpointError(f"{what}: damaged zstd data ({exc})", path=path) from None
    if decoder.unused_data:
        raise CorruptCheckpointError(
            f"{what}: {len(decoder.unused_data):,} bytes follow its zstd frame (torch reads them "
            "with pyzstd and ignores them with zstandard)",
            path=path,
        )
    return bytes(out)

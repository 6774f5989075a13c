"""Where a checkpoint's bytes come from: one ``ByteSource`` interface, a local and a remote kind.

``open_source(path_or_url)`` is the one way in: a local path is mapped (``sources/local.py``), a
URL is read by range requests (``sources/remote.py``, imported only when a URL is opened, so
local paths and ``ckptctl --help`` never pay for it). Nothing in ``ckptctl`` below this package
(``errors``, ``fix``) imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptctl.sources.local import (
    CHUNK_BYTES,
    PERMISSION_HINT,
    ByteSource,
    FilePool,
    Interleaved,
    MemorySource,
    PooledSource,
    SliceSource,
    copy_range,
    copy_ranges,
    file_pool,
    fill_chunks,
    fill_ranges,
    read_chunks,
    set_copy_threads,
    spare_buffer,
)

if TYPE_CHECKING:
    import os

__all__ = [
    "CHUNK_BYTES",
    "PERMISSION_HINT",
    "ByteSource",
    "FilePool",
    "Interleaved",
    "MemorySource",
    "PooledSource",
    "SliceSource",
    "copy_range",
    "copy_ranges",
    "file_pool",
    "fill_chunks",
    "fill_ranges",
    "open_source",
    "read_chunks",
    "set_copy_threads",
    "spare_buffer",
]


def open_source(path: str | os.PathLike[str], pool: FilePool | None = None) -> ByteSource:
    """A :class:`ByteSource` for a local path, or a remote one for a URL (``https://``,
    ``hf://``, ``s3://`` ...; needs the ``remote`` extra, imported only here). With ``pool``, a
    local file is a :class:`PooledSource` of it (open only while among its recently used)."""
    if isinstance(path, str) and "://" in path:
        from ckptctl.sources.remote import is_url, open_remote

        if is_url(path):
            return open_remote(path)
    return ByteSource(path) if pool is None else PooledSource(path, pool)

"""The floor of a raw-copy convert: what any Python CLI on ckptctl's design card must pay.

Starts Python, imports click and rich.console (the CLI and its report output), reads the
safetensors header, pre-sizes the output and copies every tensor's bytes to 256-byte aligned
offsets, as a burnpack writer does (through one 8 MiB buffer, as ckptctl's ``copy_range`` does
for offsets that are not page-congruent), and nothing else: no checks, no plan, no report.
``bench.py --case floor-nofsync`` times it against ``cp``; the gap between it and
``st-bpk-nofsync`` is ckptctl's own work (issue #15).

    python benchmarks/floor_copy.py SRC.safetensors DST [--same-offsets] [--bare]

``--same-offsets`` copies every byte to the offset it has in the source with
``copy_file_range``, as ``cp`` does (the output is then no burnpack); ``--bare`` skips the
imports.
"""

from __future__ import annotations

import json
import os
import struct
import sys

CHUNK = 8 << 20  # ckptctl._io.CHUNK_BYTES
ALIGN = 256


def main(src: str, dst: str, *, same_offsets: bool = False) -> None:
    """Copy the tensors of ``src`` to aligned offsets in ``dst``."""
    with open(src, "rb") as fin:
        (length,) = struct.unpack("<Q", fin.read(8))
        header = json.loads(fin.read(length))
    base = 8 + length
    ranges = sorted(v["data_offsets"] for k, v in header.items() if k != "__metadata__")
    out_pos = (base + 2 * ALIGN - 1) // ALIGN * ALIGN  # a header's worth of room, aligned
    plan = []
    for start, end in ranges:
        if same_offsets:
            out_pos = base + start
        plan.append((base + start, out_pos, end - start))
        out_pos = (out_pos + end - start + ALIGN - 1) // ALIGN * ALIGN
    fd_in = os.open(src, os.O_RDONLY)
    fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if out_pos:
            os.posix_fallocate(fd_out, 0, out_pos)  # pre-sized, as ckptctl's writers do
        copy_pieces(fd_in, fd_out, plan, kernel=same_offsets)
    finally:
        os.close(fd_in)
        os.close(fd_out)


def copy_pieces(fd_in: int, fd_out: int, plan: list[tuple[int, int, int]], *, kernel: bool) -> None:
    """Copy each ``(source offset, destination offset, size)`` in ``CHUNK`` pieces: with
    ``copy_file_range`` (``kernel``, what cp does: the kernel moves the pages) or through one
    buffer (what ckptctl's ``copy_range`` does where the offsets are not page-congruent)."""
    buffer = memoryview(bytearray(CHUNK))
    for src_at, dst_at, size in plan:
        done = 0
        while done < size:
            n = min(CHUNK, size - done)
            if kernel:
                got = os.copy_file_range(fd_in, fd_out, n, src_at + done, dst_at + done)
            else:
                got = os.preadv(fd_in, [buffer[:n]], src_at + done)
                os.pwrite(fd_out, buffer[:got], dst_at + done)
            if got <= 0:
                raise OSError(f"copied {got} bytes")
            done += got


if __name__ == "__main__":
    if "--bare" not in sys.argv:  # imported for their cost: the floor includes the CLI framework
        import click  # noqa: F401
        import rich.console  # noqa: F401  (and the report output)
    main(sys.argv[1], sys.argv[2], same_offsets="--same-offsets" in sys.argv)

"""``no-nan``: with ``no_nan`` (``--no-nan``), every float (and complex) tensor scanned for NaN
and Inf in bounded chunks; the failure names each tensor with its counts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ckptctl.dtypes import DType, to_float
from ckptctl.formats._base import ranged_step
from ckptctl.model import StridedData, listed_dtype
from ckptctl.ops._stream import tracked
from ckptctl.ops.verify._check import MESSAGE_LIMIT, Check, Phase, more, plural
from ckptctl.report.verify import Finding, Status
from ckptctl.sources import CHUNK_BYTES

if TYPE_CHECKING:
    from ckptctl.model import JSONValue, Progress, TensorEntry
    from ckptctl.ops.verify._check import Subject

#: Bytes read per ``os.pread`` call by the NaN/Inf scan (a multiple of every itemsize).
SCAN_CHUNK_BYTES = CHUNK_BYTES
#: Largest set of distinct elements of an expanded (stride-0) view scanned at once; each is
#: counted as often as the view repeats it, so a 1 KB file viewing 4 floats as 2**40 is judged
#: from its 4 floats (issue 25).
MAX_DISTINCT_SCAN_BYTES = 64 << 20

_SCANNED = frozenset({DType.C64, DType.C128})


def _count_bad(raw: np.ndarray, dtype: DType) -> tuple[int, int]:
    values = to_float(raw, dtype)
    return int(np.count_nonzero(np.isnan(values))), int(np.count_nonzero(np.isinf(values)))


def _scan(entry: TensorEntry) -> tuple[int, int]:
    """NaN and Inf counts of one tensor, reading file-backed bytes with bounded ``pread`` calls.

    File-backed entries are read chunk by chunk through their ``ByteSource`` (``os.pread``), not
    through the memory map, so the resident set stays at one chunk however large the tensor.
    """
    if entry.nbytes == 0:
        return 0, 0
    located = entry.data.file_range()
    step = max(entry.dtype.itemsize, SCAN_CHUNK_BYTES - SCAN_CHUNK_BYTES % entry.dtype.itemsize)
    data = entry.data
    if located is None and isinstance(data, StridedData) and data.distinct is not None:
        # An expanded view (stride 0) repeats its distinct elements: count those once each.
        distinct_bytes = data.distinct_numel * entry.dtype.itemsize
        if data.distinct_numel < entry.numel and distinct_bytes <= MAX_DISTINCT_SCAN_BYTES:
            values, repeats = data.distinct()
            n, i = _count_bad(values, entry.dtype)
            return n * repeats, i * repeats
    if located is None and not data.is_ranged():
        # computed (adapter, compressed storage): its bytes are produced in memory anyway
        return _count_bad(entry.load().reshape(-1), entry.dtype)
    if located is None:
        step = ranged_step(entry)  # whole rows: a strided view gathers them as one slab
    nan = inf = 0
    for start in range(0, entry.nbytes, step):
        length = min(step, entry.nbytes - start)
        if located is None:
            chunk = data.read_range(start, length)
        else:
            chunk = located[0].read(located[1] + start, length)
        n, i = _count_bad(np.frombuffer(chunk, dtype=entry.dtype.numpy), entry.dtype)
        nan += n
        inf += i
    return nan, inf


def _scan_all(
    entries: list[TensorEntry], jobs: int, progress: Progress | None
) -> list[tuple[int, int]]:
    """``_scan`` of every entry, in order, ``progress`` told of each; with ``jobs`` > 1 on that
    many threads (``pread`` and numpy's reductions release the GIL, so tensors of different
    shards scan in parallel)."""
    if jobs <= 1 or len(entries) < 2:
        return list(tracked(entries, (_scan(entry) for entry in entries), progress))
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(jobs, len(entries))) as pool:
        return list(tracked(entries, pool.map(_scan, entries), progress))


def no_nan(subject: Subject) -> Finding:
    """NaN and Inf counts of every float tensor; ``jobs`` tensors scanned at once."""
    from ckptctl.formats.gguf import can_decode, dequantized

    scanned = 0
    elements = 0
    bad: list[dict[str, JSONValue]] = []
    entries = subject.tensors
    # GGUF's block-quantized tensors are scanned through their decoded values (their scales
    # can be NaN or Inf), one tensor decoded at a time, as convert --dequantize decodes them
    pairs = [(e, dequantized(e) if can_decode(e) else e) for e in entries]
    floats = [(e, v) for e, v in pairs if v.dtype.is_float or v.dtype in _SCANNED]
    counts = _scan_all([v for _, v in floats], subject.opts.jobs, subject.opts.progress)
    for (entry, value), (nan, inf) in zip(floats, counts, strict=True):
        scanned += 1
        elements += value.numel
        if nan or inf:
            bad.append({"name": entry.name, "dtype": listed_dtype(entry), "nan": nan, "inf": inf})
    details: dict[str, JSONValue] = {"scanned": scanned, "elements": elements, "tensors": bad}
    if not bad:
        return Finding(
            "no-nan",
            Status.OK,
            f"no NaN or Inf in {plural(scanned, 'float tensor')} ({plural(elements, 'value')})",
            details=details,
        )

    def describe(b: dict[str, JSONValue]) -> str:
        parts = [f"{b['nan']:,} NaN" if b["nan"] else "", f"{b['inf']:,} Inf" if b["inf"] else ""]
        return f"{b['name']!r} ({', '.join(p for p in parts if p)})"

    listed = ", ".join(describe(b) for b in bad[:MESSAGE_LIMIT]) + more(len(bad))
    return Finding(
        "no-nan",
        Status.FAIL,
        f"NaN or Inf in {len(bad):,} of {plural(scanned, 'float tensor')}: {listed}",
        "the training run diverged or the file was written from a broken state; "
        "use an earlier checkpoint",
        details=details,
    )


CHECK = Check(
    "no-nan",
    110,
    Phase.ENTRIES,
    "No float tensor holds NaN or Inf",
    run=no_nan,
    option="no_nan",
)

"""Pausing the cyclic garbage collector while a header is parsed and listed."""

from __future__ import annotations

import contextlib
import gc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a header is parsed and listed.

    Parsing a pickle allocates a few container objects per opcode and keeps nearly all of them
    until the checkpoint is closed; the collector, triggered every 700 allocations, then
    re-scans the growing heap again and again, and scans all of it once more after parsing.
    For a 20,000-tensor ``.pt`` that was 0.22 s of ``ls``'s 0.95 s (benchmarks/RESULTS.md,
    round two), and another 0.05 s once only the parse was paused (RESULTS.md, "The rest of
    the listing"). Reference counting still frees everything acyclic; cycles a hostile pickle
    might build are bounded by ``MAX_PICKLE_BYTES`` and collected once the collector is back on.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

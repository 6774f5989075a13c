"""Coverage-guided fuzzing of every ckptctl reader (atheris), with a plain fallback loop.

One target per reader. Each input is written to a scratch file and run through what a user's
command would do: ``open_checkpoint`` + ``load()`` of every tensor + ``read_layout``. Only
``CkptError`` subclasses may escape; anything else (an ``IndexError``, a ``struct.error``, a
``MemoryError``, a ``RecursionError``, a hang) is a finding.

Usage (see fuzz/README.md)::

    /work/fuzzenv/bin/python fuzz/fuzz_readers.py TARGET [libFuzzer flags]   # atheris
    .venv/bin/python fuzz/fuzz_readers.py TARGET --plain --runs N [--seconds S] [--seed K]

Targets: ``safetensors``, ``burnpack``, ``pytorch`` (ZIP, legacy, TorchScript seeds), ``pickle``
(plain pickles), ``sharded`` (a ``*.index.json`` beside valid shards). Seeds are the files in
``fixtures/valid``; findings of the plain loop are saved as ``fuzz/crashes/<target>/<sha1>``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere, with or without an install
    sys.path.insert(0, str(ROOT))


from ckptctl.errors import CkptError, CkptWarning  # noqa: E402
from ckptctl.formats import open_checkpoint, read_layout  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable

VALID = ROOT / "fixtures" / "valid"
SHARDED = VALID / "safetensors" / "sharded"
#: Seeds per target: glob patterns under fixtures/valid.
SEEDS: dict[str, tuple[str, ...]] = {
    "safetensors": ("safetensors/*.safetensors",),
    "burnpack": ("burnpack/*.bpk",),
    "pytorch": ("pytorch/*.pt", "pytorch/*.ckpt"),
    "pickle": (),  # built in seed_pickles(): plain pickles, protocols 0-5
    "sharded": ("safetensors/sharded/*.index.json",),
}
#: Largest mutated input (keeps each run fast; bigger inputs add nothing for header parsers).
MAX_INPUT_BYTES = 64 * 1024


def seed_pickles() -> list[bytes]:
    """Plain pickles of the shapes checkpoints take: dicts, lists, nesting, all protocols."""
    import pickle
    from collections import OrderedDict

    obj: object = OrderedDict(
        [("a", 1), ("b", [1.5, "x", (2, 3)]), ("c", {"d": None, "e": True, "f": b"\x00\x01"})]
    )
    return [pickle.dumps(obj, protocol=p) for p in range(6)]


def seeds(target: str) -> list[bytes]:
    """Valid seed inputs for ``target``."""
    if target == "pickle":
        return seed_pickles()
    out = [p.read_bytes() for pat in SEEDS[target] for p in sorted(VALID.glob(pat))]
    return [s for s in out if len(s) <= MAX_INPUT_BYTES]


def exercise(path: str) -> None:
    """Everything a command does with an input; only ``CkptError`` may escape."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CkptWarning)
        try:
            with open_checkpoint(path) as ckpt:
                for entry in ckpt.values():
                    entry.load()
        except CkptError:
            pass
        with contextlib.suppress(CkptError):
            read_layout(path)


class Workspace:
    """A scratch directory holding the input file (and valid shards for ``sharded``)."""

    def __init__(self, target: str) -> None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.dir = tempfile.mkdtemp(prefix=f"ckptctl-fuzz-{target}-", dir=base)
        name = {"sharded": "model.safetensors.index.json", "burnpack": "x.bpk"}.get(target, "x.pt")
        if target == "safetensors":
            name = "x.safetensors"
        if target == "sharded":
            for shard in SHARDED.glob("*.safetensors"):
                shutil.copy(shard, self.dir)
        self.path = os.path.join(self.dir, name)

    def run(self, data: bytes) -> None:
        with open(self.path, "wb") as f:
            f.write(data)
        exercise(self.path)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


# --- plain random-mutation loop (no atheris needed) ---------------------------------------------

_INTERESTING = (
    b"\x00",
    b"\xff",
    b"\x7f",
    b"\x80",
    b"\xff\xff\xff\xff",
    b"\x00\x00\x00\x80",
    b"\xff\xff\xff\xff\xff\xff\xff\x7f",
    b"\x00\x00\x00\x00\x00\x00\x00\x80",
    b"-1",
    b"99999999999999999999",
    b"1e308",
    b'"',
    b"[[[[[[[[",
    b"{",
    b"}",
    b"\x1b[2J",
    "\u202e".encode(),
    b"PK\x03\x04",
    b"PK\x01\x02",
    b"PK\x05\x06",
    b"\x80\x02",
    b"cos\nsystem\n",
    b"\x93",
    b"R",
    b".",
)


def mutate(data: bytes, rng: random.Random, pool: list[bytes]) -> bytes:
    """One to four random edits: bit flips, interesting values, inserts, deletes, splices."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            i = min(pos, len(buf) - 1)
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            i = min(pos, len(buf) - 1)
            buf[i] = rng.randrange(256)
        elif op == 2:
            val = rng.choice(_INTERESTING)
            buf[pos : pos + len(val)] = val
        elif op == 3:
            buf[pos:pos] = rng.choice(_INTERESTING)
        elif op == 4 and buf:
            del buf[pos : pos + rng.randint(1, 16)]
        elif op == 5:
            del buf[pos:]  # truncate
        elif op == 6:
            other = rng.choice(pool)
            start = rng.randrange(len(other) + 1)
            buf[pos:pos] = other[start : start + rng.randint(1, 64)]
        else:
            n = rng.choice((1, 2, 4, 8))
            value = rng.choice((0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1, 2**64 - 1))
            buf[pos : pos + n] = (value & ((1 << (8 * n)) - 1)).to_bytes(n, "little")
    return bytes(buf[:MAX_INPUT_BYTES])


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Timeout


def plain_loop(
    target: str,
    runs: int,
    seconds: float,
    seed: int,
    per_input_seconds: int = 5,
    on_crash: Callable[[bytes, BaseException], None] | None = None,
) -> tuple[int, int]:
    """Run random mutants of the seeds; return ``(inputs run, findings)``.

    A finding is any exception other than ``CkptError`` (or an input running more than
    ``per_input_seconds``); it is saved under ``fuzz/crashes/<target>/``.
    """
    rng = random.Random(seed)
    pool = seeds(target)
    work = Workspace(target)
    crashes = ROOT / "fuzz" / "crashes" / target
    found: set[str] = set()
    signal.signal(signal.SIGALRM, _alarm)
    deadline = time.monotonic() + seconds
    done = 0
    try:
        while done < runs and time.monotonic() < deadline:
            if done % 50 == 0:
                data = rng.randbytes(rng.randrange(64)) if rng.random() < 0.1 else rng.choice(pool)
            else:
                data = mutate(rng.choice(pool), rng, pool)
            signal.alarm(per_input_seconds)
            try:
                work.run(data)
            except (_Timeout, Exception) as exc:
                kind = "timeout" if isinstance(exc, _Timeout) else type(exc).__name__
                where = traceback.extract_tb(exc.__traceback__)[-1:] or []
                sig = f"{kind}@" + ",".join(f"{f.filename}:{f.lineno}" for f in where)
                if sig not in found:
                    found.add(sig)
                    crashes.mkdir(parents=True, exist_ok=True)
                    digest = hashlib.sha1(data).hexdigest()
                    (crashes / digest).write_bytes(data)
                    sys.stderr.write(f"[{target}] finding {sig} -> crashes/{target}/{digest}\n")
                    if on_crash is not None:
                        on_crash(data, exc)
            finally:
                signal.alarm(0)
            done += 1
            if done % 100_000 == 0:
                sys.stderr.write(f"[{target}] {done} inputs, {len(found)} findings\n")
    finally:
        work.close()
    return done, len(found)


# --- atheris ------------------------------------------------------------------------------------


def atheris_main(target: str, argv: list[str]) -> None:
    """Run libFuzzer through atheris on ``target``; seeds go to a corpus directory."""
    import atheris  # type: ignore[import-untyped]  # only in the scratch venv

    corpus = Path(tempfile.mkdtemp(prefix=f"ckptctl-corpus-{target}-"))
    for i, data in enumerate(seeds(target)):
        (corpus / f"seed{i}").write_bytes(data)
    work = Workspace(target)

    def one_input(data: bytes) -> None:
        work.run(data[:MAX_INPUT_BYTES])

    atheris.instrument_all()
    atheris.Setup([sys.argv[0], *argv, str(corpus)], one_input)
    atheris.Fuzz()


def main() -> None:
    """Command line: ``TARGET [--plain --runs N --seconds S --seed K] [libFuzzer flags]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", choices=sorted(SEEDS))
    parser.add_argument("--plain", action="store_true", help="random-mutation loop, no atheris")
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--seed", type=int, default=0)
    args, rest = parser.parse_known_args()
    if not args.plain:
        try:
            import atheris  # type: ignore[import-untyped,unused-ignore]  # noqa: F401
        except ImportError:
            sys.stderr.write("atheris is not installed: running the plain mutation loop\n")
            args.plain = True
    if args.plain:
        start = time.monotonic()
        done, found = plain_loop(args.target, args.runs, args.seconds, args.seed)
        rate = done / max(time.monotonic() - start, 1e-9)
        sys.stdout.write(f"{args.target}: {done} inputs, {found} findings, {rate:.0f}/s\n")
        sys.exit(1 if found else 0)
    atheris_main(args.target, rest)


if __name__ == "__main__":
    main()

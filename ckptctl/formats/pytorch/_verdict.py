"""The safety verdict of pickles, streams and containers: the entry points that walk a pickle
(``_walker.py``) with a judge of ``_safety``'s rules, and the :class:`Ledger` a container
reader gathers the verdicts of its streams in. See ``docs/formats/pytorch.md#safety``.
"""

from __future__ import annotations

from ckptctl.errors import CkptError, UnsafePickleError
from ckptctl.formats.pytorch._safety import (
    _HIDDEN,
    _new_budget,
    _Walk,
    first_unsafe,
)
from ckptctl.formats.pytorch._scan import pickle_budget
from ckptctl.formats.pytorch._walker import walk_pickle
from ckptctl.safety import TORCH_REFUSES, PickleSafety, Problem, Verdict

#: Most bytes of one nested zip record (decompressed) judged.
MAX_NESTED_RECORD_BYTES = 64 << 20


def follow(blob: bytes, where: str, reached: bool, depth: int, budget: list[int]) -> PickleSafety:
    """The verdict of a stream handed to ``_load_from_bytes``, which torch loads unrestricted:
    a zip archive when it starts with a local header, else a legacy stream (``_safety._nested``
    calls it through its judge)."""
    if blob.startswith(b"PK\x03\x04"):
        return _nested_zip(blob, where, reached, depth, budget)
    return assess_stream(blob, where, reached=reached, depth=depth, budget=budget)


def assess_pickle(
    data: bytes | memoryview,
    where: str,
    *,
    reached: bool = True,
    _depth: int = 0,
    _budget: list[int] | None = None,
) -> PickleSafety:
    """The safety verdict of the pickle starting at ``data[0]`` (data after STOP is ignored).

    Never raises: a stream that cannot be decoded to its end is judged on what precedes the
    damage, plus a needs-trust problem saying where the walk stopped.

    Args:
        data: the pickle bytes.
        where: the stream's name in messages (``data.pkl``).
        reached: whether ``torch.load`` would read this stream.
    """
    return _assess(data, where, reached, _depth, _budget)[0]


def _assess(
    data: bytes | memoryview, where: str, reached: bool, depth: int, budget: list[int] | None
) -> tuple[PickleSafety, int | None]:
    """:func:`assess_pickle`, and where the frame ends when its STOP left bytes of it."""
    judge = _Walk(where, reached, depth, _new_budget() if budget is None else budget, follow)
    walker = walk_pickle(bytes(data), 0, where, judge=judge, budget=None)
    return walker.safety(), walker.frame_left


def new_judge(where: str) -> _Walk:
    """The verdict's notes for one reached stream at the top of a file (``load_pickle``)."""
    return _Walk(where, True, 0, _new_budget(), follow)


def _nested_zip(
    blob: bytes, where: str, reached: bool, depth: int, budget: list[int]
) -> PickleSafety:
    """Judge a zip archive handed to ``_load_from_bytes``: every ``.pkl`` record in it.

    torch reads ``<folder>/data.pkl`` (``constants.pkl`` too for TorchScript), the folder being
    the first record's; judging every pickle record is stricter and needs no name rules.
    """
    from ckptctl.formats.pytorch._zipdir import ZipRecords
    from ckptctl.sources import MemorySource  # only nested archives need it

    def problem(message: str, verdict: Verdict, torch_refuses: bool = False) -> PickleSafety:
        return PickleSafety((), (Problem(message, verdict, where, reached, torch_refuses),))

    try:
        records = ZipRecords(MemorySource(blob, where))
    except CkptError as exc:
        return problem(
            f"a nested zip archive ckptctl cannot read ({exc.message}); torch.load would unpickle "
            "what it holds unrestricted",
            Verdict.UNSAFE,
        )
    out = PickleSafety()
    names = [n for n in records.infos if n.endswith(".pkl")]
    if any(n.endswith("constants.pkl") for n in names):
        out = out.merge(
            problem(
                "a nested TorchScript archive: torch.load hands it to torch.jit.load, which runs "
                "the archive's code",
                Verdict.NEEDS_TRUST,
            )
        )
    for name in names:
        info = records.infos[name]
        if info.file_size > min(MAX_NESTED_RECORD_BYTES, budget[1]):
            return out.merge(
                problem(f"nested record {name!r} is too large to judge", Verdict.UNSAFE)
            )
        budget[1] -= info.file_size
        try:
            data = records.read(info, MAX_NESTED_RECORD_BYTES)
        except CkptError as exc:
            return out.merge(
                problem(
                    f"cannot read nested record {name!r} ({exc.message}); torch.load would "
                    "unpickle it unrestricted",
                    Verdict.UNSAFE,
                )
            )
        out = out.merge(
            assess_pickle(data, f"{where} > {name}", reached=reached, _depth=depth, _budget=budget)
        )
    return out


def assess_stream(
    blob: bytes,
    where: str,
    *,
    reached: bool = True,
    depth: int = 0,
    budget: list[int] | None = None,
    pickles: int = 5,
) -> PickleSafety:
    """Assess up to ``pickles`` pickles written back to back (a legacy stream's five)."""
    out = PickleSafety()
    pos = 0
    for index in range(pickles):
        if pos >= len(blob):
            break
        name = f"{where} (pickle {index + 1})" if pickles > 1 else where
        part, frame_left, stop = _assess_at(blob, pos, name, reached, depth, budget)
        out = out.merge(part)
        if stop is None:
            break
        if frame_left is not None and index + 1 < pickles and pos + frame_left < len(blob):
            # torch's next pickle.load starts where the C unpickler stopped reading: the end of
            # the frame, not the STOP (see the frames section above).
            message = _HIDDEN.format(what="a frame has bytes left after the pickle's STOP")
            return out.merge(PickleSafety((), (Problem(message, Verdict.UNSAFE, name, reached),)))
        pos = stop
    return out


def _assess_at(
    blob: bytes, pos: int, where: str, reached: bool, depth: int, budget: list[int] | None
) -> tuple[PickleSafety, int | None, int | None]:
    """:func:`_assess` of the pickle at ``pos``, and where it ends (None: its bounds do not
    hold, so where the next pickle starts cannot be told), in one walk."""
    judge = _Walk(where, reached, depth, _new_budget() if budget is None else budget, follow)
    walker = walk_pickle(
        blob, pos, where, judge=judge, budget=pickle_budget(len(blob)), budget_stops=False
    )
    return walker.safety(), walker.frame_left, walker.end


class Ledger:
    """The verdicts of every stream one container holds, gathered while it is read.

    :meth:`judge` refuses (``UnsafePickleError``) as soon as a stream ``torch.load`` would read
    is unsafe, before a single opcode of it is unpickled.
    """

    def __init__(self) -> None:
        self.safety = PickleSafety()
        #: where the last judged pickle's frame ends when its STOP left bytes of it
        self.frame_end: int | None = None

    def judge(self, data: bytes | memoryview, where: str, *, reached: bool = True) -> None:
        """Assess one pickle stream and add it to the ledger.

        Raises:
            UnsafePickleError: the stream is reached and unsafe.
        """
        self.add(*_assess(data, where, reached, 0, None), where, reached=reached)

    def add(
        self, found: PickleSafety, frame_end: int | None, where: str, *, reached: bool = True
    ) -> None:
        """Add the verdict of one pickle stream, already judged (see :meth:`judge`).

        Args:
            frame_end: where the pickle's frame ends when its STOP left bytes of it.

        Raises:
            UnsafePickleError: the stream is reached and unsafe.
        """
        self.frame_end = frame_end
        self.safety = self.safety.merge(found)
        if reached and found.verdict is Verdict.UNSAFE:
            raise UnsafePickleError(
                f"unsafe pickle: {first_unsafe(found)}",
                hint="loading this file with torch.load(weights_only=False) or pickle runs code; "
                "do not load it",
                safety=self.safety,
            )

    def refuse_frame_left(self, start: int, size: int, where: str) -> None:
        """Refuse a stream whose last judged pickle (at ``start``) hides the next one.

        torch.load of a legacy stream from a file object without ``peek`` (``io.BytesIO``) starts
        each of its five pickles where the C unpickler stopped reading: the end of a frame, not
        the STOP (see the frames section above).

        Raises:
            UnsafePickleError: the frame ends before ``size``, where another pickle follows.
        """
        if self.frame_end is None or start + self.frame_end >= size:
            return
        message = _HIDDEN.format(what="a frame has bytes left after the pickle's STOP")
        self.note(message, Verdict.UNSAFE, where)
        raise UnsafePickleError(
            f"unsafe pickle: {message} in {where}",
            hint="loading this file with torch.load(weights_only=False) or pickle runs code; "
            "do not load it",
            safety=self.safety,
        )

    def note(
        self,
        message: str,
        verdict: Verdict,
        where: str,
        *,
        reached: bool = True,
        torch_refuses: bool = False,
    ) -> None:
        """Add a problem found by the container reader (TorchScript, TAR, trailing data)."""
        self.safety = self.safety.merge(
            PickleSafety((), (Problem(message, verdict, where, reached, torch_refuses),))
        )

    def torch_refuses_file(self, why: str, where: str) -> None:
        """Note that ``torch.load`` refuses the whole file before it unpickles anything (its
        container, issue 25): the verdict is needs-trust, never safe, and says why."""
        self.note(f"{TORCH_REFUSES}{why}", Verdict.NEEDS_TRUST, where, torch_refuses=True)

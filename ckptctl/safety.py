"""The pickle safety verdict: what loading a pickle-based checkpoint in torch would trust.

A verdict is an allowlist decision, like ``torch.load(weights_only=True)``:

* ``safe``: every global, opcode and call is one torch 2.13's weights-only unpickler accepts by
  default, so torch loads the file without trusting it;
* ``needs-trust``: something outside that allowlist that is not known to run code (a model's
  classes, ``argparse.Namespace``, numpy arrays, TorchScript): loading needs
  ``weights_only=False``, which runs whatever those globals do;
* ``unsafe``: a global on the published dangerous lists, a function called from a module outside
  the allowlist, or a construct that can call code (extension codes, dotted names, calls of
  computed objects, BUILD aimed at a class, nested loader streams that are themselves unsafe).

The verdict is computed from the opcodes alone (``formats/pytorch/_safety.py``), never by running
anything. Streams that ``torch.load`` would not read (extra ``.pkl`` records, data after the
last pickle) are scanned too and reported as ``reached=False``: they do not change the verdict.

Some checkpoints are not read by ``torch.load(weights_only=True)`` at all but by the loader of
the program that wrote them (torch.distributed.checkpoint's ``FileSystemReader``, DeepSpeed's
``load_checkpoint``), which unpickles fully. For the files of such a checkpoint the question is
whether the pickle names anything beyond the inert classes that program writes itself: a
:class:`Producer` lists them, and :meth:`PickleSafety.written_by` makes them ``safe`` for that
loader (issue #44). Anything else keeps its verdict, and ``unsafe`` stays unsafe.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping

    from ckptctl.errors import CkptError

__all__ = [
    "TORCH_REFUSES",
    "GlobalUse",
    "PickleSafety",
    "Problem",
    "Producer",
    "Verdict",
    "worst",
]

#: How a problem that makes ``torch.load`` refuse the whole file begins (with weights_only=True
#: and False alike, before any code could run): the verdict is needs-trust, never safe, and
#: the message says why torch refuses it (issue 25).
TORCH_REFUSES = "torch.load refuses this file: "


class Verdict(Enum):
    """How much trust loading a pickle needs; members are ordered from least to most."""

    SAFE = "safe"
    NEEDS_TRUST = "needs-trust"
    UNSAFE = "unsafe"

    @property
    def rank(self) -> int:
        """0 for safe, 1 for needs-trust, 2 for unsafe."""
        return _RANK[self]


_RANK = {Verdict.SAFE: 0, Verdict.NEEDS_TRUST: 1, Verdict.UNSAFE: 2}


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The verdict needing the most trust (``safe`` for none)."""
    return max(verdicts, key=lambda v: v.rank, default=Verdict.SAFE)


@dataclass(frozen=True)
class GlobalUse:
    """One global a pickle names.

    Attributes:
        name: ``module.qualname`` after Python 2 name mapping (``builtins.eval``).
        verdict: its class: safe (torch's weights-only allowlist), needs-trust or unsafe.
        where: the stream it occurs in (``data.pkl``, ``data.pkl > _load_from_bytes #1``).
        reason: why it is not safe, None when it is.
        called: the pickle calls it (REDUCE, NEWOBJ, INST, OBJ) rather than only naming it.
        reached: ``torch.load`` would read this stream.
    """

    name: str
    verdict: Verdict
    where: str
    reason: str | None = None
    called: bool = False
    reached: bool = True


@dataclass(frozen=True)
class Problem:
    """A construct that makes a pickle need trust or unsafe, independent of any one global.

    Attributes:
        torch_refuses: ``torch.load`` fails on it whatever ``weights_only`` says (invalid UTF-8,
            a storage size that disagrees with its data): trusting the file loads nothing.
        weights_only: only torch's weights-only unpickler refuses it (an opcode it does not
            know); ``pickle.load`` and ``torch.load(weights_only=False)`` read it as data.
    """

    message: str
    verdict: Verdict
    where: str
    reached: bool = True
    torch_refuses: bool = False
    weights_only: bool = False


@dataclass(frozen=True)
class Producer:
    """A program that reads its checkpoints back with its own, unrestricted loader, and the
    inert classes it writes into them (``formats/pytorch/_producers.py``).

    Attributes:
        name: the program (``DCP``, ``DeepSpeed``).
        loader: its loader as verdicts name it (``DCP's loader``).
        what: what its classes are (``checkpoint metadata classes``).
        classes: ``module.qualname`` -> where the class is defined and why it is written.
    """

    name: str
    loader: str
    what: str
    classes: Mapping[str, str]


@dataclass(frozen=True)
class PickleSafety:
    """The safety verdict of every pickle stream in one checkpoint.

    Attributes:
        globals: every global named, first use first, one entry per (name, stream).
        problems: constructs that need trust or are unsafe (extension codes, call chains ...).
        producer: the program whose loader reads these pickles (:meth:`written_by`); None: the
            verdict is about ``torch.load(weights_only=True)``.
    """

    globals: tuple[GlobalUse, ...] = ()
    problems: tuple[Problem, ...] = ()
    producer: Producer | None = None

    @property
    def verdict(self) -> Verdict:
        """The verdict of what ``torch.load`` reads (unreached streams do not count)."""
        return worst(
            [g.verdict for g in self.globals if g.reached]
            + [p.verdict for p in self.problems if p.reached]
        )

    @property
    def unreached_verdict(self) -> Verdict | None:
        """The verdict of the streams ``torch.load`` does not read; None when there are none."""
        found = [g.verdict for g in self.globals if not g.reached] + [
            p.verdict for p in self.problems if not p.reached
        ]
        return worst(found) if found else None

    def untrusted(self) -> list[GlobalUse]:
        """Reached globals that are not safe, worst first, then in order of appearance."""
        out = [g for g in self.globals if g.reached and g.verdict is not Verdict.SAFE]
        return sorted(out, key=lambda g: -g.verdict.rank)

    def allowing(self, names: Collection[str]) -> PickleSafety:
        """This verdict with ``names`` trusted, as torch's ``add_safe_globals`` does.

        Only needs-trust globals become safe: an unsafe global stays unsafe.
        """
        if not names:
            return self
        allowed = set(names)
        return replace(
            self,
            globals=tuple(
                replace(g, verdict=Verdict.SAFE, reason="explicitly allowed")
                if g.name in allowed and g.verdict is Verdict.NEEDS_TRUST
                else g
                for g in self.globals
            ),
        )

    def merge(self, other: PickleSafety, prefix: str = "") -> PickleSafety:
        """Both verdicts together; ``prefix`` is put before the other's stream names."""
        return PickleSafety(
            self.globals + tuple(replace(g, where=prefix + g.where) for g in other.globals),
            self.problems + tuple(replace(p, where=prefix + p.where) for p in other.problems),
            self.producer or other.producer,
        )

    def written_by(self, producer: Producer) -> PickleSafety:
        """This verdict for pickles read by ``producer``'s own loader, which unpickles fully.

        A needs-trust global among the classes ``producer`` writes becomes safe, and so does a
        construct only torch's weights-only unpickler refuses (an opcode plain pickle reads as
        data). Everything else keeps its verdict: an unsafe global stays unsafe. Apply it only
        to files read as that producer's, never to a plain ``.pt`` naming the same classes.
        """
        return replace(
            self,
            globals=tuple(
                replace(g, verdict=Verdict.SAFE, reason=f"{producer.name}: {source}")
                if g.verdict is Verdict.NEEDS_TRUST
                and (source := producer.classes.get(g.name)) is not None
                else g
                for g in self.globals
            ),
            problems=tuple(
                replace(p, verdict=Verdict.SAFE)
                if p.weights_only and p.verdict is Verdict.NEEDS_TRUST
                else p
                for p in self.problems
            ),
            producer=producer,
        )

    def produced(self) -> list[GlobalUse]:
        """Reached globals that are safe only as the producer's classes (none without one)."""
        if self.producer is None:
            return []
        classes = self.producer.classes
        return [
            g for g in self.globals if g.reached and g.verdict is Verdict.SAFE and g.name in classes
        ]

    @property
    def torch_refusal(self) -> str | None:
        """Why ``torch.load`` refuses the file (the first such problem), or None."""
        for problem in self.problems:
            if problem.reached and problem.torch_refuses:
                return problem.message.removeprefix(TORCH_REFUSES)
        return None

    def describe(self, limit: int = 4) -> str:
        """One line for listings: the verdict and what it rests on."""
        verdict = self.verdict
        if verdict is Verdict.SAFE and self.producer is not None and self.produced():
            line = (
                f"safe for {self.producer.loader} (only {self.producer.what} and what "
                "torch.load(weights_only=True) accepts)"
            )
        elif verdict is Verdict.SAFE:
            line = "safe (only what torch.load(weights_only=True) accepts)"
        else:
            names = list(dict.fromkeys(g.name for g in self.untrusted()))
            problems = [p.message for p in self.problems if p.reached and p.verdict is verdict]
            items = names[:limit] or problems[:1]
            more = f" and {len(names) - limit} more" if len(names) > limit else ""
            line = f"{verdict.value}: {', '.join(items)}{more}"
        unreached = self.unreached_verdict
        if unreached is not None and unreached is not Verdict.SAFE:
            line += f"; streams torch.load does not read are {unreached.value}"
        return line


def carried_safety(exc: CkptError) -> PickleSafety | None:
    """The verdict ``exc`` carries for what was read before it (``errors.py`` carries it as data:
    it imports nothing)."""
    return exc.safety if isinstance(exc.safety, PickleSafety) else None

"""The module tree of ``ls --tree``, from tensor names alone (header-only, every format).

Names are split at ``.``; siblings come in the file's order (where each first appears, as
``print(model)`` and torchinfo show a module), numbered siblings together in number order
(``layers.2`` before ``layers.10``) where the first of them appears. ``name`` orders siblings
naturally instead (whatever order the file stores them in, so a ``.pt`` and its
``.safetensors`` give the same tree), ``size`` by bytes, largest first. Consecutive numbered
siblings with the same structure (the same relative names, dtypes and shapes below them,
whatever their storage order) collapse into one run, ``layers.{0..31}`` x32, shown by its
first block.
Structures are interned as small integers, so building and comparing is linear in the names.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from ckptctl.report.tree import TreeNode

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ckptctl.report.model import TensorRow

_DIGITS = re.compile(r"(\d+)")
#: How ``ls --tree --sort`` orders siblings (``dtype`` and ``shape`` order rows, not modules).
TREE_ORDERS = ("file", "name", "size")


@functools.cache
def natural_key(segment: str) -> tuple[tuple[int, int | str], ...]:
    """``layers10`` after ``layers9``: digit runs compare as numbers, the rest as text."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _DIGITS.split(segment) if p)


class _Draft:
    """A node being built: children by segment, or the tensor row at a leaf; :meth:`measure`
    fills in its structure id and totals."""

    __slots__ = (
        "buffers", "children", "nbytes", "order", "parameters", "row", "structure", "tensors",
    )  # fmt: skip

    def __init__(self) -> None:
        self.children: dict[str, _Draft] = {}
        self.row: TensorRow | None = None
        self.order: list[str] = []
        self.structure = self.tensors = self.parameters = self.nbytes = self.buffers = 0


def build_tree(
    rows: Sequence[TensorRow],
    *,
    tied_to: Mapping[str, str] | None = None,
    depth: int | None = None,
    expand: bool = False,
    order: str = "file",
) -> TreeNode:
    """The module tree of ``rows`` under a root named ``""``.

    Args:
        rows: the listed tensors, in the file's order.
        tied_to: tensor name → the first name of its tied group, for every later member; such
            tensors count no parameters or bytes (their storage is counted once, at the first).
        depth: show this many levels of name segments (None: all); deeper ones are totalled.
        expand: list every block instead of collapsing runs of identical ones.
        order: siblings' order, one of :data:`TREE_ORDERS` (see the module docstring).

    Returns:
        The root node; its totals are the whole listing's.
    """
    tied = tied_to or {}
    root = _Draft()
    for row in rows:
        node = root
        for segment in row.name.split("."):
            child = node.children.get(segment)
            if child is None:
                child = node.children[segment] = _Draft()
            node = child
        if node.row is not None or node.children:  # "a" and "a.b" both tensors: keep both
            node = node.children.setdefault("", _Draft())
        node.row = row
    builder = _Builder(tied, depth, expand, order)
    builder.measure(root)
    return builder.node("", "", root, 0)


class _Builder:
    """Two passes: :meth:`measure` gives every draft its totals and an interned structure id
    (equal for blocks with the same relative names, dtypes and shapes); :meth:`node` then makes
    report nodes only for what is shown (a collapsed run's first block, down to ``depth``)."""

    def __init__(
        self, tied: Mapping[str, str], depth: int | None, expand: bool, order: str
    ) -> None:
        self.tied = tied
        self.depth = depth
        self.expand = expand
        self.order = order
        self.shapes: dict[object, int] = {}

    def measure(self, draft: _Draft) -> None:
        row = draft.row
        if row is not None and not draft.children:
            counted = row.name not in self.tied
            key: object = (row.dtype, row.shape)
            draft.tensors = 1
            draft.parameters = row.parameters if counted else 0
            draft.buffers = row.numel - row.parameters if counted else 0
            draft.nbytes = row.nbytes if counted else 0
        else:
            natural = sorted(draft.children, key=natural_key)
            parts = []  # in natural order: a block's structure does not depend on storage order
            for segment in natural:
                child = draft.children[segment]
                self.measure(child)
                draft.tensors += child.tensors
                draft.parameters += child.parameters
                draft.buffers += child.buffers
                draft.nbytes += child.nbytes
                parts.append((segment, child.structure))
            key = tuple(parts)
            draft.order = self.ordered(draft, natural)
        draft.structure = self.shapes.setdefault(key, len(self.shapes))

    def ordered(self, draft: _Draft, natural: list[str]) -> list[str]:
        """The children's segments as shown (``natural``: in natural order)."""
        if self.order == "name":
            return natural
        if self.order == "size":
            return sorted(natural, key=lambda segment: -draft.children[segment].nbytes)
        numbered = [segment for segment in natural if segment.isdigit()]
        out: list[str] = []
        for segment in draft.children:  # in order of first appearance
            if not segment.isdigit():
                out.append(segment)
            elif numbered:  # all of them, where the first appears
                out.extend(numbered)
                numbered = []
        return out

    def node(self, name: str, path: str, draft: _Draft, level: int) -> TreeNode:
        row = draft.row
        if row is not None and not draft.children:
            return TreeNode(
                name, path, 1, draft.parameters, draft.nbytes, dtype=row.dtype, shape=row.shape,
                tied_to=self.tied.get(row.name), buffers=draft.buffers,
            )  # fmt: skip
        totals = (draft.tensors, draft.parameters, draft.nbytes)
        if self.depth is not None and level >= self.depth and level > 0:
            return TreeNode(name, path, *totals, hidden=len(draft.order), buffers=draft.buffers)
        children = []
        for run in self.runs(draft):
            first = run[0]
            child_path = f"{path}.{first}" if path else first
            child = self.node(first, child_path, draft.children[first], level + 1)
            if len(run) > 1:
                members = [draft.children[seg] for seg in run]
                indices = tuple(int(seg) for seg in run)
                label = _label(indices)
                child = TreeNode(
                    label, f"{path}.{label}" if path else label,
                    sum(m.tensors for m in members), sum(m.parameters for m in members),
                    sum(m.nbytes for m in members), child.children, indices=indices,
                    hidden=child.hidden, buffers=sum(m.buffers for m in members),
                )  # fmt: skip
            children.append(child)
        if len(children) == 1 and children[0].name.startswith("{") and name:  # a ModuleList
            run_node = children[0]
            return TreeNode(
                f"{name}.{run_node.name}", run_node.path, *totals, run_node.children,
                indices=run_node.indices, hidden=run_node.hidden, buffers=draft.buffers,
            )  # fmt: skip
        return TreeNode(name, path, *totals, tuple(children), buffers=draft.buffers)

    def runs(self, draft: _Draft) -> list[list[str]]:
        """The children's segments in order, consecutive numbered modules of one structure
        grouped (each alone with ``expand``)."""
        out: list[list[str]] = []
        for segment in draft.order:
            child = draft.children[segment]
            groupable = not self.expand and segment.isdigit() and bool(child.children)
            if groupable and out and out[-1][0].isdigit():
                previous = draft.children[out[-1][0]]
                if previous.children and previous.structure == child.structure:
                    out[-1].append(segment)
                    continue
            out.append([segment])
        return out


def _label(indices: tuple[int, ...]) -> str:
    """``{0..31}`` for a contiguous run, ``{0,2,4}`` with gaps (``{0,2,...,62}`` when long)."""
    if indices[-1] - indices[0] == len(indices) - 1:
        return f"{{{indices[0]}..{indices[-1]}}}"
    if len(indices) <= 4:
        return "{" + ",".join(map(str, indices)) + "}"
    return f"{{{indices[0]},{indices[1]},...,{indices[-1]}}}"

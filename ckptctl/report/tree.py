"""``ls --tree``: the module hierarchy of a checkpoint's tensor names (types only).

:func:`ckptctl.ops._tree.build_tree` builds it; ``report.text`` draws it and ``report.json``
gives its JSON.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TreeNode:
    """A module (a prefix of tensor names) or a tensor, with the totals of everything below.

    Attributes:
        name: the label: one name segment (``layers``, ``weight``); a collapsed run of
            identical blocks is ``{0..31}`` (``{0,2,4}`` when the indices have gaps), and a
            module whose only child is such a run carries both (``layers.{0..31}``).
        path: the full dotted name (``model.layers.0``); a collapsed run's path has the label.
        tensors: tensors below (all blocks of a collapsed run).
        parameters: parameters below (elements, buffers' apart), a tied tensor counted once
            (where it first appears).
        nbytes: bytes below, counted the same way.
        children: sub-modules and tensors in the order asked (the file's, numbered blocks in
            number order; natural; by size); a collapsed run shows its first block's; empty for
            tensors and below ``--depth``.
        dtype: a tensor's dtype (None for modules).
        shape: a tensor's shape (None for modules).
        tied_to: a tied tensor's first name, where its parameters are counted (else None).
        indices: the block indices a collapsed run stands for (empty otherwise).
        hidden: sub-modules and tensors not shown below ``--depth`` (0 when all are shown).
        buffers: elements of the buffers below (BatchNorm's running statistics), counted
            the same way.
    """

    name: str
    path: str
    tensors: int
    parameters: int
    nbytes: int
    children: tuple[TreeNode, ...] = ()
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    tied_to: str | None = None
    indices: tuple[int, ...] = ()
    hidden: int = 0
    buffers: int = 0

    @property
    def is_tensor(self) -> bool:
        """True for a tensor (a leaf with a dtype), False for a module."""
        return self.dtype is not None

    @property
    def repeat(self) -> int:
        """How many identical blocks this node stands for (1 unless collapsed)."""
        return len(self.indices) or 1

"""Quantized modules as ``ls`` lists them and ``verify`` checks them (types only).

:func:`ckptctl.ops._quant.find_quantized` recognises them; ``report.text`` and ``report.json``
show them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class QuantScheme(Enum):
    """A quantized layout, by the producer whose tensors it names."""

    GPTQ = "gptq"
    AWQ = "awq"
    BNB_INT8 = "bnb-int8"
    BNB_NF4 = "bnb-nf4"
    BNB_FP4 = "bnb-fp4"
    FP8 = "fp8"
    FP8_BLOCK = "fp8-block"
    INT8 = "int8"
    COMPRESSED_TENSORS = "compressed-tensors"
    NVFP4 = "nvfp4"


class Granularity(Enum):
    """How many weights share one scale."""

    GROUP = "group"  # group_size consecutive inputs of one output
    CHANNEL = "channel"  # every input of one output
    TENSOR = "tensor"  # the whole weight
    BLOCK = "block"  # a block of rows x columns


@dataclass(frozen=True)
class QuantModule:
    """One quantized module: the tensors that together stand for one weight.

    Attributes:
        module: the module's name (``model.layers.0.mlp.down_proj``).
        scheme: the layout recognised.
        bits: bits per weight, when the layout gives them.
        granularity: how scales are shared.
        group_size: weights that share one scale: a group of inputs, a whole row
            (``channel``), a block, the whole weight (``tensor``).
        block: rows and columns per scale (``block``).
        shape: the weight's shape once unpacked (``[out, in]``), when the layout gives it.
        parameters: the weight's element count once unpacked.
        stored_parameters: the elements stored for it (packed integers, scales, zeros, index).
        nbytes: the bytes stored for it.
        tensors: the tensors that make it up, by full name.
        problems: where the tensors disagree (packed shapes, scales, group sizes).
    """

    module: str
    scheme: QuantScheme
    bits: int | None
    granularity: Granularity | None
    group_size: int | None
    block: tuple[int, int] | None
    shape: tuple[int, ...] | None
    parameters: int | None
    stored_parameters: int
    nbytes: int
    tensors: tuple[str, ...]
    problems: tuple[str, ...] = ()

    def describe_group(self) -> str:
        """The scale sharing as tables show it: ``128``, ``128x128``, ``channel``, ``tensor``."""
        if self.granularity is Granularity.BLOCK and self.block is not None:
            return f"{self.block[0]}x{self.block[1]}"
        if self.granularity is Granularity.GROUP and self.group_size is not None:
            return str(self.group_size)
        return "-" if self.granularity is None else self.granularity.value

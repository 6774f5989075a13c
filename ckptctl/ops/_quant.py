"""Quantized layouts recognised by their tensor names, and checked by their shapes.

Shared by ``ls`` (what each module is) and ``verify`` (``quant-layout``). The rules are
those of the producers' own packing code (``fixtures/make_quantized.py`` cites each):

- GPTQ (auto-gptq ``QuantLinear.pack``): ``qweight`` I32 ``[in * bits / 32, out]``, packed along
  the inputs; ``qzeros`` I32 ``[groups, out * bits / 32]``; ``scales`` ``[groups, out]``;
  ``g_idx`` I32 ``[in]``, the group of every input.
- AWQ (autoawq ``WQLinear_GEMM``): ``qweight`` I32 ``[in, out * bits / 32]``, packed along the
  outputs; ``qzeros`` and ``scales`` as GPTQ; no ``g_idx``.
- bitsandbytes 4-bit (``QuantState.as_dict(packed=True)`` under ``weight.``): ``weight`` U8
  holding two values a byte, ``absmax`` one per ``blocksize`` values (U8 when nested, with
  ``nested_absmax`` and ``nested_quant_map``), ``quant_map`` the 16 code values,
  ``quant_state.bitsandbytes__nf4|fp4`` the shape and block size as JSON bytes.
- bitsandbytes 8-bit (``Linear8bitLt``): ``weight`` I8 ``[out, in]``, ``SCB`` F32 ``[out]``
  (one scale per row), ``weight_format`` U8.
- FP8 with block scales (DeepSeek-V3): ``weight`` F8 ``[out, in]``, ``weight_scale_inv``
  ``[ceil(out / B), ceil(in / B)]``; FP8 or INT8 with ``weight_scale`` (compressed-tensors'
  float- and int-quantized, FBGEMM): one scale per tensor, per row or per group; ``input_scale``.
- compressed-tensors pack-quantized: ``weight_packed`` I32 ``[out, ceil(in * bits / 32)]``,
  ``weight_shape`` the unpacked shape as integers, ``weight_scale`` ``[out, groups]``,
  ``weight_zero_point`` packed along the rows (``[ceil(out * bits / 32), groups]``) when
  asymmetric; nvfp4: ``weight_packed`` U8 ``[out, in / 2]``, ``weight_scale`` F8
  ``[out, in / 16]``, ``weight_global_scale``.

Listing reads only the layout descriptors (``weight_shape``, ``quant_state.*``: a few bytes
each, at most :data:`MAX_DESCRIPTOR_BYTES`), never weights; ``verify`` also reads ``g_idx``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ckptctl.dtypes import DType
from ckptctl.ops._tree import natural_key
from ckptctl.report.quant import Granularity, QuantModule, QuantScheme

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ckptctl.model import TensorEntry

#: The largest layout descriptor read while listing (bitsandbytes' JSON is under 200 bytes).
MAX_DESCRIPTOR_BYTES = 4096
#: The largest ``g_idx`` ``verify`` reads (one int32 per input: 4 MiB is a million inputs).
MAX_GROUP_INDEX_BYTES = 4 << 20

_FP8 = (DType.F8_E4M3, DType.F8_E5M2)
_INT_PACKED = (DType.I32, DType.U32)


def _cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` in integers (sizes read from a file may be past a float's precision)."""
    return -(-a // b)


def _shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


@dataclass
class _Module:
    """A module being recognised: its tensors by role, and what was found so far."""

    name: str
    scheme: QuantScheme
    parts: dict[str, TensorEntry]
    bits: int | None = None
    granularity: Granularity | None = None
    group_size: int | None = None
    block: tuple[int, int] | None = None
    shape: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        self.problems: list[str] = []

    def part(self, role: str) -> TensorEntry | None:
        return self.parts.get(role)

    def need(self, role: str) -> TensorEntry | None:
        entry = self.parts.get(role)
        if entry is None:
            self.problems.append(f"no {role} tensor")
        return entry

    def expect(self, role: str, shape: Sequence[int], why: str) -> None:
        entry = self.parts.get(role)
        if entry is not None and entry.shape != tuple(shape):
            self.problems.append(
                f"{role} is {_shape(entry.shape)}, but {why} make it {_shape(shape)}"
            )

    def dtype_in(self, role: str, allowed: Sequence[DType]) -> None:
        entry = self.parts.get(role)
        if entry is not None and entry.dtype not in allowed:
            names = " or ".join(d.value for d in allowed)
            self.problems.append(f"{role} is {entry.dtype.value}, not {names}")

    def finish(self) -> QuantModule:
        entries = list(self.parts.values())
        numel = None if self.shape is None else math.prod(self.shape)
        return QuantModule(
            module=self.name,
            scheme=self.scheme,
            bits=self.bits,
            granularity=self.granularity,
            group_size=self.group_size,
            block=self.block,
            shape=self.shape,
            parameters=numel,
            stored_parameters=sum(e.numel for e in entries),
            nbytes=sum(e.nbytes for e in entries),
            tensors=tuple(e.name for e in entries),  # in the order of _ROLES
            problems=tuple(self.problems),
        )


def _groups(m: _Module, inputs: int, groups: int) -> None:
    """Group size from the inputs and the scale groups (``ceil(inputs / size) == groups``)."""
    if groups <= 0 or inputs <= 0:
        m.problems.append(f"{groups} scale groups for {inputs} inputs")
        return
    if groups == 1:
        m.granularity, m.group_size = Granularity.CHANNEL, inputs
        return
    size = _cdiv(inputs, groups)
    if _cdiv(inputs, size) != groups:
        m.problems.append(f"{groups} scale groups do not divide {inputs} inputs into equal groups")
        return
    m.granularity, m.group_size = Granularity.GROUP, size


# --- GPTQ and AWQ ---------------------------------------------------------------------------------


def _gptq_awq(m: _Module) -> None:
    qweight, scales = m.need("qweight"), m.need("scales")
    m.need("qzeros")
    m.dtype_in("qweight", _INT_PACKED)
    m.dtype_in("qzeros", _INT_PACKED)
    if qweight is None or scales is None:
        return
    if len(qweight.shape) != 2 or len(scales.shape) != 2:
        m.problems.append(
            f"qweight {_shape(qweight.shape)} and scales {_shape(scales.shape)} are not 2-D"
        )
        return
    groups, out = scales.shape
    qzeros, g_idx = m.part("qzeros"), m.part("g_idx")
    if m.scheme is QuantScheme.GPTQ:
        if qweight.shape[1] != out:
            m.problems.append(
                f"qweight has {qweight.shape[1]} columns, but scales has {out} outputs"
            )
            return
        # the bits from qzeros (a word holds 32 / bits zeros), the inputs from g_idx (one
        # entry each); without one, the other from qweight's rows
        index = g_idx.shape[0] if g_idx is not None and len(g_idx.shape) == 1 else None
        if g_idx is not None and not index:
            m.problems.append(f"g_idx is {_shape(g_idx.shape)}, not one entry per input")
            index = None
        zero_bits = None
        if qzeros is not None and len(qzeros.shape) == 2 and (qzeros.shape[1] * 32) % out == 0:
            zero_bits = qzeros.shape[1] * 32 // out
        if zero_bits is not None and zero_bits in (2, 3, 4, 8):
            bits = zero_bits
            inputs = index if index is not None else qweight.shape[0] * 32 // bits
        elif index is not None:
            inputs = index
            bits, rem = divmod(qweight.shape[0] * 32, inputs)
            if rem:
                m.problems.append(
                    f"qweight has {qweight.shape[0]} rows of 32 bits, not a whole number of "
                    f"bits for each of the {inputs} inputs g_idx names"
                )
                return
        else:
            m.problems.append("neither g_idx nor qzeros gives the bits per weight")
            return
    else:  # AWQ packs the outputs: qweight [in, out * bits / 32]
        bits, rem = divmod(qweight.shape[1] * 32, out)
        if rem or bits == 0:
            m.problems.append(
                f"qweight has {qweight.shape[1]} columns of 32 bits, not a whole number of bits "
                f"for each of the {out} outputs scales has"
            )
            return
        inputs = qweight.shape[0]
    if bits not in (2, 3, 4, 8):
        m.problems.append(f"{bits} bits per weight (GPTQ and AWQ pack 2, 3, 4 or 8)")
        return
    m.bits, m.shape = bits, (out, inputs)
    if m.scheme is QuantScheme.GPTQ:
        m.expect("qweight", (inputs * bits // 32, out), f"{inputs} inputs at {bits} bits")
    if inputs * bits % 32 or out * bits % 32:
        m.problems.append(f"{out}x{inputs} weights at {bits} bits do not fill 32-bit words")
    m.expect(
        "qzeros", (groups, out * bits // 32), f"{groups} groups of {out} outputs at {bits} bits"
    )
    _groups(m, inputs, groups)


# --- bitsandbytes -------------------------------------------------------------------------------


def _bnb_state(m: _Module, read: Callable[[TensorEntry], bytes | None]) -> dict[str, object] | None:
    entry = m.part("quant_state")
    if entry is None:
        return None
    raw = read(entry)
    if raw is None:
        m.problems.append(f"quant_state is {entry.nbytes:,} bytes, more than a layout descriptor")
        return None
    try:
        state = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        state = None
    if not isinstance(state, dict):
        m.problems.append("quant_state is not the JSON object bitsandbytes writes")
        return None
    return state


def _bnb_4bit(m: _Module, read: Callable[[TensorEntry], bytes | None]) -> None:
    weight, absmax = m.need("weight"), m.need("absmax")
    m.dtype_in("weight", (DType.U8,))
    m.bits, m.granularity = 4, Granularity.GROUP
    quant_map = m.part("quant_map")
    if quant_map is not None and quant_map.numel != 16:
        m.problems.append(f"quant_map has {quant_map.numel} values, not the 16 codes of 4 bits")
    state = _bnb_state(m, read)
    if weight is None or absmax is None:
        return
    if state is None:  # no descriptor: two values a byte, one absmax a block
        values = 2 * weight.numel
        m.shape = (values,)
        if absmax.numel and values % absmax.numel == 0:
            m.group_size = values // absmax.numel
        return
    shape, blocksize = state.get("shape"), state.get("blocksize")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        m.problems.append(f"quant_state's shape {shape!r} is not a list of sizes")
        return
    if not (isinstance(blocksize, int) and blocksize > 0):
        m.problems.append(f"quant_state's blocksize {blocksize!r} is not a positive integer")
        return
    m.shape, m.group_size = tuple(shape), blocksize
    kind = state.get("quant_type")
    if kind != m.scheme.value.removeprefix("bnb-"):
        m.problems.append(f"quant_state says quant_type {kind!r}, its name says {m.scheme.value}")
    values = math.prod(shape)
    if weight.numel != _cdiv(values, 2):
        m.problems.append(
            f"weight holds {weight.numel:,} bytes, but {_shape(shape)} at 4 bits packs into "
            f"{_cdiv(values, 2):,}"
        )
    blocks = _cdiv(values, blocksize)
    if absmax.numel != blocks:
        m.problems.append(
            f"absmax has {absmax.numel:,} scales, but {values:,} values in blocks of "
            f"{blocksize} need {blocks:,}"
        )
    nested = m.part("nested_absmax")
    nested_size = state.get("nested_blocksize")
    if nested is not None and isinstance(nested_size, int) and nested_size > 0:
        need = _cdiv(absmax.numel, nested_size)
        if nested.numel != need:
            m.problems.append(
                f"nested_absmax has {nested.numel:,} scales, but {absmax.numel:,} absmax in "
                f"blocks of {nested_size} need {need:,}"
            )


def _bnb_int8(m: _Module) -> None:
    weight, scb = m.need("weight"), m.need("SCB")
    m.dtype_in("weight", (DType.I8,))
    m.bits = 8
    if weight is None or scb is None:
        return
    if len(weight.shape) != 2:
        m.problems.append(f"weight is {_shape(weight.shape)}, not 2-D")
        return
    m.shape = weight.shape
    m.granularity, m.group_size = Granularity.CHANNEL, weight.shape[1]
    m.expect("SCB", (weight.shape[0],), f"{weight.shape[0]} rows, one scale each,")


# --- FP8 and INT8 with scales -------------------------------------------------------------------


def _block_candidates(shape: tuple[int, ...], grid: tuple[int, ...]) -> set[int]:
    """The power-of-two block sizes B with ``ceil(dim / B) == grid`` in both dimensions."""
    return {
        b
        for b in (1 << k for k in range(17))
        if all(_cdiv(d, b) == g for d, g in zip(shape, grid, strict=True))
    }


def _fp8_block(m: _Module) -> None:
    weight, scale = m.need("weight"), m.need("weight_scale_inv")
    m.dtype_in("weight", _FP8)
    m.bits = 8
    if weight is None or scale is None:
        return
    m.shape = weight.shape
    if scale.numel == 1:
        m.granularity, m.group_size = Granularity.TENSOR, weight.numel
        return
    if len(weight.shape) != 2 or len(scale.shape) != 2:
        m.problems.append(
            f"weight {_shape(weight.shape)} and weight_scale_inv {_shape(scale.shape)} are not "
            "both 2-D"
        )
        return
    m.granularity = Granularity.BLOCK  # the block size is chosen for the whole file


def _scaled(m: _Module) -> None:
    """``weight`` (FP8 or INT8) with ``weight_scale``: per tensor, per row or per group."""
    weight, scale = m.need("weight"), m.need("weight_scale")
    m.bits = 8
    if weight is None or scale is None:
        return
    m.shape = weight.shape
    if scale.numel == 1:
        m.granularity, m.group_size = Granularity.TENSOR, weight.numel
        return
    if len(weight.shape) != 2:
        m.problems.append(f"weight is {_shape(weight.shape)}, not 2-D")
        return
    out, inputs = weight.shape
    if scale.shape in ((out,), (out, 1)):
        m.granularity, m.group_size = Granularity.CHANNEL, inputs
        return
    if len(scale.shape) != 2 or scale.shape[0] != out:
        m.problems.append(
            f"weight_scale is {_shape(scale.shape)}, not one scale, one per row ({out}) or "
            f"[{out}, groups]"
        )
        return
    _groups(m, inputs, scale.shape[1])
    zero = m.part("weight_zero_point")
    if zero is not None and zero.shape != scale.shape:
        m.expect("weight_zero_point", scale.shape, "the scales")


# --- compressed-tensors -------------------------------------------------------------------------


def _weight_shape(
    m: _Module, read: Callable[[TensorEntry], bytes | None]
) -> tuple[int, ...] | None:
    entry = m.need("weight_shape")
    if entry is None:
        return None
    if entry.dtype not in (DType.I64, DType.I32) or len(entry.shape) != 1:
        m.problems.append(f"weight_shape is {entry.dtype.value} {_shape(entry.shape)}, not sizes")
        return None
    raw = read(entry)
    if raw is None:
        m.problems.append(f"weight_shape is {entry.nbytes:,} bytes, more than a shape")
        return None
    size = entry.dtype.itemsize
    dims = tuple(
        int.from_bytes(raw[i : i + size], "little", signed=True) for i in range(0, len(raw), size)
    )
    if any(d < 0 for d in dims):
        m.problems.append(f"weight_shape {_shape(dims)} has a negative size")
        return None
    return dims


def _compressed(m: _Module, read: Callable[[TensorEntry], bytes | None]) -> None:
    packed, scale = m.need("weight_packed"), m.need("weight_scale")
    m.dtype_in("weight_packed", (DType.I32,))
    shape = _weight_shape(m, read)
    if packed is None or shape is None:
        return
    m.shape = shape
    if len(shape) < 2 or len(packed.shape) != len(shape) or packed.shape[:-1] != shape[:-1]:
        m.problems.append(
            f"weight_packed is {_shape(packed.shape)}, not the rows of weight_shape {_shape(shape)}"
        )
        return
    inputs, words = shape[-1], packed.shape[-1]
    bits = next((b for b in range(1, 9) if _cdiv(inputs * b, 32) == words), None)
    if bits is None:
        m.problems.append(
            f"weight_packed has {words} words a row, which no width of 1 to 8 bits gives for "
            f"{inputs} inputs"
        )
        return
    m.bits = bits
    if scale is None:
        return
    if scale.numel == 1:
        m.granularity, m.group_size = Granularity.TENSOR, math.prod(shape)
        return
    out = math.prod(shape[:-1])
    if len(scale.shape) != len(shape) or scale.shape[:-1] != shape[:-1]:
        m.problems.append(
            f"weight_scale is {_shape(scale.shape)}, not [{', '.join(map(str, shape[:-1]))}, "
            "groups]"
        )
        return
    groups = scale.shape[-1]
    _groups(m, inputs, groups)
    zero = m.part("weight_zero_point")
    if zero is not None and zero.shape != scale.shape:  # packed along the rows
        rows = shape[-2] if len(shape) >= 2 else out
        m.expect(
            "weight_zero_point",
            (*shape[:-2], _cdiv(rows * bits, 32), groups),
            f"{rows} rows at {bits} bits and {groups} groups",
        )


def _nvfp4(m: _Module) -> None:
    packed, scale = m.need("weight_packed"), m.need("weight_scale")
    m.dtype_in("weight_packed", (DType.U8,))
    m.bits = 4
    if packed is None or scale is None or len(packed.shape) != 2:
        return
    out, inputs = packed.shape[0], 2 * packed.shape[1]
    m.shape = (out, inputs)
    if len(scale.shape) != 2 or scale.shape[0] != out:
        m.problems.append(f"weight_scale is {_shape(scale.shape)}, not [{out}, groups]")
        return
    _groups(m, inputs, scale.shape[1])


# --- recognition --------------------------------------------------------------------------------

#: Tensor name suffix -> its role in a quantized module (``weight`` last: longer ones first).
_MEMBERS: tuple[tuple[str, str], ...] = (
    ("qweight", "qweight"), ("qzeros", "qzeros"), ("scales", "scales"), ("g_idx", "g_idx"),
    ("weight.absmax", "absmax"), ("weight.quant_map", "quant_map"),
    ("weight.nested_absmax", "nested_absmax"), ("weight.nested_quant_map", "nested_quant_map"),
    ("SCB", "SCB"), ("weight_format", "weight_format"),
    ("weight_scale_inv", "weight_scale_inv"), ("weight_scale", "weight_scale"),
    ("input_scale", "input_scale"), ("weight_zero_point", "weight_zero_point"),
    ("weight_packed", "weight_packed"), ("weight_shape", "weight_shape"),
    ("weight_global_scale", "weight_global_scale"), ("input_global_scale", "input_global_scale"),
    ("weight_g_idx", "weight_g_idx"), ("weight", "weight"),
)  # fmt: skip


#: last name segment -> the (suffix, role) pairs ending in it (one dict lookup a tensor).
_BY_LAST: dict[str, tuple[tuple[str, str], ...]] = {}
for _suffix, _role in _MEMBERS:
    _last = _suffix.rpartition(".")[2]
    _BY_LAST[_last] = (*_BY_LAST.get(_last, ()), ("." + _suffix, _role))


#: Last name segments only quantized layouts have (``weight`` and ``bias`` every model has).
_ANCHORS = frozenset(_BY_LAST) - {"weight"}


def _split(name: str) -> tuple[str, str] | None:
    """``(module, role)`` of a tensor name that can belong to a quantized layout."""
    head, _, last = name.rpartition(".")
    if not head:
        return None
    for suffix, role in _BY_LAST.get(last, ()):
        if name.endswith(suffix):
            return name[: -len(suffix)], role
    if last.startswith("bitsandbytes__") and head.endswith(".weight.quant_state"):
        return head.removesuffix(".weight.quant_state"), "quant_state"
    return None


def _scheme(parts: Mapping[str, TensorEntry]) -> QuantScheme | None:
    if "qweight" in parts:
        scales = parts.get("scales")
        qweight = parts["qweight"]
        packs_outputs = (
            scales is not None
            and len(scales.shape) == 2
            and len(qweight.shape) == 2
            and qweight.shape[1] != scales.shape[1]
        )
        return QuantScheme.AWQ if packs_outputs and "g_idx" not in parts else QuantScheme.GPTQ
    state = parts.get("quant_state")
    if state is not None:
        return QuantScheme.BNB_FP4 if state.name.endswith("__fp4") else QuantScheme.BNB_NF4
    if "absmax" in parts:
        return QuantScheme.BNB_NF4
    if "SCB" in parts:
        return QuantScheme.BNB_INT8
    if "weight_packed" in parts:
        packed = parts["weight_packed"]
        nvfp4 = packed.dtype is DType.U8 or "weight_global_scale" in parts
        return QuantScheme.NVFP4 if nvfp4 else QuantScheme.COMPRESSED_TENSORS
    if "weight_scale_inv" in parts:
        return QuantScheme.FP8_BLOCK
    weight = parts.get("weight")
    if "weight_scale" in parts and weight is not None:
        if weight.dtype in _FP8:
            return QuantScheme.FP8
        if weight.dtype is DType.I8:
            return QuantScheme.INT8
    return None


def read_descriptor(entry: TensorEntry, limit: int = MAX_DESCRIPTOR_BYTES) -> bytes | None:
    """The bytes of a small layout tensor, or None when it is larger than ``limit``."""
    if entry.nbytes > limit:
        return None
    return bytes(entry.load().tobytes())


def find_quantized(
    entries: Sequence[TensorEntry],
    read: Callable[[TensorEntry], bytes | None] = read_descriptor,
) -> tuple[QuantModule, ...]:
    """Every quantized module among ``entries``, in natural order of module names.

    Args:
        entries: the checkpoint's tensors.
        read: how a layout descriptor's bytes are read (``weight_shape``, ``quant_state``).

    Returns:
        The modules recognised, each with the problems its shapes show.

    Raises:
        InputError: a descriptor cannot be read.
    """
    # most files hold no quantized module: one set of last name segments tells (a 20,000-tensor
    # listing stays within a few milliseconds of the one without this)
    lasts = {e.name.rpartition(".")[2] for e in entries}
    if lasts.isdisjoint(_ANCHORS) and not any(s.startswith("bitsandbytes__") for s in lasts):
        return ()
    by_module: dict[str, dict[str, TensorEntry]] = {}
    for entry in entries:
        split = _split(entry.name)
        if split is not None:
            by_module.setdefault(split[0], {})[split[1]] = entry
    drafts: list[_Module] = []
    for module, parts in by_module.items():
        scheme = _scheme(parts)
        if scheme is None:
            continue
        m = _Module(module, scheme, _members(scheme, parts))
        _recognise(m, read)
        drafts.append(m)
    _fp8_blocks([m for m in drafts if m.granularity is Granularity.BLOCK])
    drafts.sort(key=lambda m: natural_key(m.name))
    return tuple(m.finish() for m in drafts)


#: The roles each scheme is made of (the rest of a module's tensors, e.g. ``bias``, stay plain).
_ROLES: dict[QuantScheme, tuple[str, ...]] = {
    QuantScheme.GPTQ: ("qweight", "qzeros", "scales", "g_idx"),
    QuantScheme.AWQ: ("qweight", "qzeros", "scales"),
    QuantScheme.BNB_NF4: (
        "weight",
        "absmax",
        "quant_map",
        "nested_absmax",
        "nested_quant_map",
        "quant_state",
    ),
    QuantScheme.BNB_INT8: ("weight", "SCB", "weight_format"),
    QuantScheme.FP8_BLOCK: ("weight", "weight_scale_inv", "input_scale"),
    QuantScheme.FP8: ("weight", "weight_scale", "input_scale"),
    QuantScheme.INT8: ("weight", "weight_scale", "weight_zero_point", "input_scale"),
    QuantScheme.COMPRESSED_TENSORS: (
        "weight_packed",
        "weight_shape",
        "weight_scale",
        "weight_zero_point",
        "weight_g_idx",
        "input_global_scale",
    ),
    QuantScheme.NVFP4: (
        "weight_packed",
        "weight_scale",
        "weight_global_scale",
        "input_global_scale",
    ),
}
_ROLES[QuantScheme.BNB_FP4] = _ROLES[QuantScheme.BNB_NF4]


def _members(scheme: QuantScheme, parts: Mapping[str, TensorEntry]) -> dict[str, TensorEntry]:
    return {role: parts[role] for role in _ROLES[scheme] if role in parts}


def _recognise(m: _Module, read: Callable[[TensorEntry], bytes | None]) -> None:
    if m.scheme in (QuantScheme.GPTQ, QuantScheme.AWQ):
        _gptq_awq(m)
    elif m.scheme in (QuantScheme.BNB_NF4, QuantScheme.BNB_FP4):
        _bnb_4bit(m, read)
    elif m.scheme is QuantScheme.BNB_INT8:
        _bnb_int8(m)
    elif m.scheme is QuantScheme.FP8_BLOCK:
        _fp8_block(m)
    elif m.scheme is QuantScheme.COMPRESSED_TENSORS:
        _compressed(m, read)
    elif m.scheme is QuantScheme.NVFP4:
        _nvfp4(m)
    else:
        _scaled(m)


def _fp8_blocks(modules: Sequence[_Module]) -> None:
    """One block size for the file's block-scaled modules: 128 (DeepSeek-V3's) when every
    scale grid fits it, else the smallest power of two all fit; a module that fits none of
    the others' is named."""
    fits: list[set[int]] = []
    for m in modules:
        weight, scale = m.parts["weight"], m.parts["weight_scale_inv"]
        fits.append(_block_candidates(weight.shape, scale.shape))
    common = set.intersection(*fits) if fits else set()
    if common:
        block = 128 if 128 in common else min(common)
    else:  # the size most modules fit
        counts: dict[int, int] = {}
        for f in fits:
            for b in f:
                counts[b] = counts.get(b, 0) + 1
        block = max(counts, key=lambda b: (counts[b], b == 128, -b)) if counts else 0
    for m, f in zip(modules, fits, strict=True):
        weight, scale = m.parts["weight"], m.parts["weight_scale_inv"]
        if block in f:
            m.block, m.group_size = (block, block), block * block
            continue
        m.granularity = None
        want = tuple(_cdiv(d, block) for d in weight.shape) if block else None
        m.problems.append(
            f"weight_scale_inv is {_shape(scale.shape)}, but {_shape(weight.shape)} in the "
            f"{block}x{block} blocks of the other modules make it {_shape(want)}"
            if want is not None
            else f"weight_scale_inv {_shape(scale.shape)} fits no block of {_shape(weight.shape)}"
        )


def check_group_index(module: QuantModule, entries: Mapping[str, TensorEntry]) -> QuantModule:
    """GPTQ's ``g_idx`` read and checked: every input in a group below the scale groups, and
    each group holding ``group_size`` inputs (the last may hold fewer), with act-order too.

    Raises:
        InputError: ``g_idx`` cannot be read.
    """
    name = f"{module.module}.g_idx"
    entry = entries.get(name)
    if (
        module.scheme is not QuantScheme.GPTQ
        or entry is None
        or module.group_size is None
        or module.shape is None
        or module.problems
        or entry.dtype not in (DType.I32, DType.I64)
    ):
        return module
    if entry.nbytes > MAX_GROUP_INDEX_BYTES:
        return module
    import numpy as np

    g_idx = entry.load().reshape(-1)
    inputs = module.shape[1]
    groups = _cdiv(inputs, module.group_size)
    problems: list[str] = []
    if g_idx.size and (int(g_idx.min()) < 0 or int(g_idx.max()) >= groups):
        problems.append(
            f"g_idx names groups {int(g_idx.min())} to {int(g_idx.max())}, but scales has {groups}"
        )
    else:
        counts = np.bincount(g_idx.astype(np.int64), minlength=groups)
        sizes = [min(module.group_size, inputs - g * module.group_size) for g in range(groups)]
        bad = [g for g in range(groups) if int(counts[g]) != sizes[g]]
        if bad:
            g = bad[0]
            problems.append(
                f"g_idx puts {int(counts[g])} inputs in group {g}, not the group size "
                f"{sizes[g]} ({len(bad)} groups differ)"
            )
    return replace(module, problems=tuple(problems)) if problems else module

"""What ``convert SRC out.gguf`` does besides writing: the key/values and ``--quantize``.

Key/values: a GGUF source's are carried in their order, each as the file stores it; then
``--drop-meta`` removes keys, and ``--arch``, ``--alignment``, ``--quantize`` (``general.file_type``
and ``general.quantization_version``, as llama.cpp's converter and llama-quantize write them) and
``--set-meta`` replace a key where it is or add it at the end. A split model written as one
file gets ``split.count`` 0, as ``gguf-split --merge`` gives it. ``general.architecture`` is
required (llama.cpp's loader reads it first, and the GGUF spec calls it required).

``--quantize`` chooses tensors as llama.cpp's ``convert_hf_to_gguf.py`` does for ``--outtype
q8_0`` (``ModelBase.prepare_tensors``): float weights of two or more dimensions named
``*.weight`` are quantized, except norms (``*_norm.weight``) and the kinds llama.cpp keeps in
F32 (:data:`ALWAYS_F32`); other float tensors become F32; a weight whose rows are not a whole
number of 32-value blocks becomes F16 (gguf-py's ``QuantError`` fallback). Integer tensors and
GGUF's quantized blocks are kept as they are.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from ckptctl.dtypes import DType
from ckptctl.errors import CkptError, SelectionError
from ckptctl.fix import Note, Option, closest
from ckptctl.formats.gguf._ggml import GGML_TYPES_BY_NAME, GGMLType, ValueType
from ckptctl.formats.gguf._kv import TypedValue, parse_set_meta
from ckptctl.formats.gguf._write import valid_alignment
from ckptctl.model import STORED_TYPE, ComputedData

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from numpy.typing import NDArray

    from ckptctl.model import TensorEntry

ARCHITECTURE = "general.architecture"
ALIGNMENT = "general.alignment"
FILE_TYPE = "general.file_type"
QUANTIZATION_VERSION = "general.quantization_version"
SPLIT_COUNT = "split.count"
#: ``GGML_QUANT_VERSION``: the block layouts' version llama.cpp writes with quantized files.
QUANT_VERSION = 2
#: ``--quantize`` choices: the GGML type and llama.cpp's ``general.file_type``
#: (``LlamaFileType.MOSTLY_Q8_0``, ``MOSTLY_Q4_0``).
QUANTIZE_TYPES = {"q8_0": ("Q8_0", 7), "q4_0": ("Q4_0", 2)}
#: Weights ``convert_hf_to_gguf.py`` keeps in F32 whatever the output type (gguf-py 0.19.0's
#: names of MODEL_TENSOR FFN_GATE_INP, FFN_GATE_INP_SHEXP, POS_EMBD, TOKEN_TYPES, SSM_CONV1D,
#: SHORTCONV_CONV, TIME_MIX_FIRST, _W1, _W2, _DECAY_W1, _DECAY_W2, _LERP_FUSED, POSNET_NORM1/2,
#: V_ENC_EMBD_POS, A_ENC_EMBD_POS, ALTUP_CORRECT_COEF, ALTUP_PREDICT_COEF, SSM_CONV1D_Q/K/V,
#: INDEXER_PROJ).
ALWAYS_F32 = re.compile(
    r"^(?:blk\.\d+\.(?:ffn_gate_inp|ffn_gate_inp_shexp|ssm_conv1d|ssm_conv1d_[qkv]"
    r"|shortconv\.conv|time_mix_(?:first|w1|w2|decay_w1|decay_w2|lerp_fused)"
    r"|altup_(?:correct|predict)_coef|indexer\.proj)"
    r"|position_embd|token_types|posnet\.\d+\.norm[12]|[va]\.position_embd)\.weight$"
)
_FLOATS = frozenset({DType.F64, DType.F32, DType.F16, DType.BF16})


def edit_key_values(
    carried: Mapping[str, object],
    *,
    arch: str | None = None,
    alignment: int | None = None,
    quantize: str | None = None,
    set_meta: Sequence[str] = (),
    drop_meta: Sequence[str] = (),
    merged_split: bool = False,
) -> dict[str, object]:
    """The key/values to write, in order (see the module docstring).

    Args:
        carried: the source's key/values (``Checkpoint.typed_metadata``); empty for another
            format.
        arch: ``general.architecture``.
        alignment: ``general.alignment`` (a power of two up to 1 MiB).
        quantize: a :data:`QUANTIZE_TYPES` name: sets the file type and quantization version.
        set_meta: ``KEY=TYPE:VALUE`` texts (``_kv.parse_set_meta``).
        drop_meta: keys to remove; each must be one ``carried`` has.
        merged_split: the source is a split model written as one file.

    Raises:
        SelectionError: a bad ``--set-meta``, a key given twice or both dropped and set, an
            unknown key to drop, a bad alignment, no (or a non-string) architecture.
    """
    named, given = _explicit(arch, alignment, set_meta)
    values = dict(carried)
    for key in drop_meta:
        if key not in values:
            raise _unknown_key(key, carried)
        if key in named or key in given:
            raise SelectionError(f"key {key!r} is both dropped and set")
        del values[key]
    if merged_split and SPLIT_COUNT in values:
        values[SPLIT_COUNT] = TypedValue(ValueType.UINT16, 0)
    values.update(named)  # a new key goes at the end: --arch first, as GGUFWriter writes it
    if quantize is not None:
        values[FILE_TYPE] = TypedValue(ValueType.UINT32, QUANTIZE_TYPES[quantize][1])
        values[QUANTIZATION_VERSION] = TypedValue(ValueType.UINT32, QUANT_VERSION)
    values.update(given)
    _check(values)
    return values


def _explicit(
    arch: str | None, alignment: int | None, set_meta: Sequence[str]
) -> tuple[dict[str, TypedValue], dict[str, TypedValue]]:
    """The keys ``arch`` and ``alignment`` set, and those ``set_meta`` sets: each key once."""
    given: list[tuple[str, TypedValue, str]] = []
    if arch is not None:
        given.append((ARCHITECTURE, TypedValue(ValueType.STRING, arch), "arch"))
    if alignment is not None:
        given.append((ALIGNMENT, TypedValue(ValueType.UINT32, alignment), "alignment"))
    given.extend((*parse_set_meta(text), "set_meta") for text in set_meta)
    by: dict[str, str] = {}
    for key, _, option in given:
        if key in by:
            raise SelectionError(
                f"key {key!r} is set twice",
                hint=Note("set it once, with {fix0} or {fix1}",
                          (Option(by[key], takes_value=True), Option(option, takes_value=True))),
            )  # fmt: skip
        by[key] = option
    named = {key: value for key, value, option in given if option != "set_meta"}
    return named, {key: value for key, value, option in given if option == "set_meta"}


def _unknown_key(key: str, carried: Mapping[str, object]) -> SelectionError:
    if not carried:
        return SelectionError(f"cannot drop key {key!r}: the source has no GGUF key/values")
    guess = closest(key, carried)
    return SelectionError(
        f"cannot drop key {key!r}: the source has no such key"
        + (f"; did you mean {guess!r}?" if guess else ""),
        hint=f"the source's {len(carried)} keys are the names in its metadata",
    )


def _check(values: Mapping[str, object]) -> None:
    found = values.get(ALIGNMENT)
    if found is not None and not (
        getattr(found, "type", None) is ValueType.UINT32
        and valid_alignment(getattr(found, "value", None))
    ):
        raise SelectionError(
            "general.alignment must be a u32 power of two up to 1 MiB",
            hint=Note("set it with {fix0}", (Option("alignment", "32"),)),
        )
    arch = values.get(ARCHITECTURE)
    if arch is None:
        raise SelectionError(
            "a GGUF file needs general.architecture (llama.cpp reads it first to load a model)",
            hint=Note("name it with {fix0}", (Option("arch", "llama"),)),
        )
    if getattr(arch, "type", None) is not ValueType.STRING:
        raise SelectionError("general.architecture must be a string (str)")


# --- --quantize -------------------------------------------------------------------------------


def quantize_entries(
    entries: Sequence[TensorEntry], name: str
) -> tuple[list[TensorEntry], dict[str, int]]:
    """``entries`` as ``convert_hf_to_gguf.py`` stores them with ``--outtype`` ``name`` (q8_0,
    q4_0): see the module docstring. Values are encoded when the writer reads them.

    Returns:
        The entries, and how many became each GGML type (``{"Q8_0": 7, "F32": 2}``).
    """
    ggml = GGML_TYPES_BY_NAME[QUANTIZE_TYPES[name][0]]
    out: list[TensorEntry] = []
    counts: dict[str, int] = {}
    for entry in entries:
        target = _target(entry, ggml)
        if target is not None:
            counts[target.name] = counts.get(target.name, 0) + 1
            if target.plain is not entry.dtype:
                entry = _converted(entry, target)
        out.append(entry)
    return out, counts


def _target(entry: TensorEntry, ggml: GGMLType) -> GGMLType | None:
    """The type ``convert_hf_to_gguf.py`` gives a float tensor; None for others."""
    if STORED_TYPE in entry.extra or entry.dtype not in _FLOATS:
        return None
    f32 = GGML_TYPES_BY_NAME["F32"]
    if (
        len(entry.shape) <= 1
        or entry.name.endswith("_norm.weight")
        or not entry.name.endswith((".weight", ".lora_a", ".lora_b"))
        or ALWAYS_F32.match(entry.name)
    ):
        return f32
    if entry.shape[-1] % ggml.block_size:
        return GGML_TYPES_BY_NAME["F16"]
    return ggml


def _converted(entry: TensorEntry, ggml: GGMLType) -> TensorEntry:
    if ggml.plain is not None:
        numel = math.prod(entry.shape)
        return replace(
            entry,
            dtype=ggml.plain,
            nbytes=numel * ggml.plain.itemsize,
            offset=None,
            source_dtype=None,
            data=ComputedData(partial(_plain, entry, ggml.plain)),
        )
    nbytes = ggml.nbytes(math.prod(entry.shape))
    return replace(
        entry,
        dtype=DType.U8,
        shape=(nbytes,),
        nbytes=nbytes,
        offset=None,
        source_dtype=ggml.name,
        data=ComputedData(partial(_blocks, entry, ggml)),
        extra={
            STORED_TYPE: ggml.name,
            "logical_shape": json.dumps(list(entry.shape)),
            "quantized": ggml.name,
        },
    )


def _values(entry: TensorEntry) -> NDArray[Any]:
    """The values as float32, as ``convert_hf_to_gguf.py`` has them (torch casts other floats
    to float32 first)."""
    import numpy as np

    from ckptctl.dtypes import to_float

    return to_float(entry.load(), entry.dtype).astype(np.float32, copy=False)


def _plain(entry: TensorEntry, dtype: DType) -> NDArray[Any]:
    return _values(entry).astype(dtype.numpy)


def _blocks(entry: TensorEntry, ggml: GGMLType) -> NDArray[Any]:
    from ckptctl.formats.gguf._quants import quantize

    try:
        return quantize(_values(entry), ggml)
    except CkptError as exc:
        raise type(exc)(f"tensor {entry.name!r}: {exc.message}", hint=exc.hint) from None

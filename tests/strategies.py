"""Hypothesis strategies: dtypes, shapes, tensor names and whole checkpoints."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from ckptctl.dtypes import DType
from ckptctl.model import ComputedData, TensorEntry

ALL_DTYPES = tuple(DType)

shapes = st.lists(st.integers(min_value=0, max_value=5), min_size=0, max_size=4).map(tuple)

tensor_names = st.text(
    alphabet=st.characters(
        whitelist_categories=("Ll", "Lu", "Nd"), whitelist_characters="._-", max_codepoint=0x2FF
    ),
    min_size=1,
    max_size=40,
).filter(lambda s: s != "__metadata__")  # safetensors' reserved key: its own tests cover it


def make_entry(name: str, dtype: DType, shape: tuple[int, ...], raw: bytes) -> TensorEntry:
    """An in-memory entry whose bytes are ``raw``."""
    assert len(raw) == math.prod(shape) * dtype.itemsize
    return TensorEntry(
        name=name,
        dtype=dtype,
        shape=shape,
        nbytes=len(raw),
        offset=None,
        data=ComputedData(lambda: raw),
    )


def array_entry(name: str, array: np.ndarray, dtype: DType | None = None) -> TensorEntry:
    """An in-memory entry holding ``array`` (dtype inferred from numpy unless given)."""
    if dtype is None:
        dtype = next(d for d in DType if d.is_native and d.numpy == array.dtype.newbyteorder("<"))
    raw = np.ascontiguousarray(array).astype(dtype.numpy).tobytes()
    return make_entry(name, dtype, tuple(array.shape), raw)


@st.composite
def entries(draw: st.DrawFn, dtypes: tuple[DType, ...] = ALL_DTYPES) -> TensorEntry:
    """One tensor entry with random bytes (bools are 0/1)."""
    name = draw(tensor_names)
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(shapes)
    n = math.prod(shape) * dtype.itemsize
    if dtype is DType.BOOL:
        raw = bytes(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    else:
        raw = draw(st.binary(min_size=n, max_size=n))
    return make_entry(name, dtype, shape, raw)


@st.composite
def checkpoints(
    draw: st.DrawFn, dtypes: tuple[DType, ...] = ALL_DTYPES, max_tensors: int = 6
) -> list[TensorEntry]:
    """A list of entries with unique names."""
    items = draw(
        st.lists(entries(dtypes), min_size=0, max_size=max_tensors, unique_by=lambda e: e.name)
    )
    return list(items)


metadata_maps = st.dictionaries(
    st.text(min_size=1, max_size=12).filter(lambda s: s != "__metadata__" and s.isprintable()),
    st.text(max_size=20).filter(str.isprintable),
    max_size=4,
)

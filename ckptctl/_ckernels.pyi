"""Types of the optional C kernels (ckptctl/_ckernels.c); see :func:`ckptctl.dtypes.ckernels`.

Every function reads the C-contiguous buffer ``src`` and writes the writable, C-contiguous,
non-overlapping buffer ``dst``; counts and shapes are checked against both (ValueError).
"""

from typing_extensions import Buffer

def f32_to_bf16(src: Buffer, dst: Buffer, n: int, /) -> None: ...
def f32_to_f16(src: Buffer, dst: Buffer, n: int, /) -> None: ...
def f16_to_f32(src: Buffer, dst: Buffer, n: int, /) -> None: ...
def bf16_to_f32(src: Buffer, dst: Buffer, n: int, /) -> None: ...
def transpose(
    src: Buffer,
    dst: Buffer,
    rows: int,
    cols: int,
    src_stride: int,
    dst_stride: int,
    itemsize: int,
    /,
) -> None: ...

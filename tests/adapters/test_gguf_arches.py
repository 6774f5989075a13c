"""``gguf-to-hf`` / ``hf-to-gguf`` on architectures beyond the llama family (issue 45).

Ground truth is the real producer: ``fixtures/valid/gguf/arches/NAME.gguf`` is what llama.cpp's
own ``convert_hf_to_gguf.py`` wrote from the tiny transformers model saved beside it
(``arches/NAME/model.safetensors`` + ``config.json``; ``fixtures/make_gguf_arches.py``). The GGUF
side is read with gguf-py's ``GGUFReader``, the Hugging Face side from the safetensors bytes.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from ckptctl.ops.convert import ConvertOptions, convert
from tests.conftest import VALID

ARCHES = VALID / "gguf" / "arches"

#: (dtype, shape, bytes) of a tensor.
Raw = tuple[str, tuple[int, ...], bytes]


def _safetensors(path: Path) -> dict[str, Raw]:
    """Every tensor of a safetensors file, as its header and bytes say (BF16 stays raw)."""
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    header.pop("__metadata__", None)
    body = data[8 + size :]
    return {
        name: (info["dtype"], tuple(info["shape"]), body[slice(*info["data_offsets"])])
        for name, info in header.items()
    }


def _gguf(path: Path) -> dict[str, Raw]:
    """Every tensor of a GGUF file as gguf-py reads it (F32 here), in row-major shape."""
    reader = gguf.GGUFReader(path)
    out = {}
    for tensor in reader.tensors:
        assert tensor.tensor_type == gguf.GGMLQuantizationType.F32, tensor.name
        shape = tuple(int(n) for n in reversed(tensor.shape))
        out[tensor.name] = ("F32", shape, np.ascontiguousarray(tensor.data).tobytes())
    return out


def _converted(tmp_path: Path, src: Path, adapter: str) -> dict[str, Raw]:
    out = tmp_path / f"{adapter}.safetensors"
    report = convert(src, out, ConvertOptions(adapters=(adapter,)))
    assert report.written
    return _safetensors(out)


def _same(got: dict[str, Raw], want: dict[str, Raw]) -> None:
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name] == value, name


@pytest.mark.parametrize("name", ["qwen3"])
def test_gguf_to_hf_of_llama_cpp_output_is_the_transformers_model(
    tmp_path: Path, name: str
) -> None:
    got = _converted(tmp_path, ARCHES / f"{name}.gguf", "gguf-to-hf")
    _same(got, _safetensors(ARCHES / name / "model.safetensors"))


@pytest.mark.parametrize("name", ["qwen3"])
def test_hf_to_gguf_is_what_convert_hf_to_gguf_writes(tmp_path: Path, name: str) -> None:
    got = _converted(tmp_path, ARCHES / name / "model.safetensors", "hf-to-gguf")
    _same(got, _gguf(ARCHES / f"{name}.gguf"))


def test_qwen3_q_k_norms_are_named_and_its_rows_stay(tmp_path: Path) -> None:
    got = _converted(tmp_path, ARCHES / "qwen3.gguf", "gguf-to-hf")
    assert got["model.layers.1.self_attn.q_norm.weight"][1] == (8,)  # one norm per head dim
    gguf_side = _gguf(ARCHES / "qwen3.gguf")
    # no permute: the q rows are llama.cpp's bytes unchanged
    assert got["model.layers.0.self_attn.q_proj.weight"][2] == gguf_side["blk.0.attn_q.weight"][2]

"""``verify`` on GGUF files (issue 45): ``--no-nan`` scans quantized tensors' decoded values, and
``gguf-layout`` warns about an architecture llama.cpp does not know.

Ground truth: gguf-py's ``gguf.quants.dequantize`` for the values (how many NaN and Inf a
block holds) and gguf-py's ``MODEL_ARCH_NAMES`` for the architectures.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from ckptctl.formats.gguf._arches import KNOWN_ARCHITECTURES
from tests.conftest import VALID
from tests.formats.test_gguf_hostile import F32, Q8_0, gguf_file, info, kv_string

F16_NAN, F16_INF = 0x7E00, 0x7C00


def _q8_0_block(scale_bits: int, quants: range) -> bytes:
    return struct.pack("<H", scale_bits) + bytes(q & 0xFF for q in quants)


def _findings(stdout: str) -> dict[str, dict[str, object]]:
    return {f["check"]: f for f in json.loads(stdout)["files"][0]["findings"]}


def _quantized_file(path: Path, scale_bits: int) -> bytes:
    """One Q8_0 tensor of two blocks (the second's scale ``scale_bits``) and one F32 tensor."""
    blocks = _q8_0_block(0x3C00, range(-16, 16)) + _q8_0_block(scale_bits, range(32))
    data = blocks + bytes(-len(blocks) % 32) + np.ones(4, dtype=np.float32).tobytes()
    infos = [info("q", (64,), Q8_0), info("w", (4,), F32, offset=len(blocks) + (-len(blocks) % 32))]
    raw = gguf_file([kv_string("general.architecture", "llama")], infos, data)
    path.write_bytes(raw)
    return blocks


@pytest.mark.parametrize(("bits", "kind"), [(F16_NAN, "nan"), (F16_INF, "inf")])
def test_no_nan_decodes_quantized_blocks(run_cli, tmp_path: Path, bits: int, kind: str) -> None:
    path = tmp_path / "q.gguf"
    blocks = _quantized_file(path, bits)
    with np.errstate(all="ignore"):  # inf * 0 is NaN, and numpy says so
        raw = np.frombuffer(blocks, dtype=np.uint8)
        values = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q8_0)
    want = int(np.isnan(values).sum()) if kind == "nan" else int(np.isinf(values).sum())
    assert want > 0
    result = run_cli("verify", path, "--no-nan", "--json")
    assert result.code == 1
    finding = _findings(result.stdout)["no-nan"]
    assert finding["status"] == "fail"
    details = finding["details"]
    assert isinstance(details, dict)
    (bad,) = details["tensors"]
    assert bad["name"] == "q"
    assert bad["dtype"] == "Q8_0"
    assert bad[kind] == want


def test_no_nan_counts_quantized_values_when_clean(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "q.gguf"
    _quantized_file(path, 0x3C00)
    result = run_cli("verify", path, "--no-nan", "--json")
    assert result.code == 0, result.stdout
    details = _findings(result.stdout)["no-nan"]["details"]
    assert isinstance(details, dict)
    assert details["scanned"] == 2
    assert details["elements"] == 64 + 4


def test_known_architectures_are_gguf_py_s() -> None:
    assert set(gguf.MODEL_ARCH_NAMES.values()) == KNOWN_ARCHITECTURES


def test_unknown_architecture_warns_naming_it(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "odd.gguf"
    path.write_bytes(gguf_file([kv_string("general.architecture", "notamodel")], [], b""))
    result = run_cli("verify", path, "--json")
    finding = _findings(result.stdout)["gguf-layout"]
    assert finding["status"] == "warn"
    assert "notamodel" in str(finding["message"])


def test_known_architecture_passes(run_cli) -> None:
    result = run_cli("verify", VALID / "gguf" / "tiny_llama.gguf", "--json")
    assert _findings(result.stdout)["gguf-layout"]["status"] == "ok"

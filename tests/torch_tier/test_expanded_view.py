"""torch parity for expanded views (issue 25): ckptctl reads and converts a stride-0 view to
the values torch gives it.

The files are our own generator's (fixtures/hostile/limits/make_limits.py: only
``_rebuild_tensor_v2``, ``FloatStorage`` and ``OrderedDict``), loaded with
``torch.load(weights_only=True)``, which runs nothing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ckptctl import open_checkpoint
from ckptctl.ops.convert import convert
from tests.conftest import load_module

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

LIMITS = Path(__file__).resolve().parents[2] / "fixtures" / "hostile" / "limits"


def test_expanded_view_reads_like_torch() -> None:
    path = LIMITS / "pt_expanded_view.pt"
    ref = torch.load(path, weights_only=True)["w"]
    assert (tuple(ref.shape), ref.stride()) == ((2**26, 4), (0, 1))
    with open_checkpoint(path) as ckpt:
        got = ckpt["w"].load()
    for rows in (slice(0, 3), slice(2**25, 2**25 + 2), slice(-2, None)):
        np.testing.assert_array_equal(got[rows], ref[rows].numpy())


def test_converted_expanded_view_holds_torch_values(tmp_path: Path) -> None:
    make_limits = load_module(LIMITS / "make_limits.py")
    src = tmp_path / "expanded.pt"
    src.write_bytes(make_limits._expanded_view(4, (2**21, 4), (0, 1)))
    dst = tmp_path / "expanded.safetensors"
    convert(src, dst)
    ref = torch.load(src, weights_only=True)["w"].contiguous().numpy()
    with open_checkpoint(dst) as ckpt:
        np.testing.assert_array_equal(ckpt["w"].load(), ref)

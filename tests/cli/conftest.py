"""Fixtures shared by the CLI tests."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file


@pytest.fixture
def eight(tmp_path):
    """Eight 64 KiB F32 tensors (512 KiB): enough for a progress bar with a total, speed and
    ETA."""
    rng = np.random.default_rng(48)
    tensors = {f"layer{i}.weight": rng.random((128, 128), dtype=np.float32) for i in range(8)}
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    return path

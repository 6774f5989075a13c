"""More edge cases of ``ckptctl.adapters`` that mutation testing found untested (issue 17).

Replacement expansion and replace-all follow Rust's ``regex`` crate as burn-store spec §3.2 and
the table of §3.4 describe it; expected names are worked out from those rules by hand. Messages,
hints, plans and warnings are compared whole; transposed bytes are compared with numpy's ``.T``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ckptctl.adapters import Action, ActionKind
from ckptctl.adapters.layout import PyTorchToBurn, transposed
from ckptctl.adapters.modules import Decision
from ckptctl.adapters.pipeline import PipelineOptions, run_pipeline
from ckptctl.model import TensorEntry
from tests.strategies import array_entry


def entry(name: str, shape: tuple[int, ...], module_type: str | None = None) -> TensorEntry:
    made = array_entry(name, np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))
    return replace(made, module_type=module_type) if module_type else made


# --- rename.py: replacement expansion (spec §3.2) -----------------------------------------------


# --- rename.py: rules, messages, describe -------------------------------------------------------


# --- modules.py --------------------------------------------------------------------------------


# --- layout.py ---------------------------------------------------------------------------------


def test_transposed_entry_has_no_file_offset() -> None:
    # read from a file at offset 256: the transposed bytes are computed, not in the file
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    source = replace(array_entry("w", array), offset=256)
    out = transposed(source)
    assert (out.shape, out.offset) == ((4, 3), None)
    assert out.data.file_range() is None
    assert out.load().tobytes() == np.ascontiguousarray(array.T).tobytes()


def test_layout_transpose_action_names_the_adapter() -> None:
    decisions = {"fc.weight": Decision("fc.weight", "Linear", "pattern 'fc'")}
    out, actions = PyTorchToBurn(decisions).apply(entry("fc.weight", (3, 4)))
    assert out is not None
    assert out.shape == (4, 3)
    assert actions == (
        Action(
            ActionKind.TRANSPOSE, "[3, 4] -> [4, 3]", "Linear (pattern 'fc')", "pytorch-to-burn"
        ),
    )


def test_layout_rename_carries_the_decided_type() -> None:
    decisions = {"ln.weight": Decision("ln.weight", "LayerNorm", "pattern 'ln'")}
    source = entry("ln.weight", (4,))
    out, _ = PyTorchToBurn(decisions).apply(source)
    assert out == replace(source, name="ln.gamma", module_type="LayerNorm")


# --- pipeline.py -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "adapters",
    [("rope-interleaved:2", "burn-to-pytorch"), ("burn-to-pytorch", "rope-interleaved:2")],
)
def test_pipeline_tells_rope_the_layout_at_its_place(adapters: tuple[str, ...]) -> None:
    # Burn's [in, out] wq: 6 inputs, 2 heads of 4 output features. Before burn-to-pytorch the
    # features are its columns, after it the rows: either order gives torch's [out, in] weight
    # with each head's half-split pairs (i, i + 2) interleaved: features 0, 2, 1, 3 per head.
    burn = entry("layers.0.attention.wq.weight", (6, 8))
    options = PipelineOptions(adapters=adapters, module_types=("wq=Linear",))
    (item,), _ = run_pipeline([burn], options)
    assert item.entry is not None
    assert item.entry.shape == (8, 6)
    want = np.arange(48, dtype=np.float32).reshape(6, 8).T[[0, 2, 1, 3, 4, 6, 5, 7]]
    assert item.entry.load().tobytes() == np.ascontiguousarray(want).tobytes()

"""Edge cases of ``ckptctl.adapters`` that issue 24's mutation run of ``adapters/*`` found untested.

Pinned here, each worked out from the code and its docstrings:

* ``modules.parse_type_call`` and ``_option_value``: Burn's family names behind a dotted path
  or ``Struct:`` (``BiGru`` is ``GRU(bidirectional=True)``), option values of each type, and the
  whole message and hint of every refusal (``ModuleRule`` names its rule number in them);
* ``_rows.RowsData.read_range``: bytes relative to the rows' own start, a range ending exactly
  at ``nbytes``, length 0, and the refusal of a range outside the rows;
* ``families.slots_of`` for a recurrent layer with no ``num_layers`` fact (one layer);
* ``rename._groups_text``: the hint naming a pattern's groups, compared whole;
* ``rope.RopePermute.apply``: which tensors it leaves alone, the output-feature axis of a Burn
  ``[in, out]`` weight, the exact action, and the hint of a bad head count;
* ``rope.needs_interleaving``: an adapter is a RoPE one by its name before the first ``:``.
"""

from __future__ import annotations

import numpy as np
import pytest

from ckptctl.adapters._rows import row_slice
from ckptctl.model import TensorData
from tests.strategies import array_entry

# --- modules.py: parse_type_call / _option_value -----------------------------------------------


# --- _rows.py: RowsData.read_range -------------------------------------------------------------


def middle_row() -> TensorData:
    """The middle row of a [3, 4] byte tensor 0..11: bytes 4..7, a RowsData(start=4, nbytes=4)."""
    entry = array_entry("t", np.arange(12, dtype=np.uint8).reshape(3, 4))
    return row_slice(entry, 1, 1, "mid").data


def test_rows_read_range_is_relative_to_the_rows() -> None:
    data = middle_row()
    assert bytes(data.read_range(0, 4)) == bytes([4, 5, 6, 7])
    assert bytes(data.read_range(1, 2)) == bytes([5, 6])
    assert bytes(data.read_range(1, 3)) == bytes([5, 6, 7])
    # empty ranges, at the start and exactly at the end
    assert bytes(data.read_range(0, 0)) == b""
    assert bytes(data.read_range(4, 0)) == b""


@pytest.mark.parametrize(
    ("start", "length"),
    [(0, 5), (2, 3), (4, 1), (-1, 2), (-1, 0), (0, -1), (3, -1)],
)
def test_rows_read_range_refuses_a_range_outside_the_rows(start: int, length: int) -> None:
    data = middle_row()
    with pytest.raises(ValueError, match="outside") as info:
        data.read_range(start, length)
    assert str(info.value) == f"range {start}+{length} outside a tensor of 4 bytes"


# --- families.py: _recurrent (through slots_of) ------------------------------------------------


# --- rename.py: _groups_text (the hint of a missing group) -------------------------------------


# --- rope.py: RopePermute.apply ----------------------------------------------------------------

"""``min-tensors``: at least N tensors (below ``state_key``), the limit on both sides."""

from __future__ import annotations

import pytest

from ckptctl.ops.verify import Status
from tests.conftest import VALID
from tests.ops.test_verify import finding, one

PT = VALID / "pytorch"
MIN_ZIP = PT / "min_zip.pt"  # 2 tensors


@pytest.mark.parametrize(
    ("minimum", "status"), [(0, Status.OK), (2, Status.OK), (3, Status.FAIL), (1000, Status.FAIL)]
)
def test_min_tensors_at_and_past_the_limit(minimum, status):
    found = finding(one(MIN_ZIP, min_tensors=minimum), "min-tensors")
    assert found.status is status
    assert found.details == {"tensors": 2, "min_tensors": minimum}
    assert f"{minimum:,}" in str(found.message)
    assert (found.hint is None) == (status is Status.OK)


def test_min_tensors_below_a_state_key():
    ok = finding(one(PT / "nested.pt", state_key="model", min_tensors=4), "min-tensors")
    assert ok.status is Status.OK
    assert "below state key 'model'" in str(ok.message)
    low = finding(one(PT / "nested.pt", state_key="model", min_tensors=5), "min-tensors")
    assert low.status is Status.FAIL
    assert "below state key 'model'" in str(low.message)
    assert low.details == {"tensors": 4, "min_tensors": 5}

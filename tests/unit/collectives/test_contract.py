"""The kernel contract's helpers."""

import numpy as np
import pytest

from commsim.collectives.contract import KINDS, Algorithm, check_kind, checked_launch


def test_kinds_and_checks():
    assert KINDS == ("all_reduce", "reduce_scatter", "all_gather")
    assert checked_launch([1, 2], 2).dtype == np.float64
    with pytest.raises(ValueError, match=r"launch must have shape \(3,\)"):
        checked_launch(np.zeros(2), 3)
    with pytest.raises(ValueError, match="'x' implements all_reduce, not 'all_gather'"):
        check_kind("x", "all_gather", ("all_reduce",))
    with pytest.raises(ValueError, match="kinds must be among"):
        Algorithm("x", (), lambda kind, fabric, size: None)

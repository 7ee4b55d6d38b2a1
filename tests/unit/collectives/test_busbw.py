"""Bus bandwidth in nccl-tests' convention (doc/PERFORMANCE.md)."""

import pytest

from commsim.collectives.busbw import algbw, busbw, busbw_factor


def test_busbw_factors():
    assert busbw_factor("all_reduce", 8) == 2 * 7 / 8
    assert busbw_factor("reduce_scatter", 8) == busbw_factor("all_gather", 8) == 7 / 8
    assert busbw("all_reduce", 100.0, 1.0, 4) == 150.0
    assert algbw(100.0, 0.0) == float("inf")
    with pytest.raises(ValueError):
        busbw_factor("alltoall", 4)

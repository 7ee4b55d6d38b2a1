"""Closed forms of the pure cost module, against hand-computed values."""

import numpy as np
import pytest

from commsim.collectives.busbw import busbw
from commsim.network.costs import (
    ddp_buckets,
    ring_allreduce_time,
    ring_traffic_bytes,
)


@pytest.mark.parametrize("gbps, seconds", [(100, 0.56), (25, 2.24)])
def test_seed_numbers_ring_bandwidth_term(gbps, seconds):
    # 1e9 fp32 parameters = 4 GB; 8 ranks: 2 * 7/8 * 4 GB = 7 GB over the link
    assert ring_traffic_bytes(4e9, 8) == pytest.approx(7e9)
    assert ring_allreduce_time(4e9, 8, 0.0, gbps * 1e9 / 8) == pytest.approx(seconds)
    # the rule of thumb "traffic = 2 x model size" would say 8 GB
    assert 2 * 4e9 / (gbps * 1e9 / 8) == pytest.approx(seconds * 8 / 7)


def test_ring_latency_term():
    assert ring_allreduce_time(0.0, 1024, 5e-6, 1e9) == pytest.approx(2 * 1023 * 5e-6)
    assert ring_allreduce_time(123.0, 1, 5e-6, 1e9) == 0.0


def test_busbw_factor():
    # nccl-tests: busbw = algbw * 2(n-1)/n
    assert busbw("all_reduce", 8e9, 1.0, 8) == pytest.approx(8e9 * 14 / 8)


def test_ddp_buckets_layout():
    sizes = ddp_buckets(4e9, 1e6, 25e6)
    assert sizes[0] == 1e6
    assert np.all(sizes[1:-1] == 25e6)
    assert sizes.sum() == pytest.approx(4e9)
    assert len(sizes) == 1 + 160  # 1 MB, then 159 full buckets and a 24 MB remainder
    assert ddp_buckets(10.0, 1e6, 25e6).tolist() == [10.0]
    assert ddp_buckets(4e9, 4e9, 4e9).tolist() == [4e9]
    assert ddp_buckets(51e6, 1e6, 25e6).tolist() == [1e6, 25e6, 25e6]

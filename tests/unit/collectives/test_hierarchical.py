"""Hierarchical all-reduce: closed form by hand, a slow rail, and the SimPy reference."""

import pytest
from hypothesis import given, settings

from commsim.collectives import Fabric, uniform_time
from tests.unit.collectives.cases import assert_matches_reference, cases, two_level

MB = 1 << 20


def test_hierarchical_by_hand():
    S, N, g = 64 * MB, 4, 8
    f = two_level(N, g)
    expected = 2 * (g - 1) * (2e-6 + S / g / 300e9) + 2 * (N - 1) * (8e-6 + (S / (g * N)) / (50e9 / g))
    assert uniform_time("hierarchical", f, S) == pytest.approx(expected, rel=1e-12)


def test_hierarchical_slow_node_by_hand():
    # 2 nodes x 2 GPUs, node 1's network at half speed both ways: each rail's inter-node hop runs
    # at 0.5 x B_e / g; the intra stages are nominal.
    f = Fabric(nodes=2, gpus_per_node=2, intra_latency=1e-6, intra_bandwidth=100e9,
               inter_latency=4e-6, inter_bandwidth=20e9).with_slow_node(1, 0.5)
    S = 8e6
    intra = 1e-6 + (S / 2) / 100e9
    inter = 4e-6 + (S / 4) / (20e9 * 0.5 / 2)
    assert uniform_time("hierarchical", f, S) == pytest.approx(2 * intra + 2 * inter, rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(case=cases())
def test_kernel_matches_simpy_reference(case):
    assert_matches_reference("hierarchical", case)


@pytest.mark.parametrize("nodes,g", [(1, 4), (3, 1), (4, 8), (5, 3)])
def test_nominal_links_shortcut_equals_the_stage_recurrences(nodes, g):
    import numpy as np

    from commsim.collectives import hierarchical

    f = two_level(nodes=nodes, g=g)
    k = hierarchical.HierarchicalKernel("all_reduce", f.at_size(5e6), 5e6)
    assert k._uniform is not None
    launch = np.random.default_rng(nodes + g).random(f.world_size) * 1e-3
    fast = k.finish_times(launch)
    k._uniform = None  # the general path: intra rings, one ring all-reduce per rail, intra rings
    np.testing.assert_allclose(fast, k.finish_times(launch), rtol=1e-12)

"""Vectorized max-plus kernels against the per-message / per-chunk SimPy references."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from commsim.collectives import Fabric, finish_times, flat, tree
from commsim.collectives.reference import REFERENCES

small_fabrics = st.builds(
    Fabric, nodes=st.integers(1, 5), gpus_per_node=st.integers(1, 4),
    intra_latency=st.floats(0, 1e-5), intra_bandwidth=st.floats(1e9, 5e11),
    inter_latency=st.floats(0, 5e-5), inter_bandwidth=st.floats(1e9, 5e11),
).filter(lambda f: f.world_size <= 16)


@st.composite
def cases(draw):
    f = draw(small_fabrics)
    if draw(st.booleans()):  # degraded links on some ranks / nodes
        factors = st.sampled_from([1.0, 1.0, 0.5, 0.1])
        f = replace(f, intra_scale=tuple(draw(st.lists(factors, min_size=f.world_size, max_size=f.world_size))),
                    inter_scale=tuple(draw(st.lists(factors, min_size=f.nodes, max_size=f.nodes))))
    launch = draw(st.lists(st.floats(0, 2e-3), min_size=f.world_size, max_size=f.world_size))
    size = draw(st.floats(0, 8e6))
    return f, np.array(launch), size


@pytest.mark.parametrize("name", sorted(REFERENCES))
@settings(max_examples=25, deadline=None)
@given(case=cases())
def test_kernel_matches_simpy_reference(name, case):
    f, launch, size = case
    got = finish_times(name, f, launch, size)
    want = REFERENCES[name](f, launch, size)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15)


def test_late_leaf_delays_the_root_in_a_tree():
    f = flat(8, 1e-6, 10e9)
    S = 1e6
    launch = np.zeros(8)
    base = finish_times("tree", f, launch, S)
    parents = tree.dtree_parents(8)
    leaf, root0 = 7, 0
    assert leaf not in parents[0] and parents[0][root0] < 0  # 7 is a leaf of tree 0, rooted at 0
    launch[leaf] = 1e-3
    late = finish_times("tree", f, launch, S)
    assert late[root0] >= 1e-3 + 2e-6  # the root waits for the late leaf's chunks to come up
    assert np.all(late > base)          # and everyone waits for the root's broadcast


def test_late_rank_in_reduce_broadcast_only_delays_from_its_turn():
    f = flat(4, 0.0, 1e9)
    S = 1e6
    t = S / 1e9
    launch = np.array([0.0, 0.0, 0.0, 10 * t])
    got = finish_times("reduce_broadcast", f, launch, S)
    # the root takes 1 and 2 on time, waits for 3 until 10t, reduce done at 11t, then 3 copies
    np.testing.assert_allclose(got, [14 * t, 12 * t, 13 * t, 14 * t])


def test_kernels_scale_to_thousands_of_ranks():
    f = Fabric(nodes=256, gpus_per_node=8, intra_latency=3.4e-6, intra_bandwidth=450e9,
               inter_latency=14e-6, inter_bandwidth=400e9)
    rng = np.random.default_rng(0)
    launch = rng.uniform(0, 1e-3, f.world_size)
    for name in ("tree", "hierarchical", "halving_doubling", "reduce_broadcast"):
        got = finish_times(name, f, launch, 25e6)
        assert got.shape == (2048,) and np.all(got >= launch)


def test_a_slow_node_network_slows_every_algorithm():
    from commsim.network.fabric import with_slow_links
    from commsim.scenario.spec import SlowLink

    f = Fabric(nodes=4, gpus_per_node=4, intra_latency=1e-6, intra_bandwidth=300e9,
               inter_latency=5e-6, inter_bandwidth=50e9)
    slow = with_slow_links(f, [SlowLink(factor=0.25, node=2)])
    assert slow.inter_scale == (1.0, 1.0, 0.25, 1.0) and slow.intra_scale == (1.0,) * 16
    L = np.zeros(16)
    for name in ("ring", "tree", "hierarchical", "halving_doubling", "reduce_broadcast"):
        assert finish_times(name, slow, L, 64e6).max() > finish_times(name, f, L, 64e6).max() * 1.2, name
    # a ring hop inside a node degrades the sender's port; across nodes, its node's network
    assert with_slow_links(f, [SlowLink(factor=0.5, rank=1)]).intra_scale[1] == 0.5
    assert with_slow_links(f, [SlowLink(factor=0.5, rank=3)]).inter_scale == (0.5, 1.0, 1.0, 1.0)


def test_hierarchical_slow_rail_by_hand():
    # 2 nodes x 2 GPUs, node 1's network at half speed: each rail's inter-node hop runs at
    # min(1, 0.5) x B_e / g; the intra stages are nominal.
    from commsim.collectives import hierarchical

    f = Fabric(nodes=2, gpus_per_node=2, intra_latency=1e-6, intra_bandwidth=100e9,
               inter_latency=4e-6, inter_bandwidth=20e9, inter_scale=(1.0, 0.5))
    S = 8e6
    intra = 1e-6 + (S / 2) / 100e9
    inter = 4e-6 + (S / 4) / (20e9 * 0.5 / 2)
    assert hierarchical.time(f, S) == pytest.approx(2 * intra + 2 * inter, rel=1e-12)

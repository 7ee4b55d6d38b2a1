"""Vectorized max-plus kernels against the per-message / per-chunk SimPy references."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from commsim.collectives import Fabric, finish_times, flat, tree
from commsim.collectives_reference import REFERENCES

small_fabrics = st.builds(
    Fabric, nodes=st.integers(1, 5), gpus_per_node=st.integers(1, 4),
    intra_latency=st.floats(0, 1e-5), intra_bandwidth=st.floats(1e9, 5e11),
    inter_latency=st.floats(0, 5e-5), inter_bandwidth=st.floats(1e9, 5e11),
).filter(lambda f: f.world_size <= 16)


@st.composite
def cases(draw):
    f = draw(small_fabrics)
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

"""NCCL's double binary tree: its structure, closed forms by hand, and the SimPy reference."""

import math

import numpy as np
import pytest
from hypothesis import given, settings

from commsim.collectives import finish_times, flat, uniform_time
from commsim.collectives import tree
from tests.unit.collectives.cases import assert_matches_reference, cases, two_level

MB = 1 << 20
A, B = 5e-6, 10e9


def test_nccl_btree_matches_the_trees_cc_picture():
    # trees.cc's illustration for 14 ranks: 0-8, 8-{4,12}, 4-{2,6}, 12-{10,13}, 2-{1,3}, ...
    p = tree.btree_parents(14)
    assert list(p) == [-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12]
    t0, t1 = tree.dtree_parents(4)
    assert list(t0) == [-1, 2, 0, 2] and list(t1) == [1, 3, 1, -1]  # mirror: interior nodes swap
    t0, t1 = tree.dtree_parents(5)  # odd: shifted by one
    assert t1[1] == -1 and sorted(np.flatnonzero(t1 < 0)) == [1]


def test_tree_flat_two_nodes_by_hand():
    # tree 0: 1 -> 0, tree 1 (mirror): 0 -> 1; each rank sends on 2 edges (up in one tree, down in the other)
    S = 8 * MB
    C = math.ceil(S / 2 / (256 * 1024))
    o = (S / 2 / C) * 2 / B
    assert uniform_time("tree", flat(2, A, B), S) == pytest.approx(2 * (A + o) + (C - 1) * o, rel=1e-12)


def test_tree_flat_four_nodes_by_hand():
    # tree 0: 0-2-{1,3}, tree 1: 3-1-{0,2}. Ranks 1 and 2 send on 4 edges, ranks 0 and 3 on 2.
    # Heaviest path of tree 0: 1 -> 2 -> 0 (senders 1, 2: o4, o4) then 0 -> 2 -> 1 (senders 0, 2: o2, o4).
    S = 8 * MB
    f = flat(4, A, B)
    C = math.ceil(S / 2 / (256 * 1024))
    c = S / 2 / C
    o4, o2 = 4 * c / B, 2 * c / B
    assert uniform_time("tree", f, S) == pytest.approx(4 * A + 3 * o4 + o2 + (C - 1) * o4, rel=1e-12)


def test_tree_two_level_by_hand():
    # 2 nodes x 2 GPUs: tree 0 is 0 <- {1 (intra), 2 (inter)}, 3 -> 2; tree 1 mirrors it around node 1.
    # Every rank sends on 2 edges of each class it uses.
    S = 64 * MB
    f = two_level(nodes=2, g=2)
    C = math.ceil(S / 2 / (256 * 1024))
    c = S / 2 / C
    oe, oi = 2 * c / 50e9, 2 * c / 300e9
    expected = 2 * (8e-6 + oe) + 2 * (2e-6 + oi) + (C - 1) * max(oe, oi)
    assert uniform_time("tree", f, S) == pytest.approx(expected, rel=1e-12)


def test_tree_large_bandwidth_term_is_nccls_2S_over_B():
    # many nodes, no latency: interior nodes send on 4 edges, so a tree's S/2 takes ~ (S/2)/(B/4) = 2S/B
    S = 1 << 30
    t = uniform_time("tree", flat(64, 0.0, B), S)
    assert 2 * S / B <= t <= 2 * S / B * 1.05


@pytest.mark.parametrize("k", range(1, 11))
def test_tree_latency_grows_with_log2_nodes(k):
    n = 2 ** k
    assert tree.inter_depth(n) == k
    # empty message: only latency, 2 * depth * alpha against the ring's 2(n-1) alpha
    assert uniform_time("tree", flat(n, A, B), 0.0) == pytest.approx(2 * k * A, rel=1e-12)
    assert uniform_time("ring", flat(n, A, B), 0.0) == pytest.approx(2 * (n - 1) * A, rel=1e-12)


@pytest.mark.parametrize("n", [3, 5, 6, 7, 12, 100, 1000])
def test_tree_depth_log2_for_any_count(n):
    assert tree.inter_depth(n) <= math.ceil(math.log2(n)) + 1
    assert tree.inter_depth(n) >= math.floor(math.log2(n))


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


def test_a_slow_sender_slows_the_edges_it_sends_on_only():
    # one node of 4 GPUs: a chain 0 <- 1 <- 2 <- 3 (up) in both trees; rank 1's send port at 1/4
    f = two_level(nodes=1, g=4)
    S = 8 * MB
    C, c = tree.chunking(S)
    nominal = tree.edge_costs(f, [tree.rank_tree(f, p) for p in tree.dtree_parents(1)], c)[0]
    slow = tree.edge_costs(f.with_slow_sender(1, 0.25), [tree.rank_tree(f, p) for p in tree.dtree_parents(1)], c)[0]
    _, up, down = nominal
    _, up_s, down_s = slow
    assert up_s[1] == pytest.approx(4 * up[1])      # 1 -> 0: sent by rank 1
    assert down_s[2] == pytest.approx(4 * down[2])  # 1 -> 2: sent by rank 1
    np.testing.assert_array_equal(np.delete(up_s, 1), np.delete(up, 1))
    np.testing.assert_array_equal(np.delete(down_s, 2), np.delete(down, 2))


@settings(max_examples=25, deadline=None)
@given(case=cases())
def test_kernel_matches_simpy_reference(case):
    assert_matches_reference("tree", case)


@pytest.mark.parametrize("nodes,g,size", [(6, 3, 40 * MB), (7, 2, 300 * MB), (1, 5, 3 * MB)])
def test_closed_form_matches_reference_with_many_chunks_and_degraded_ports(nodes, g, size):
    # many chunks (up to MAX_CHUNKS) make every source's bottleneck term matter; launches
    # spread over more than a collective's duration, and one slow port per direction
    from commsim.collectives.reference import tree_reference

    f = two_level(nodes=nodes, g=g).with_slow_sender(1, 0.25)
    rng = np.random.default_rng(nodes * g)
    for spread in (0.0, 1e-4, 1e-2):
        launch = rng.random(f.world_size) * spread
        got = tree.TreeKernel("all_reduce", f.at_size(size), size).finish_times(launch)
        np.testing.assert_allclose(got, tree_reference(f.at_size(size), launch, size), rtol=1e-9, atol=1e-15)

"""Closed forms of the collective algorithms against hand-computed values, and their properties."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from commsim.collectives import (ALGORITHMS, ALL_REDUCE, Fabric, busbw, busbw_factor, finish_times,
                                 flat, get, table, uniform_time)
from commsim.collectives import halving_doubling, tree

MB = 1 << 20
A, B = 5e-6, 10e9  # 5 us, 10 GB/s


def two_level(nodes=4, g=8):
    return Fabric(nodes=nodes, gpus_per_node=g, intra_latency=2e-6, intra_bandwidth=300e9,
                  inter_latency=8e-6, inter_bandwidth=50e9)


# --- hand-computed closed forms -------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3, 8, 13])
def test_ring_flat_is_textbook(n):
    S = 64 * MB
    assert uniform_time("ring", flat(n, A, B), S) == pytest.approx(2 * (n - 1) * A + 2 * (n - 1) / n * S / B, rel=1e-12)


def test_ring_two_level_latency_hop_by_hop_bandwidth_at_the_network():
    f = two_level()
    S = 32 * MB
    n = 32
    mean_alpha = (4 * 8e-6 + 28 * 2e-6) / 32  # 4 network hops, 28 NVLink hops per lap
    expected = 2 * (n - 1) * mean_alpha + 2 * (n - 1) / n * S / 50e9  # the network paces the pipeline
    assert uniform_time("ring", f, S) == pytest.approx(expected, rel=1e-12)


def test_ring_single_node_uses_intra_link_only():
    f = two_level(nodes=1, g=8)
    S = 8 * MB
    assert uniform_time("ring", f, S) == pytest.approx(14 * (2e-6 + S / 8 / 300e9), rel=1e-12)


@pytest.mark.parametrize("name", ["reduce_scatter", "all_gather"])
def test_halves_are_half_a_ring(name):
    n, S = 8, 16 * MB
    assert uniform_time(name, flat(n, A, B), S) == pytest.approx((n - 1) * (A + S / n / B), rel=1e-12)
    assert uniform_time(name, two_level(), S) == pytest.approx(uniform_time("ring", two_level(), S) / 2, rel=1e-12)


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


def test_tree_large_bandwidth_term_is_ncclss_2S_over_B():
    # many nodes, no latency: interior nodes send on 4 edges, so a tree's S/2 takes ~ (S/2)/(B/4) = 2S/B
    S = 1 << 30
    t = uniform_time("tree", flat(64, 0.0, B), S)
    assert 2 * S / B <= t <= 2 * S / B * 1.05


def test_hierarchical_by_hand():
    S, N, g = 64 * MB, 4, 8
    f = two_level(N, g)
    expected = 2 * (g - 1) * (2e-6 + S / g / 300e9) + 2 * (N - 1) * (8e-6 + (S / (g * N)) / (50e9 / g))
    assert uniform_time("hierarchical", f, S) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_halving_doubling_power_of_two_is_thakur(p):
    S = 32 * MB
    expected = 2 * math.log2(p) * A + 2 * (p - 1) / p * S / B
    assert uniform_time("halving_doubling", flat(p, A, B), S) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n,p2", [(3, 2), (6, 4), (12, 8), (13, 8)])
def test_halving_doubling_non_power_of_two_folds_two_extra_steps(n, p2):
    S = 32 * MB
    expected = 2 * math.log2(p2) * A + 2 * (p2 - 1) / p2 * S / B + 2 * (A + S / B)
    assert uniform_time("halving_doubling", flat(n, A, B), S) == pytest.approx(expected, rel=1e-12)
    _, r, surv = halving_doubling.schedule(n)
    assert r == n - p2 and len(surv) == p2


def test_halving_doubling_two_level_keeps_big_exchanges_inside_the_node():
    S, N, g = 32 * MB, 4, 8
    f = two_level(N, g)
    intra = sum(2e-6 + S / 2 ** (s + 1) / 300e9 for s in range(3))
    inter = sum(8e-6 + S / 2 ** (s + 1) / (50e9 / g) for s in range(3, 5))
    assert uniform_time("halving_doubling", f, S) == pytest.approx(2 * (intra + inter), rel=1e-12)


@pytest.mark.parametrize("n", [2, 5, 16])
def test_reduce_broadcast_is_linear_in_n(n):
    S = 4 * MB
    assert uniform_time("reduce_broadcast", flat(n, A, B), S) == pytest.approx(2 * (n - 1) * (A + S / B), rel=1e-12)


def test_auto_is_the_minimum_and_switches_with_size():
    f = two_level(nodes=64, g=8)
    for S in (1024, 64 * MB, 1024 * MB):
        times = {k: uniform_time(k, f, S) for k in ALL_REDUCE if k != "auto"}
        assert uniform_time("auto", f, S) == min(times.values())
    small = {r["algorithm"]: r for r in table(["auto"], f, [1024])}["auto"]["chosen"]
    assert small != "ring"  # 2(n-1) network latencies lose to log-depth algorithms at 8 KB


def test_single_rank_costs_nothing():
    f = flat(1, A, B)
    for name in ALGORITHMS:
        assert uniform_time(name, f, MB) == 0.0


# --- busbw (nccl-tests doc/PERFORMANCE.md) --------------------------------------------------

def test_busbw_factors():
    assert busbw_factor("all_reduce", 8) == 2 * 7 / 8
    assert busbw_factor("reduce_scatter", 8) == busbw_factor("all_gather", 8) == 7 / 8
    assert busbw("all_reduce", 100.0, 1.0, 4) == 150.0
    with pytest.raises(ValueError):
        busbw_factor("alltoall", 4)


@pytest.mark.parametrize("n", [2, 4, 7, 64, 1000])
def test_ring_busbw_equals_link_bandwidth_without_latency(n):
    f = flat(n, 0.0, B)
    S = 256 * MB
    for name in ("ring", "reduce_scatter", "all_gather"):
        alg = get(name)
        assert busbw(alg.COLLECTIVE, S, alg.time(f, S), n) == pytest.approx(B, rel=1e-12)


# --- properties -----------------------------------------------------------------------------

fabrics = st.builds(Fabric, nodes=st.integers(1, 40), gpus_per_node=st.sampled_from([1, 2, 3, 4, 8]),
                    intra_latency=st.floats(0, 1e-5), intra_bandwidth=st.floats(1e9, 1e12),
                    inter_latency=st.floats(0, 5e-5), inter_bandwidth=st.floats(1e9, 1e12))


@settings(max_examples=60, deadline=None)
@given(fabrics, st.floats(0, 1e9), st.floats(1.0, 8.0), st.sampled_from(list(ALGORITHMS)))
def test_monotone_in_size(f, size, factor, name):
    assert uniform_time(name, f, size * factor) >= uniform_time(name, f, size) * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(fabrics, st.floats(1, 1e9), st.sampled_from(list(ALGORITHMS)))
def test_kernel_with_equal_launch_matches_closed_form(f, size, name):
    from commsim.collectives.kernels import resolve

    pow2 = lambda x: x & (x - 1) == 0
    runs = resolve(name, f, size)  # auto runs its pick, which may be halving-doubling
    if runs == "halving_doubling" and f.nodes > 1 and not (pow2(f.gpus_per_node) and pow2(f.world_size)):
        return  # closed form is exact only when every exchange of a step uses one link class
    t0 = 3.0
    got = finish_times(name, f, np.full(f.world_size, t0), size)
    assert got.max() == pytest.approx(t0 + uniform_time(name, f, size), rel=1e-9, abs=1e-15)


@settings(max_examples=40, deadline=None)
@given(fabrics, st.floats(1, 1e9))
def test_halving_doubling_closed_form_bounds_kernel(f, size):
    got = finish_times("halving_doubling", f, np.zeros(f.world_size), size).max()
    assert got <= uniform_time("halving_doubling", f, size) * (1 + 1e-12)


def test_ring_bandwidth_term_constant_in_n():
    S = 512 * MB
    times = [uniform_time("ring", flat(n, 0.0, B), S) for n in (8, 64, 512, 4096)]
    assert all(1.75 * S / B <= t < 2 * S / B for t in times)  # bounded by 2S/B whatever n is
    assert np.all(np.diff(times) > 0)  # 2(n-1)/n grows towards 2
    # while reduce-to-root grows linearly
    assert uniform_time("reduce_broadcast", flat(64, 0.0, B), S) == pytest.approx(63 * 2 * S / B)


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


def test_unknown_algorithm_and_bad_launch_shape():
    with pytest.raises(ValueError, match="unknown collective algorithm 'bogus'"):
        get("bogus")
    with pytest.raises(ValueError, match="shape"):
        finish_times("ring", flat(4, A, B), np.zeros(3), MB)
    with pytest.raises(ValueError, match="nodes"):
        Fabric(nodes=0, gpus_per_node=1, intra_latency=0, intra_bandwidth=1, inter_latency=0, inter_bandwidth=1)

"""The ring algorithm on a fabric: hand-computed closed forms, its halves, the SimPy reference."""

import numpy as np
import pytest
from hypothesis import given, settings

from commsim.collectives import busbw, flat, make_kernel, uniform_time
from commsim.collectives.ring import RingKernel, hop_times
from tests.unit.collectives.cases import assert_matches_reference, cases, two_level

MB = 1 << 20
A, B = 5e-6, 10e9  # 5 us, 10 GB/s


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
    k = make_kernel(name, two_level(), S)
    assert isinstance(k, RingKernel) and k.kind == name and k.chosen == "ring"


@pytest.mark.parametrize("n", [2, 4, 7, 64, 1000])
def test_ring_busbw_equals_link_bandwidth_without_latency(n):
    f = flat(n, 0.0, B)
    S = 256 * MB
    for name in ("ring", "reduce_scatter", "all_gather"):
        k = make_kernel(name, f, S)
        assert busbw(k.kind, S, k.uniform_time(), n) == pytest.approx(B, rel=1e-12)


def test_ring_bandwidth_term_constant_in_n():
    S = 512 * MB
    times = [uniform_time("ring", flat(n, 0.0, B), S) for n in (8, 64, 512, 4096)]
    assert all(1.75 * S / B <= t < 2 * S / B for t in times)  # bounded by 2S/B whatever n is
    assert np.all(np.diff(times) > 0)  # 2(n-1)/n grows towards 2
    # while reduce-to-root grows linearly
    assert uniform_time("reduce_broadcast", flat(64, 0.0, B), S) == pytest.approx(63 * 2 * S / B)


def test_hop_times_come_from_the_fabric_ring_links():
    f = two_level(nodes=2, g=2).with_slow_sender(1, 0.5)  # rank 1 -> 2 leaves node 0: its network
    S = 4 * MB
    mean_alpha = (2 * 8e-6 + 2 * 2e-6) / 4
    # into ranks 0..3: 3 -> 0 crosses back to node 0 at full speed, 1 -> 2 at half speed
    hops = [S / 4 / 50e9, S / 4 / 300e9, S / 4 / (50e9 * 0.5), S / 4 / 300e9]
    np.testing.assert_allclose(hop_times(f, S), mean_alpha + np.array(hops), rtol=1e-12)


@pytest.mark.parametrize("name", ["ring", "reduce_scatter", "all_gather"])
@settings(max_examples=25, deadline=None)
@given(case=cases())
def test_kernel_matches_simpy_reference(name, case):
    assert_matches_reference(name, case)

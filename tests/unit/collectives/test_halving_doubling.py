"""Recursive halving/doubling: Thakur et al.'s closed forms, exchanges, and the SimPy reference."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commsim.collectives import Fabric, finish_times, flat, uniform_time
from commsim.collectives import halving_doubling
from tests.unit.collectives.cases import two_level, assert_matches_reference, cases

MB = 1 << 20
A, B = 5e-6, 10e9


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


def test_an_exchange_runs_at_its_slower_direction():
    # two ranks: one exchange each way of S/2 bytes; rank 0 sends at 1/4 speed, rank 1 receives fine
    S = 8 * MB
    slow = flat(2, A, B).with_slow_sender(0, 0.25)
    assert uniform_time("halving_doubling", slow, S) == pytest.approx(2 * (A + S / 2 / (B / 4)), rel=1e-12)


fabrics = st.builds(Fabric, nodes=st.integers(1, 40), gpus_per_node=st.sampled_from([1, 2, 3, 4, 8]),
                    intra_latency=st.floats(0, 1e-5), intra_bandwidth=st.floats(1e9, 1e12),
                    inter_latency=st.floats(0, 5e-5), inter_bandwidth=st.floats(1e9, 1e12))


@settings(max_examples=40, deadline=None)
@given(fabrics, st.floats(1, 1e9))
def test_halving_doubling_closed_form_bounds_kernel(f, size):
    got = finish_times("halving_doubling", f, np.zeros(f.world_size), size).max()
    assert got <= uniform_time("halving_doubling", f, size) * (1 + 1e-12)


@settings(max_examples=25, deadline=None)
@given(case=cases())
def test_kernel_matches_simpy_reference(case):
    assert_matches_reference("halving_doubling", case)


@pytest.mark.parametrize("nodes,g", [(4, 8), (3, 4), (5, 3), (1, 6), (2, 1), (1, 1)])
def test_vectorized_butterfly_equals_the_exchange_recurrence_exactly(nodes, g):
    # nominal links (the uniform shortcut where it applies) and a degraded port (strided steps)
    from tests.unit.collectives.cases import two_level

    rng = np.random.default_rng(nodes * 10 + g)
    for f in (two_level(nodes=nodes, g=g), two_level(nodes=nodes, g=g).with_slow_sender(0, 0.5)):
        k = halving_doubling.HalvingDoublingKernel("all_reduce", f.at_size(3e6), 3e6)
        for _ in range(3):
            launch = rng.random(f.world_size) * 1e-3
            np.testing.assert_array_equal(k.finish_times(launch), k.recurrence(launch))

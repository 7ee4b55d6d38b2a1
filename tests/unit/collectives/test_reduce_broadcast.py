"""Reduce to a root then broadcast: linear in n, late ranks, directions, the SimPy reference."""

import numpy as np
import pytest
from hypothesis import given, settings

from commsim.collectives import finish_times, flat, uniform_time
from tests.unit.collectives.cases import assert_matches_reference, cases

MB = 1 << 20
A, B = 5e-6, 10e9


@pytest.mark.parametrize("n", [2, 5, 16])
def test_reduce_broadcast_is_linear_in_n(n):
    S = 4 * MB
    assert uniform_time("reduce_broadcast", flat(n, A, B), S) == pytest.approx(2 * (n - 1) * (A + S / B), rel=1e-12)


def test_late_rank_only_delays_from_its_turn():
    f = flat(4, 0.0, 1e9)
    S = 1e6
    t = S / 1e9
    launch = np.array([0.0, 0.0, 0.0, 10 * t])
    got = finish_times("reduce_broadcast", f, launch, S)
    # the root takes 1 and 2 on time, waits for 3 until 10t, reduce done at 11t, then 3 copies
    np.testing.assert_allclose(got, [14 * t, 12 * t, 13 * t, 14 * t])


def test_the_reduce_and_the_broadcast_are_priced_in_their_own_directions():
    # rank 2's send side at half speed: its message to the root takes 2t, the root's copy to it t
    f = flat(4, 0.0, 1e9).with_slow_sender(2, 0.5)
    S = 1e6
    t = S / 1e9
    got = finish_times("reduce_broadcast", f, np.zeros(4), S)
    np.testing.assert_allclose(got, [7 * t, 5 * t, 6 * t, 7 * t])  # reduce t + 2t + t = 4t, then copies
    assert uniform_time("reduce_broadcast", f, S) == pytest.approx(7 * t, rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(case=cases())
def test_kernel_matches_simpy_reference(case):
    assert_matches_reference("reduce_broadcast", case)

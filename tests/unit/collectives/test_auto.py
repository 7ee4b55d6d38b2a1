"""auto: the fastest candidate per size, on the candidates' own kernels."""

import numpy as np
import pytest
from hypothesis import given, settings

from commsim.collectives import ALL_REDUCE, make_kernel, table, uniform_time
from commsim.collectives.auto import CANDIDATES, choose
from tests.unit.collectives.cases import cases, two_level

MB = 1 << 20


def test_auto_is_the_minimum_and_switches_with_size():
    f = two_level(nodes=64, g=8)
    for S in (1024, 64 * MB, 1024 * MB):
        times = {k: uniform_time(k, f, S) for k in ALL_REDUCE if k != "auto"}
        assert uniform_time("auto", f, S) == min(times.values())
        assert choose(f, S) == (min(times, key=times.get), min(times.values()))
    small = {r["algorithm"]: r for r in table(["auto"], f, [1024])}["auto"]["chosen"]
    assert small != "ring"  # 2(n-1) network latencies lose to log-depth algorithms at 8 KB


def test_candidates_are_every_other_all_reduce_algorithm():
    assert [c.name for c in CANDIDATES] == [a for a in ALL_REDUCE if a != "auto"]


@settings(max_examples=25, deadline=None)
@given(case=cases())
def test_auto_runs_its_picks_kernel(case):
    f, launch, size = case
    k = make_kernel("auto", f, size)
    pick = make_kernel(k.chosen, f, size)
    np.testing.assert_array_equal(k.finish_times(launch), pick.finish_times(launch))
    assert k.uniform_time() == pick.uniform_time() == pytest.approx(choose(f, size)[1])

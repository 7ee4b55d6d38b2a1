"""The O(n) ring closed forms against the uniform formula, the step-by-step recurrence and the
SimPy reference."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commsim.collectives.maxplus import ring_recurrence as _recurrence
from commsim.collectives.reference import ring_events
from commsim.collectives.ring_closed_form import RingAllReduce, RingHalf, hop_times
from commsim.network.costs import ring_allreduce_time


def ring_steps(n):
    return 2 * (n - 1)


def ring_recurrence(launch, t, steps=None):
    return _recurrence(launch, t, ring_steps(len(t)) if steps is None else steps)

finite_times = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


def test_uniform_ring_equals_closed_form():
    n, S, alpha, B = 8, 4e9, 5e-6, 12.5e9
    t = hop_times(S, np.full(n, alpha), np.full(n, B))
    f = RingAllReduce(t).finish_times(np.zeros(n))
    expected = ring_allreduce_time(S, n, alpha, B)  # 2*7*5us + 2*7/8*4e9/12.5e9 = 0.56007 s
    assert expected == pytest.approx(0.56 + 14 * 5e-6, rel=1e-12)
    np.testing.assert_allclose(f, expected, rtol=1e-12)


def test_late_rank_delays_everyone_by_its_delay():
    n, t = 6, np.full(6, 0.01)
    launch = np.zeros(n)
    launch[3] = 0.25
    f = RingAllReduce(t).finish_times(launch)
    np.testing.assert_allclose(f, 0.25 + ring_steps(n) * 0.01, rtol=1e-12)


def test_one_slow_hop_slows_the_whole_ring():
    n = 8
    fast = RingAllReduce(np.full(n, 0.01)).finish_times(np.zeros(n))
    t = np.full(n, 0.01)
    t[5] = 0.04
    slow = RingAllReduce(t).finish_times(np.zeros(n))
    # every rank's result passes the slow hop: the pipeline runs at its pace
    assert np.all(slow > fast.max() + (ring_steps(n) - n) * 0.03)


def test_single_rank_returns_launch_time():
    f = RingAllReduce(np.array([0.3])).finish_times(np.array([1.5]))
    assert f.tolist() == [1.5]


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        RingAllReduce(np.array([-1.0, 1.0]))
    with pytest.raises(ValueError):
        RingAllReduce(np.ones(3)).finish_times(np.zeros(4))


@st.composite
def ring_cases(draw):
    n = draw(st.integers(min_value=1, max_value=16))
    style = draw(st.sampled_from(["random", "two-level", "few-values", "uniform"]))
    if style == "random":
        t = np.array(draw(st.lists(st.floats(0.001, 5.0), min_size=n, max_size=n)))
    elif style == "two-level":
        period = draw(st.integers(1, 4))
        t = np.where(np.arange(n) % period == 0, draw(st.floats(0.5, 5.0)), draw(st.floats(0.001, 0.5)))
    elif style == "few-values":
        t = np.array(draw(st.lists(st.sampled_from([0.2, 0.5, 3.0]), min_size=n, max_size=n)))
    else:
        t = np.full(n, draw(st.floats(0.001, 5.0)))
    scale = draw(st.sampled_from([1e-3, 1.0, 100.0]))
    launch = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n))) * scale
    return t, launch


@settings(max_examples=300, deadline=None)
@given(ring_cases())
def test_closed_form_equals_recurrence(case):
    t, launch = case
    expected = ring_recurrence(launch, t)
    for fast in (True, False):
        got = RingAllReduce(t, use_fast_path=fast).finish_times(launch)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(ring_cases())
def test_closed_form_equals_per_chunk_simpy_reference(case):
    t, launch = case
    got = RingAllReduce(t).finish_times(launch)
    np.testing.assert_allclose(got, ring_events(launch, t), rtol=1e-9, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(ring_cases(), st.integers(0, 15), st.floats(0.0, 2.0))
def test_launching_later_never_finishes_anyone_earlier(case, who, delay):
    t, launch = case
    later = launch.copy()
    later[who % len(launch)] += delay
    k = RingAllReduce(t)
    assert np.all(k.finish_times(later) >= k.finish_times(launch) - 1e-12)


def test_evenly_spaced_segments_path_equals_recurrence(monkeypatch):
    import commsim.collectives.ring_closed_form as ring

    monkeypatch.setattr(ring, "REGULAR_MIN_SEGMENTS", 3)
    rng = np.random.default_rng(7)
    for n, period in [(24, 8), (30, 3), (64, 4)]:
        t = np.where(np.arange(n) % period == 0, 0.9, 0.1)
        k = ring.RingAllReduce(t)
        assert k._classes[0].regular is not None
        for _ in range(20):
            launch = rng.uniform(0, rng.choice([0.01, 10.0]), n)
            np.testing.assert_allclose(k.finish_times(launch), ring_recurrence(launch, t), rtol=1e-9)


def test_two_level_ring_latency_adds_hop_by_hop_and_bandwidth_is_the_slowest_hop():
    # 2 nodes x 4 GPUs: 6 NVLink hops (1 us, 300 GB/s) and 2 network hops (10 us, 10 GB/s)
    n = 8
    crosses = np.arange(n) % 4 == 0
    alpha = np.where(crosses, 10e-6, 1e-6)
    bw = np.where(crosses, 10e9, 300e9)
    S = 80e6
    f = RingAllReduce(hop_times(S, alpha, bw)).finish_times(np.zeros(n))
    latency = 2 * (n - 1) * alpha.mean()  # = 2 * sum(alpha) * (n-1)/n, NCCL's hop-by-hop composition
    bandwidth = 2 * (n - 1) / n * S / 10e9
    assert f.max() == pytest.approx(latency + bandwidth, rel=1e-12)
    # a rank three fast hops downstream of the network hop gets its last chunk three slow
    # steps earlier: the all-gather's final chunks reach it over NVLink
    steps = ring_steps(n)
    assert f[3] == pytest.approx(latency + (steps - 3) / steps * bandwidth + 3 * S / n / 300e9, rel=1e-12)


# --- RingHalf: reduce-scatter / all-gather, n-1 steps of the same recurrence ------------------


def test_ring_half_uniform_equals_closed_form_and_half_an_all_reduce():
    n, S, alpha, B = 8, 4e9, 5e-6, 12.5e9
    t = hop_times(S, np.full(n, alpha), np.full(n, B))
    half = RingHalf(t).finish_times(np.zeros(n))
    # (n-1) alpha + (n-1)/n S/B: one of the all-reduce's two halves (docs/collectives.md)
    np.testing.assert_allclose(half, 7 * 5e-6 + 7 / 8 * 4e9 / 12.5e9, rtol=1e-12)
    np.testing.assert_allclose(2 * half, ring_allreduce_time(S, n, alpha, B), rtol=1e-12)


def test_ring_half_late_rank_delays_everyone_by_its_delay():
    n, t = 6, np.full(6, 0.01)
    launch = np.zeros(n)
    launch[2] = 0.3
    np.testing.assert_allclose(RingHalf(t).finish_times(launch), 0.3 + (n - 1) * 0.01, rtol=1e-12)


def test_ring_half_small_rings_and_bad_input():
    assert RingHalf(np.array([0.3])).finish_times(np.array([1.5])).tolist() == [1.5]
    # two ranks: one step, each rank waits for the other's launch
    np.testing.assert_allclose(RingHalf(np.array([0.1, 0.2])).finish_times(np.array([0.0, 1.0])), [1.1, 1.2])
    with pytest.raises(ValueError):
        RingHalf(np.array([1.0, np.inf]))
    with pytest.raises(ValueError):
        RingHalf(np.ones(3)).finish_times(np.zeros(2))


@settings(max_examples=300, deadline=None)
@given(ring_cases())
def test_ring_half_equals_recurrence(case):
    t, launch = case
    expected = ring_recurrence(launch, t, steps=len(t) - 1)
    np.testing.assert_allclose(RingHalf(t).finish_times(launch), expected, rtol=1e-9, atol=1e-12)


def test_ring_half_single_slow_hop_and_sparse_classes():
    # one hop much slower than the rest: its class has one position, so the windows of that
    # class have every length from 0 to n-1 (several width levels)
    rng = np.random.default_rng(3)
    for n in (5, 17, 64):
        for slow in (0, n // 2, n - 1):
            t = np.full(n, 0.01)
            t[slow] = 1.0
            t[(slow + 3) % n] = 0.3
            for _ in range(10):
                launch = rng.uniform(0, rng.choice([0.01, 5.0]), n)
                np.testing.assert_allclose(RingHalf(t).finish_times(launch),
                                           ring_recurrence(launch, t, steps=n - 1), rtol=1e-9)
    # network hops every `period` ranks, not starting at rank 0: ranks before the first slow
    # hop have their whole window one period back
    for n, period, offset in [(24, 8, 5), (30, 6, 1), (64, 16, 15), (9, 9, 8)]:
        t = np.where(np.arange(n) % period == offset, 0.9, 0.1)
        for _ in range(10):
            launch = rng.uniform(0, rng.choice([0.01, 5.0]), n)
            np.testing.assert_allclose(RingHalf(t).finish_times(launch),
                                       ring_recurrence(launch, t, steps=n - 1), rtol=1e-9)


@settings(max_examples=60, deadline=None)
@given(ring_cases())
def test_ring_half_equals_simpy_reference(case):
    t, launch = case
    np.testing.assert_allclose(RingHalf(t).finish_times(launch), ring_events(launch, t, steps=len(t) - 1),
                               rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("n", [2, 3, 5, 16, 33])
@pytest.mark.parametrize("cls,steps", [(RingAllReduce, lambda n: 2 * (n - 1)), (RingHalf, lambda n: n - 1)])
def test_one_hop_time_is_max_launch_plus_k_steps(n, cls, steps):
    # uniform links take the closed form max(L) + K t; it must equal the step-by-step recurrence
    t = np.full(n, 3.7e-5)
    kernel = cls(t)
    assert kernel._uniform is not None
    rng = np.random.default_rng(n)
    for spread in (0.0, 1e-5, 1e-2):
        launch = rng.random(n) * spread
        np.testing.assert_allclose(kernel.finish_times(launch), _recurrence(launch, t, steps(n)), rtol=1e-12)


def chained_launches(kernel, n, rng, count=12):
    """Launch vectors as the engine makes them: each collective launched from the previous
    one's finish times (plus a little compute), so the segment maxima mostly grow along the
    ring (the non-decreasing shortcut of _prefix_max), now and then with a late rank."""
    launch, out = rng.random(n) * 1e-3, []
    for k in range(count):
        out.append(launch)
        launch = kernel.finish_times(launch) + rng.random(n) * (1e-9 if k % 3 else 1e-5)
        if k % 4 == 3:
            launch[rng.integers(n)] += 1e-4
    return out


@pytest.mark.parametrize("nodes,g", [(2, 2), (5, 3), (16, 4), (64, 8)])
def test_simple_window_path_equals_the_general_segment_path_exactly(nodes, g):
    # one network hop per node: the shortcut over the segment maxima must pick the very same
    # maxima as the prefix/suffix accumulations, whichever segment holds the largest value
    from commsim.network.fabric import Fabric

    f = Fabric(nodes=nodes, gpus_per_node=g, intra_latency=2e-6, intra_bandwidth=240e9,
               inter_latency=5e-6, inter_bandwidth=25e9)
    alpha, bandwidth = f.ring_links()
    fast = RingAllReduce(hop_times(25e6, alpha, bandwidth))
    plain = RingAllReduce(hop_times(25e6, alpha, bandwidth))
    assert fast._classes[0].simple is not None
    for c in plain._classes:
        c.simple = None
    rng = np.random.default_rng(nodes)
    n = nodes * g
    for spread in (0.0, 1e-7, 1e-5, 1e-3, 1.0):
        for _ in range(5):
            launch = rng.random(n) * spread
            np.testing.assert_array_equal(fast.finish_times(launch), plain.finish_times(launch))
    launch = np.zeros(n)
    launch[-1] = 1e-3  # the largest segment is the last one
    np.testing.assert_array_equal(fast.finish_times(launch), plain.finish_times(launch))
    for launch in chained_launches(fast, n, rng):
        np.testing.assert_array_equal(fast.finish_times(launch), plain.finish_times(launch))
    np.testing.assert_allclose(fast.finish_times(launch), _recurrence(launch, fast.hop_time, 2 * (n - 1)), rtol=1e-9)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=80), st.integers(1, 20))
def test_window_max_is_every_windows_maximum(xs, width):
    from commsim.collectives.ring_closed_form import window_max

    x = np.array(xs)
    width = min(width, len(x))
    want = [max(x[s:s + width]) for s in range(len(x) - width + 1)]
    np.testing.assert_array_equal(window_max(x, width), want)
    work = (np.full(len(x), np.nan), np.full(len(x), np.nan))  # planned buffers: same maxima
    np.testing.assert_array_equal(window_max(x, width, work), want)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3), min_size=0, max_size=300), st.booleans())
def test_prefix_max_is_maximum_accumulate(xs, ordered):
    from commsim.collectives.ring_closed_form import _prefix_max

    x = np.sort(xs) if ordered else np.array(xs)
    np.testing.assert_array_equal(_prefix_max(x), np.maximum.accumulate(x))
    if ordered:  # non-decreasing: no accumulation, the input itself
        assert _prefix_max(x) is x


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=1200))
def test_running_max_is_maximum_accumulate(xs):
    from commsim.collectives import ring_closed_form
    from commsim.collectives.ring_closed_form import running_max

    x = np.array(xs)
    np.testing.assert_array_equal(running_max(x), np.maximum.accumulate(x))
    saved, ring_closed_form.SCAN_MIN = ring_closed_form.SCAN_MIN, 1  # the blocked scan at every length
    try:
        np.testing.assert_array_equal(running_max(x), np.maximum.accumulate(x))
        np.testing.assert_array_equal(running_max(x[::-1]), np.maximum.accumulate(x[::-1]))
    finally:
        ring_closed_form.SCAN_MIN = saved


@pytest.mark.parametrize("nodes,g", [(3, 5), (7, 4), (16, 4), (64, 8), (4, 8)])  # sparse classes: g >= 4
def test_half_simple_path_equals_the_prefix_suffix_path_exactly(nodes, g):
    from commsim.network.fabric import Fabric

    f = Fabric(nodes=nodes, gpus_per_node=g, intra_latency=2e-6, intra_bandwidth=240e9,
               inter_latency=5e-6, inter_bandwidth=25e9)
    alpha, bandwidth = f.ring_links()
    t = hop_times(25e6, alpha, bandwidth)
    fast, plain = RingHalf(t), RingHalf(t)
    assert fast._classes[0].simple == g
    for c in plain._classes:
        c.simple = 0
    rng = np.random.default_rng(nodes * g)
    n = nodes * g
    cases = [rng.random(n) * spread for spread in (0.0, 1e-7, 1e-5, 1e-3, 1.0) for _ in range(6)]
    for hot in (0, 1, g - 1, g, n - 3, n - 2, n - 1):  # the latest rank at every kind of place
        launch = np.zeros(n)
        launch[hot] = 1e-3
        cases.append(launch)
    cases += chained_launches(fast, n, rng)
    for launch in cases:
        np.testing.assert_array_equal(fast.finish_times(launch), plain.finish_times(launch))
        np.testing.assert_allclose(fast.finish_times(launch), _recurrence(launch, t, n - 1), rtol=1e-9)


@pytest.mark.parametrize("nodes,g", [(2, 2), (4, 8), (5, 3), (16, 4), (31, 2)])
def test_small_simple_path_equals_the_numpy_simple_path_bit_for_bit(nodes, g):
    # a few nodes: the simple path's per-segment work on Python floats must give the very
    # same finish times and minimum bound as its numpy form, whichever segment is largest
    from commsim.network.fabric import Fabric

    f = Fabric(nodes=nodes, gpus_per_node=g, intra_latency=2e-6, intra_bandwidth=240e9,
               inter_latency=5e-6, inter_bandwidth=25e9)
    alpha, bandwidth = f.ring_links()
    small = RingAllReduce(hop_times(25e6, alpha, bandwidth))
    numpy_form = RingAllReduce(hop_times(25e6, alpha, bandwidth))
    cls = small._classes[0]
    assert cls.simple is not None and cls.small is not None
    for c in numpy_form._classes:
        c.small = None
    rng = np.random.default_rng(nodes * g)
    n = nodes * g
    cases = [rng.random(n) * spread for spread in (0.0, 1e-7, 1e-5, 1e-3, 1.0) for _ in range(5)]
    for k in (0, n // 2, n - 1):  # one late rank: the largest segment first, inside, last
        launch = np.zeros(n)
        launch[k] = 1e-3
        cases.append(launch)
    cases += chained_launches(small, n, rng)
    for launch in cases:
        np.testing.assert_array_equal(small.finish_times(launch), numpy_form.finish_times(launch))
        h = np.maximum(launch, np.roll(launch, 1)) + cls.base
        got, bound = RingAllReduce._simple_small(cls, h, True)
        want, want_bound = RingAllReduce._simple(cls, h, True)
        np.testing.assert_array_equal(got, want)
        assert bound == want_bound
    np.testing.assert_allclose(small.finish_times(launch), _recurrence(launch, small.hop_time, 2 * (n - 1)),
                               rtol=1e-9)

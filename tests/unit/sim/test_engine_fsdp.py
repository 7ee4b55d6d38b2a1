"""FSDP's charged step (Engine._charged_fsdp_step) and its shortcuts: each one bit for bit the
plain vector work it replaces, and the whole run equal to the engine bucket by bucket."""

from dataclasses import replace

import numpy as np
import pytest

import commsim.sim.ddp_costs as ddp_costs_module
import commsim.sim.engine as engine_module
from commsim.scenario.spec import Collective, DDPCosts, Jitter, Throttle
from commsim.sim.ddp_costs import InFlight, clock_group
from commsim.sim.engine import Engine
from commsim.sim.sharding import SegmentInFlight
from commsim.sim.stragglers import ThermalClock
from tests.conftest import make_scenario

FIELDS = ("step_end", "rank_end", "rank_backward_end", "rank_comm_end", "rank_busy", "comm_time", "launch_spread")


def _latency_bound(seed: int, throttle: bool = True, **kw):
    """Latency-bound collectives longer than the compute segments: the stream runs back to back,
    FSDP's forward gathers each issued the launch cost after the previous one's finish."""
    stragglers = [Jitter(0.05)] + ([Throttle((3,), 0.03, 0.02, 0.5, 0.01)] if throttle else [])
    return make_scenario(nodes=3, gpus_per_node=4, parameters=6_000_000, bucket_cap=1.5e6, first_bucket=3e5,
                         backward=0.002, forward=0.001, inter=(2e10, 1e-2), steps=4, seed=seed,
                         stragglers=stragglers, costs=DDPCosts(), sharding="fsdp", **kw)


class _PlainInFlight(InFlight):
    """InFlight's own arithmetic, and no finish bounds: what SegmentInFlight replaces."""

    finish_bounds = None


def _run(sc, shortcut=True):
    engine = Engine(sc)
    engine._shortcut = shortcut
    return engine.run()


def _count_chain_calls(monkeypatch):
    calls = []
    through = ddp_costs_module._through_chains
    monkeypatch.setattr(ddp_costs_module, "_through_chains", lambda *a: calls.append(1) or through(*a))
    return calls


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("throttle", [True, False])
def test_segment_before_its_chain_in_closed_form_bit_for_bit(seed, throttle, monkeypatch):
    sc = _latency_bound(seed, throttle)
    calls = _count_chain_calls(monkeypatch)
    fast = _run(sc)
    closed = len(calls)
    monkeypatch.setattr(engine_module, "SegmentInFlight", _PlainInFlight)
    del calls[:]
    plain = _run(sc)
    chains = len(calls)
    slow = _run(sc, shortcut=False)
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(fast, field), getattr(plain, field), err_msg=field)
        np.testing.assert_allclose(getattr(fast, field), getattr(slow, field), rtol=1e-12, atol=1e-13, err_msg=field)
    np.testing.assert_array_equal(fast.last_rank, plain.last_rank)
    # forward segments leave the chain arithmetic for the closed form (several a step)
    segments = 2 * len(fast.bucket_sizes) * sc.steps
    assert chains - closed >= 2 * sc.steps, (chains, closed, segments)


@pytest.mark.parametrize("seed", range(20))
def test_segment_in_flight_equals_in_flight_on_random_chains(seed):
    rng = np.random.default_rng(seed)
    n = 64
    slowdown = float(rng.uniform(0.05, 0.5))
    clocks = {5: ThermalClock(0.004, 0.003, 0.4, 0.001)} if seed % 2 else {}
    pair = [cls(clock_group(clocks), slowdown) for cls in (SegmentInFlight, InFlight)]
    start = 10.0 + rng.uniform(0, 1e-5, n)  # a segment starts at its gather's finish ...
    gap = float(rng.uniform(1e-6, 5e-5))  # ... the next gather begins the launch cost later
    begin = start + gap
    # long chains (the closed form), or short ones that end before the segment does (its fallback)
    end = begin + (rng.uniform(1e-3, 2e-3, n) if seed % 3 else rng.uniform(1e-5, 1e-4, n))
    work = rng.uniform(2e-4, 4e-4, n)
    for flight in pair:
        flight.add(begin, end, start, InFlight.NEW, (float(begin.max()), float(end.min()), float(begin.min())))
    bounds = (float(start.min()), float(start.max()), float(work.max()), float(work.min()))
    out = [flight.compute(start, work, bounds) for flight in pair]
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_array_equal(pair[0].stretch, pair[1].stretch)


def test_segment_in_flight_needs_the_chains_earliest_begin(monkeypatch):
    calls = _count_chain_calls(monkeypatch)
    start = np.array([1.0, 1.0 + 1e-7])
    begin, end, work = start + 2e-5, start + 1e-2, np.array([1e-3, 1.1e-3])
    bounds = (1.0, 1.0 + 1e-7, 1.1e-3, 1e-3)
    outs = []
    for third in ((), (float(begin.min()),)):
        flight = SegmentInFlight(None, 0.1)
        flight.add(begin, end, start, InFlight.NEW, (float(begin.max()), float(end.min())) + third)
        outs.append(flight.compute(start, work, bounds))
    assert len(calls) == 1  # without the chain's earliest begin: the chain arithmetic; with it, the closed form
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[1], start + work + 0.1 * (work - 2e-5), rtol=1e-12)


def test_event_log_has_every_collective_at_its_last_finish():
    sc = _latency_bound(1)
    log = []
    r = Engine(sc, log=log, collectives=True).run()
    plain = Engine(sc, collectives=True).run()
    for field in FIELDS:  # keeping the log changes nothing
        np.testing.assert_array_equal(getattr(r, field), getattr(plain, field), err_msg=field)
    ops = len(r.last_rank[0])
    for s in range(r.steps_simulated):
        events = [e for e in log if e[1] == s]
        assert [e[2].split()[1] for e in events[:-1]] == [str(k) for k in range(ops)]
        assert events[-1][2] == "end"
        np.testing.assert_array_equal([e[0] for e in events[:-1]], r.coll_finish[s].max(axis=1))


class _CountingNumpy:
    """numpy, counting the engine's calls of one function."""

    def __init__(self, name):
        self.name, self.calls = name, 0

    def __getattr__(self, attr):
        if attr != self.name:
            return getattr(np, attr)

        def counted(*a, **kw):
            self.calls += 1
            return getattr(np, attr)(*a, **kw)
        return counted


@pytest.mark.parametrize("throttle", [True, False])
def test_finish_bounds_and_replaced_chains_spare_the_vector_passes(throttle, monkeypatch):
    sc = _latency_bound(0, throttle)
    adds, bounded = [], []
    add, compute = InFlight.add, SegmentInFlight.compute
    monkeypatch.setattr(InFlight, "add", lambda self, *a, **kw: adds.append(1) or add(self, *a, **kw))

    def counted_compute(self, start, work, bounds=None):
        t = compute(self, start, work, bounds)
        if self.finish_bounds is not None:  # they bracket the result
            assert self.finish_bounds[0] <= t.min() and t.max() <= self.finish_bounds[1]
            bounded.append(1)
        return t

    monkeypatch.setattr(SegmentInFlight, "compute", counted_compute)
    maximum = _CountingNumpy("maximum")
    monkeypatch.setattr(engine_module, "np", maximum)
    fast = _run(sc)
    segments = 2 * len(fast.bucket_sizes) * sc.steps
    collectives = fast.last_rank.size
    assert len(bounded) > segments / 2  # most segments' ends known from their closed form
    assert collectives - len(adds) >= 4 * sc.steps  # forward gathers: new chains replace the old ones directly
    # the reduce-scatters (a third of the collectives) issued without the maximum
    assert maximum.calls < collectives / 3, (maximum.calls, collectives)
    monkeypatch.setattr(engine_module, "np", np)
    monkeypatch.setattr(engine_module, "SegmentInFlight", _PlainInFlight)
    plain = _run(sc)
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(fast, field), getattr(plain, field), err_msg=field)
    np.testing.assert_array_equal(fast.last_rank, plain.last_rank)


@pytest.mark.parametrize("seed", range(10))
def test_a_new_chain_replacing_the_old_one_equals_in_flight_add(seed):
    rng = np.random.default_rng(seed)
    n = 32
    pair = [cls(None, 0.2) for cls in (SegmentInFlight, InFlight)]
    begin = 5.0 + rng.uniform(0, 1e-4, n)
    end = begin + rng.uniform(1e-3, 2e-3, n)
    for flight in pair:
        flight.add(begin, end, begin, InFlight.NEW, (float(begin.max()), float(end.min()), float(begin.min())))
    nxt = end + rng.uniform(1e-6, 1e-5, n)  # the next chain begins after the last one's end, the floor
    nxt_end = nxt + 2e-3
    for flight in pair:
        flight.add(nxt, nxt_end, flight.last, InFlight.NEW, (float(nxt.max()), float(nxt_end.min()), float(nxt.min())))
    fast, slow = pair
    for attr in ("begin", "end", "last"):
        np.testing.assert_array_equal(getattr(fast, attr), getattr(slow, attr), err_msg=attr)
    assert (fast.begin_high, fast.end_low) == (slow.begin_high, slow.end_low)
    work = rng.uniform(1e-4, 2e-4, n)
    start = end.copy()
    bounds = (float(start.min()), float(start.max()), float(work.max()), float(work.min()))
    np.testing.assert_array_equal(fast.compute(start, work, bounds), slow.compute(start, work, bounds))


def test_forward_gathers_take_their_shift_from_the_origins(monkeypatch):
    """A forward gather issued the launch cost after the previous gather's finish (communication-
    bound) launches at a known shift of its kernel's previous launch: _finish_times gets the
    shift and skips its O(n) test; the run stays the engine's bucket by bucket."""
    sc = _latency_bound(0)
    given = []
    finish_times = Engine._finish_times

    def counted(self, kernel, launch, shift=None):
        given.append((self.ops[self._op - 1].phase, shift is not None))
        return finish_times(self, kernel, launch, shift)

    monkeypatch.setattr(Engine, "_finish_times", counted)
    fast = _run(sc)
    monkeypatch.setattr(Engine, "_finish_times", finish_times)
    slow = _run(sc, shortcut=False)
    forward = [known for phase, known in given if phase == "forward"]
    nb = len(fast.bucket_sizes)
    # all but a few of each step's forward gathers (each kernel's first launches, then one tested;
    # this case's gathers have 3 sizes), whether the stream was idle before them everywhere or not
    assert sum(forward) >= (nb - 5) * sc.steps, (sum(forward), len(forward))
    for field in FIELDS:
        np.testing.assert_allclose(getattr(fast, field), getattr(slow, field), rtol=1e-12, atol=1e-13, err_msg=field)


def test_one_chain_rows_are_views_of_the_callers_vectors_until_in_flight_writes_them():
    rng = np.random.default_rng(3)
    n = 16
    fast, slow = SegmentInFlight(None, 0.2), InFlight(None, 0.2)
    begin = 5.0 + rng.uniform(0, 1e-4, n)
    end = begin + rng.uniform(1e-3, 2e-3, n)
    queued = end + rng.uniform(1e-3, 2e-3, n)  # the next collective, queued behind it on every rank
    nxt = queued + rng.uniform(1e-6, 1e-5, n)  # then a new chain after the last end (the floor)
    nxt_end = nxt + 2e-3
    steps = [(begin, end, begin, InFlight.NEW, (float(begin.max()), float(end.min()), float(begin.min()))),
             (end, queued, begin, InFlight.QUEUED, (float(end.max()), float(queued.min()))),
             (nxt, nxt_end, None, InFlight.NEW, (float(nxt.max()), float(nxt_end.min()), float(nxt.min())))]
    for b, e, floor, hint, bounds in steps:
        for flight in (fast, slow):
            flight.add(b, e, flight.last if floor is None else floor, hint, bounds)
        for attr in ("begin", "end", "last"):
            np.testing.assert_array_equal(getattr(fast, attr), getattr(slow, attr), err_msg=attr)
    # queued and replacing chains: no copies, the rows are the caller's vectors
    assert np.shares_memory(fast.begin, nxt) and np.shares_memory(fast.end, nxt_end)
    kept = nxt.copy(), nxt_end.copy()
    # a collective that starts a new chain on some ranks only, the old one over by the floor there:
    # InFlight's add writes its rows in place
    late = nxt_end + np.where(np.arange(n) % 2 == 0, 1e-5, 0.0)
    late_end = late + 1e-3
    for flight in (fast, slow):
        flight.add(late, late_end, nxt_end.copy())
    for attr in ("begin", "end", "last"):
        np.testing.assert_array_equal(getattr(fast, attr), getattr(slow, attr), err_msg=attr)
    # ... into copies, not into the vectors it was given
    np.testing.assert_array_equal(nxt, kept[0])
    np.testing.assert_array_equal(nxt_end, kept[1])


class _CountingArray(np.ndarray):
    """A vector counting its multiplications."""

    products = 0

    def __mul__(self, other):
        _CountingArray.products += 1
        return np.asarray(self) * other


@pytest.mark.parametrize("throttle", [True, False])
def test_inside_chain_segments_reuse_work_times_slowdown_bit_for_bit(throttle):
    """Segments inside one long chain with the same work vector: work x slowdown computed once,
    the throttled rank's extra (its clock's) added to the stretch apart: InFlight's results."""
    rng = np.random.default_rng(7)
    n = 32
    clocks = {5: ThermalClock(0.004, 0.003, 0.4, 0.001)} if throttle else {}
    fast, slow = SegmentInFlight(clock_group(clocks), 0.25), InFlight(clock_group(clocks), 0.25)
    begin = 2.0 + rng.uniform(0, 1e-5, n)
    end = begin + 0.05
    for flight in (fast, slow):
        flight.add(begin, end, begin, InFlight.NEW, (float(begin.max()), float(end.min()), float(begin.min())))
    work = rng.uniform(2e-4, 4e-4, n)
    counted = work.copy().view(_CountingArray)
    _CountingArray.products = 0
    t = begin + 1e-4
    for _ in range(4):
        bounds = (float(t.min()), float(t.max()), float(work.max()), float(work.min()))
        got = fast.compute(t, counted, bounds)
        want = slow.compute(t, work, bounds)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(fast.stretch, slow.stretch)
        assert fast.finish_bounds[0] <= want.min() and want.max() <= fast.finish_bounds[1]
        t = want
    assert _CountingArray.products == 1


def test_segments_of_one_unit_size_share_their_scaled_work(monkeypatch):
    """f x work is computed once per unit size and step: SegmentInFlight sees one vector per size."""
    sc = _latency_bound(1)
    seen = []
    compute = SegmentInFlight.compute

    def recorded(self, start, work, bounds=None):
        seen.append(work)  # (kept alive: distinct vectors have distinct ids)
        return compute(self, start, work, bounds)

    monkeypatch.setattr(SegmentInFlight, "compute", recorded)
    fast = _run(sc)
    nb = len(fast.bucket_sizes)
    sizes = len(set(fast.bucket_sizes.tolist()))
    assert len(seen) == 2 * nb * fast.steps_simulated
    # forward and backward: each unit size's vector, once a step (runs of equal sizes share it)
    assert len({id(w) for w in seen}) <= 2 * (sizes + 1) * fast.steps_simulated, (len({id(w) for w in seen}), sizes)
    monkeypatch.setattr(SegmentInFlight, "compute", compute)
    monkeypatch.setattr(engine_module, "SegmentInFlight", _PlainInFlight)
    plain = _run(sc)
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(fast, field), getattr(plain, field), err_msg=field)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "halving_doubling", "hierarchical", "auto"])
def test_fsdp_kernels_return_fresh_vectors(algorithm):
    """FSDP's step keeps finish vectors by reference (the origins, SegmentInFlight's chain rows):
    a kernel's next call must not write into its previous result."""
    sc = replace(_latency_bound(0), collective=Collective(algorithm=algorithm))
    engine = Engine(sc)
    rng = np.random.default_rng(0)
    for kernel in {id(k): k for k in engine.kernels}.values():
        first = kernel.finish_times(rng.uniform(0, 1e-3, sc.world_size))
        kept = first.copy()
        second = kernel.finish_times(rng.uniform(0, 1e-3, sc.world_size))
        assert not np.shares_memory(first, second)
        np.testing.assert_array_equal(first, kept)

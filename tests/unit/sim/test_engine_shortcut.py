"""The engine's shortcuts (periodic stretches of collectives, charged backward blocks computed
ahead) against the same engine bucket by bucket, kernel call by kernel call."""

import dataclasses

import numpy as np
import pytest

import commsim.sim.engine as engine_module
from commsim.scenario.spec import Collective, DDPCosts, Jitter, SlowRank, Stall, Throttle
from commsim.sim.ddp_costs import ChargedBackward
from commsim.sim.engine import Engine
from tests.conftest import NO_DDP_COSTS, make_scenario

FIELDS = ("step_end", "rank_end", "rank_backward_end", "rank_comm_end", "rank_busy", "comm_time")

COSTS = {
    "default": DDPCosts(),
    "no-slowdown": DDPCosts(overlap_slowdown=0.0),
    "view+slowdown": DDPCosts(gradient_as_bucket_view=True, overlap_slowdown=0.3, bucket_overhead=1e-4),
    "off": NO_DDP_COSTS,
}


class _Counted:
    """A kernel that counts its calls."""

    def __init__(self, kernel):
        self.kernel, self.calls = kernel, 0

    def finish_times(self, launch):
        self.calls += 1
        return self.kernel.finish_times(launch)


def _run(sc, shortcut: bool, block: int, monkeypatch):
    monkeypatch.setattr(engine_module, "READY_BLOCK_ELEMENTS", block)
    monkeypatch.setattr(engine_module, "READY_BLOCK_MIN_ROWS", 1)  # `block` elements, even one bucket
    engine = Engine(sc)
    wrapped = {}
    engine.kernels = [wrapped.setdefault(id(k), _Counted(k)) for k in engine.kernels]
    engine._shortcut = shortcut
    result = engine.run()
    return result, sum(k.calls for k in wrapped.values())


def _case(regime: str, costs: str, seed: int, **kw):
    # inter-node links: slow (communication-bound), balanced, fast (compute-bound)
    inter = {"comm": (2e9, 2e-4), "balanced": (2e10, 2e-5), "compute": (4e11, 1e-6)}[regime]
    stragglers = [Jitter(0.05), Throttle((3,), 0.03, 0.02, 0.5, 0.01)] if seed % 2 else [Jitter(0.02)]
    if seed % 3 == 2:
        stragglers.append(Stall((1,), 0.005, every=2))
    return make_scenario(nodes=3, gpus_per_node=4, parameters=6_000_000, bucket_cap=1.5e6, first_bucket=3e5,
                         backward=0.02, forward=0.01, inter=inter, steps=4, seed=seed, stragglers=stragglers,
                         costs=COSTS[costs], **kw)


@pytest.mark.parametrize("regime", ["comm", "balanced", "compute"])
@pytest.mark.parametrize("costs", sorted(COSTS))
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("block", [1, 12 * 5, 1 << 16])  # one bucket, five, the whole step per block
def test_shortcuts_equal_the_engine_bucket_by_bucket(regime, costs, seed, block, monkeypatch):
    sc = _case(regime, costs, seed)
    fast, fast_calls = _run(sc, True, block, monkeypatch)
    slow, slow_calls = _run(sc, False, block, monkeypatch)
    for field in FIELDS:
        np.testing.assert_allclose(getattr(fast, field), getattr(slow, field), rtol=1e-12, atol=1e-15, err_msg=field)
    np.testing.assert_array_equal(fast.last_rank, slow.last_rank)
    np.testing.assert_allclose(fast.launch_spread, slow.launch_spread, rtol=1e-9, atol=1e-13)
    assert fast_calls <= slow_calls
    if regime == "comm":  # collectives back to back: most of them cost no kernel call
        assert fast_calls < slow_calls / 2


@pytest.mark.parametrize("sharding", ["zero2"])
@pytest.mark.parametrize("costs", ["default", "no-slowdown"])
def test_shortcuts_equal_the_engine_bucket_by_bucket_under_zero2(sharding, costs, monkeypatch):
    sc = _case("comm", costs, 1, sharding=sharding)
    fast, fast_calls = _run(sc, True, 1 << 16, monkeypatch)
    slow, slow_calls = _run(sc, False, 1 << 16, monkeypatch)
    for field in FIELDS:
        np.testing.assert_allclose(getattr(fast, field), getattr(slow, field), rtol=1e-12, atol=1e-15, err_msg=field)
    assert fast_calls <= slow_calls


def test_gradient_accumulation_and_no_overlap_take_the_shortcut_exactly(monkeypatch):
    for kw in ({"accumulation": 3}, {"overlap": False}):
        sc = _case("comm", "default", 1, **kw)
        fast, fast_calls = _run(sc, True, 1 << 16, monkeypatch)
        slow, slow_calls = _run(sc, False, 1 << 16, monkeypatch)
        for field in FIELDS:
            np.testing.assert_allclose(getattr(fast, field), getattr(slow, field), rtol=1e-12, atol=1e-15)
        assert fast_calls < slow_calls


def test_charged_backward_ahead_equals_bucket_by_bucket_while_the_stream_is_busy():
    """ahead/keep against bucket/ran on a stream whose collectives run back to back from the
    first one on (each launched at the previous finish), a throttled rank among the others."""
    rng = np.random.default_rng(3)
    n, nb = 6, 9
    buckets = rng.uniform(1e5, 2e6, nb)
    clocks = {2: engine_module.ThermalClock(0.004, 0.003, 0.4, 0.001)}
    costs = DDPCosts(overlap_slowdown=0.25)
    backward, start = rng.uniform(0.01, 0.02, n), rng.uniform(0.0, 1e-3, n)
    durations = rng.uniform(0.5, 1.0, nb)  # each collective: much longer than a backward segment

    def collective(j, launch):
        return launch + durations[j] + 1e-4 * np.arange(n)

    slow = ChargedBackward(buckets, True, costs, clocks)
    slow.begin(backward, start)
    fast = ChargedBackward(buckets, True, costs, clocks)
    fast.begin(backward, start)
    stream = None
    issues = []
    for j in range(nb):
        issue = slow.bucket(j)
        launch = issue if stream is None else np.maximum(issue, stream)
        stream = collective(j, launch)
        slow.ran(launch, stream)
        issues.append(issue)
        if j < 2:  # the first collective starts the chain; from the third bucket on it began before t
            assert (fast.bucket(j) == issue).all()
            fast.ran(launch, stream)
    got, binding = fast.ahead(2, nb - 2)
    assert binding
    for i, issue in enumerate(issues[2:]):
        np.testing.assert_allclose(got[i], issue, rtol=1e-13)
    fast.keep(nb - 2, stream)
    for a, b in zip(fast.end(), slow.end()):
        np.testing.assert_allclose(a, b, rtol=1e-13)
    np.testing.assert_allclose(fast.overhead(), slow.overhead(), rtol=1e-12)


def test_charged_backward_ahead_refuses_before_the_chain_began():
    costs = DDPCosts()
    charged = ChargedBackward([1e6, 1e6, 1e6], True, costs, {})
    charged.begin(np.full(4, 0.01), np.zeros(4))
    assert charged.ahead(0, 3) is None  # nothing in flight yet: compute would run at full rate
    issue = charged.bucket(0)
    charged.ran(issue, issue + 1.0)
    assert charged.ahead(1, 2) is None  # the collective launched after the compute stream's present


def test_in_flight_scalar_clocks_equal_the_vectorized_clock():
    """A few throttled ranks go through ThermalClock's float path: the same finish and stretch
    as through the clock group's arrays."""
    from commsim.sim.ddp_costs import InFlight, clock_group

    rng = np.random.default_rng(11)
    n = 8
    clocks = {1: engine_module.ThermalClock(0.004, 0.003, 0.4, 0.001), 5: engine_module.ThermalClock(0.002, 0.005, 0.7)}
    for trial in range(30):
        flights = [InFlight(clock_group(clocks), 0.2), InFlight(clock_group(clocks), 0.2)]
        flights[1].scalar_clocks = None  # the vectorized path
        assert flights[0].scalar_clocks is not None
        t = rng.uniform(0, 0.01, n)
        for _ in range(4):
            begin = t + rng.uniform(-0.002, 0.003, n)
            end = begin + rng.uniform(0.001, 0.004, n)
            work = rng.uniform(0.0005, 0.004, n)
            outs = []
            for flight in flights:
                flight.add(begin, end, t)
                outs.append(flight.compute(t, work))
            np.testing.assert_allclose(outs[0], outs[1], rtol=1e-13)
            t = outs[0]
        np.testing.assert_allclose(flights[0].stretch, flights[1].stretch, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("regime", ["comm", "balanced"])
@pytest.mark.parametrize("costs", ["default", "view+slowdown"])
@pytest.mark.parametrize("throttle", [True, False])
def test_a_few_ranks_behind_go_bucket_by_bucket_beside_the_block(regime, costs, throttle, monkeypatch):
    """One rank slower than the rest (a throttled clock, or a slow factor): the block condition
    fails there only; that rank is stepped bucket by bucket, the others as a block, and the
    results are the engine's bucket by bucket."""
    slow_rank = [Throttle((5,), 0.0, 1e9, 0.5, 0.0)] if throttle else [SlowRank((5,), 1.6)]
    sc = make_scenario(nodes=3, gpus_per_node=4, parameters=6_000_000, bucket_cap=1.5e6, first_bucket=3e5,
                       backward=0.02, forward=0.01, inter={"comm": (2e9, 2e-4), "balanced": (2e10, 2e-5)}[regime],
                       steps=4, seed=1, stragglers=[Jitter(0.02)] + slow_rank, costs=COSTS[costs])
    buckets = {"n": 0}
    original = ChargedBackward.bucket

    def counted(self, j):
        buckets["n"] += 1
        return original(self, j)

    monkeypatch.setattr(ChargedBackward, "bucket", counted)
    fast, _ = _run(sc, True, 1 << 16, monkeypatch)
    fast_buckets, buckets["n"] = buckets["n"], 0
    slow, _ = _run(sc, False, 1 << 16, monkeypatch)
    for field in FIELDS:
        np.testing.assert_allclose(getattr(fast, field), getattr(slow, field), rtol=1e-12, atol=1e-15, err_msg=field)
    np.testing.assert_array_equal(fast.last_rank, slow.last_rank)
    np.testing.assert_allclose(fast.launch_spread, slow.launch_spread, rtol=1e-9, atol=1e-13)
    assert fast_buckets < buckets["n"] / 4  # the vector path bucket by bucket only where no block applies


def test_a_block_has_at_least_the_minimum_of_buckets_at_any_world_size():
    assert engine_module._block_rows(1 << 20) == engine_module.READY_BLOCK_MIN_ROWS == 4
    assert engine_module._block_rows(1024) == engine_module.READY_BLOCK_ELEMENTS // 1024


@pytest.mark.parametrize("costs", ["default", "off"])
def test_blocks_of_the_minimum_rows_equal_the_engine_bucket_by_bucket(costs, monkeypatch):
    """Few elements per block (a large world in miniature): blocks of READY_BLOCK_MIN_ROWS."""
    sc = _case("comm", costs, 1)
    monkeypatch.setattr(engine_module, "READY_BLOCK_ELEMENTS", 1)
    fast = Engine(sc).run()
    slow = Engine(sc)
    slow._shortcut = False
    slow = slow.run()
    for field in FIELDS:
        np.testing.assert_allclose(getattr(fast, field), getattr(slow, field), rtol=1e-12, atol=1e-15, err_msg=field)
    np.testing.assert_array_equal(fast.last_rank, slow.last_rank)


@pytest.mark.parametrize("regime", ["comm", "balanced", "compute", "latency"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fsdp_launch_hints_equal_the_full_comparisons(regime, seed, monkeypatch):
    # FSDP's charged step takes each launch, and each segment's start, from kept scalar bounds
    # where one side bounds the other, and tells InFlight so (its add skips the comparisons, its
    # compute the chain arithmetic): the same results, bit for bit, as the full vector work; and
    # the shift of a launch queued behind a shifted finish from the vectors' origins (to rounding)
    from commsim.sim.sharding import SegmentInFlight as InFlight  # (FSDP's InFlight: where the hints arrive)

    if regime == "latency":  # latency-bound collectives longer than the compute segments: queued back to back
        sc = make_scenario(nodes=3, gpus_per_node=4, parameters=6_000_000, bucket_cap=1.5e6, first_bucket=3e5,
                           backward=0.002, forward=0.001, inter=(2e10, 1e-2), steps=4, seed=seed,
                           stragglers=[Jitter(0.05), Throttle((3,), 0.03, 0.02, 0.5, 0.01)], costs=DDPCosts(),
                           sharding="fsdp")
    else:
        sc = _case(regime, "default", seed, sharding="fsdp")
    add, compute = InFlight.add, InFlight.compute
    hints, fast = [], []

    def counted_add(self, begin, end, floor, hint=None, bounds=None):
        hints.append(hint)
        return add(self, begin, end, floor, hint, bounds)

    def counted_compute(self, start, work, bounds=None):
        rows = None if self.begin is None else len(self.begin)
        fast.append(bounds is not None and rows == 1 and self.begin_high is not None
                    and self.end_low is not None and self.begin_high <= bounds[0]
                    and (self.end_low - bounds[1]) * (1.0 / (1.0 + self.slowdown)) >= bounds[2])
        return compute(self, start, work, bounds)

    finish_times, known = Engine._finish_times, []

    def counted_finish_times(self, kernel, launch, shift=None):
        known.append(shift is not None)
        return finish_times(self, kernel, launch, shift)

    monkeypatch.setattr(InFlight, "add", counted_add)
    monkeypatch.setattr(InFlight, "compute", counted_compute)
    monkeypatch.setattr(Engine, "_finish_times", counted_finish_times)
    hinted, _ = _run(sc, True, 1 << 16, monkeypatch)
    monkeypatch.setattr(Engine, "_finish_times", finish_times)
    monkeypatch.setattr(InFlight, "add", lambda self, begin, end, floor, hint=None, bounds=None:
                        add(self, begin, end, floor))
    monkeypatch.setattr(InFlight, "compute", lambda self, start, work, bounds=None: compute(self, start, work))
    plain, _ = _run(sc, True, 1 << 16, monkeypatch)
    slow, _ = _run(sc, False, 1 << 16, monkeypatch)
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(hinted, field), getattr(plain, field), err_msg=field)
        np.testing.assert_allclose(getattr(hinted, field), getattr(slow, field), rtol=1e-12, atol=1e-15, err_msg=field)
    # (last_rank against `slow` is not asserted: FSDP's shifted finishes differ from the kernel's
    # by ulps, which can break an issue tie either way, with or without the hints)
    np.testing.assert_array_equal(hinted.last_rank, plain.last_rank)
    np.testing.assert_array_equal(hinted.launch_spread, plain.launch_spread)
    np.testing.assert_allclose(hinted.launch_spread, slow.launch_spread, rtol=1e-9, atol=1e-13)
    if regime == "comm":  # collectives back to back: many launches are the stream's, known from two scalars
        assert sum(h is not None for h in hints) > len(hints) / 4
    if regime == "latency":  # ... and many segments run inside one chain throughout
        assert sum(h is not None for h in hints) > len(hints) / 4
        assert sum(fast) > len(fast) / 4
        assert sum(known) > len(known) / 4  # launches whose shift the vectors' origins give


def test_in_flight_scalar_clocks_memoize_work_done(monkeypatch):
    """A chain's begin, and the end the next segment starts at, recur from one compute to the
    next: each time goes through a throttled rank's clock once, with the same results."""
    from commsim.sim.ddp_costs import InFlight, clock_group

    clocks = {1: engine_module.ThermalClock(0.004, 0.003, 0.4, 0.001)}
    calls = []
    work_done = engine_module.ThermalClock.work_done_float
    monkeypatch.setattr(engine_module.ThermalClock, "work_done_float",
                        lambda self, t: calls.append(t) or work_done(self, t))
    flight, plain = InFlight(clock_group(clocks), 0.2), InFlight(clock_group(clocks), 0.2)
    plain.scalar_clocks = None  # the vectorized clock: the exact reference
    begin = np.array([0.001, 0.002, 0.0015])
    end, t = begin + 0.003, np.array([0.0012, 0.0021, 0.0016])
    for f in (flight, plain):
        f.add(begin, end, t)
    for k in range(3):  # queued collectives: the chain goes on, each segment starts at the last end
        work = np.full(3, 0.0004)
        outs = [f.compute(t, work) for f in (flight, plain)]
        np.testing.assert_allclose(outs[0], outs[1], rtol=1e-13)
        t = end
        end = end + 0.002
        for f in (flight, plain):
            f.add(f.last, end, t)
    assert len(calls) == len(set(calls))  # no time through the clock twice
    assert len(calls) < 3 * 3


class _CountedLinear(_Counted):
    """A counted max-plus linear kernel (the tree): the late ranks' decisions apply to it."""

    maxplus_linear = True

    def __init__(self, kernel):
        super().__init__(kernel)
        self.world_size = kernel.world_size


def _run_tree(sc, shortcut: bool, linear: bool = True):
    engine = Engine(sc)
    wrap = _CountedLinear if linear else _Counted
    wrapped = {}
    engine.kernels = [wrapped.setdefault(id(k), wrap(k)) for k in engine.kernels]
    engine._shortcut = shortcut
    return engine.run(), sum(k.calls for k in wrapped.values())


def _tree_case(slow, jitter=0.005, costs="default"):
    sc = make_scenario(nodes=8, gpus_per_node=4, parameters=8_000_000, bucket_cap=1.5e6, first_bucket=3e5,
                       backward=0.02, forward=0.01, inter=(4e10, 1e-5), steps=6, seed=1,
                       stragglers=[Jitter(jitter)] + slow, costs=COSTS[costs])
    return dataclasses.replace(sc, collective=Collective(algorithm="tree"))


LATE = {
    "throttled": [Throttle((5,), 0.0, 1e9, 0.5, 0.0)],  # one late rank decides alone
    "three slow": [SlowRank((2, 13, 22), 1.3)],  # three late ranks, deciding together at times
    "two slow": [SlowRank((0, 31), 1.5)],
}


@pytest.mark.parametrize("late", sorted(LATE))
@pytest.mark.parametrize("costs", ["default", "view+slowdown"])
def test_late_ranks_decide_tree_collectives_as_the_engine_bucket_by_bucket(late, costs):
    """A few ranks fall behind a tree all-reduce: where they decide a collective (max-plus
    gaps), it costs no kernel call, and the results are the engine's bucket by bucket."""
    sc = _tree_case(LATE[late], costs=costs)
    fast, fast_calls = _run_tree(sc, True)
    slow, slow_calls = _run_tree(sc, False)
    for field in FIELDS:
        np.testing.assert_allclose(getattr(fast, field), getattr(slow, field), rtol=1e-12, atol=1e-15, err_msg=field)
    np.testing.assert_array_equal(fast.last_rank, slow.last_rank)
    np.testing.assert_allclose(fast.launch_spread, slow.launch_spread, rtol=1e-9, atol=1e-13)
    _, undecided_calls = _run_tree(sc, True, linear=False)  # the same shortcuts without the decisions
    if late == "throttled":  # one rank at a constant clock: its launches are uniform shifts already
        assert fast_calls <= undecided_calls + 2
    else:
        assert fast_calls < undecided_calls / 2


def test_late_ranks_deciding_together_take_the_shortcut(monkeypatch):
    """Three slow ranks: some collectives are decided by the three together (the vector test),
    the rest by one of them, and nearly none run the kernel."""
    decided = []
    original = Engine._decided_by_one

    def counted(self, *args):
        out = original(self, *args)
        decided.append(None if out[0] is None else len(out[0]))
        return out

    monkeypatch.setattr(Engine, "_decided_by_one", counted)
    _run_tree(_tree_case(LATE["three slow"]), True)
    assert decided.count(3) >= 5 and decided.count(1) >= 5
    assert decided.count(None) < len(decided) / 5


@pytest.mark.parametrize("slow, factor, seed, inter", [
    # a rank off the late set falls behind its previous finish mid-block: the block ends there
    ((2, 13, 22), 1.3, 2, (2e10, 2e-5)),
    # a late rank short of the cold gap over the others' latest launch: the kernel runs
    ((3, 9), 1.1, 2, (2e10, 2e-5)),
    # after a decision by a few: the others' scalar bound, and the vector test from a finish
    ((7,), 1.2, 2, (4e10, 1e-5)),
])
def test_late_rank_decisions_stop_where_their_conditions_fail(slow, factor, seed, inter):
    sc = make_scenario(nodes=8, gpus_per_node=4, parameters=8_000_000, bucket_cap=1.5e6, first_bucket=3e5,
                       backward=0.02, forward=0.01, inter=inter, steps=6, seed=seed,
                       stragglers=[Jitter(0.05), SlowRank(slow, factor)], costs=COSTS["default"])
    sc = dataclasses.replace(sc, collective=Collective(algorithm="tree"))
    fast, _ = _run_tree(sc, True)
    slow_run, _ = _run_tree(sc, False)
    for field in FIELDS:
        np.testing.assert_allclose(getattr(fast, field), getattr(slow_run, field), rtol=1e-12, atol=1e-15, err_msg=field)
    np.testing.assert_array_equal(fast.last_rank, slow_run.last_rank)


@pytest.mark.parametrize("late", sorted(LATE))
def test_a_decision_carries_over_to_the_next_block(late, monkeypatch):
    """Blocks of two buckets: the next block starts from the previous one's decision (the gap
    against its columns), not from the cold test over the others' latest launch, with the
    engine's results bucket by bucket."""
    from commsim.collectives.maxplus import Responses

    cold = {"n": 0}
    original = Responses.cold_gap

    def counted(self, *args):
        cold["n"] += 1
        return original(self, *args)

    monkeypatch.setattr(Responses, "cold_gap", counted)
    monkeypatch.setattr(engine_module, "READY_BLOCK_ELEMENTS", 64)  # 32 ranks: two buckets a block
    monkeypatch.setattr(engine_module, "READY_BLOCK_MIN_ROWS", 1)
    sc = _tree_case(LATE[late])
    fast, _ = _run_tree(sc, True)
    slow, _ = _run_tree(sc, False)
    for field in FIELDS:
        np.testing.assert_allclose(getattr(fast, field), getattr(slow, field), rtol=1e-12, atol=1e-15, err_msg=field)
    np.testing.assert_array_equal(fast.last_rank, slow.last_rank)
    assert cold["n"] < 15  # without the carry over: about 40 (one per block)


@pytest.mark.parametrize("algorithm", ["halving_doubling", "auto"])
@pytest.mark.parametrize("late", sorted(LATE))
def test_late_ranks_decide_halving_doubling_as_the_engine_bucket_by_bucket(algorithm, late):
    """Halving-doubling is max-plus linear too (and `auto` where it picks it): the late ranks'
    decisions give the engine's results bucket by bucket, with fewer kernel calls."""
    sc = dataclasses.replace(_tree_case(LATE[late]), collective=Collective(algorithm=algorithm))
    assert all(k.maxplus_linear for k in Engine(sc).kernels)
    fast, fast_calls = _run_tree(sc, True)
    slow, _ = _run_tree(sc, False)
    for field in FIELDS:
        np.testing.assert_allclose(getattr(fast, field), getattr(slow, field), rtol=1e-12, atol=1e-15, err_msg=field)
    np.testing.assert_array_equal(fast.last_rank, slow.last_rank)
    np.testing.assert_allclose(fast.launch_spread, slow.launch_spread, rtol=1e-9, atol=1e-13)
    _, undecided_calls = _run_tree(sc, True, linear=False)
    assert fast_calls <= undecided_calls

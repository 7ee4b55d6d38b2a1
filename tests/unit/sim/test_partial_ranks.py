"""The partial path at small world sizes (a few ranks stepped on floats beside a block of
buckets): its shortcuts against the same engine bucket by bucket, and the work they skip."""

import numpy as np
import pytest

import commsim.sim.ddp_costs as ddp_costs
from commsim.scenario.spec import DDPCosts, Jitter, Throttle
from commsim.sim.ddp_costs import ChargedBackward, _one_chain_float, _through_chains_float
from commsim.sim.engine import Engine
from commsim.sim.stragglers import ThermalClock
from tests.conftest import make_scenario

FIELDS = ("step_end", "rank_end", "rank_backward_end", "rank_comm_end", "rank_busy", "comm_time")
CALLS = {"work_done_float": 0, "time_for_work_float": 0}


class _CountedClock(ThermalClock):
    """A thermal clock that counts its float-path calls (in CALLS: the dataclass is frozen)."""

    def work_done_float(self, t):
        CALLS["work_done_float"] += 1
        return super().work_done_float(t)

    def time_for_work_float(self, w):
        CALLS["time_for_work_float"] += 1
        return super().time_for_work_float(w)


def _throttled_32(seed: int, steps: int = 6):
    # 4 nodes x 8 GPUs, one throttled rank behind the others in most buckets (the partial path)
    stragglers = [Throttle((13,), 0.06, 0.11, 0.5, 0.0), Jitter(0.02)]
    return make_scenario(nodes=4, gpus_per_node=8, parameters=200_000_000, bucket_cap=25e6, first_bucket=1e6,
                         forward=0.03, backward=0.06, inter=(2.5e10, 5e-6), steps=steps, seed=seed,
                         stragglers=stragglers, costs=DDPCosts())


@pytest.mark.parametrize("seed", [0, 1])
def test_throttled_32_ranks_equal_the_engine_bucket_by_bucket(seed):
    results = []
    for shortcut in (True, False):
        engine = Engine(_throttled_32(seed))
        engine._shortcut = shortcut
        results.append(engine.run())
    fast, slow = results
    for name in FIELDS:
        np.testing.assert_allclose(getattr(fast, name), getattr(slow, name), rtol=1e-12, atol=0, err_msg=name)
    np.testing.assert_array_equal(fast.last_rank, slow.last_rank)
    np.testing.assert_allclose(fast.launch_spread, slow.launch_spread, rtol=1e-9, atol=1e-15)


def _late_rank_one(clock):
    """A charged backward on 4 ranks whose chain began on every rank but rank 1 (its first
    collective launched after its compute stream's present)."""
    charged = ChargedBackward([1e6] * 6, True, DDPCosts(), {1: clock})
    charged.begin(np.full(4, 0.01), np.zeros(4))
    charged.bucket(0)
    begin = charged.t.copy()  # launched by the compute stream's present: the chain began...
    begin[1] += 0.5  # ...but on rank 1
    charged.ran(begin, begin + 1.0)
    return charged


def test_ahead_does_not_step_a_late_throttled_rank():
    # its rows are the partial path's: stepping its clock through the block would be wasted
    charged = _late_rank_one(_CountedClock(0.004, 0.003, 0.4, 0.001))
    for key in CALLS:
        CALLS[key] = 0
    got = charged.ahead(1, 5, partial=True)
    assert got is not None and charged.late_ranks.tolist() == [1]
    assert CALLS == {"work_done_float": 0, "time_for_work_float": 0}
    # the block still runs: the partial ranks write their own state back
    partial = charged.partial(charged.late_ranks)
    issue, _ = got
    stream = np.maximum(issue[0], 2.0)
    for j in range(1, 6):
        values = partial.bucket(j)
        partial.ran_values(values, [2.0], [2.0 + j])
    charged.keep(5, stream + 5.0)
    assert np.isfinite(charged.in_flight.stretch).all()


def test_partial_throttled_rank_converts_each_chain_end_once():
    # a throttled late rank: its chains' ends go to work units once per chain end, not per bucket
    clock = ThermalClock(0.004, 0.003, 0.4, 0.001)
    charged = _late_rank_one(clock)
    assert charged.ahead(1, 5, partial=True) is not None
    partial = charged.partial(charged.late_ranks)
    counted = _CountedClock(0.004, 0.003, 0.4, 0.001)
    partial.state[0][6] = counted  # the same parameters: the same values, counted
    for key in CALLS:
        CALLS[key] = 0
    previous = 1.5
    for j in range(1, 6):  # queued behind one another: one chain, its end moving each bucket
        (value,) = partial.bucket(j)
        partial.ran_values([value], [previous], [previous + 0.1])
        previous += 0.1
    assert len(partial.state[0][3]) == 1
    # per bucket: its start and the moved chain end; the chain's begin once (the first bucket)
    assert CALLS["work_done_float"] == 5 * 2 + 1
    assert CALLS["time_for_work_float"] == 2 * 5


def test_one_chain_closed_form_is_the_chain_loop_bit_for_bit(monkeypatch):
    rng = np.random.default_rng(5)
    for _ in range(2000):
        start, work = float(rng.random()), float(rng.random() * 0.1)
        begin = start + float(rng.normal() * 0.05)
        end = begin + float(rng.random() * 0.2)
        slowdown = float(rng.choice([0.0, 0.1, 0.25, 1.0]))
        assert _one_chain_float(start, work, begin, end, slowdown) == _through_chains_float(
            start, work, [begin], [end], slowdown)
    # a late unthrottled rank with one chain: the closed form, not the chain loop
    charged = _late_rank_one(ThermalClock(0.004, 0.003, 0.4, 0.001))
    charged.ahead(1, 5, partial=True)
    partial = charged.partial(np.array([2]))
    partial.state[0][3] = [[0.0, 5.0, None, None]]
    loops = []
    monkeypatch.setattr(ddp_costs, "_through_chains_float", lambda *a: loops.append(a) or _through_chains_float(*a))
    partial.bucket(1)
    assert loops == []


class _CountedMaximum:
    """np.maximum counting its direct calls (its methods, accumulate included, pass through)."""

    def __init__(self, ufunc):
        self.ufunc, self.calls = ufunc, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.ufunc(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.ufunc, name)


def _ahead_issues(n: int, rows: int, seed: int):
    rng = np.random.default_rng(seed)
    charged = ChargedBackward(rng.uniform(1e5, 1e6, rows + 1), True, DDPCosts(), {})
    charged.begin(rng.uniform(0.01, 0.02, n), np.zeros(n))
    charged.bucket(0)
    begin = charged.t - 1e-4  # every rank's chain began: ahead applies
    charged.ran(begin, begin + 1.0)
    issue, binding = charged.ahead(1, rows)
    assert binding
    return issue


@pytest.mark.parametrize("n", [8, 32, 64, 65, 128])
def test_ahead_running_maximum_is_the_row_by_row_loop(n, monkeypatch):
    # the issues' running maximum over the rows: one accumulate call at a few ranks, the same values
    counted = _CountedMaximum(np.maximum)
    monkeypatch.setattr(np, "maximum", counted)
    got = _ahead_issues(n, 40, n)
    assert (counted.calls < 10) == (n <= 64), counted.calls  # 39 rows after the first: 39 calls in the loop
    monkeypatch.setattr(ddp_costs, "ACCUMULATE_MAX_RANKS", 0)
    np.testing.assert_array_equal(got, _ahead_issues(n, 40, n))


def test_a_block_that_fails_with_no_rank_behind_goes_bucket_by_bucket():
    """32gpu_throttle at a 10 MiB cap: a binding block the collectives did not confirm, with no
    rank behind the stream, once went down the partial path with no ranks (and failed in
    PartialRanks.write_back, taking `commsim compare`'s bucket search with it). It now runs bucket
    by bucket, as the engine without shortcuts does."""
    from dataclasses import replace
    from pathlib import Path

    from commsim.scenario.loader import load_scenario

    sc = load_scenario(str(Path(__file__).resolve().parents[3] / "scenarios" / "32gpu_throttle.yaml"))
    sc = replace(sc, steps=5, ddp=replace(sc.ddp, bucket_cap=float(10 << 20)))
    fast = Engine(sc).run()
    slow = Engine(sc)
    slow._shortcut = False
    slow = slow.run()
    np.testing.assert_allclose(fast.step_time, slow.step_time, rtol=1e-9)


class _CountedRow(list):
    """A chain row counting the reads of its fields (in ROW_READS)."""

    def __getitem__(self, i):
        ROW_READS[0] += 1
        return super().__getitem__(i)


ROW_READS = [0]


def test_chain_list_walk_equals_the_chain_loop_bit_for_bit():
    # fast (walking the rows, stopping once the work is done) equals slow (the column loop)
    rng = np.random.default_rng(11)
    for _ in range(2000):
        k = int(rng.integers(2, 8))
        gaps = rng.random(2 * k) * 0.05
        edges = np.cumsum(gaps) + float(rng.normal() * 0.05)
        begin, end = edges[0::2].tolist(), edges[1::2].tolist()
        start, work = float(rng.random() * 0.1), float(rng.random() * 0.1)
        slowdown = float(rng.choice([0.0, 0.1, 0.25, 1.0]))
        rows = [[b, e] for b, e in zip(begin, end)]
        assert ddp_costs._through_chain_list_float(start, work, rows, 0, 1, slowdown) == _through_chains_float(
            start, work, begin, end, slowdown)


def test_a_partial_bucket_reads_the_chains_it_needs_not_every_queued_one():
    """Launches lagging compute (bucket_overhead above the compute per bucket: 2 ranks, 200 KB
    buckets of a 1e9-parameter model) leave every collective still ahead as a chain of its own.
    Each bucket once read all of them (quadratic: 'commsim run scenarios/seed_1b_8gpu_ib100.yaml
    --set cluster.nodes=1 --set cluster.gpus_per_node=2 --set ddp.bucket_cap=200KB' ran 80 s a
    step); now the walk stops at the first chain that begins after the bucket's compute."""
    charged = _late_rank_one(ThermalClock(0.004, 0.003, 0.4, 0.001))
    charged.ahead(1, 5, partial=True)
    partial = charged.partial(np.array([2]))
    t = partial.state[0][0]
    queued = [_CountedRow([t + 1.0 + i, t + 1.5 + i, None, None]) for i in range(10_000)]
    partial.state[0][3] = queued
    ROW_READS[0] = 0
    partial.bucket(1)
    assert ROW_READS[0] < 20, ROW_READS[0]
    # a new chain after them: the ended ones dropped from the front, the rest kept, in place
    ROW_READS[0] = 0
    partial.state[0][0] = t + 2.7  # compute has passed the first two chains' ends
    partial.ran_values([t + 20_000.0], [t + 20_000.0], [t + 20_001.0])
    assert len(partial.state[0][3]) == 10_000 - 2 + 1
    assert ROW_READS[0] < 20, ROW_READS[0]


def test_two_ranks_with_launches_lagging_compute_equal_the_engine_bucket_by_bucket():
    # 200 buckets of 100 KB, 10 us of backward each under a 40 us launch: the regime of 2,000 such
    # buckets (50e6 parameters, 23 s here, nearly all the bucket-by-bucket engine's quadratic walk)
    sc = make_scenario(nodes=1, gpus_per_node=2, parameters=5_000_000, bucket_cap=100e3, first_bucket=100e3,
                       forward=0.01, backward=0.002, steps=2, seed=0,
                       stragglers=[Jitter(0.05)], costs=DDPCosts(bucket_overhead=40e-6, overlap_slowdown=0.2))
    fast = Engine(sc).run()
    slow = Engine(sc)
    slow._shortcut = False
    slow = slow.run()
    for name in FIELDS:
        np.testing.assert_allclose(getattr(fast, name), getattr(slow, name), rtol=1e-9, atol=0, err_msg=name)

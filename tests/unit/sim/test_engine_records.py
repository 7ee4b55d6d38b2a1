"""The engine's per-collective records (simulate(collectives=True)) and the explicit bucket layout."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from commsim.network.costs import ddp_buckets
from commsim.scenario.spec import Jitter, SlowRank, Stall, Throttle
from commsim.sim.engine import Engine, bucket_layout, simulate
from commsim.sim.reference import ReferenceModel
from commsim.sim.sharding import collective_steps
from tests.conftest import make_scenario, replace
from tests.unit.sim.test_engine import small_scenarios


def _two_ranks(**kw):
    """1 node x 2 GPUs, no latency, 4 MiB of gradients at 32 MiB/s: an all-reduce of S bytes takes
    2 x (S/2) / 32 MiB/s; forward 0.25 s, backward 0.5 s, optimizer 0.125 s (exact in binary)."""
    args = dict(nodes=1, gpus_per_node=2, parameters=2 ** 20, forward=0.25, backward=0.5, optimizer=0.125,
                intra=(2.0 ** 25, 0.0), steps=3)
    args.update(kw)
    return make_scenario(**args)


def _layout(sc, sizes, ready=None):
    return replace(sc, ddp=replace(sc.ddp, bucket_sizes=tuple(sizes), bucket_ready=None if ready is None else tuple(ready)))


def test_records_two_buckets_with_a_slow_rank_exactly():
    sc = _two_ranks(first_bucket=2 ** 21, bucket_cap=2 ** 21, steps=3, stragglers=[SlowRank((1,), 2.0)])
    r = simulate(sc, collectives=True)
    # rank 0 has its buckets ready at 0.5 and 0.75, rank 1 (twice as slow) at 1.0 and 1.5; each
    # all-reduce takes 2 x 1/32 s once both ranks run it; rank 0's second waits for its first
    assert r.coll_issue[0].tolist() == [[0.5, 1.0], [0.75, 1.5]]
    assert r.coll_start[0].tolist() == [[0.5, 1.0], [1.0625, 1.5]]
    assert r.coll_finish[0].tolist() == [[1.0625, 1.0625], [1.5625, 1.5625]]
    # each rank starts step 1 when its optimizer is done (1.6875, 1.8125): no barrier
    assert r.coll_issue[1].tolist() == [[2.1875, 2.8125], [2.4375, 3.3125]]
    # step 2 repeats step 1 (filled in as a steady state), one slow step (1.8125 s) later
    assert r.steps_simulated == 2
    np.testing.assert_array_equal(r.coll_issue[2], r.coll_issue[1] + 1.8125)
    np.testing.assert_array_equal(r.coll_finish[2], r.coll_finish[1] + 1.8125)


def test_stream_order_start_is_the_later_of_issue_and_the_previous_finish():
    # no overlap: both buckets issued at the backward's end (0.75); the second starts when the first is done
    sc = _two_ranks(first_bucket=2 ** 21, bucket_cap=2 ** 21, overlap=False, steps=1)
    r = simulate(sc, collectives=True)
    assert r.coll_issue[0].tolist() == [[0.75, 0.75], [0.75, 0.75]]
    assert r.coll_start[0].tolist() == [[0.75, 0.75], [0.8125, 0.8125]]
    assert r.coll_finish[0].tolist() == [[0.8125, 0.8125], [0.875, 0.875]]


def test_records_are_absent_unless_asked_for():
    r = simulate(_two_ranks(steps=1))
    assert r.coll_issue is None and r.coll_start is None and r.coll_finish is None


@pytest.mark.parametrize("sharding", ["none", "zero2", "fsdp"])
def test_records_agree_with_the_per_step_aggregates_and_kept_columns(sharding):
    sc = make_scenario(nodes=2, gpus_per_node=4, parameters=20_000_000, steps=5, seed=2, sharding=sharding,
                       stragglers=[Jitter(0.1), Stall((3,), 0.01, every=2), Throttle((5,), 0.3, 0.3, 0.5)])
    full = simulate(sc, collectives=True)
    plain = simulate(sc)
    nc = full.last_rank.shape[1]
    assert full.coll_issue.shape == (5, nc, 8)
    # recording changes nothing else
    for name in ("step_end", "rank_end", "rank_comm_end", "last_rank", "launch_spread", "comm_time"):
        np.testing.assert_array_equal(getattr(full, name), getattr(plain, name))
    np.testing.assert_array_equal(full.coll_issue.argmax(axis=2), full.last_rank)
    np.testing.assert_allclose(full.coll_issue.max(axis=2) - full.coll_issue.min(axis=2), full.launch_spread,
                               rtol=0, atol=1e-15)
    assert np.all(full.coll_start >= full.coll_issue) and np.all(full.coll_finish >= full.coll_start)
    np.testing.assert_array_equal(full.coll_start[:, 1:], np.maximum(full.coll_issue[:, 1:], full.coll_finish[:, :-1]))
    kept = np.array([6, 1])
    part = simulate(sc, ranks=kept, collectives=True)
    for name in ("coll_issue", "coll_start", "coll_finish"):
        np.testing.assert_array_equal(getattr(part, name), getattr(full, name)[:, :, kept])


def test_steady_state_fill_equals_stepping_every_step():
    sc = make_scenario(nodes=1, gpus_per_node=4, steps=6, stragglers=[SlowRank((1,), 1.7)])
    filled = simulate(sc, collectives=True)
    assert filled.steps_simulated < sc.steps
    stepped = _NeverSteady(sc, collectives=True).run()
    assert stepped.steps_simulated == sc.steps
    for name in ("coll_issue", "coll_start", "coll_finish"):
        np.testing.assert_allclose(getattr(filled, name), getattr(stepped, name), rtol=1e-12)


class _NeverSteady(Engine):
    """The engine stepping through every step (no steady-state fill)."""

    def _is_steady(self, s):
        return False


class _TimedReference(ReferenceModel):
    """The per-chunk reference, noting when each of its events fires: a rank's issue of a collective
    (its `ready` event), its first chunk step (the collective started there) and its last."""

    def run(self):
        self.times = {}
        return super().run()

    def _event(self, table, key):
        fresh = key not in table
        ev = super()._event(table, key)
        if fresh:
            name = "ready" if table is self.ready else "chunk"
            ev.callbacks.append(lambda _e, k=(name, *key): self.times.__setitem__(k, self.env.now))
        return ev


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_scenarios())
def test_records_equal_the_per_chunk_reference(sc):
    n = sc.world_size
    if n < 2:  # one rank: the reference runs no communication process
        return
    fast = simulate(sc, collectives=True)
    ref = _TimedReference(sc)
    ref.run()
    S, C = fast.last_rank.shape
    for s in range(S):
        for o in range(C):
            last = collective_steps(ref.ops[o].kind, n)
            for r in range(n):
                assert fast.coll_issue[s, o, r] == pytest.approx(ref.times[("ready", r, s, o)], rel=1e-9, abs=1e-12)
                assert fast.coll_start[s, o, r] == pytest.approx(ref.times[("chunk", r, s, o, 0)], rel=1e-9, abs=1e-12)
                assert fast.coll_finish[s, o, r] == pytest.approx(ref.times[("chunk", r, s, o, last)], rel=1e-9,
                                                                  abs=1e-12)


# -- the explicit bucket layout: ddp.bucket_sizes and ddp.bucket_ready ----------------------------

def test_default_layout_is_ddps_first_bucket_and_caps_at_a_uniform_rate():
    sc = make_scenario(parameters=20_000_000)
    sizes, ready = bucket_layout(sc)
    np.testing.assert_array_equal(sizes, ddp_buckets(80e6, 1e6, 25e6))
    np.testing.assert_array_equal(ready, np.cumsum(sizes) / sizes.sum())


def test_explicit_sizes_equal_to_the_default_layout_change_nothing():
    sc = make_scenario(parameters=20_000_000, steps=3, stragglers=[Jitter(0.1)])
    same = _layout(sc, ddp_buckets(80e6, 1e6, 25e6))
    a, b = simulate(sc, collectives=True), simulate(same, collectives=True)
    for name in ("step_end", "rank_end", "coll_issue", "coll_finish"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_explicit_ready_points_move_the_issue_times_exactly():
    # buckets of 1 and 3 MiB; bucket 0 ready at half the backward (a uniform rate says a quarter)
    sc = _layout(_two_ranks(steps=1), [2 ** 20, 3 * 2 ** 20], [0.5, 1.0])
    r = simulate(sc, collectives=True)
    np.testing.assert_array_equal(r.bucket_sizes, [2 ** 20, 3 * 2 ** 20])
    assert r.coll_issue[0].tolist() == [[0.5, 0.5], [0.75, 0.75]]
    # 1 MiB: 2 x 0.5 MiB / 32 MiB/s = 1/32 s; 3 MiB: 3/32 s
    assert r.coll_finish[0].tolist() == [[0.53125, 0.53125], [0.84375, 0.84375]]
    assert r.step_end.tolist() == [0.84375 + 0.125]
    uniform = simulate(_layout(_two_ranks(steps=1), [2 ** 20, 3 * 2 ** 20]), collectives=True)
    assert uniform.coll_issue[0, 0].tolist() == [0.375, 0.375]  # 0.25 + 0.5 x 1/4

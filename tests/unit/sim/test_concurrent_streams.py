"""k collective streams per rank (commsim/sim/concurrent_streams.py): the sharing arithmetic
against closed forms, and the engine's k > 1 path on cases whose answer is known."""

import dataclasses

import numpy as np
import pytest

from commsim.collectives.kernels import make_kernel
from commsim.scenario.spec import DDPCosts
from commsim.sim import concurrent_streams as cs
from commsim.sim.engine import simulate
from commsim.sim.links import scenario_fabric
from tests.conftest import NO_DDP_COSTS, make_scenario

FIELDS = ("step_end", "rank_end", "rank_backward_end", "rank_comm_end", "rank_busy", "rank_stall",
          "last_rank", "launch_spread", "comm_time")


def with_streams(sc, k):
    return dataclasses.replace(sc, ddp=dataclasses.replace(sc.ddp, comm_streams=k))


# -- the pure functions ----------------------------------------------------------------------

def test_one_collective_alone_takes_its_time():
    assert cs.shared_finish_times([1.0], [0.25], [0.5]).tolist() == [1.75]
    assert cs.queued_finish_times([1.0], [0.25], [0.5], 3).tolist() == [1.75]


def test_two_equal_collectives_started_together_end_at_fixed_plus_twice_the_bandwidth_part():
    assert cs.shared_finish_times([0.0, 0.0], [0.3, 0.3], [0.5, 0.5]).tolist() == [1.3, 1.3]
    # m equal ones: F + m W, and the throughput gain m (F + W) / (F + m W)
    assert cs.shared_finish_times([2.0] * 4, [0.5] * 4, [0.25] * 4).tolist() == [3.5] * 4
    assert cs.concurrency_gain(0.3, 0.5, 2) == pytest.approx(2 * 0.8 / 1.3)
    assert cs.concurrency_gain(0.0, 1.0, 5) == 1.0 and cs.concurrency_gain(1.0, 0.0, 5) == 5.0


def test_capacity_lets_up_to_c_run_at_full_rate():
    # c = 2: two at once each at full rate (F + W), three share two collectives' worth
    assert cs.shared_finish_times([0.0, 0.0], [0.3, 0.3], [0.5, 0.5], capacity=2.0).tolist() == [0.8, 0.8]
    assert cs.shared_finish_times([0.0] * 3, [0.0] * 3, [1.0] * 3, capacity=2.0).tolist() == pytest.approx([1.5] * 3)
    # c = 1.5, two equal ones: each at 3/4, F + W / 0.75; the gain m (F + W) / (F + W / min(1, c/m))
    assert cs.shared_finish_times([0.0, 0.0], [0.2, 0.2], [0.6, 0.6], capacity=1.5).tolist() == pytest.approx([1.0, 1.0])
    assert cs.concurrency_gain(0.2, 0.6, 2, capacity=1.5) == pytest.approx(1.6)
    assert cs.concurrency_gain(0.0, 1.0, 4, capacity=2.5) == pytest.approx(2.5)
    assert [cs.shared_rate(m, 1.5) for m in (0, 1, 2, 3)] == [1.0, 1.0, 0.75, 0.5]
    assert cs.shared_next(np.array([0.3, 0.6]), 1.5) == pytest.approx(0.4)
    assert cs.shared_advance(np.array([0.3, 0.6]), 0.4, 1.5).tolist() == pytest.approx([0.0, 0.3])


def test_staggered_sharing_conserves_the_work():
    # W = 1 each, the second joins at 0.5: the first alone 0.5, then both at 1/2 for 1 s (the
    # first done at 1.5), the second alone for its last 0.5
    assert cs.shared_finish_times([0.0, 0.5], [0.0, 0.0], [1.0, 1.0]).tolist() == [1.5, 2.0]
    # a fixed part is not shared: the second's bandwidth part joins at 0.5 + 0.5
    assert cs.shared_finish_times([0.0, 0.5], [0.0, 0.5], [2.0, 1.0]).tolist() == pytest.approx([3.0, 3.0])


def test_one_slot_runs_them_in_order():
    issue = np.array([0.0, 0.1, 0.1, 5.0])
    fixed, work = np.array([0.2, 0.1, 0.3, 0.1]), np.array([0.5, 0.4, 0.2, 0.1])
    expected, prev = [], -np.inf
    for i, f, w in zip(issue, fixed, work):
        prev = max(i, prev) + f + w
        expected.append(prev)
    assert cs.queued_finish_times(issue, fixed, work, 1) == pytest.approx(expected, rel=1e-14)


def test_two_slots_of_a_queue_of_equal_collectives():
    # 4 at once on 2 slots: two pairs, each F + 2W after the previous pair (PS within a pair)
    out = cs.queued_finish_times([0.0] * 4, [0.1] * 4, [0.3] * 4, 2)
    assert out.tolist() == pytest.approx([0.7, 0.7, 1.4, 1.4], rel=1e-14)


def test_advance_and_next_are_processor_sharing():
    rem = np.array([0.3, 0.6, 0.9])
    assert cs.shared_next(rem) == pytest.approx(0.9)
    assert cs.shared_advance(rem, 0.9).tolist() == pytest.approx([0.0, 0.3, 0.6])
    assert cs.shared_next(np.array([])) == np.inf and cs.shared_advance(np.array([]), 1.0).size == 0


def test_split_keeps_the_fixed_part_within_the_whole():
    assert cs.split_time(1.0, 0.25) == (0.25, 0.75)
    assert cs.split_time(1.0, 2.0) == (1.0, 0.0) and cs.split_time(1.0, -1.0) == (0.0, 1.0)


def test_fixed_part_is_the_kernels_zero_byte_time():
    sc = make_scenario(nodes=1, gpus_per_node=4, intra=(10e9, 1e-4))
    fabric = scenario_fabric(sc)
    kernel = make_kernel("ring", fabric, 8e6)
    fixed, work = cs.fixed_and_bandwidth(kernel, fabric, "ring", "alpha-beta")
    assert fixed == pytest.approx(6 * 1e-4)  # 2 (n - 1) ring steps of one latency
    assert fixed + work == kernel.uniform_time()
    assert work == pytest.approx(2 * 3 / 4 * 8e6 / 10e9, rel=1e-9)


# -- the engine with k > 1 -------------------------------------------------------------------

def test_one_stream_is_the_engine_bit_for_bit():
    sc = make_scenario(nodes=2, gpus_per_node=2, parameters=3_000_000, bucket_cap=2e6, steps=4, costs=DDPCosts())
    a, b = simulate(sc, collectives=True), simulate(with_streams(sc, 1), collectives=True)
    for name in FIELDS + ("coll_issue", "coll_start", "coll_finish"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize("costs", [NO_DDP_COSTS, DDPCosts(bucket_overhead=1e-4, overlap_slowdown=0.3)])
def test_streams_that_never_overlap_give_the_one_stream_schedule(costs):
    # long gaps between buckets (compute-bound): no two all-reduces are ever in flight together
    sc = make_scenario(nodes=1, gpus_per_node=2, parameters=2_000_000, bucket_cap=1e6, first_bucket=1e6,
                       intra=(50e9, 1e-5), backward=1.0, steps=3, costs=costs)
    one, two = simulate(sc, collectives=True), simulate(with_streams(sc, 2), collectives=True)
    assert np.all(two.coll_start[:, 1:] >= two.coll_finish[:, :-1])  # the premise
    for name in ("step_end", "rank_end", "rank_comm_end", "comm_time", "coll_finish"):
        assert getattr(two, name) == pytest.approx(getattr(one, name), rel=1e-12), name


def test_two_streams_overlap_a_burst_of_buckets():
    # no overlap with compute: every bucket issued at the backward's end at once; on 2 ranks with
    # no DDP costs, k streams run them k at a time, each group F + k W after the previous one
    sc = make_scenario(nodes=1, gpus_per_node=2, parameters=4_000_000, bucket_cap=4e6, first_bucket=4e6,
                       intra=(1e9, 1e-3), overlap=False, steps=2, optimizer=0.0)
    fabric = scenario_fabric(sc)
    kernel = make_kernel("ring", fabric, 4e6)
    fixed, work = cs.fixed_and_bandwidth(kernel, fabric, "ring", "alpha-beta")
    step_compute = sc.compute.forward + sc.compute.backward
    for k in (2, 4):
        r = simulate(with_streams(sc, k), collectives=True)
        expected = cs.queued_finish_times([step_compute] * 4, [fixed] * 4, [work] * 4, k)
        assert r.coll_finish[0, :, 0] == pytest.approx(expected, rel=1e-12)
        assert r.step_time[0] == pytest.approx(expected.max(), rel=1e-12)
        assert np.array_equal(r.coll_finish[0, :, 0], r.coll_finish[0, :, 1])  # every rank together
    one = simulate(sc).step_time[0]
    assert one == pytest.approx(step_compute + 4 * (fixed + work), rel=1e-12)
    assert simulate(with_streams(sc, 2)).step_time[0] < one  # the fixed parts overlap


def test_more_streams_never_slow_a_step_without_slowdown():
    sc = make_scenario(nodes=1, gpus_per_node=3, parameters=5_000_000, bucket_cap=1e6, first_bucket=5e5,
                       intra=(2e9, 3e-4), backward=0.02, steps=3,
                       costs=DDPCosts(bucket_overhead=2e-4, overlap_slowdown=0.0))
    times = [simulate(with_streams(sc, k)).step_time[-1] for k in (1, 2, 3, 8)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(times, times[1:]))
    assert times[1] < times[0]


def test_capacity_speeds_concurrent_buckets_and_one_stream_ignores_it():
    sc = make_scenario(nodes=1, gpus_per_node=2, parameters=4_000_000, bucket_cap=4e6, first_bucket=4e6,
                       intra=(1e9, 1e-3), overlap=False, steps=2, optimizer=0.0)
    def at(k, c):
        return simulate(dataclasses.replace(sc, ddp=dataclasses.replace(sc.ddp, comm_streams=k, comm_capacity=c)))
    fabric = scenario_fabric(sc)
    fixed, work = cs.fixed_and_bandwidth(make_kernel("ring", fabric, 4e6), fabric, "ring", "alpha-beta")
    step_compute = sc.compute.forward + sc.compute.backward
    # 4 buckets on 2 streams with the bandwidth of 2: two pairs of F + W each
    assert at(2, 2.0).step_time[0] == pytest.approx(step_compute + 2 * (fixed + work), rel=1e-12)
    assert at(2, 1.5).step_time[0] < at(2, 1.0).step_time[0]
    assert np.array_equal(at(1, 3.0).step_end, at(1, 1.0).step_end)


def test_sharing_all_of_it_gains_the_capacity_at_every_size():
    # the fixed part shared too: 4 buckets on 2 streams with capacity 1.5 run in pairs of T / 0.75
    sc = make_scenario(nodes=1, gpus_per_node=2, parameters=4_000_000, bucket_cap=4e6, first_bucket=4e6,
                       intra=(1e9, 1e-3), overlap=False, steps=2, optimizer=0.0)
    fabric = scenario_fabric(sc)
    fixed, work = cs.fixed_and_bandwidth(make_kernel("ring", fabric, 4e6), fabric, "ring", "alpha-beta")
    step_compute = sc.compute.forward + sc.compute.backward
    def at(shared):
        ddp = dataclasses.replace(sc.ddp, comm_streams=2, comm_capacity=1.5, comm_shared=shared)
        return simulate(dataclasses.replace(sc, ddp=ddp)).step_time[0]
    assert at("all") == pytest.approx(step_compute + 2 * (fixed + work) / 0.75, rel=1e-12)
    assert at("bandwidth") == pytest.approx(step_compute + 2 * (fixed + work / 0.75), rel=1e-12)


def test_the_event_log_and_progress_with_streams():
    sc = with_streams(make_scenario(nodes=1, gpus_per_node=2, parameters=2_000_000, bucket_cap=1e6, steps=2), 2)
    log, seen = [], []
    r = simulate(sc, log=log, on_step=lambda d, t: seen.append((d, t)))
    assert seen == [(1, 2), (2, 2)]
    assert [e for _, s, e in log if s == 0][-1] == "end" and sum(1 for _, s, e in log if e == "end") == 2
    assert [t for t, _, _ in log] == sorted(t for t, _, _ in log)
    assert log[-1][0] == r.step_end[-1]


def test_the_engine_refuses_what_the_path_does_not_model():
    from commsim.scenario.spec import Throttle

    sc = with_streams(make_scenario(nodes=1, gpus_per_node=2, sharding="zero2"), 2)
    with pytest.raises(ValueError, match="sharding"):
        simulate(sc)
    sc = with_streams(make_scenario(nodes=1, gpus_per_node=2, stragglers=[Throttle((1,), 0.01, 0.01, 0.5)]), 2)
    with pytest.raises(ValueError, match="thermal"):
        simulate(sc)

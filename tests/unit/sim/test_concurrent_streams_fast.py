"""The concurrent-streams heap loop (commsim/sim/concurrent_streams.py) against the scanning loop
it replaced (tests/unit/sim/streams_scan.py) on random small cases, and the work each does per
rank as the world grows (function calls counted, not time: the same on a loaded machine)."""

import dataclasses
import sys

import numpy as np
import pytest

from commsim.scenario.spec import DDPCosts, Jitter, SlowRank, Stall
from commsim.sim import engine
from commsim.sim.engine import simulate
from tests.conftest import NO_DDP_COSTS, make_scenario
from tests.unit.sim.streams_scan import ScanStreams

FIELDS = ("step_end", "rank_end", "rank_backward_end", "rank_comm_end", "rank_busy", "rank_stall",
          "last_rank", "launch_spread", "comm_time", "coll_issue", "coll_start", "coll_finish")


def random_case(seed):
    """ranks 2-16, buckets 1-30, k 2-4; jitter, a slow rank, stalls, DDP's costs, overlap,
    capacity, what is shared and the algorithm each on or off at random."""
    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(2, 17))
    nodes = 2 if n % 2 == 0 and rng.random() < 0.4 else 1
    nb = int(rng.integers(1, 31))
    sizes = tuple(float(x) for x in rng.integers(1, 40, nb) * 1e5)
    costs = [NO_DDP_COSTS, DDPCosts(), DDPCosts(bucket_overhead=float(rng.uniform(0, 5e-4)),
                                               overlap_slowdown=float(rng.uniform(0, 1)),
                                               memory_bandwidth=float(rng.uniform(1e9, 1e11)))][seed % 3]
    stragglers = []
    if rng.random() < 0.5:
        stragglers.append(Jitter(float(rng.uniform(0.02, 0.2))))
    if rng.random() < 0.4:
        stragglers.append(SlowRank((int(rng.integers(0, n)),), float(rng.uniform(1.2, 2))))
    if rng.random() < 0.3:
        stragglers.append(Stall((int(rng.integers(0, n)),), float(rng.uniform(1e-3, 1e-2)), every=2))
    sc = make_scenario(nodes=nodes, gpus_per_node=n // nodes, parameters=int(sum(sizes) // 4),
                       intra=(float(rng.uniform(1e9, 2e10)), float(rng.uniform(1e-5, 5e-4))),
                       inter=(float(rng.uniform(1e9, 1e10)), float(rng.uniform(1e-5, 5e-4))),
                       forward=float(rng.uniform(1e-3, 1e-2)), backward=float(rng.uniform(2e-3, 3e-2)),
                       optimizer=float(rng.uniform(0, 2e-3)), overlap=bool(rng.random() < 0.8),
                       accumulation=int(rng.integers(1, 3)), steps=3, seed=seed, stragglers=stragglers, costs=costs)
    ready = np.cumsum(rng.uniform(0.1, 1, nb))
    ready = tuple(float(x) for x in np.minimum(ready / ready[-1] * rng.uniform(0.7, 1.0), 1.0))
    ddp = dataclasses.replace(sc.ddp, bucket_sizes=sizes, bucket_ready=ready, comm_streams=int(rng.integers(2, 5)),
                              comm_capacity=[1.0, float(rng.uniform(1.0, 3.0))][seed % 2],
                              comm_shared=["bandwidth", "all"][seed % 5 == 3])
    algorithm = ["ring", "tree", "auto"][seed % 3 if seed % 4 else 0]
    return dataclasses.replace(sc, ddp=ddp, collective=dataclasses.replace(sc.collective, algorithm=algorithm))


def with_loop(monkeypatch, loop, sc, **kw):
    monkeypatch.setattr(engine, "ConcurrentStreams", loop)
    try:
        return simulate(sc, **kw)
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("seed", range(40))
def test_the_heap_loop_equals_the_scan(seed, monkeypatch):
    sc = random_case(seed)
    log_new, log_old = [], []
    new = simulate(sc, collectives=True, log=log_new)
    old = with_loop(monkeypatch, ScanStreams, sc, collectives=True, log=log_old)
    for name in FIELDS:
        a, b = getattr(new, name), getattr(old, name)
        assert a == pytest.approx(b, rel=1e-12, abs=0), name
        assert np.array_equal(a, b), name  # the same events in the same order: bit for bit
    assert log_new == log_old


def test_the_cases_cover_what_they_claim():
    cases = [random_case(s) for s in range(40)]
    assert {c.world_size for c in cases} >= {2, 16} and {c.ddp.comm_streams for c in cases} == {2, 3, 4}
    assert max(len(c.ddp.bucket_sizes) for c in cases) >= 25 and min(len(c.ddp.bucket_sizes) for c in cases) <= 3
    assert any(c.stragglers for c in cases) and any(not c.stragglers for c in cases)
    assert {c.collective.algorithm for c in cases} == {"ring", "tree", "auto"}


def _calls_per_rank_bucket(monkeypatch, loop, n, nb=20):
    sc = make_scenario(nodes=1, gpus_per_node=n, parameters=nb * 250_000, bucket_cap=1e6, first_bucket=1e6,
                       intra=(5e9, 1e-4), backward=0.02, steps=1, stragglers=[Jitter(0.05)], costs=DDPCosts())
    sc = dataclasses.replace(sc, ddp=dataclasses.replace(sc.ddp, comm_streams=2))
    assert len(sc.gradient_buckets()) == nb
    count = [0]

    def profile(frame, event, arg):
        if event == "call":
            count[0] += 1

    monkeypatch.setattr(engine, "ConcurrentStreams", loop)
    sys.setprofile(profile)
    try:
        simulate(sc)
    finally:
        sys.setprofile(None)
        monkeypatch.undo()
    return count[0] / (n * nb)


def test_the_work_per_rank_and_bucket_does_not_grow_with_the_ranks(monkeypatch):
    # the scan calls every rank's next-event function at every event: 8 times the ranks, about
    # 8 times the calls per rank and bucket; the heap re-plans only the ranks an event changes
    new = [_calls_per_rank_bucket(monkeypatch, engine.ConcurrentStreams, n) for n in (8, 64)]
    old = [_calls_per_rank_bucket(monkeypatch, ScanStreams, n) for n in (8, 64)]
    assert old[1] > 4 * old[0]  # the measure sees the r^2
    assert new[1] < 1.25 * new[0]


def _deepest_heap(monkeypatch, sc):
    """The most entries any heap of the loop held (heapq.heappush counted)."""
    import heapq

    deepest = [0]
    push = heapq.heappush

    def counting(heap, item):
        push(heap, item)
        deepest[0] = max(deepest[0], len(heap))

    monkeypatch.setattr(heapq, "heappush", counting)
    try:
        simulate(sc)
    finally:
        monkeypatch.undo()
    return deepest[0]


def test_the_event_heap_holds_each_ranks_next_issue_only(monkeypatch):
    # a bucket_overhead (1 ms) far above a bucket's compute (20 us) queues every rank's issues
    # ahead of its clock: 4 ranks x 1,000 buckets were 4,000 heap entries (a million at 30,000
    # buckets x 32 ranks, 4 us a pop), each rank's next issue alone keeps it near the ranks
    n, nb = 4, 1000
    sc = make_scenario(nodes=1, gpus_per_node=n, parameters=nb * 250_000, bucket_cap=1e6, first_bucket=1e6,
                       backward=0.02, steps=1, costs=DDPCosts(bucket_overhead=1e-3))
    sc = dataclasses.replace(sc, ddp=dataclasses.replace(sc.ddp, comm_streams=2))
    assert len(sc.gradient_buckets()) == nb
    assert _deepest_heap(monkeypatch, sc) <= 2 * n  # 5 measured (3,916 before)
    # the same events in the same order as the scan
    old = with_loop(monkeypatch, ScanStreams, sc, collectives=True)
    new = simulate(sc, collectives=True)
    for name in FIELDS:
        assert np.array_equal(getattr(new, name), getattr(old, name)), name

"""Slow, readable SimPy references for the collective kernels in :mod:`commsim.collectives`.

One process per rank (or per tree edge) and one event per message or chunk: the dependency
structure of each algorithm written out event by event, to check the vectorized max-plus
kernels against on small cases (tests/unit/collectives/test_<algorithm>.py). O(n x steps) or
O(n x chunks) events per collective: not for large n. The whole-run reference (compute,
buckets, stragglers) is :mod:`commsim.sim.reference`, built on :func:`ring_events`.
"""

from __future__ import annotations

import numpy as np
import simpy

from commsim.collectives import reduce_broadcast, ring, tree
from commsim.network.fabric import Fabric


def _rings(env, launch_events, hop, steps, finish_events):
    """Ring steps over lists of events: member i's step k waits for its own and its
    predecessor's step k-1, then takes hop[i]. ``finish_events[i]`` fires after the last step."""
    m = len(launch_events)
    done = [[launch_events[i]] + [env.event() for _ in range(steps)] for i in range(m)]

    def member(i):
        for k in range(1, steps + 1):
            yield done[i][k - 1] & done[i - 1][k - 1]
            yield env.timeout(hop[i])
            done[i][k].succeed()
        yield done[i][steps]
        finish_events[i].succeed()

    for i in range(m):
        env.process(member(i))


def _launched(env, launch):
    events = []
    for t in launch:
        ev = env.event()
        env.process(_fire_at(env, t, ev))
        events.append(ev)
    return events


def _fire_at(env, t, ev):
    yield env.timeout(t)
    ev.succeed()


def _collect(env, events):
    out = np.zeros(len(events))

    def watch(i):
        yield events[i]
        out[i] = env.now

    for i in range(len(events)):
        env.process(watch(i))
    env.run()
    return out


def ring_events(launch, hop_time, steps=None) -> np.ndarray:
    """One ring over per-hop step times ``hop_time`` (the hop into rank i), event by event:
    2(n-1) steps (an all-reduce) unless ``steps`` says otherwise (n-1: a reduce-scatter or an
    all-gather)."""
    n = len(launch)
    steps = 2 * (n - 1) if steps is None else steps
    env = simpy.Environment()
    fin = [env.event() for _ in range(n)]
    _rings(env, _launched(env, launch), hop_time, steps, fin)
    return _collect(env, fin)


def ring_reference(fabric: Fabric, launch, size, steps=None) -> np.ndarray:
    """Flat ring on ``fabric`` (all-reduce: 2(n-1) steps; pass steps=n-1 for reduce-scatter/all-gather)."""
    return ring_events(launch, ring.hop_times(fabric, size), steps)


def hierarchical_reference(fabric: Fabric, launch, size) -> np.ndarray:
    """Three chained stages of rings, each rank entering a stage when it left the previous."""
    g, N = fabric.gpus_per_node, fabric.nodes

    def hop(frm, to, nbytes, share):
        return float(fabric.pair_latency(frm, to) + nbytes / (fabric.pair_bandwidth(frm, to) / share))

    env = simpy.Environment()
    start = _launched(env, launch)
    rs = [env.event() for _ in range(N * g)]
    ar = [env.event() for _ in range(N * g)]
    ag = [env.event() for _ in range(N * g)]
    for node in range(N):
        ranks = [node * g + j for j in range(g)]
        hops = [hop(ranks[j - 1], ranks[j], size / g, 1) for j in range(g)]
        _rings(env, [start[r] for r in ranks], hops, g - 1, [rs[r] for r in ranks])
    for j in range(g):
        ranks = [node * g + j for node in range(N)]
        hops = [hop(ranks[k - 1], ranks[k], size / (g * N), g) for k in range(N)]
        _rings(env, [rs[r] for r in ranks], hops, 2 * (N - 1), [ar[r] for r in ranks])
    for node in range(N):
        ranks = [node * g + j for j in range(g)]
        hops = [hop(ranks[j - 1], ranks[j], size / g, 1) for j in range(g)]
        _rings(env, [ar[r] for r in ranks], hops, g - 1, [ag[r] for r in ranks])
    return _collect(env, ag)


def tree_reference(fabric: Fabric, launch, size, chunk_bytes=tree.CHUNK_BYTES) -> np.ndarray:
    """Both trees of the double binary tree, chunk by chunk, one process per edge direction."""
    n = fabric.world_size
    if n == 1:
        return np.asarray(launch, dtype=float).copy()
    C, chunk = tree.chunking(size, chunk_bytes)
    out = np.full(n, -np.inf)
    trees = [tree.rank_tree(fabric, p) for p in tree.dtree_parents(fabric.nodes)]
    for (parent, _), (alpha, up, down) in zip(trees, tree.edge_costs(fabric, trees, chunk)):
        out = np.maximum(out, _one_tree(parent, alpha, up, down, launch, C))
    return out


def _one_tree(parent, alpha, occ_up, occ_down, launch, C):
    n = len(parent)
    env = simpy.Environment()
    children = [[c for c in range(n) if parent[c] == v] for v in range(n)]
    launched = _launched(env, launch)
    arrived_up = [[env.event() for _ in range(C)] for _ in range(n)]    # chunk k of v reached v's parent
    have = [[env.event() for _ in range(C)] for _ in range(n)]          # v holds the final chunk k
    sent_down_end = np.full(n, -np.inf)

    def deliver(ev, delay):
        yield env.timeout(delay)
        ev.succeed()

    def up(v):  # v reduces chunk k with its children's and sends it to its parent
        for k in range(C):
            yield env.all_of([launched[v]] + [arrived_up[c][k] for c in children[v]])
            yield env.timeout(occ_up[v])
            env.process(deliver(arrived_up[v][k], alpha[v]))

    def root(v):
        for k in range(C):
            yield env.all_of([launched[v]] + [arrived_up[c][k] for c in children[v]])
            have[v][k].succeed()

    def down(c):  # the edge parent(c) -> c forwards the final chunks in order
        p = parent[c]
        for k in range(C):
            yield have[p][k]
            yield env.timeout(occ_down[c])
            sent_down_end[p] = max(sent_down_end[p], env.now)
            env.process(deliver(have[c][k], alpha[c]))

    for v in range(n):
        if parent[v] < 0:
            env.process(root(v))
        else:
            env.process(up(v))
            env.process(down(v))
    got = _collect(env, [have[v][C - 1] for v in range(n)])
    return np.maximum(got, sent_down_end)


def halving_doubling_reference(fabric: Fabric, launch, size) -> np.ndarray:
    """Per-rank processes exchanging messages step by step (Thakur et al. 2005, 4.4)."""
    n = fabric.world_size
    p2 = 1
    while p2 * 2 <= n:
        p2 *= 2
    r = n - p2
    # survivors renumbered 0..p2-1: odd ranks below 2r, then every rank from 2r on
    new_of = {}
    for rank in range(n):
        if rank < 2 * r:
            if rank % 2 == 1:
                new_of[rank] = rank // 2
        else:
            new_of[rank] = rank - r
    old_of = {v: k for k, v in new_of.items()}
    levels = p2.bit_length() - 1

    def cost(a, b, nbytes):  # an exchange: both directions at once, as fast as the slower one
        share = 1 if a // fabric.gpus_per_node == b // fabric.gpus_per_node else fabric.gpus_per_node
        return float(fabric.pair_latency(a, b) + nbytes / (fabric.exchange_bandwidth(a, b) / share))

    # per rank: list of (step id, partner, bytes)
    plan = {rank: [] for rank in range(n)}
    for rank in range(2 * r):
        plan[rank].append(("fold", rank ^ 1, size))
    for step, s in enumerate(list(range(levels)) + list(reversed(range(levels)))):
        for rank, new in new_of.items():
            plan[rank].append((step, old_of[new ^ (1 << s)], size / 2 ** (s + 1)))
    for rank in range(2 * r):
        plan[rank].append(("unfold", rank ^ 1, size))

    env = simpy.Environment()
    ready = {}

    def event(key):
        if key not in ready:
            ready[key] = env.event()
        return ready[key]

    finish = np.zeros(n)

    def proc(rank):
        yield env.timeout(launch[rank])
        for step, partner, nbytes in plan[rank]:
            event((step, rank)).succeed()
            yield event((step, partner))
            yield env.timeout(cost(rank, partner, nbytes))
        finish[rank] = env.now

    for rank in range(n):
        env.process(proc(rank))
    env.run()
    return finish


def reduce_broadcast_reference(fabric: Fabric, launch, size) -> np.ndarray:
    """Root 0 receives from 1..n-1 in order, then sends the result to 1..n-1 in order."""
    n = fabric.world_size
    up, down = reduce_broadcast.transfer_times(fabric, size)
    env = simpy.Environment()
    launched = _launched(env, launch)
    finish = np.zeros(n)

    def root():
        yield launched[0]
        for j in range(1, n):
            yield launched[j]
            yield env.timeout(up[j])
        for j in range(1, n):
            yield env.timeout(down[j])
            finish[j] = env.now
        finish[0] = env.now

    env.process(root())
    env.run()
    return finish


REFERENCES = {  # user-facing algorithm name -> reference(fabric, launch, size)
    "ring": ring_reference,
    "reduce_scatter": lambda f, L, S: ring_reference(f, L, S, steps=f.world_size - 1),
    "all_gather": lambda f, L, S: ring_reference(f, L, S, steps=f.world_size - 1),
    "tree": tree_reference,
    "hierarchical": hierarchical_reference,
    "halving_doubling": halving_doubling_reference,
    "reduce_broadcast": reduce_broadcast_reference,
}

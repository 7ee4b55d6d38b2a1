"""NCCL's double binary tree all-reduce (pipelined reduce up, broadcast down).

Structure (NCCL src/graph/trees.cc, ncclGetBtree / ncclGetDtree, paraphrased):

- Over the *nodes*, tree 0 is a binary tree rooted at node 0 built from the bit pattern of
  the node index: with b the lowest set bit of r, the parent of r is (r ^ b) | (b << 1), or
  r ^ b if that is out of range. Its depth is about log2(nodes).
- Tree 1 mirrors tree 0 (node r plays node N-1-r) when N is even and shifts it by one when N
  is odd, so that a node that is interior in one tree is (mostly) a leaf in the other.
- Inside a node the GPUs form a chain below the node's first GPU (local rank 0).
- Each tree all-reduces half of the buffer; the halves run at the same time.

Cost model (max-plus, per chunk): each half is cut into C chunks of c bytes (``chunk_bytes``,
default 256 KiB, the chunk NCCL's Tree/Simple latency constant refers to; at most
``MAX_CHUNKS`` chunks). A chunk on an edge occupies it for o = c / B_edge and arrives a
latency alpha later. Reduce: a rank forwards chunk k up once it has launched, sent chunk k-1
and received chunk k from all children. Broadcast: the root's chunk k goes down as soon as it
is reduced; each edge forwards chunks in order. A late leaf therefore delays the root and,
through it, everyone.

Edge bandwidth: with reduce and broadcast pipelined, every edge a rank sends on (its up-edge
and its down-edges, in both trees) is busy at the same time, so a rank that sends on k edges of
one link class gives each 1/k of that class's bandwidth (the network's is the node's, used by
its first GPU only). A node interior in one tree and a leaf in the other sends on 4 network
edges: each tree then moves its S/2 in about (S/2)/(B/4) = 2S/B, NCCL's own figure for large
trees (tuning.cc: Tree algbw = busbw x 0.5, NCCL src/graph/tuning.cc v2.19.3); with 2 nodes
each node sends on 2 edges and a tree takes about S/B.

Closed form (all ranks launch together): the heaviest path goes up from some rank v1 to the
root and down to some rank v2, collecting latency + occupancy of every edge, and the C-1
remaining chunks queue at the slowest edge of that path:

    T = max over v1, v2 of  W_up(v1) + W_down(v2) + (C-1) max(M_up(v1), M_down(v2))

(W: sum of alpha + o along the path, M: its largest o). With one occupancy per link class this
is 2 [D_e (alpha_e + o_e) + (g-1)(alpha_i + o_i)] + (C-1) max(o) for D_e inter-node levels
(~log2 nodes) and g GPUs per node: latency ~ 2 (log2(nodes) alpha_inter + (g-1) alpha_intra),
NCCL's Tree latency composition (tuning.cc: base + 2((nRanks/nNodes - 1) intraLat +
log2(nNodes) interLat)), plus a pipelined bandwidth term.
"""

from __future__ import annotations

import math

import numpy as np

from commsim.collectives.contract import Algorithm, check_kind, checked_launch
from commsim.collectives.distinct import distinct, first_of_runs
from commsim.network.fabric import Fabric

NAME = "tree"

CHUNK_BYTES = 256 * 1024
MAX_CHUNKS = 512


def btree_parents(m: int) -> np.ndarray:
    """Parent of each of ``m`` positions in NCCL's binary tree (root 0 has parent -1)."""
    parent = np.full(m, -1, dtype=np.int64)
    for r in range(1, m):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        if up >= m:
            up = r ^ bit
        parent[r] = up
    return parent


def dtree_parents(m: int) -> tuple[np.ndarray, np.ndarray]:
    """The two trees of NCCL's double binary tree over ``m`` positions (mirror if m even, shift if odd)."""
    t0 = btree_parents(m)
    r = np.arange(m)
    if m % 2 == 1:
        u = t0[(r - 1) % m]
        t1 = np.where(u < 0, -1, (u + 1) % m)
    else:
        u = t0[m - 1 - r]
        t1 = np.where(u < 0, -1, m - 1 - u)
    return t0, t1


def depths(parent: np.ndarray) -> np.ndarray:
    """Depth of every position (root 0), by walking all positions up one level at a time."""
    parent = np.asarray(parent)
    d = np.zeros(len(parent), dtype=np.int64)
    p = parent.copy()
    while (p >= 0).any():
        d += p >= 0
        p = np.where(p >= 0, parent[np.maximum(p, 0)], -1)
    return d


def rank_tree(fabric: Fabric, node_parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parent rank of every rank (-1 for the root) and whether its up-edge crosses the network."""
    g, n = fabric.gpus_per_node, fabric.world_size
    ranks = np.arange(n)
    node, local = ranks // g, ranks % g
    head_parent = np.where(node_parent[node] < 0, -1, node_parent[node] * g)
    parent = np.where(local == 0, head_parent, ranks - 1)
    inter = (local == 0) & (parent >= 0)
    return parent, inter


def chunking(size: float, chunk_bytes: float = CHUNK_BYTES) -> tuple[int, float]:
    """(number of chunks C, bytes per chunk) for one tree's half ``size / 2``."""
    half = size / 2.0
    count = max(1, min(MAX_CHUNKS, math.ceil(half / chunk_bytes))) if half > 0 else 1
    return count, half / count


def edge_costs(fabric: Fabric, trees, chunk: float):
    """Per tree: (alpha, up occupancy, down occupancy) of the edge between each rank and its parent.

    ``trees`` is a list of (parent, inter) from :func:`rank_tree`. Occupancy = chunk x (edges
    the sender sends on in its link class, over all trees) / the bandwidth of the transfer
    (up: the rank sends to its parent; down: the parent sends to the rank).
    """
    n = fabric.world_size
    inter_out = np.zeros(n)
    intra_out = np.zeros(n)
    for parent, inter in trees:
        child = np.flatnonzero(parent >= 0)
        for senders in (child, parent[child]):  # up-edges are sent by the child, down-edges by the parent
            np.add.at(inter_out, senders[inter[child]], 1)
            np.add.at(intra_out, senders[~inter[child]], 1)
    out = []
    ranks = np.arange(n)
    for parent, inter in trees:
        p = np.maximum(parent, 0)
        alpha = np.where(inter, fabric.inter_latency, fabric.intra_latency)
        up = chunk * (1.0 / fabric.pair_bandwidth(ranks, p)) * np.where(inter, inter_out, intra_out)
        down = chunk * (1.0 / fabric.pair_bandwidth(p, ranks)) * np.where(inter, inter_out[p], intra_out[p])
        out.append((alpha, up, down))
    return out


def _path_costs(parent: np.ndarray, cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum of alpha + occupancy (``cost[0]`` + ``cost[1]``) and the largest occupancy
    (``cost[1]``) over the edges from each rank up to the root; the root's are 0 (an empty path:
    occupancies are >= 0, so 0 is neutral for the maximum)."""
    alpha, occ = cost
    depth = depths(parent)
    total = np.zeros(len(parent))
    top = np.zeros(len(parent))
    for d in range(1, int(depth.max()) + 1):  # parents before children
        vs = np.flatnonzero(depth == d)
        total[vs] = total[parent[vs]] + alpha[vs] + occ[vs]
        top[vs] = np.maximum(top[parent[vs]], occ[vs])
    return total, top


class _ClosedForm:
    """Both trees' finish times for any launch vector in O(n) numpy work (no per-chunk arrays).

    Every chunk time of the tree recurrence is a maximum of affine functions of the chunk index
    k, one per source rank u: L_u + a + b k. A pipeline stage of occupancy o turns
    e_k = max(e_{k-1}, X_k) + o with X_k = L_u + a + b k into L_u + (a + o) + max(b, o) k (the
    maximum over j <= k of X_j - j o sits at j = k when b >= o, at j = 0 otherwise; see
    :func:`commsim.collectives.maxplus.pipeline`), and a maximum over children or with the
    launch is a maximum of such pieces. So the last chunk reaches rank x at

        avail[x] = max over u of  L_u + W_up(u) + W_down(x) + (C-1) max(M_up(u), M_down(x))

    (the paths from u up to the root and down to x: W sums alpha + occupancy, M is the largest
    occupancy, both 0 on an empty path): the module docstring's closed form, for any launch.
    Grouping the sources u by their M_up class (a few distinct occupancies: one per link class
    and sender fan-out) makes the maximum over u a per-class maximum, a prefix maximum over the
    classes with M_up <= M_down(x) and a suffix maximum over those above. A rank finishes when
    the last chunk has reached it and it has sent that chunk to all its children:
    max(avail[x], max over children c of avail[c] - alpha_c).

    The two trees are evaluated together as one (2, n) array.
    """

    def __init__(self, parents, costs, chunks: int):
        n = len(parents[0])
        w_up, m_up, w_down, m_down, alpha = [], [], [], [], []
        for parent, (a, up, down) in zip(parents, costs):
            wu, mu = _path_costs(parent, (a, up))
            wd, md = _path_costs(parent, (a, down))
            w_up.append(wu), m_up.append(mu), w_down.append(wd), m_down.append(md), alpha.append(a)
        self.n, self.trees = n, len(parents)
        m_up, m_down = np.concatenate(m_up), np.concatenate(m_down)
        values = distinct(np.concatenate([m_up, m_down]))
        r = self.classes = len(values)
        tree_of = np.repeat(np.arange(self.trees), n)
        up_cls = tree_of * r + np.searchsorted(values, m_up)  # one group per (tree, class)
        order = np.argsort(up_cls, kind="stable")  # sources sorted by group: contiguous maxima
        self.groups, self.starts = first_of_runs(up_cls[order])
        self.source_rank = order % n
        self.w_up = np.concatenate(w_up)[order]
        self.up_weight = (chunks - 1) * m_up[order]  # each source's own bottleneck term
        self.down_cls = tree_of * r + np.searchsorted(values, m_down)
        w_down = np.concatenate(w_down)
        self.down_term = w_down + (chunks - 1) * m_down
        self.w_down = w_down
        # the "sent the last chunk to every child" term. Chains (parent = rank - 1, the GPUs of a
        # node) are a shifted slice; the other edges go into slots of distinct parents, so that
        # each slot is a plain fancy-indexed maximum (no ufunc.at)
        parent = np.concatenate([np.where(p >= 0, p + t * n, -1) for t, p in enumerate(parents)])
        alpha = np.concatenate(alpha)
        flat = np.arange(len(parent))
        chain = (parent >= 0) & (parent == flat - 1)
        self.chain_alpha = np.where(chain, alpha, np.inf)[1:]  # child x+1 of x, or no child
        others = np.flatnonzero((parent >= 0) & ~chain)
        others = others[np.argsort(parent[others], kind="stable")]
        first = np.searchsorted(parent[others], parent[others], side="left")
        slot = np.arange(len(others)) - first
        self.slots = [(parent[others[slot == j]], others[slot == j], alpha[others[slot == j]])
                      for j in range(int(slot.max()) + 1 if len(others) else 0)]

    def finish_times(self, launch: np.ndarray) -> np.ndarray:
        n, r, T = self.n, self.classes, self.trees
        # ndarray.take without out=: np.take(..., out=) buffers its output in the default mode
        # (measured 3.3 against 5.0 us for 8,192 indices)
        z = launch.take(self.source_rank)
        z += self.w_up
        low = np.full(T * r, -np.inf)  # per (tree, class): max of L_u + W_up(u)
        low[self.groups] = np.maximum.reduceat(z, self.starts)
        z += self.up_weight
        high = np.full(T * r, -np.inf)  # ... and of L_u + W_up(u) + (C-1) M_up(u)
        high[self.groups] = np.maximum.reduceat(z, self.starts)
        low = np.maximum.accumulate(low.reshape(T, r), axis=1).ravel()  # classes <= c
        above = np.full((T, r), -np.inf)  # classes > c
        above[:, :-1] = np.maximum.accumulate(high.reshape(T, r)[:, :0:-1], axis=1)[:, ::-1]
        avail = low.take(self.down_cls)
        avail += self.down_term
        other = above.ravel().take(self.down_cls)
        other += self.w_down
        np.maximum(avail, other, out=avail)
        out = np.empty(T * n)  # max(avail, avail of the chain child - its alpha), then the other children
        np.subtract(avail[1:], self.chain_alpha, out=other[:-1])
        np.maximum(avail[:-1], other[:-1], out=out[:-1])
        out[-1] = avail[-1]
        for p, c, a in self.slots:
            out[p] = np.maximum(out[p], avail[c] - a)
        if T == 1:
            return out
        if T == 2:  # the later of the two trees: one maximum of the halves, not an axis reduction
            return np.maximum(out[:n], out[n:])
        return out.reshape(T, n).max(axis=0)


def _trees(fabric: Fabric):
    return [rank_tree(fabric, p) for p in dtree_parents(fabric.nodes)]


class TreeKernel:
    """The double tree for one fabric and size, planned once (module docstring).

    Its finish times are max-plus linear in the launch (every term of the closed form is one
    launch plus a path cost; a launch of ``-inf`` is a rank that takes no part):
    :class:`commsim.collectives.maxplus.Responses` relies on that (:attr:`maxplus_linear`)."""

    maxplus_linear = True

    def __init__(self, kind: str, fabric: Fabric, size: float, chunk_bytes: float = CHUNK_BYTES):
        check_kind(NAME, kind, ALGORITHM.kinds)
        self.kind, self.chosen, self.size, self.world_size = kind, NAME, float(size), fabric.world_size
        self.chunks, chunk = chunking(size, chunk_bytes)
        trees = _trees(fabric) if self.world_size > 1 else []
        costs = edge_costs(fabric, trees, chunk) if trees else []
        self._parents = [parent for parent, _ in trees]
        self._costs = costs
        self._closed = _ClosedForm(self._parents, costs, self.chunks) if trees else None

    def finish_times(self, launch: np.ndarray) -> np.ndarray:
        """Per-rank finish times: the later of the two trees, each carrying S/2."""
        launch = checked_launch(launch, self.world_size)
        if self.world_size == 1:
            return launch.copy()
        return self._closed.finish_times(launch)

    def uniform_time(self) -> float:
        """Closed form for simultaneous launch (module docstring)."""
        if self.world_size == 1:
            return 0.0
        return float(max(_uniform_one_tree(parent, *costs, self.chunks)
                         for parent, costs in zip(self._parents, self._costs)))


def inter_depth(nodes: int) -> int:
    """Inter-node levels of the deeper of NCCL's two node trees (~ log2(nodes))."""
    return int(max(depths(p).max() for p in dtree_parents(nodes)))


def _path_sums(parent: np.ndarray, cost: np.ndarray):
    """Sum and max of ``cost`` over the edges from each rank up to the root."""
    depth = depths(parent)
    total = np.zeros(len(parent))
    top = np.full(len(parent), -np.inf)
    for d in range(1, int(depth.max()) + 1):  # parents before children
        vs = np.flatnonzero(depth == d)
        total[vs] = total[parent[vs]] + cost[vs]
        top[vs] = np.maximum(top[parent[vs]], cost[vs])
    return total, top


def _uniform_one_tree(parent, alpha, up, down, C) -> float:
    w_up, _ = _path_sums(parent, alpha + up)
    _, m_up = _path_sums(parent, up)
    w_down, _ = _path_sums(parent, alpha + down)
    _, m_down = _path_sums(parent, down)
    best = 0.0
    for m in distinct(np.concatenate([m_up, m_down])):
        if not np.isfinite(m):
            continue
        le_up, eq_up = w_up[m_up <= m], w_up[m_up == m]
        le_down, eq_down = w_down[m_down <= m], w_down[m_down == m]
        cands = []
        if eq_up.size:
            cands.append(eq_up.max() + le_down.max())
        if eq_down.size:
            cands.append(le_up.max() + eq_down.max())
        best = max(best, max(cands) + (C - 1) * m)
    return best


ALGORITHM = Algorithm(NAME, ("all_reduce",), TreeKernel, "NCCL's double binary tree")

"""Name the straggler of a replayed run from what was measured (timestamps and a link probe).

Two kinds of evidence, read independently:

- compute: when each rank's last bucket was ready, i.e. it finished its backward
  (``bucket_ready[:, -1, :]``), against the other ranks of the same step. A rank more than
  `late_share` of the step's compute behind the median rank is *late* in that step. Late in
  (nearly) every step by a steady margin: ``slow_rank``; late in some steps only, or by a
  margin that swings: ``throttle`` (a duty cycle: slow while hot, fast while cool).
- network: the ring probe (validate.replay), each rank's time to receive a fixed message
  from the previous rank while every rank sends to the next. A link is slow when it takes
  more than `slow_link_ratio` times the median link. A slow node slows both links through it
  (in and out): slow links into the node's first rank and out of its last name the node,
  ``slow_link``; a slow link alone is named as the link between two ranks.

Pure numpy: no torch, no timing of its own.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

LATE_SHARE = 0.1  # behind the median rank by more than 10% of the step's compute
STEADY_STEPS = 0.9  # late in at least 90% of the steps ...
STEADY_CV = 0.25  # ... by a margin varying less than this (coefficient of variation): slow_rank
# A link at half rate probes at ~2x the others; an unshaped link probed 1.52x once on the loaded
# 2-core CI machine, so 1.5 named a slow link that was not there: 1.75 keeps both apart.
SLOW_LINK_RATIO = 1.75


def compute_findings(step_start: np.ndarray, bucket_ready: np.ndarray, late_share: float = LATE_SHARE) -> List[Dict]:
    """Findings from compute: at most one, the rank most behind (see module docstring).

    step_start: (steps,) when each step began (the previous step's end); bucket_ready:
    (steps, buckets, n) when each bucket was ready on each rank (handed to communication; not
    when its all-reduce started, which waits for the previous bucket's)."""
    if bucket_ready.size == 0:
        return []
    done = bucket_ready[:, -1, :]  # (steps, n): end of each rank's backward
    compute = done - step_start[:, None]
    median = np.median(done, axis=1, keepdims=True)
    behind = done - median  # (steps, n)
    scale = np.median(compute, axis=1, keepdims=True)
    late = behind > late_share * np.maximum(scale, 1e-9)
    counts, means = late.sum(axis=0), behind.mean(axis=0)
    r = max(range(done.shape[1]), key=lambda i: (counts[i], means[i]))  # most often late, then most behind
    share = float(late[:, r].mean())
    if share == 0:
        return []
    margins = behind[late[:, r], r]
    cv = float(np.std(margins) / np.mean(margins)) if len(margins) > 1 else 0.0
    kind = "slow_rank" if share >= STEADY_STEPS and cv < STEADY_CV else "throttle"
    return [{"kind": kind, "rank": r, "late_steps": share, "margin_s": float(np.median(margins)), "margin_cv": cv}]


def link_findings(probe_recv_s: Sequence[Optional[float]], node_of: Optional[Sequence[int]] = None,
                  slow_link_ratio: float = SLOW_LINK_RATIO) -> List[Dict]:
    """Findings from the ring probe: each slow node (its links in and out both slow) or slow link.

    probe_recv_s[r]: time rank r took to receive from rank r-1 (the link into r); node_of[r]:
    rank r's node (default: one rank per node). A node's link in is the hop into its first
    rank, its link out the hop into the rank after its last."""
    t = np.array([np.nan if x is None else x for x in probe_recv_s], dtype=float)
    n = len(t)
    if n < 2 or np.all(np.isnan(t)):
        return []
    nodes = list(range(n)) if node_of is None else list(node_of)
    # only the links between nodes are compared (a hop inside a node is loopback); the
    # reference is the median of their faster half: a slow node slows two of them, which at 4
    # nodes would drag the plain median halfway up to them
    cross = np.array([nodes[r] != nodes[(r - 1) % n] for r in range(n)]) & ~np.isnan(t)
    if not cross.any():
        return []
    between = np.sort(t[cross])
    ref = float(np.median(between[: max(1, len(between) // 2)]))
    slow = cross & (t > slow_link_ratio * ref)
    out: List[Dict] = []
    used = set()
    distinct = sorted(set(nodes))
    for k in distinct if len(distinct) > 2 else []:
        ranks = [r for r in range(n) if nodes[r] == k]
        first, after = ranks[0], (ranks[-1] + 1) % n
        if slow[first] and slow[after] and nodes[(first - 1) % n] != k and nodes[after] != k:
            out.append({"kind": "slow_link", "rank": first, "node": k, "ratio": float(min(t[first], t[after]) / ref)})
            used |= {first, after}
    for r in range(n):
        if slow[r] and r not in used:
            out.append({"kind": "slow_link", "link": [(r - 1) % n, r], "ratio": float(t[r] / ref)})
    return out


def name_stragglers(step_start: np.ndarray, bucket_ready: np.ndarray,
                    probe_recv_s: Optional[Sequence[Optional[float]]] = None,
                    node_of: Optional[Sequence[int]] = None) -> List[Dict]:
    """Every finding, compute first, then network; empty: no straggler seen."""
    found = compute_findings(step_start, bucket_ready)
    if probe_recv_s is not None:
        found += link_findings(probe_recv_s, node_of)
    return found


def describe(findings: Sequence[Dict], node_of=None) -> str:
    """One line: 'slow_rank: rank 2 (late in 100% of steps by 92 ms)'; node_of(rank) names its node."""
    if not findings:
        return "no straggler seen"
    parts = []
    for f in findings:
        where = ""
        if "rank" in f:
            where = f"rank {f['rank']}" + (f" (node {node_of(f['rank'])})" if node_of else "")
        if f["kind"] == "slow_link":
            if "link" in f:
                a, b = f["link"]
                parts.append(f"slow_link: the link from rank {a} to rank {b} ({f['ratio']:.1f}x the faster links)")
            else:
                parts.append(f"slow_link: the network link of scenario node {f['node']} ({where}), in and out "
                             f"({f['ratio']:.1f}x the faster links)")
        else:
            parts.append(f"{f['kind']}: {where} (late in {f['late_steps']:.0%} of steps by {f['margin_s'] * 1e3:.0f} ms)")
    return "; ".join(parts)

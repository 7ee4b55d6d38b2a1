"""Check the model against the lab: measured collectives vs the simulator's prediction.

The prediction is the simulator's own pricing of a ring under a calibration (what
``commsim run --calibration`` uses): the lab's nodes as a fabric priced level by level by
:func:`commsim.calibration.model.measured_level_constants` (inter_node hops where the ring
crosses nodes, intra_node hops inside a node), and the ring kernel of the collectives package
with all ranks starting together: the step count times (the ring's mean hop latency + the
slowest hop's chunk time):

    all_reduce: 2(n-1) steps;  all_gather, reduce_scatter: n-1 steps (half a ring each);
    over gloo a reduce_scatter is a whole all-reduce (:func:`kernel_name`).

A size is *network-bound*, where the issue's 10% criterion applies, when the bandwidth part
of the prediction (the steps times what the slowest hop spends moving its chunk) is at least
`min_transfer_share` (80%) both of the prediction and of itself plus the layout's measured
latency floor: the time its smallest measured size took. The second condition matters on a
small machine: a 2-node calibration sees the per-step latency of 2 processes, while 16 ranks
sharing 2 cores pay their CPU scheduling at every step of the ring, a latency no network
model holds; only where the bytes take 4x longer than that floor does the network bound the time.

Pure: numpy and the calibration records, no torch.
"""

from __future__ import annotations

import statistics
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

from functools import partial

from commsim.calibration.model import Calibration, measured_level_constants
from commsim.collectives.busbw import busbw
from commsim.collectives.kernels import make_kernel
from commsim.network.fabric import Fabric

STEPS = {"all_reduce": lambda n: 2 * (n - 1), "all_gather": lambda n: n - 1, "reduce_scatter": lambda n: n - 1}
MIN_TRANSFER_SHARE = 0.8
CRITERION_PCT = 10.0


def ring_crosses(nodes: int, per_node: int) -> np.ndarray:
    """For each hop of the node-major ring (the hop into rank i, from rank i-1): does it cross nodes?"""
    n = nodes * per_node
    i = np.arange(n)
    return (i // per_node) != (((i - 1) % n) // per_node)


def _fabric(cal: Calibration, nodes: int, per_node: int) -> Fabric:
    """The lab's nodes as the one fabric, every level priced from the calibration."""
    return Fabric(nodes=nodes, gpus_per_node=per_node, intra_latency=0.0, intra_bandwidth=1.0,
                  inter_latency=0.0, inter_bandwidth=1.0, pricing=partial(measured_level_constants, cal))


def kernel_name(cal: Calibration, collective: str) -> str:
    """The kernel the calibration's backend runs for `collective`: the halves are ring halves,
    except that gloo has no reduce-scatter of its own — ProcessGroupGloo's
    reduce_scatter_tensor_coalesced all-reduces the whole input and copies out this rank's
    chunk — so over gloo a reduce-scatter of S bytes costs a ring all-reduce of S bytes."""
    if collective == "all_reduce" or (collective == "reduce_scatter" and cal.provenance.backend == "gloo"):
        return "ring"
    return collective


def predicted_time(cal: Calibration, collective: str, nodes: int, per_node: int, size: float) -> float:
    """The simulator's time for `collective` of `size` bytes on `nodes` x `per_node` ranks."""
    if nodes * per_node < 2:
        return 0.0
    return float(make_kernel(kernel_name(cal, collective), _fabric(cal, nodes, per_node), size).uniform_time())


def transfer_share(cal: Calibration, collective: str, nodes: int, per_node: int, size: float) -> float:
    """Share of the predicted time that is bandwidth: 1 - (steps x the ring's mean hop
    latency) / the predicted time."""
    n = nodes * per_node
    if n < 2:
        return 0.0
    priced = _fabric(cal, nodes, per_node).at_size(size)
    crosses = ring_crosses(nodes, per_node)
    alpha = float(np.mean(np.where(crosses, priced.inter_latency, priced.intra_latency)))
    total = predicted_time(cal, collective, nodes, per_node, size)
    steps = STEPS["all_reduce" if kernel_name(cal, collective) == "ring" else collective](n)
    return 1.0 - steps * alpha / total if total > 0 else 0.0


def compare(cal: Calibration, rows: Iterable[dict], min_transfer_share: float = MIN_TRANSFER_SHARE) -> List[dict]:
    """One entry per measured row (validate.collectives_multi rows: layout, collective, nodes,
    ranks_per_node, size_bytes, time_s): measured and predicted busbw and time, the signed
    busbw error of the prediction in % of the measurement, and whether the size is
    network-bound (see the module docstring)."""
    rows = list(rows)
    floor: Dict[tuple, float] = {}  # (layout, collective) -> time of its smallest size
    for r in sorted(rows, key=lambda r: -r["size_bytes"]):
        floor[(r["layout"], r["collective"])] = r["time_s"]
    out = []
    for r in rows:
        nodes, per_node, size, c = int(r["nodes"]), int(r["ranks_per_node"]), float(r["size_bytes"]), r["collective"]
        n = nodes * per_node
        t_pred = predicted_time(cal, c, nodes, per_node, size)
        share = transfer_share(cal, c, nodes, per_node, size)
        bandwidth_s = share * t_pred
        lat = floor[(r["layout"], c)]
        over_floor = bandwidth_s / (bandwidth_s + lat) if bandwidth_s > 0 else 0.0
        meas = busbw(c, size, r["time_s"], n)
        pred = busbw(c, size, t_pred, n) if t_pred > 0 else float("nan")
        out.append({"layout": r["layout"], "collective": c, "nodes": nodes, "ranks_per_node": per_node,
                    "world_size": n, "size_bytes": int(size), "time_s": r["time_s"], "predicted_time_s": t_pred,
                    "busbw_Bps": meas, "predicted_busbw_Bps": pred, "error_pct": (pred - meas) / meas * 100.0,
                    "transfer_share": share, "latency_floor_s": lat, "share_over_floor": over_floor,
                    "network_bound": share >= min_transfer_share and over_floor >= min_transfer_share})
    return out


def summarize(compared: Sequence[dict], criterion_pct: float = CRITERION_PCT) -> List[dict]:
    """Per (layout, collective): median and max |error| over the network-bound sizes, and
    whether the median meets `criterion_pct`."""
    groups: Dict[tuple, List[dict]] = {}
    for c in compared:
        groups.setdefault((c["layout"], c["collective"], c["nodes"], c["ranks_per_node"]), []).append(c)
    out = []
    for (lay, coll, nodes, per_node), items in groups.items():
        errs = [abs(c["error_pct"]) for c in items if c["network_bound"]]
        med: Optional[float] = statistics.median(errs) if errs else None
        out.append({"layout": lay, "collective": coll, "nodes": nodes, "ranks_per_node": per_node,
                    "points": len(errs), "median_abs_error_pct": med, "max_abs_error_pct": max(errs) if errs else None,
                    "within": med is not None and med <= criterion_pct})
    return out


def format_summary(summary: Sequence[dict]) -> str:
    """The summary as an aligned table."""
    lines = [f"{'layout':10s} {'collective':15s} {'nodes':>5s} {'per node':>8s} {'sizes':>5s} "
             f"{'median |err|':>12s} {'max |err|':>9s}  <= 10%"]
    for s in summary:
        med = "-" if s["median_abs_error_pct"] is None else f"{s['median_abs_error_pct']:.1f} %"
        mx = "-" if s["max_abs_error_pct"] is None else f"{s['max_abs_error_pct']:.1f} %"
        lines.append(f"{s['layout']:10s} {s['collective']:15s} {s['nodes']:5d} {s['ranks_per_node']:8d} "
                     f"{s['points']:5d} {med:>12s} {mx:>9s}  {'yes' if s['within'] else 'NO'}")
    return "\n".join(lines)

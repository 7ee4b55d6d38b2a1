"""all_reduce, all_gather and reduce_scatter sweeps per level of a multi-node job.

One job, several *layouts*: sub-groups of its ranks that each run the sweep while the others
wait. The per-level layouts (:func:`level_layouts`) are the issue's: 2 ranks on one node (the
intra-node level), 1 rank on each of 2 nodes (the network level), and the full job; more can
be asked for (e.g. 4 nodes x 1 rank) to check what a 2-node calibration predicts. One job
for all of them: a rank's start-up (torch, the rendezvous) is paid once.

nccl-tests' conventions (NVIDIA/nccl-tests src/common.cu, doc/PERFORMANCE.md), as in
validate.collective_bench: sizes doubling, float32 elements, untimed warm-up, then timed
iterations back to back after a barrier; an iteration lasts from the previous one's end to its
own and its time is the maximum over the layout's ranks; the row's time is the mean of those
maxima. The size column is nccl-tests' too: the whole buffer (for all_gather the gathered
output, for reduce_scatter the input, n shards of size/n); busbw = algbw x 2(n-1)/n for
all_reduce, x (n-1)/n for the other two (commsim.collectives.busbw).

torch's all_reduce works in place (DDP's bucket all-reduce), all_gather_into_tensor and
reduce_scatter_tensor out of place: each is timed as torch runs it, and the nccl-tests table
(:func:`format_table`) puts the times in that column group (the other one N/A).

Note on gloo: ProcessGroupGloo runs reduce_scatter_tensor as an all-reduce of the whole
input followed by a local copy of the rank's shard (ProcessGroupGloo.cpp,
reduce_scatter_tensor_coalesced), so on gloo it costs a full all-reduce, not half of one.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from commsim.atomic import atomic_write_text
from commsim.calibration.from_logs import calibration_from_nccl_logs
from commsim.calibration import Calibration
from commsim.collectives.busbw import algbw, busbw
from commsim.output.nccl_table import nccl_table_header, time_cell
from validate.collective_bench import ELEMENT_BYTES, buffer_count

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
PERF_NAME = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf", "reduce_scatter": "reduce_scatter_perf"}
IN_PLACE = {"all_reduce": True, "all_gather": False, "reduce_scatter": False}
REDOP = {"all_reduce": "sum", "all_gather": "none", "reduce_scatter": "sum"}
SUM_RTOL = 1e-5
LEVELS = ("intra", "inter")  # the layouts a calibration is fitted from


def layout(name: str, nodes, per_node: int, job_ranks_per_node) -> Dict:
    """The first `per_node` ranks of each of `nodes` (a count: the first that many nodes; or
    a list of node indices, in ring order) of a job with `job_ranks_per_node` ranks per node
    (one count, or a list of one per node; node-major numbering). The layout's ranks must
    include rank 0 (node 0 must be in it)."""
    node_ids = list(range(nodes)) if isinstance(nodes, int) else [int(k) for k in nodes]
    counts = job_ranks_per_node if not isinstance(job_ranks_per_node, int) else [job_ranks_per_node] * (max(node_ids) + 1)
    if not node_ids or node_ids[0] != 0 or len(set(node_ids)) != len(node_ids) or max(node_ids) >= len(counts):
        raise ValueError(f"layout {name}: nodes must be distinct job nodes starting with node 0, got {node_ids}")
    if per_node < 1 or any(per_node > counts[k] for k in node_ids):
        raise ValueError(f"layout {name}: {per_node} ranks per node, the job has {[counts[k] for k in node_ids]}")
    offsets = [sum(counts[:k]) for k in range(len(counts))]
    ranks = [offsets[k] + j for k in node_ids for j in range(per_node)]
    return {"name": name, "nodes": len(node_ids), "ranks_per_node": per_node, "ranks": ranks, "node_ids": node_ids}


def level_layouts(nodes: int, ranks_per_node: int) -> List[Dict]:
    """intra (2 ranks on node 0), inter (1 rank on each of nodes 0 and 1) and full (every
    rank), where the job is big enough for them."""
    out = []
    if ranks_per_node >= 2:
        out.append(layout("intra", 1, 2, ranks_per_node))
    if nodes >= 2:
        out.append(layout("inter", 2, 1, ranks_per_node))
    if nodes * ranks_per_node > 2 or not out:
        out.append(layout("full", nodes, ranks_per_node, ranks_per_node))
    return out


def shard_size(collective: str, size: int, n: int) -> int:
    """`size` rounded down to what the collective can split: float32 elements, and for
    all_gather / reduce_scatter a multiple of n of them (at least one per rank)."""
    unit = ELEMENT_BYTES * (1 if collective == "all_reduce" else n)
    return max(unit, size // unit * unit)


class _Buffers:
    """The tensors one size cycles through (enough to defeat the CPU caches, see
    validate.collective_bench.buffer_count) and the collective on buffer i."""

    def __init__(self, collective: str, size: int, n: int, rank: int, group, device: torch.device):
        self.collective, self.group, self.n, self.rank = collective, group, n, rank
        count = size // ELEMENT_BYTES
        shard = count // n
        k = buffer_count(size, device)
        self.k = k
        fill = float(rank + 1)
        if collective == "all_reduce":
            self.inputs = [torch.full((count,), fill, dtype=torch.float32, device=device) for _ in range(k)]
            self.outputs = self.inputs
        elif collective == "all_gather":
            self.inputs = [torch.full((shard,), fill, dtype=torch.float32, device=device) for _ in range(k)]
            self.outputs = [torch.empty(count, dtype=torch.float32, device=device) for _ in range(k)]
        elif collective == "reduce_scatter":
            self.inputs = [torch.full((count,), fill, dtype=torch.float32, device=device) for _ in range(k)]
            self.outputs = [torch.empty(shard, dtype=torch.float32, device=device) for _ in range(k)]
        else:
            raise ValueError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")

    def run(self, i: int) -> None:
        b = i % self.k
        if self.collective == "all_reduce":
            dist.all_reduce(self.inputs[b], group=self.group)
        elif self.collective == "all_gather":
            dist.all_gather_into_tensor(self.outputs[b], self.inputs[b], group=self.group)
        else:
            dist.reduce_scatter_tensor(self.outputs[b], self.inputs[b], group=self.group)

    def wrong(self) -> int:
        """Elements of buffer 0 off after its first collective (rank r contributes r+1)."""
        n = self.n
        out = self.outputs[0]
        if self.collective == "all_gather":
            want = torch.arange(1, n + 1, dtype=torch.float32, device=out.device).repeat_interleave(out.numel() // n)
        else:
            want = torch.full_like(out, n * (n + 1) / 2)
        return int((~torch.isclose(out, want, rtol=SUM_RTOL, atol=0.0)).sum().item())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench(collective: str, size: int, group, warmup: int, iters: int, check: bool,
          device: torch.device, progress: Optional[Callable] = None) -> Dict:
    """One row: `iters` back-to-back collectives of `size` bytes on `group` (after `warmup`);
    each iteration's time is the max over the group's ranks."""
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    size = shard_size(collective, size, n)
    bufs = _Buffers(collective, size, n, rank, group, device)
    wrong = None
    for i in range(max(warmup, 1 if check else 0)):
        bufs.run(i)
        if i == 0 and check:  # buffer 0, fresh: its first result is known exactly
            _sync(device)
            wrong = bufs.wrong()
    if progress:
        progress()
    dist.barrier(group=group)
    marks = [time.perf_counter()]
    for i in range(iters):
        bufs.run(i)
        _sync(device)
        marks.append(time.perf_counter())
    own = [b - a for a, b in zip(marks, marks[1:])]
    t = torch.tensor(own + [float(wrong or 0)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    times = t.tolist()[:-1]
    mean = statistics.fmean(times)
    return {
        "collective": collective, "size_bytes": size, "count": size // ELEMENT_BYTES, "world_size": n,
        "time_s": mean, "time_median_s": statistics.median(times), "times_s": times,
        "algbw_Bps": algbw(size, mean), "busbw_Bps": busbw(collective, size, mean, n),
        "wrong": int(t.tolist()[-1]) if check else None, "buffers": bufs.k,
    }


def rank_levels(ctx, plan: Dict) -> Optional[Dict]:
    """validate.multinode entry point: every layout of `plan` in turn, each collective, each size.

    plan: layouts (see :func:`layout`; one may carry its own "sizes" and "iters"), collectives,
    sizes, warmup, iters, check. Returns, on
    rank 0 (which every layout contains), {"layouts": [{..., "hosts": [...], "rows": [...]}]};
    None elsewhere. Each row is also saved as a progress record on rank 0 as it is measured.
    hosts: [host name, pid] of each rank of the layout."""
    device = torch.device(ctx.device)
    out = []
    for lay in plan["layouts"]:
        ranks = list(lay["ranks"])
        if 0 not in ranks:
            raise ValueError(f"layout {lay['name']} must contain rank 0, has {ranks}")
        group = dist.new_group(ranks)  # collective over the whole job: every rank calls it
        if ctx.rank in ranks:
            hosts = [None] * len(ranks)
            dist.all_gather_object(hosts, [socket.gethostname(), os.getpid()], group=group)
            # fresh connections: TCP grows its windows over the first transfers, so one
            # all-reduce of the largest size runs untimed before the sweep (nccl-tests' warm-up
            # iterations do the same for its long-lived communicator)
            sizes, iters = lay.get("sizes", plan["sizes"]), int(lay.get("iters", plan["iters"]))
            bench("all_reduce", max(int(s) for s in sizes), group, 0, 1, False, device)
            rows = []
            for collective in plan["collectives"]:
                for size in sizes:
                    ctx.progress()
                    row = bench(collective, int(size), group, int(plan["warmup"]), iters,
                                bool(plan.get("check", True)), device)
                    row.update(layout=lay["name"], nodes=lay["nodes"], ranks_per_node=lay["ranks_per_node"])
                    rows.append(row)
                    if ctx.rank == 0:
                        ctx.progress(row)
            out.append({**lay, "hosts": hosts, "rows": rows})
        dist.barrier()  # the next layout starts when this one is done everywhere
    return {"layouts": out} if ctx.rank == 0 else None


def with_statistic(row: Dict, statistic: str) -> Dict:
    """The row with its time (and bandwidths) from the iterations' `statistic`: "mean" (as
    measured, nccl-tests' convention) or "median" (robust to an iteration stretched by a
    descheduled rank on a shared machine)."""
    if statistic == "mean":
        return row
    if statistic != "median":
        raise ValueError(f"statistic must be mean or median, got {statistic!r}")
    t = row["time_median_s"]
    return dict(row, time_s=t, algbw_Bps=algbw(row["size_bytes"], t),
                busbw_Bps=busbw(row["collective"], row["size_bytes"], t, row["world_size"]))


def format_table(lay: Dict, collective: str, warmup: int, iters: int, backend: str = "gloo",
                 note: str = "", statistic: str = "mean") -> str:
    """One layout's rows of one collective as an nccl-tests log (device list with host names,
    the table, the average busbw): what `commsim calibrate --from-nccl-tests` reads. The time
    column is the iterations' mean (nccl-tests' convention) or, with `statistic`, their median."""
    rows = [with_statistic(r, statistic) for r in lay["rows"] if r["collective"] == collective]
    iters = int(lay.get("iters", iters))
    n = len(lay["ranks"])
    in_place = IN_PLACE[collective]
    lines = [f"# commsim validate.collectives_multi: layout {lay['name']} ({lay['nodes']} node(s) x "
             f"{lay['ranks_per_node']} rank(s)), {backend}, time = {statistic} of the iterations"
             f"{'; ' + note if note else ''}",
             f"# NRANKS: {n} ({lay['nodes']} nodes x {lay['ranks_per_node']} ranks)",
             f"# Collective test starting: {PERF_NAME[collective]}",
             f"# nThread 1 nGpus 1 minBytes {rows[0]['size_bytes'] if rows else 0} maxBytes "
             f"{rows[-1]['size_bytes'] if rows else 0} step: 2(factor) warmup iters: {warmup} iters: {iters} "
             "agg iters: 1 validation: 1 graph: 0",
             "#",
             "# Using devices"]
    hosts = lay.get("hosts") or [["unknown", 0]] * n
    for i, (rank, (host, pid)) in enumerate(zip(lay["ranks"], hosts)):
        lines.append(f"#  Rank {i:2d} Group  0 Pid {pid:6d} on {host} device  0 [cpu] {backend} (global rank {rank})")
    lines.append("#")
    lines.append(nccl_table_header(in_place=True))
    na = f"{'N/A':>7s}  {'N/A':>6s}  {'N/A':>6s}  {'N/A':>6s}"
    for r in rows:
        wrong = "N/A" if r["wrong"] is None else str(r["wrong"])
        measured = (f"{time_cell(r['time_s'] * 1e6)}  {r['algbw_Bps'] / 1e9:6.2f}  {r['busbw_Bps'] / 1e9:6.2f}  "
                    f"{wrong:>6s}")
        groups = [na, measured] if in_place else [measured, na]
        lines.append(f"{r['size_bytes']:12d}  {r['count']:12d}  {'float':>8s}  {REDOP[collective]:>6s}  {-1:6d}  "
                     + "  ".join(groups))
    if rows:
        lines.append(f"# Avg bus bandwidth    : {statistics.fmean(r['busbw_Bps'] for r in rows) / 1e9:g}")
    lines.append("#")
    return "\n".join(lines) + "\n"


def plan(layouts: Sequence[Dict], sizes: Sequence[int], collectives: Sequence[str] = ("all_reduce",),
         warmup: int = 1, iters: int = 3, check: bool = True) -> Dict:
    """A JSON-able plan for :func:`rank_levels`."""
    bad = [c for c in collectives if c not in COLLECTIVES]
    if bad:
        raise ValueError(f"unknown collective {bad[0]!r}; expected one of {', '.join(COLLECTIVES)}")
    return {"layouts": list(layouts), "sizes": [int(s) for s in sizes], "collectives": list(collectives),
            "warmup": int(warmup), "iters": int(iters), "check": bool(check)}


def write_tables(layouts: Sequence[Dict], out_dir: Path, warmup: int, iters: int, note: str = "",
                 statistic: str = "mean") -> Dict[Tuple[str, str], Path]:
    """Every (layout, collective) as an nccl-tests log `<layout>_<collective>.txt` (see
    :func:`format_table` for `statistic`)."""
    paths = {}
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for lay in layouts:
        for c in sorted({r["collective"] for r in lay["rows"]}):
            path = Path(out_dir) / f"{lay['name']}_{c}.txt"
            atomic_write_text(path, format_table(lay, c, warmup, iters, note=note, statistic=statistic))
            paths[(lay["name"], c)] = path
    return paths


def calibrate_levels(paths: Dict[Tuple[str, str], Path], command: Optional[str] = None,
                     backend: Optional[str] = None) -> Calibration:
    """The calibration `commsim calibrate --from-nccl-tests --in-place` fits from the intra and
    inter all_reduce tables (levels from their host names); with `backend`, the provenance says
    which torch backend measured them (and its versions) instead of "nccl-tests"."""
    from dataclasses import replace

    logs = [str(paths[(lv, "all_reduce")]) for lv in LEVELS if (lv, "all_reduce") in paths]
    # one job's per-level sweeps: the same system by construction, though the layouts (2 ranks
    # on one node, 1 on each of 2) differ, which the different-systems check would refuse
    cal, _ = calibration_from_nccl_logs(logs, in_place=True, command=command, same_system=True)
    if backend is not None:
        cal = replace(cal, provenance=replace(cal.provenance, backend=backend, **versions(backend)))
    return cal


def versions(backend: str) -> dict:
    """torch / NCCL / gloo versions as this torch reports them (None when unknown)."""
    nccl = None
    if backend == "nccl" and torch.cuda.is_available():
        v = torch.cuda.nccl.version()
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    return {
        "torch_version": str(torch.__version__),
        "nccl_version": nccl,
        # gloo has no version API; it is the copy vendored in this torch build
        "gloo_version": f"bundled with torch {torch.__version__}" if backend == "gloo" else None,
    }


def node_counts(hosts: Sequence[str]) -> List[int]:
    """Ranks per node from every rank's host name, in rank order: node-major numbering (what
    torchrun, srun's block distribution and mpirun --map-by node give) keeps a node's ranks
    together; ValueError when a host's ranks are not contiguous."""
    counts: List[int] = []
    seen: List[str] = []
    for h in hosts:
        if seen and h == seen[-1]:
            counts[-1] += 1
        elif h in seen:
            raise ValueError(f"the ranks of host {h} are not numbered together (node-major numbering expected)")
        else:
            seen.append(h)
            counts.append(1)
    return counts


def own_layouts(ctx) -> Tuple[List[str], List[int], List[Dict]]:
    """The per-level layouts of this job's own placement, found from every rank's host name (a
    collective: every rank calls it): (host of each rank, ranks per node, layouts): intra (2
    ranks on the first node, when it has 2), inter (1 rank on each of the first 2 nodes, when
    there are 2) and full (every rank, when that is more than 2 ranks or the only layout)."""
    hosts: List[Optional[str]] = [None] * ctx.world_size
    dist.all_gather_object(hosts, socket.gethostname())
    counts = node_counts(hosts)
    layouts = []
    if counts[0] >= 2:
        layouts.append(layout("intra", 1, 2, counts))
    if len(counts) >= 2:
        layouts.append(layout("inter", 2, 1, counts))
    if ctx.world_size > 2 or not layouts:
        layouts.append({"name": "full", "nodes": len(counts), "ranks_per_node": max(counts),
                        "ranks": list(range(ctx.world_size)), "node_ids": list(range(len(counts)))})
    return [str(h) for h in hosts], counts, layouts


def rank_calibrate(ctx, options: Dict) -> Optional[Dict]:
    """Entry point under torchrun, srun or mpirun (through validate.multinode_rank), on a real
    cluster as in the lab: the per-level sweeps of this job's own layout (found from the ranks'
    host names), then on rank 0 the nccl-tests tables and the calibration fitted from them
    (calibration.yaml) in options["out"], on rank 0's disk.

    options: out (required), calibration (the YAML to write; default out/calibration.yaml),
    command (provenance), min_size (16 KiB), max_size (4 MiB), collectives (["all_reduce"]),
    warmup (1), iters (5)."""
    hosts, counts, layouts = own_layouts(ctx)
    sizes, size = [], int(options.get("min_size", 16 << 10))
    while size <= int(options.get("max_size", 4 << 20)):
        sizes.append(size)
        size *= 2
    warmup, iters = int(options.get("warmup", 1)), int(options.get("iters", 5))
    result = rank_levels(ctx, plan(layouts, sizes, options.get("collectives", ["all_reduce"]), warmup, iters))
    if ctx.rank != 0:
        return None
    out = Path(options["out"])
    out.mkdir(parents=True, exist_ok=True)
    paths = write_tables(result["layouts"], out, warmup, iters, note=f"{ctx.backend}, {len(counts)} hosts {counts}")
    doc = {"hosts": sorted(set(hosts)), "ranks_per_node": counts,
           "tables": {f"{a}/{c}": str(p) for (a, c), p in sorted(paths.items())}}
    if any((lv, "all_reduce") in paths for lv in LEVELS):
        from commsim.calibration.file import save_calibration

        cal = calibrate_levels(paths, command=options.get("command"), backend=ctx.backend)
        target = options.get("calibration") or str(out / "calibration.yaml")
        save_calibration(cal, target)
        doc["calibration"] = target
        doc["levels"] = {lv.level: {"alpha_s": lv.alpha_s, "beta_Bps": lv.beta_Bps} for lv in cal.levels}
    return doc

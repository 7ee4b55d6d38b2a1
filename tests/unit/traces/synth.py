"""Synthetic per-rank traces in the documented formats, for exact small cases.

Kineto (Chrome trace) documents with the events a DDP job's trace has (see
commsim/traces/kineto.py): ``ProfilerStep#N``, ``DistributedDataParallel.forward``, autograd
ops, ``Optimizer.step#SGD.step``, and per bucket either gloo's ``c10d::allreduce_`` +
``gloo:all_reduce`` pair or NCCL's ``record_param_comms`` + ``ncclDevKernel_AllReduce_...``
kernel linked through a ``cudaLaunchKernel`` runtime event's correlation id. Flight Recorder
dumps as the dict ``_dump_fr_trace`` pickles. Times are given in seconds and written in
microseconds (Kineto) or nanoseconds (Flight Recorder).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

BASE_NS = 1_700_000_000_000_000_000


@dataclass
class Step:
    """One step of one rank: phase boundaries and its buckets (seconds from the job's start)."""

    start: float
    backward_start: float
    backward_end: float
    optimizer_start: float
    end: float
    buckets: List[tuple] = field(default_factory=list)  # (bytes, issue, start, end)


def plan(n: int, steps: int, forward=0.010, backward=0.020, optimizer=0.002, sizes=(400_000, 200_000),
         comm=0.001, late: Optional[Dict[int, float]] = None, slow: Optional[Dict[int, float]] = None,
         stall: Optional[Dict[int, tuple]] = None, gap=0.0, ready: Optional[Sequence[float]] = None) -> List[List[Step]]:
    """Per rank, per step: a DDP step with `sizes` buckets issued at a uniform gradient rate.

    late {rank: s} delays that rank's backward after its first bucket (a mid-backward delay);
    slow {rank: factor} scales its compute; stall {rank: (every, seconds)} pauses it before
    the forward of steps (k + 1) % every == 0; ready: each bucket's issue as a share of the
    backward instead of the uniform rate's. All-reduce j runs from max(last issue, end of
    j-1) for `comm` seconds (or comm(bytes)) on every rank; the optimizer follows the last one."""
    late, slow, stall = late or {}, slow or {}, stall or {}
    total = float(sum(sizes))
    frac = list(ready) if ready is not None else [sum(sizes[: j + 1]) / total for j in range(len(sizes))]
    out: List[List[Step]] = [[] for _ in range(n)]
    start = [0.0] * n
    for k in range(steps):
        f = [slow.get(r, 1.0) for r in range(n)]
        t0 = [start[r] + (stall[r][1] if r in stall and (k + 1) % stall[r][0] == 0 else 0.0) for r in range(n)]
        bs = [t0[r] + f[r] * forward for r in range(n)]
        issue = [[bs[r] + f[r] * backward * fr + (late.get(r, 0.0) if j >= 1 else 0.0) for r in range(n)]
                 for j, fr in enumerate(frac)]
        be = [bs[r] + f[r] * backward + late.get(r, 0.0) for r in range(n)]
        ends, prev = [], -1.0
        for j in range(len(sizes)):
            s = max(max(issue[j]), prev)  # the last rank's arrival (or the stream) starts it
            took = comm(sizes[j]) if callable(comm) else comm
            ends.append(([max(issue[j][r], prev) for r in range(n)], s + took))
            prev = s + took
        for r in range(n):
            opt0 = max(be[r], prev)
            end = opt0 + f[r] * optimizer
            out[r].append(Step(start[r], bs[r], be[r], opt0, end,
                               [(sizes[j], issue[j][r], ends[j][0][r], ends[j][1]) for j in range(len(sizes))]))
        start = [out[r][-1].end + gap for r in range(n)]  # each rank goes on at once (no barrier)
    return out


def kineto(rank: int, n: int, steps: Sequence[Step], gpu: bool = False, seq: bool = False,
           host: Optional[str] = "node0", first_step: int = 1, ranks_arg: Optional[str] = None,
           base_ns: int = BASE_NS, dist_info: bool = True, step_spans: bool = True,
           kernel_name: str = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
           offset_s: float = 0.0) -> dict:
    """A Kineto trace document of one rank."""
    ev: List[dict] = []
    us = lambda t: (t + offset_s) * 1e6  # noqa: E731

    def x(name, t0, t1, cat="cpu_op", tid=1, args=None, pid=100 + rank):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": us(t0),
                   "dur": max(us(t1) - us(t0), 0.0), "args": args or {}})

    corr = 1000
    seqno = 0
    for k, st in enumerate(steps):
        if step_spans:
            x(f"ProfilerStep#{first_step + k}", st.start, st.end, cat="user_annotation")
        fwd_end = st.start + 0.8 * (st.backward_start - st.start)
        x("DistributedDataParallel.forward", st.start + 1e-6, fwd_end, cat="user_annotation")
        if gpu:
            corr += 1
            x("cudaLaunchKernel", st.start + 2e-6, st.start + 3e-6, cat="cuda_runtime", args={"correlation": corr})
            x("void gemm_fwd", st.start + 5e-6, fwd_end, cat="kernel", tid=7, pid=0, args={"correlation": corr})
        # backward: one autograd op per bucket interval (the host runs it on its autograd thread)
        marks = [st.backward_start] + [b[1] for b in st.buckets] + [st.backward_end]
        marks = sorted(set(marks))
        for a, b in zip(marks, marks[1:]):
            if b - a <= 0:
                continue
            x("autograd::engine::evaluate_function: AddmmBackward0", a, b - 1e-7, tid=2)
            if gpu:
                corr += 1
                x("cudaLaunchKernel", a + 1e-7, a + 2e-7, cat="cuda_runtime", tid=2, args={"correlation": corr})
                x("void gemm_bwd", a + 3e-7, b - 2e-7, cat="kernel", tid=7, pid=0, args={"correlation": corr})
        for size, issue, start, end in st.buckets:
            seqno += 1
            if gpu:
                corr += 1
                args = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": size // 4,
                        "Out msg nelems": size // 4, "Group size": n, "Process Group Name": "0",
                        "Process Group Description": "default_pg",
                        "Process Group Ranks": ranks_arg or str(list(range(n))), "Rank": rank}
                if seq:
                    args["Seq"] = seqno
                x("record_param_comms", issue, issue + 2e-6, tid=2, args=args)
                x("cudaLaunchKernel", issue + 1e-6, issue + 1.5e-6, cat="cuda_runtime", tid=2,
                  args={"correlation": corr})
                kargs = {"correlation": corr, "stream": 20}
                if seq:
                    kargs.update({"Seq": seqno, "Process Group Name": "0"})
                x(kernel_name, max(start, issue), end, cat="kernel", tid=20, pid=0, args=kargs)
            else:
                x("c10d::allreduce_", issue, issue + 2e-6, tid=2,
                  args={"Input Dims": [[[size // 4]], [], [], [], [], []],
                        "Input type": ["TensorList", "", "", "", "Scalar", "Scalar"]})
                x("gloo:all_reduce", max(start, issue + 3e-6), end, cat="user_annotation", tid=3,
                  args={"Input Dims": [[size // 4]], "Input type": ["float"]})
        x("Optimizer.step#SGD.step", st.optimizer_start + 1e-7, st.end, cat="user_annotation")
        if gpu:
            corr += 1
            x("cudaLaunchKernel", st.optimizer_start + 2e-7, st.optimizer_start + 3e-7, cat="cuda_runtime",
              args={"correlation": corr})
            x("void sgd", st.optimizer_start + 4e-7, st.end - 1e-7, cat="kernel", tid=7, pid=0,
              args={"correlation": corr})
    doc = {"schemaVersion": 1, "traceEvents": ev, "baseTimeNanoseconds": base_ns, "displayTimeUnit": "ms"}
    if host:
        doc["host_name"] = host
    if dist_info:
        doc["distributedInfo"] = {"backend": "nccl" if gpu else "gloo", "rank": rank, "world_size": n,
                                  "pg_count": 1, "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                                                                "pg_size": n, "ranks": list(range(n))}]}
    return doc


def flight_recorder(rank: int, n: int, steps: Sequence[Step], nccl: bool = True, base_ns: int = BASE_NS) -> dict:
    """A Flight Recorder dump (the dict _dump_fr_trace pickles) of one rank's buckets."""
    entries = []
    seq = 0
    for st in steps:
        for size, issue, start, end in st.buckets:
            seq += 1
            e = {"record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
                 "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:all_reduce" if nccl else "gloo:all_reduce",
                 "time_created_ns": base_ns + int(issue * 1e9), "input_sizes": [[size // 4]],
                 "input_dtypes": ["Float"], "output_sizes": [[size // 4]], "output_dtypes": ["Float"],
                 "state": "completed" if nccl else "scheduled", "retired": True, "timeout_ms": 600000,
                 "is_p2p": False, "time_discovered_started_ns": None, "time_discovered_completed_ns": None}
            if nccl:
                e["time_discovered_started_ns"] = base_ns + int(start * 1e9)
                e["time_discovered_completed_ns"] = base_ns + int(end * 1e9)
                e["duration_ms"] = (end - start) * 1e3
            entries.append(e)
    return {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(n)))}},
            "pg_status": {}, "entries": entries}

"""PyTorch profiler (Kineto) Chrome traces -> :class:`commsim.traces.records.RankTrace`.

What a DDP job's trace holds, and what is read from it (Kineto's Chrome trace format: complete
events ``"ph": "X"`` with ``ts``/``dur`` in microseconds, ``baseTimeNanoseconds`` the epoch
offset of ``ts`` in recent releases; ``distributedInfo`` with the rank, world size and process
groups):

- steps: ``ProfilerStep#N`` spans (what ``prof.step()`` makes); without them, a step begins at
  each ``DistributedDataParallel.forward``;
- compute: ``DistributedDataParallel.forward`` (forward), the autograd engine's
  ``autograd::engine::evaluate_function: ...`` ops (backward), ``Optimizer.step#...``
  (optimizer). With GPU kernels in the trace, compute is the kernels instead, each in the
  phase of the CPU op that launched it (linked by its ``correlation`` to the runtime's launch
  call), so that phases are timed where they ran;
- collectives, issue side: ``record_param_comms`` ops with their metadata ("Collective name",
  "dtype", "In msg nelems", "Out msg nelems", "Group size", "Process Group Name", "Process Group
  Ranks" (lists past 30 ranks are truncated with "..."), "Rank", "Seq"); where a backend writes
  none (gloo), the dispatcher's ``c10d::allreduce_``-style ops;
- collectives, execution side: gloo's ``gloo:all_reduce``-style spans on its worker threads,
  NCCL's kernels (``ncclDevKernel_*``, ``ncclKernel_*``) on the GPU. Each execution is paired
  with its issue by sequence number where both have one, else by kind, size and time order
  (the earliest unpaired execution of the same kind and size that starts after the issue).
"""

from __future__ import annotations

import bisect
import math
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from commsim.traces.errors import TraceError
from commsim.traces.kinds import (
    DTYPE_BYTES, collective_kind, dtype_name, is_nccl_kernel, nccl_kernel_kind, nccl_kernel_names,
)
from commsim.traces.records import CommEvent, Interval, RankTrace

STEP = re.compile(r"^ProfilerStep#(\d+)$")
FORWARD = ("DistributedDataParallel.forward",)
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
OPTIMIZER_PREFIX = "Optimizer.step#"
KERNEL_CATS = ("kernel", "Kernel")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "Runtime", "runtime")
# issue-side ops of the dispatcher (c10d::allreduce_ ...), one per collective call
C10D = re.compile(r"^c10d::(_?[a-z_]+?)_?$")
# the "..." a truncated "Process Group Ranks" list ends with
TRUNCATED = "..."


def _rank_list(raw: Any, size: Optional[int], where: str, source: str) -> Optional[Tuple[int, ...]]:
    """ "[0, 1, 2, 3]" -> (0, 1, 2, 3). A list truncated with "..." (record_param_comms cuts it
    past 30 ranks: "[0, 1, ..., 28, ..., 127]") is completed when the ranks before the cut are
    an arithmetic progression that reaches the last one in `size` ranks; otherwise None
    (the group is then known by its name and size only)."""
    if raw is None:
        return None
    if isinstance(raw, list):
        items = [str(x) for x in raw]
    elif isinstance(raw, str):
        items = [x.strip() for x in raw.strip().strip("[]").split(",") if x.strip()]
    else:
        raise TraceError(source, where, f"expected a list of ranks, got {type(raw).__name__}")

    def ranks(texts: List[str]) -> List[int]:
        try:
            out = [int(x) for x in texts]
        except ValueError:
            out = [-1]
        if any(r < 0 for r in out):  # a negative rank indexed the ranks' list from its end
            raise TraceError(source, where, f"expected a list of ranks (integers >= 0), got {raw!r:.80}")
        return out

    if TRUNCATED not in items:
        return tuple(ranks(items))
    cut = items.index(TRUNCATED)
    head = ranks(items[:cut])
    tail = ranks([x for x in items[cut + 1:] if x != TRUNCATED])
    if size and len(head) >= 2 and tail:
        stride = head[1] - head[0]
        if stride > 0 and all(b - a == stride for a, b in zip(head, head[1:])):
            full = tuple(head[0] + stride * i for i in range(size))
            if full[-1] == tail[-1]:
                return full
    return None


def _int(value: Any, source: str, where: str, what: str, minimum: int = 0) -> int:
    """An integer arg of an op (an int, or its text), at least `minimum`. A boolean, a fraction
    (int() truncated 2.5 to 2), an infinity (int() raised OverflowError: a traceback) and a count
    below the minimum (a negative element count read as bytes) are refused."""
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(value)
        out = int(value)
    except (TypeError, ValueError, OverflowError):
        raise TraceError(source, where, f"expected {what} (an integer), got {value!r:.60}") from None
    if out < minimum:
        raise TraceError(source, where, f"expected {what} (an integer >= {minimum}), got {value!r:.60}")
    return out


def _numel(dims: Any) -> Optional[int]:
    """Elements of the first tensor argument of an op's "Input Dims" ([[65792]] or [[[65792]], []])."""
    if not isinstance(dims, list) or not dims:
        return None
    first = dims[0]
    if isinstance(first, list) and first and isinstance(first[0], list):  # a TensorList: the first tensor
        first = first[0]
    if not isinstance(first, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in first):
        return None  # a negative dimension is no size (and -1 bytes means "unknown" downstream)
    return math.prod(first)  # exact: np.prod wrapped [2**32, 2**32] to 0 in int64


MAX_NS = 2**63  # the profiler's and Flight Recorder's nanosecond stamps are int64
MAX_TS_US = MAX_NS / 1000  # an event's ts (us) beyond them is no clock reading


def _is_number(value: Any) -> bool:
    """An int or float that is not a bool (JSON true is no timestamp)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    """Whether a number is finite as a float: JSON's integers have no bound, and one past
    float's range (a 400-digit ts) makes math.isfinite raise OverflowError."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


class _Reader:
    def __init__(self, doc: Any, source: str):
        self.source = source
        if isinstance(doc, list):
            doc = {"traceEvents": doc}
        events = doc.get("traceEvents")
        if not isinstance(events, list):
            raise TraceError(source, "traceEvents", f"expected a list of trace events, got {type(events).__name__}")
        self.doc = doc
        self.events = events
        base = doc.get("baseTimeNanoseconds", 0)
        if isinstance(base, float) and base.is_integer():  # a tool that wrote the int64 as a float
            base = int(base)
        if isinstance(base, bool) or not isinstance(base, int) or not 0 <= base < MAX_NS:
            # the profiler writes an int64 of nanoseconds; past float's range the ranks' alignment
            # ((origin - first origin) * 1e-9) was an OverflowError traceback, and any other value
            # (a fraction, a string, a negative) was read as 0, so that the error it led to blamed
            # "ranks from different jobs" instead of this key
            raise TraceError(source, "baseTimeNanoseconds",
                             f"expected nanoseconds since the epoch (an integer from 0 below 2**63), got {base!r:.60}")
        self.base_ns = base
        self.dist = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
        self.notes: List[str] = []

    # -- events -----------------------------------------------------------------------------
    def complete_events(self):
        """(index, event) of every complete event with a numeric ts and dur."""
        out = []
        for i, e in enumerate(self.events):
            if not isinstance(e, dict) or e.get("ph") != "X":
                continue
            ts, dur = e.get("ts"), e.get("dur", 0)
            if "ts" not in e:  # said as missing: "got None" read as if the trace held a null
                raise TraceError(self.source, f"traceEvents[{i}].ts", "missing key: a complete ('ph': 'X') event "
                                                                        "needs its start time")
            if not _is_number(ts) or not _is_number(dur) or not _finite(ts):
                raise TraceError(self.source, f"traceEvents[{i}]", f"expected numeric ts and dur, got {ts!r:.60} and {dur!r:.60}")
            if abs(ts) > MAX_TS_US:
                # past the int64 nanosecond clock (292 years) no profiler wrote it, and -1e308
                # overflowed the ranks' common origin in nanoseconds (OverflowError, a traceback)
                raise TraceError(self.source, f"traceEvents[{i}].ts",
                                 f"expected a start time within +-2**63 ns ({MAX_TS_US:.4g} us), got {ts!r:.60}")
            # the trace-event format's dur is an elapsed time: a negative or non-finite one
            # would run a span backwards and skew every compute and collective time read from it
            if not _finite(dur) or dur < 0:
                raise TraceError(self.source, f"traceEvents[{i}].dur",
                                 f"expected a finite duration >= 0 (microseconds), got {dur!r:.60}")
            name = e.get("name")
            if not isinstance(name, str):
                continue
            out.append((i, e))
        return out

    def read(self) -> RankTrace:
        xs = self.complete_events()
        if not xs:
            raise TraceError(self.source, "traceEvents", "no complete ('ph': 'X') events: an empty or cut trace")
        t0_us = math.floor(min(e["ts"] for _, e in xs))
        origin_ns = self.base_ns + int(t0_us) * 1000

        def sec(ts_us: float) -> float:
            return (ts_us - t0_us) * 1e-6

        steps_raw, forwards, backwards, optimizers = [], [], [], []
        rpc, c10d, annotations, kernels = [], [], [], []
        runtime: Dict[int, float] = {}
        for i, e in xs:
            name, cat = e["name"], e.get("cat", "")
            t, d = e["ts"], e.get("dur", 0) or 0
            m = STEP.match(name)
            if m:
                steps_raw.append((int(m.group(1)), sec(t), sec(t + d)))
            elif name in FORWARD:
                forwards.append((sec(t), sec(t + d)))
            elif name.startswith(BACKWARD_PREFIX):
                backwards.append((sec(t), sec(t + d)))
            elif name.startswith(OPTIMIZER_PREFIX):
                optimizers.append((sec(t), sec(t + d)))
            elif name == "record_param_comms":
                rpc.append((i, e))
            elif name.startswith("c10d::") and C10D.match(name) and collective_kind(name):
                c10d.append((i, e))
            elif cat in KERNEL_CATS:
                kernels.append((i, e))
            elif name.startswith(("gloo:", "nccl:")) and collective_kind(name):
                annotations.append((i, e))
            if cat in RUNTIME_CATS:
                corr = (e.get("args") or {}).get("correlation")
                if isinstance(corr, int):
                    runtime[corr] = sec(t)
        rank, world = self._rank_and_world(rpc)
        groups = self._groups()
        default_group = groups[0][0] if len(groups) == 1 else "0"
        nccl_kernels = [(i, e) for i, e in kernels if is_nccl_kernel(e["name"])]
        compute_kernels = [(i, e) for i, e in kernels if not is_nccl_kernel(e["name"])]
        device = "gpu" if kernels else "cpu"

        steps = self._steps(steps_raw, forwards, optimizers, backwards)
        step_of = _StepLookup(steps)

        # -- collectives: issue side, then execution side, then pair them -------------------
        issues = self._issues(rpc, c10d, annotations, sec, default_group, world)
        # gloo's spans are executions, unless they are the only record (then already the issues)
        gloo_spans = annotations if (rpc or c10d) else []
        execs = self._executions(gloo_spans, nccl_kernels, sec, default_group)
        comms = _pair(issues, execs)
        comms = _with_order(comms, step_of)

        # -- compute ---------------------------------------------------------------------
        intervals: List[Interval] = []
        if compute_kernels:
            intervals = self._gpu_phases(compute_kernels, runtime, forwards, backwards, optimizers, sec, step_of)
        else:
            for phase, spans in (("forward", forwards), ("backward", backwards), ("optimizer", optimizers)):
                intervals += [Interval(phase, a, b, step_of(a)) for a, b in spans]
        host = self.doc.get("host_name") if isinstance(self.doc.get("host_name"), str) else None
        backend = self.dist.get("backend") if isinstance(self.dist.get("backend"), str) else None
        if backend is None and comms:
            backend = "nccl" if nccl_kernels or any(c.where.startswith("nccl") for c in comms) else "gloo"
        return RankTrace(
            source=self.source, format="kineto", rank=rank, origin_ns=origin_ns, world_size=world,
            host=host, backend=backend, groups=groups, comms=tuple(comms), intervals=tuple(intervals),
            steps=tuple(steps), device=device, notes=tuple(self.notes),
        )

    # -- identity -----------------------------------------------------------------------------
    def _rank_and_world(self, rpc) -> Tuple[int, Optional[int]]:
        rank = self.dist.get("rank")
        world = self.dist.get("world_size")
        if not isinstance(rank, int):
            ranks = {e["args"].get("Rank") for _, e in rpc if isinstance(e.get("args"), dict)} - {None}
            rank = next(iter(ranks)) if len(ranks) == 1 else None
        if not isinstance(rank, int):
            m = re.search(r"rank[_-]?(\d+)", self.source.rsplit("/", 1)[-1], re.IGNORECASE)
            rank = int(m.group(1)) if m else None
        if not isinstance(rank, int) or rank < 0:
            raise TraceError(self.source, "distributedInfo.rank",
                             "cannot tell which rank recorded this trace: no distributedInfo.rank, no 'Rank' in its "
                             "record_param_comms ops and no rank<N> in the file name")
        if not isinstance(world, int) or world < 1:
            sizes = {e["args"].get("Group size") for _, e in rpc if isinstance(e.get("args"), dict)} - {None}
            world = max(sizes) if sizes else None
        if world is not None and rank >= world:
            raise TraceError(self.source, "distributedInfo.rank", f"rank {rank} is outside world size {world}")
        return rank, world

    def _groups(self) -> Tuple[Tuple[str, Tuple[int, ...]], ...]:
        out = []
        config = self.dist.get("pg_config")
        if config is None:
            config = []
        elif not isinstance(config, list):  # a number here was iter()'s TypeError, a traceback
            raise TraceError(self.source, "distributedInfo.pg_config",
                             f"expected a list of process groups ({{pg_name, ranks, ...}}), got {config!r:.80}")
        for j, pg in enumerate(config):
            if isinstance(pg, dict) and "pg_name" in pg:
                ranks = pg.get("ranks")
                if isinstance(ranks, list) and any(isinstance(r, int) and not isinstance(r, bool) and r < 0 for r in ranks):
                    raise TraceError(self.source, f"distributedInfo.pg_config[{j}].ranks",
                                     f"expected a list of ranks (integers >= 0), got {ranks!r:.80}")
                ranks = tuple(int(r) for r in ranks) if isinstance(ranks, list) and all(isinstance(r, int) for r in ranks) else ()
                out.append((str(pg["pg_name"]), ranks))
        return tuple(out)

    def _steps(self, steps_raw, forwards, optimizers, backwards) -> List[Tuple[int, float, float]]:
        if steps_raw:
            return sorted(steps_raw)
        if not forwards:
            return []
        # no ProfilerStep spans: a step runs from one DDP forward to the next
        starts = sorted(a for a, _ in forwards)
        last_end = max([b for _, b in optimizers] + [b for _, b in backwards] + [starts[-1]])
        ends = starts[1:] + [last_end]
        self.notes.append("no ProfilerStep spans: steps begin at each DistributedDataParallel.forward")
        return [(k, a, b) for k, (a, b) in enumerate(zip(starts, ends))]

    # -- collectives --------------------------------------------------------------------------
    def _issues(self, rpc, c10d, annotations, sec, default_group, world) -> List[CommEvent]:
        out: List[CommEvent] = []
        if rpc:
            kept_end = -math.inf
            kept_name = None
            for i, e in sorted(rpc, key=lambda ie: ie[1]["ts"]):
                args = e.get("args") if isinstance(e.get("args"), dict) else {}
                where = f"traceEvents[{i}]"
                raw_name = args.get("Collective name")
                if not isinstance(raw_name, str):
                    raise TraceError(self.source, f"{where}.args", "a record_param_comms op without a 'Collective name'")
                kind = collective_kind(raw_name)
                if kind is None:
                    continue  # init, split, wait...: no collective
                end = e["ts"] + (e.get("dur") or 0)
                # some releases record a collective twice (the Python wrapper and the process
                # group): an op inside the previous one, of the same name, is that one again
                if e["ts"] < kept_end and raw_name == kept_name:
                    continue
                kept_end, kept_name = end, raw_name
                dt = dtype_name(args.get("dtype"))
                if dt is None:
                    raise TraceError(self.source, f"{where}.args.dtype", f"unknown dtype {args.get('dtype')!r}")
                n_in = _int(args.get("In msg nelems", 0), self.source, f"{where}.args.In msg nelems", "an element count")
                n_out = _int(args.get("Out msg nelems", n_in), self.source, f"{where}.args.Out msg nelems", "an element count")
                size = args.get("Group size")
                size = _int(size, self.source, f"{where}.args.Group size", "a group size", 1) if size is not None else None
                seq = args.get("Seq")
                seq = _int(seq, self.source, f"{where}.args.Seq", "a sequence number") if seq is not None else None
                group = args.get("Process Group Name")
                out.append(CommEvent(
                    kind=kind, group=str(group) if group is not None else default_group,
                    nbytes=_nbytes(kind, n_in, n_out, dt), dtype=dt, issue=sec(e["ts"]), seq=seq,
                    group_ranks=_rank_list(args.get("Process Group Ranks"), size, f"{where}.args.Process Group Ranks", self.source),
                    group_size=size, where=where,
                ))
            return out
        if c10d:
            for i, e in sorted(c10d, key=lambda ie: ie[1]["ts"]):
                args = e.get("args") if isinstance(e.get("args"), dict) else {}
                kind = collective_kind(e["name"])
                numel = _numel(args.get("Input Dims"))
                out.append(CommEvent(kind=kind, group=default_group, nbytes=-1 if numel is None else numel,
                                     dtype="", issue=sec(e["ts"]), group_size=world, where=f"traceEvents[{i}]"))
            return out
        # neither: the backend's own annotations are the only record (issue = its start)
        for i, e in sorted(annotations, key=lambda ie: ie[1]["ts"]):
            ev = self._annotation(i, e, sec, default_group, world)
            out.append(ev)
        return out

    def _annotation(self, i, e, sec, default_group, world) -> CommEvent:
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        where = f"traceEvents[{i}]"
        kind = collective_kind(e["name"])
        numel = _numel(args.get("Input Dims"))
        types = args.get("Input type")
        dt = dtype_name(types[0]) if isinstance(types, list) and types else None
        if numel is None or dt is None:
            raise TraceError(self.source, f"{where}.args", f"{e['name']} without its input's dims and type: record the "
                                                            "trace with record_shapes=True")
        nbytes = numel * DTYPE_BYTES[dt]
        if kind == "all_gather":  # the input is one rank's share: nccl-tests sizes the output
            nbytes *= world or 1
        t, d = sec(e["ts"]), (e.get("dur") or 0) * 1e-6
        return CommEvent(kind=kind, group=default_group, nbytes=nbytes, dtype=dt, issue=t, start=t, end=t + d,
                         group_size=world, where=f"{e['name']} {where}")

    def _executions(self, annotations, nccl_kernels, sec, default_group) -> List[CommEvent]:
        out: List[CommEvent] = []
        world = self.dist.get("world_size") if isinstance(self.dist.get("world_size"), int) else None
        for i, e in sorted(annotations, key=lambda ie: ie[1]["ts"]):
            if e["name"].startswith("gloo:"):  # gloo runs the collective inside this span
                out.append(self._annotation(i, e, sec, default_group, world))
        for i, e in sorted(nccl_kernels, key=lambda ie: ie[1]["ts"]):
            where = f"traceEvents[{i}]"
            try:
                kind = nccl_kernel_kind(e["name"])
            except KeyError:
                raise TraceError(self.source, f"{where}.name",
                                 f"unknown NCCL kernel {e['name'].split('(')[0]!r}: expected ncclDevKernel_<collective>... "
                                 f"or ncclKernel_<collective>... with a collective among {nccl_kernel_names()}") from None
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            if isinstance(args.get("Collective name"), str) and collective_kind(args["Collective name"]):
                kind = collective_kind(args["Collective name"])
            seq = args.get("Seq")
            group = args.get("Process Group Name")
            t, d = sec(e["ts"]), (e.get("dur") or 0) * 1e-6
            n_in = args.get("In msg nelems")
            dt = dtype_name(args.get("dtype")) if args.get("dtype") is not None else None
            nbytes = -1
            if isinstance(n_in, int) and dt:
                n_out = args.get("Out msg nelems", n_in)
                nbytes = _nbytes(kind or "all_reduce", n_in, n_out if isinstance(n_out, int) else n_in, dt)
            out.append(CommEvent(kind=kind or "", group=str(group) if group is not None else default_group,
                                 nbytes=nbytes, dtype=dt or "", issue=t, start=t, end=t + d,
                                 seq=int(seq) if isinstance(seq, int) else None, where=f"kernel {where}"))
        return out

    def _gpu_phases(self, kernels, runtime, forwards, backwards, optimizers, sec, step_of) -> List[Interval]:
        """Each compute kernel in the phase of the CPU span that launched it."""
        spans = []
        for phase, lst in (("forward", forwards), ("backward", backwards), ("optimizer", optimizers)):
            spans += [(a, b, phase) for a, b in lst]
        spans.sort()
        starts = [a for a, _, _ in spans]
        out: List[Interval] = []
        unlinked = 0
        for _, e in kernels:
            corr = (e.get("args") or {}).get("correlation")
            launch = runtime.get(corr) if isinstance(corr, int) else None
            if launch is None:
                unlinked += 1
                continue
            j = bisect.bisect_right(starts, launch) - 1
            # the innermost span containing the launch (spans of one phase never nest in time
            # with another's on the launching thread: forward, backward, optimizer follow each other)
            while j >= 0 and not (spans[j][0] <= launch <= spans[j][1]):
                j -= 1
                if j >= 0 and launch - spans[j][1] > 1.0:
                    j = -1
            if j < 0:
                continue  # launched outside the three phases (loss, zero_grad, data)
            t, d = sec(e["ts"]), (e.get("dur") or 0) * 1e-6
            out.append(Interval(spans[j][2], t, t + d, step_of(launch)))
        if unlinked:
            self.notes.append(f"{unlinked} GPU kernels without a launch record (correlation) were left out of compute")
        return out


class _StepLookup:
    """Step number of a host time: the step span containing it (-1: none)."""

    def __init__(self, steps: Sequence[Tuple[int, float, float]]):
        self.steps = sorted(steps, key=lambda s: s[1])
        self.starts = [s for _, s, _ in self.steps]

    def __call__(self, t: float) -> int:
        j = bisect.bisect_right(self.starts, t) - 1
        if j >= 0 and t <= self.steps[j][2]:
            return self.steps[j][0]
        return -1


def _nbytes(kind: str, n_in: int, n_out: int, dtype: str) -> int:
    """nccl-tests' size of a collective: the larger buffer for gathers/scatters, else the input."""
    n = max(n_in, n_out) if kind in ("all_gather", "reduce_scatter", "gather", "scatter") else n_in
    return int(n) * DTYPE_BYTES[dtype]


def _pair(issues: List[CommEvent], execs: List[CommEvent]) -> List[CommEvent]:
    """Issue events completed with their executions (start, end, size, dtype).

    By (group, seq) where both sides have one; else each issue, in time order, takes the
    earliest unpaired execution of its kind (and size, where the issue knows it) that starts
    no earlier than 1 ms before it (clock rounding between host and device). Issues with no
    execution keep start/end None; executions with no issue (issued before the trace began)
    are dropped."""
    from dataclasses import replace

    if not execs:
        return [c if c.dtype else replace(c, nbytes=0) for c in issues]
    by_seq = {(c.group, c.seq): c for c in execs if c.seq is not None}
    queues: Dict[str, List[CommEvent]] = {}
    for x in sorted(execs, key=lambda x: x.start):
        queues.setdefault(x.kind, []).append(x)
    heads = {k: 0 for k in queues}  # executions before a queue's head can pair with no later issue
    used = set()
    out = []
    for c in sorted(issues, key=lambda c: c.issue):
        match = None
        if c.seq is not None and (c.group, c.seq) in by_seq:
            match = by_seq[(c.group, c.seq)]
            used.add(id(match))
        else:
            kind = c.kind if c.kind in queues else ("" if "" in queues else None)
            if kind is not None:
                q = queues[kind]
                while heads[kind] < len(q) and (id(q[heads[kind]]) in used or q[heads[kind]].start < c.issue - 1e-3):
                    heads[kind] += 1
                for x in q[heads[kind]:heads[kind] + 64]:  # the next few: a size mismatch skips one
                    if id(x) in used or x.start < c.issue - 1e-3:
                        continue
                    if c.nbytes > 0 and x.nbytes > 0 and not _same_size(c, x):
                        continue
                    match = x
                    used.add(id(x))
                    break
        if match is None:  # a c10d op's element count is no size in bytes: unknown
            out.append(c if c.dtype else replace(c, nbytes=0))
            continue
        nbytes = c.nbytes if c.dtype else (match.nbytes if match.nbytes >= 0 else 0)
        out.append(replace(c, start=match.start, end=match.end, nbytes=nbytes, dtype=c.dtype or match.dtype,
                           seq=c.seq if c.seq is not None else match.seq))
    return out


def _same_size(issue: CommEvent, ex: CommEvent) -> bool:
    if issue.dtype:  # both in bytes
        return issue.nbytes == ex.nbytes
    # a c10d op knows its element count only: compare with the execution's elements
    per = DTYPE_BYTES.get(ex.dtype, 0)
    if not per:
        return True
    count = ex.nbytes // per
    return issue.nbytes in (count, count // max(ex.group_size or 1, 1))


def _with_order(comms: List[CommEvent], step_of) -> List[CommEvent]:
    from dataclasses import replace

    counters: Dict[str, int] = {}
    out = []
    for c in sorted(comms, key=lambda c: c.issue):
        k = counters.get(c.group, 0)
        counters[c.group] = k + 1
        out.append(replace(c, order=k, step=step_of(c.issue)))
    return out


def read_kineto(doc: Any, source: str) -> RankTrace:
    """One rank's profiler trace (the parsed JSON document) as a RankTrace."""
    if not isinstance(doc, (dict, list)):
        raise TraceError(source, None, f"expected a trace (a JSON object with traceEvents), got {type(doc).__name__}")
    return _Reader(doc, source).read()

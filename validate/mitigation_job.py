"""Real DDP with torch's communication hooks, against commsim's mitigation model.

Each case trains the synthetic model of :mod:`validate.compute_timing` (square ``Linear(w, w)``
layers: exactly commsim's ``shapes: square`` PowerSGD shape model at ``width: w``) under
``DistributedDataParallel`` on gloo, with one of

- no hook (the baseline), ``default_hooks.fp16_compress_hook``, ``default_hooks.bf16_compress_hook``;
- ``powerSGD_hook.powerSGD_hook`` with ``PowerSGDState(matrix_approximation_rank=r,
  start_powerSGD_iter=start)`` (the warm-up steps run before the timed ones);
- post-local SGD: ``post_localSGD_hook`` with ``PostLocalSGDState(subgroup=<the rank's node>)``
  and ``PeriodicModelAverager(period=H).average_parameters`` after every optimizer step;

with or without an injected slow rank (a stall before the forward, the simulator's ``stall``
straggler). All cases run in one launch (one process group). Each case's hardware (forward,
backward under ``no_sync``, optimizer; the memory bandwidth of a cast, the rate of PowerSGD's
products, the cost of a small op: :class:`HardwareSampler`) is sampled in the time window of its
own timed steps: the steps run in blocks (:func:`step_blocks`: one step, or one period of
post-local SGD's H), each block after one sample per step and a common start, and the figures are
the medians over the case's samples. On a shared machine the rates come in modes (no-sync steps
of ~12 or ~24 ms, in bursts of load), and samples taken before and after the steps landed in the
other mode than the steps now and then; within the steps' window a burst falls on both. A slow
case's samples sleep the slow rank's stall before their compute, as its steps do before their
forward: on cores the ranks share, a rank computes about twice as fast while the other is stalled
(no-sync compute ~23 ms side by side, ~11 ms in the slow cases' steps), and samples taken side by
side priced the slow cases' compute at the contended rate.

Once for the machine, never per case, the job measures DDP's own costs
(:class:`DDPCostProbe`: the per-step cost of a synced step beyond its compute and its all-reduce,
the memory bandwidth of a copy, compute slowed by an all-reduce in flight, and the ranks' compute
jitter about each other, :func:`compute_jitter_cv`, now only reported: the predictions draw the
ranks' spread from the case's own per-rank samples, :func:`compute_rows`); every case's scenario
carries them as ``ddp.costs``. Their rounds (``machine_rounds`` in all) are interleaved with the
cases (:func:`slot_rounds`: a share before every case and after the last), so that a burst of a
shared machine's load falls on both, and their figures are means over the rounds (a mean step
time carries the mean of each cost, its long tail of stalled rounds included: a median or a
trimmed mean of a skewed or bimodal cost falls short of it). The same rounds measure

- the backend's all-reduce per dtype (:class:`ReduceDtypeProbe`: fp32 and fp16, bf16 where a
  case runs it, at the bucket's elements and two smaller counts, side by side): gloo on a CPU sums
  16-bit elements in software, and its fp16 all-reduce takes about fp32's time, not half. The
  fp16/bf16 cases' remedy carries the measured ratio as ``reduce_bytes``
  (:func:`reduce_bytes_from_ranks`); each such row also reports ``bytes_model_step_time_s``, the
  prediction without it (commsim's default: half the bytes, half the time);
- what powerSGD_hook's chaining of its all-reduces costs (:class:`ChainProbe`: the hook starts its
  P and Q all-reduces inside the callbacks of the all-reduce before them, which then block on
  them; on gloo each such hop costs milliseconds beyond the all-reduce): the PowerSGD cases'
  remedy carries it as ``chain_overhead``; each such row also reports ``unchained_step_time_s``,
  the prediction without it; the same probe runs the chain with one rank arriving
  :data:`WAKE_SKEW_S` late, the others blocked on the first all-reduce meanwhile, against the chain
  run aligned, both timed from the last rank's launch (the remedy's ``wake_overhead`` where the
  skewed chain is slower, :func:`wake_overhead_from_ranks`; ``unwoken_step_time_s``: without it);
- the rate of powerSGD_hook's two writes into new memory (:class:`FreshWriteProbe`: the clone of
  the bucket as the hook enters and the new error after the decompression, each a bucket-sized
  tensor allocated anew every step, after a forward and backward, the ranks side by side and
  one at a time): the PowerSGD cases' remedy carries it as ``fresh_bw`` (side by side without a
  slow rank, one at a time with one); each such row also reports ``mapped_writes_step_time_s``,
  the prediction with those writes at ``mem_bw``;
- the per-call cost of post-local SGD's subgroup all-reduce on a local step
  (:class:`SubgroupReduceProbe`: the async all-reduce and callback that ``post_localSGD_hook``
  issues on the rank's one-rank subgroup, after a short compute): the post-local SGD cases' remedy
  carries it as ``subgroup_overhead``; each such row also reports
  ``no_subgroup_call_step_time_s``, the prediction without it;
- the rate of post-local SGD's averaging passes (:class:`FlattenProbe`: the averager's
  ``torch.cat`` of the parameters into a new buffer and its in-place division, as
  ``average_parameters`` runs them): the post-local SGD cases' remedy carries it as ``mem_bw``;
  each such row also reports ``cast_rate_step_time_s``, the prediction at the cast's rate.

Each case predicts with the buckets its DDP built (:func:`validate.ddp_job.ddp_bucket_sizes`
after the warm-up steps' rebuild, as ``ddp.bucket_sizes``: :func:`with_built_buckets`), not the
nominal layout of its first bucket and cap: DDP never splits a tensor, so the synthetic model's
4 MiB layers are a bucket each at a smaller cap. Each row reports both (``ddp_buckets``).

The prediction of a case (:func:`predict`) is commsim's: the scenario with the measured
compute, those DDP costs and the gloo calibration (``commsim calibrate --backend gloo``), through
the same hook model as ``commsim compare`` (:func:`commsim.mitigations.hooked.run_hooked`), the
remedy given the measured memory bandwidth, the rate of each of PowerSGD's three products at its
rank and shape (``mq_flops``, ``mtp_flops``, ``pqt_flops``; the PowerSGD rows also report
``equal_products_step_time_s``, the prediction with the three at their common rate), and the op
cost. No number is fitted per case.

Evidence that a hook really ran, per case: fp16/bf16 leave every averaged gradient exactly
representable in the 16-bit wire dtype (a plain fp32 average almost never is); PowerSGD's P and Q
buffers (``state.p_memory_dict``, ``q_memory_dict``) hold the elements commsim's plan sends; post-local
SGD's parameters agree across ranks right after an averaging step and differ after a local one.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from validate.compute_timing import layer_shape, synthetic_model
from validate.ddp_job import bucket_kwargs, compute_step, ddp_bucket_sizes
from validate.replay import common_start

if TYPE_CHECKING:
    from commsim.scenario.spec import DDPCosts

# the rounds of the once-per-machine measurements in all (DDP's costs, the 16-bit all-reduce,
# PowerSGD's chain, the averager's flatten), spread over the cases: 4 before each of the
# benchmark's 10 cases and after the last
MACHINE_ROUNDS = 44
POWERSGD_START = 2  # torch asserts start_powerSGD_iter > 1 with error feedback / warm start
# powerSGD_hook waits on its P and Q all-reduces inside the callbacks of the previous one; on gloo
# those callbacks run on the process group's worker threads, and with two buckets in flight the
# ranks enqueue their P all-reduces in different orders and hang (torch 2.13, CPU). One bucket
# (a bucket cap of at least the gradient's bytes) has one chain of callbacks and runs.
POWERSGD_ONE_BUCKET = True
HOOKS = ("none", "fp16", "bf16", "powersgd", "localsgd")


@dataclass(frozen=True)
class Case:
    """One validation case: a hook (with its rank r or period H) and whether rank 1 is slow."""

    hook: str
    r: int = 0
    H: int = 0
    slow: bool = False

    @property
    def label(self) -> str:
        """The remedy in commsim's ``--mitigations`` syntax ('baseline' without a hook)."""
        name = {"none": "baseline", "powersgd": f"powersgd:r={self.r}", "localsgd": f"localsgd:H={self.H}"}
        return name.get(self.hook, self.hook)

    @property
    def name(self) -> str:
        return self.label + (" +slow rank" if self.slow else "")


def bf16_hook_supported() -> bool:
    """Whether this torch build runs bf16_compress_hook: it refuses unless CUDA 11+ with NCCL
    2.10+ (or XPU with XCCL) is available (a TypeError from inside the hook), so never on a
    CPU-only gloo job."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if not hasattr(default_hooks, "bf16_compress_hook"):
        return False
    try:
        return bool(torch.cuda.is_available() and torch.cuda.nccl.version() >= (2, 10))
    except (AttributeError, RuntimeError, TypeError):
        return False


def default_cases(bf16: bool = False) -> List[Case]:
    """The benchmark's cases: every hook without and with a slow rank (10, or 12 with bf16)."""
    hooks = [Case("none"), Case("fp16")] + ([Case("bf16")] if bf16 else []) + [
        Case("powersgd", r=1), Case("powersgd", r=4), Case("localsgd", H=4)]
    return hooks + [replace(c, slow=True) for c in hooks]


# ---------------------------------------------------------------- the ranks (torch only)


def _median_time(fn, iters: int) -> float:
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


class HardwareSampler:
    """What commsim's compute and hook models need, sampled on this rank one :meth:`sample` at a
    time, so that a case can take its samples in the time window of its own timed steps
    (:func:`_run_case`: one before each step) and a burst of a shared machine's load falls on both:
    a forward, backward without all-reduce (DDP's ``no_sync``) and optimizer step; an fp32 -> fp16
    cast of a bucket (its memory bandwidth: bytes read + written per second); 100 small ops (the
    cost of one: PowerSGD runs many); with `r`, powerSGD_hook's three products at rank r, as the
    hook calls them (``bmm(M, Q, out=P)``, ``bmm(M^T, P, out=Q)``, ``bmm(P, Q^T, out=M)`` on views of flat
    buffers; on a CPU these skinny products run far below a square matmul's rate, the transposed
    one most). The square matmul rate (``flops``, shown, not
    used by the predictions) once, at construction. :meth:`result`: their means."""

    def __init__(self, model: DDP, x, y, width: int, bucket_bytes: float, iters: int, r: int = 0):
        self.model, self.x, self.y, self.r = model, x, y, r
        self.opt = torch.optim.SGD(model.parameters(), lr=1e-6)
        self.buf = torch.randn(max(1, int(bucket_bytes) // 4))
        self.half = torch.empty(self.buf.numel(), dtype=torch.float16)
        self.half.copy_(self.buf)  # touch the pages once: the rate of the cast itself, not of the first page faults
        a, b = torch.randn(width, width), torch.randn(width, width)
        self.flops = 2.0 * width**3 / _median_time(lambda: torch.mm(a, b), iters)
        self.tiny = torch.zeros(1)
        if r:
            # one (M, P, Q) per w x w matrix of the model, as the hook holds them for its bucket
            k = sum(1 for t in model.parameters() if t.dim() == 2)
            self.mpq = [(torch.randn(width * width).view(1, width, width), torch.empty(width * r).view(1, width, r),
                         torch.randn(width * r).view(1, width, r)) for _ in range(max(1, k))]
        self.width = width
        # (start, end) of each sample's products, on the local ranks' one monotonic clock: whether
        # the ranks ran them at the same moments, as the hook's run in a step (products_overlap)
        self.windows: List[List[float]] = []
        # per callback-run sample (M^T P and P Q^T): did it run off the main thread (on gloo's)
        self.off_main: List[bool] = []
        self.handover = torch.zeros(16)  # the all-reduce whose callback runs them, as the hook's do
        self.samples: Dict[str, List[float]] = {k: [] for k in ("forward_s", "backward_s", "optimizer_s", "cast_s",
                                                                 "small_s", "mq_s", "mtp_s", "pqt_s")}

    def sample(self, pause: float = 0.0) -> None:
        """One sample of each (about one no-sync step's time plus a few ms). `pause`: this rank's
        stall before the step the sample prices (a slow rank's), slept after the first barrier
        and before the compute, as the step sleeps it before its forward: on cores the ranks share,
        a rank computes about twice as fast while the other sleeps (no-sync compute of ~23 ms side
        by side, ~11 ms with the other rank stalled), so a slow case's compute is sampled with
        the same overlap as its steps (its optimizer, after the sync in a step, is then sampled
        alone too: 1-2 ms). Collective: every rank
        calls it at the same point, and each part starts after a barrier, so that the ranks run
        it side by side, as they run a step's compute and powerSGD_hook's products without a slow
        rank (the P all-reduce lines them up before Q = M^T P and P Q^T). On a loaded 2-core
        machine two ranks computing at once each get about half the rate of one alone (PowerSGD's
        products at rank 4: ~2.7 vs ~5 GFLOP/s at load 2.5; it is the transposed product M^T P,
        a strided read of M, that slows: 3.7 ms alone, 7-8 ms with both ranks in it, inside the
        hook too, while M Q and P Q^T stay at ~0.9 ms); without the barriers the ranks drifted
        apart over the sample and ran the products side by side only 12-32% of the time
        (``products_overlap``), and the rate was mostly one rank's alone. A barrier before each
        product, each over every matrix of the model as the hook runs it (one product of one
        matrix is shorter than the ranks' skew leaving a barrier): the transposed one, which is
        the contended one, lines up too."""
        s = self.samples
        dist.barrier()
        if pause:
            time.sleep(pause)
        for k, v in compute_step(self.model, self.x, self.y, self.opt).items():
            s[k].append(v)
        s["cast_s"].append(_median_time(lambda: self.half.copy_(self.buf), 1))
        s["small_s"].append(_median_time(lambda: [self.tiny.add_(1.0) for _ in range(100)], 1) / 100)
        if self.r:
            # as the hook runs them: each product over every matrix back to back (a run of
            # milliseconds: the ranks' skew leaving a barrier on loaded cores is ~1-3 ms)
            # on the thread the hook runs each on: P = M Q in the hook's body (the main thread, in
            # backward); Q = M^T P and P Q^T in callbacks chained on an all-reduce's future, which
            # run on the backend's worker thread that completes it (inline on the main thread
            # where it is already complete), whose OpenMP/MKL thread count is its default, not
            # torch.set_num_threads(1)'s: at rank 4 on the loaded 2-core VM each product took
            # ~16 ms on a new thread against 0.8-3.9 ms on the main one
            main = threading.get_ident()
            for key, product, chained in (("mq_s", lambda m, p, q: torch.bmm(m, q, out=p), False),
                                          ("mtp_s", lambda m, p, q: torch.bmm(m.transpose(1, 2), p, out=q), True),
                                          ("pqt_s", lambda m, p, q: torch.bmm(p, q.transpose(1, 2), out=m), True)):
                dist.barrier()  # each product side by side: the transposed one is the contended one

                def run(fut, key=key, product=product, chained=chained):
                    t0 = time.monotonic()
                    for m, p, q in self.mpq:
                        product(m, p, q)
                    t1 = time.monotonic()
                    s[key].append((t1 - t0) / len(self.mpq))
                    self.windows.append([t0, t1])
                    if chained:
                        self.off_main.append(threading.get_ident() != main)
                    return fut.value() if fut is not None else None

                if chained:
                    dist.all_reduce(self.handover, async_op=True).get_future().then(run).wait()
                else:
                    run(None)

    def reset(self) -> None:
        """Forget the samples so far (a warm-up's)."""
        for v in self.samples.values():
            del v[:]
        del self.windows[:]
        del self.off_main[:]

    def result(self) -> Dict[str, float]:
        """Means over the samples (of times; rates as work over the mean time): a case's measured
        step time is a mean over its steps, bursts of load included, and each step has its sample,
        so the samples' mean is the compute and rates its steps ran at (a median would drop the
        bursts that the steps' mean carries)."""
        s = self.samples
        mean = {k: statistics.fmean(v) for k, v in s.items() if v}
        out = {"forward_s": mean["forward_s"], "backward_s": mean["backward_s"], "optimizer_s": mean["optimizer_s"],
               "mem_bw": self.buf.numel() * 6 / mean["cast_s"],
               "flops": self.flops, "kernel_overhead": mean["small_s"]}
        if self.r:  # 3 x 2 w^2 r FLOP over the sum of the products' mean times
            work = 2.0 * self.width**2 * self.r
            out["powersgd_flops"] = 3 * work / (mean["mq_s"] + mean["mtp_s"] + mean["pqt_s"])
            # and each product's own (the remedy's mq/mtp/pqt_flops): M^T P, a strided read of M,
            # is several times slower than the other two on a CPU
            out.update({f"{k}_flops": work / mean[f"{k}_s"] for k in ("mq", "mtp", "pqt")})
            out["products_off_main"] = statistics.fmean(self.off_main) if self.off_main else 0.0
        return out


def step_blocks(steps: int, case: Case) -> List[int]:
    """How a case's `steps` timed steps run between common starts (:func:`_run_case`): one at a
    time, each after one :class:`HardwareSampler` sample per rank, so the case's rates come from
    the steps' own time window; post-local SGD's in runs of H (a period: its local steps do not
    wait for each other, and a common start before each would make them), after H samples."""
    block = case.H if case.hook == "localsgd" else 1
    if steps % block:
        raise ValueError(f"{case.name}: {steps} timed steps are not whole periods of H={block}")
    return [block] * (steps // block)


class DDPCostProbe:
    """DDP's own costs on this machine (what ``scenario.ddp.costs`` needs), one machine figure
    whose rounds are interleaved with the cases (:func:`slot_rounds`: a share of them before every
    case and after the last, so that a burst of a shared machine's load falls on both the cases
    and these rounds, and the figure is still the machine's, never a case's). On plain DDP with
    the cases' one bucket (gradients as bucket views; the bucket DDP built is checked, since DDP
    never splits a tensor), each :meth:`round`:

    - the step under ``no_sync`` (forward, backward, optimizer), a synced step and an in-place
      ``dist.all_reduce`` of the bucket's bytes, in turn after a barrier each: with one bucket its
      all-reduce starts after the whole backward, so nothing overlaps and the synced step minus the
      other two is what DDP adds per step (the autograd hooks, the bucket's division by the world
      size, its future, the reducer's finalize; the job's figure is :func:`bucket_overhead_from_ranks`,
      the mean over every round);
    - a copy of the bucket (``memory_bandwidth``: bytes moved, read + write, per second; mean time);
    - the no-sync step while an all-reduce of four buckets is in flight on gloo's threads
      (``overlap_slowdown``: the mean over the rounds where it was still running at the step's
      end of that step over the round's own no-sync step, minus one; 0 if none was).

    :meth:`result` returns the figures and every round's samples (seconds)."""

    def __init__(self, ctx, module: nn.Module, x, y, plan: Dict):
        self.ctx, self.x, self.y = ctx, x, y
        self.model = DDP(module, gradient_as_bucket_view=True,
                         **bucket_kwargs(plan["first_bucket_bytes"], plan["bucket_cap_bytes"]))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-6)
        self.numel = sum(p.numel() for p in module.parameters())
        self.flat, self.other = torch.zeros(self.numel), torch.empty(self.numel)
        self.big = torch.zeros(4 * self.numel)
        for _ in range(plan["warmup_steps"]):  # DDP rebuilds its buckets after the first step
            self._synced()
        self.bucket_sizes = ddp_bucket_sizes(self.model)
        if len(self.bucket_sizes) != 1:
            raise ValueError(f"the DDP cost measurement needs one bucket (a bucket cap of at least the gradient's "
                             f"bytes); DDP built {self.bucket_sizes}")
        self.samples: Dict[str, List[float]] = {"synced": [], "nosync": [], "allreduce": [], "during": [],
                                                "during_nosync": [], "copy": []}

    def _synced(self) -> float:
        self.opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        nn.functional.mse_loss(self.model(self.x), self.y).backward()
        self.opt.step()
        return time.perf_counter() - t0

    def _nosync(self) -> float:
        return sum(compute_step(self.model, self.x, self.y, self.opt).values())

    def round(self) -> None:
        """One round of every sample (collective: every rank calls it at the same point)."""
        s = self.samples
        nosync = self._nosync()
        s["nosync"].append(nosync)
        dist.barrier()
        s["synced"].append(self._synced())
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(self.flat)
        s["allreduce"].append(time.perf_counter() - t0)
        dist.barrier()
        work = dist.all_reduce(self.big, async_op=True)
        t = self._nosync()
        if not work.is_completed():
            s["during"].append(t)
            s["during_nosync"].append(nosync)
        work.wait()
        t0 = time.perf_counter()
        self.other.copy_(self.flat)
        s["copy"].append(time.perf_counter() - t0)

    def result(self) -> Dict:
        s = self.samples
        # means: a mean step time carries the mean of each cost, bursts of load included
        med = {k: statistics.fmean(s[k]) if s[k] else float("nan") for k in ("synced", "nosync", "allreduce")}
        slowdown = (statistics.fmean(d / n - 1.0 for d, n in zip(s["during"], s["during_nosync"]))
                    if s["during"] else 0.0)
        return {"bucket_overhead": max(0.0, med["synced"] - med["nosync"] - med["allreduce"]),
                "memory_bandwidth": 8.0 * self.numel / statistics.fmean(s["copy"]),
                "overlap_slowdown": min(10.0, max(0.0, slowdown)),
                "synced_s": med["synced"], "compute_s": med["nosync"], "allreduce_s": med["allreduce"],
                "bucket_sizes": self.bucket_sizes, "samples": {k: list(v) for k, v in s.items()}}


def slot_rounds(total: int, slots: int) -> List[int]:
    """How many of `total` rounds of the once-per-machine measurements run in each of `slots`
    slots (before every case and after the last): as even as whole rounds allow, the remainder
    spread over the slots (floor((k + 1) total / slots) - floor(k total / slots))."""
    return [(k + 1) * total // slots - k * total // slots for k in range(slots)]


REDUCE_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
REDUCE_FRACTIONS = (0.25, 0.5, 1.0)  # of the bucket's elements: the bucket's size and two others


class ReduceDtypeProbe:
    """The backend's all-reduce per dtype on this machine, one machine figure whose rounds are
    interleaved with the cases (:class:`DDPCostProbe`): each :meth:`round`, at each of
    :data:`REDUCE_FRACTIONS` of the bucket's `numel` elements, an in-place ``dist.all_reduce`` in
    fp32 and in each of `dtypes` (fp16, bf16), in turn after a barrier each (side by side: the
    same round sees the same load). gloo on a CPU sums 16-bit elements in software, so its 16-bit
    all-reduce is not the half of fp32's that its bytes say. :meth:`result`: {"elements": [...],
    "fp32_s": [...], "<dtype>_s": [...]} (seconds, per size, means over every round: the mean
    step time a case measures carries the mean of its all-reduce)."""

    def __init__(self, numel: int, dtypes: Sequence[str]):
        self.sizes = [max(1, int(numel * f)) for f in REDUCE_FRACTIONS]
        self.kinds = {"fp32": torch.float32, **{d: REDUCE_DTYPES[d] for d in dtypes}}
        self.bufs = [{name: torch.ones(n, dtype=dt) for name, dt in self.kinds.items()} for n in self.sizes]
        self.samples = [{name: [] for name in self.kinds} for _ in self.sizes]
        for bufs in self.bufs:  # a first all-reduce of each: gloo's buffers and the pages touched
            for name in self.kinds:
                dist.all_reduce(bufs[name])

    def round(self) -> None:
        for bufs, samples in zip(self.bufs, self.samples):
            for name in self.kinds:
                bufs[name].fill_(1.0)  # sums of ones stay finite in fp16
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(bufs[name])
                samples[name].append(time.perf_counter() - t0)

    def result(self) -> Dict:
        out: Dict = {"elements": list(self.sizes)}
        for name in self.kinds:
            out[f"{name}_s"] = [statistics.fmean(sm[name]) for sm in self.samples]
        return out


def reduce_bytes_from_ranks(per_rank: Sequence[Dict], dtype: str) -> float:
    """The remedy's ``reduce_bytes`` for `dtype` (commsim.mitigations.spec): the bytes per element
    of an fp32 all-reduce taking the 16-bit one's time, 4 x t(dtype) / t(fp32), the median over
    the ranks and the sizes of :class:`ReduceDtypeProbe` (the bucket's elements and two smaller
    counts: one size's ratio swings by 20% on a shared machine; the ratio itself hardly moves with
    the size where both all-reduces are bound by their elements). A ratio of two all-reduces
    measured side by side, so that the machine's load drift cancels."""
    return 4.0 * statistics.median(t16 / t32 for r in per_rank for t16, t32 in zip(r[f"{dtype}_s"], r["fp32_s"]))


class ChainProbe:
    """What powerSGD_hook's chaining of its all-reduces costs on this machine, one machine figure
    whose rounds are interleaved with the cases (:class:`DDPCostProbe`): for each (uncompressed,
    P, Q) element counts of `sizes` (the hook's three buffers at a case's rank), three in-place
    all-reduces one after another from the main thread (``sequential``), and the same three chained
    as the hook chains them (``chained``: the first async, the second started inside its future's
    callback, which then blocks on it (``.get_future().wait()``), the third likewise inside the next
    callback; the main thread waits for the last), in turn after a barrier each, `reps` times per
    :meth:`round`, each rep then running the chain twice more (below). :meth:`result`: {"sizes":
    [...], "sequential_s": [...], "chained_s": [...] (medians), "hop_s": [...]}: per size, the
    cost of one hop, the mean over every sample of (aligned - sequential) / 2 (the hook's two
    chained all-reduces), where ``aligned`` is the chain run right after another chain, as every
    training step runs it after the previous step's: a chain right after sequential all-reduces
    runs in a fast mode (median 0.8 ms for three 16 KB all-reduces on 2 ranks, against 4.8 ms right
    after a chain, the mode a step's chain runs in: 4.3-6.1 ms stamped in the steps);
    "hop_after_sequential_s" is the figure from ``chained`` (after the sequential ones),
    reported, not used. A mean, not a median, nor a
    trimmed mean: each hop hands the work to another of gloo's threads and wakes a blocked one; on
    a loaded machine a wake-up now and then waits for a CPU (hops of ~0.1 ms or ~3 ms on a shared
    2-core machine, either mode the median in turn; a trimmed mean drops the long tail that a
    step's mean time carries).

    The same chain twice more per rep, its (start, end) on the local ranks' one monotonic clock:
    ``aligned`` (after a barrier, right after ``chained``), and ``skewed`` (after ``aligned``): one rank in turn (the rep's index modulo the
    world size) first computes for :data:`WAKE_SKEW_S` while the others launch at once and block
    on the first all-reduce, as the ranks arrive at powerSGD_hook's uncompressed all-reduce apart
    (7-26 ms under load): whether a blocked rank's wake-up costs more than the chain's hops
    (:func:`wake_overhead_from_ranks`). "aligned_windows", "skewed_windows" in the result."""

    def __init__(self, sizes: Sequence[Sequence[int]], reps: int, rank: int = 0, world_size: int = 1):
        self.sizes = [list(s) for s in sizes]
        self.reps = reps
        self.rank, self.world_size = rank, world_size
        self.bufs = [[torch.ones(max(1, int(c))) for c in counts] for counts in sizes]
        self.samples = [{"sequential": [], "chained": [], "aligned": [], "skewed": []} for _ in sizes]
        self.spin = torch.randn(128, 128)
        for bufs in self.bufs:  # gloo's buffers and the pages, once
            self._sequential(bufs), self._chained(bufs)

    @staticmethod
    def _sequential(bufs) -> None:
        for b in bufs:
            dist.all_reduce(b)

    @staticmethod
    def _chained(bufs) -> None:
        def then_reduce(buf):
            return lambda fut: dist.all_reduce(buf, async_op=True).get_future().wait()[0]

        fut = dist.all_reduce(bufs[0], async_op=True).get_future()
        for b in bufs[1:]:
            fut = fut.then(then_reduce(b))
        fut.wait()

    def _compute(self, seconds: float) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            torch.mm(self.spin, self.spin)

    def round(self) -> None:
        for bufs, samples in zip(self.bufs, self.samples):
            for rep in range(self.reps):
                for name, fn in (("sequential", self._sequential), ("chained", self._chained)):
                    dist.barrier()
                    t0 = time.perf_counter()
                    fn(bufs)
                    samples[name].append(time.perf_counter() - t0)
                for name in ("aligned", "skewed"):
                    dist.barrier()
                    if name == "skewed" and rep % self.world_size == self.rank:
                        self._compute(WAKE_SKEW_S)
                    t0 = time.monotonic()
                    self._chained(bufs)
                    samples[name].append([t0, time.monotonic()])

    def result(self) -> Dict:
        out: Dict = {"sizes": self.sizes, "sequential_s": [], "chained_s": [], "hop_s": []}
        for bufs, samples in zip(self.bufs, self.samples):
            out["sequential_s"].append(statistics.median(samples["sequential"]))
            out["chained_s"].append(statistics.median(samples["chained"]))
            hops = len(bufs) - 1
            out["hop_s"].append(statistics.fmean([((a[1] - a[0]) - q) / hops
                                                  for a, q in zip(samples["aligned"], samples["sequential"])]))
            out.setdefault("hop_after_sequential_s", []).append(
                statistics.fmean([(c - q) / hops for c, q in zip(samples["chained"], samples["sequential"])]))
        out["aligned_windows"] = [list(sm["aligned"]) for sm in self.samples]
        out["skewed_windows"] = [list(sm["skewed"]) for sm in self.samples]
        return out


CHAIN_ROUNDS = 4  # samples per round: a mean of a bimodal cost needs more samples than a median
WAKE_SKEW_S = 0.010  # the late rank's compute before the skewed chain: the ranks' 7-26 ms skew at the hook, under load


def _spans(windows_per_rank: Sequence[Sequence[Sequence[float]]]) -> List[float]:
    """Per sample, the last rank's end minus the last rank's start (the ranks' (start, end) windows)."""
    return [max(w[1] for w in ws) - max(w[0] for w in ws) for ws in zip(*windows_per_rank)]


def wake_figures(per_rank: Sequence[Dict]) -> Dict:
    """From every rank's :class:`ChainProbe` windows, per size: the mean of the chain's time after
    its last launch, aligned and skewed, and their difference (the blocked rank's wake-up)."""
    out: Dict = {"aligned_s": [], "skewed_s": [], "wake_s": []}
    for k in range(len(per_rank[0]["aligned_windows"])):
        aligned = statistics.fmean(_spans([r["aligned_windows"][k] for r in per_rank]))
        skewed = statistics.fmean(_spans([r["skewed_windows"][k] for r in per_rank]))
        out["aligned_s"].append(aligned)
        out["skewed_s"].append(skewed)
        out["wake_s"].append(skewed - aligned)
    return out


def wake_overhead_from_ranks(per_rank: Sequence[Dict]) -> float:
    """PowerSGD's ``wake_overhead`` (commsim.mitigations.spec): the median over the sizes of
    :func:`wake_figures`' difference, skewed minus aligned means (a mean: the step's mean time
    carries the mean of its wake-ups), never below 0 (a skew that costs nothing beyond the hops)."""
    return max(0.0, statistics.median(wake_figures(per_rank)["wake_s"]))


class SubgroupReduceProbe:
    """What post-local SGD's local steps cost in calls on this machine, one machine figure whose
    rounds are interleaved with the cases (:class:`DDPCostProbe`): on a local step
    ``post_localSGD_hook`` still runs ``default_hooks._allreduce_fut(subgroup, bucket)``, an async
    ``all_reduce`` on the rank's subgroup (here the rank alone: one rank per node) with a
    ``.then`` callback that DDP waits on; nothing is sent, but the call goes through gloo's worker
    thread. Each :meth:`round`, `reps` times: a short compute (:data:`SUBGROUP_COMPUTE_S`: a
    step issues it as its backward ends, with the core busy), then that call on a bucket of
    `numel` elements and its wait, timed (its ``div_`` by the subgroup's size is not: plain DDP
    divides its bucket too, a cost already in ``ddp.costs``). :meth:`result`: {"seconds": the mean
    over every sample, "median_s", "max_s"}. The subgroup is made here (``dist.new_subgroups``:
    collective, every rank constructs the probe at the same point)."""

    def __init__(self, numel: int, group_size: int, reps: int):
        self.group, _ = dist.new_subgroups(group_size=group_size)
        self.buf = torch.zeros(max(1, int(numel)))
        self.reps = reps
        self.spin = torch.randn(128, 128)
        self.times: List[float] = []
        self._call()  # gloo's buffers, once

    def _call(self) -> float:
        t0 = time.perf_counter()
        dist.all_reduce(self.buf, group=self.group, async_op=True).get_future().then(lambda f: f.value()[0]).wait()
        return time.perf_counter() - t0

    def round(self) -> None:
        for _ in range(self.reps):
            t0 = time.monotonic()
            while time.monotonic() - t0 < SUBGROUP_COMPUTE_S:
                torch.mm(self.spin, self.spin)
            self.times.append(self._call())

    def result(self) -> Dict:
        return {"seconds": statistics.fmean(self.times), "median_s": statistics.median(self.times),
                "max_s": max(self.times), "samples": len(self.times)}


SUBGROUP_COMPUTE_S = 0.002
SUBGROUP_REPS = 4


def subgroup_overhead_from_ranks(per_rank: Sequence[Dict]) -> float:
    """Post-local SGD's ``subgroup_overhead`` (commsim.mitigations.spec): the median over the ranks
    of :class:`SubgroupReduceProbe`'s mean."""
    return statistics.median(r["seconds"] for r in per_rank)


def chain_overhead_from_ranks(per_rank: Sequence[Dict]) -> float:
    """PowerSGD's ``chain_overhead`` (commsim.mitigations.spec): the median over the ranks and the
    sizes of :class:`ChainProbe`'s hop cost, never below 0 (a hop's cost is the
    backend's dispatch, not the data's: one figure for the machine)."""
    return max(0.0, statistics.median(h for r in per_rank for h in r["hop_s"]))


class FlattenProbe:
    """The rate of post-local SGD's averaging passes on this machine, one machine figure whose
    rounds are interleaved with the cases (:class:`DDPCostProbe`): what
    ``model_averaging.utils.average_parameters`` does before and after its all-reduce, as it does
    it, on `module`'s parameters (a spare model's): ``torch.cat`` of the parameters into a new
    buffer, the buffer divided by the world size in place, the parameters then made views of it
    (the previous buffer freed once the next holds them), once per :meth:`round` (one unmeasured
    pass first: the parameters' own first buffer). :meth:`result`: {"seconds": median over the
    rounds, "bytes_per_s": 4 e bytes per element moved over it} ("seconds": the mean over the rounds): the cat's buffer is new memory
    each time, its pages faulted in and zeroed as the cat first writes them, which on a CPU VM
    makes this several times slower than a copy between mapped buffers."""

    def __init__(self, module: nn.Module, world_size: int):
        self.params = list(module.parameters())
        self.world_size = world_size
        self.numel = sum(p.numel() for p in self.params)
        self.times: List[float] = []
        self._pass()

    def _pass(self) -> float:
        t0 = time.perf_counter()
        flat = torch.cat([p.data.reshape(-1) for p in self.params])
        flat /= self.world_size
        t = time.perf_counter() - t0
        offset = 0
        for p in self.params:
            p.data = flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        return t

    def round(self) -> None:
        self.times.append(self._pass())

    def result(self) -> Dict:
        mean = statistics.fmean(self.times)  # the mean a mean step time carries
        return {"seconds": mean, "bytes_per_s": 4.0 * self.params[0].element_size() * self.numel / mean}


def measure_flatten_rate(module: nn.Module, world_size: int, rounds: int) -> Dict:
    """:class:`FlattenProbe`'s figures after `rounds` rounds in a row (no collective: one rank)."""
    probe = FlattenProbe(module, world_size)
    for _ in range(rounds):
        probe.round()
    return probe.result()


class FreshWriteProbe:
    """The rate of powerSGD_hook's two writes into new memory on this machine, one machine figure
    whose rounds are interleaved with the cases (:class:`DDPCostProbe`): as the hook enters, the
    error added in place (``input_tensor.add_(error)``, timed: memory the allocator keeps mapped)
    and ``input_tensor.detach().clone()``; after the decompression ``input_tensor_cp -
    input_tensor``, a new tensor that replaces the error (the previous one freed), and the clone
    freed. Both new tensors are bucket-sized (`numel` elements) and allocated anew every step; a
    forward and backward of `module` (a spare model's) before each set of passes, as a step's run
    between the hook's, since the allocator's state after them decides whether the new tensors'
    pages are mapped or faulted in (measured on gloo's 2-core VM, 16.8 MB: the new error 1.2-1.5
    ms back to back, 3.2 ms mean with a forward and backward between, 1.4-6 ms in the steps).

    Each :meth:`round` runs the passes twice: "aligned", every rank at once after a barrier, as
    the ranks run the hook side by side when they arrive together (the writes then contend for
    the memory and the cores: clone and error 8-11 ms in the steps without a slow rank), and
    "alone", one rank at a time in turn while the others wait at a barrier, as a slow rank's hook
    runs after the others' (4-5 ms in the steps with one). Collective: every rank calls it at the
    same point. :meth:`result`: per mode, {"bytes_per_s": the clone's 2 and the error's 3 reads and
    writes of e bytes per element over their mean times (PowerSGD's ``fresh_bw``), "clone_s",
    "error_s", "add_s" (means), "mapped_bytes_per_s" (the add's rate, shown)}."""

    MODES = ("aligned", "alone")

    def __init__(self, module: nn.Module, x, y, numel: int, rank: int = 0, world_size: int = 1):
        self.module, self.x, self.y = module, x, y
        self.rank, self.world_size = rank, world_size
        self.buf = torch.randn(max(1, int(numel)))
        self.error = torch.zeros_like(self.buf)
        self.times = {m: {"add_s": [], "clone_s": [], "error_s": []} for m in self.MODES}
        self._compute()
        self._passes()  # the first buffers' first touch

    def _compute(self) -> None:
        self.module.zero_grad(set_to_none=True)
        nn.functional.mse_loss(self.module(self.x), self.y).backward()

    def _passes(self) -> Tuple[float, float, float]:
        t0 = time.perf_counter()
        self.buf.add_(self.error)
        t1 = time.perf_counter()
        cp = self.buf.detach().clone()
        t2 = time.perf_counter()
        self.error = cp - self.buf
        t3 = time.perf_counter()
        del cp
        return t1 - t0, t2 - t1, t3 - t2

    def _keep(self, mode: str, times) -> None:
        for k, v in zip(("add_s", "clone_s", "error_s"), times):
            self.times[mode][k].append(v)

    def round(self) -> None:
        self._compute()
        dist.barrier()
        self._keep("aligned", self._passes())
        for k in range(self.world_size):
            if k == self.rank:
                self._compute()
            dist.barrier()
            if k == self.rank:
                self._keep("alone", self._passes())
        dist.barrier()

    def result(self) -> Dict:
        n = self.buf.numel() * self.buf.element_size()
        out: Dict = {}
        for mode, times in self.times.items():
            mean = {k: statistics.fmean(v) for k, v in times.items()}
            out[mode] = dict(mean, bytes_per_s=5 * n / (mean["clone_s"] + mean["error_s"]),
                             mapped_bytes_per_s=3 * n / mean["add_s"], samples=len(times["add_s"]))
        return out


def fresh_bw_from_ranks(per_rank: Sequence[Dict], mode: str) -> float:
    """PowerSGD's ``fresh_bw`` (commsim.mitigations.spec): the median over the ranks of
    :class:`FreshWriteProbe`'s rate in `mode` ("aligned": the ranks' hooks side by side, a case
    without a slow rank; "alone": a case with one, whose hooks run apart)."""
    return statistics.median(r[mode]["bytes_per_s"] for r in per_rank)


def powersgd_buffers(module: nn.Module, r: int) -> List[int]:
    """Elements of powerSGD_hook's three all-reduces for `module` at rank `r` (uncompressed, P, Q),
    by torch's rule (a matrix is compressed where (m + n) r' * 2 < m n, r' = min(m, n, r))."""
    unc = p = q = 0
    for t in module.parameters():
        if t.dim() < 2:
            unc += t.numel()
            continue
        m, n = t.shape[0], t.numel() // t.shape[0]
        rr = min(m, n, r)
        if (m + n) * rr * 2 < m * n:
            p, q = p + m * rr, q + n * rr
        else:
            unc += t.numel()
    return [unc, p, q]


def _entered(hook, on_entry):
    """`hook`, calling `on_entry()` first (None: `hook` itself)."""
    if on_entry is None:
        return hook

    def entered(state, bucket):
        on_entry()
        return hook(state, bucket)

    return entered


def _register(model: DDP, case: Case, gpus_per_node: int, on_entry=None):
    """Register the case's hook (calling `on_entry()` as each bucket enters it); returns (hook
    state, model averager or None)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, post_localSGD_hook, powerSGD_hook

    if case.hook == "fp16":
        model.register_comm_hook(None, _entered(default_hooks.fp16_compress_hook, on_entry))
    elif case.hook == "bf16":
        model.register_comm_hook(None, _entered(default_hooks.bf16_compress_hook, on_entry))
    elif case.hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=case.r,
                                            start_powerSGD_iter=POWERSGD_START)
        model.register_comm_hook(state, _entered(powerSGD_hook.powerSGD_hook, on_entry))
        return state, None
    elif case.hook == "localsgd":
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

        # the rank's node is its subgroup (torch's default, new_subgroups(), sizes it by CUDA devices)
        subgroup, _ = dist.new_subgroups(group_size=gpus_per_node)
        state = post_localSGD_hook.PostLocalSGDState(process_group=None, subgroup=subgroup, start_localSGD_iter=0)
        model.register_comm_hook(state, _entered(post_localSGD_hook.post_localSGD_hook, on_entry))
        return state, PeriodicModelAverager(period=case.H, warmup_steps=0)
    return None, None


class _StampedDict(dict):
    """A dict that stamps (time.monotonic) `rec[key]` as an item is set: powerSGD_hook's
    ``state.error_dict[bucket_index] = input_tensor_cp - input_tensor``, right after the new error
    is computed."""

    def __init__(self, items, rec: Dict, key: str):
        super().__init__(items)
        self._rec, self._key = rec, key

    def __setitem__(self, k, v):
        self._rec[self._key] = time.monotonic()
        super().__setitem__(k, v)


class _StampedFuture:
    """A torch future that stamps (time.monotonic) its record when a rank's wait on it returns
    ("waited") and when a callback chained on it starts ("callback"); everything else is the
    future's own."""

    def __init__(self, fut, rec: Dict):
        self._fut, self._rec = fut, rec

    def __getattr__(self, name):
        return getattr(self._fut, name)

    def wait(self):
        out = self._fut.wait()
        self._rec["waited"] = time.monotonic()
        return out

    def then(self, fn):
        rec = self._rec

        def stamped(fut):
            rec["callback"] = time.monotonic()
            return fn(fut)

        return self._fut.then(stamped)


class _StampedWork:
    def __init__(self, work, rec: Dict):
        self._work, self._rec = work, rec

    def __getattr__(self, name):
        return getattr(self._work, name)

    def get_future(self):
        return _StampedFuture(self._work.get_future(), self._rec)


class StampedDist:
    """``torch.distributed`` as a hook's module sees it, with every ``all_reduce`` stamped: its
    launch, and (async) when the rank's wait on it returns or the callback chained on it starts,
    appended to :attr:`log` ({"launch", "waited"?, "callback"?}, time.monotonic: one clock for the
    local ranks). Installed in place of powerSGD_hook's ``dist`` for a case's timed steps
    (:func:`stamped_hook_module`): the hook's own phases seen on every rank, as it runs them."""

    def __init__(self, real):
        self._real = real
        self.log: List[Dict] = []

    def __getattr__(self, name):
        return getattr(self._real, name)

    def all_reduce(self, *args, **kwargs):
        rec = {"launch": time.monotonic()}
        work = self._real.all_reduce(*args, **kwargs)
        self.log.append(rec)
        return _StampedWork(work, rec) if kwargs.get("async_op") else work


def stamped_hook_module(case: "Case"):
    """The torch module whose ``dist`` a case's hook calls (None: nothing to stamp)."""
    if case.hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

        return powerSGD_hook
    if case.hook == "localsgd":
        from torch.distributed.algorithms.model_averaging import utils

        return utils
    return None


def _representable(model: nn.Module, dtype) -> bool:
    return all(torch.equal(p.grad, p.grad.to(dtype).float()) for p in model.parameters())


def _run_case(ctx, module: nn.Module, x, y, case: Case, plan: Dict, stall: Sequence[float]) -> Dict:
    torch.manual_seed(0)
    # gradients as views into the buckets: DDP then copies no gradient into or out of its bucket
    # buffers, a cost commsim's hook model does not carry
    model = DDP(module, gradient_as_bucket_view=True,
                **bucket_kwargs(plan["first_bucket_bytes"], plan["bucket_cap_bytes"]))
    r = case.r if case.hook == "powersgd" else 0
    sampler = HardwareSampler(model, x, y, module[0].in_features, plan["bucket_cap_bytes"], plan["compute_iters"], r)
    for _ in range(plan["compute_iters"]):  # unkept: the pages', the allocator's and the caches' first touch
        sampler.sample()
    sampler.reset()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    evidence: Dict = {}

    averaged: List[bool] = []  # per timed step: did the averager average after it
    checksum: List[float] = []  # per timed step: a few parameters, to see the ranks (dis)agree
    # per timed step, this rank's time.monotonic stamps (step_phases reads them): "go" (after the
    # stall), "ready" (the last gradient accumulated: the bucket ready, arrival at the first
    # sync), "hook" (the comm hook entered), "backward" (backward returned: the hook's future
    # done), "optimizer", "end" (after the averager), "reduces" (the hook's all-reduces, StampedDist)
    stamps: List[Dict] = []
    cur: Dict = {}

    def grad_ready(_param) -> None:
        cur["ready"] = time.monotonic()

    def hook_entered() -> None:
        cur.setdefault("hook", time.monotonic())

    state, averager = _register(model, case, plan["gpus_per_node"], hook_entered)
    handles = [prm.register_post_accumulate_grad_hook(grad_ready) for prm in module.parameters()]
    hooked_module = stamped_hook_module(case)
    stamped = StampedDist(dist) if hooked_module is not None else None

    def step(pause: float) -> float:
        cur.clear()
        if pause:
            time.sleep(pause)
        cur["go"] = time.monotonic()
        if stamped is not None:
            del stamped.log[:]
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()  # returns once DDP's hook futures are done
        cur["backward"] = time.monotonic()
        opt.step()
        cur["optimizer"] = time.monotonic()
        if averager is not None:
            averaged.append(averager.step % case.H == 0)  # it averages when its count is a multiple of H
            averager.average_parameters(model.parameters())
        end = time.monotonic()
        cur["end"] = end
        if stamped is not None:
            cur["reduces"] = [dict(r) for r in stamped.log]
        stamps.append(dict(cur))
        return end

    for _ in range(plan["warmup_steps"]):
        ctx.progress()
        step(0.0)
    # the buckets DDP built (after the first step's rebuild; it never splits a tensor, so at a cap
    # below a layer's bytes they are not the nominal layout): the case's prediction uses them
    built = ddp_bucket_sizes(model)
    del averaged[:]
    # the timed steps in blocks (step_blocks), each after as many hardware samples as it has
    # steps and a common start: the case's compute and rates come from the steps' own time window
    # (on a shared machine no-sync steps of ~12 or ~24 ms, in bursts: samples taken before and
    # after the steps landed in the other mode than the steps now and then)
    del stamps[:]
    if stamped is not None:
        hooked_module.dist = stamped
    if case.hook == "powersgd":  # the new error's assignment, decompress's last pass, stamped
        state.error_dict = _StampedDict(state.error_dict, cur, "error_set")
    blocks = []
    s = 0
    for n in step_blocks(plan["steps"], case):
        ctx.progress()
        for k in range(n):  # each with the stall of the step it prices (a slow rank's compute alone, as in it)
            sampler.sample(stall[s + k])
        start, ends = common_start(), []
        for _ in range(n):
            ends.append(step(stall[s]))
            s += 1
            if averager is not None:
                checksum.append(float(module[0].weight.detach().view(-1)[:64].double().sum()))
        blocks.append({"start": start, "ends": ends})
    if stamped is not None:
        hooked_module.dist = dist
    for h in handles:
        h.remove()
    ctx.progress()
    if case.hook in ("fp16", "bf16", "none"):
        evidence["grads_in_fp16"] = _representable(module, torch.float16)
        evidence["grads_in_bf16"] = _representable(module, torch.bfloat16)
    elif case.hook == "powersgd":
        evidence["p_elements"] = sum(t.numel() for t in state.p_memory_dict.values())
        evidence["q_elements"] = sum(t.numel() for t in state.q_memory_dict.values())
        evidence["iter"] = state.iter
    elif case.hook == "localsgd":
        evidence["averaged"] = averaged
        evidence["checksum"] = checksum
    dist.barrier()
    return {"blocks": blocks, "evidence": evidence, "hardware": sampler.result(), "bucket_sizes": built,
            "stamps": stamps,
            "compute_samples": {k: list(sampler.samples[k]) for k in ("forward_s", "backward_s", "optimizer_s")},
            "products_windows": [list(w) for w in sampler.windows]}


def rank_mitigations(ctx, plan: Dict) -> Dict:
    """validate.launch entry point. plan: parameters, batch_size, first_bucket_bytes, bucket_cap_bytes,
    gpus_per_node, steps, warmup_steps, compute_iters, machine_rounds (the rounds of the
    once-per-machine measurements in all, :class:`DDPCostProbe` and the others, spread over the
    cases by :func:`slot_rounds`), cases (Case fields as dicts), stall (cases x steps x n)."""
    torch.manual_seed(0)
    module = synthetic_model(plan["parameters"])
    width = module[0].in_features
    g = torch.Generator().manual_seed(1 + ctx.rank)
    x = torch.randn(plan["batch_size"], width, generator=g)
    y = torch.randn(plan["batch_size"], width, generator=g)
    ctx.progress()
    # the once-per-machine measurements, each on buffers or a model of its own: DDP's own costs;
    # the backend's 16-bit all-reduce against fp32's (for every fp16/bf16 case); powerSGD_hook's
    # chained all-reduces against sequential ones (at every PowerSGD case's sizes); post-local
    # SGD's flatten and divide (for every post-local SGD case)
    probes: Dict[str, object] = {"ddp_costs": DDPCostProbe(ctx, synthetic_model(plan["parameters"]), x, y, plan)}
    dtypes = sorted({c["hook"] for c in plan["cases"] if c["hook"] in REDUCE_DTYPES})
    if dtypes:
        probes["reduce_dtypes"] = ReduceDtypeProbe(sum(p.numel() for p in module.parameters()), dtypes)
    ranks = sorted({c["r"] for c in plan["cases"] if c["hook"] == "powersgd"})
    if ranks:
        probes["chain"] = ChainProbe([powersgd_buffers(module, r) for r in ranks], CHAIN_ROUNDS, ctx.rank,
                                     ctx.world_size)
        probes["fresh"] = FreshWriteProbe(synthetic_model(plan["parameters"]), x, y,
                                          sum(p.numel() for p in module.parameters()), ctx.rank, ctx.world_size)
    if any(c["hook"] == "localsgd" for c in plan["cases"]):
        probes["flatten"] = FlattenProbe(synthetic_model(plan["parameters"]), ctx.world_size)
        probes["subgroup"] = SubgroupReduceProbe(sum(p.numel() for p in module.parameters()),
                                                 plan["gpus_per_node"], SUBGROUP_REPS)
    # their rounds interleaved with the cases: a share before every case and after the last
    slots = slot_rounds(plan["machine_rounds"], len(plan["cases"]) + 1)

    def machine_rounds(k: int) -> None:
        for _ in range(k):
            ctx.progress()
            for probe in probes.values():
                probe.round()

    cases = []
    for i, fields in enumerate(plan["cases"]):
        machine_rounds(slots[i])
        case = Case(**fields)
        stall = [row[ctx.rank] for row in plan["stall"][i]]
        module = synthetic_model(plan["parameters"])  # a fresh model per case, the same on every rank
        out = _run_case(ctx, module, x, y, case, plan, stall)
        ctx.progress({"case": i, "hardware": out["hardware"]} if ctx.rank == 0 else None)
        cases.append(out)
    machine_rounds(slots[-1])
    figures = {name: probe.result() for name, probe in probes.items()}
    ddp_costs = figures["ddp_costs"]
    reduce_dtypes, chain, flatten, subgroup, fresh = (figures.get(k) for k in ("reduce_dtypes", "chain", "flatten",
                                                                                "subgroup", "fresh"))
    return {"rank": ctx.rank, "cases": cases, "width": width, "ddp_costs": ddp_costs, "reduce_dtypes": reduce_dtypes,
            "chain": chain, "flatten": flatten, "subgroup": subgroup, "fresh": fresh,
            "parameters": sum(p.numel() for p in module.parameters())}


# ---------------------------------------------------------------- the launcher and the prediction


SCENARIO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scenarios",
                        "validate_gloo_2rank.yaml")


def scenario_for(nprocs: int, parameters: float, bucket_cap: float, steps: int):
    """The validator's gloo scenario as `nprocs` one-rank nodes (so post-local SGD's subgroup is the
    rank itself; the links are replaced by the calibration), at `parameters` and `bucket_cap`."""
    from commsim.scenario.loader import load_scenario

    sc = load_scenario(SCENARIO, [f"cluster.nodes={nprocs}", "cluster.gpus_per_node=1",
                                  f"model.parameters={parameters:.0f}", f"ddp.bucket_cap={bucket_cap:.0f}",
                                  # one bucket (POWERSGD_ONE_BUCKET, DDPCostProbe): the first
                                  # is the cap too, and the job builds torch's buckets from both
                                  f"ddp.first_bucket={bucket_cap:.0f}"], steps)
    return replace(sc, name="mitigation_validation")


def case_scenario(scenario, case: Case, slow_stall: float, jitter_cv: float = 0.0):
    """The scenario of a case: with rank 1 stalled `slow_stall` seconds before every step's forward,
    and every rank's compute jittered by `jitter_cv` (the machine's, :func:`compute_jitter_cv`)."""
    from commsim.scenario.spec import Jitter, Stall

    stragglers = (Stall(ranks=(1,), duration=slow_stall, every=1),) if case.slow else ()
    if jitter_cv > 0:
        stragglers += (Jitter(cv=jitter_cv, distribution="gamma"),)
    return replace(scenario, stragglers=stragglers)


def plan_for(scenario, cases: Sequence[Case], slow_stall: float, warmup_steps: int, compute_iters: int,
             machine_rounds: int = MACHINE_ROUNDS) -> Dict:
    """The ranks' plan (see :func:`rank_mitigations`); stalls from the simulator's own draws."""
    from commsim.sim.stragglers import perturbations

    if scenario.model.grad_dtype != "fp32" or scenario.ddp.gradient_accumulation != 1 or not scenario.ddp.overlap:
        raise ValueError("the mitigation job trains fp32, one micro-batch per step, with DDP's overlap")
    if POWERSGD_ONE_BUCKET and any(c.hook == "powersgd" for c in cases) and scenario.ddp.bucket_cap < scenario.model.grad_bytes:
        raise ValueError(f"powerSGD_hook on gloo needs one bucket (POWERSGD_ONE_BUCKET): a bucket cap of at least "
                         f"{scenario.model.grad_bytes:.0f} B, got {scenario.ddp.bucket_cap:.0f} B")
    if scenario.ddp.bucket_cap < scenario.model.grad_bytes:
        raise ValueError(f"the DDP cost measurement (DDPCostProbe) needs one bucket: a bucket cap of at least "
                         f"{scenario.model.grad_bytes:.0f} B, got {scenario.ddp.bucket_cap:.0f} B")
    return {"parameters": int(scenario.model.parameters), "batch_size": scenario.compute.batch_size,
            "first_bucket_bytes": float(scenario.ddp.first_bucket),
            "bucket_cap_bytes": float(scenario.ddp.bucket_cap), "gpus_per_node": scenario.cluster.gpus_per_node,
            "machine_rounds": machine_rounds,
            "steps": scenario.steps, "warmup_steps": max(warmup_steps, POWERSGD_START + 1),
            "compute_iters": compute_iters, "cases": [c.__dict__ for c in cases],
            "stall": [perturbations(case_scenario(scenario, c, slow_stall)).stall.tolist() for c in cases]}


def remedy_text(case: Case, hardware: Dict[str, float], width: int) -> Optional[str]:
    """The case's remedy in commsim's syntax, with the measured hardware rates (None: the baseline)."""
    # whole numbers and microseconds: the syntax's '+' (a combination) must not appear as in 2e+09
    rates = f"mem_bw={hardware['mem_bw']:.0f}B/s"
    if case.hook in ("fp16", "bf16"):
        # the backend's measured 16-bit all-reduce rate, when given (else commsim's bytes model)
        reduce = f":reduce_bytes={hardware['reduce_bytes']:.4f}" if "reduce_bytes" in hardware else ""
        return f"{case.hook}:{rates}{reduce}"
    if case.hook == "powersgd":
        # each product at its own measured rate where sampled (else the three at powersgd_flops)
        products = "".join(f":{k}_flops={hardware[f'{k}_flops']:.0f}" for k in ("mq", "mtp", "pqt")
                           if f"{k}_flops" in hardware)
        return (f"powersgd:r={case.r}:start=0:shapes=square:width={width}:{rates}:flops={hardware['powersgd_flops']:.0f}"
                f"{products}:kernel_overhead={hardware['kernel_overhead'] * 1e6:.4f}us"
                + (f":chain_overhead={hardware['chain_overhead'] * 1e6:.4f}us" if "chain_overhead" in hardware else "")
                + (f":wake_overhead={hardware['wake_overhead'] * 1e6:.4f}us" if "wake_overhead" in hardware else "")
                + (f":fresh_bw={hardware['fresh_bw']:.0f}B/s" if "fresh_bw" in hardware else ""))
    if case.hook == "localsgd":
        # the averager's flatten and divide at their measured rate (else at the cast's)
        bw = hardware.get("flatten_bw", hardware["mem_bw"])
        call = (f":subgroup_overhead={hardware['subgroup_overhead'] * 1e6:.4f}us"
                if "subgroup_overhead" in hardware else "")
        return f"localsgd:H={case.H}:mem_bw={bw:.0f}B/s{call}"
    return None


def with_built_buckets(scenario, sizes: Sequence[float]):
    """The scenario with the bucket layout a case's DDP built (``ddp.bucket_sizes``, bytes in
    all-reduce order; each bucket ready at its bytes' share of the backward, as the synthetic
    model's equal layers make it: ``bucket_ready`` unset), in place of the nominal first bucket
    and caps: DDP never splits a tensor. The sizes must total the model's gradient bytes within
    the scenario schema's tolerance for ``ddp.bucket_sizes``, else ValueError."""
    from commsim.scenario.schema_training import BUCKET_TOTAL_TOLERANCE

    total, grad = float(sum(sizes)), float(scenario.model.grad_bytes)
    if not sizes or abs(total - grad) > BUCKET_TOTAL_TOLERANCE * grad:
        raise ValueError(f"DDP built buckets {list(sizes)} ({total:.0f} B), not the model's {grad:.0f} gradient bytes")
    return replace(scenario, ddp=replace(scenario.ddp, bucket_sizes=tuple(float(b) for b in sizes), bucket_ready=None))


PREDICTED_STEPS = 10  # the prediction runs this many times the case's steps: a jittered mean that settles


def predict(scenario, case: Case, hardware: Dict[str, float], width: int, parameters: int,
            slow_stall: float, jitter_cv: float = 0.0, rows=None) -> Dict[str, float]:
    """commsim's mean step time of the case (and the bytes it all-reduces per step), the scenario
    fed the measured compute, the real parameter count and the case's slow rank. The ranks'
    spread: with `rows` ((samples, ranks) compute factors, :func:`compute_rows`), each simulated
    step's per-rank compute factor is one measured row drawn with the scenario's seed
    (commsim.mitigations.sampled); without, a gamma jitter of `jitter_cv`."""
    from commsim.mitigations.compare import hooked_row
    from commsim.mitigations.hooked import PlainHook, plain_bytes, run_hooked
    from commsim.mitigations.localsgd import whole_periods
    from commsim.mitigations.sampled import sampled_perturbations
    from commsim.mitigations.spec import LocalSGD, parse_mitigations
    from commsim.sim.engine import simulate

    comp = scenario.compute
    fed = replace(case_scenario(scenario, case, slow_stall, 0.0 if rows is not None else jitter_cv),
                  steps=PREDICTED_STEPS * scenario.steps,
                  compute=replace(comp, forward=hardware["forward_s"], backward=hardware["backward_s"],
                                  optimizer=hardware["optimizer_s"]),
                  model=replace(scenario.model, parameters=parameters))
    text = remedy_text(case, hardware, width)
    remedy = parse_mitigations(text)[0] if text is not None else None
    if rows is not None:
        from commsim.mitigations.compare import hook_for

        local = remedy.get(LocalSGD) if remedy is not None else None
        if local is not None:
            fed = whole_periods(fed, local.H)
        run = run_hooked(fed, hook_for(fed, remedy) if remedy is not None else PlainHook(),
                         sampled_perturbations(fed, rows))
        out = {"step_time_s": float(run.step_time.mean()), "bytes_per_step": float(run.reduced_bytes.mean())}
    elif remedy is None:
        return {"step_time_s": float(simulate(fed).step_time.mean()), "bytes_per_step": plain_bytes(fed)}
    else:
        row = hooked_row(fed, remedy)
        out = {"step_time_s": row["step_time_s"]["mean"], "bytes_per_step": row["bytes_per_step"]}
    if remedy is None:
        return out
    if case.hook == "powersgd":
        from commsim.mitigations.compression import powersgd_plan_for
        from commsim.mitigations.spec import PowerSGD

        plan = powersgd_plan_for(fed, parse_mitigations(text)[0].get(PowerSGD))
        out.update({"p_elements": plan.p_elements, "q_elements": plan.q_elements})
    return out


def compute_rows(per_rank_samples: Sequence[Dict[str, List[float]]]):
    """A case's measured compute as commsim.mitigations.sampled needs it: (samples, ranks) factors,
    each rank's forward + backward + optimizer of one :class:`HardwareSampler` sample (taken at the
    same moment on every rank, one before each timed step) over the mean of all of them; and the
    means of forward, backward and optimizer over every rank's samples (the compute the factors
    multiply). Where a rank's core is shared with another process for a run of steps, the ranks'
    samples are ~12 and ~24-37 ms side by side: a step waits for the slow one, and a mean over the
    ranks before the max hides it."""
    from commsim.mitigations.sampled import factor_rows

    totals = [[f + b + o for f, b, o in zip(r["forward_s"], r["backward_s"], r["optimizer_s"])] for r in per_rank_samples]
    k = min(len(t) for t in totals)
    means = {key: float(np.mean([x for r in per_rank_samples for x in r[key][:k]]))
             for key in ("forward_s", "backward_s", "optimizer_s")}
    return factor_rows([t[:k] for t in totals]), means


def measured_steps(blocks: Sequence[Sequence[Dict]]) -> List[float]:
    """Each timed step's time of one case, from every rank's blocks (per rank: [{"start", "ends"}]
    as :func:`_run_case` returns them): within a block, as
    commsim.analysis.validation.measured_summary defines it (from the previous step's last end,
    the block's common start for its first, to this one's last end), the blocks one after another."""
    out: List[float] = []
    for i, block in enumerate(blocks[0]):
        rank_end = np.array([rank[i]["ends"] for rank in blocks]).T  # (steps, ranks)
        ends = rank_end.max(axis=1)
        out += np.diff(np.concatenate(([block["start"]], ends))).tolist()
    return out


def measured_step_time(blocks: Sequence[Sequence[Dict]]) -> float:
    """Mean step time of one case: the mean of :func:`measured_steps`."""
    return float(np.mean(measured_steps(blocks)))


def _stat(xs: Sequence[float]) -> Optional[Dict[str, float]]:
    if not xs:
        return None
    return {"mean_s": float(np.mean(xs)), "median_s": float(np.median(xs)), "n": len(xs)}


def step_phases(stamps: Sequence[Sequence[Dict]]) -> Dict[str, Optional[Dict[str, float]]]:
    """What the per-rank stamps of a case's timed steps (:func:`_run_case`'s "stamps", per rank)
    say, each as mean and median seconds over steps (and ranks, for a rank's own phase):

    - ``ready_skew``: how far apart the ranks' last gradients were accumulated (the arrival at the
      step's first sync), max - min over ranks; ``go_skew``: the same for the steps' starts (after
      the stall: what the previous step's tail left); ``hook_entry``: a rank's bucket-ready to
      hook entry;
    - PowerSGD (its three all-reduces stamped: uncompressed, P, Q): ``work_p`` (hook entry to the
      uncompressed launch: error add, clone, orthogonalize Q, P = M Q), ``reduce_unc`` (the last
      rank's launch to the rank's callback: the all-reduce and the callback's dispatch),
      ``unpack`` (the callback to P's launch), ``reduce_p`` (the last launch of P to the rank's
      wait returning), ``work_q`` (that return to Q's launch: the next callback's dispatch,
      orthogonalize P, Q = M^T P), ``reduce_q``, ``tail`` (Q's wait to backward's return:
      decompress, the error, DDP's finalize), split at the new error's assignment into
      ``decompress`` (P Q^T and the new error) and ``finish`` (the callback's return, the main
      thread's wake in DDP's finalize); ``p_launch_skew``, ``q_launch_skew``: max - min
      over ranks of those launches;
    - post-local SGD on its averaging steps: ``flatten`` (optimizer end to the averager's
      all-reduce launch), ``average_reduce`` (the last launch to the rank's end), ``avg_launch_skew``;
    - every case: ``optimizer`` (backward's return to the optimizer's end)."""
    out: Dict[str, List[float]] = {k: [] for k in (
        "ready_skew", "go_skew", "compute", "sync", "hook_entry", "optimizer", "work_p", "reduce_unc", "unpack", "reduce_p", "work_q",
        "reduce_q", "tail", "decompress", "finish", "p_launch_skew", "q_launch_skew", "flatten", "average_reduce", "avg_launch_skew")}
    for steps in zip(*stamps):
        if all("ready" in st for st in steps):
            out["ready_skew"].append(max(st["ready"] for st in steps) - min(st["ready"] for st in steps))
        out["go_skew"].append(max(st["go"] for st in steps) - min(st["go"] for st in steps))
        for st in steps:
            out["optimizer"].append(st["optimizer"] - st["backward"])
            if "ready" in st:
                out["compute"].append(st["ready"] - st["go"])
                if not st.get("reduces"):
                    out["sync"].append(st["backward"] - max(x["ready"] for x in steps))
            if "hook" in st and "ready" in st:
                out["hook_entry"].append(st["hook"] - st["ready"])
        reds = [st.get("reduces") or [] for st in steps]
        if all(len(r) == 3 for r in reds) and all("hook" in st for st in steps):  # PowerSGD's three
            last = [max(r[k]["launch"] for r in reds) for k in range(3)]
            out["p_launch_skew"].append(max(r[1]["launch"] for r in reds) - min(r[1]["launch"] for r in reds))
            out["q_launch_skew"].append(max(r[2]["launch"] for r in reds) - min(r[2]["launch"] for r in reds))
            for st, (u, pp, q) in zip(steps, reds):
                out["work_p"].append(u["launch"] - st["hook"])
                if "callback" in u:
                    out["reduce_unc"].append(u["callback"] - last[0])
                    out["unpack"].append(pp["launch"] - u["callback"])
                if "waited" in pp:
                    out["reduce_p"].append(pp["waited"] - last[1])
                    out["work_q"].append(q["launch"] - pp["waited"])
                if "waited" in q:
                    out["reduce_q"].append(q["waited"] - last[2])
                    out["tail"].append(st["backward"] - q["waited"])
                    if "error_set" in st:
                        out["decompress"].append(st["error_set"] - q["waited"])
                        out["finish"].append(st["backward"] - st["error_set"])
        elif all(len(r) == 1 for r in reds):  # the averager's one all-reduce
            last = max(r[0]["launch"] for r in reds)
            out["avg_launch_skew"].append(last - min(r[0]["launch"] for r in reds))
            for st, r in zip(steps, reds):
                out["flatten"].append(r[0]["launch"] - st["optimizer"])
                out["average_reduce"].append(st["end"] - last)
    return {k: _stat(v) for k, v in out.items()}


def products_overlap(windows: Sequence[Sequence[Sequence[float]]]) -> Optional[float]:
    """How much of the ranks' :class:`HardwareSampler` products ran with every rank in them at
    once: over the samples, the time all ranks' (start, end) windows overlap over the mean
    window's length (1: side by side, as powerSGD_hook's products run in a step without a slow
    rank; 0: one rank at a time). None without samples."""
    if not windows or not windows[0]:
        return None
    both = total = 0.0
    for ws in zip(*windows):
        both += max(0.0, min(w[1] for w in ws) - max(w[0] for w in ws))
        total += sum(w[1] - w[0] for w in ws) / len(ws)
    return both / total if total > 0 else None


def bucket_overhead_from_ranks(per_rank: Sequence[Dict]) -> float:
    """DDP's own per-step cost from every rank's :class:`DDPCostProbe` samples: per round, a
    rank's synced step minus the *slowest* rank's no-sync compute of that round minus the rank's
    all-reduce (a synced step starts after a barrier and waits for the slowest rank's gradients:
    that wait is the ranks' compute jitter, modeled as such by :func:`compute_jitter_cv`, not
    DDP's cost), the median over ranks, then the mean over rounds; never below 0."""
    rounds = len(per_rank[0]["samples"]["synced"])
    own = []
    for i in range(rounds):
        slowest = max(r["samples"]["nosync"][i] for r in per_rank)
        own.append(statistics.median(r["samples"]["synced"][i] - slowest - r["samples"]["allreduce"][i]
                                     for r in per_rank))
    return max(0.0, statistics.fmean(own))  # the mean over rounds: a mean step carries the mean cost


def compute_jitter_cv(per_rank: Sequence[Dict]) -> float:
    """The coefficient of variation of a rank's step compute about the other ranks' in the same
    step, as commsim's ``Jitter`` straggler draws it (independently per rank and step), from the
    no-sync steps of :class:`DDPCostProbe`: per round, each rank's deviation from the round's mean
    over the ranks, relative to that mean; sigma from the median absolute deviation over every
    round and rank, 1.4826 MAD (a normal's) / sqrt(1 - 1/n) (a deviation from the mean of n
    draws). Within a round, so that the machine's drift between rounds (the rounds are spread over
    the whole job) is not counted; a median, so that a round one burst of load stalled is not
    either. 0 with one rank (nothing to compare; one rank waits for nobody)."""
    n = len(per_rank)
    if n < 2:
        return 0.0
    dev = []
    for xs in zip(*(r["samples"]["nosync"] for r in per_rank)):
        mean = sum(xs) / n
        dev += [abs(x / mean - 1.0) for x in xs]
    if not dev:
        return 0.0
    return float(1.4826 * statistics.median(dev) / (1.0 - 1.0 / n) ** 0.5)


def ddp_costs_from_ranks(per_rank: Sequence[Dict]) -> "DDPCosts":
    """The scenario's ``ddp.costs`` from every rank's :class:`DDPCostProbe`: the per-bucket
    cost of :func:`bucket_overhead_from_ranks` (the job runs one bucket), the memory bandwidth and
    overlap slowdown as medians over the ranks; gradients as bucket views, as the job's DDP runs."""
    from commsim.scenario.spec import DDPCosts

    med = {k: statistics.median(r[k] for r in per_rank) for k in ("memory_bandwidth", "overlap_slowdown")}
    return DDPCosts(bucket_overhead=bucket_overhead_from_ranks(per_rank), memory_bandwidth=med["memory_bandwidth"],
                    gradient_as_bucket_view=True, overlap_slowdown=med["overlap_slowdown"])


def run_cases(scenario, calibration, cases: Sequence[Case], nprocs: int, slow_stall: float,
              warmup_steps: int = 3, compute_iters: int = 5, timeout_s: float = 300.0, echo=print,
              machine_rounds: int = MACHINE_ROUNDS, ddp_costs=None) -> Dict:
    """Run every case on `nprocs` local gloo ranks and compare with commsim's prediction.

    DDP's own costs are those the job measures once for the machine (:class:`DDPCostProbe`),
    unless `ddp_costs` (a :class:`commsim.scenario.spec.DDPCosts`, say from ``commsim calibrate
    --ddp-fit``) is given; either way the same for every case.

    Returns {"width", "parameters", "slow_stall_s", "ddp_costs" (the costs every prediction used,
    and what the job measured: per rank, with the all-reduce it timed and the calibration's time for
    it), "reduce_dtypes" ({"measured": per rank, :class:`ReduceDtypeProbe`; "reduce_bytes":
    {dtype: the remedy's reduce_bytes}}), "cases": [{case, remedy, slow_rank, measured_s,
    predicted_s, error, evidence (per rank), predicted, hardware}], "median_abs_error"}. Raises validate.launch.LaunchError if a rank dies
    or hangs."""
    from commsim.collectives.kernels import algorithm_for, make_kernel
    from commsim.sim.links import scenario_fabric
    from validate.launch import launch

    if scenario.world_size != nprocs:
        raise ValueError(f"the scenario has {scenario.world_size} ranks, --nprocs is {nprocs}")
    plan = plan_for(scenario, cases, slow_stall, warmup_steps, compute_iters, machine_rounds)
    width, _ = layer_shape(plan["parameters"])
    echo(f"# mitigations on {nprocs} x gloo: {plan['parameters']:.3g} parameters (width {width}), "
         f"bucket cap {plan['bucket_cap_bytes']:.3g} B, {len(cases)} cases x {scenario.steps} steps")
    results = launch(rank_mitigations, nprocs, "gloo", timeout_s, args=(plan,))
    parameters = results[0]["parameters"]
    measured_costs = [r["ddp_costs"] for r in results]
    costs = ddp_costs if ddp_costs is not None else ddp_costs_from_ranks(measured_costs)
    sc = replace(scenario, calibration=calibration, ddp=replace(scenario.ddp, costs=costs),
                 model=replace(scenario.model, parameters=parameters))
    grad_bytes = float(sc.model.grad_bytes)
    calibrated = make_kernel(algorithm_for("all_reduce", sc.collective.algorithm), scenario_fabric(sc), grad_bytes,
                             sc.collective.model).uniform_time()
    jitter = compute_jitter_cv(measured_costs)
    costs_report = {"used": costs.__dict__.copy(), "measured": measured_costs, "jitter_cv": jitter,
                    "allreduce_measured_s": statistics.median(r["allreduce_s"] for r in measured_costs),
                    "allreduce_calibrated_s": float(calibrated)}
    reduce_dtypes = [r["reduce_dtypes"] for r in results]
    reduce_bytes = ({d: reduce_bytes_from_ranks(reduce_dtypes, d) for d in REDUCE_DTYPES if f"{d}_s" in reduce_dtypes[0]}
                    if reduce_dtypes[0] else {})
    reduce_report = {"measured": reduce_dtypes, "reduce_bytes": reduce_bytes}
    chains = [r["chain"] for r in results]
    chain = chain_overhead_from_ranks(chains) if chains[0] else None
    wake = wake_overhead_from_ranks(chains) if chains[0] else None
    chain_report = {"measured": chains, "chain_overhead": chain, "wake_overhead": wake,
                    "wake": wake_figures(chains) if chains[0] else None}
    flattens = [r["flatten"] for r in results]
    flatten_bw = statistics.median(f["bytes_per_s"] for f in flattens) if flattens[0] else None
    flatten_report = {"measured": flattens, "bytes_per_s": flatten_bw}
    subgroups = [r["subgroup"] for r in results]
    subgroup = subgroup_overhead_from_ranks(subgroups) if subgroups[0] else None
    subgroup_report = {"measured": subgroups, "subgroup_overhead": subgroup}
    freshes = [r["fresh"] for r in results]
    fresh_bw = {m: fresh_bw_from_ranks(freshes, m) for m in FreshWriteProbe.MODES} if freshes[0] else None
    fresh_report = {"measured": freshes, "fresh_bw": fresh_bw}
    rows = []
    base = sc
    for i, case in enumerate(cases):
        per_rank = [r["cases"][i] for r in results]
        hardware = {k: statistics.median(c["hardware"][k] for c in per_rank) for k in per_rank[0]["hardware"]}
        factors, compute_means = compute_rows([c["compute_samples"] for c in per_rank])
        hardware.update(compute_means)
        built = [c["bucket_sizes"] for c in per_rank]
        if any(b != built[0] for b in built):
            raise ValueError(f"case {case.name}: the ranks' DDP built different buckets: {built}")
        sc = with_built_buckets(base, built[0])  # the case's prediction: the buckets its DDP built
        blocks = [c["blocks"] for c in per_rank]
        measured = measured_step_time(blocks)
        if case.hook in reduce_bytes:  # measured once for the machine, the same in every case
            bytes_model = predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors)  # without the rate
            hardware = dict(hardware, reduce_bytes=reduce_bytes[case.hook])
            pred = dict(predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors),
                        bytes_model_step_time_s=bytes_model["step_time_s"])
        elif case.hook == "localsgd" and flatten_bw is not None:  # measured once for the machine too
            copy_rate = predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors)
            hardware = dict(hardware, flatten_bw=flatten_bw)
            uncalled = predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors)
            if subgroup is not None:  # the local steps' subgroup calls, measured once for the machine too
                hardware = dict(hardware, subgroup_overhead=subgroup)
            pred = dict(predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors),
                        cast_rate_step_time_s=copy_rate["step_time_s"],
                        no_subgroup_call_step_time_s=uncalled["step_time_s"])
        elif case.hook == "powersgd" and chain is not None:  # measured once for the machine too
            unchained = predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors)
            equal = {k: v for k, v in hardware.items() if k not in ("mq_flops", "mtp_flops", "pqt_flops")}
            hardware = dict(hardware, chain_overhead=chain)
            equal_products = predict(sc, case, dict(equal, chain_overhead=chain), width, parameters, slow_stall,
                                     jitter, factors)
            unwoken = predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors)
            if wake:  # the blocked rank's wake-up, measured once for the machine too, where the probe shows one
                hardware = dict(hardware, wake_overhead=wake)
            mapped = predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors)
            if fresh_bw is not None:  # the clone and the new error into new memory, once for the machine too
                hardware = dict(hardware, fresh_bw=fresh_bw["alone" if case.slow else "aligned"])
            pred = dict(predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors),
                        mapped_writes_step_time_s=mapped["step_time_s"],
                        unchained_step_time_s=unchained["step_time_s"],
                        equal_products_step_time_s=equal_products["step_time_s"],
                        unwoken_step_time_s=unwoken["step_time_s"])
        else:
            pred = predict(sc, case, hardware, width, parameters, slow_stall, jitter, factors)
        # for comparison, the former parametric spread: a gamma jitter of the machine's cv about the ranks' mean
        pred["jitter_model_step_time_s"] = predict(sc, case, hardware, width, parameters, slow_stall, jitter)["step_time_s"]
        rows.append({"case": case.name, "remedy": remedy_text(case, hardware, width) or "baseline",
                     "slow_rank": case.slow, "measured_s": measured, "predicted_s": pred["step_time_s"],
                     "error": (pred["step_time_s"] - measured) / measured,
                     "measured_steps_s": measured_steps(blocks),
                     "evidence": [c["evidence"] for c in per_rank], "predicted": pred, "hardware": hardware,
                     "compute_samples_s": [c["compute_samples"] for c in per_rank],
                     "products_overlap": products_overlap([c["products_windows"] for c in per_rank]),
                     "phases": step_phases([c["stamps"] for c in per_rank]),
                     "stamps": [c["stamps"] for c in per_rank], "compute_rows": factors.tolist(),
                     "ddp_buckets": {"built_bytes": built[0], "predicted_with": list(sc.gradient_buckets()),
                                     "nominal_bytes": list(base.gradient_buckets())}})
    return {"width": width, "parameters": parameters, "slow_stall_s": slow_stall, "ddp_costs": costs_report,
            "reduce_dtypes": reduce_report, "chain": chain_report, "subgroup": subgroup_report,
            "flatten": flatten_report, "fresh": fresh_report, "cases": rows, "median_abs_error": float(np.median([abs(r["error"]) for r in rows]))}

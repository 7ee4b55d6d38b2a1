"""The mitigation job's once-per-machine measurements (the probes, run on the ranks; torch only) and
their reducers over the ranks' results (``*_from_ranks``, on the launcher's side). PowerSGD's
own probes are in :mod:`validate.mitigation_powersgd_probes`.

Once for the machine, never per case, the job measures DDP's own costs
(:class:`DDPCostProbe`: the per-step cost of a synced step beyond its compute and its all-reduce,
the memory bandwidth of a copy, compute slowed by an all-reduce in flight, and the ranks' compute
jitter about each other, :func:`~validate.mitigation_measured.compute_jitter_cv`, now only
reported: the predictions draw the ranks' spread from the case's own per-rank samples,
:func:`~validate.mitigation_measured.compute_rows`); every case's scenario carries them as
``ddp.costs``. Their rounds (``machine_rounds`` in all) are interleaved with the cases
(:func:`~validate.mitigation_job.slot_rounds`: a share before every case and after the last), so
that a burst of a shared machine's load falls on both, and their figures are means over the rounds
(a mean step time carries the mean of each cost, its long tail of stalled rounds included: a
median or a trimmed mean of a skewed or bimodal cost falls short of it). The same rounds measure

- the backend's all-reduce per dtype (:class:`ReduceDtypeProbe`: fp32 and fp16, bf16 where a
  case runs it, at the bucket's elements and two smaller counts, side by side): gloo on a CPU sums
  16-bit elements in software, and its fp16 all-reduce takes about fp32's time, not half. The
  fp16/bf16 cases' remedy carries the measured ratio as ``reduce_bytes``
  (:func:`reduce_bytes_from_ranks`); each such row also reports ``bytes_model_step_time_s``, the
  prediction without it (commsim's default: half the bytes, half the time);
- PowerSGD's chain, a late rank's wake-up and its writes into new memory
  (:mod:`validate.mitigation_powersgd_probes`);
- the per-call cost of post-local SGD's subgroup all-reduce on a local step
  (:class:`SubgroupReduceProbe`: the async all-reduce and callback that ``post_localSGD_hook``
  issues on the rank's one-rank subgroup, after a short compute): the post-local SGD cases' remedy
  carries it as ``subgroup_overhead``; each such row also reports
  ``no_subgroup_call_step_time_s``, the prediction without it;
- the rate of post-local SGD's averaging passes (:class:`FlattenProbe`: the averager's
  ``torch.cat`` of the parameters into a new buffer and its in-place division, as
  ``average_parameters`` runs them): the post-local SGD cases' remedy carries it as ``mem_bw``;
  each such row also reports ``cast_rate_step_time_s``, the prediction at the cast's rate.
"""

from __future__ import annotations

import statistics
import time
from typing import Dict, List, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from validate.ddp_job import bucket_kwargs, compute_step, ddp_bucket_sizes


class DDPCostProbe:
    """DDP's own costs on this machine (what ``scenario.ddp.costs`` needs), one machine figure
    whose rounds are interleaved with the cases (:func:`~validate.mitigation_job.slot_rounds`: a share of them
    before every case and after the last, so that a burst of a shared machine's load falls on both the cases
    and these rounds, and the figure is still the machine's, never a case's). On plain DDP with the cases' one
    bucket (gradients as bucket views; the bucket DDP built is checked, since DDP never splits a tensor), each
    :meth:`round`:

    - the step under ``no_sync`` (forward, backward, optimizer), a synced step and an in-place
      ``dist.all_reduce`` of the bucket's bytes, in turn after a barrier each: with one bucket its
      all-reduce starts after the whole backward, so nothing overlaps and the synced step minus the
      other two is what DDP adds per step (the autograd hooks, the bucket's division by the world
      size, its future, the reducer's finalize; the job's figure is
      :func:`~validate.mitigation_measured.bucket_overhead_from_ranks`, the mean over every round);
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

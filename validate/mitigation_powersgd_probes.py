"""The mitigation job's once-per-machine measurements of what powerSGD_hook costs beyond its
products (the probes, run on the ranks; torch only), their reducers over the ranks' results
(``*_from_ranks``, :func:`wake_figures`, on the launcher's side), and the sizes of the hook's
three all-reduces (:func:`powersgd_buffers`). Their rounds are those of
:mod:`validate.mitigation_probes`' probes, interleaved with the cases:

- what powerSGD_hook's chaining of its all-reduces costs (:class:`ChainProbe`: the hook starts its
  P and Q all-reduces inside the callbacks of the all-reduce before them, which then block on
  them; on gloo each such hop costs milliseconds beyond the all-reduce): the PowerSGD cases'
  remedy carries it as ``chain_overhead`` (:func:`chain_overhead_from_ranks`); each such row also
  reports ``unchained_step_time_s``, the prediction without it; the same probe runs the chain with
  one rank arriving :data:`WAKE_SKEW_S` late, the others blocked on the first all-reduce
  meanwhile, against the chain run aligned, both timed from the last rank's launch (the remedy's
  ``wake_overhead`` where the skewed chain is slower, :func:`wake_overhead_from_ranks`;
  ``unwoken_step_time_s``: without it);
- the rate of powerSGD_hook's two writes into new memory (:class:`FreshWriteProbe`: the clone of
  the bucket as the hook enters and the new error after the decompression, each a bucket-sized
  tensor allocated anew every step, after a forward and backward, the ranks side by side and
  one at a time): the PowerSGD cases' remedy carries it as ``fresh_bw`` (side by side without a
  slow rank, one at a time with one, :func:`fresh_bw_from_ranks`); each such row also reports
  ``mapped_writes_step_time_s``, the prediction with those writes at ``mem_bw``.
"""

from __future__ import annotations

import statistics
import time
from typing import Dict, List, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import nn


class ChainProbe:
    """What powerSGD_hook's chaining of its all-reduces costs on this machine, one machine figure
    whose rounds are interleaved with the cases (:class:`~validate.mitigation_probes.DDPCostProbe`): for each
    (uncompressed, P, Q) element counts of `sizes` (the hook's three buffers at a case's rank), three in-place
    all-reduces one after another from the main thread (``sequential``), and the same three chained as the
    hook chains them (``chained``: the first async, the second started inside its future's callback, which
    then blocks on it (``.get_future().wait()``), the third likewise inside the next callback; the main thread
    waits for the last), in turn after a barrier each, `reps` times per :meth:`round`, each rep then running
    the chain twice more (below). :meth:`result`: {"sizes": [...], "sequential_s": [...], "chained_s": [...]
    (medians), "hop_s": [...]}: per size, the cost of one hop, the mean over every sample of (aligned -
    sequential) / 2 (the hook's two chained all-reduces), where ``aligned`` is the chain run right after
    another chain, as every training step runs it after the previous step's: a chain right after sequential
    all-reduces runs in a fast mode (median 0.8 ms for three 16 KB all-reduces on 2 ranks, against 4.8 ms
    right after a chain, the mode a step's chain runs in: 4.3-6.1 ms stamped in the steps);
    "hop_after_sequential_s" is the figure from ``chained`` (after the sequential ones), reported, not used. A
    mean, not a median, nor a trimmed mean: each hop hands the work to another of gloo's threads and wakes a
    blocked one; on a loaded machine a wake-up now and then waits for a CPU (hops of ~0.1 ms or ~3 ms on a
    shared 2-core machine, either mode the median in turn; a trimmed mean drops the long tail that a step's
    mean time carries).

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


def chain_overhead_from_ranks(per_rank: Sequence[Dict]) -> float:
    """PowerSGD's ``chain_overhead`` (commsim.mitigations.spec): the median over the ranks and the
    sizes of :class:`ChainProbe`'s hop cost, never below 0 (a hop's cost is the
    backend's dispatch, not the data's: one figure for the machine)."""
    return max(0.0, statistics.median(h for r in per_rank for h in r["hop_s"]))


class FreshWriteProbe:
    """The rate of powerSGD_hook's two writes into new memory on this machine, one machine figure
    whose rounds are interleaved with the cases (:class:`~validate.mitigation_probes.DDPCostProbe`): as the
    hook enters, the error added in place (``input_tensor.add_(error)``, timed: memory the allocator keeps
    mapped) and ``input_tensor.detach().clone()``; after the decompression ``input_tensor_cp - input_tensor``,
    a new tensor that replaces the error (the previous one freed), and the clone freed. Both new tensors are
    bucket-sized (`numel` elements) and allocated anew every step; a forward and backward of `module` (a spare
    model's) before each set of passes, as a step's run between the hook's, since the allocator's state after
    them decides whether the new tensors' pages are mapped or faulted in (measured on gloo's 2-core VM, 16.8
    MB: the new error 1.2-1.5 ms back to back, 3.2 ms mean with a forward and backward between, 1.4-6 ms in
    the steps).

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

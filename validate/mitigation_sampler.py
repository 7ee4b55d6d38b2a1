"""A case's hardware as commsim's compute and hook models need it, sampled on each rank in the time
window of the case's own timed steps (:class:`HardwareSampler`: forward, backward under
``no_sync``, optimizer; the memory bandwidth of a cast, the rate of PowerSGD's products, the cost
of a small op), one sample per step before each block of steps
(:func:`~validate.mitigation_job.step_blocks`). Torch only; the launcher reads the samples
(:func:`~validate.mitigation_measured.compute_rows`).
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Dict, List

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from validate.ddp_job import compute_step


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
    (:func:`~validate.mitigation_job._run_case`: one before each step) and a burst of a shared machine's load
    falls on both: a forward, backward without all-reduce (DDP's ``no_sync``) and optimizer step; an fp32 ->
    fp16 cast of a bucket (its memory bandwidth: bytes read + written per second); 100 small ops (the cost of
    one: PowerSGD runs many); with `r`, powerSGD_hook's three products at rank r, as the hook calls them
    (``bmm(M, Q, out=P)``, ``bmm(M^T, P, out=Q)``, ``bmm(P, Q^T, out=M)`` on views of flat buffers; on a CPU
    these skinny products run far below a square matmul's rate, the transposed one most). The square matmul
    rate (``flops``, shown, not used by the predictions) once, at construction. :meth:`result`: their
    means."""

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

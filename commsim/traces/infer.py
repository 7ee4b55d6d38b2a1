"""A scenario from a job's timeline: compute, buckets, links and the stragglers the trace shows.

From :class:`commsim.traces.steps.Timeline` (per step s and rank r: forward F, backward B,
optimizer O, as the simulator splits a step):

- **compute**: the means of F, B and O over the healthy ranks and every step but the ones
  with a stall and the first (the measured step times run from the first step's end, so its
  compute is in none of them; its forward also starts at its own forward, not a step's end);
- **slow_rank**: a rank whose median compute F + B + O is more than SLOW_MIN above the healthy
  level (the median over the faster half of the ranks) and whose step-by-step excess over the
  other ranks' median is significant: its median more than SLOW_Z standard errors above zero
  (1.2533 sigma / sqrt(steps), sigma from the MAD); its factor is its mean compute over the
  healthy mean;
- **stall**: a forward that exceeds its rank's median by more than STALL_SIGMAS robust standard
  deviations and STALL_MIN_SHARE of the median compute (a pause before the step); the same
  steps on several ranks become one entry; steps at a fixed interval give ``every``, else a
  ``probability`` when longer than the compute itself (shorter random pauses are the machine's
  noise and stay in the jitter); the duration is the median excess;
- **jitter**: what a step waits for is its slowest rank, so the jitter's cv is fitted to that:
  the cv of commsim's lognormal whose expected maximum over n independent draws equals the
  measured mean, over steps, of the slowest rank's compute relative to its own mean (stalls
  excluded; :func:`cv_for_expected_max`); kept when above JITTER_MIN. The plain spread (the std
  of each rank's compute around its mean) is reported beside it: the two differ when the
  ranks' noise is not independent (ranks sharing a machine's cores slow each other down);
- **buckets**: DDP's measured bucket sizes (in all-reduce order) become ``ddp.bucket_sizes``
  and the share of the backward done when each was issued (the median over steps and ranks,
  clipped into (0, 1] and made non-decreasing) ``ddp.bucket_ready``: DDP issues its buckets
  unevenly (as its autograd hooks fire), which commsim's default layout, a uniform gradient
  rate, cannot say; ``first_bucket`` (the first) and ``bucket_cap`` (the rest's mean: the same
  count and total) summarize the layout in the header; ``parameters`` = total bytes / gradient
  element size;
- **links**: each bucket's all-reduce time as the simulator counts it (from when it could
  start, its last rank's issue or the previous bucket's end, whichever is later, to its last
  rank's end), averaged over steps, fitted with the ring model T(S) = 2(n-1) alpha +
  2(n-1)/n S/B by least squares on the times (so that the model's total over the buckets is
  the measured total, :func:`_fit_link`); with a single bucket size the latency is commsim's
  default and the bandwidth reproduces the measured time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from commsim.network.costs import ring_allreduce_time
from commsim.scenario.schema import DEFAULT_INTRA_NODE_LATENCY
from commsim.traces.errors import TraceError
from commsim.traces.steps import Timeline

SLOW_MIN = 0.10
SLOW_Z = 3.0
STALL_SIGMAS = 6.0
STALL_MIN_SHARE = 0.2
STALL_RANDOM_SHARE = 1.0
JITTER_MIN = 0.01
GRAD_DTYPES = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass
class Inferred:
    """What the trace says, in the simulator's terms, and the notes for the file's header."""

    world_size: int
    nodes: int
    forward: float
    backward: float
    optimizer: float
    grad_dtype: str
    parameters: int
    first_bucket: int
    bucket_cap: int
    alpha: float
    bandwidth: float
    link_note: str
    slow: List[Tuple[int, float]] = field(default_factory=list)
    stalls: List[Dict[str, Any]] = field(default_factory=list)
    jitter_cv: float = 0.0
    spread_cv: float = 0.0  # the std of each rank's compute around its mean
    slowest_ratio: float = 1.0  # mean over steps of the slowest rank's compute / its mean
    measured_step_time: float = 0.0
    comm_samples: List[Tuple[float, float]] = field(default_factory=list)  # (bytes, seconds), times > 0
    steps: int = 0
    buckets: int = 0
    ready_fraction: List[float] = field(default_factory=list)  # measured, per bucket
    bucket_sizes: List[int] = field(default_factory=list)  # bytes, in all-reduce order
    bucket_ready: List[float] = field(default_factory=list)  # the scenario's: measured, in (0, 1], non-decreasing
    model_fraction: List[float] = field(default_factory=list)  # commsim's, per bucket
    notes: List[str] = field(default_factory=list)


def _robust_sigma(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    if x.size == 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(x - np.median(x))))


def service_times(tl: Timeline) -> np.ndarray:
    """(S, B) each bucket's all-reduce time as the simulator counts it (see module docstring)."""
    end = np.nanmax(tl.bucket_end, axis=2)  # (S, B) the last rank's end
    ready = np.nanmax(tl.bucket_issue, axis=2)  # (S, B) the last rank's issue
    prev = np.concatenate([np.full((tl.steps, 1), -np.inf), end[:, :-1]], axis=1)
    return end - np.maximum(ready, prev)


def infer(tl: Timeline, hosts: List[Optional[str]], source: str = "(traces)") -> Inferred:
    """The scenario's numbers from a timeline (`hosts`: each rank's host name, None unknown;
    `source`: the traces' names, which a TraceError about the whole job starts with)."""
    n, S = tl.world_size, tl.steps
    if S < 2:
        raise TraceError(source, None, f"only {S} complete step(s) on every rank: a step time needs two or more "
                                           "(record more steps)")
    notes: List[str] = []
    F, B, O = tl.forward, tl.backward, tl.optimizer
    C = F + B + O
    # -- stalls ------------------------------------------------------------------------------
    f_med = np.median(F[1:], axis=0) if S > 2 else np.median(F, axis=0)
    excess = F - f_med
    sigma_f = _robust_sigma((F[1:] if S > 2 else F) - f_med)
    limit = max(STALL_SIGMAS * sigma_f, STALL_MIN_SHARE * float(np.median(C)))
    stalled = excess > limit
    stalled[0] = False  # the first step's forward is measured differently
    stalls = _stall_entries(stalled, excess, tl.step_numbers, float(np.median(C)))
    kept = np.zeros_like(stalled)
    for st in stalls:
        kept[np.ix_(st["rows"], st["ranks"])] = True
    stalled = kept  # pauses that are no stall entry stay in the compute they interrupted
    # -- slow ranks --------------------------------------------------------------------------
    clean = np.where(stalled, np.nan, C)
    m = np.nanmedian(clean, axis=0)
    healthy_level = float(np.median(np.sort(m)[: max(1, math.ceil(n / 2))]))
    slow = []
    for r in range(n):
        others = np.delete(clean, r, axis=1)
        rows = np.isfinite(clean[:, r]) & np.isfinite(others).any(axis=1)
        if n < 2 or not rows.any():
            continue
        d = clean[rows, r] - np.nanmedian(others[rows], axis=1)
        # the median step-by-step excess over the others, against its standard error
        # (1.2533 sigma / sqrt(S) for a median, sigma from the MAD)
        spread = 1.4826 * float(np.median(np.abs(d - np.median(d))))
        excess = float(np.median(d))
        z = excess / (1.2533 * spread / np.sqrt(d.size)) if spread > 0 else (np.inf if excess > 0 else 0.0)
        if m[r] > healthy_level * (1 + SLOW_MIN) and z > SLOW_Z:
            slow.append(r)
    healthy = [r for r in range(n) if r not in slow] or list(range(n))
    h_mask = np.zeros((S, n), dtype=bool)
    h_mask[:, healthy] = True
    ok = h_mask & ~stalled
    if S > 2:  # the measured step times run from step 0's end: its own compute is in none of them
        ok[0] = False
    forward = float(F[ok].mean())
    backward = float(B[ok].mean())
    optimizer = float(max(O[ok].mean(), 0.0))
    healthy_mean = forward + backward + optimizer
    slow_entries = []
    for r in slow:
        rows = ~stalled[:, r]
        rows[0] = S <= 2
        factor = float(np.nanmean(C[rows, r]) / healthy_mean) if rows.any() else 1.0
        slow_entries.append((r, factor))
    # -- jitter ------------------------------------------------------------------------------
    per_rank = np.where(stalled, np.nan, C)
    rel = per_rank / np.nanmean(per_rank[1:] if S > 2 else per_rank, axis=0)
    rel = rel[1:] if S > 2 else rel
    spread_cv = float(np.nanstd(rel)) if np.isfinite(rel).sum() > 2 else 0.0
    slowest = np.nanmax(rel, axis=1)
    rho = float(np.nanmean(slowest[np.isfinite(slowest)])) if np.isfinite(slowest).any() else 1.0
    cv = cv_for_expected_max(rho, n)
    # -- buckets -----------------------------------------------------------------------------
    dt = tl.grad_dtype
    if not dt and not np.isfinite(tl.bucket_start).any():
        # c10d::allreduce_ ops alone (an older PyTorch's issue record) hold an element count at
        # most: neither dtype nor time. What gives those is an execution event, and none was
        # paired with any bucket (record_shapes was not the cause: it read as if it were)
        raise TraceError(source, None, "expected the buckets' collective events (a record_param_comms op, a "
                                       "gloo:all_reduce span or an NCCL kernel ncclDevKernel_AllReduce*/ncclKernel_"
                                       "AllReduce* per all-reduce), got none: only their c10d:: ops (c10d::allreduce_), which record "
                                       "no dtype, size or duration")
    if dt not in GRAD_DTYPES:
        if not dt:
            what = "no dtype recorded (profile with record_shapes=True)"
        elif "+" in dt:
            what = f"mixed dtypes ({dt.replace('+', ', ')})"
        else:
            what = f"{dt} gradients"
        raise TraceError(source, None, f"expected bucket gradients of one dtype commsim models (fp32, bf16 or "
                                           f"fp16), got {what}")
    sizes = tl.bucket_bytes.astype(np.int64)
    total = int(sizes.sum())
    first = int(sizes[0])
    rest = total - first
    cap = int(math.ceil(rest / (len(sizes) - 1))) if len(sizes) > 1 else total
    # -- links -------------------------------------------------------------------------------
    T = service_times(tl)
    # a bucket can finish before the previous one's end (gloo runs two at once on its two
    # worker threads): its time as counted here is then <= 0, and is kept in the mean, so
    # that the buckets' times add up to the chain's real length
    t_mean = np.nanmean(T, axis=0)
    samples = [(float(sizes[j]), float(T[s, j])) for s in range(S) for j in range(len(sizes))
               if np.isfinite(T[s, j]) and T[s, j] > 0]
    alpha, bw, link_note = _fit_link(sizes.astype(float), t_mean, n, source)
    # -- where the buckets were issued, against the simulator's uniform-rate assumption -------
    frac = np.nanmedian(tl.ready_fraction, axis=(0, 2))
    ready = ready_points(frac)
    model = np.cumsum(sizes) / total
    nodes = _nodes(hosts, notes)
    if len(tl.other):
        kinds = ", ".join(f"{k} of {b} B" for k, b in tl.other[:4])
        notes.append(f"also every step, not modeled: {kinds}")
    step = tl.step_time
    return Inferred(
        world_size=n, nodes=nodes, forward=forward, backward=backward, optimizer=optimizer, grad_dtype=dt,
        parameters=total // ELEMENT_BYTES[dt], first_bucket=first, bucket_cap=cap, alpha=alpha, bandwidth=bw,
        link_note=link_note, slow=slow_entries, stalls=stalls, jitter_cv=cv if cv >= JITTER_MIN else 0.0,
        spread_cv=spread_cv, slowest_ratio=rho,
        measured_step_time=float(step.mean()), comm_samples=samples, steps=S, buckets=len(sizes),
        ready_fraction=[float(x) for x in frac], bucket_sizes=[int(x) for x in sizes], bucket_ready=ready,
        model_fraction=[float(x) for x in model], notes=notes,
    )


READY_DIGITS = 4  # decimals of ddp.bucket_ready in the scenario


def ready_points(measured: np.ndarray) -> List[float]:
    """``ddp.bucket_ready`` from the measured issue shares of the backward: a share outside (0, 1]
    (a bucket issued after the last autograd op, or unknown) is clipped to its bounds, and each
    point is at least the previous one (DDP issues its buckets in order)."""
    floor = 10.0 ** -READY_DIGITS
    x = np.where(np.isfinite(measured), measured, 1.0)
    x = np.maximum.accumulate(np.clip(np.round(x, READY_DIGITS), floor, 1.0))
    return [float(v) for v in x]


def expected_max_lognormal(cv: float, n: int) -> float:
    """E[max of n iid lognormal draws with mean 1 and coefficient of variation cv]
    (commsim's jitter: sigma^2 = ln(1 + cv^2), mu = -sigma^2/2), by quadrature of
    E[max] = integral of exp(mu + sigma z) n Phi(z)^(n-1) phi(z) dz."""
    if cv <= 0 or n <= 1:
        return 1.0
    sigma2 = math.log1p(cv * cv)
    sigma, mu = math.sqrt(sigma2), -sigma2 / 2
    z = np.linspace(-10.0, 10.0 + sigma, 8001)
    cdf = np.array([0.5 * (1.0 + math.erf(v / math.sqrt(2.0))) for v in z])
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return float(np.trapezoid(np.exp(mu + sigma * z) * n * cdf ** (n - 1) * pdf, z))


def cv_for_expected_max(ratio: float, n: int, hi: float = 3.0) -> float:
    """The cv whose lognormal's expected maximum over n draws is `ratio` (bisection; 0 when
    ratio <= 1, `hi` when even that falls short)."""
    if n <= 1 or not ratio > 1.0:
        return 0.0
    lo, top = 0.0, hi
    if expected_max_lognormal(top, n) < ratio:
        return top
    for _ in range(60):
        mid = 0.5 * (lo + top)
        if expected_max_lognormal(mid, n) < ratio:
            lo = mid
        else:
            top = mid
    return 0.5 * (lo + top)


def _fit_link(sizes: np.ndarray, times: np.ndarray, n: int, source: str = "(traces)") -> Tuple[float, float, str]:
    """(alpha, bandwidth, note) of the ring model for this job's buckets.

    Ordinary least squares on the times themselves, T = a + b S with a = 2(n-1) alpha and
    b = 2(n-1)/(n B): a line with an intercept passes through the mean, so the model's total
    over any layout of the same bucket count and bytes (commsim's first + caps + rest) equals
    the measured total, which is what the step time needs. (The calibration file uses
    commsim.calibration's relative-error fit instead, the one that suits a size sweep.)
    Without two sizes, or where the line would have a negative latency or no bandwidth,
    commsim's default latency (or none) and the bandwidth that gives the measured total."""
    good = np.isfinite(times)
    if not good.any() or times[good].mean() <= 0:
        raise TraceError(source, None, "no all-reduce end times in the traces: the bucket communication "
                                           "cannot be timed")
    s, t = sizes[good], times[good]
    steps = 2 * (n - 1)
    if len(np.unique(s)) >= 2:
        b, a = np.polyfit(s, t, 1)
        if a >= 0 and b > 0:
            return a / steps, steps / n / b, (f"ring model fitted to {len(s)} bucket sizes "
                                              f"({int(s.min())}..{int(s.max())} B) by least squares on the times")
        note = " (a line through the times has no positive latency and bandwidth)"
    else:
        note = ""
    size, time = float(np.mean(s)), float(np.mean(t))
    alpha = DEFAULT_INTRA_NODE_LATENCY
    if time <= 2 * steps * alpha:  # the time is mostly latency: split it evenly
        alpha = time / (2 * steps)
    if len(np.unique(s)) >= 2 and note:
        alpha = 0.0  # the data put the latency at or below zero: the bandwidth carries the total
    bw = steps / n * size / (time - steps * alpha)
    return alpha, bw, (f"{'one bucket size' if not note else 'mean bucket'} ({int(size)} B): latency "
                       f"{alpha * 1e6:.3g} us, bandwidth chosen to give the measured mean {time * 1e3:.4g} ms{note}")


def _stall_entries(stalled: np.ndarray, excess: np.ndarray, step_numbers: np.ndarray,
                   compute: float) -> List[Dict[str, Any]]:
    """Stall entries from the flagged (step, rank) pauses: one per set of ranks pausing in the
    same steps. Kept when periodic (three or more at one interval >= 2 steps: ``every``), or,
    at random steps, when longer than STALL_RANDOM_SHARE of the compute (``probability``):
    shorter random pauses are the machine's noise and stay in the jitter."""
    S, n = stalled.shape
    by_pattern: Dict[Tuple[int, ...], List[int]] = {}
    for r in range(n):
        hits = tuple(int(s) for s in np.flatnonzero(stalled[:, r]))
        if hits:
            by_pattern.setdefault(hits, []).append(r)
    out = []
    for hits, ranks in sorted(by_pattern.items(), key=lambda kv: kv[1]):
        dur = float(np.median(excess[list(hits)][:, ranks]))
        numbers = step_numbers[list(hits)]
        gaps = np.diff(numbers)
        entry: Dict[str, Any] = {"ranks": ranks, "duration": dur, "steps": [int(x) for x in numbers],
                                 "rows": list(hits)}
        if len(hits) >= 3 and np.all(gaps == gaps[0]) and gaps[0] >= 2:
            entry["every"] = int(gaps[0])
        elif dur > STALL_RANDOM_SHARE * compute:
            entry["probability"] = len(hits) / S
        else:
            continue
        out.append(entry)
    return out


def _nodes(hosts: List[Optional[str]], notes: List[str]) -> int:
    n = len(hosts)
    if any(h is None for h in hosts):
        notes.append("host names unknown: the ranks are taken as one node")
        return 1
    names = list(dict.fromkeys(hosts))
    k = len(names)
    if k == 1:
        return 1
    per = n // k
    expected = [names[r // per] for r in range(n)] if n % k == 0 else None
    if expected != hosts:
        notes.append(f"{k} hosts, but ranks are not node-major in equal numbers per host: taken as one node of {n}")
        return 1
    return k


def predicted_comm(inferred: Inferred, size: float) -> float:
    return ring_allreduce_time(size, inferred.world_size, inferred.alpha, inferred.bandwidth)

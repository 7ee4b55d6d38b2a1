"""Stragglers as inputs: per-rank, per-step compute factors and stalls, thermal clocks.

Slow links are not here: they degrade the fabric (:func:`commsim.sim.links.scenario_fabric`,
:mod:`commsim.network.fabric` for which ports), which every collective is priced on.

Everything random is drawn here, from the scenario seed only, by a counter-based generator:
the k-th uniform of rank r at step s for straggler entry p (the "purpose", its index in the
scenario's list) is a keyed hash of (seed, p, r, s, k) (:class:`RankStreams`). A rank therefore
draws the same jitter whatever the world size and the number of steps, so scenarios that
differ only in scale see the same per-rank noise (common random numbers), adding an entry
never changes the draws of another, and the draws of one step for all ranks are a handful of
vectorized numpy calls (no generator object per rank).
"""

from __future__ import annotations

import sys

from dataclasses import dataclass, field
from functools import cached_property
from typing import Dict, List, Optional, Tuple

import numpy as np

from commsim.scenario.spec import Jitter, Scenario, SlowRank, Stall, Throttle

# A normal jitter draw is floored here: a GPU cannot run faster than this multiple of its
# nominal time (and never in negative time). With cv <= 0.3 the floor is > 3 sigma away.
NORMAL_JITTER_FLOOR = 0.05

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # SplitMix64's increment (2^64 / golden ratio)
# Counters per (rank, step): a step's draws use counters step * _DRAWS_PER_STEP + k. Gamma's
# rejection sampler uses 3 per attempt (a normal from 2 and a uniform), plus one for shape < 1;
# an attempt is rejected with probability < 5%, so more than 1,000 attempts never happen.
_DRAWS_PER_STEP = 1 << 12


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (Steele, Lea & Flood, "Fast splittable pseudorandom number
    generators", OOPSLA 2014; the constants of Vigna's splitmix64.c), in place on uint64."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def _mix_int(x: int) -> int:
    return int(_mix(np.array([x & _MASK], dtype=np.uint64))[0])


class RankStreams:
    """Counter-based uniform streams of one straggler entry, one per rank.

    Rank r's stream is SplitMix64 keyed by a hash of (seed, purpose, r): its draw at counter c
    is mix(key_r + (c + 1) * golden), so any (rank, step, k) is computed directly, for all
    ranks at once, and does not depend on which other ranks or steps are drawn.
    """

    def __init__(self, seed: int, purpose: int, ranks):
        base = _mix_int(_GOLDEN ^ (seed & _MASK))
        rest = seed >> 64 if seed >= 0 else ~seed >> 63  # seeds beyond 64 bits keep mixing
        while rest:
            base = _mix_int(base ^ (rest & _MASK))
            rest >>= 64
        base = _mix_int(base ^ (purpose & _MASK))
        with np.errstate(over="ignore"):
            keys = np.asarray(ranks, dtype=np.uint64) * np.uint64(_GOLDEN) ^ np.uint64(base)
        self.keys = _mix(_mix(keys))

    def bits(self, counter: int, where: Optional[np.ndarray] = None) -> np.ndarray:
        """The raw 64-bit draws at ``counter`` of every rank (or of the ranks at ``where``)."""
        keys = self.keys if where is None else self.keys[where]
        return _mix(keys + np.uint64(((counter + 1) * _GOLDEN) & _MASK))

    def uniform(self, counter: int, where: Optional[np.ndarray] = None) -> np.ndarray:
        """Uniforms in (0, 1) at ``counter``: the top 53 bits, centred in their interval."""
        u = (self.bits(counter, where) >> np.uint64(11)).astype(np.float64)
        u += 0.5
        u *= 2.0 ** -53
        return u

    def normal(self, counter: int, where: Optional[np.ndarray] = None) -> np.ndarray:
        """Standard normals from the uniforms at ``counter`` and ``counter + 1`` (Box-Muller)."""
        r = np.sqrt(-2.0 * np.log(self.uniform(counter, where)))
        return r * np.cos((2.0 * np.pi) * self.uniform(counter + 1, where))


def rank_stream(seed: int, purpose: int, rank: int) -> RankStreams:
    """The random stream of one rank for one straggler entry."""
    return RankStreams(seed, purpose, [rank])


def jitter_draws(streams: RankStreams, distribution: str, cv: float, step: int) -> np.ndarray:
    """One multiplicative factor per rank of ``streams`` for ``step``: mean 1, coefficient of
    variation ``cv``.

    lognormal: sigma^2 = ln(1 + cv^2), mu = -sigma^2 / 2 (so that E = 1, CV = cv).
    gamma: shape 1/cv^2, scale cv^2 (Marsaglia & Tsang's rejection method, ACM TOMS 26(3),
    2000; shape < 1 via Gamma(a) = Gamma(a + 1) U^(1/a)). exponential: 1 - cv + cv * Exp(1)
    (mean 1, sd cv; needs cv <= 1). normal: 1 + cv * Z, floored at NORMAL_JITTER_FLOOR.
    """
    size = len(streams.keys)
    c0 = step * _DRAWS_PER_STEP
    if distribution == "exponential" and cv > 1:
        raise ValueError(f"exponential jitter needs cv <= 1, got {cv}")
    if cv * cv < sys.float_info.min:  # no spread (also a cv whose square underflows to a subnormal: 1/cv^2 is inf)
        if distribution not in ("lognormal", "gamma", "exponential", "normal"):
            raise ValueError(f"unknown jitter distribution {distribution!r}")
        return np.ones(size)
    if distribution == "lognormal":
        sigma2 = np.log1p(cv * cv)
        return np.exp(-sigma2 / 2 + np.sqrt(sigma2) * streams.normal(c0))
    if distribution == "gamma":
        return _gamma(streams, 1.0 / (cv * cv), c0) * (cv * cv)
    if distribution == "exponential":
        return 1.0 - cv - cv * np.log(streams.uniform(c0))
    if distribution == "normal":
        return np.maximum(1.0 + cv * streams.normal(c0), NORMAL_JITTER_FLOOR)
    raise ValueError(f"unknown jitter distribution {distribution!r}")


def _gamma(streams: RankStreams, shape: float, c0: int) -> np.ndarray:
    """Gamma(shape, 1) per rank by Marsaglia & Tsang's method, attempt j using counters
    c0 + 1 + 3j .. c0 + 3 + 3j (counter c0 is the U of the shape < 1 boost)."""
    a = shape if shape >= 1 else shape + 1.0
    d = a - 1.0 / 3.0
    c = 1.0 / np.sqrt(9.0 * d)
    size = len(streams.keys)
    out = np.empty(size)
    pending = np.arange(size)
    attempt = 0
    while len(pending):
        counter = c0 + 1 + 3 * attempt
        if counter + 3 > c0 + _DRAWS_PER_STEP:  # unreachable in practice (probability < 0.05^1000)
            raise RuntimeError("gamma jitter: rejection sampler ran out of counters")
        z = streams.normal(counter, pending)
        u = streams.uniform(counter + 2, pending)
        v = (1.0 + c * z) ** 3
        with np.errstate(invalid="ignore", divide="ignore"):
            ok = (v > 0) & (np.log(u) < 0.5 * z * z + d - d * v + d * np.log(np.where(v > 0, v, 1.0)))
        out[pending[ok]] = d * v[ok]
        pending = pending[~ok]
        attempt += 1
    if shape < 1:
        out *= streams.uniform(c0) ** (1.0 / shape)
    return out


@dataclass
class Perturbations:
    """What the stragglers do to compute, per step and rank, plus thermal clocks.

    :meth:`factor_at` and :meth:`stall_at` give one step's (world_size,) vectors, drawn when
    asked (memory O(world_size), not O(steps x world_size)); :attr:`factor` and :attr:`stall`
    are the whole (steps, world_size) arrays, for callers that want them.
    """

    world_size: int
    steps: int
    slow: np.ndarray  # (n,) product of the slow_rank factors
    jitter: List[Tuple[RankStreams, Optional[np.ndarray], str, float]]  # (streams, ranks or None: all, distribution, cv)
    stalls: np.ndarray  # (steps, stalled ranks) seconds of pause, one column per rank with a stall entry
    stalled: np.ndarray  # the ranks of those columns
    clocks: Dict[int, "ThermalClock"]  # rank -> its throttling clock
    _zeros: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._zeros = np.zeros(self.world_size)

    def factor_at(self, step: int) -> np.ndarray:
        """(n,) compute time multiplier of every rank at ``step`` (slow_rank x jitter)."""
        f = self.slow.copy()
        for streams, ranks, distribution, cv in self.jitter:
            draws = jitter_draws(streams, distribution, cv, step)
            if ranks is None:
                f *= draws
            else:
                f[ranks] *= draws
        return f

    def stall_at(self, step: int) -> np.ndarray:
        """(n,) seconds of pause before every rank's forward at ``step``."""
        if not len(self.stalled):
            return self._zeros
        out = np.zeros(self.world_size)
        out[self.stalled] = self.stalls[step]
        return out

    @cached_property
    def factor(self) -> np.ndarray:
        """(steps, n) compute time multipliers (drawn on first use, then kept)."""
        return np.stack([self.factor_at(s) for s in range(self.steps)]) if self.steps else np.ones((0, self.world_size))

    @cached_property
    def stall(self) -> np.ndarray:
        """(steps, n) seconds of pause before the step's forward (built on first use, then kept)."""
        out = np.zeros((self.steps, self.world_size))
        out[:, self.stalled] = self.stalls
        return out

    @property
    def deterministic_steps(self) -> bool:
        """True when every step sees the same perturbations (no jitter, stall or throttle)."""
        jitters = self.steps > 1 and any(
            cv * cv >= sys.float_info.min and (ranks is None or len(ranks)) for _, ranks, _, cv in self.jitter)
        return not self.clocks and not jitters and bool(np.all(self.stalls == 0))


def perturbations(scenario: Scenario) -> Perturbations:
    """Draw every compute perturbation of the scenario (deterministic in its seed)."""
    n, steps = scenario.world_size, scenario.steps
    slow = np.ones(n)
    jitter = []
    stall_cols: Dict[int, np.ndarray] = {}
    clocks: Dict[int, ThermalClock] = {}
    for purpose, s in enumerate(scenario.stragglers):
        if isinstance(s, SlowRank):
            slow[list(s.ranks)] *= s.factor
        elif isinstance(s, Jitter):
            ranks = None if s.ranks is None else np.asarray(s.ranks, dtype=np.int64)
            streams = RankStreams(scenario.seed, purpose, np.arange(n) if ranks is None else ranks)
            jitter_draws(streams, s.distribution, s.cv, 0)  # refuse a bad distribution or cv now
            jitter.append((streams, ranks, s.distribution, s.cv))
        elif isinstance(s, Stall):
            if s.every is None:
                streams = RankStreams(scenario.seed, purpose, list(s.ranks))
                hits = np.stack([streams.uniform(t * _DRAWS_PER_STEP) < s.probability for t in range(steps)]) \
                    if steps else np.zeros((0, len(s.ranks)), dtype=bool)
            for j, r in enumerate(s.ranks):
                hit = ((np.arange(steps) + 1) % s.every == 0) if s.every is not None else hits[:, j]
                stall_cols[r] = stall_cols.get(r, np.zeros(steps)) + np.where(hit, s.duration, 0.0)
        elif isinstance(s, Throttle):
            for r in s.ranks:
                if r in clocks:
                    raise ValueError(f"rank {r} is in more than one throttle entry")
                clocks[r] = ThermalClock(s.heat_up, s.throttled_time, s.clock_fraction, s.phase)
    stalled = np.array(sorted(stall_cols), dtype=np.int64)
    stalls = np.stack([stall_cols[r] for r in stalled], axis=1) if len(stalled) else np.zeros((steps, 0))
    return Perturbations(world_size=n, steps=steps, slow=slow, jitter=jitter, stalls=stalls, stalled=stalled,
                         clocks=clocks)


@dataclass(frozen=True)
class ThermalClock:
    """An intermittently throttled GPU: full clock for `heat_up` s, then `clock_fraction` of
    it for `throttled_time` s, repeating (hot -> slow -> cool -> fast). `phase` is how far
    into that cycle the GPU is at time zero.

    Work is measured in seconds at full clock; :meth:`finish` turns work started at a time
    into the time it is done, integrating the piecewise-constant clock exactly.
    """

    heat_up: float
    throttled_time: float
    clock_fraction: float
    phase: float = 0.0

    @property
    def period(self) -> float:
        return self.heat_up + self.throttled_time

    @property
    def work_per_period(self) -> float:
        return self.heat_up + self.clock_fraction * self.throttled_time

    def work_done(self, t):
        """Full-clock seconds of work done between cycle time -phase (t = 0) and t."""
        tau = np.asarray(t, dtype=np.float64) + self.phase
        cycles, into = np.divmod(tau, self.period)
        partial = np.where(
            into <= self.heat_up, into, self.heat_up + self.clock_fraction * (into - self.heat_up)
        )
        return cycles * self.work_per_period + partial

    def time_for_work(self, w):
        """Inverse of :meth:`work_done`: the time t at which cumulative work w is reached."""
        cycles, rem = np.divmod(np.asarray(w, dtype=np.float64), self.work_per_period)
        into = np.where(rem <= self.heat_up, rem, self.heat_up + (rem - self.heat_up) / self.clock_fraction)
        return cycles * self.period + into - self.phase

    def finish(self, start, work):
        """Time at which `work` full-clock seconds started at `start` are done."""
        if type(start) is float and type(work) is float and not isinstance(self.phase, np.ndarray):
            return self.time_for_work_float(self.work_done_float(start) + work)
        return self.time_for_work(self.work_done(start) + work)

    # Plain-float forms of work_done / time_for_work: the same operations in the same order
    # (Python's float divmod is numpy's: floor quotient, remainder with the divisor's sign), so
    # bit-identical results ~25x faster than through 0-d arrays; the engine calls them per
    # throttled rank and compute segment.
    def work_done_float(self, t: float) -> float:
        """:meth:`work_done` of one plain float (a clock with scalar parameters)."""
        cycles, into = divmod(t + self.phase, self.heat_up + self.throttled_time)
        partial = into if into <= self.heat_up else self.heat_up + self.clock_fraction * (into - self.heat_up)
        return cycles * (self.heat_up + self.clock_fraction * self.throttled_time) + partial

    def time_for_work_float(self, w: float) -> float:
        """:meth:`time_for_work` of one plain float (a clock with scalar parameters)."""
        cycles, rem = divmod(w, self.heat_up + self.clock_fraction * self.throttled_time)
        into = rem if rem <= self.heat_up else self.heat_up + (rem - self.heat_up) / self.clock_fraction
        return cycles * (self.heat_up + self.throttled_time) + into - self.phase

"""Stragglers as inputs: per-rank, per-step compute factors and stalls, thermal clocks.

Slow links are not here: they degrade the fabric (:func:`commsim.sim.links.scenario_fabric`,
:mod:`commsim.network.fabric` for which ports), which every collective is priced on.

Everything random is drawn here, from the scenario seed only: each straggler entry (the
"purpose", its index in the scenario's list) and each rank get their own stream,
``SeedSequence(seed, spawn_key=(purpose, rank))``. A rank therefore draws the same jitter
whatever the world size, so scenarios that differ only in scale see the same per-rank noise
(common random numbers), and adding an entry never changes the draws of another.
"""

from __future__ import annotations

import sys

from dataclasses import dataclass
from typing import Dict, Tuple

import numpy as np

from commsim.scenario.spec import Jitter, Scenario, SlowRank, Stall, Throttle

# A normal jitter draw is floored here: a GPU cannot run faster than this multiple of its
# nominal time (and never in negative time). With cv <= 0.3 the floor is > 3 sigma away.
NORMAL_JITTER_FLOOR = 0.05


def rank_stream(seed: int, purpose: int, rank: int) -> np.random.Generator:
    """The random stream of one rank for one straggler entry."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(purpose, rank))))


def jitter_draws(rng: np.random.Generator, distribution: str, cv: float, size: int) -> np.ndarray:
    """`size` multiplicative factors with mean 1 and coefficient of variation `cv`.

    lognormal: sigma^2 = ln(1 + cv^2), mu = -sigma^2 / 2 (so that E = 1, CV = cv).
    gamma: shape 1/cv^2, scale cv^2. exponential: 1 - cv + cv * Exp(1) (mean 1, sd cv;
    needs cv <= 1). normal: 1 + cv * Z, floored at NORMAL_JITTER_FLOOR.
    """
    if cv * cv < sys.float_info.min:  # no spread (also a cv whose square underflows to a subnormal: 1/cv^2 is inf)
        return np.ones(size)
    if distribution == "lognormal":
        sigma2 = np.log1p(cv * cv)
        return rng.lognormal(-sigma2 / 2, np.sqrt(sigma2), size)
    if distribution == "gamma":
        return rng.gamma(1.0 / (cv * cv), cv * cv, size)
    if distribution == "exponential":
        if cv > 1:
            raise ValueError(f"exponential jitter needs cv <= 1, got {cv}")
        return 1.0 - cv + cv * rng.standard_exponential(size)
    if distribution == "normal":
        return np.maximum(1.0 + cv * rng.standard_normal(size), NORMAL_JITTER_FLOOR)
    raise ValueError(f"unknown jitter distribution {distribution!r}")


@dataclass(frozen=True)
class Perturbations:
    """What the stragglers do to compute, as (steps, world_size) arrays, plus thermal clocks."""

    factor: np.ndarray  # compute time multiplier (slow_rank x jitter)
    stall: np.ndarray  # seconds of pause before the step's forward
    clocks: Dict[int, "ThermalClock"]  # rank -> its throttling clock

    @property
    def deterministic_steps(self) -> bool:
        """True when every step sees the same perturbations (no jitter, stall or throttle)."""
        return not self.clocks and bool(np.all(self.stall == 0)) and bool(np.all(self.factor == self.factor[0]))


def _ranks(ranks, world_size: int) -> Tuple[int, ...]:
    return tuple(range(world_size)) if ranks is None else tuple(ranks)


def perturbations(scenario: Scenario) -> Perturbations:
    """Draw every compute perturbation of the scenario (deterministic in its seed)."""
    n, steps = scenario.world_size, scenario.steps
    factor = np.ones((steps, n))
    stall = np.zeros((steps, n))
    clocks: Dict[int, ThermalClock] = {}
    for purpose, s in enumerate(scenario.stragglers):
        if isinstance(s, SlowRank):
            factor[:, list(s.ranks)] *= s.factor
        elif isinstance(s, Jitter):
            for r in _ranks(s.ranks, n):
                factor[:, r] *= jitter_draws(rank_stream(scenario.seed, purpose, r), s.distribution, s.cv, steps)
        elif isinstance(s, Stall):
            for r in s.ranks:
                if s.every is not None:
                    hit = (np.arange(steps) + 1) % s.every == 0
                else:
                    hit = rank_stream(scenario.seed, purpose, r).random(steps) < s.probability
                stall[:, r] += np.where(hit, s.duration, 0.0)
        elif isinstance(s, Throttle):
            for r in s.ranks:
                if r in clocks:
                    raise ValueError(f"rank {r} is in more than one throttle entry")
                clocks[r] = ThermalClock(s.heat_up, s.throttled_time, s.clock_fraction, s.phase)
    return Perturbations(factor=factor, stall=stall, clocks=clocks)


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
        return self.time_for_work(self.work_done(start) + work)

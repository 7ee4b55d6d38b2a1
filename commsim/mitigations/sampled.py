"""Compute perturbations drawn from measured per-rank samples (the empirical joint distribution).

A step's time is set by the slowest rank at each sync, so a mean step time needs the mean of a
maximum over ranks, E[max_r c_r], not the maximum of mean costs. Where the ranks' compute comes
in modes (a rank whose core another process shares runs at half speed for a run of steps, the
other rank at full speed: on a shared CPU machine no-sync steps of ~12 or ~24-37 ms), a
parametric jitter about one mean (a gamma of the ranks' robust spread) misses that expectation by
far: the ranks measured ~17 ms apart at the first sync, against ~2 ms from a cv of 0.07-0.15.

:class:`SampledPerturbations` keeps the measurement itself: `rows` is a (k, n) array of rank
compute factors, row j the n ranks' compute in the j-th measured sample (each over the samples'
mean), taken at the same moment on every rank, so that a row keeps whatever the ranks' loads had
in common at that moment. Each simulated step draws one row, uniformly, from the scenario's seed
(a bootstrap of the measured steps), so that the expectation of a max at each sync, and of the
sums of a run of local steps, follows from the samples with no parametric form.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from commsim.scenario.spec import Scenario
from commsim.sim.stragglers import Perturbations, perturbations, rank_stream

# the random stream of the row draws: a purpose no straggler entry (an index in the scenario's
# list) has, so that the draws of the scenario's own entries are unchanged
SAMPLED_PURPOSE = 1 << 40


@dataclass
class SampledPerturbations(Perturbations):
    """The scenario's perturbations, every step's compute factor further multiplied by one drawn
    row of `rows` ((k, n), per rank). `picks`: the row drawn for each step."""

    rows: np.ndarray = field(default=None, repr=False)
    picks: np.ndarray = field(default=None, repr=False)

    def factor_at(self, step: int) -> np.ndarray:
        return super().factor_at(step) * self.rows[self.picks[step]]

    @property
    def deterministic_steps(self) -> bool:
        return super().deterministic_steps and bool(np.all(self.rows == self.rows[0]))


def row_picks(seed: int, steps: int, k: int) -> np.ndarray:
    """(steps,) uniform row indices in [0, k), step s from the scenario seed's counter s."""
    stream = rank_stream(seed, SAMPLED_PURPOSE, 0)
    return np.array([min(k - 1, int(stream.uniform(s)[0] * k)) for s in range(steps)], dtype=np.int64)


def sampled_perturbations(scenario: Scenario, rows) -> SampledPerturbations:
    """The scenario's perturbations (:func:`commsim.sim.stragglers.perturbations`) with each step's
    compute factor times a row of `rows` drawn with the scenario's seed. `rows`: (k, n) positive
    factors, n the world size; ValueError otherwise."""
    rows = np.asarray(rows, dtype=float)
    n = scenario.world_size
    if rows.ndim != 2 or rows.shape[1] != n or not len(rows):
        raise ValueError(f"sampled compute factors: expected (samples, {n}) rows, got shape {rows.shape}")
    if not np.all(np.isfinite(rows)) or np.any(rows <= 0):
        raise ValueError("sampled compute factors must be finite and positive")
    base = perturbations(scenario)
    kept = {f.name: getattr(base, f.name) for f in fields(Perturbations) if f.init}
    return SampledPerturbations(**kept, rows=rows, picks=row_picks(scenario.seed, scenario.steps, len(rows)))


def factor_rows(samples) -> np.ndarray:
    """(k, n) compute factors from per-rank sample times (n lists of k seconds, sample j taken at
    the same moment on every rank): each over the mean of all of them."""
    times = np.asarray(samples, dtype=float).T
    return times / times.mean()

"""Each rank's waiting time of a run, split into exposed communication and straggler waiting.

:attr:`commsim.sim.engine.RunResult.rank_wait` is the time a rank spends blocked in a step:
the step's duration minus its own compute and stall. Two different things add up there:

- *exposed communication*: the all-reduce time that backward does not hide. It is there
  without any straggler: it is the straggler-free baseline's waiting, rank by rank (or, when
  the baseline run is not at hand, the summary's ``exposed_comm_s`` = baseline step time -
  compute, the same for every rank);
- *straggler waiting*: what a rank waits beyond that, because other ranks were late:
  ``rank_wait - exposed communication``. Its mean over steps and ranks is the summary's
  ``straggler_cost_s`` (mean step time - baseline step time) up to the rank's own jitter,
  whose mean is zero. On a single step it is negative for a rank that was itself late (its
  own compute ate into the time it would have waited).

At 1,024 ranks (scenarios/scaling_1024.yaml) a rank waits about 655 ms per step: 637 ms of
exposed communication and 17.9 ms of straggler waiting. Drawn as one number, the second is
invisible; :mod:`commsim.output.plots` draws them apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from commsim.sim.engine import RunResult


@dataclass(frozen=True)
class WaitingSplit:
    """Per-rank waiting of one run (seconds per step), split as in the module docstring."""

    total: np.ndarray  # (steps, n) rank_wait
    exposed_comm: np.ndarray  # (n,) waiting that remains without stragglers, per rank
    straggler: np.ndarray  # (steps, n) total - exposed_comm
    exposed_source: str  # "straggler-free baseline" or "summary exposed_comm_s"
    straggler_cost_s: Optional[float]  # the summary's, for reference (None if absent)

    @property
    def ranks(self) -> int:
        return self.total.shape[1]

    @property
    def straggler_mean(self) -> np.ndarray:
        """(n,) mean over steps of each rank's straggler waiting."""
        return self.straggler.mean(axis=0)

    def straggler_band(self, low: float = 5, high: float = 95) -> np.ndarray:
        """(2, n) percentiles over steps of each rank's straggler waiting."""
        return np.percentile(self.straggler, [low, high], axis=0)

    @property
    def mean_straggler_wait(self) -> float:
        """Mean over steps and ranks: compare with ``straggler_cost_s``."""
        return float(self.straggler.mean())

    @property
    def mean_exposed_comm(self) -> float:
        return float(self.exposed_comm.mean())


def waiting_split(result: RunResult, summary: Mapping[str, Any],
                  baseline: Optional[RunResult] = None) -> WaitingSplit:
    """Split `result`'s waiting with its straggler-free `baseline` (the per-rank exposed
    communication is then the baseline's mean waiting of that rank) or, without it, with the
    summary's ``exposed_comm_s``."""
    total = np.asarray(result.rank_wait, dtype=float)
    n = total.shape[1]
    if baseline is not None:
        base = np.asarray(baseline.rank_wait, dtype=float)
        if base.shape[1] != n:
            raise ValueError(f"baseline has {base.shape[1]} ranks, the run {n}")
        exposed = base.mean(axis=0)
        source = "straggler-free baseline"
    else:
        exposed = np.full(n, float(summary["exposed_comm_s"]))
        source = "summary exposed_comm_s"
    cost = summary.get("straggler_cost_s")
    return WaitingSplit(total, exposed, total - exposed[None, :], source,
                        None if cost is None else float(cost))

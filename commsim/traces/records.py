"""What the readers extract from one rank's trace, in one shape whatever the format.

Times are float seconds from the trace's own ``origin_ns`` (an integer count of nanoseconds on
the clock the trace was stamped with, the Unix epoch for Kineto and the Flight Recorder), so
that sub-microsecond stamps survive the float and two ranks' times line up by integer
arithmetic on their origins.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, Optional, Tuple

import numpy as np

# Compute phases a step is split into (what the simulator's scenario has).
PHASES = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class CommEvent:
    """One collective as one rank saw it.

    ``issue``: when the rank's host called it (its gradients were ready, for a DDP bucket);
    ``start``/``end``: when it ran on the rank (the gloo worker's span, the NCCL kernel's), None
    where the format does not say. ``nbytes`` follows nccl-tests' size convention (the input
    of an all-reduce, the output of an all-gather). ``step`` is the training step the host was
    in when it issued it (-1: unknown), ``order`` its index among this rank's collectives of
    the same process group."""

    kind: str
    group: str
    nbytes: int
    dtype: str
    issue: float
    start: Optional[float] = None
    end: Optional[float] = None
    seq: Optional[int] = None
    group_ranks: Optional[Tuple[int, ...]] = None
    group_size: Optional[int] = None
    step: int = -1
    order: int = -1
    where: str = ""  # where in the file it came from, for messages


@dataclass(frozen=True)
class Interval:
    """A span of compute of one phase, in the step the host was in when it was issued."""

    phase: str
    start: float
    end: float
    step: int = -1


@dataclass(frozen=True)
class RankTrace:
    """One rank's trace: its collectives, compute intervals and step spans."""

    source: str
    format: str  # "kineto" or "flight-recorder"
    rank: int
    origin_ns: int
    world_size: Optional[int] = None
    host: Optional[str] = None
    backend: Optional[str] = None
    groups: Tuple[Tuple[str, Tuple[int, ...]], ...] = ()  # process groups the file describes
    comms: Tuple[CommEvent, ...] = ()
    intervals: Tuple[Interval, ...] = ()
    steps: Tuple[Tuple[int, float, float], ...] = ()  # (step number, start, end), host timeline
    device: str = "cpu"  # "cpu" or "gpu": where compute and collectives ran
    notes: Tuple[str, ...] = ()
    extra: Dict[str, object] = field(default_factory=dict)

    @property
    def span(self) -> Tuple[float, float]:
        """First and last time stamped in the trace."""
        times = [c.issue for c in self.comms] + [c.end for c in self.comms if c.end is not None]
        times += [i.start for i in self.intervals] + [i.end for i in self.intervals]
        times += [s for _, s, _ in self.steps] + [e for _, _, e in self.steps]
        return (min(times), max(times)) if times else (0.0, 0.0)

    def shifted(self, seconds: float) -> "RankTrace":
        """The same trace with every time moved by `seconds` (a new origin)."""
        def mv(t):
            return None if t is None else t + seconds
        return replace(
            self,
            comms=tuple(replace(c, issue=c.issue + seconds, start=mv(c.start), end=mv(c.end)) for c in self.comms),
            intervals=tuple(replace(i, start=i.start + seconds, end=i.end + seconds) for i in self.intervals),
            steps=tuple((k, s + seconds, e + seconds) for k, s, e in self.steps),
        )


def phase_array(trace: RankTrace, phase: str) -> np.ndarray:
    """(k, 3) array of (start, end, step) of the trace's intervals of one phase, by start."""
    rows = [(i.start, i.end, i.step) for i in trace.intervals if i.phase == phase]
    out = np.array(rows, dtype=float).reshape(-1, 3)
    return out[np.argsort(out[:, 0], kind="stable")]

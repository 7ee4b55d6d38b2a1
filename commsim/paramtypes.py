"""Option types shared by the ``commsim`` commands and the ``validate`` entry points.

Both take a ``--timeout`` in seconds, and click's ``FloatRange`` lets ``nan``, ``inf`` and
``1e308`` through: a rank's process group then failed on torch's OverflowError after the launch
(exit 3, a run failure for what was bad input). The layering keeps ``validate/`` from importing
the CLI, so the type lives here, below both.
"""

from __future__ import annotations

import math
from typing import Optional

import click

from commsim.units import MAX_TIME

# The longest --timeout: the scenario's own limit on a time (11.6 days). A launch's process
# group waits half as long again (validate.launch.group_timeout), 1.5e9 ms, which still fits
# the C int that torch converts it to.
MAX_SECONDS = MAX_TIME


class Seconds(click.ParamType):
    """A finite number of seconds in (0, :data:`MAX_SECONDS`], or from `minimum` to it."""

    name = "SECONDS"

    def __init__(self, minimum: Optional[float] = None) -> None:
        self.minimum = minimum

    def convert(self, value, param, ctx) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"expected a number of seconds, got {value!r}", param, ctx)
        if self.minimum is not None:
            if not (math.isfinite(seconds) and self.minimum <= seconds <= MAX_SECONDS):
                self.fail(f"expected a finite number of seconds from {self.minimum:g} to {MAX_SECONDS:g} "
                          f"(11.6 days), got {value!r}", param, ctx)
            return seconds
        if not (math.isfinite(seconds) and seconds > 0):
            self.fail(f"expected a finite number of seconds > 0, got {value!r}", param, ctx)
        if seconds > MAX_SECONDS:
            self.fail(f"expected at most {MAX_SECONDS:g} seconds (11.6 days), got {value!r}", param, ctx)
        return seconds


# The most iterations (or real steps) a measuring command runs per size or job: with --iters
# 2**64 a sweep ran until the hang timer fired, 300 s of one size and then "ranks hung", and
# kept a timestamp per iteration in memory all the while. A million iterations of the
# smallest gloo all-reduce is already most of a minute, of a 16 MB one about three hours.
MAX_ITERATIONS = 1_000_000


def iterations(minimum: int) -> click.IntRange:
    """An iteration or step count from `minimum` to :data:`MAX_ITERATIONS`."""
    return click.IntRange(min=minimum, max=MAX_ITERATIONS)

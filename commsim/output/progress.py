"""A progress bar for long simulations (rich), shown only on an interactive stderr."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from commsim.scenario.spec import Scenario

# Below this many rank x bucket x step units a run takes well under a second: no bar.
PROGRESS_THRESHOLD = 20_000_000


@contextmanager
def step_progress(scenario: Scenario, enabled: bool = True):
    """Yields a factory: ``on_step(label)`` returns an ``(done, total)`` callback for one run."""
    if not (enabled and sys.stderr.isatty()):  # -q or no terminal: no bar, and no bucket layout to count
        yield lambda label: None
        return
    buckets = len(scenario.gradient_buckets())
    work = scenario.world_size * max(buckets, 1) * scenario.steps
    if work < PROGRESS_THRESHOLD:
        yield lambda label: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    # On stderr, the stream whose terminal was checked: rich's default console is stdout's,
    # which may carry a document (`--json -`) that the bar must not touch.
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        transient=True, console=Console(stderr=True),
    ) as bar:
        def factory(label: str):
            task = bar.add_task(f"simulating {label}", total=scenario.steps)
            return lambda done, total: bar.update(task, completed=done)

        yield factory

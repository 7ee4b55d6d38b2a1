"""Where sweep points run: inline, on a local process pool, or on a Dask cluster; and the bar.

Each executor is a generator of ``(point, summary)`` pairs as points finish. The local pool is
``concurrent.futures.ProcessPoolExecutor`` and the cluster ``dask.distributed``: there is no
home-made scheduler.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

from commsim.sweep.errors import SweepError
from commsim.sweep.plan import Point, run_point

Finished = Iterator[Tuple[Point, Dict[str, Any]]]


def progress_bar(total: int, already: int, enabled: bool):
    """A rich progress bar on stderr (a no-op when not enabled) and its task id."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    progress = Progress(
        TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("elapsed"),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
        console=Console(stderr=True), disable=not enabled, transient=False,
    )
    task = progress.add_task("sweep", total=total, completed=already)
    return progress, task


def iter_serial(todo: Sequence[Point]) -> Finished:
    """Run the points one after the other in this process."""
    for p in todo:
        yield p, run_point(p.scenario)


def iter_process_pool(todo: Sequence[Point], jobs: int) -> Finished:
    """Yield (point, summary) as points finish on a local process pool (inline for jobs=1)."""
    if jobs <= 1 or len(todo) <= 1:
        yield from iter_serial(todo)
        return
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(todo)))
    try:
        pending = {pool.submit(run_point, p.scenario): p for p in todo}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(finished, key=lambda f: pending[f].index):
                p = pending.pop(fut)
                yield p, fut.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def iter_dask(todo: Sequence[Point], client=None, address: Optional[str] = None) -> Finished:
    """Yield (point, summary) as points finish on a Dask distributed cluster."""
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise SweepError(
            "--dask-scheduler", None,
            "needs dask.distributed, which is not installed (pip install 'commsim[sweep]')",
        ) from None
    own_client = client is None
    if own_client:
        try:
            client = Client(address, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise SweepError(f"--dask-scheduler {address}", None, f"cannot reach the scheduler: {exc}") from None
    futures = {}
    try:
        for p in todo:
            # The fingerprint in the task key makes resubmitting the same point idempotent.
            fut = client.submit(run_point, p.scenario, key=f"commsim-point-{p.key}", pure=False)
            futures[fut] = p
        for fut in as_completed(list(futures)):
            yield futures[fut], fut.result()
    finally:
        for fut in futures:
            if not fut.done():
                fut.cancel()
        if own_client:
            client.close()

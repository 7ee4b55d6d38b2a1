"""Where sweep points run: inline, on a local process pool, or on a Dask cluster; and the bar.

Each executor is a generator of ``(point, summary)`` pairs as points finish. The local pool is
``concurrent.futures.ProcessPoolExecutor`` and the cluster ``dask.distributed``: there is no
home-made scheduler.

Pool workers never outlive the sweep. Closed early (an interrupt, a failed write), the pool
stops its workers instead of waiting for the points in flight; and each worker dies with the
process that started it even when that one gets SIGKILL and can clean nothing up: on Linux the
kernel sends it SIGKILL (``PR_SET_PDEATHSIG``), elsewhere a thread in the worker notices its
parent is gone. Workers ignore SIGINT (a terminal's Ctrl-C reaches the whole process group;
the sweep process stops them) and take SIGTERM's default action.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import suppress
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

from commsim.parentdeath import die_with_parent
from commsim.sweep import signals
from commsim.sweep.errors import SweepError
from commsim.sweep.plan import Point, run_point

# <linux/prctl.h>: deliver a signal to this process when the thread that forked it exits.
# How often a worker without PR_SET_PDEATHSIG checks that its parent is still there.
PARENT_POLL_S = 0.2
# How often the pool loop looks for a pending Ctrl-C/SIGTERM (see commsim.sweep.signals).
INTERRUPT_POLL_S = 0.1
# How long stopped workers get to exit on SIGTERM before they are killed.
_STOP_GRACE_S = 5.0


class WorkerDied(Exception):
    """A pool worker died under a point (killed by a signal, the OOM killer)."""

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
        yield p, run_point(p.scenario, p.mitigations)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else (only after pid reuse)
        return True
    return True


def watch_sweep(still_there: Callable[[], bool], exit: Callable[[int], Any] = os._exit,
                interval: float = PARENT_POLL_S) -> None:
    """A worker's watch thread: poll `still_there` and exit the process once it is False."""
    while still_there():
        time.sleep(interval)
    exit(1)


def _die_with_parent(sweep_pid: int) -> None:
    """Arrange for this worker to end when the sweep process `sweep_pid` does."""
    if os.getppid() == sweep_pid:  # forked or spawned by the sweep itself
        if die_with_parent():
            if os.getppid() != sweep_pid:  # it died before the signal was armed
                os._exit(1)
            return

        def still_there() -> bool:
            return os.getppid() == sweep_pid  # an orphan is re-parented
    else:
        # Started through a fork server (the default start method on some platforms), or the
        # sweep is already gone and this worker was re-parented before it got here.
        def still_there() -> bool:
            return _alive(sweep_pid)
    threading.Thread(target=watch_sweep, args=(still_there,), name="commsim-sweep-watch", daemon=True).start()


def init_worker(sweep_pid: int) -> None:
    """Pool worker initializer: the signal dispositions above, and death with the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the sweep's handler, inherited by fork
    _die_with_parent(sweep_pid)


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Stop the pool now: cancel what has not started, terminate the workers, reap them."""
    # Before Python 3.14 the executor has no public way to stop running workers: take them
    # from its process table and terminate them, which is what 3.14's terminate_workers() does.
    procs = list((getattr(pool, "_processes", None) or {}).values())
    if hasattr(pool, "terminate_workers"):
        pool.terminate_workers()
    else:
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            with suppress(Exception):
                proc.terminate()
    deadline = time.monotonic() + _STOP_GRACE_S
    for proc in procs:
        with suppress(Exception):
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(_STOP_GRACE_S)


def iter_process_pool(todo: Sequence[Point], jobs: int) -> Finished:
    """Yield (point, summary) as points finish on a local process pool (inline for jobs=1).

    Raises WorkerDied if a worker dies under a point, KeyboardInterrupt if it died of the
    same SIGINT/SIGTERM that is stopping the sweep."""
    if jobs <= 1 or len(todo) <= 1:
        yield from iter_serial(todo)
        return
    # Deferred interrupts for the pool's whole life: the workers are forked in here, and a signal
    # must not raise inside a fork hook (in this process or, inherited, in a new worker).
    with signals.deferred():
        pool = ProcessPoolExecutor(max_workers=min(jobs, len(todo)), initializer=init_worker,
                                   initargs=(os.getpid(),))
        drained = False
        try:
            pending = {pool.submit(run_point, p.scenario, p.mitigations): p for p in todo}
            while pending:
                finished, _ = wait(pending, timeout=INTERRUPT_POLL_S, return_when=FIRST_COMPLETED)
                signals.check()
                for fut in sorted(finished, key=lambda f: pending[f].index):
                    p = pending.pop(fut)
                    try:
                        summary = fut.result()
                    except BrokenProcessPool:
                        if signals.received():
                            raise KeyboardInterrupt from None
                        raise WorkerDied(f"a worker process died while running grid point {p.index} "
                                         "(killed by a signal or out of memory?)") from None
                    yield p, summary
            drained = True
        finally:
            if drained:
                pool.shutdown(wait=True)
            else:
                stop_workers(pool)


# Schemes whose address is HOST:PORT (distributed.comm: tcp, tls, and the websocket ones)
_HOST_PORT_SCHEMES = ("tcp", "tls", "ws", "wss")


def check_scheduler_address(address: str) -> None:
    """SweepError unless `address` reads as a Dask scheduler address ("tcp://host:8786",
    "host:8786", "tls://...", other schemes as given): a port is required and must be 1..65535.
    Checked before anything runs; an address without a port was a ValueError traceback from
    inside distributed, and one with port 99999 waited 10 s to time out."""
    option = f"--dask-scheduler {address}"
    try:
        from distributed.comm.addressing import parse_address, parse_host_port
    except ImportError:
        return  # iter_dask says that dask.distributed is missing
    try:
        scheme, loc = parse_address(address)
        if scheme not in _HOST_PORT_SCHEMES:
            return
        host, port = parse_host_port(loc)
    except (ValueError, TypeError) as exc:
        raise SweepError(option, None, f"expected a scheduler address like tcp://HOST:8786 ({exc})") from None
    if not 1 <= port <= 65535:
        raise SweepError(option, None, f"expected a port 1..65535 in the scheduler address, got {port}")


def iter_dask(todo: Sequence[Point], client=None, address: Optional[str] = None) -> Finished:
    """Yield (point, summary) as points finish on a Dask distributed cluster."""
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise SweepError(
            "--dask-scheduler", None,
            "needs dask.distributed, which is not installed (from the repository root: pip install -e '.[sweep]')",
        ) from None
    own_client = client is None
    if own_client:
        try:
            client = Client(address, timeout="10s")
        except (OSError, TimeoutError, ValueError) as exc:  # ValueError: an address distributed cannot parse
            raise SweepError(f"--dask-scheduler {address}", None, f"cannot reach the scheduler: {exc}") from None
    futures = {}
    try:
        for p in todo:
            # The fingerprint in the task key makes resubmitting the same point idempotent.
            fut = client.submit(run_point, p.scenario, p.mitigations, key=f"commsim-point-{p.key}", pure=False)
            futures[fut] = p
        for fut in as_completed(list(futures)):
            yield futures[fut], fut.result()
    finally:
        for fut in futures:
            if not fut.done():
                fut.cancel()
        if own_client:
            client.close()

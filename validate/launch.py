"""Start N local ranks of a torch.distributed job and watch them.

:func:`launch` spawns `nprocs` processes (multiprocessing "spawn": a fresh interpreter per
rank, as torchrun gives), each with MASTER_ADDR/MASTER_PORT (a free local port), RANK and
WORLD_SIZE set, an explicit backend and timeout for the process group, and the group torn
down in ``finally``. The parent watches them:

- a rank that exits with an error fails the run at once, naming the rank and its error;
- a rank that stops running (SIGSTOP, frozen, stuck holding the GIL) is named within
  `timeout_s`: every rank stamps a heartbeat from a thread of its own, which keeps beating
  while the rank waits inside a collective but not when the process itself stands still;
- a run that makes no progress for `timeout_s` seconds fails, naming the rank furthest
  behind (the others are then waiting for it inside a collective);
- Ctrl-C or SIGTERM of the launching process kills the ranks and raises
  :class:`LaunchInterrupted` with what was measured;
- whatever the outcome, every rank is killed with its whole process group (anything it
  started) before :func:`launch` returns, and on Linux the kernel kills each rank if the
  launching process dies, even by SIGKILL and even while the rank is stopped: no orphans.

Ranks report progress through :meth:`RankContext.progress`; each record is appended to a
per-rank JSON-lines file at once, so the measurements taken before a failure survive it
(:attr:`LaunchError.partial`).

A rank leaves with ``os._exit`` once its result is on disk and its process group destroyed,
without running the interpreter's shutdown. ``destroy_process_group`` does not always end a
group: importing ``torch._inductor`` while a group exists (DistributedDataParallel's
constructor does, through ``torch._dynamo``) leaves references to it that are never
released, so its gloo worker threads run on. A worker that frees a finished collective's
tensors takes the GIL, and one that does so while the interpreter shuts down is ended by
CPython from inside a C++ destructor: std::terminate ("terminate called without an active
exception", exit code -6), after the rank's results were complete.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from commsim.parentdeath import die_with_parent
from commsim.atomic import atomic_write_text
from commsim.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED

POLL_S = 0.05
SETTLE_S = 0.5
HEARTBEAT_S = 0.25  # a rank's heartbeat period
# a rank whose heartbeat is this much overdue when the run stalls is the one that stopped (a
# rank waiting in a collective keeps beating: the collective releases the GIL)
STOPPED_S = 2.0
MIN_TIMEOUT_S = 1.0
FIELDS = 3  # per rank in the shared array: progress count, last progress, last heartbeat


class LaunchError(RuntimeError):
    """The distributed run failed at run time (a rank died, hung or stopped).

    `partial` maps each rank to the records it saved before the failure; `result_dir` is
    the folder that holds them (None when nothing was kept). `exit_code` is the command
    line's code for this outcome."""

    exit_code = EXIT_RUN_FAILED

    def __init__(self, message: str, partial: Dict[int, List[Any]], result_dir: Optional[str]):
        super().__init__(message)
        self.partial = partial
        self.result_dir = result_dir

    @property
    def measured(self) -> bool:
        """Whether any rank saved a record before the run ended."""
        return any(self.partial.values())


class LaunchInterrupted(LaunchError):
    """The launching process was interrupted (Ctrl-C, SIGTERM); the ranks were killed and
    `partial` holds what they had measured."""

    exit_code = EXIT_INTERRUPTED


class _Terminated(Exception):
    """SIGTERM arrived while the launcher watched its ranks."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_timeout(timeout_s: float) -> float:
    """Process-group timeout for a launch with hang timeout `timeout_s`: half as long again."""
    return timeout_s + max(5.0, 0.5 * timeout_s)


@dataclass
class RankContext:
    """What a rank's function receives: its rank, the world size, backend and device."""

    rank: int
    world_size: int
    backend: str
    device: str
    _records: Path
    _beats: Any

    def progress(self, record: Optional[Any] = None) -> None:
        """Mark progress (resets the hang timer); a JSON-able `record` is saved at once.

        Call it before each collective: when a run hangs, the rank named is the one with the
        fewest calls, i.e. the one that never reached the collective the others wait in."""
        if record is not None:
            with open(self._records, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")
        # no lock: each rank writes only its own slots, the parent only reads them (a lock
        # held by a rank that is then stopped or killed would block the parent for good)
        base = FIELDS * self.rank
        self._beats[base] += 1.0
        self._beats[base + 1] = time.monotonic()


def _heartbeat(beats, rank: int) -> None:
    slot = FIELDS * rank + 2
    while True:
        beats[slot] = time.monotonic()
        time.sleep(HEARTBEAT_S)


def _watch_parent(parent_pid: int) -> None:
    """Exit this rank if the launching process is gone (where the kernel cannot do it)."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(3)
        time.sleep(0.5)


def _tie_to_launcher(parent_pid: int) -> None:
    """Put this rank in a process group of its own and make it die with the launcher.

    Its own group: a terminal's Ctrl-C reaches only the launcher, which decides what to
    keep, and the launcher kills the rank together with anything the rank started. On
    Linux, PR_SET_PDEATHSIG has the kernel SIGKILL the rank when the launcher dies, which
    also ends a stopped rank (no thread of its own runs then); elsewhere a thread polls."""
    try:
        os.setpgid(0, 0)
    except OSError:  # already a group leader (a rank run by hand)
        pass
    if not die_with_parent():
        threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    if os.getppid() != parent_pid:  # the launcher died before the death signal was armed
        os._exit(3)


def _rank_main(rank, nprocs, backend, port, timeout_s, fn, args, result_dir, beats, parent_pid):
    """A rank's process: tie it to the launcher, run it, leave without interpreter shutdown."""
    _tie_to_launcher(parent_pid)
    threading.Thread(target=_heartbeat, args=(beats, rank), daemon=True).start()
    status = _run_rank(rank, nprocs, backend, port, timeout_s, fn, args, result_dir, beats)
    exit_now(status)


def exit_now(status: int) -> None:
    """End this process with `status` once its output is flushed, skipping interpreter
    shutdown: torch's threads (gloo workers of a process group kept alive past
    ``destroy_process_group``) abort a process whose interpreter is shutting down when they
    next take the GIL. For rank processes whose results are already on disk."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed or replaced streams
            pass
    os._exit(status)


def _run_rank(rank, nprocs, backend, port, timeout_s, fn, args, result_dir, beats) -> int:
    """Set up the process group, run ``fn``, write its result or error; return the status."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(nprocs), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(nprocs))
    out = Path(result_dir)
    dist = None
    status = 0
    try:
        # inside the try: a rank that cannot even set up (no torch, no such GPU) is reported
        # to the parent like any other failure, as one line naming the rank
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)  # N ranks share this machine's cores: no oversubscription
        device = "cpu"
        if backend == "nccl":
            torch.cuda.set_device(rank % max(torch.cuda.device_count(), 1))
            device = f"cuda:{torch.cuda.current_device()}"
        ctx = RankContext(rank, nprocs, backend, device, out / f"rank{rank}.jsonl", beats)
        # the group's own timeout comes later than the parent's hang check, so that a hang is
        # reported as such (naming the rank behind), not as a timeout in a waiting peer
        dist.init_process_group(backend, rank=rank, world_size=nprocs,
                                timeout=datetime.timedelta(seconds=group_timeout(timeout_s)))
        ctx.progress()
        result = fn(ctx, *args)
        atomic_write_text(out / f"rank{rank}.result.json", json.dumps(result))
    except BaseException as exc:  # reported to the parent first, which names this rank
        first = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
        atomic_write_text(out / f"rank{rank}.error.txt", first + "\n" + traceback.format_exc())
        status = 1
    finally:
        # torn down whatever happened (if a dead peer makes this block, the parent kills us)
        if dist is not None and dist.is_initialized():
            dist.destroy_process_group()
    return status


def read_jsonl(path: Path) -> List[Any]:
    """The records of a rank's JSON-lines file; a last line cut by a kill ends them."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line cut by the kill
            break
    return out


def check_gpus(nprocs: int) -> None:
    """ValueError (one line) unless this machine has a CUDA GPU for each of `nprocs` ranks:
    NCCL needs one GPU per rank, and without them every rank would fail with a CUDA error
    that does not say so."""
    import torch

    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if found < nprocs:
        raise ValueError(f"--backend nccl needs {nprocs} CUDA GPU{'s' if nprocs > 1 else ''}, found {found}")


def launch(
    fn: Callable[..., Any],
    nprocs: int,
    backend: str = "gloo",
    timeout_s: float = 300.0,
    args: Sequence[Any] = (),
    result_dir: Optional[str] = None,
    startup_s: float = 120.0,
) -> List[Any]:
    """Run ``fn(ctx, *args)`` on `nprocs` local ranks; return the per-rank return values.

    `fn` must be a module-level function (it is pickled into fresh interpreters). Raises
    LaunchError naming the failing, stopped or hung rank within `timeout_s` of the last
    progress of any rank (`startup_s`, if longer, until every rank has joined the process
    group), and LaunchInterrupted on Ctrl-C or SIGTERM (SIGTERM is caught only when called
    from the main thread); either way the ranks are killed first and the error carries the
    records saved so far.

    Without `result_dir`, the records go to a new temporary folder, removed after a success
    and kept after a failure that left something in it (the LaunchError names it)."""
    if nprocs < 1:
        raise ValueError(f"nprocs must be >= 1, got {nprocs}")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be gloo or nccl, got {backend!r}")
    if not timeout_s >= MIN_TIMEOUT_S:  # a shorter one would call ranks between two heartbeats stopped
        raise ValueError(f"timeout must be at least {MIN_TIMEOUT_S:g} s, got {timeout_s:g}")
    if backend == "nccl":
        check_gpus(nprocs)
    created = result_dir is None  # ours to remove once the results are read
    result_dir = result_dir or tempfile.mkdtemp(prefix="commsim-launch-")
    out = Path(result_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank*"):
        old.unlink()
    ctx = mp.get_context("spawn")
    beats = ctx.RawArray("d", FIELDS * nprocs)  # no lock: see RankContext.progress
    port = free_port()
    procs = [
        ctx.Process(
            target=_rank_main,
            args=(r, nprocs, backend, port, timeout_s, fn, tuple(args), str(out), beats, os.getpid()),
            name=f"commsim-rank{r}",
            daemon=True,
        )
        for r in range(nprocs)
    ]
    interrupted = False
    with _sigterm_raises():
        try:
            started = time.monotonic()
            for r in range(nprocs):  # heartbeats stay 0 until a rank's own thread runs
                beats[FIELDS * r + 1] = started
            for p in procs:
                p.start()
            failure = _watch(procs, beats, timeout_s, out, startup_s, started)
        except KeyboardInterrupt:
            failure, interrupted = "interrupted (Ctrl-C)", True
        except _Terminated:
            failure, interrupted = "terminated (SIGTERM)", True
        finally:
            _stop(procs)
    partial = {r: read_jsonl(out / f"rank{r}.jsonl") for r in range(nprocs)}
    if failure:
        raise _failure(failure, partial, out, created, LaunchInterrupted if interrupted else LaunchError)
    results = [json.loads((out / f"rank{r}.result.json").read_text()) for r in range(nprocs)]
    if created:  # kept on failure only (the message names it, with the partial measurements)
        shutil.rmtree(out, ignore_errors=True)
    return results


def _failure(message: str, partial, out: Path, created: bool, kind) -> LaunchError:
    """The error for a failed run. Its message points to the folder only for what is there:
    the records ("partial measurements in DIR"), else the ranks' error reports; an empty
    folder of our own is removed and never named."""
    if any(partial.values()):
        return kind(f"{message}; partial measurements in {out}", partial, str(out))
    if any(out.glob("rank*.error.txt")):
        return kind(f"{message}; no measurements were taken (rank error reports in {out})", partial, str(out))
    if created:
        shutil.rmtree(out, ignore_errors=True)
        return kind(f"{message}; no measurements were taken", partial, None)
    return kind(f"{message}; no measurements were taken", partial, str(out))


@contextlib.contextmanager
def _sigterm_raises():
    """While the launcher watches its ranks, SIGTERM raises _Terminated (as Ctrl-C raises
    KeyboardInterrupt), so that the ranks are killed and the measurements kept. Signal
    handlers can only be set from the main thread; elsewhere SIGTERM keeps its action."""

    fired = []

    def handler(signum, frame):
        if not fired:  # once: a second SIGTERM must not cut the killing of the ranks short
            fired.append(signum)
            raise _Terminated()

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _watch(procs, beats, timeout_s: float, out: Path, startup_s: float, started: float) -> Optional[str]:
    """Wait for all ranks; return a failure message, or None when every rank succeeded."""
    n = len(procs)
    while True:
        codes = [p.exitcode for p in procs]
        errors = {r: out / f"rank{r}.error.txt" for r in range(n)}
        if any(errors[r].exists() or codes[r] not in (None, 0) for r in range(n)):
            time.sleep(SETTLE_S)  # let the consequences of the first failure show too
            return _first_failure(procs, errors)
        if all(c == 0 for c in codes):
            return None
        now = time.monotonic()
        ticks = [beats[FIELDS * r] for r in range(n)]
        last = [beats[FIELDS * r + 1] for r in range(n)]
        heart = [beats[FIELDS * r + 2] or started for r in range(n)]  # 0: its thread never ran
        # before every rank has joined the group, allow for interpreter and torch start-up
        limit = timeout_s if min(ticks) > 0 else max(timeout_s, startup_s)
        alive = [r for r in range(n) if codes[r] is None]
        if now - max(last) > limit or any(now - heart[r] > limit for r in alive):
            beat = [beats[FIELDS * r + 2] > 0 for r in range(n)]
            return _stall_message(alive, ticks, heart, beat, now, limit, [p.pid for p in procs])
        time.sleep(POLL_S)


def _stall_message(alive: List[int], ticks, heart, beat, now: float, limit: float, pids: List[int]) -> str:
    """Name the rank(s) that stopped: those whose heartbeat stopped, else those furthest
    behind in progress (the ones that never reached the collective the others wait in).
    `beat[r]`: whether rank r's heartbeat ever ran (it starts once the interpreter is up)."""
    counts = dict(enumerate(int(t) for t in ticks))
    stopped = [r for r in alive if now - heart[r] > min(limit, STOPPED_S)]
    if stopped:
        waiting = [r for r in alive if r not in stopped]
        states = ", ".join(f"rank {r}: {_process_state(pids[r]) if beat[r] else 'never started running'}"
                           for r in stopped)
        return (f"{_ranks(stopped)} stopped making progress: no heartbeat for {now - max(heart[r] for r in stopped):.1f} s "
                f"({states})" + (f"; {_ranks(waiting)} waited for {'it' if len(stopped) == 1 else 'them'}" if waiting else "")
                + f" (progress counts {counts})")
    behind = min(ticks[r] for r in alive)
    hung = [r for r in alive if ticks[r] == behind]
    return f"{_ranks(hung)} hung: no progress for {limit:g} s (progress counts {counts})"


def _ranks(ranks: List[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _process_state(pid: int) -> str:
    """What the kernel says of a rank's process (Linux /proc), for the message."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "state unknown"
    return {"T": "stopped by a signal", "t": "stopped by a debugger", "D": "blocked in the kernel",
            "Z": "exited"}.get(state, "running no Python code")


def _first_failure(procs, errors: Dict[int, Path]) -> str:
    """Name the rank whose failure caused the others. A rank that died without reporting an
    error (killed, segfault, os._exit) comes first: its peers then fail with "connection
    reset" errors that are only consequences. Otherwise the earliest reported error wins."""
    codes = [p.exitcode for p in procs]
    silent = [r for r, c in enumerate(codes) if c not in (None, 0) and not errors[r].exists()]
    if silent:
        r = silent[0]
        return f"rank {r} failed: exit code {codes[r]} (died without reporting an error)"
    reported = sorted((errors[r].stat().st_mtime, r) for r in errors if errors[r].exists())
    r = reported[0][1]
    return f"rank {r} failed: {errors[r].read_text().splitlines()[0]}"


def _stop(procs) -> None:
    """Kill every started rank with its process group (anything it started too); reap them.

    SIGKILL at once: the records are on disk already, and a stopped rank would not act on
    SIGTERM before it is continued."""
    procs = [p for p in procs if p.pid is not None]  # started ones only
    for p in procs:
        try:
            # the group outlives a rank that exited but left children; its id, the rank's
            # pid, cannot be handed to another process while the group has members
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # no such group (yet, or any more)
            pass
        p.kill()  # the rank itself, if it had not made its group yet (a no-op once reaped)
    for p in procs:
        p.join(10.0)

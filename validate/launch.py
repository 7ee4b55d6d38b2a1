"""Start N local ranks of a torch.distributed job and watch them.

:func:`launch` spawns `nprocs` processes (multiprocessing "spawn": a fresh interpreter per
rank, as torchrun gives), each with MASTER_ADDR/MASTER_PORT (a free local port), RANK and
WORLD_SIZE set, an explicit backend and timeout for the process group, and the group torn
down in ``finally``. The parent watches them:

- a rank that exits with an error fails the run at once, naming the rank and its error;
- a rank that makes no progress for `timeout_s` seconds fails the run, naming it (the
  rank furthest behind: the others are then waiting for it inside a collective);
- whatever the outcome, every child is terminated (then killed) before :func:`launch`
  returns, and each child exits by itself if its parent disappears: no orphans.

Ranks report progress through :meth:`RankContext.progress`; each record is appended to a
per-rank JSON-lines file at once, so the measurements taken before a failure survive it
(:attr:`LaunchError.partial`).
"""

from __future__ import annotations

import datetime
import json
import multiprocessing as mp
import os
import shutil
import socket
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

POLL_S = 0.05
SETTLE_S = 0.5


class LaunchError(RuntimeError):
    """The distributed run failed; `partial` holds each rank's records saved so far."""

    def __init__(self, message: str, partial: Dict[int, List[Any]], result_dir: str):
        super().__init__(message)
        self.partial = partial
        self.result_dir = result_dir


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
        with self._beats.get_lock():
            self._beats[2 * self.rank] += 1.0
            self._beats[2 * self.rank + 1] = time.monotonic()


def _watch_parent(parent_pid: int) -> None:
    """Exit this rank if the launching process is gone (no orphans even after a SIGKILL)."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(3)
        time.sleep(0.5)


def _rank_main(rank, nprocs, backend, port, timeout_s, fn, args, result_dir, beats, parent_pid):
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
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
        (out / f"rank{rank}.result.json").write_text(json.dumps(result))
    except BaseException as exc:  # reported to the parent first, which names this rank
        first = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
        (out / f"rank{rank}.error.txt").write_text(first + "\n" + traceback.format_exc())
        status = 1
    finally:
        # torn down whatever happened (if a dead peer makes this block, the parent kills us)
        if dist is not None and dist.is_initialized():
            dist.destroy_process_group()
    raise SystemExit(status)


def _read_jsonl(path: Path) -> List[Any]:
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
    LaunchError naming the failing or hung rank within `timeout_s` of the last progress of
    any rank (`startup_s`, if longer, until every rank has joined the process group).

    Without `result_dir`, the records go to a new temporary folder, removed after a success
    and kept after a failure (the LaunchError names it)."""
    if nprocs < 1:
        raise ValueError(f"nprocs must be >= 1, got {nprocs}")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be gloo or nccl, got {backend!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout_s}")
    if backend == "nccl":
        check_gpus(nprocs)
    created = result_dir is None  # ours to remove once the results are read
    result_dir = result_dir or tempfile.mkdtemp(prefix="commsim-launch-")
    out = Path(result_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank*"):
        old.unlink()
    ctx = mp.get_context("spawn")
    beats = ctx.Array("d", 2 * nprocs)
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
    started = time.monotonic()
    try:
        for p in procs:
            p.start()
        with beats.get_lock():
            for r in range(nprocs):
                beats[2 * r + 1] = started
        failure = _watch(procs, beats, timeout_s, out, startup_s)
    finally:
        _stop(procs)
    partial = {r: _read_jsonl(out / f"rank{r}.jsonl") for r in range(nprocs)}
    if failure:
        raise LaunchError(f"{failure}; partial measurements in {out}", partial, str(out))
    results = [json.loads((out / f"rank{r}.result.json").read_text()) for r in range(nprocs)]
    if created:  # kept on failure only (the message names it, with the partial measurements)
        shutil.rmtree(out, ignore_errors=True)
    return results


def _watch(procs, beats, timeout_s: float, out: Path, startup_s: float) -> Optional[str]:
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
        with beats.get_lock():
            ticks = [beats[2 * r] for r in range(n)]
            last = [beats[2 * r + 1] for r in range(n)]
        # before every rank has joined the group, allow for interpreter and torch start-up
        limit = timeout_s if min(ticks) > 0 else max(timeout_s, startup_s)
        if now - max(last) > limit:
            alive = [r for r in range(n) if codes[r] is None]
            behind = min(ticks[r] for r in alive)
            hung = [r for r in alive if ticks[r] == behind]
            names = ", ".join(map(str, hung))
            return (f"rank{'s' if len(hung) > 1 else ''} {names} hung: no progress for {limit:g} s "
                    f"(progress counts {dict(enumerate(int(t) for t in ticks))})")
        time.sleep(POLL_S)


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
    """Terminate, then kill, every child still alive; reap them all."""
    procs = [p for p in procs if p.pid is not None]  # started ones only
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 5.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5.0)

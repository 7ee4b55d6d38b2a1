"""One rank of a multi-node run, started by any launcher: the lab's (validate.multinode),
each host's own (``commsim calibrate --backend`` / ``commsim validate`` with ``--nnodes`` or
``--ranks-from-env``, through validate.multinode.launch_node), torchrun across hosts, or one
``srun`` / ``mpirun`` task per GPU.

::

    python -m validate.multinode_rank --fn validate.collectives_multi:rank_levels \\
        --args plan.json --out results/ [--backend gloo] [--timeout 300]

    # a calibration of a real cluster, run on each of 2 hosts (rank 0's host gets cal/):
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST0:29500 \\
        -m validate.multinode_rank --fn validate.collectives_multi:rank_calibrate \\
        --args '[{"out": "cal", "max_size": 67108864}]' --out records/ --backend nccl

The rank finds its place in the job from the environment, whichever launcher set it:
RANK / WORLD_SIZE / LOCAL_RANK (torchrun, validate.multinode), SLURM_PROCID / SLURM_NTASKS /
SLURM_LOCALID (srun), OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK (Open MPI), PMI_RANK /
PMI_SIZE (MPICH). MASTER_ADDR and MASTER_PORT name rank 0's host (torchrun sets them; with
srun or mpirun export them yourself) and torch's env:// rendezvous does the rest.

It runs ``fn(ctx, *args)`` (args: the JSON list in --args) with a context shaped like
validate.launch.RankContext (rank, world_size, backend, device, progress), so the existing
rank functions (collective_bench.rank_sweep, calibrate.rank_calibrate, replay.rank_replay)
run unchanged. What it writes under --out (on each host's own disk):

- rank<r>.jsonl: the records passed to ctx.progress, one JSON line each, written at once (the
  measurements taken before a failure survive it); rank<r>.beat: one byte per progress call
  (what a local launcher watches for hangs);
- rank<r>.error.txt: a failure, first line first (and the traceback); the first line also goes
  to stderr, and the exit code is 2 where the job never began (no rank in the environment, a bad
  --fn or --args), 3 where it failed after;
- results.json, on rank 0 only: every rank's return value with its host, gathered over the
  process group (no shared file system needed).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

from commsim.errors import EXIT_INPUT, EXIT_RUN_FAILED

# (rank, world size, local rank, local world size) variables of each launcher, in order of preference
_ENV = (
    ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),  # torchrun, validate.multinode
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),  # srun
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),  # MPICH / Intel MPI
)


def place_from_env(env=os.environ) -> Tuple[int, int, int, Optional[int]]:
    """(rank, world size, local rank, local world size or None) from the launcher's variables;
    ValueError (one line) when no launcher's variables are set."""
    for rank, size, local, local_size in _ENV:
        if rank in env and size in env:
            lws = env.get(local_size)
            # srun's SLURM_NTASKS_PER_NODE may read "2(x3)": only a plain number is a count
            return (int(env[rank]), int(env[size]), int(env.get(local, "0")),
                    int(lws) if lws and lws.isdigit() else None)
    raise ValueError("no rank in the environment: run under torchrun, srun, mpirun or validate.multinode "
                     "(they set RANK/WORLD_SIZE, SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE)")


def resolve(spec: str) -> Callable[..., Any]:
    """``package.module:function`` -> the function."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"--fn: expected module:function, got {spec!r}")
    return getattr(importlib.import_module(module), name)


class NodeRankContext:
    """What a rank function receives (the interface of validate.launch.RankContext)."""

    def __init__(self, rank: int, world_size: int, local_rank: int, backend: str, device: str, out: Path):
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.backend, self.device = backend, device
        self.host = socket.gethostname()
        self._records = out / f"rank{rank}.jsonl"
        self._beats = out / f"rank{rank}.beat"

    def progress(self, record: Optional[Any] = None) -> None:
        """Mark progress (a local launcher's hang timer restarts); a JSON-able `record` is saved
        at once. Call it before each collective, as with validate.launch."""
        if record is not None:
            with open(self._records, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")
        with open(self._beats, "ab") as fh:
            fh.write(b".")


def rank_sequence(ctx, tasks: List[List[Any]]) -> List[Any]:
    """Run several rank functions one after another in one job (start-up paid once): `tasks`
    is a list of ["module:function", [args...]]; returns their results in order."""
    return [resolve(spec)(ctx, *args) for spec, args in tasks]


def _watch_parent(parent_pid: int) -> None:
    """Exit if the launching process is gone (no orphans even after a SIGKILL of the launcher)."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(3)
        time.sleep(0.5)


def group_timeout(timeout_s: float) -> float:
    """The process group's own timeout: later than the launcher's hang check (see validate.launch)."""
    return timeout_s + max(5.0, 0.5 * timeout_s)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m validate.multinode_rank", description=__doc__.splitlines()[0])
    ap.add_argument("--fn", required=True, help="module:function to run on every rank")
    ap.add_argument("--args", default=None, help="the list of arguments after ctx: JSON, or a JSON file")
    ap.add_argument("--out", required=True, help="folder for this host's records (and rank 0's results.json)")
    ap.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    ap.add_argument("--timeout", type=float, default=300.0, help="hang timeout of the launcher, seconds")
    ap.add_argument("--parent-pid", type=int, default=None, help="exit when this process (the launcher) is gone")
    a = ap.parse_args(argv)
    if a.parent_pid is not None:
        threading.Thread(target=_watch_parent, args=(a.parent_pid,), daemon=True).start()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "-1"))
    dist = None
    started = False  # whether the job itself began: before it, a failure is bad input (exit 2)
    try:
        rank, world, local, _ = place_from_env()
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local))
        for var in ("MASTER_ADDR", "MASTER_PORT"):
            if var not in os.environ:
                raise ValueError(f"{var} is not set: export rank 0's host and a free port (torchrun sets both)")
        fn = resolve(a.fn)
        args = json.loads(a.args if a.args.lstrip().startswith("[") else Path(a.args).read_text(encoding="utf-8")) \
            if a.args else []
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)  # the ranks of a node share its cores
        device = "cpu"
        if a.backend == "nccl":
            torch.cuda.set_device(local % max(torch.cuda.device_count(), 1))
            device = f"cuda:{torch.cuda.current_device()}"
        ctx = NodeRankContext(rank, world, local, a.backend, device, out)
        started = True
        dist.init_process_group(a.backend, timeout=datetime.timedelta(seconds=group_timeout(a.timeout)))
        ctx.progress()
        result = fn(ctx, *args)
        ctx.progress()
        entry = {"rank": rank, "host": ctx.host, "local_rank": local, "pid": os.getpid(), "result": result}
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(entry, gathered, dst=0)
        if rank == 0:
            tmp = out / "results.json.tmp"
            tmp.write_text(json.dumps(gathered), encoding="utf-8")
            os.replace(tmp, out / "results.json")
        status = 0
    except BaseException as exc:  # one line first: the launcher names this rank with it
        first = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
        report = out / f"rank{rank}.error.txt"
        report.write_text(first + "\n" + traceback.format_exc(), encoding="utf-8")
        # also on stderr: run by hand (srun, torchrun) the rank otherwise ended with no word of why
        print(f"commsim: error: rank {rank}: {first} (traceback in {report})", file=sys.stderr, flush=True)
        status = EXIT_RUN_FAILED if started else EXIT_INPUT
    finally:
        if dist is not None and dist.is_initialized():
            dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())

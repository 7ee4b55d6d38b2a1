"""Launch a torch.distributed job across the nodes of a lab (or any hosts reachable by a
command prefix) and watch it.

:func:`launch_on` starts ``ranks_per_node`` ranks on each of `nodes` nodes (or a count per
node), numbered node-major (node 0's ranks first, as torchrun numbers them), each as
``python -m validate.multinode_rank`` inside its node with torch's env:// variables set
(MASTER_ADDR = node 0, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, GLOO_SOCKET_IFNAME): the
same rendezvous torchrun, srun or mpirun give on a real cluster, over the node's real network
interface. It watches them as validate.launch watches local ranks:

- a rank that fails or dies fails the run at once, naming the rank and its node (a rank that
  died without a word, killed or crashed, first: its peers' "connection reset" errors are only
  consequences);
- when no rank makes progress for `timeout_s` seconds the run fails naming the ranks behind:
  the ranks of nodes whose link does not answer (``hosts.unreachable``, a probe from the
  switch), else those with the fewest progress calls (the others wait in a collective for them);
- whatever happens every rank is terminated (then killed) before it returns, and a rank exits
  by itself if the launcher disappears.

The measurements recorded before a failure are in :attr:`validate.launch.LaunchError.partial`.
`hosts` is duck-typed (commsim.lab.Lab is one): ``command(node, argv)``, ``address(node)``,
``node_name(node)``, ``interface``, ``unreachable(nodes)``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from validate.launch import LaunchError, read_jsonl

POLL_S = 0.05
SETTLE_S = 0.5
KILL_GRACE_S = 5.0
REPO = Path(__file__).resolve().parents[1]


def per_node_counts(nodes: int, ranks_per_node: Union[int, Sequence[int]]) -> List[int]:
    """Ranks on each node: the same number everywhere, or one count per node."""
    counts = [int(ranks_per_node)] * nodes if isinstance(ranks_per_node, int) else [int(c) for c in ranks_per_node]
    if nodes < 1 or len(counts) != nodes or min(counts) < 1:
        raise ValueError(f"need nodes >= 1 and >= 1 rank on each of them, got {nodes} nodes, {ranks_per_node!r}")
    return counts


def placements(nodes: int, ranks_per_node: Union[int, Sequence[int]]) -> List[Tuple[int, int]]:
    """(node, local rank) of every global rank, node-major."""
    return [(k, j) for k, c in enumerate(per_node_counts(nodes, ranks_per_node)) for j in range(c)]


def rank_env(hosts, rank: int, node: int, local: int, world: int, local_world: int, port: int) -> Dict[str, str]:
    """The environment of one rank: torch's env:// rendezvous and the interface to use."""
    env = dict(os.environ)
    env.update(
        MASTER_ADDR=hosts.address(0), MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
        LOCAL_RANK=str(local), LOCAL_WORLD_SIZE=str(local_world), GROUP_RANK=str(node),
        GLOO_SOCKET_IFNAME=hosts.interface, NCCL_SOCKET_IFNAME=hosts.interface, OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]),
    )
    return env


def launch_on(hosts, fn: str, nodes: int, ranks_per_node: Union[int, Sequence[int]], backend: str = "gloo",
              timeout_s: float = 120.0,
              args: Sequence[Any] = (), result_dir: Optional[str] = None, startup_s: float = 120.0,
              on_start=None) -> List[dict]:
    """Run ``fn(ctx, *args)`` (`fn` is "module:function") on every rank; return, by rank, the
    entries rank 0 gathered: {"rank", "host", "local_rank", "pid", "result"}. `ranks_per_node`
    is one count for every node or a list with one per node.

    Raises validate.launch.LaunchError naming the failing or hung rank(s) and their node.
    Without `result_dir`, records go to a temporary folder removed after a success and kept
    (named in the error) after a failure. `on_start(ranks)`, if given, is called once every
    rank is started with [{"rank", "node", "pid"}] (tests use it to inject faults)."""
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be gloo or nccl, got {backend!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout_s}")
    counts = per_node_counts(nodes, ranks_per_node)
    where = placements(nodes, counts)
    created = result_dir is None
    out = Path(result_dir or tempfile.mkdtemp(prefix="commsim-multinode-"))
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("rank*")) + list(out.glob("results.json")):
        old.unlink()
    (out / "args.json").write_text(json.dumps(list(args)), encoding="utf-8")
    port = random.randint(20000, 29999)  # each node has a namespace of its own: any port is free there
    argv = [sys.executable, "-m", "validate.multinode_rank", "--fn", fn, "--args", str(out / "args.json"),
            "--out", str(out), "--backend", backend, "--timeout", str(timeout_s), "--parent-pid", str(os.getpid())]
    procs: List[subprocess.Popen] = []
    try:
        for r, (node, local) in enumerate(where):
            log = open(out / f"rank{r}.log", "wb")
            try:
                procs.append(subprocess.Popen(hosts.command(node, argv), cwd=str(REPO), stdout=log,
                                              stderr=subprocess.STDOUT,
                                              env=rank_env(hosts, r, node, local, len(where), counts[node], port)))
            finally:
                log.close()
        if on_start is not None:
            on_start([{"rank": r, "node": where[r][0], "pid": p.pid} for r, p in enumerate(procs)])
        failure = _watch(procs, where, hosts, out, timeout_s, startup_s)
    finally:
        _stop(procs)
    partial = {r: read_jsonl(out / f"rank{r}.jsonl") for r in range(len(where))}
    if failure:
        raise LaunchError(f"{failure}; partial measurements in {out}", partial, str(out))
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    if created:
        shutil.rmtree(out, ignore_errors=True)
    return results


def _beats(out: Path, r: int) -> Tuple[int, float]:
    """(progress calls, time of the last one) of rank r; (0, 0) before its first."""
    try:
        st = (out / f"rank{r}.beat").stat()
    except FileNotFoundError:
        return 0, 0.0
    return st.st_size, st.st_mtime


def _who(where, hosts, ranks: Sequence[int]) -> str:
    """'rank 3 (node cslab-x-n1)' / 'ranks 2, 3 (node ...)' / 'ranks 1 (node a), 2 (node b)'."""
    nodes = sorted({where[r][0] for r in ranks})
    label = "ranks" if len(ranks) > 1 else "rank"
    if len(nodes) == 1:
        return f"{label} {', '.join(map(str, ranks))} (node {hosts.node_name(nodes[0])})"
    return f"{label} " + ", ".join(f"{r} (node {hosts.node_name(where[r][0])})" for r in ranks)


def _watch(procs, where, hosts, out: Path, timeout_s: float, startup_s: float) -> Optional[str]:
    """Wait for all ranks; a failure message, or None when every rank succeeded."""
    n = len(procs)
    started = time.time()  # beat files carry wall-clock mtimes
    errors = {r: out / f"rank{r}.error.txt" for r in range(n)}
    while True:
        codes = [p.poll() for p in procs]
        if any(errors[r].exists() or codes[r] not in (None, 0) for r in range(n)):
            time.sleep(SETTLE_S)  # let the consequences of the first failure show too
            return _first_failure(procs, where, hosts, errors)
        if all(c == 0 for c in codes):
            return None
        beats = [_beats(out, r) for r in range(n)]
        ticks = [b[0] for b in beats]
        last = max([started] + [b[1] for b in beats])
        limit = timeout_s if min(ticks) > 0 else max(timeout_s, startup_s)
        if time.time() - last > limit:
            return _hang(codes, ticks, where, hosts, limit)
        time.sleep(POLL_S)


def _hang(codes, ticks, where, hosts, limit: float) -> str:
    alive = [r for r in range(len(codes)) if codes[r] is None]
    counts = dict(enumerate(ticks))
    try:
        dead_nodes = set(hosts.unreachable(sorted({where[r][0] for r in alive})))
    except Exception as exc:  # the probe is a diagnosis: its failure must not hide the hang
        dead_nodes, note = set(), f"; link probe failed: {exc}"
    else:
        note = ""
    if dead_nodes:
        hung = [r for r in alive if where[r][0] in dead_nodes]
        names = ", ".join(f"{hosts.node_name(k)} ({hosts.address(k)})" for k in sorted(dead_nodes))
        return (f"{_who(where, hosts, hung)} hung: no progress for {limit:g} s; node {names} does not answer "
                f"on the network (link down?) (progress counts {counts})")
    behind = min(ticks[r] for r in alive)
    hung = [r for r in alive if ticks[r] == behind]
    return f"{_who(where, hosts, hung)} hung: no progress for {limit:g} s (progress counts {counts}){note}"


def _first_failure(procs, where, hosts, errors: Dict[int, Path]) -> str:
    """The rank whose failure caused the others': one that died without reporting (killed,
    crashed) first, else the earliest reported error."""
    codes = [p.poll() for p in procs]
    silent = [r for r, c in enumerate(codes) if c not in (None, 0) and not errors[r].exists()]
    if silent:
        r, c = silent[0], codes[silent[0]]
        how = f"killed by {signal.Signals(-c).name}" if c < 0 else f"exit code {c}"
        return f"{_who(where, hosts, [r])} failed: {how} (died without reporting an error)"
    reported = sorted((errors[r].stat().st_mtime, r) for r in errors if errors[r].exists())
    r = reported[0][1]
    return f"{_who(where, hosts, [r])} failed: {errors[r].read_text(encoding='utf-8').splitlines()[0]}"


def _stop(procs: List[subprocess.Popen]) -> None:
    """Terminate, then kill, every rank still running (each by its own pid); reap them all."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + KILL_GRACE_S
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()

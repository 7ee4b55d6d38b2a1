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

:func:`launch_node` is the same launcher for a job whose hosts each run their own (``commsim
calibrate/validate --nnodes N --node-rank K --rdzv-endpoint HOST:PORT``, or one rank per process
under srun/mpirun): it starts and watches only this host's ranks (:class:`HostJob` says which),
and the host of rank 0 gets every rank's results.

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
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from commsim.errors import InputError
from validate.launch import LaunchError, read_jsonl
from validate.multinode_rank import place_from_env

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


class JobOptionError(InputError):
    """A bad combination of the multi-host options (--nnodes, --node-rank, --rdzv-endpoint,
    --nproc-per-node, --ranks-from-env): one line, exit code 2."""

    def __init__(self, option: str, message: str):
        super().__init__(option, None, message)


def parse_endpoint(text: str, option: str = "--rdzv-endpoint") -> Tuple[str, int]:
    """``HOST:PORT`` (``[v6addr]:PORT`` for an IPv6 address) -> (host, port)."""
    host, sep, port = str(text).rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535 or ":" in host and "[" not in text:
        raise JobOptionError(option, f"expected HOST:PORT (node 0's address and a free TCP port 1-65535), got {text!r}")
    return host, int(port)


@dataclass(frozen=True)
class HostJob:
    """This host's part of a job that spans several hosts, each running its own launcher.

    Either node `node_rank` of `nnodes` with `nproc_per_node` ranks each (ranks numbered
    node-major, as torchrun numbers them), or (``place`` set) one rank whose place srun,
    mpirun or torchrun put in this process's environment: (rank, world size, local rank,
    local world size or None). Every rank meets rank 0 at master_addr:master_port."""

    nnodes: int
    node_rank: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    place: Optional[Tuple[int, int, int, Optional[int]]] = None

    @classmethod
    def from_options(cls, nnodes: int, node_rank: Optional[int], endpoint: Optional[str],
                     nproc_per_node: Optional[int]) -> "HostJob":
        """The job of ``--nnodes N --node-rank K --rdzv-endpoint HOST:PORT --nproc-per-node P``."""
        if nnodes < 1:
            raise JobOptionError("--nnodes", f"expected at least 1 node, got {nnodes}")
        k = 0 if node_rank is None else node_rank
        if not 0 <= k < nnodes:
            raise JobOptionError("--node-rank", f"expected 0..{nnodes - 1} (one per node of --nnodes {nnodes}), got {k}")
        if node_rank is None and nnodes > 1:
            raise JobOptionError("--node-rank", f"--nnodes {nnodes} needs --node-rank K: which node this host is")
        if endpoint is None:
            raise JobOptionError("--rdzv-endpoint", f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT (node 0's "
                                 "address and a port every host can reach)")
        host, port = parse_endpoint(endpoint)
        p = 1 if nproc_per_node is None else nproc_per_node
        if p < 1:
            raise JobOptionError("--nproc-per-node", f"expected at least 1 rank per node, got {p}")
        return cls(nnodes, k, p, host, port)

    @classmethod
    def from_environment(cls, endpoint: Optional[str], env=os.environ) -> "HostJob":
        """One rank placed by the launcher's variables (validate.multinode_rank.place_from_env);
        rank 0's address from `endpoint`, else from MASTER_ADDR / MASTER_PORT."""
        try:
            place = place_from_env(env)
        except ValueError as exc:
            raise JobOptionError("--ranks-from-env", str(exc)) from None
        if endpoint is not None:
            host, port = parse_endpoint(endpoint)
        elif env.get("MASTER_ADDR") and str(env.get("MASTER_PORT", "")).isdigit():
            host, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
        else:
            raise JobOptionError("--ranks-from-env", "needs --rdzv-endpoint HOST:PORT (rank 0's host and a free "
                                 "port) or MASTER_ADDR and MASTER_PORT in the environment")
        rank, world, local, local_world = place
        if not 0 <= rank < world:
            raise JobOptionError("--ranks-from-env", f"the environment places this process at rank {rank} "
                                 f"of a world of {world}")
        per_node = local_world or 1
        return cls(max(1, world // per_node), rank // per_node, per_node, host, port, place)

    @property
    def world_size(self) -> int:
        return self.place[1] if self.place else self.nnodes * self.nproc_per_node

    @property
    def from_env(self) -> bool:
        return self.place is not None

    def local_ranks(self) -> List[Tuple[int, int, int, Optional[int]]]:
        """(global rank, local rank, world size, local world size) of each rank this host starts."""
        if self.place:
            rank, world, local, local_world = self.place
            return [(rank, local, world, local_world)]
        first = self.node_rank * self.nproc_per_node
        return [(first + j, j, self.world_size, self.nproc_per_node) for j in range(self.nproc_per_node)]

    @property
    def has_rank0(self) -> bool:
        """Whether rank 0 (which gathers every rank's results) is one of this host's."""
        return any(r == 0 for r, *_ in self.local_ranks())

    def describe(self) -> str:
        if self.place:
            return f"rank {self.place[0]} of {self.world_size} (from the launcher's environment)"
        return (f"node {self.node_rank} of {self.nnodes} x {self.nproc_per_node} rank(s), "
                f"rendezvous {self.master_addr}:{self.master_port}")


class ThisHost:
    """The `hosts` of :func:`_run_ranks` for a job launched host by host: this host's ranks run
    here, as they are; other nodes are known by number only."""

    interface = None

    def __init__(self, job: HostJob):
        self.job = job
        self.name = socket.gethostname()

    def command(self, node: int, argv: Sequence[str]) -> List[str]:
        return list(argv)

    def address(self, node: int) -> str:
        return self.job.master_addr if node == 0 else f"node {node}"

    def node_name(self, node: int) -> str:
        return self.name if node == self.job.node_rank else f"node {node}"

    def unreachable(self, nodes=None) -> List[int]:
        return []  # no view of the other hosts' links from here


def rank_env(hosts, rank: int, node: int, local: int, world: int, local_world: int, port: int) -> Dict[str, str]:
    """The environment of one rank: torch's env:// rendezvous and the interface to use."""
    env = dict(os.environ)
    env.update(
        MASTER_ADDR=hosts.address(0), MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
        LOCAL_RANK=str(local), LOCAL_WORLD_SIZE=str(local_world), GROUP_RANK=str(node),
        GLOO_SOCKET_IFNAME=hosts.interface, NCCL_SOCKET_IFNAME=hosts.interface, OMP_NUM_THREADS="1",
        PYTHONPATH=_pythonpath(env),
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
    counts = per_node_counts(nodes, ranks_per_node)
    where = placements(nodes, counts)
    port = random.randint(20000, 29999)  # each node has a namespace of its own: any port is free there
    starts = [(r, node, rank_env(hosts, r, node, local, len(where), counts[node], port))
              for r, (node, local) in enumerate(where)]
    results = _run_ranks(hosts, fn, starts, backend, timeout_s, args, result_dir, startup_s, on_start)
    return results


def launch_node(job: "HostJob", fn: str, backend: str = "gloo", timeout_s: float = 120.0, args: Sequence[Any] = (),
                result_dir: Optional[str] = None, startup_s: float = 120.0) -> Optional[List[dict]]:
    """Start this host's ranks of a job that spans several hosts (each host runs this with its
    own `job`), watch them as :func:`launch_on` does, and return what rank 0 gathered on the
    host of rank 0; None on the other hosts (they hold only their own ranks' records).

    `job` says where this host's ranks sit: node `node_rank` of `nnodes` with `nproc_per_node`
    ranks each (ranks numbered node-major, as torchrun numbers them), or, with ``from_env``,
    one rank whose place the launcher that started this process (srun, mpirun, torchrun) put
    in the environment (validate.multinode_rank.place_from_env). The ranks meet through torch's
    c10d TCPStore at the job's endpoint, which rank 0 serves: the endpoint is node 0's."""
    hosts = ThisHost(job)
    starts = []
    for r, local, world, local_world in job.local_ranks():
        env = dict(os.environ)
        env.update(MASTER_ADDR=job.master_addr, MASTER_PORT=str(job.master_port), RANK=str(r),
                   WORLD_SIZE=str(world), LOCAL_RANK=str(local), OMP_NUM_THREADS="1",
                   PYTHONPATH=_pythonpath(env))
        if local_world is not None:
            env["LOCAL_WORLD_SIZE"] = str(local_world)
        if not job.from_env:
            env["GROUP_RANK"] = str(job.node_rank)
        starts.append((r, job.node_rank, env))
    return _run_ranks(hosts, fn, starts, backend, timeout_s, args, result_dir, startup_s, None)


def _pythonpath(env: Dict[str, str]) -> str:
    """This checkout first on the ranks' path (they run ``python -m validate.multinode_rank``)."""
    return os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])


def _run_ranks(hosts, fn: str, starts: Sequence[Tuple[int, int, Dict[str, str]]], backend: str, timeout_s: float,
               args: Sequence[Any], result_dir: Optional[str], startup_s: float, on_start) -> Optional[List[dict]]:
    """Start the ranks `starts` ((global rank, node, environment) each) as
    ``python -m validate.multinode_rank`` on their nodes, watch them, stop them; return rank
    0's gathered results when rank 0 is one of them, else None."""
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be gloo or nccl, got {backend!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout_s}")
    created = result_dir is None
    out = Path(result_dir or tempfile.mkdtemp(prefix="commsim-multinode-"))
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("rank*")) + list(out.glob("results.json")):
        old.unlink()
    (out / "args.json").write_text(json.dumps(list(args)), encoding="utf-8")
    argv = [sys.executable, "-m", "validate.multinode_rank", "--fn", fn, "--args", str(out / "args.json"),
            "--out", str(out), "--backend", backend, "--timeout", str(timeout_s), "--parent-pid", str(os.getpid())]
    ranks = [r for r, _, _ in starts]
    node_of = {r: node for r, node, _ in starts}
    procs: List[subprocess.Popen] = []
    try:
        for r, node, env in starts:
            log = open(out / f"rank{r}.log", "wb")
            try:
                procs.append(subprocess.Popen(hosts.command(node, argv), cwd=str(REPO), stdout=log,
                                              stderr=subprocess.STDOUT, env=env))
            finally:
                log.close()
        if on_start is not None:
            on_start([{"rank": r, "node": node_of[r], "pid": p.pid} for r, p in zip(ranks, procs)])
        failure = _watch(procs, ranks, node_of, hosts, out, timeout_s, startup_s)
    finally:
        _stop(procs)
    partial = {r: read_jsonl(out / f"rank{r}.jsonl") for r in ranks}
    if failure:
        raise LaunchError(f"{failure}; partial measurements in {out}", partial, str(out))
    results = None
    if 0 in node_of:  # rank 0 wrote what it gathered from every rank of the job
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


def _who(node_of: Dict[int, int], hosts, ranks: Sequence[int]) -> str:
    """'rank 3 (node cslab-x-n1)' / 'ranks 2, 3 (node ...)' / 'ranks 1 (node a), 2 (node b)'."""
    nodes = sorted({node_of[r] for r in ranks})
    label = "ranks" if len(ranks) > 1 else "rank"
    if len(nodes) == 1:
        return f"{label} {', '.join(map(str, ranks))} (node {hosts.node_name(nodes[0])})"
    return f"{label} " + ", ".join(f"{r} (node {hosts.node_name(node_of[r])})" for r in ranks)


def _watch(procs, ranks: Sequence[int], node_of: Dict[int, int], hosts, out: Path, timeout_s: float,
           startup_s: float) -> Optional[str]:
    """Wait for the ranks `ranks` (global numbers, one per process of `procs`); a failure
    message, or None when every one succeeded."""
    started = time.time()  # beat files carry wall-clock mtimes
    errors = {r: out / f"rank{r}.error.txt" for r in ranks}
    while True:
        codes = dict(zip(ranks, (p.poll() for p in procs)))
        if any(errors[r].exists() or codes[r] not in (None, 0) for r in ranks):
            time.sleep(SETTLE_S)  # let the consequences of the first failure show too
            return _first_failure(procs, ranks, node_of, hosts, errors)
        if all(c == 0 for c in codes.values()):
            return None
        beats = {r: _beats(out, r) for r in ranks}
        ticks = {r: b[0] for r, b in beats.items()}
        last = max([started] + [b[1] for b in beats.values()])
        limit = timeout_s if min(ticks.values()) > 0 else max(timeout_s, startup_s)
        if time.time() - last > limit:
            return _hang(codes, ticks, node_of, hosts, limit)
        time.sleep(POLL_S)


def _hang(codes: Dict[int, Optional[int]], ticks: Dict[int, int], node_of, hosts, limit: float) -> str:
    alive = [r for r in codes if codes[r] is None]
    counts = dict(ticks)
    try:
        dead_nodes = set(hosts.unreachable(sorted({node_of[r] for r in alive})))
    except Exception as exc:  # the probe is a diagnosis: its failure must not hide the hang
        dead_nodes, note = set(), f"; link probe failed: {exc}"
    else:
        note = ""
    if dead_nodes:
        hung = [r for r in alive if node_of[r] in dead_nodes]
        names = ", ".join(f"{hosts.node_name(k)} ({hosts.address(k)})" for k in sorted(dead_nodes))
        return (f"{_who(node_of, hosts, hung)} hung: no progress for {limit:g} s; node {names} does not answer "
                f"on the network (link down?) (progress counts {counts})")
    behind = min(ticks[r] for r in alive)
    hung = [r for r in alive if ticks[r] == behind]
    return f"{_who(node_of, hosts, hung)} hung: no progress for {limit:g} s (progress counts {counts}){note}"


def _first_failure(procs, ranks: Sequence[int], node_of, hosts, errors: Dict[int, Path]) -> str:
    """The rank whose failure caused the others': one that died without reporting (killed,
    crashed) first, else the earliest reported error."""
    codes = dict(zip(ranks, (p.poll() for p in procs)))
    silent = [r for r in ranks if codes[r] not in (None, 0) and not errors[r].exists()]
    if silent:
        r, c = silent[0], codes[silent[0]]
        how = f"killed by {signal.Signals(-c).name}" if c < 0 else f"exit code {c}"
        return f"{_who(node_of, hosts, [r])} failed: {how} (died without reporting an error)"
    reported = sorted((errors[r].stat().st_mtime, r) for r in errors if errors[r].exists())
    r = reported[0][1]
    return f"{_who(node_of, hosts, [r])} failed: {errors[r].read_text(encoding='utf-8').splitlines()[0]}"


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

"""A cluster in a box: N "nodes" (network namespaces) on one switch, with shaped links.

::

    node k (netns cslab-<name>-n<k>)            switch (netns cslab-<name>-sw)
      lo            the intra-node level          br0  10.77.0.254/24
      eth0 10.77.0.<k+1>/24  <== veth pair ==>    p<k> (a port of br0)
        egress: netem delay -> tbf rate           egress (towards node k): tbf rate

Each node's link is a full-duplex "NIC" of the node's rate: ``tbf`` shapes both directions (the
node's eth0 for what it sends, its switch port for what it receives) and ``netem`` adds the
one-way delay on the way out. Ranks on one node talk over the node's loopback, unshaped (the
fast intra-node level); ranks on different nodes cross two shaped veths and the bridge (the
network level). A slow node's link is shaped at its own, lower rate in both directions, as the
simulator's ``slow_link`` with ``node: k`` slows both ring hops through that node's network.

Everything, the bridge included, lives in namespaces the lab creates: the host's interfaces,
routes and addresses are never touched. :meth:`Lab.down` removes it all (processes still in
the namespaces first, so that no namespace outlives its name); ``with Lab(spec):`` and
:func:`signals_raise` make sure it runs after an error, Ctrl-C or SIGTERM too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from dataclasses import replace
from typing import Dict, Iterator, List, Optional, Sequence

from commsim.lab import commands
from commsim.lab.commands import ip, tc
from commsim.lab.spec import (BRIDGE, MTU, NODE_IFACE, PREFIX, PREFIX_LEN, SWITCH_ADDRESS, LabError, LabSpec,
                              check_name, tc_rate)
from commsim.lab.state import read_spec, remove_state, write_state

# tbf bucket: at least 16 KiB (a few MTU-sized packets, and a GSO burst segmented by tbf), or
# 1 ms at the rate; a bigger bucket would let small messages through at wire speed and hide
# the shaped rate below a few tens of kB.
MIN_BURST_BYTES = 16 * 1024
BURST_S = 1e-3
# queue limits, in seconds at the rate (at least 64 KiB). A node's own egress queue is deep:
# TCP's small-queue limit (4 MB here) decides how much a socket queues below it, and a drop
# there only makes TCP back off (8% of the rate lost at 50 ms). A switch port is shallow, as a
# switch's buffer is: a longer queue only adds delay in front of small messages.
HOST_QUEUE_S = 0.2
SWITCH_QUEUE_S = 0.05
MIN_QUEUE_BYTES = 64 * 1024
PROBE_PORT = 9  # "discard": nothing listens there, so a live node answers with a reset
PROBE_TIMEOUT_S = 1.0
KILL_GRACE_S = 2.0

# The probe: run inside the switch namespace; prints the addresses that did not answer.
_PROBE = r"""
import socket, sys, threading
port, timeout, addrs = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
dead = []
def probe(a):
    s = socket.socket(); s.settimeout(timeout)
    try:
        s.connect((a, port))
    except ConnectionRefusedError:
        return
    except OSError:
        dead.append(a)
    finally:
        s.close()
ts = [threading.Thread(target=probe, args=(a,)) for a in addrs]
[t.start() for t in ts]; [t.join() for t in ts]
print(" ".join(sorted(dead)))
"""

# Run a command inside a node with the node's name as host name (a UTS namespace of its own):
# the ranks then report their node as their host, as on a real cluster.
_SET_HOSTNAME = "import os, socket, sys; socket.sethostname(sys.argv[1]); os.execvp(sys.argv[2], sys.argv[2:])"


def shaping_commands(rate_bps: float, delay_s: float, dev: str, netns: str, host: bool) -> List[List[str]]:
    """The tc commands that shape `dev`'s egress: on a node (`host`), netem (the delay, if any)
    over tbf (the rate) with a host's queue; on a switch port, tbf with a switch's queue."""
    rate_Bps = rate_bps / 8.0
    burst = int(max(MIN_BURST_BYTES, rate_Bps * BURST_S))
    limit = int(max(MIN_QUEUE_BYTES, rate_Bps * (HOST_QUEUE_S if host else SWITCH_QUEUE_S)))
    tbf = ["tbf", "rate", tc_rate(rate_bps), "burst", str(burst), "limit", str(limit)]
    base = ["tc", "-n", netns, "qdisc", "add", "dev", dev]
    if host and delay_s > 0:
        return [base + ["root", "handle", "1:", "netem", "delay", f"{delay_s * 1e6:.0f}us"],
                base + ["parent", "1:1", "handle", "10:"] + tbf]
    return [base + ["root", "handle", "1:"] + tbf]


def _check_netem(netns: str) -> None:
    """LabUnavailable unless tc's netem qdisc (the delay) exists in this kernel: tried on the
    loopback of a namespace of ours, then removed."""
    done = tc("qdisc", "add", "dev", "lo", "root", "netem", "delay", "1us", netns=netns, check=False)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise commands.LabUnavailable(
            "--latency needs tc's netem qdisc (kernel option CONFIG_NET_SCH_NETEM), which this kernel has not got "
            f"({said[0] if said else 'tc failed'}); use --latency 0: the links keep their own latency")
    tc("qdisc", "del", "dev", "lo", "root", netns=netns, check=False)


class Lab:
    """One lab. ``Lab(spec).up()`` builds it, :meth:`down` removes it; as a context manager it
    does both (and tears down after an exception, KeyboardInterrupt included)."""

    def __init__(self, spec: LabSpec):
        self.spec = spec

    # -- building and removing ------------------------------------------------------------
    @classmethod
    def attach(cls, name: str) -> "Lab":
        """The running lab called `name` (from its state file); LabError when there is none."""
        spec = read_spec(name)
        if spec is None:
            raise LabError("--name", None, f"no lab {name!r} is up (no state file); start one with `commsim lab up`")
        return cls(spec)

    def is_up(self) -> bool:
        return any(ns.startswith(self.spec.prefix) for ns in commands.list_namespaces())

    def up(self) -> "Lab":
        """Create the namespaces, the bridge, every node's veth pair and shaping. On any failure
        (KeyboardInterrupt too) whatever was created is removed before the error propagates."""
        commands.preflight()
        left = sorted(ns for ns in commands.list_namespaces() if ns.startswith(self.spec.prefix))
        if left:
            raise LabError("--name", None, f"lab {self.spec.name!r} is already up ({', '.join(left)}); "
                           f"remove it with `commsim lab down --name {self.spec.name}`")
        write_state(self.spec, created=time.time())  # first: a crash from here on is found by down
        try:
            sw = self.spec.switch
            ip("netns", "add", sw)
            ip("link", "set", "lo", "up", netns=sw)
            ip("link", "add", BRIDGE, "mtu", str(MTU), "type", "bridge", netns=sw)
            ip("addr", "add", f"{SWITCH_ADDRESS}/{PREFIX_LEN}", "dev", BRIDGE, netns=sw)
            ip("link", "set", BRIDGE, "up", netns=sw)
            if self.spec.delay_s > 0:
                _check_netem(sw)
            for k in range(self.spec.nodes):
                self._add_node(k)
        except BaseException:
            self.down()
            raise
        return self

    def _add_node(self, k: int) -> None:
        ns, sw, port = self.spec.namespace(k), self.spec.switch, self.spec.port(k)
        ip("netns", "add", ns)
        # created from inside the switch namespace, the peer straight into the node's: neither
        # end ever exists in the host's namespace
        ip("link", "add", port, "mtu", str(MTU), "type", "veth", "peer", "name", NODE_IFACE, "mtu", str(MTU),
           "netns", ns, netns=sw)
        ip("link", "set", port, "master", BRIDGE, netns=sw)
        ip("link", "set", port, "up", netns=sw)
        ip("link", "set", "lo", "up", netns=ns)
        ip("addr", "add", f"{self.spec.address(k)}/{PREFIX_LEN}", "dev", NODE_IFACE, netns=ns)
        ip("link", "set", NODE_IFACE, "up", netns=ns)
        self._shape(k, self.spec.rate(k))

    def _shape(self, k: int, rate_bps: float) -> None:
        ns, sw, port = self.spec.namespace(k), self.spec.switch, self.spec.port(k)
        for netns, dev, host in ((ns, NODE_IFACE, True), (sw, port, False)):
            tc("qdisc", "del", "dev", dev, "root", netns=netns, check=False)  # none yet: fine
            for argv in shaping_commands(rate_bps, self.spec.delay_s, dev, netns, host):
                commands.run(argv)

    def down(self) -> List[str]:
        """Remove everything of this lab: processes inside its namespaces, the namespaces (and
        with them every veth, the bridge and every qdisc), the state file. Returns the
        namespaces removed. Safe to call any number of times."""
        return teardown(self.spec.prefix, names=self.spec.namespaces(), state_name=self.spec.name)

    def __enter__(self) -> "Lab":
        if not self.is_up():
            self.up()
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    # -- changing links -------------------------------------------------------------------
    def set_rate(self, node: int, rate_bps: Optional[float]) -> None:
        """Shape node `node`'s link (both directions) at `rate_bps`; None: back to the lab's rate."""
        self.spec.check_node(node)
        slow: Dict[int, float] = dict(self.spec.slow)
        if rate_bps is None:
            slow.pop(node, None)
        else:
            slow[node] = float(rate_bps)
        spec = replace(self.spec, slow=slow)  # validates the rate
        self._shape(node, spec.rate(node))
        self.spec = spec
        write_state(self.spec)

    def cut(self, node: int) -> None:
        """Cut node `node`'s cable at the switch (its port down): the node keeps its loopback,
        the rest of the lab stops hearing from it, and it from them."""
        ip("link", "set", self.spec.port(node), "down", netns=self.spec.switch)

    def mend(self, node: int) -> None:
        """Undo :meth:`cut`."""
        ip("link", "set", self.spec.port(node), "up", netns=self.spec.switch)

    # -- using it -------------------------------------------------------------------------
    def address(self, node: int) -> str:
        return self.spec.address(node)

    @property
    def interface(self) -> str:
        """The interface the nodes talk to each other over (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME)."""
        return NODE_IFACE

    def node_name(self, node: int) -> str:
        return self.spec.namespace(node)

    def command(self, node: int, argv: Sequence[str]) -> List[str]:
        """`argv` run inside node `node` (its network namespace, its host name)."""
        ns = self.spec.namespace(node)
        return ["ip", "netns", "exec", ns, "unshare", "--uts", "--", sys.executable, "-c", _SET_HOSTNAME, ns] + list(argv)

    def unreachable(self, nodes: Optional[Sequence[int]] = None, timeout_s: float = PROBE_TIMEOUT_S) -> List[int]:
        """Nodes whose address does not answer a TCP connection attempt from the switch within
        `timeout_s` (a live node refuses it at once): a cut or dead link."""
        nodes = list(range(self.spec.nodes)) if nodes is None else list(nodes)
        addrs = {self.spec.address(k): k for k in nodes}
        done = commands.run(["ip", "netns", "exec", self.spec.switch, sys.executable, "-c", _PROBE,
                             str(PROBE_PORT), str(timeout_s)] + list(addrs), timeout_s=timeout_s + 30)
        return sorted(addrs[a] for a in done.stdout.split())

    def qdiscs(self, node: int) -> str:
        """tc's view of node `node`'s shaping (both ends), for status and tests."""
        a = tc("-s", "qdisc", "show", "dev", NODE_IFACE, netns=self.spec.namespace(node)).stdout
        b = tc("-s", "qdisc", "show", "dev", self.spec.port(node), netns=self.spec.switch).stdout
        return a + b


def _kill(pids: Sequence[int]) -> None:
    """SIGTERM, then SIGKILL after a grace period, the given processes (all started in the lab)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            return
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline and any(_running(p) for p in alive):
            time.sleep(0.05)
        pids = [p for p in alive if _running(p)]


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def teardown(prefix: str, names: Sequence[str] = (), state_name: Optional[str] = None) -> List[str]:
    """Remove every namespace called ``prefix*`` (and the `names` given), after killing the
    processes inside; remove the state file `state_name`. Returns the namespaces removed."""
    if not prefix.startswith(PREFIX):
        raise ValueError(f"refusing to remove namespaces outside the lab's prefix {PREFIX!r}: {prefix!r}")
    if state_name is not None:
        check_name(state_name)  # before anything is removed (state_path would refuse it after)
    present = commands.list_namespaces()
    victims = sorted({ns for ns in present if ns.startswith(prefix)} | {ns for ns in names if ns in present})
    for ns in victims:
        _kill(commands.namespace_pids(ns))
    for ns in victims:
        commands.ip("netns", "del", ns, check=False)
    if state_name is not None:
        remove_state(state_name)
    still = [ns for ns in commands.list_namespaces() if ns in victims]
    if still:
        raise commands.CommandError(f"could not remove namespaces {', '.join(still)}")
    return victims


def leftovers(prefix: str = PREFIX) -> List[str]:
    """Namespaces with the lab prefix that exist now (what a crashed run may have left)."""
    return [ns for ns in commands.list_namespaces() if ns.startswith(prefix)]


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Inside: SIGTERM and SIGHUP raise KeyboardInterrupt (as SIGINT does), so that the
    ``finally`` that tears the lab down runs for them too. Main thread only; elsewhere a no-op.

    The three are also unblocked: a signal mask is inherited across fork and exec, so a process
    started by a supervisor that blocks SIGTERM would otherwise never see it (a handler does not
    unblock), and the lab would outlive the SIGTERM meant to remove it. (An inherited SIG_IGN for
    SIGINT, as a shell gives a background job, is kept: that is the shell's choice.)"""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for s, h in old.items():
            signal.signal(s, h)

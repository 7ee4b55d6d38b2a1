"""The testbed itself (no torch): built and removed without a trace, after a failure, Ctrl-C,
SIGTERM or a killed run too; the links run at the shaped rate; without root it says so."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commsim.lab import CommandError, Lab, LabSpec, commands, leftovers
from commsim.lab.testbed import teardown
from commsim.lab.state import state_path
from commsim.lab.stream import stream_rate

REPO = Path(__file__).resolve().parents[2]
# 9000-byte frames: 8948 bytes of TCP payload (20 B IP, 32 B TCP with timestamps) per 9014 on the wire
PAYLOAD_SHARE = 8948 / 9014
HOLDER_EXIT_S = 120.0


def host_view():
    """What the host's own namespace looks like: links, addresses, routes, qdiscs."""
    return [commands.run(argv).stdout for argv in (["ip", "-o", "link"], ["ip", "-o", "addr"], ["ip", "route"],
                                                    ["tc", "qdisc", "show"])]


def running(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(prefix, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while leftovers(prefix) and time.monotonic() < deadline:
        time.sleep(0.1)
    return leftovers(prefix)


@pytest.mark.lab
def test_up_builds_the_nodes_and_down_leaves_the_host_as_it_was(lab_name):
    before = host_view()
    spec = LabSpec(nodes=3, rate_bps=200e6, name=lab_name, slow={2: 100e6})
    with Lab(spec) as lab:
        assert sorted(leftovers(spec.prefix)) == sorted(spec.namespaces())
        assert state_path(lab_name).exists()
        addr = commands.ip("-o", "addr", "show", "dev", "eth0", netns=spec.namespace(1)).stdout
        assert "10.77.0.2/24" in addr
        qd = lab.qdiscs(2)
        assert qd.count("tbf") == 2 and "rate 100Mbit" in qd  # both ends of the slow node's link
        assert "rate 200Mbit" in lab.qdiscs(0)
        hostname = subprocess.run(lab.command(1, ["hostname"]), capture_output=True, text=True, check=True).stdout
        assert hostname.strip() == spec.namespace(1)
        assert lab.unreachable() == []
        lab.cut(1)
        assert lab.unreachable() == [1]
        lab.mend(1)
        assert host_view() == before  # nothing of the lab in the host's namespace, even while up
    assert leftovers(spec.prefix) == []
    assert not state_path(lab_name).exists()
    assert host_view() == before


@pytest.mark.lab
def test_a_failing_up_removes_what_it_made(lab_name, monkeypatch):
    spec = LabSpec(nodes=3, rate_bps=100e6, name=lab_name)
    real = Lab._shape

    def failing(self, k, rate):
        if k == 1:
            raise CommandError("injected: tc failed on node 1")
        return real(self, k, rate)

    monkeypatch.setattr(Lab, "_shape", failing)
    with pytest.raises(CommandError, match="injected"):
        Lab(spec).up()
    assert leftovers(spec.prefix) == []
    assert not state_path(lab_name).exists()


HOLDER = """
import faulthandler, signal, subprocess, sys, time
from commsim.lab import Lab, LabSpec, signals_raise
faulthandler.register(signal.SIGUSR1, file=open(sys.argv[2], "w"), all_threads=True)  # where it is, if it hangs
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal: a background job's pytest ignores it
lab = Lab(LabSpec(nodes=2, rate_bps=100e6, name=sys.argv[1]))
with signals_raise(), lab:
    p = subprocess.Popen(lab.command(1, ["sleep", "300"]))
    print(p.pid, flush=True)
    time.sleep(300)
"""


def _block_signals():
    # what a supervisor that blocks them passes on: a signal mask survives fork and exec
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


def start_holder(name, stacks, code=HOLDER, blocked=False):
    proc = subprocess.Popen([sys.executable, "-c", code, name, str(stacks)], cwd=str(REPO), stdout=subprocess.PIPE,
                            text=True, start_new_session=True, env=dict(os.environ, PYTHONPATH=str(REPO)),
                            preexec_fn=_block_signals if blocked else None)
    inner = int(proc.stdout.readline())
    assert running(inner)
    return proc, inner


@pytest.mark.lab
@pytest.mark.parametrize("blocked", [False, True], ids=["plain", "inherited-mask"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_tear_everything_down(lab_name, sig, blocked, tmp_path):
    """Also when the holder's parent had the signals blocked (the mask is inherited; a handler
    alone does not unblock one): signals_raise unblocks them."""
    stacks = tmp_path / "holder-stacks.txt"
    proc, inner = start_holder(lab_name, stacks, blocked=blocked)
    prefix = f"cslab-{lab_name}-"
    assert len(leftovers(prefix)) == 3
    proc.send_signal(sig)
    try:
        # Teardown takes well under a second here; the limit is generous because each `ip` call
        # may wait on the kernel's (global) rtnl lock when a shared host is busy with namespaces.
        proc.wait(timeout=HOLDER_EXIT_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # faulthandler: every thread's stack into `stacks`
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        teardown(prefix)
        pytest.fail(f"the holder was still running {HOLDER_EXIT_S:g} s after {sig.name}; where it was:\n"
                    + (stacks.read_text() if stacks.exists() else "(no stack written)"))
    assert wait_gone(prefix) == []
    assert not running(inner)  # the process running inside the node went with it
    assert not state_path(lab_name).exists()


@pytest.mark.lab
def test_down_removes_what_a_killed_run_left(lab_name, tmp_path):
    proc, inner = start_holder(lab_name, tmp_path / "holder-stacks.txt")
    prefix = f"cslab-{lab_name}-"
    os.kill(proc.pid, signal.SIGKILL)  # no finally, no handler: everything stays
    proc.wait(timeout=10)
    assert len(leftovers(prefix)) == 3 and running(inner)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    status = subprocess.run([sys.executable, "-m", "commsim.cli", "lab", "status", "--name", lab_name],
                            cwd=str(REPO), capture_output=True, text=True, env=env)
    assert status.returncode == 0 and "1 processes" in status.stdout
    down = subprocess.run([sys.executable, "-m", "commsim.cli", "lab", "down", "--name", lab_name],
                          cwd=str(REPO), capture_output=True, text=True, env=env)
    assert down.returncode == 0, down.stderr
    assert f"removed {prefix}n0" in down.stdout
    assert leftovers(prefix) == [] and not running(inner)
    again = subprocess.run([sys.executable, "-m", "commsim.cli", "lab", "down", "--name", lab_name],
                           cwd=str(REPO), capture_output=True, text=True, env=env)
    assert again.returncode == 0 and again.stdout.strip() == "nothing to remove"


def test_without_the_capabilities_it_says_what_is_missing(lab_name):
    """Runs everywhere: as root with the capabilities dropped (setpriv), else as is (not root)."""
    argv = [sys.executable, "-m", "commsim.cli", "lab", "up", "--nodes", "2", "--name", lab_name]
    if not commands.missing():  # this process could build a lab: drop what it needs
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv (util-linux) to run without CAP_NET_ADMIN")
        argv = ["setpriv", "--inh-caps=-net_admin,-sys_admin", "--bounding-set=-net_admin,-sys_admin", "--"] + argv
    done = subprocess.run(argv, cwd=str(REPO), capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 3
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "CAP_NET_ADMIN" in lines[0] and "Traceback" not in done.stderr
    assert leftovers(f"cslab-{lab_name}-") == []


@pytest.mark.lab
def test_links_run_at_the_shaped_rate_and_a_slow_node_at_its_own(lab_name):
    rate = 100e6
    with Lab(LabSpec(nodes=3, rate_bps=rate, name=lab_name, slow={2: rate / 2})) as lab:
        fast = stream_rate(lab, 0, 1)
        into_slow = stream_rate(lab, 0, 2)
        out_of_slow = stream_rate(lab, 2, 1)
    # the shaper counts whole frames: the payload gets PAYLOAD_SHARE of the rate, at most
    assert 0.9 * rate * PAYLOAD_SHARE < fast < 1.01 * rate
    for slow in (into_slow, out_of_slow):  # shaped both ways
        assert 0.45 < slow / fast < 0.55

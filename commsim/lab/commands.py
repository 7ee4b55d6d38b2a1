"""The two tools the lab drives, ``ip`` (iproute2) and ``tc``, and what they need.

Every call goes through :func:`run`, which raises :class:`CommandError` with one line (the
command and the first line of its stderr) when the tool fails. :func:`preflight` says, in one
line, what this machine lacks for a lab: the tools, root or CAP_NET_ADMIN, or network
namespaces themselves (a container without them).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from typing import List, Optional, Sequence

CAP_NET_ADMIN = 12  # linux/capability.h
CAP_SYS_ADMIN = 21  # `ip netns add` bind-mounts the namespace under /run/netns
TIMEOUT_S = 30.0


class CommandError(RuntimeError):
    """`ip` or `tc` failed (the message is one line: the command, then what it said)."""


class LabUnavailable(RuntimeError):
    """This machine cannot host a lab (one line saying what is missing)."""


def run(argv: Sequence[str], check: bool = True, timeout_s: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run a tool, capture its output; CommandError (one line) on failure when `check`."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise CommandError(f"{argv[0]}: command not found") from None
    except subprocess.TimeoutExpired:
        raise CommandError(f"`{shlex.join(argv)}` did not finish within {timeout_s:g} s") from None
    if check and done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise CommandError(f"`{shlex.join(argv)}` failed: {said[0] if said else f'exit code {done.returncode}'}")
    return done


def ip(*args: str, netns: Optional[str] = None, check: bool = True) -> subprocess.CompletedProcess:
    """``ip [-n NETNS] ARGS``."""
    return run(["ip"] + (["-n", netns] if netns else []) + list(args), check=check)


def tc(*args: str, netns: Optional[str] = None, check: bool = True) -> subprocess.CompletedProcess:
    """``tc [-n NETNS] ARGS``."""
    return run(["tc"] + (["-n", netns] if netns else []) + list(args), check=check)


def effective_capabilities(status_path: str = "/proc/self/status") -> Optional[int]:
    """The CapEff bit mask of this process (None where /proc does not say)."""
    try:
        with open(status_path, encoding="ascii") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        return None
    return None


def missing(caps: Optional[int] = None, which=shutil.which) -> List[str]:
    """What this machine lacks for a lab, as short phrases (empty: nothing)."""
    out = []
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("unshare", "util-linux")):
        if which(tool) is None:
            out.append(f"the `{tool}` command ({package})")
    caps = effective_capabilities() if caps is None else caps
    if caps is None:
        if os.geteuid() != 0:
            out.append("root (or CAP_NET_ADMIN and CAP_SYS_ADMIN)")
    else:
        for bit, name in ((CAP_NET_ADMIN, "CAP_NET_ADMIN"), (CAP_SYS_ADMIN, "CAP_SYS_ADMIN")):
            if not caps >> bit & 1:
                out.append(f"{name} (run as root)")
    return out


def preflight() -> None:
    """LabUnavailable (one line naming everything missing) unless a lab can be built here."""
    lacking = missing()
    if lacking:
        raise LabUnavailable("the lab needs " + ", ".join(lacking) + "; this process has not got it")


def list_namespaces() -> List[str]:
    """Names of the network namespaces `ip netns` knows (no ids, no annotations)."""
    done = ip("netns", "list", check=False)
    if done.returncode != 0:
        return []
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def namespace_pids(netns: str) -> List[int]:
    """Processes running inside `netns`."""
    done = ip("netns", "pids", netns, check=False)
    if done.returncode != 0:
        return []
    return [int(tok) for tok in done.stdout.split() if tok.isdigit()]

"""Shared by the sweep tests: a tiny scenario, the results files, a real `commsim sweep` process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[3]

TINY = textwrap.dedent(
    """\
    name: tiny
    steps: 4
    seed: 7
    cluster:
      nodes: 2
      gpus_per_node: 2
      intra_node: {bandwidth: 100 GB/s, latency: 2 us}
      inter_node: {bandwidth: 100 Gbps, latency: 5 us}
    model: {parameters: 2e6}
    compute: {forward: 2 ms, backward: 4 ms}
    ddp: {bucket_cap: 4 MB}
    stragglers:
      - {kind: jitter, cv: 0.05}
    """
)


def files(out: Path):
    """The bytes of results.csv and results.json."""
    return (out / "results.csv").read_bytes(), (out / "results.json").read_bytes()


def start_sweep(args: Sequence[str], **kwargs) -> subprocess.Popen:
    """`python -m commsim.cli sweep ARGS` from this checkout, in its own session (so a test can
    clean up the whole process group whatever happens)."""
    return subprocess.Popen([sys.executable, "-m", "commsim.cli", "sweep", *args], cwd=ROOT,
                            start_new_session=True, **kwargs)


# `commsim sweep ARGS` that, once it holds the directory's lock and before it runs a point,
# prints "locked" and waits for a line on stdin: a test can then act while the lock is
# certainly held, with no timing involved.
_GATED = """\
import sys
from commsim.sweep import run
from commsim.cli.main import main

_run_points = run._run_points

def gated(*args, **kwargs):
    print("locked", flush=True)
    sys.stdin.readline()
    return _run_points(*args, **kwargs)

run._run_points = gated
main(args=["sweep", *sys.argv[1:]], prog_name="commsim")
"""


def start_gated_sweep(args: Sequence[str]) -> subprocess.Popen:
    """Start a gated sweep (see _GATED) and return once it holds the lock."""
    proc = subprocess.Popen([sys.executable, "-c", _GATED, *args], cwd=ROOT, start_new_session=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if line != "locked\n":
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"the gated sweep did not take the lock: {line!r} {err}")
    return proc


def run_sweep_process(args: Sequence[str], timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Run `python -m commsim.cli sweep ARGS` from this checkout to the end; text output captured."""
    return subprocess.run([sys.executable, "-m", "commsim.cli", "sweep", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def poll(condition: Callable[[], bool], timeout: float = 60.0, what: str = "condition",
         proc: Optional[subprocess.Popen] = None) -> None:
    """Wait until `condition()` holds (checking every 10 ms), failing after `timeout` s or when
    `proc` has exited first."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the sweep exited ({proc.returncode}) before: {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for: {what}")
        time.sleep(0.01)


def _stat_fields(pid: int) -> Optional[List[str]]:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    return text[text.rindex(")") + 2:].split()


def children(pid: int) -> List[int]:
    """Live child processes of `pid` (Linux /proc)."""
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields and fields[1] == str(pid) and fields[0] != "Z":
                kids.append(int(entry))
    return kids


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie no one has reaped yet counts as gone)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def kill_session(proc: subprocess.Popen) -> None:
    """Clean-up: SIGKILL the process group of a sweep started by start_sweep."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass

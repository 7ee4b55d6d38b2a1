"""One sweep per output directory: an exclusive lock on ``DIR/sweep.lock`` for the whole run.

The lock is a kernel ``flock`` (through :mod:`filelock`), so it goes away with its holder,
however that ends (a crash, SIGKILL): there is never a stale lock to remove by hand. While
held, the file names the holder (``pid 1234 on host``) for the message a second sweep gets.
Forked pool workers do not keep it: filelock closes the descriptor in a forked child.
"""

from __future__ import annotations

import os
import socket
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout

from commsim.sweep.errors import SweepError, SweepLocked, os_error_text

LOCK_FILE = "sweep.lock"

# The holder writes its name right after taking the lock; a second sweep that fails to take
# it in that instant waits this long at most for the name to appear.
_HOLDER_WAIT_S = 2.0
_HOLDER_POLL_S = 0.01


def holder_text() -> str:
    """How this process names itself in the lock file."""
    return f"pid {os.getpid()} on {socket.gethostname()}"


def _write_holder(fd: int) -> None:
    data = (holder_text() + "\n").encode()
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, data)


def read_holder(path: Path) -> str:
    """The holder recorded in a lock file, waiting briefly for one that has just been taken."""
    deadline = time.monotonic() + _HOLDER_WAIT_S
    while True:
        try:
            text = path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            text = ""
        if text or time.monotonic() >= deadline:
            return text.splitlines()[0] if text else "holder unknown"
        time.sleep(_HOLDER_POLL_S)


@contextmanager
def sweep_lock(out_dir: Path) -> Iterator[Path]:
    """Hold the output directory's lock for the body; SweepLocked if another sweep holds it."""
    path = Path(out_dir) / LOCK_FILE
    # on_acquired writes the holder through the locked descriptor itself. No soft fallback: on a
    # filesystem without flock a directory cannot be locked, and saying so beats two writers.
    lock = FileLock(path, timeout=0, on_acquired=_write_holder)
    try:
        lock.acquire()
    except Timeout:
        raise SweepLocked(out_dir, read_holder(path)) from None
    except OSError as exc:
        raise SweepError(f"-o {out_dir}", LOCK_FILE, f"cannot lock the output directory: {os_error_text(exc)}") from None
    try:
        yield path
    finally:
        # Forget the holder before letting go, so no later reader names a finished sweep.
        with suppress(OSError):
            os.truncate(path, 0)
        lock.release()

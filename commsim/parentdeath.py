"""Child processes that end with their parent: the kernel's parent-death signal (Linux).

Used by the sweep's pool workers and the validator's ranks, so that a parent killed with
SIGKILL leaves no orphan holding files or ports open.
"""

from __future__ import annotations

import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies; False where it cannot
    (not Linux, no libc prctl): the caller then watches its parent itself."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False

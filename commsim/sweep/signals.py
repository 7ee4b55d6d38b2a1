"""Ctrl-C and SIGTERM stop a sweep the same way, never in the middle of saving a point.

Inside :func:`interrupts_handled`, SIGINT and SIGTERM raise ``KeyboardInterrupt`` in the main
thread, so a ``kill`` (a batch scheduler's time limit, ``systemctl stop``) saves what finished
exactly like Ctrl-C does. Inside :func:`deferred` blocks a signal only marks itself pending; it
is raised when the block ends, or where the code in the block calls :func:`check`. Deferred are:
appending a record to the journal and counting it (so the journal and the results never
disagree about a point), and the whole life of a process pool. A KeyboardInterrupt raised by a
handler that runs inside a fork hook or a finalizer is printed and swallowed by Python ("Exception
ignored in ..."), which lost the interrupt and could leave a lock held; the pool instead waits
in short slices and calls check() between them.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

_SIGNALS = tuple(s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None)) if s is not None)


class _State:
    depth = 0          # nesting of deferred() blocks
    pending = False    # a signal arrived inside one
    received = False   # any signal arrived while the handlers were installed


def _handler(signum, frame) -> None:
    _State.received = True
    if _State.depth:
        _State.pending = True
        return
    raise KeyboardInterrupt


def received() -> bool:
    """Whether SIGINT or SIGTERM arrived since the handlers were installed (a worker that just
    died may have died of the same signal: the sweep is then interrupted, not failed)."""
    return _State.received


@contextmanager
def interrupts_handled() -> Iterator[None]:
    """Install the SIGINT/SIGTERM handlers for the body and restore the previous ones after.

    Signal handlers can only be set from the main thread; elsewhere this does nothing (the
    caller's own handling stays in force)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _handler) for s in _SIGNALS}
    _State.received = _State.pending = False
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def check() -> None:
    """Raise KeyboardInterrupt now if a signal arrived during a deferred block."""
    if _State.pending:
        _State.pending = False
        raise KeyboardInterrupt


@contextmanager
def deferred() -> Iterator[None]:
    """Hold back an interrupt until the body is done (it is then raised as KeyboardInterrupt).

    If the body itself fails, its exception goes on unchanged: the sweep stops either way."""
    _State.depth += 1
    try:
        yield
    finally:
        _State.depth -= 1
    if not _State.depth:
        check()

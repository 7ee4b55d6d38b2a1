"""SIGINT and SIGTERM both raise KeyboardInterrupt, never inside a deferred block."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from commsim.sweep import signals

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX signals")


def spin():
    # A few bytecodes, so a pending Python-level signal handler runs here for sure.
    total = 0
    for i in range(10_000):
        total += i
    return total


@posix_only
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_raise_keyboard_interrupt(sig):
    before = signal.getsignal(sig)
    with signals.interrupts_handled():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), sig)
            spin()
        assert signals.received()
    assert signal.getsignal(sig) is before


@posix_only
def test_a_deferred_block_finishes_before_the_interrupt():
    steps = []
    with signals.interrupts_handled():
        with pytest.raises(KeyboardInterrupt):
            with signals.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                spin()
                steps.append("journal line written")
                steps.append("point counted")
            steps.append("after the block")  # never reached: raised at the block's end
    assert steps == ["journal line written", "point counted"]


@posix_only
def test_a_failing_deferred_block_keeps_its_own_exception():
    with signals.interrupts_handled():
        with pytest.raises(OSError):
            with signals.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                spin()
                raise OSError(28, "No space left on device")


def test_outside_the_main_thread_nothing_is_installed():
    seen = []

    def body():
        with signals.interrupts_handled():
            seen.append(signal.getsignal(signal.SIGINT))

    before = signal.getsignal(signal.SIGINT)
    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == [before]


@posix_only
def test_check_raises_a_pending_interrupt_once():
    reached = []
    with signals.interrupts_handled():
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            spin()
            reached.append("still running")
            with pytest.raises(KeyboardInterrupt):
                signals.check()
            signals.check()  # consumed: nothing left to raise
        reached.append("the block ended quietly")
    assert reached == ["still running", "the block ended quietly"]

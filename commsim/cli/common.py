"""What every command shares: the one failure helper, the command classes that map errors to
exit codes, the option types, and scenario loading.

The exit-code contract (documented in ``commsim --help``):

- 0: done; 1: an unexpected error, which is a bug and is shown as one (a traceback) — and
  ``validate --numerics`` when a check fails;
- 2 (:data:`commsim.errors.EXIT_INPUT`): bad input — a file, key, option or output path — and
  every click usage error, as one line ``commsim: error: ...`` on stderr;
- 3 (:data:`commsim.errors.EXIT_RUN_FAILED`): the job itself failed at run time (a rank died or hung);
- 130 (:data:`commsim.errors.EXIT_INTERRUPTED`): interrupted (Ctrl-C, SIGTERM).

Only :class:`commsim.errors.InputError` and click's usage errors become exit 2; anything else
that escapes a command propagates, so a bug is never passed off as bad input. A closed stdout
(``commsim run ... | head -1``) ends the command quietly, as Unix tools do.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import select
import signal
import sys
import threading
from typing import NoReturn, Optional, Sequence

import click

from commsim.benchsizes import parse_bench_size, parse_size_range
from commsim.paramtypes import Seconds
from commsim.errors import EXIT_INPUT, EXIT_INTERRUPTED, InputError

PROG = "commsim"


def one_line(text: str) -> str:
    """`text` with its line breaks folded: every message of the CLI is one line."""
    return " ".join(str(text).splitlines()) if text else ""


class CommandFailure(click.ClickException):
    """A command stops with one line on stderr (``commsim: error: ...``) and its exit code."""

    def __init__(self, message: str, code: int = EXIT_INPUT) -> None:
        super().__init__(one_line(message))
        self.exit_code = code

    def show(self, file=None) -> None:  # one line, no usage dump
        click.echo(f"{PROG}: error: {self.format_message()}", err=True)


def fail(message: str, code: int = EXIT_INPUT) -> NoReturn:
    """Stop the command with one line on stderr and exit code `code` (default 2: bad input).

    The one failure helper of the CLI: every command ends through it (or through an
    :class:`~commsim.errors.InputError`, which becomes the same line with exit 2)."""
    raise CommandFailure(message, code)


def _usage_line(exc: click.UsageError) -> str:
    """A click usage error as one line, pointing at the command's --help."""
    where = exc.ctx.command_path if exc.ctx is not None else PROG
    return f"{exc.format_message()} (see '{where} --help')"


class Command(click.Command):
    """A command whose input errors end as one line and exit 2 under any group.

    Turning :class:`InputError` into :class:`CommandFailure` here (and not only in
    :class:`Group`) keeps the contract when a command is registered into another group,
    as the tests do. Nothing else is caught: an unexpected exception is a bug."""

    def invoke(self, ctx: click.Context):
        with sigterm_interrupts(self.name in SIGTERM_AS_CTRL_C):
            try:
                return super().invoke(ctx)
            except InputError as exc:
                raise CommandFailure(str(exc), EXIT_INPUT) from exc


# Commands that do all their work in this process: SIGTERM (a scheduler's time limit, `kill`)
# stops them as Ctrl-C does, exit 130 and "interrupted", instead of the default death by signal
# (exit 143, no word). sweep, validate, calibrate --backend and lab handle signals themselves,
# around their worker processes; calibrate's in-process paths (--from-nccl-tests, --physical,
# --ddp-fit) turn it on with :func:`sigterm_interrupts` once they know which path runs.
SIGTERM_AS_CTRL_C = frozenset({"run", "algorithms", "collective", "compare", "import", "blame", "plot"})


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_interrupts(enabled: bool = True):
    """While the body runs, SIGTERM raises KeyboardInterrupt, where it would otherwise kill the
    process (a handler someone else installed stays; signals are the main thread's only)."""
    term = getattr(signal, "SIGTERM", None)
    if (not enabled or term is None or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(term) is not signal.SIG_DFL):
        yield
        return
    signal.signal(term, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(term, signal.SIG_DFL)


def command(name: str, **attrs):
    """``@click.command(name)`` with the CLI's error mapping (:class:`Command`)."""
    return click.command(name, cls=Command, **attrs)


def _stdout_closed() -> bool:
    """True when stdout is a pipe whose reader has gone (poll reports POLLERR on it)."""
    try:
        fd = sys.__stdout__.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _silence_stdout() -> None:
    # Point stdout at /dev/null so that the interpreter's final flush of what is still
    # buffered does not fail a second time ("Exception ignored ... BrokenPipeError").
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.__stdout__.fileno())
    finally:
        os.close(devnull)


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _is_full_stdout(exc: OSError) -> bool:
    """Whether `exc` is a write to stdout failing for want of space (``> /dev/full``, a full
    disk): an error a file path would name, and the CLI's own files name theirs."""
    if exc.errno not in _DISK_FULL or exc.filename is not None:
        return False
    try:
        return not os.isatty(sys.__stdout__.fileno())
    except (AttributeError, OSError, ValueError):
        return False


def _flush_stdout() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:  # stdout redirected to a full disk, say
        fail(f"cannot write to stdout: {exc.strerror or exc}")


class _BrokenPipe(Exception):
    """Carries a BrokenPipeError past click's own handler, which would turn any EPIPE (from a
    socket as much as from stdout) into a silent exit 1."""

    def __init__(self, error: BrokenPipeError) -> None:
        super().__init__(str(error))
        self.error = error


# click >= 8.2 raises this for a group called without a command (older versions print the help)
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class Group(click.Group):
    """The ``commsim`` group: runs a command and turns its outcome into the exit code.

    Usage errors (a missing argument, ``--steps 0``, a directory given as a file) are one line
    like every other input error, not click's three lines; Ctrl-C is exit 130, not "Aborted!"
    and 1; a closed stdout ends quietly; anything unexpected propagates with its traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            raise _BrokenPipe(exc) from exc
        except OSError as exc:
            if _is_full_stdout(exc):
                fail(f"cannot write to stdout: {exc.strerror or exc}")
            raise

    def main(self, args: Optional[Sequence[str]] = None, prog_name: Optional[str] = None,
             complete_var: Optional[str] = None, standalone_mode: bool = True, **extra):
        code = self._run(args, prog_name or PROG, complete_var, **extra)
        if standalone_mode:
            sys.exit(code)
        return code

    def _run(self, args, prog_name, complete_var, **extra) -> int:
        try:
            try:
                rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
                code = rv if isinstance(rv, int) else 0  # click returns ctx.exit(n)'s n here
                _flush_stdout()  # a closed pipe or a full disk shows here, not at interpreter exit
                return code
            except _NO_ARGS_IS_HELP as exc:  # plain `commsim`: the help, not an error
                click.echo(exc.ctx.get_help())
                return 0
            except click.UsageError as exc:
                click.echo(f"{PROG}: error: {one_line(_usage_line(exc))}", err=True)
                return EXIT_INPUT
            except click.ClickException as exc:
                exc.show()
                return exc.exit_code
            except InputError as exc:  # from a command that is not a commsim Command
                click.echo(f"{PROG}: error: {exc}", err=True)
                return EXIT_INPUT
            except click.Abort:  # click's name for Ctrl-C (KeyboardInterrupt) and EOF
                click.echo(f"{PROG}: error: interrupted", err=True)
                return EXIT_INTERRUPTED
        except (BrokenPipeError, _BrokenPipe) as exc:
            if not _stdout_closed():  # a pipe other than stdout broke: not the reader going away
                raise (exc.error if isinstance(exc, _BrokenPipe) else exc) from None
            _silence_stdout()
            return 0
        except OSError as exc:
            # the group's own --help/--version (and plain `commsim`) print while the arguments
            # are parsed, before Group.invoke could catch a full stdout
            if not _is_full_stdout(exc):
                raise
            click.echo(f"{PROG}: error: cannot write to stdout: {exc.strerror or exc}", err=True)
            _silence_stdout()  # what is still buffered would fail again at interpreter exit
            return EXIT_INPUT


def group(**attrs):
    """``@click.group()`` with the CLI's outcome handling (:class:`Group`)."""
    return click.group(cls=Group, **attrs)


# --------------------------------------------------------------------------------------------
# option types: one argument style across the commands
# --------------------------------------------------------------------------------------------


class ByteSize(click.ParamType):
    """A byte count as nccl-tests writes it (8, 64K, 16M, 1G; K/M/G binary), >= `minimum`."""

    name = "SIZE"

    def __init__(self, minimum: int = 0, maximum: Optional[int] = None) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int):
            size = value
        else:
            try:
                size = parse_bench_size(str(value))
            except ValueError as exc:
                self.fail(f"expected a size like 8, 64K, 16M or 1G, got {value!r} ({exc})", param, ctx)
        if size < self.minimum:
            self.fail(f"expected a size >= {self.minimum}, got {value!r}", param, ctx)
        if self.maximum is not None and size > self.maximum:
            self.fail(f"expected a size <= {self.maximum} ({self.maximum >> 30}G), got {value!r}", param, ctx)
        return size


class SizeRange(click.ParamType):
    """MIN:MAX[:FACTOR] in bytes (K/M/G binary): the sizes MIN, MIN*FACTOR, ... up to MAX (at
    most :data:`commsim.benchsizes.MAX_TABLE_BYTES`, which parse_size_range checks); or one SIZE."""

    name = "MIN:MAX[:FACTOR]|SIZE"

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        try:
            sizes = parse_size_range(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return sizes


def split_list(text: str, option: str, negatable: bool = False) -> list:
    """The stripped items of the comma-separated list `text` given to `option`; a usage error
    for an empty item ("ring,", "1,,2": a typo, which was dropped without a word). Every comma
    list of the command line is split here. `negatable`: a leading ``^`` (NCCL_ALGO's "all
    but these") is not part of the first item."""
    body = str(text).strip()
    items = [t.strip() for t in (body[1:] if negatable and body.startswith("^") else body).split(",")]
    if any(not t for t in items) and any(items):
        raise click.BadParameter(f"expected a comma-separated list without empty items, got {text!r} "
                                 "(a stray comma)", param_hint=option)
    return [t for t in items if t]


def split_choices(text: str, option: str, choices: Sequence[str]) -> list:
    """A comma-separated list of `choices` (or 'all': every choice) given to `option`."""
    items = split_list(text, option)
    if items == ["all"]:
        return list(choices)
    bad = [t for t in items if t not in choices]
    if bad or not items:
        raise click.BadParameter(f"expected a comma-separated list of {', '.join(choices)} or 'all', got {text!r}",
                                 param_hint=option)
    _refuse_repeats(items, text, option)
    return items


def _refuse_repeats(items: Sequence, text: str, option: str) -> None:
    """A list option naming one item twice would print (and write) the same row twice."""
    seen = set()
    for item in items:
        if item in seen:
            raise click.BadParameter(f"expected each value once, got {item} twice in {text!r}", param_hint=option)
        seen.add(item)


class Fraction(click.FloatRange):
    """A number in (0, 1]: click's FloatRange, which lets nan through (every comparison with
    it is false), with nan refused."""

    def __init__(self) -> None:
        super().__init__(0, 1, min_open=True)

    def convert(self, value, param, ctx) -> float:
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"expected a number in (0, 1], got {value!r}", param, ctx)
        return number


POSITIVE_INT = click.IntRange(min=1)
POSITIVE_SECONDS = Seconds()

FORCE_HELP = ("Run a scenario even when its estimated memory or work exceeds the loader's limit "
              "(see docs/scenario-format.md, Limits).")


def load_or_fail(path: str, overrides: Sequence[str], steps: Optional[int], seed: Optional[int],
                 calibration: Optional[str] = None, force: bool = False):
    """Load and validate a scenario (:func:`commsim.scenario.loader.load_scenario`); a bad one
    ends the command with its one-line message and exit 2. `force` skips the size limit."""
    from commsim.scenario.loader import load_scenario

    # `force` is passed only when set, so that a loader without the size limit still works
    extra = {"force": True} if force else {}
    try:
        return load_scenario(path, overrides=overrides, steps=steps, seed=seed, calibration=calibration, **extra)
    except InputError as exc:
        fail(str(exc))


def check_resized(scenario, option: str, force: bool = False) -> None:
    """A scenario the command resized after loading (``--nodes``, ``--ranks``) gets the checks the
    loader gives a file: the world-size limit always, the memory/time budget unless `force`."""
    from commsim.scenario import budget
    from commsim.scenario.loader import MAX_WORLD_SIZE

    n = scenario.world_size
    if n > MAX_WORLD_SIZE:
        fail(f"{option}: expected a world size up to {MAX_WORLD_SIZE:,}, got {n:,} "
             f"({scenario.cluster.nodes:,} nodes x {scenario.cluster.gpus_per_node})")
    if not force:
        try:
            budget.check(scenario, option)
        except InputError as exc:
            fail(str(exc))


def node_counts(text: str) -> list:
    """``--nodes 4,32,256``: comma-separated positive node counts (a usage error otherwise)."""
    try:
        counts = [int(t) for t in split_list(text, "--nodes")]
    except ValueError:
        counts = []
    if not counts or any(c < 1 for c in counts):
        raise click.BadParameter(f"expected comma-separated positive node counts like 4,32,256, got {text!r}",
                                 param_hint="--nodes")
    _refuse_repeats(counts, text, "--nodes")
    return counts

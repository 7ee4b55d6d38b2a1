"""What the ``python -m validate.*`` commands share with ``commsim``: click for the options,
sizes read as ``commsim calibrate`` reads them (8, 64K, 16M, 1G: nccl-tests' binary
suffixes), and one way of ending.

:func:`run_command` runs a click command and turns every outcome into an exit code:

- bad input (a click usage error, :class:`commsim.errors.InputError`, ``ValueError``,
  ``OSError``): one line ``commsim: error: ...`` on stderr, exit code 2;
- a run that failed (:class:`validate.launch.LaunchError`: a rank died, hung or stopped):
  one line, exit code 3;
- Ctrl-C or SIGTERM (:class:`validate.launch.LaunchInterrupted`, ``KeyboardInterrupt``):
  one line, exit code 130.

validate/ sits below the CLI in the package layering, so this is its own small copy of the
CLI's conventions rather than an import of ``commsim.cli``.
"""

from __future__ import annotations

import json
from typing import Optional, Sequence

import click

from commsim.atomic import atomic_write_text
from commsim.benchsizes import parse_bench_size
from commsim.errors import EXIT_INPUT, EXIT_INTERRUPTED, InputError
from commsim.outputpaths import OutputPathError
from commsim.outputpaths import check_outputs as _check_outputs
from commsim.paramtypes import Seconds
from validate.launch import MIN_TIMEOUT_S, LaunchError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class BenchSize(click.ParamType):
    """A size in bytes as ``commsim calibrate --max-size`` takes it: 8, 64K, 16M, 1G
    (binary, as nccl-tests' -b/-e), or with a unit ("25 MB")."""

    name = "SIZE"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_bench_size(str(value))
        except ValueError:
            self.fail(f"expected a whole number of bytes such as 8, 64K, 16M or 1G, got {value!r}", param, ctx)


def timeout_seconds() -> Seconds:
    """A --timeout: finite seconds from :data:`validate.launch.MIN_TIMEOUT_S` (a shorter one
    would call ranks between two heartbeats stopped) to :data:`commsim.paramtypes.MAX_SECONDS`."""
    return Seconds(minimum=MIN_TIMEOUT_S)


class Failure(click.ClickException):
    """Bad input found by a command itself: one line on stderr, exit code 2."""

    exit_code = EXIT_INPUT

    def show(self, file=None) -> None:
        _error(self.format_message())


def check_local_ranks(nprocs: int, option: str = "--nprocs") -> None:
    """A :class:`Failure` before launching where `nprocs` local ranks cannot fit in this
    machine's memory (:func:`commsim.scenario.budget.local_ranks_problem`): ``--nprocs 2**64``
    ended in the launcher's OverflowError traceback."""
    from commsim.scenario.budget import local_ranks_problem

    problem = local_ranks_problem(nprocs)
    if problem:
        raise Failure(f"{option}: {problem}")


def check_sweep_memory(backend: str, nprocs: int, max_size: int) -> None:
    """A :class:`Failure` naming --max-size where a gloo sweep's largest tensors on `nprocs`
    local ranks cannot fit in this host's memory
    (:func:`commsim.scenario.budget.sweep_memory_problem`); NCCL's live in GPU memory."""
    from commsim.scenario.budget import sweep_memory_problem

    problem = sweep_memory_problem(nprocs, max_size) if backend == "gloo" else None
    if problem:
        raise Failure(f"--max-size: {problem}")


def check_outputs(outputs, inputs=None) -> None:
    """:func:`commsim.outputpaths.check_outputs` before a measurement's minutes: a bad output
    path, or one that is an input of the command, is a :class:`Failure` (one line, exit 2) before
    anything is launched, not after the run (when the results would be lost, or written over the
    scenario they came from)."""
    try:
        _check_outputs(outputs, inputs)
    except OutputPathError as exc:
        raise Failure(str(exc)) from None


def _error(message: str) -> None:
    click.echo(f"commsim: error: {' '.join(str(message).splitlines())}", err=True)


def save_partial(path: str, payload: dict) -> str:
    """Write what a failed or interrupted run measured to ``PATH.partial.json``; returns that name."""
    partial_path = f"{path}.partial.json"
    atomic_write_text(partial_path, json.dumps(payload, indent=2, allow_nan=False) + "\n")
    return partial_path


def run_command(command: click.Command, argv: Optional[Sequence[str]] = None,
                prog_name: Optional[str] = None) -> int:
    """Run `command` on `argv` (default: sys.argv[1:]) and return its exit code."""
    try:
        command.main(args=list(argv) if argv is not None else None, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Exit as exc:  # --help
        return exc.exit_code
    except click.UsageError as exc:  # bad or missing options, in the same one line as the rest
        _error(f"{exc.ctx.command_path + ': ' if exc.ctx else ''}{exc.format_message()}")
        return EXIT_INPUT
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:  # click's form of a KeyboardInterrupt
        _error("interrupted (Ctrl-C)")
        return EXIT_INTERRUPTED
    except LaunchError as exc:  # LaunchInterrupted included, with its own code
        _error(str(exc))
        return exc.exit_code
    except (InputError, ValueError, OSError) as exc:
        _error(str(exc) or type(exc).__name__)
        return EXIT_INPUT
    return 0

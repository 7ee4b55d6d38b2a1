"""Output files of the commands: checked before any work, written atomically, ``-`` for stdout.

Every output option (``--json``, ``--csv``, ``--trace``, ``calibrate -o``) takes ``-`` for
stdout. Then stdout carries that one document and nothing else: the command's report moves
to stderr (:func:`report_stream`), and two options cannot both take ``-``.

An output that names an existing device or pipe (``/dev/null``, ``/dev/stdout``, a FIFO) is
written into, not replaced: an atomic write renames a new file over its path, which would
turn ``/dev/null`` into a regular file for every process on the machine.

A bad output path (empty, a folder that does not exist or cannot be written, a directory named
as the file or a path ending in '/', an unsupported plot suffix, no matplotlib) is reported before the simulation or
measurement runs, not after it.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping, Optional, Sequence

import click

from commsim.atomic import atomic_write_text
from commsim.cli.common import fail

from commsim.outputpaths import InputPaths, OutputPathError, is_stdout
from commsim.outputpaths import check_not_an_input as _core_not_an_input
from commsim.outputpaths import check_output_path as _core_output_path
from commsim.outputpaths import check_outputs as _core_outputs


def check_output_path(path: str, option: str) -> None:
    """Fail (exit 2, one line) unless `path` can be written: ``-``, a writable device or pipe,
    or a file path whose folder exists and is writable and which is not itself a directory
    (:func:`commsim.outputpaths.check_output_path`)."""
    try:
        _core_output_path(path, option)
    except OutputPathError as exc:
        fail(str(exc))


def _check_not_an_input(path: str, option: str, inputs: Mapping[str, InputPaths]) -> None:
    try:
        _core_not_an_input(path, option, inputs)
    except OutputPathError as exc:
        fail(str(exc))


def check_outputs(outputs: Mapping[str, Optional[str]], inputs: Optional[Mapping[str, InputPaths]] = None) -> bool:
    """Check every given output (option name -> path or None) before any work
    (:func:`commsim.outputpaths.check_outputs`); fail (exit 2, one line) on the first bad one.
    Returns True when one of them is ``-`` (stdout is taken: print the report to stderr)."""
    try:
        return _core_outputs(outputs, inputs)
    except OutputPathError as exc:
        fail(str(exc))


def check_script_outputs(parser, outputs: Mapping[str, Optional[str]]) -> None:
    """:func:`check_outputs` for the argparse scripts in ``benchmarks/``, before their minutes of
    work: the same rules, reported through ``parser.error`` (usage and one line, exit 2). ``-``
    is refused: a script's report is its stdout, so a document there would be mixed into it."""
    for opt, path in outputs.items():
        if path is not None and is_stdout(path):
            parser.error(f"{opt} -: expected a file path (this script prints its report on stdout)")
        if path is not None and not os.fspath(path):
            parser.error(f"{opt}: expected a file path, got an empty path")
    try:
        check_outputs(outputs)
    except click.ClickException as exc:  # fail()'s CommandFailure
        parser.error(exc.format_message())


def check_not_inputs(outputs: Mapping[str, Optional[str]], inputs: Mapping[str, InputPaths]) -> None:
    """Refuse an output that is one of `inputs` known only once the scenario is read (the
    calibration file a scenario names), as :func:`check_outputs` does for the command's own."""
    for opt, path in outputs.items():
        if path is not None and not is_stdout(path):
            _check_not_an_input(os.fspath(path), opt, inputs)


def scenario_calibration(scenario: str, document: Mapping) -> Optional[str]:
    """The calibration file a scenario document names (``calibration:``, relative to the
    scenario file; an absolute path after ``--calibration``), or None."""
    from commsim.scenario.schema_training import calibration_file

    value = document.get("calibration") if isinstance(document, Mapping) else None
    return str(calibration_file(str(scenario), value)) if isinstance(value, str) and value else None


def named_calibrations(scenario: str, overrides: Sequence[str] = (), grid_values: Sequence = ()) -> list:
    """The calibration files the scenario file names (its ``calibration:`` after any ``--set``,
    relative to the file), and those a sweep's ``--grid calibration=...`` names: the inputs an
    output must not replace. Read from the file, not the loaded scenario, so that a command
    whose ``--calibration`` replaces the scenario's own (validate) still keeps that file."""
    from commsim.scenario.loader import apply_overrides, load_document

    document = apply_overrides(load_document(scenario), overrides)
    named = [scenario_calibration(scenario, document)]
    named += [scenario_calibration(scenario, {"calibration": value}) for value in grid_values]
    return [path for path in named if path is not None]


def check_not_named_calibration(outputs: Mapping[str, Optional[str]], scenario: str, overrides: Sequence[str] = (),
                                grid_values: Sequence = ()) -> None:
    """Refuse an output over a calibration file the scenario names (see :func:`named_calibrations`),
    once the scenario has been read and before any work: one line, exit 2, the file untouched."""
    check_not_inputs(outputs, {"scenario's calibration file": named_calibrations(scenario, overrides, grid_values)})


def check_plot_output(path: str, option: str = "--plot") -> None:
    """Fail before any work unless a figure can be written to `path`: a writable file path
    with a .png/.svg/.pdf suffix, and matplotlib (the plot extra) installed."""
    if is_stdout(path):
        fail(f"{option} -: a figure cannot go to stdout; give a .png, .svg or .pdf file path")
    check_output_path(path, option)
    from commsim.output.plots import check_plot_target

    check_plot_target(path)  # matplotlib, suffix, a folder it can write in: a PlotError (exit 2)


def report_stream(stdout_taken: bool):
    """Where a command's human-readable report goes: stdout, or stderr when an output took it."""
    return sys.stderr if stdout_taken else sys.stdout


def echo_to(stdout_taken: bool):
    """``click.echo`` onto the report stream (see :func:`report_stream`)."""
    def echo(message: str = "") -> None:
        click.echo(message, err=stdout_taken)

    return echo


def quiet_echo(message: str = "") -> None:
    """The report stream of a command run with -q: nothing is printed (errors still are, by fail)."""


# Written to stdout in pieces: one large write() that a closed pipe cuts short is dropped
# silently by Python's buffered writer, while a piece-wise write reports the broken pipe.
STDOUT_CHUNK = 1 << 16


def _write_stdout(text: str, what: str) -> None:
    try:
        for start in range(0, len(text), STDOUT_CHUNK):
            sys.stdout.write(text[start:start + STDOUT_CHUNK])
        sys.stdout.flush()
    except BrokenPipeError:
        raise  # the reader went away: the CLI ends quietly (commsim.cli.common.Group)
    except OSError as exc:  # stdout redirected to a full disk, say
        fail(f"cannot write {what} to stdout: {exc.strerror or exc}")


def write_output(path: str, text: str, what: str) -> None:
    """Write an output file atomically (a device or pipe: into it), or `text` to stdout for
    ``-``. A write that fails (a full disk, a folder removed meanwhile) is one line naming the
    path, exit 2, and the file that was there is left as it was."""
    if is_stdout(path):
        _write_stdout(text, what)
        return
    try:
        atomic_write_text(path, text)  # a device or pipe is written into, not replaced
    except BrokenPipeError:
        raise  # a pipe's reader went away: the CLI ends quietly where that pipe is stdout
    except OSError as exc:
        fail(f"cannot write {what} to {path}: {exc.strerror or exc}")

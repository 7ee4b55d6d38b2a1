"""What every command shares: the one-line failure, output writing, scenario loading."""

from __future__ import annotations

from typing import Optional, Sequence

import click

from commsim.errors import ScenarioError

EXIT_BAD_INPUT = 2


class UsageFailure(click.ClickException):
    """A one-line error with exit code 2 (bad input)."""

    exit_code = EXIT_BAD_INPUT

    def show(self, file=None) -> None:  # one line, no usage dump
        click.echo(f"commsim: error: {self.format_message()}", err=True)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """Stop the command with one line on stderr and `code` (2: bad input)."""
    exc = UsageFailure(message)
    exc.exit_code = code
    raise exc


def write_output(path: str, text: str, what: str) -> None:
    """Write an output file atomically; an unwritable path is bad input, not a crash."""
    from commsim.output.run_files import atomic_write_text

    try:
        atomic_write_text(path, text)
    except OSError as exc:
        fail(f"cannot write {what} to {path}: {exc.strerror or exc}")


def load_or_fail(path: str, overrides: Sequence[str], steps: Optional[int], seed: Optional[int],
                 calibration: Optional[str] = None):
    from commsim.scenario.loader import load_scenario

    try:
        return load_scenario(path, overrides=overrides, steps=steps, seed=seed, calibration=calibration)
    except ScenarioError as exc:
        fail(str(exc))


def positive_int(ctx, param, value):
    if value is not None and value <= 0:
        raise click.BadParameter(f"expected a positive integer, got {value}")
    return value

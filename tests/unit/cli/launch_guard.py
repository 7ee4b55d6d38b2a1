"""Shared by the CLI refusal tests of validate and calibrate --backend: no rank may start, and a
refusal is one line on stderr with exit code 2."""

import multiprocessing.context

from click.testing import CliRunner

from commsim.cli.main import main


def refuse_launches(monkeypatch) -> None:
    """Make starting a rank's process fail at once: a test that got past a refusal fails instead
    of spawning its ranks (100,000 torch interpreters in the memory-limit tests)."""

    def refuse(self):
        raise AssertionError("a rank was launched")

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", refuse)


def one_line_exit_2(args) -> str:
    """Run the CLI in-process; assert exit code 2 and one stderr line, and return it."""
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, (res.output, res.exception)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]

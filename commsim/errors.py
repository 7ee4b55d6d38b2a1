"""Errors raised for bad user input, and the exit codes the CLI maps them to.

An :class:`InputError` is what the CLI turns into exit code 2 and one line on stderr, so its
text must stand on its own: the file (or option) the bad value came from, the key path in YAML
notation (``stragglers[1].ranks[0]``), what was expected and what was given. Every input error of
the project derives from it through ``super().__init__``; anything else that escapes a command
is a bug and is shown as one.
"""

from __future__ import annotations

from typing import Optional

EXIT_INPUT = 2         # bad input: a file, key, option or output path
EXIT_RUN_FAILED = 3    # the job itself failed at run time (a rank died or hung)
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGTERM (128 + SIGINT, as shells report it)


def _one_line(text: str) -> str:
    # The CLI prints exactly one line; never let a stray newline (from a file name, a YAML
    # problem text or a user's value) split it.
    return " ".join(text.splitlines()) if text else text


class InputError(Exception):
    """Bad input, reported as one line: ``SOURCE: PATH: MESSAGE``.

    ``source`` is the file (or ``--set 'k=v'``, or an option) the bad value came from, ``path`` the
    key path in YAML notation (``cluster.intra_node.bandwidth``, ``stragglers[1].ranks[0]``;
    ``None`` when the problem is the whole file) and ``message`` says what was expected and what
    was given.
    """

    def __init__(self, source: str, path: Optional[str], message: str) -> None:
        self.source = _one_line(str(source))
        self.path = _one_line(path) if path else None
        self.message = _one_line(message)
        parts = [self.source] + ([self.path] if self.path else []) + [self.message]
        super().__init__(": ".join(parts))


class ScenarioError(InputError):
    """Bad scenario input (the scenario file, its ``--set`` overrides, or what they name)."""

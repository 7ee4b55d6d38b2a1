"""Errors raised for bad user input.

A :class:`ScenarioError` is what the CLI turns into exit code 2 and one line on stderr, so its
text must stand on its own: the file, the key path in YAML notation
(``stragglers[1].ranks[0]``), what was expected and what was given.
"""

from __future__ import annotations

from typing import Optional


def _one_line(text: str) -> str:
    # The CLI prints exactly one line; never let a stray newline (from a file name, a YAML
    # problem text or a user's value) split it.
    return " ".join(text.splitlines()) if text else text


class ScenarioError(Exception):
    """Bad scenario input, reported as one line: ``SOURCE: PATH: MESSAGE``.

    ``source`` is the file (or ``--set 'k=v'``) the bad value came from, ``path`` the key path in
    YAML notation (``cluster.intra_node.bandwidth``, ``stragglers[1].ranks[0]``; ``None`` when the
    problem is the whole file) and ``message`` says what was expected and what was given.
    """

    def __init__(self, source: str, path: Optional[str], message: str) -> None:
        self.source = _one_line(str(source))
        self.path = _one_line(path) if path else None
        self.message = _one_line(message)
        parts = [self.source] + ([self.path] if self.path else []) + [self.message]
        super().__init__(": ".join(parts))

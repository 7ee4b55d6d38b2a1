"""The calibration package's input error."""

from __future__ import annotations

from typing import Optional

from commsim.errors import ScenarioError


class CalibrationError(ScenarioError, ValueError):
    """A calibration file, or data to fit one from, is unusable (one line).

    ``CalibrationError(message, source=FILE, key=KEY_PATH)`` reads ``FILE: KEY_PATH: message``,
    as every :class:`commsim.errors.InputError` does. Without a source (a fit from data in
    memory, or a caller whose message names its own subject) the text is the key path, if any,
    and the message.

    A :class:`commsim.errors.ScenarioError` because a calibration is part of a scenario's input
    (the scenario loader re-reports a calibration's error at its ``calibration`` key) and the
    commands catch that one class; a ValueError because the fitting functions raise it on bad
    arguments and callers catch it as such.
    """

    def __init__(self, message: str, source: Optional[str] = None, key: Optional[str] = None) -> None:
        super().__init__("" if source is None else source, key, str(message))
        if source is None:
            # InputError's text always starts with a source; with none there is no file to
            # name, so the text is what follows it (not a bare ": message").
            self.source = ""
            self.args = (": ".join(([self.path] if self.path else []) + [self.message]),)

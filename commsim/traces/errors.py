"""The one error the trace readers raise: bad or unusable trace input, as one line."""

from __future__ import annotations

from commsim.errors import InputError


class TraceError(InputError):
    """A trace, a Flight Recorder dump or a set of them that cannot be used.

    ``source`` is the file (or, for a problem between files, the files named in the message),
    ``path`` where in the file when there is one (``traceEvents[12].args.dtype``), ``message``
    what was expected and what was found. The CLI prints it as one line and exits with 2."""

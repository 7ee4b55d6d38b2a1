"""Real jobs in: per-rank traces of a DDP job -> a scenario, a calibration, a blame report.

Readers: PyTorch profiler (Kineto) Chrome traces (:mod:`.kineto`), Flight Recorder dumps
(:mod:`.flight_recorder`, with a restricted unpickler); nccl-tests logs go through
:mod:`commsim.calibration.nccl_log`. :mod:`.matching` checks the files are every rank of one
job and matches their collectives; :mod:`.steps` rebuilds the training steps; :mod:`.infer`
turns them into the simulator's terms; :mod:`.importer` writes the scenario;
:mod:`.blaming` and :mod:`commsim.analysis.blame` say who everyone waited for;
:mod:`.perfetto` draws it.

This stage sits between analysis and sweep: it reads scenarios, simulates and analyzes.

The public names are loaded on first use (PEP 562 ``__getattr__``): ``commsim run --trace``
needs only :mod:`.perfetto`, and importing a submodule imports this package first, which must
not cost it the readers, the matching and the blame analysis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from commsim.lazy import lazy_names

# public name -> the submodule that defines it
_EXPORTS = {"blame_traces": "blaming", "TraceError": "errors", "import_traces": "importer"}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS, globals())


if TYPE_CHECKING:  # the same names, for type checkers and readers
    from commsim.traces.blaming import blame_traces  # noqa: F401 - the public surface
    from commsim.traces.errors import TraceError  # noqa: F401
    from commsim.traces.importer import import_traces  # noqa: F401

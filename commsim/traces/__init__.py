"""Real jobs in: per-rank traces of a DDP job -> a scenario, a calibration, a blame report.

Readers: PyTorch profiler (Kineto) Chrome traces (:mod:`.kineto`), Flight Recorder dumps
(:mod:`.flight_recorder`, with a restricted unpickler); nccl-tests logs go through
:mod:`commsim.calibration.nccl_log`. :mod:`.matching` checks the files are every rank of one
job and matches their collectives; :mod:`.steps` rebuilds the training steps; :mod:`.infer`
turns them into the simulator's terms; :mod:`.importer` writes the scenario;
:mod:`.blaming` and :mod:`commsim.analysis.blame` say who everyone waited for;
:mod:`.perfetto` draws it.

This stage sits between analysis and sweep: it reads scenarios, simulates and analyzes.
"""

from commsim.traces.blaming import blame_traces  # noqa: F401 - the public surface
from commsim.traces.errors import TraceError  # noqa: F401
from commsim.traces.importer import import_traces  # noqa: F401

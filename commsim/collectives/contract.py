"""The kernel contract every collective algorithm implements, and its registry record.

A collective is *planned* once per (kind, size, fabric): the planner does all the work that
does not depend on who launches when (hop times, trees, schedules, closed forms) and returns a
:class:`Kernel`. The kernel is then *evaluated* once per launch vector: the engine calls
:meth:`Kernel.finish_times` for every collective it schedules, so evaluation is vectorized
numpy over the ranks and cheap; the reports read :meth:`Kernel.uniform_time` (all ranks
launching together), :attr:`Kernel.kind` (the nccl-tests collective its busbw is quoted as)
and :attr:`Kernel.chosen` (what actually runs).

An :class:`Algorithm` names a planner and the kinds it implements;
:mod:`commsim.collectives.kernels` holds the registry of all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Protocol, Tuple, get_args, runtime_checkable

import numpy as np

from commsim.network.fabric import Fabric

Kind = Literal["all_reduce", "reduce_scatter", "all_gather"]
KINDS: Tuple[str, ...] = get_args(Kind)


@runtime_checkable
class Kernel(Protocol):
    """One collective, planned for one (kind, size, fabric).

    ``finish_times(launch)``: per-rank finish times (seconds) for per-rank launch times, shape
    (n,) in and out; a rank never finishes before it launched. It returns a new array, sharing
    no memory with ``launch`` or any buffer of the kernel, that later calls never write: a
    caller may keep it (the FSDP step keeps each bucket's finish times while the kernel of the
    same bucket is evaluated again), and a kernel must not reuse an output buffer across calls. ``uniform_time()``: seconds from
    a simultaneous launch to the last finish. ``kind``: all_reduce, reduce_scatter or
    all_gather (``size`` is the whole buffer, as nccl-tests' size column). ``chosen``: what runs
    (the algorithm's name; auto's pick; NCCL's ``Algorithm/Protocol`` under an NCCL model).
    """

    kind: str
    chosen: str
    size: float
    world_size: int

    def finish_times(self, launch: np.ndarray) -> np.ndarray: ...

    def uniform_time(self) -> float: ...


Planner = Callable[[str, Fabric, float], Kernel]  # planner(kind, fabric, size): fabric already priced at size


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm: its ``name``, the collective ``kinds`` it implements and its
    ``plan(kind, fabric, size) -> Kernel``."""

    name: str
    kinds: Tuple[str, ...]
    plan: Planner
    summary: str = ""

    def __post_init__(self) -> None:
        unknown = [k for k in self.kinds if k not in KINDS]
        if not self.kinds or unknown:
            raise ValueError(f"algorithm {self.name!r}: kinds must be among {', '.join(KINDS)}, got {self.kinds!r}")


def checked_launch(launch, n: int) -> np.ndarray:
    """``launch`` as a float vector of n per-rank times (ValueError otherwise)."""
    launch = np.asarray(launch, dtype=np.float64)
    if launch.shape != (n,):
        raise ValueError(f"launch must have shape ({n},), got {launch.shape}")
    return launch


def check_kind(algorithm: str, kind: str, kinds: Tuple[str, ...]) -> None:
    """ValueError unless ``algorithm`` implements ``kind``."""
    if kind not in kinds:
        raise ValueError(f"algorithm {algorithm!r} implements {', '.join(kinds)}, not {kind!r}")

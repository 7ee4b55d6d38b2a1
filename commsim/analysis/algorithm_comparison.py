"""Compare collective algorithms and cost models on one scenario (`commsim algorithms`).

The engine plans its kernels from ``collective.algorithm`` / ``collective.model``
(:func:`commsim.collectives.kernels.make_kernel`); these helpers run a scenario under each
combination and node count.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from commsim.analysis.report import summarize
from commsim.collectives.kernels import algorithms_for
from commsim.scenario.spec import Scenario, SlowLink, Straggler
from commsim.sim.engine import RunResult, simulate


# NCCL's own choice held to one of its algorithms (as NCCL_ALGO=ring): "nccl:ring", "nccl:tree", ...
NCCL_PREFIX = "nccl:"


def nccl_restricted(name: str) -> Optional[str]:
    """The NCCL algorithm a comparison name ``nccl:ALGO`` holds NCCL's choice to, else None."""
    return name[len(NCCL_PREFIX):] if name.startswith(NCCL_PREFIX) else None


def registry_name(name: str) -> str:
    """The kernel registry's name a comparison name runs as: ``nccl`` for ``nccl:ALGO``."""
    return "nccl" if nccl_restricted(name) else name


def with_algorithm(scenario: Scenario, algorithm: str, model: str) -> Scenario:
    """The same scenario with another all-reduce algorithm and cost model; ``nccl:ALGO`` is
    ``algorithm: nccl`` with ``collective.nccl_algo: ALGO``.

    A calibration's link levels price the library's measured all-reduce (a ring), its physical
    fit NCCL's own collectives: another algorithm or cost model under them is a ValueError, as
    in the scenario file.
    """
    held = nccl_restricted(algorithm)
    name = registry_name(algorithm)
    if name == "nccl" and not held:  # NCCL's choice as the scenario configures it, as `run` prices it
        held = scenario.collective.nccl_algo
    cal = scenario.calibration
    if cal is not None:
        allowed = ([("ring", "alpha-beta")] if cal.levels else []) + ([("nccl", "alpha-beta")] if cal.physical else [])
        if (name, model) not in allowed:
            what = " and ".join(["the measured ring"] * bool(cal.levels) + ["NCCL's own collectives (nccl, nccl:ALGO)"] * bool(cal.physical))
            raise ValueError(f"the scenario has a calibration, which prices {what} only: got {algorithm} / {model} "
                             "(remove the calibration to compare the others)")
    collective = replace(scenario.collective, algorithm=name, model=model, nccl_algo=held,
                         nccl_proto=scenario.collective.nccl_proto if name == "nccl" else None)
    return replace(scenario, collective=collective)


def runs_at_scale(scenario: Scenario) -> bool:
    """Whether NCCL can run the scenario's ``collective.nccl_algo`` at its scale (NVLS across
    nodes needs SHARP; PAT runs no all-reduce): a comparison leaves out the rows it cannot."""
    from commsim.errors import InputError
    from commsim.scenario.schema import check_nccl_selection

    try:
        check_nccl_selection(scenario.name, scenario.collective, scenario.cluster, scenario.calibration,
                             scenario.ddp.sharding)
    except InputError:
        return False
    return True


def simulate_algorithm(scenario: Scenario, algorithm: str = "ring", model: str = "alpha-beta") -> RunResult:
    """Simulate ``scenario`` with all-reduce ``algorithm`` under cost ``model``."""
    return simulate(with_algorithm(scenario, algorithm, model))


def summarize_algorithm(scenario: Scenario, algorithm: str = "ring", model: str = "alpha-beta") -> dict:
    """The `commsim run` summary dict of ``scenario`` run with ``algorithm`` / ``model``."""
    out = summarize(with_algorithm(scenario, algorithm, model))
    out["algorithm"] = algorithm
    out["model"] = model
    return out


def with_nodes(scenario: Scenario, nodes: int, steps: Optional[int] = None) -> Scenario:
    """The same scenario on ``nodes`` nodes (stragglers naming ranks beyond the world are dropped)."""
    cluster = replace(scenario.cluster, nodes=nodes)
    kept = [s for s in (_within(s, cluster.world_size, nodes) for s in scenario.stragglers) if s is not None]
    return replace(scenario, cluster=cluster, stragglers=tuple(kept),
                   steps=scenario.steps if steps is None else steps)


def _within(s: Straggler, n: int, nodes: int) -> Optional[Straggler]:
    """Straggler ``s`` restricted to a world of ``n`` ranks on ``nodes`` nodes (None: nothing left)."""
    if isinstance(s, SlowLink):
        inside = s.rank < n if s.rank is not None else s.node < nodes
        return s if inside else None
    if s.ranks is None:  # jitter on every rank
        return s
    ranks = tuple(r for r in s.ranks if r < n)
    return replace(s, ranks=ranks) if ranks else None


def compare(scenario: Scenario, nodes: list, algorithms: list, models: list, steps: Optional[int] = None) -> list:
    """Rows of step time and efficiency for every (node count, algorithm, model) the model covers.

    Each row: nodes, world_size, algorithm, model, step_time_s (mean), comm_time_s (one
    baseline step's all-reduce time), exposed_comm_s, scaling_efficiency, fastest (the
    quickest row of its node count).
    """
    rows = []
    for count in nodes:
        sc = with_nodes(scenario, int(count), steps)
        group = []
        for model in models:
            covered = algorithms_for(model)
            for name in algorithms:
                if registry_name(name) not in covered:
                    continue
                if nccl_restricted(name) and not runs_at_scale(with_algorithm(sc, name, model)):
                    continue
                s = summarize_algorithm(sc, name, model)
                group.append({
                    "nodes": int(count), "world_size": sc.world_size, "algorithm": name, "model": model,
                    "step_time_s": s["step_time_s"]["mean"], "comm_time_s": s["comm_time_s"],
                    "exposed_comm_s": s["exposed_comm_s"], "scaling_efficiency": s["scaling_efficiency"],
                })
        best = min((r["step_time_s"] for r in group), default=None)
        for r in group:
            r["fastest"] = r["step_time_s"] == best
        rows.extend(group)
    return rows

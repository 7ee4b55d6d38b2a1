"""The links a scenario's collectives run over: one fabric, built once per scenario.

:func:`scenario_fabric` is the only place a scenario becomes a
:class:`commsim.network.fabric.Fabric`: the cluster's two link levels, priced by the scenario's
calibration when it has one, with its ``slow_link`` stragglers applied (which ports they
degrade is stated in :mod:`commsim.network.fabric`, the same for every algorithm). The other
straggler kinds perturb compute, not links (:mod:`commsim.sim.stragglers`).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Iterable

from commsim.calibration import Calibration, fitted_level_constants, measured_level_constants
from commsim.network.fabric import Fabric
from commsim.network.system import with_system
from commsim.scenario.spec import Scenario, SlowLink
from commsim.scenario.topology import cluster_fabric


def scenario_fabric(scenario: Scenario) -> Fabric:
    """The scenario's fabric: its cluster, priced per size by its calibration's measured curve
    (:func:`commsim.calibration.model.measured_level_constants`) where the calibration has link
    levels, slow links applied. Under ``collective.algorithm: nccl`` it also carries the
    physical system NCCL's collectives are priced on (:func:`commsim.network.system.with_system`):
    the calibration's physical fit where it has one (NCCL's pick still made on the nominal
    hardware the fit started from, as NCCL makes it), else the system the links describe, with
    ``collective.nccl_algo`` / ``nccl_proto`` restricting the choice."""
    cal = scenario.calibration
    pricing = partial(measured_level_constants, cal) if cal is not None and cal.levels else None
    fabric = cluster_fabric(scenario.cluster, pricing)
    collective = scenario.collective
    if collective.algorithm == "nccl":
        fit = cal.physical if cal is not None else None
        fabric = with_system(fabric, fit.system if fit is not None else None, fit.nominal if fit is not None else None,
                             collective.nccl_algo, collective.nccl_proto)
    slow = [s for s in scenario.stragglers if isinstance(s, SlowLink)]
    return with_slow_links(fabric, slow)


def with_slow_links(fabric: Fabric, slow_links: Iterable[SlowLink]) -> Fabric:
    """``fabric`` with ``slow_link`` stragglers applied: ``rank: r`` slows the send side of the port
    r uses for the ring hop r -> r+1, ``node: k`` node k's network both ways; factors multiply."""
    for s in slow_links:
        if s.rank is not None:
            fabric = fabric.with_slow_sender(s.rank, s.factor)
        else:
            fabric = fabric.with_slow_node(s.node, s.factor)
    return fabric


def fitted_fabric(fabric: Fabric, calibration: Calibration) -> Fabric:
    """``fabric`` priced per size by the calibration's fitted alpha and B of each level (for the
    size's range; :func:`commsim.calibration.model.fitted_level_constants`): what
    ``commsim collective SCENARIO --calibration`` compares the algorithms on."""
    return replace(fabric, pricing=partial(fitted_level_constants, calibration))

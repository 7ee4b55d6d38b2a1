"""The links a scenario's collectives run over: its cluster as a fabric, slow links applied."""

from __future__ import annotations

from commsim.network.fabric import Fabric, with_slow_links
from commsim.scenario.spec import Scenario


def scenario_fabric(scenario: Scenario) -> Fabric:
    """The scenario's cluster as a :class:`Fabric`, with its slow-link stragglers applied
    (for the other straggler kinds the engine perturbs compute, not links)."""
    slow = [s for s in scenario.stragglers if getattr(s, "kind", None) == "slow_link"]
    return with_slow_links(Fabric.from_cluster(scenario.cluster), slow)

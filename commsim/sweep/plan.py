"""Sweep points: each grid point resolved and validated through the loader, with its fingerprint.

Every point is validated before anything runs, so a bad grid fails in a second with the
loader's own one-line error, not after an hour. A scenario with a ``mitigation:`` section
(:mod:`commsim.mitigations.section`) gives each point its remedies, checked against the point's
scenario before anything runs; the point's summary then gains each remedy's ``commsim compare``
row under ``mitigation.<index>`` (``--grid 'mitigation[0].r=1,4'`` sweeps a remedy's parameter).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import yaml

from commsim.analysis.report import summarize
from commsim.errors import InputError
from commsim.mitigations.compare import check_mitigations
from commsim.mitigations.section import mitigation_section, section_rows
from commsim.mitigations.spec import Mitigation
from commsim.scenario.loader import load_document, load_scenario
from commsim.scenario.spec import Scenario
from commsim.sim.engine import simulate
from commsim.sweep.errors import SweepError
from commsim.sweep.grid import Grid, value_text

# a summary reads per-step and per-collective records only (step times, launch spreads, last
# ranks, collective durations), never the (steps x ranks) per-rank arrays: keep none of them
NO_RANKS = np.arange(0)


def yaml_flow(value: Any) -> str:
    """A value as one line of YAML, so the loader's override parser reads back exactly it."""
    text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), allow_unicode=True)
    if text.endswith("\n...\n"):  # the document-end marker PyYAML adds after a bare scalar
        text = text[: -len("\n...\n")]
    return text.strip()


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its index in grid order, the swept values, the resolved scenario."""

    index: int
    params: Tuple[Tuple[str, Any], ...]
    overrides: Tuple[str, ...]
    scenario: Scenario
    key: str
    mitigations: Tuple[Mitigation, ...] = ()

    @property
    def label(self) -> str:
        return " ".join(f"{k}={value_text(v)}" for k, v in self.params)


def fingerprint(scenario: Scenario) -> str:
    """A stable identity of a resolved scenario: the journal key that ``--resume`` matches on.

    The frozen spec's repr holds every field in base units, so two spellings of the same
    point ("100 Gbps" and "12.5 GB/s") are the same point, and any change is a new one."""
    return hashlib.sha256(repr(scenario).encode()).hexdigest()[:32]


def point_key(scenario: Scenario, mitigations: Tuple[Mitigation, ...]) -> str:
    """The journal key of a point: the scenario's fingerprint, and its remedies' records when it
    has any (so a point without a section keeps the key it always had)."""
    if not mitigations:
        return fingerprint(scenario)
    return hashlib.sha256((repr(scenario) + repr(mitigations)).encode()).hexdigest()[:32]


def _refuse_shadowed_keys(grid: Grid, overrides: Sequence[str], steps: Optional[int],
                          seed: Optional[int]) -> None:
    """Refuse a swept key that another option also sets for every point.

    The loader applies ``--set``, then the grid's values, then ``--steps``/``--seed``: a grid
    over ``steps`` with ``--steps 7`` would run every point at 7 steps while the results' steps
    column said 5, 10, ...; a ``--set`` of a swept key is silently replaced by the grid."""
    swept = set(grid.keys)
    for option, key in (("--steps", "steps" if steps is not None else None),
                        ("--seed", "seed" if seed is not None else None)):
        if key in swept:
            raise SweepError(f"--grid {key}", None,
                             f"expected {key} swept or set by {option}, got both: drop one of them")
    for override in overrides:
        key = override.partition("=")[0].strip()
        if key in swept:
            raise SweepError(f"--grid {key}", None,
                             f"expected {key} swept or set by --set, got both: drop one of them")
        # the grid's values apply after --set: a swept mapping replaces a --set inside it whole
        outer = next((k for k in grid.keys if _inside(key, k)), None)
        if outer is not None:
            raise SweepError(f"--grid {outer}", None,
                             f"expected --set {key} outside the swept {outer}, whose every value replaces it: "
                             f"set it inside the grid's values of {outer}, or sweep {key} instead")
    # one swept key inside another: the points' columns would disagree with what ran
    for key in grid.keys:
        outer = next((k for k in grid.keys if k != key and _inside(key, k)), None)
        if outer is not None:
            raise SweepError(f"--grid {key}", None,
                             f"expected swept keys apart, got {key} inside the swept {outer}: sweep one of them")


def _inside(key: str, outer: str) -> bool:
    """Whether key path `key` is `outer` or lies within it (``cluster.nodes`` in ``cluster``,
    ``stragglers[0].cv`` in ``stragglers``)."""
    return key == outer or key.startswith(outer + ".") or key.startswith(outer + "[")


def plan_sweep(
    scenario_path: os.PathLike | str,
    grid: Grid,
    overrides: Sequence[str] = (),
    steps: Optional[int] = None,
    seed: Optional[int] = None,
) -> List[Point]:
    """Resolve and validate every point of the grid through the loader, before anything runs.

    Raises the loader's ``ScenarioError`` (or a ``MitigationError`` for the ``mitigation:``
    section), with the grid point appended, for the first point that does not validate."""
    load_document(scenario_path)  # a missing or broken file is reported once, not per point
    _refuse_shadowed_keys(grid, overrides, steps, seed)
    points = []
    for index, params in enumerate(grid.points()):
        point_overrides = tuple(f"{k}={yaml_flow(v)}" for k, v in params.items())
        try:
            # Exactly what `commsim run --set ...` does, so the errors are the same.
            scenario = load_scenario(scenario_path, overrides, steps, seed, grid_overrides=point_overrides)
            mitigations = mitigation_section(scenario_path, [*overrides, *point_overrides]) or ()
            check_mitigations(scenario, mitigations, str(scenario_path))
        except InputError as exc:
            where = " ".join(f"{k}={value_text(v)}" for k, v in params.items())
            exc.args = (f"{exc} (grid point {index}: {where})",)
            raise
        points.append(
            Point(index, tuple(params.items()), point_overrides, scenario, point_key(scenario, mitigations),
                  mitigations)
        )
    return points


def run_point(scenario: Scenario, mitigations: Tuple[Mitigation, ...] = ()) -> Dict[str, Any]:
    """Simulate one point: ``commsim run``'s summary dict, plus the remedies' rows under
    ``mitigation`` when the point has any. Top-level so workers can pickle it.

    The run and its baseline keep no per-rank records (:data:`NO_RANKS`): the summary does not
    read them, and at thousands of ranks they are most of a point's memory and copying."""
    result = simulate(scenario, ranks=NO_RANKS)
    baseline = simulate(scenario.without_stragglers(), ranks=NO_RANKS)
    summary = summarize(scenario, result, baseline)
    if mitigations:
        summary["mitigation"] = section_rows(scenario, mitigations)
    return summary

"""Predicted all-reduce bus bandwidth against message size, and the measured points of a
calibration: the data of the ``busbw_vs_size`` plot.

The prediction is the collectives package's, the engine's own: the scenario's links as a
fabric (:func:`commsim.sim.links.scenario_fabric`), the scenario's algorithm and cost model
(:func:`commsim.collectives.kernels.make_kernel`), every rank launching at 0. T is the last
rank's finish time and busbw = S/T * 2(n-1)/n (nccl-tests, doc/PERFORMANCE.md;
:func:`commsim.collectives.busbw.busbw`).

A sweep's curves are computed once from its planned points (:func:`sweep_curves`) and can be
stored in its results.json under :data:`RESULTS_KEY` (a list of :meth:`BusbwCurve.to_json`),
so that ``commsim plot DIR`` draws them without the scenario file: :func:`stored_curves`
reads them back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from commsim.calibration.file import load_calibration
from commsim.collectives.busbw import busbw
from commsim.collectives.kernels import make_kernel
from commsim.network.fabric import Fabric
from commsim.scenario.topology import cluster_fabric
from commsim.scenario.spec import Scenario
from commsim.sim.links import scenario_fabric

from commsim.analysis.sweep_table import LINK_PREFIXES, ResultsError, key_value_label, numeric_order

RESULTS_KEY = "busbw_curves"
# 8 B .. 16 GiB, doubling: nccl-tests' usual range and beyond the largest DDP bucket.
DEFAULT_SIZES = 2.0 ** np.arange(3, 35)


def collective_finish(fabric: Fabric, size: float, algorithm: str = "ring", model: str = "alpha-beta") -> float:
    """Seconds from a simultaneous launch to the last rank's finish of one all-reduce of
    `size` bytes per rank: the one call into the collectives' kernel contract."""
    launch = np.zeros(fabric.world_size)
    return float(np.max(make_kernel(algorithm, fabric, size, model).finish_times(launch)))


def _fabric(links: Any) -> Fabric:
    if isinstance(links, Fabric):
        return links
    if isinstance(links, Scenario):
        return scenario_fabric(links)
    return cluster_fabric(links)  # a scenario.spec.Cluster


def predicted_busbw(links: Any, sizes: Iterable[float], algorithm: str = "ring",
                    model: str = "alpha-beta") -> np.ndarray:
    """Predicted all-reduce busbw (bytes/s) per size over `links` (a Fabric, a Cluster, or a
    Scenario: then its own algorithm and model unless given). NaN for a single rank."""
    if isinstance(links, Scenario) and (algorithm, model) == ("ring", "alpha-beta"):
        algorithm, model = links.collective.algorithm, links.collective.model
    fabric = _fabric(links)
    sizes = np.asarray(list(sizes), dtype=float)
    n = fabric.world_size
    if n < 2:
        return np.full(len(sizes), np.nan)
    return np.array([busbw("all_reduce", float(s), collective_finish(fabric, float(s), algorithm, model), n)
                     for s in sizes])


@dataclass(frozen=True)
class BusbwCurve:
    """Predicted busbw of one network at one world size."""

    label: str
    world_size: int
    algorithm: str
    model: str
    size_bytes: Tuple[float, ...]
    busbw_Bps: Tuple[float, ...]

    def to_json(self) -> Dict[str, Any]:
        return {"label": self.label, "world_size": self.world_size, "algorithm": self.algorithm,
                "model": self.model, "size_bytes": [int(s) for s in self.size_bytes],
                "busbw_Bps": [float(b) for b in self.busbw_Bps]}

    @classmethod
    def from_json(cls, doc: Any, source: str, where: str) -> "BusbwCurve":
        try:
            sizes = tuple(float(s) for s in doc["size_bytes"])
            bw = tuple(float(b) for b in doc["busbw_Bps"])
            curve = cls(str(doc["label"]), int(doc["world_size"]), str(doc["algorithm"]), str(doc["model"]), sizes, bw)
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultsError(source, "expected label, world_size, algorithm, model, size_bytes and busbw_Bps "
                                       f"({exc.__class__.__name__}: {exc})", where) from None
        if len(sizes) != len(bw):
            raise ResultsError(source, f"size_bytes has {len(sizes)} entries, busbw_Bps {len(bw)}", where)
        return curve


def scenario_curve(scenario: Scenario, label: str, sizes: Sequence[float] = DEFAULT_SIZES) -> BusbwCurve:
    """The predicted busbw of the scenario's links, algorithm and cost model."""
    c = scenario.collective
    return BusbwCurve(label, scenario.world_size, c.algorithm, c.model, tuple(float(s) for s in sizes),
                      tuple(float(b) for b in predicted_busbw(scenario, sizes)))


def sweep_curves(points: Sequence[Any], link_keys: Sequence[str],
                 sizes: Sequence[float] = DEFAULT_SIZES) -> List[BusbwCurve]:
    """One curve per distinct network (fabric, algorithm, model) among the points of the
    sweep's largest world size, labelled by the values of the swept link keys.

    `points` are :class:`commsim.sweep.run.Point` (anything with ``scenario`` and ``params``)."""
    if not points:
        return []
    top = max(p.scenario.world_size for p in points)
    if top < 2:  # no all-reduce on one rank: its curve would be all NaN (and bare NaN in results.json)
        return []

    # curves in numeric order of their link values (25 Gbps before 100 Gbps), whatever the grid order
    order = {}
    for k in link_keys:
        distinct = {json_key(v): v for v in (dict(p.params)[k] for p in points)}
        order[k] = {json_key(v): i for i, v in enumerate(numeric_order(list(distinct.values())))}

    def rank(p) -> Tuple[int, ...]:
        params = dict(p.params)
        return tuple(order[k][json_key(params[k])] for k in link_keys)

    curves, seen = [], set()
    for p in sorted(points, key=rank):
        sc = p.scenario
        ident = (scenario_fabric(sc), sc.collective)
        if sc.world_size != top or ident in seen:
            continue
        seen.add(ident)
        params = dict(p.params)
        label = key_value_label(link_keys, [params[k] for k in link_keys]) if link_keys else "scenario"
        curves.append(scenario_curve(sc, label, sizes))
    return curves


def json_key(value: Any) -> str:
    """A swept value as a hashable key (values may be lists or mappings)."""
    return json.dumps(value, sort_keys=True, default=str)


def results_field(points: Sequence[Any], grid: Mapping[str, Sequence[Any]]) -> List[Dict[str, Any]]:
    """What a sweep stores under RESULTS_KEY in its results.json: :func:`sweep_curves` of its
    planned points, labelled by the grid's varied link keys, as JSON."""
    link_keys = [k for k, v in grid.items() if len(v) > 1 and k.startswith(LINK_PREFIXES)]
    return [c.to_json() for c in sweep_curves(points, link_keys)]


def stored_curves(doc: Mapping[str, Any], source: str) -> Optional[List[BusbwCurve]]:
    """The curves a results.json holds under RESULTS_KEY, or None when it holds none."""
    if RESULTS_KEY not in doc:
        return None
    items = doc[RESULTS_KEY]
    if not isinstance(items, list):
        raise ResultsError(source, "expected a list of curves", RESULTS_KEY)
    return [BusbwCurve.from_json(c, source, f"{RESULTS_KEY}[{i}]") for i, c in enumerate(items)]


@dataclass(frozen=True)
class MeasuredPoints:
    """busbw measured by nccl-tests (or commsim calibrate) at one link level and world size."""

    label: str
    size_bytes: np.ndarray
    busbw_Bps: np.ndarray


def calibration_points(path: Path) -> List[MeasuredPoints]:
    """The measured table of a calibration file, per link level and world size, by size."""
    cal = load_calibration(path)
    out = []
    for level in cal.levels:
        by_n: Dict[int, List[Tuple[float, float]]] = {}
        for m in level.table:
            by_n.setdefault(int(m.world_size), []).append((float(m.size_bytes), float(m.busbw)))
        for n, pts in sorted(by_n.items()):
            pts.sort()
            out.append(MeasuredPoints(f"measured: {level.level}, {n} ranks",
                                      np.array([p[0] for p in pts]), np.array([p[1] for p in pts])))
    return out

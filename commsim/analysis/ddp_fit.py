"""Fitting DDP's own costs (``ddp.bucket_overhead``, ``ddp.overlap_slowdown``) to measured DDP runs.

Input: ``commsim validate --mode ddp --json`` reports of one job at two or more bucket caps.
Each report carries what its prediction was made from (:func:`fit_record`): the scenario with
the compute measured in that run, its calibration, and the measured step times. The fit
re-simulates every run with trial costs and solves

    min over (h, c, s) of  sum_i w_i ((T_i(h, s) + c) / M_i - 1)^2

where T_i is the simulator's steady-state step time of run i with ``bucket_overhead`` h and
``overlap_slowdown`` s (the scenario's other DDP costs as they are), c a per-step constant
common to every run of the job (what the prediction gets wrong whatever the bucket count: the
compute measurement, the optimizer, host work per step), M_i the run's measured median step
time and w_i = 1 / (its relative standard error)^2: from the best point of a coarse grid (c at
its closed-form best for each point), Gauss-Newton with a finite-difference Jacobian (c's
column is exact, 1 / M_i), taking only steps that lower the cost, h >= 0, 0 <= s <= 10, c free.
The engine's step time is piecewise linear in h and s, with kinks where a collective starts or
stops overlapping compute, or the launches (h apart) start or stop outrunning the collectives:
hence the grid start and the step control. Without c, h absorbs any per-step error of the
prediction (the fit caps' scatter becomes a per-bucket cost); c cancels in a difference
between caps of one job, so it moves a predicted T(small) - T(large) only through the h and s
it frees. c is a fit diagnostic, not a scenario key.

Standard errors: cov = (J^T W J)^-1, scaled by the reduced chi-square when it exceeds 1 (the
runs scatter more than their own step-to-step spread says; Birge ratio), with J the Jacobian
of the relative residuals at the solution.

What the runs can determine (columns of J: B_i / M_i for h, with B_i the buckets whose cost
run i's step exposes, i.e. dT_i/dh; 1 / M_i for c; the overlapped compute for s):

- h needs runs whose bucket counts differ and a step time that moves with h, else refused.
- h and c together need B_i to differ between runs: with the launches hidden behind the
  collectives' queue every run exposes only its last bucket's cost (B_i = 1 at every cap), and
  a per-bucket cost is then a per-step cost. With 2 runs, 2 constants are exactly determined
  (no degree of freedom: no reduced chi-square, standard errors from the runs' own spread);
  with 3 caps one degree of freedom is left. Where B_i does not vary at the best fit
  (PER_STEP_RCOND), h is not determined: it keeps the scenario's value and c alone is fitted,
  with a note (`per_step=False` gives the fit without c, where h stands for a per-step cost).
- s is fitted too only where a degree of freedom is left after it (4 runs with c, 3 without)
  and the Jacobian has full rank: s moves the step time only where compute overlaps a
  collective, and where the same backward overlaps communication at every cap its column is
  nearly constant, i.e. c's; with 3 caps and h, c and s the system is square, so s keeps the
  scenario's value and the fit says why. Also kept (and said) when its fitted value is not
  above its standard error. `fit_slowdown=True` forces it (refused where not of full rank).

A constant the runs cannot determine when required is refused
(:class:`commsim.calibration.CalibrationError`, one line), and so are runs on different
backends (the reports' ``backend``: a bucket's host cost is NCCL's or gloo's own).

Output (:func:`fit_yaml`): a ``ddp:`` mapping to copy into a scenario (or pass as
``--set ddp.bucket_overhead=...``), each constant with its standard error in a comment.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from commsim.calibration import CalibrationError
from commsim.calibration.file import calibration_from_dict, calibration_to_dict
from commsim.errors import InputError
from commsim.scenario import spec
from commsim.scenario.schema import parse_scenario
from commsim.sim.engine import simulate

__all__ = ["DDPRun", "DDPFit", "fit_record", "run_from_report", "predicted_step_time", "fit_ddp_costs", "fit_yaml",
           "fit_lines", "overhead_profile", "PairedDecision", "sign_test_p", "decide_paired_sign"]

MAX_SLOWDOWN = 10.0  # the key's range (commsim.scenario.spec.DDPCosts)
ITERATIONS = 30
BACKTRACKS = 30  # step halvings before a Gauss-Newton iteration gives up
H_GRID = 12  # start grid: 0 and 12 log-spaced per-bucket costs up to the step time per bucket
S_GRID = (0.0, 0.1, 0.3, 1.0, 3.0, 10.0)
# Relative finite-difference steps: the per-bucket cost is stepped by this fraction of the
# step time spread over the buckets, the slowdown by an absolute amount.
H_STEP_FRACTION = 1e-3
S_STEP = 1e-3
RANK_RCOND = 1e-6  # singular values below this fraction of the largest: not determined
# h against the per-step constant: their columns are B_i / M_i and 1 / M_i with B_i the buckets
# whose cost a run's step exposes, so they are told apart only by how B_i varies over the runs;
# a spread of a few per cent is one kink of the piecewise-linear step time, not a determination
PER_STEP_RCOND = 0.05
ZERO_COLUMN = 1e-8  # |d relative residual / d constant| below this: the constant moves nothing
# A measured step time outside these (s) is not one validate --mode ddp measured (a hand-edited
# report): below a microsecond no collective has run, above a day it is no training step; and
# near either end of the floats' range the fit's grid of per-bucket costs (up to the step time)
# and its weights (1 / M^2) overflow.
MIN_STEP_S, MAX_STEP_S = 1e-6, 86400.0


@dataclass(frozen=True)
class DDPRun:
    """One measured DDP run: the scenario its prediction used (measured compute, its bucket
    cap), the measured median step time (s) and that median's standard error (s); ``backend``:
    the torch.distributed backend it ran on (the report's ``backend``), None where not known."""

    scenario: spec.Scenario
    step_time_s: float
    stderr_s: float
    source: str = "run"
    backend: Optional[str] = None

    @property
    def buckets(self) -> int:
        return len(self.scenario.gradient_buckets())


@dataclass(frozen=True)
class DDPFit:
    """Fitted DDP costs: values (s, fraction), standard errors, which were fitted, notes, and
    the per-step constant fitted beside them."""

    bucket_overhead: float
    bucket_overhead_stderr: Optional[float]  # None: not determined (the scenario's value kept)
    overlap_slowdown: float
    overlap_slowdown_stderr: Optional[float]  # None: not fitted (the scenario's value kept)
    runs: Tuple[str, ...]
    measured_s: Tuple[float, ...]
    predicted_s: Tuple[float, ...]
    reduced_chi2: Optional[float]
    notes: Tuple[str, ...] = ()
    # what the prediction misses per step whatever the bucket count (compute calibration,
    # optimizer, host work): a fit diagnostic, not a scenario key; predicted_s includes it
    per_step_offset: float = 0.0
    per_step_offset_stderr: Optional[float] = None  # None: not fitted (0 used)


# --- the record a DDP validation writes, and reading it back ----------------------------------

def _median_stderr(values: Sequence[float]) -> Tuple[float, float]:
    """Median and its standard error (1.2533 sigma / sqrt(n) for roughly normal samples)."""
    v = [float(x) for x in values]
    med = statistics.median(v)
    if len(v) < 2:
        return med, abs(med)  # one step says nothing about its own spread
    return med, 1.2533 * statistics.stdev(v) / math.sqrt(len(v))


def fit_record(scenario: spec.Scenario, calibration: Any, step_times_s: Sequence[float]) -> Dict[str, Any]:
    """What a ``validate --mode ddp`` report keeps for :func:`run_from_report`: the scenario
    its prediction used (JSON-able, calibration included) and the measured step times."""
    sc = asdict(replace(scenario, calibration=None, stragglers=()))
    sc.pop("calibration")
    return {"scenario": sc, "calibration": None if calibration is None else calibration_to_dict(calibration),
            "step_times_s": [float(t) for t in step_times_s], "stragglers": len(scenario.stragglers)}


# the record's nested mappings: each a spec dataclass's fields (fit_record writes asdict())
_RECORD_SHAPE: Mapping[str, Any] = {
    "": spec.Scenario, "cluster": spec.Cluster, "cluster.intra_node": spec.Link, "cluster.inter_node": spec.Link,
    "model": spec.Model, "compute": spec.Compute, "ddp": spec.DDP, "ddp.costs": spec.DDPCosts,
    "collective": spec.Collective,
}


def _check_shape(d: Any, source: str) -> None:
    """Refuse a scenario record whose mappings are not the ones :func:`fit_record` writes (not a
    mapping, a key missing or unknown) at the key path, before it is built: the dataclasses'
    own TypeError or KeyError would name neither the key nor what it should hold."""
    for where, cls in _RECORD_SHAPE.items():
        key = "ddp_fit_input.scenario" + (f".{where}" if where else "")
        node = d
        for part in where.split(".") if where else ():
            node = node[part]  # its parent was checked first (the table is in that order)
        if not isinstance(node, Mapping):
            raise CalibrationError(f"expected a mapping (as fit_record writes it), got {node!r:.60}",
                                   source=source, key=key)
        names = [f.name for f in fields(cls) if not (cls is spec.Scenario and f.name == "calibration")]
        for k in node:
            if k not in names:
                raise CalibrationError(f"unknown key; expected one of {', '.join(names)}", source=source,
                                       key=f"{key}.{k}")
        for k in names:
            if k not in node:
                raise CalibrationError("missing (fit_record writes every field of the scenario)", source=source,
                                       key=f"{key}.{k}")
    if d["stragglers"] not in ([], ()):
        # the fit simulates the record without them (fit_record writes [] here and their count
        # beside the scenario): a straggler list here would be dropped unread
        raise CalibrationError(f"expected [] (fit_record keeps the run's stragglers as the count "
                               f"ddp_fit_input.stragglers, and the fit takes runs without them), got {d['stragglers']!r:.60}",
                               source=source, key="ddp_fit_input.scenario.stragglers")


def _scenario_from_dict(d: Mapping[str, Any], calibration: Any) -> spec.Scenario:
    c = d["cluster"]
    cluster = spec.Cluster(nodes=c["nodes"], gpus_per_node=c["gpus_per_node"],
                           intra_node=spec.Link(**c["intra_node"]), inter_node=spec.Link(**c["inter_node"]),
                           intra_kind=c["intra_kind"], nics_per_node=c["nics_per_node"])
    ddp = dict(d["ddp"])
    ddp["costs"] = spec.DDPCosts(**ddp["costs"])
    for key in ("bucket_sizes", "bucket_ready"):  # tuples in the spec, lists in JSON
        ddp[key] = None if ddp.get(key) is None else tuple(ddp[key])
    return spec.Scenario(cluster=cluster, model=spec.Model(**d["model"]), compute=spec.Compute(**d["compute"]),
                         name=d["name"], description=d["description"], seed=d["seed"], steps=d["steps"],
                         ddp=spec.DDP(**ddp), collective=spec.Collective(**d["collective"]), calibration=calibration)


def _check_record(d: Mapping[str, Any], source: str) -> None:
    """Refuse a scenario record (a report edited by hand: a string, NaN or negative number where
    a figure belongs, a combination the simulator does not model) with the checks a scenario file
    gets: the record, its DDP costs read as the ``ddp:`` keys they are in a file, through the
    strict schema reader, its errors re-reported under ``ddp_fit_input.scenario``; and a value
    the reader takes but reads as another (``'25 MB'``: a record holds the numbers
    :func:`fit_record` wrote) refused at its key."""
    def given(v: Any) -> Any:  # a record's None is a file's absent key; its tuples, lists (as from JSON)
        if isinstance(v, Mapping):
            return {k: given(x) for k, x in v.items() if x is not None}
        return [given(x) for x in v] if isinstance(v, (list, tuple)) else v

    doc = given(d)
    doc["ddp"] = {**{k: v for k, v in doc["ddp"].items() if k != "costs"}, **doc["ddp"]["costs"]}
    # a record keeps the cap beside the layout DDP built (validate feeds both), which a file may
    # not give together: the cap and first bucket are read in a pass of their own
    layout = ("bucket_sizes", "bucket_ready")
    caps = {**doc, "ddp": {k: v for k, v in doc["ddp"].items() if k not in layout}}
    if any(k in doc["ddp"] for k in layout):
        doc["ddp"] = {k: v for k, v in doc["ddp"].items() if k not in ("bucket_cap", "first_bucket")}
    try:
        parsed, capped = parse_scenario(doc, source), parse_scenario(caps, source)
    except InputError as exc:
        path = exc.path or ""
        head, _, cost = path.partition(".")
        if head == "ddp" and cost in {f.name for f in fields(spec.DDPCosts)}:
            path = f"ddp.costs.{cost}"  # read as a file's ddp: keys, kept under ddp.costs in the record
        raise CalibrationError(exc.message, source=source,
                               key="ddp_fit_input.scenario" + (f".{path}" if path else "")) from None
    read = asdict(replace(parsed, ddp=replace(parsed.ddp, bucket_cap=capped.ddp.bucket_cap,
                                              first_bucket=capped.ddp.first_bucket)))
    read.pop("calibration")  # fit_record keeps it beside the scenario
    for path, expected, got in _differences(read, d, "ddp_fit_input.scenario"):
        if got is _MISSING:
            raise CalibrationError("missing (fit_record writes every field of the scenario)", source=source, key=path)
        raise CalibrationError(f"expected {expected!r} as fit_record writes it (plain numbers in SI units), "
                               f"got {got!r}", source=source, key=path)


_MISSING = object()


def _differences(a: Any, b: Any, path: str):
    """(key path, a's value, b's value) where b differs from the asdict() tree a, in a's key
    order (b's value :data:`_MISSING` where b lacks a key of a)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for k in a:
            yield from _differences(a[k], b.get(k, _MISSING), f"{path}.{k}")
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from _differences(x, y, f"{path}[{i}]")
    elif a != b or isinstance(a, bool) != isinstance(b, bool):
        yield path, a, b


def _had_stragglers(rec: Mapping[str, Any], source: str) -> bool:
    """Whether the record's run had stragglers: :func:`fit_record` writes their count (0: none);
    a JSON boolean says the same. Anything else (``"no"``, ``"false"``, ``null``, 1.0, a
    negative count) is refused: read by truth value, ``"no"`` would be a run with stragglers
    and 0.0 one without, neither what the report meant to say."""
    if "stragglers" not in rec:
        raise CalibrationError("missing (fit_record writes the run's straggler count)", source=source,
                               key="ddp_fit_input.stragglers")
    v = rec["stragglers"]
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v >= 0:
        return v > 0
    raise CalibrationError(f"expected the run's straggler count (an integer >= 0, as fit_record writes it) or a "
                           f"boolean, got {v!r:.60}", source=source, key="ddp_fit_input.stragglers")


def run_from_report(report: Any, source: str) -> DDPRun:
    """The :class:`DDPRun` of one ``validate --mode ddp --json`` report (CalibrationError naming
    `source` and the key when it is not one, or its run had stragglers)."""
    if not isinstance(report, Mapping):
        raise CalibrationError("expected a validate --mode ddp JSON report (a mapping)", source=source)
    if report.get("mode") != "ddp":
        raise CalibrationError(f"expected a report of validate --mode ddp, got mode {report.get('mode')!r}",
                               source=source, key="mode")
    rec = report.get("ddp_fit_input")
    if not isinstance(rec, Mapping):
        raise CalibrationError("missing (the report was written before validate --mode ddp recorded its inputs; "
                               "rerun it)", source=source, key="ddp_fit_input")
    if _had_stragglers(rec, source):
        raise CalibrationError("the run had stragglers (stalls): fit DDP's costs from runs without them",
                               source=source, key="ddp_fit_input.stragglers")
    times = rec.get("step_times_s")
    if not isinstance(times, list) or not times or not all(
            isinstance(t, (int, float)) and not isinstance(t, bool) and MIN_STEP_S <= t <= MAX_STEP_S for t in times):
        raise CalibrationError(f"expected a list of step times in seconds, each from {MIN_STEP_S:g} to "
                               f"{MAX_STEP_S:g}, got {times!r:.60}", source=source, key="ddp_fit_input.step_times_s")
    if "scenario" not in rec:
        raise CalibrationError("missing (fit_record writes the scenario the prediction used)", source=source,
                               key="ddp_fit_input.scenario")
    try:
        cal = None if rec.get("calibration") is None else calibration_from_dict(rec["calibration"], source)
    except CalibrationError as exc:  # its key path is the calibration's own: under the record's key
        raise CalibrationError(exc.message, source=source,
                               key="ddp_fit_input.calibration" + (f".{exc.path}" if exc.path else "")) from None
    try:
        _check_shape(rec["scenario"], source)
        _check_record(rec["scenario"], source)  # the schema's reasons, at their keys, before the dataclasses'
        scenario = _scenario_from_dict(rec["scenario"], cal)
    except CalibrationError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise CalibrationError(f"not a scenario record ({type(exc).__name__}: {exc})", source=source,
                               key="ddp_fit_input.scenario") from None
    med, err = _median_stderr(times)
    return DDPRun(scenario, med, err, source, _backend(report, source))


def _backend(report: Mapping[str, Any], source: str) -> Optional[str]:
    """The report's ``backend`` (``commsim validate`` writes it: gloo, nccl), None where absent."""
    if "backend" not in report:
        return None
    v = report["backend"]
    if not isinstance(v, str) or not v.strip():
        raise CalibrationError(f"expected the torch.distributed backend the run used (a name such as gloo or nccl, "
                               f"as validate writes it), got {v!r:.60}", source=source, key="backend")
    return v


# --- the fit ----------------------------------------------------------------------------------

def predicted_step_time(run: DDPRun, bucket_overhead: float, overlap_slowdown: float) -> float:
    """The simulated steady-state step time (s) of `run` with these two DDP costs."""
    sc = run.scenario
    costs = replace(sc.ddp.costs, bucket_overhead=max(bucket_overhead, 0.0),
                    overlap_slowdown=min(max(overlap_slowdown, 0.0), MAX_SLOWDOWN))
    return float(simulate(replace(sc, ddp=replace(sc.ddp, costs=costs), steps=min(sc.steps, 4))).step_time[-1])


class _Layout:
    """Which constants a fit solves for, and where each sits in the parameter vector theta:
    h (``bucket_overhead``) first, then the per-step constant c, then s (``overlap_slowdown``)."""

    def __init__(self, fit_c: bool, fit_s: bool, s0: float):
        self.fit_c, self.fit_s, self.s0 = fit_c, fit_s, s0
        self.c = 1 if fit_c else None
        self.s = (2 if fit_c else 1) if fit_s else None
        self.size = 1 + int(fit_c) + int(fit_s)

    def values(self, theta: np.ndarray) -> Tuple[float, float, float]:
        """(h, c, s) of `theta` (c = 0 and s = the scenario's where not fitted)."""
        return (float(theta[0]), float(theta[self.c]) if self.fit_c else 0.0,
                float(theta[self.s]) if self.fit_s else self.s0)


def _simulated(runs: Sequence[DDPRun], h: float, s: float) -> np.ndarray:
    """Every run's :func:`predicted_step_time`; CalibrationError naming the run where it is not
    a finite time (a record the scenario reader takes but the engine overflows on, such as a
    memory bandwidth of 1e-300 B/s), which the fit's costs and steps would carry as NaN."""
    with np.errstate(all="ignore"):  # the overflow is reported below, once, not as numpy's warnings
        out = np.array([predicted_step_time(r, h, s) for r in runs])
    for r, t in zip(runs, out):
        if not math.isfinite(t):
            raise CalibrationError(f"the simulated step time of this run's record is {float(t)} s (with bucket_overhead "
                                   f"{h:.3g} s, overlap_slowdown {s:.3g}): its scenario is not one the engine can "
                                   "price (check the record's rates and times)", source=r.source,
                                   key="ddp_fit_input.scenario")
    return out


def _residuals(runs: Sequence[DDPRun], theta: np.ndarray, lay: _Layout) -> np.ndarray:
    h, c, s = lay.values(theta)
    m = np.array([r.step_time_s for r in runs])
    return (_simulated(runs, h, s) + c) / m - 1.0


def _jacobian(runs, theta, lay: _Layout, h_step) -> np.ndarray:
    """Forward differences for h and s (central ones would cross h = 0); c enters linearly,
    its column is exact: d r_i / d c = 1 / M_i."""
    base = _residuals(runs, theta, lay)
    J = np.empty((len(runs), lay.size))
    for k, d in ((0, h_step), (lay.s, S_STEP)):
        if k is None:
            continue
        t = theta.copy()
        if k == lay.s and t[k] + d > MAX_SLOWDOWN:
            d = -d
        t[k] += d
        J[:, k] = (_residuals(runs, t, lay) - base) / d
    if lay.fit_c:
        J[:, lay.c] = 1.0 / np.array([r.step_time_s for r in runs])
    return J


def _clip(theta: np.ndarray, lay: _Layout) -> np.ndarray:
    out = theta.copy()
    out[0] = max(out[0], 0.0)  # c is not bounded: the prediction may be too slow as well as too fast
    if lay.fit_s:
        out[lay.s] = min(max(out[lay.s], 0.0), MAX_SLOWDOWN)
    return out


def _best_offset(runs, w, sim: np.ndarray) -> float:
    """The per-step constant that minimises sum w_i ((sim_i + c) / M_i - 1)^2 for fixed
    simulated times: the weighted least-squares solution of a model linear in c."""
    m = np.array([r.step_time_s for r in runs])
    e = sim / m - 1.0
    return float(-np.sum(w * e / m) / np.sum(w / m ** 2))


def _start(runs, w, lay: _Layout, h_max) -> np.ndarray:
    """The best point of a coarse grid (c at its best for each grid point): the cost is
    piecewise smooth with kinks where a collective stops or starts overlapping compute, so
    Gauss-Newton from an arbitrary start can stop at a kink far from the minimum."""
    hs = np.concatenate(([0.0], np.geomspace(h_max * 1e-4, h_max, H_GRID)))
    ss = S_GRID if lay.fit_s else (lay.s0,)
    best, best_cost = None, np.inf
    for h in hs:
        for sv in ss:
            theta = np.zeros(lay.size)
            theta[0] = h
            if lay.fit_s:
                theta[lay.s] = sv
            if lay.fit_c:
                theta[lay.c] = _best_offset(runs, w, _simulated(runs, h, sv))
            r = _residuals(runs, theta, lay)
            c = float(np.sum(w * r ** 2))
            if c < best_cost:
                best, best_cost = theta, c
    return best


def _solve(runs, w, lay: _Layout, h_max, h_step):
    """Projected Gauss-Newton with backtracking from the best grid point: a step is taken only
    if it lowers the weighted sum of squares (a full step can overshoot a kink)."""
    theta = _start(runs, w, lay, h_max)
    r = _residuals(runs, theta, lay)
    cost = float(np.sum(w * r ** 2))
    sw = np.sqrt(w)
    for _ in range(ITERATIONS):
        J = _jacobian(runs, theta, lay, h_step)
        step, *_ = np.linalg.lstsq(J * sw[:, None], -r * sw, rcond=None)
        for _ in range(BACKTRACKS):
            new = _clip(theta + step, lay)
            r_new = _residuals(runs, new, lay)
            c_new = float(np.sum(w * r_new ** 2))
            if c_new < cost:
                break
            step = step / 2
        else:
            break  # no step lowers the cost: a minimum (of the piecewise-linear model)
        converged = cost - c_new <= 1e-12 * max(cost, 1e-300)
        theta, r, cost = new, r_new, c_new
        if converged:
            break
    return theta, r, _jacobian(runs, theta, lay, h_step)


def _full_rank(J: np.ndarray, w: np.ndarray, rcond: float = RANK_RCOND) -> bool:
    """Whether the weighted Jacobian's columns are independent. Each is scaled to unit length
    first (h, c and s differ in units), after a column that moves no run's relative residual
    by more than the finite differences' rounding (ZERO_COLUMN) counts as zero: not determined."""
    if not np.all(np.max(np.abs(J), axis=0) > ZERO_COLUMN):
        return False
    A = J * np.sqrt(w)[:, None]
    sv = np.linalg.svd(A / np.linalg.norm(A, axis=0), compute_uv=False)
    return bool(sv.size and sv[-1] > rcond * sv[0])


def _errors(names: str, runs, w, r, J):
    """(standard errors, reduced chi-square or None) at a solution."""
    dof = len(runs) - J.shape[1]
    red = float(np.sum(w * r ** 2)) / dof if dof > 0 else None
    try:
        cov = np.linalg.inv(J.T @ (J * w[:, None]))
    except np.linalg.LinAlgError:
        raise CalibrationError(f"{names}: the runs cannot determine ddp.bucket_overhead (singular fit)") from None
    cov *= max(1.0, red or 1.0)  # the runs scatter more than their own spread says: widen (Birge ratio)
    return np.sqrt(np.maximum(np.diag(cov), 0.0)), red


def _fit_offset_only(runs, w, names: str, notes: List[str], dropped_s: bool) -> DDPFit:
    """The fallback where the runs cannot tell ``bucket_overhead`` from the per-step constant:
    h and s keep the scenario's values (said in the notes) and c alone is fitted, in closed
    form (:func:`_best_offset`), its variance 1 / sum(w_i / M_i^2) widened by the Birge ratio."""
    costs = runs[0].scenario.ddp.costs
    h0, s0 = costs.bucket_overhead, costs.overlap_slowdown
    m = np.array([r.step_time_s for r in runs])
    sim = _simulated(runs, h0, s0)
    c = _best_offset(runs, w, sim)
    r = (sim + c) / m - 1.0
    red = float(np.sum(w * r ** 2)) / (len(runs) - 1)
    se_c = math.sqrt(max(1.0, red) / float(np.sum(w / m ** 2)))
    if dropped_s:
        notes.append(f"ddp.overlap_slowdown kept at {s0:g} (the scenario's): bucket_overhead is not determined")
    notes.append(f"ddp.bucket_overhead kept at {h0 * 1e6:.4g} us (the scenario's): the runs cannot tell it from a "
                 "per-step constant (at the best fit every cap's step exposes the same buckets' launch cost, the "
                 "others hidden behind the collectives; caps whose launches show, smaller ones, would determine it)")
    pred = tuple(float(p) for p in sim + c)
    return DDPFit(h0, None, s0, None, tuple(x.source for x in runs), tuple(x.step_time_s for x in runs), pred, red,
                  tuple(notes), c, se_c)


def _same_scenario(a: spec.Scenario, b: spec.Scenario) -> bool:
    """Whether two runs' scenarios are equal (a calibration holding arrays, whose == has no
    single truth value, counts as different: two runs are refused as one only when certain)."""
    try:
        return bool(a == b)
    except (ValueError, TypeError):
        return False


def fit_ddp_costs(runs: Sequence[DDPRun], fit_slowdown: Optional[bool] = None,
                  per_step: Optional[bool] = None) -> DDPFit:
    """Fit ``bucket_overhead``, the per-step constant (`per_step`) and ``overlap_slowdown``
    (`fit_slowdown`) to the runs (see the module docstring for when each is determined).
    None: where the runs determine it, with a note where not; True: required (CalibrationError
    when the runs cannot determine it); False: not fitted (c = 0, s the scenario's).
    CalibrationError with the reason when the runs cannot determine ``bucket_overhead``."""
    runs = list(runs)
    names = ", ".join(r.source for r in runs) or "no runs"
    if len(runs) < 2:
        raise CalibrationError(f"{names}: ddp.bucket_overhead needs runs at two or more bucket caps, got {len(runs)} run(s)")
    for i, r in enumerate(runs):
        # one run given twice (the same file twice, or a copy) would count its cap double
        twin = next((q for q in runs[:i] if (q.step_time_s, q.stderr_s) == (r.step_time_s, r.stderr_s)
                     and _same_scenario(q.scenario, r.scenario)), None)
        if twin is not None:
            raise CalibrationError(f"{twin.source} and {r.source} are the same run (the same scenario and step times): "
                                   "give each run once")
    known = [r for r in runs if r.backend is not None]
    other = next((r for r in known if r.backend != known[0].backend), None)
    if other is not None:
        # a bucket's host cost is the backend's own (NCCL's kernel launch and stream work against
        # gloo's CPU threads): one constant for both would be neither's
        first = known[0]
        raise CalibrationError(f"{first.source} and {other.source} are runs on different backends "
                               f"({first.backend} and {other.backend}, their reports' key backend): fit each "
                               "backend's runs on their own")
    counts = sorted({r.buckets for r in runs})
    if len(counts) < 2:
        raise CalibrationError(f"{names}: ddp.bucket_overhead needs runs whose bucket counts differ; every run has "
                               f"{counts[0]} bucket(s) (use caps further apart, e.g. 1 MB and 25 MB)")
    shapes = {(r.scenario.model.parameters, r.scenario.cluster.world_size, r.scenario.ddp.gradient_accumulation)
              for r in runs}
    if len(shapes) > 1:
        raise CalibrationError(f"{names}: the runs are of different jobs (parameters, world size, accumulation: "
                               f"{sorted(shapes)}); fit one job at several bucket caps")
    rel_err = np.array([max(r.stderr_s / r.step_time_s, 1e-6) for r in runs])
    w = 1.0 / rel_err ** 2
    s0 = runs[0].scenario.ddp.costs.overlap_slowdown
    h_max = statistics.median(r.step_time_s / r.buckets for r in runs)  # the whole step spread over the buckets
    h_step = H_STEP_FRACTION * h_max
    n = len(runs)
    notes: List[str] = []
    want_c = per_step is not False
    # the slowdown, fitted automatically only where a degree of freedom is left over after it
    # (an exact fit of n constants to n runs says nothing about their scatter)
    need_s = 3 + int(want_c)
    want_s = fit_slowdown if fit_slowdown is not None else n >= need_s
    if fit_slowdown is None and not want_s:
        notes.append(f"ddp.overlap_slowdown kept at {s0:g} (the scenario's): fitting it too needs {need_s} or more "
                     f"runs{' with the per-step constant' if want_c else ''}, got {n}")
    lay = _Layout(want_c, want_s, s0)
    theta, r, J = _solve(runs, w, lay, h_max, h_step)
    if want_c and not _full_rank(J[:, :2], w, PER_STEP_RCOND):
        # at the best fit the step times move with h alike in every run (the same buckets' launch
        # costs exposed, the rest hidden behind the collectives): there h is a per-step constant,
        # and any h up to where the launches start to show fits as well, c taking the rest
        if per_step:
            raise CalibrationError(f"{names}: the runs cannot determine a per-step constant together with "
                                   "ddp.bucket_overhead (their step times move with it alike)")
        return _fit_offset_only(runs, w, names, notes, want_s)
    if want_s and not _full_rank(J, w):
        if fit_slowdown:
            raise CalibrationError(f"{names}: the runs cannot determine ddp.overlap_slowdown together with "
                                   "ddp.bucket_overhead" + (" and a per-step constant" if want_c else "")
                                   + " (their step times move alike); fit bucket_overhead alone")
        notes.append(f"ddp.overlap_slowdown kept at {s0:g}: the runs cannot tell it from bucket_overhead"
                     + (" and the per-step constant (the same compute overlaps at every cap)" if want_c else ""))
        want_s = False
        lay = _Layout(want_c, False, s0)
        theta, r, J = _solve(runs, w, lay, h_max, h_step)
    if not np.any(np.abs(J[:, 0]) > 0):
        raise CalibrationError(f"{names}: the runs' predicted step times do not depend on ddp.bucket_overhead "
                               "(communication fully hidden behind compute): use a job whose communication is exposed")
    se, red = _errors(names, runs, w, r, J)
    if want_s and fit_slowdown is None and not se[lay.s] < theta[lay.s]:
        # fitted, but not distinguishable from zero: the runs do not determine it
        notes.append(f"ddp.overlap_slowdown kept at {s0:g}: the runs do not determine it "
                     f"(fit gave {theta[lay.s]:.3g} +- {se[lay.s]:.2g})")
        want_s = False
        lay = _Layout(want_c, False, s0)
        theta, r, J = _solve(runs, w, lay, h_max, h_step)
        se, red = _errors(names, runs, w, r, J)
    if red is None:
        notes.append(f"exactly determined ({n} runs, {lay.size} constants): no run is left to check the fit, so the "
                     "standard errors are the runs' own spread only")
    if theta[0] == 0.0:
        notes.append("ddp.bucket_overhead is at its bound 0: the runs are faster than the model without it")
    elif se[0] > theta[0]:
        notes.append(f"ddp.bucket_overhead is poorly determined (standard error {se[0] * 1e6:.3g} us > the value)")
    h, c, s = lay.values(theta)
    pred = tuple(float(p) for p in _simulated(runs, h, s) + c)
    return DDPFit(h, float(se[0]), s, float(se[lay.s]) if want_s else None,
                  tuple(x.source for x in runs), tuple(x.step_time_s for x in runs), pred, red, tuple(notes),
                  c, float(se[lay.c]) if want_c else None)


def overhead_profile(runs: Sequence[DDPRun], fit: DDPFit, level: float = 1.0, points: int = 48) -> Tuple[float, float]:
    """The ``bucket_overhead`` values the runs allow: the hull of the h (on a grid of 0 and
    `points` log-spaced values up to the step time per bucket, plus the fit's) whose weighted sum
    of squares, with the per-step constant at its best for that h (where `fit` fitted one) and
    s at the fit's, is within `level` x max(1, reduced chi-square) of the smallest: the profile
    likelihood interval (level 1: about 1 standard error; Venzon and Moolgavkar, Appl. Statist.
    37 (1988) 87). Where the runs cannot tell h from the per-step constant the cost is flat from
    0 to where the launches start to show, and so is the interval: the prediction's spread over
    it says what the runs leave open."""
    runs = list(runs)
    w = 1.0 / np.array([max(r.stderr_s / r.step_time_s, 1e-6) for r in runs]) ** 2
    m = np.array([r.step_time_s for r in runs])
    h_max = statistics.median(r.step_time_s / r.buckets for r in runs)
    hs = np.unique(np.concatenate(([0.0, fit.bucket_overhead], np.geomspace(h_max * 1e-4, h_max, points))))
    with_c = fit.per_step_offset_stderr is not None
    costs = []
    for h in hs:
        sim = _simulated(runs, float(h), fit.overlap_slowdown)
        c = _best_offset(runs, w, sim) if with_c else 0.0
        costs.append(float(np.sum(w * ((sim + c) / m - 1.0) ** 2)))
    costs = np.array(costs)
    inside = hs[costs <= costs.min() + level * max(1.0, fit.reduced_chi2 or 1.0)]
    return float(inside.min()), float(inside.max())


# --- writing it -------------------------------------------------------------------------------

def fit_yaml(fit: DDPFit, command: str = "") -> str:
    """The fit as a scenario fragment: a ``ddp:`` mapping with the fitted keys (copy them
    into a scenario's ``ddp`` section, or pass them with ``--set``)."""
    lines = ["# DDP's own costs fitted to validate --mode ddp runs at several bucket caps",
             f"# ({', '.join(fit.runs)}){'; ' + command if command else ''}",
             "# Use: copy these keys into a scenario's ddp: section (its other DDP keys stay), or",
             f"#   commsim run SCENARIO --set 'ddp.bucket_overhead={fit.bucket_overhead * 1e6:.6g} us'"
             + (f" --set ddp.overlap_slowdown={fit.overlap_slowdown:.6g}" if fit.overlap_slowdown_stderr is not None else ""),
             "ddp:",
             f"  bucket_overhead: {fit.bucket_overhead * 1e6:.6g} us   # "
             + (f"+- {fit.bucket_overhead_stderr * 1e6:.3g} us (1 s.e.)" if fit.bucket_overhead_stderr is not None
                else "not determined by these runs: the scenario's value")]
    if fit.overlap_slowdown_stderr is not None:
        lines.append(f"  overlap_slowdown: {fit.overlap_slowdown:.6g}   # +- {fit.overlap_slowdown_stderr:.3g} (1 s.e.)")
    else:
        lines.append(f"  # overlap_slowdown: not fitted ({fit.overlap_slowdown:g} used)")
    lines.append("# per-step constant (a fit diagnostic, not a scenario key): "
                 + (f"{fit.per_step_offset * 1e3:+.4g} ms +- {fit.per_step_offset_stderr * 1e3:.3g} ms per step"
                    if fit.per_step_offset_stderr is not None else "not fitted"))
    lines.extend(f"# note: {n}" for n in fit.notes)
    return "\n".join(lines) + "\n"


def fit_lines(fit: DDPFit) -> List[str]:
    """What ``commsim calibrate`` prints about the fit."""
    out = [f"ddp.bucket_overhead = {fit.bucket_overhead * 1e6:.4g} us "
           + (f"+- {fit.bucket_overhead_stderr * 1e6:.2g} us" if fit.bucket_overhead_stderr is not None
              else "(not determined: the scenario's value)")]
    if fit.overlap_slowdown_stderr is not None:
        out.append(f"ddp.overlap_slowdown = {fit.overlap_slowdown:.4g} +- {fit.overlap_slowdown_stderr:.2g}")
    if fit.per_step_offset_stderr is not None:
        out.append(f"per-step constant = {fit.per_step_offset * 1e3:+.4g} ms +- {fit.per_step_offset_stderr * 1e3:.2g} ms "
                   "(what the prediction misses whatever the bucket count; not a scenario key)")
    for src, m, p in zip(fit.runs, fit.measured_s, fit.predicted_s):
        out.append(f"  {src}: measured {m * 1e3:.2f} ms, fitted model {p * 1e3:.2f} ms ({(p / m - 1) * 100:+.1f}%)")
    if fit.reduced_chi2 is not None:
        out.append(f"  reduced chi-square {fit.reduced_chi2:.3g}")
    out.extend(f"  note: {n}" for n in fit.notes)
    return out


# --- deciding the sign of a measured difference -----------------------------------------------

@dataclass(frozen=True)
class PairedDecision:
    """The sign of paired differences d_k (e.g. T(small cap) - T(large cap) in round k):
    their median, a bootstrap interval of that median, how many rounds share its sign, the
    two-sided sign-test probability of that many or more under no effect, and whether the
    sign is decided (both the sign test and the interval say so)."""

    median: float
    interval: Tuple[float, float]
    agreeing: int  # rounds whose difference has the median's sign
    nonzero: int  # rounds with a nonzero difference (the sign test's N)
    p_value: float
    decided: bool
    sign: int  # of the median when decided, else 0


def sign_test_p(agreeing: int, n: int) -> float:
    """Two-sided sign-test probability: 2 P(X >= agreeing), X ~ Binomial(n, 1/2), capped at 1
    (the exact binomial test; Conover, Practical Nonparametric Statistics, Sec. 3.4)."""
    if n <= 0:
        return 1.0
    k = max(agreeing, n - agreeing)
    tail = sum(math.comb(n, j) for j in range(k, n + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)


def decide_paired_sign(diffs: Sequence[float], alpha: float = 0.05, resamples: int = 4000,
                       seed: int = 0, rounds: Optional[Sequence[Any]] = None) -> PairedDecision:
    """Decide the sign of paired differences on a noisy machine: the sign test
    (:func:`sign_test_p` <= `alpha`: few pairs can decide only when nearly all agree, e.g.
    6 of 6, 9 of 10 or 10 of 12) and the percentile bootstrap interval of the median at level
    1 - `alpha` (Efron and Tibshirani, An Introduction to the Bootstrap, Ch. 13; seeded, so the
    decision is reproducible) excluding 0. The sign test alone ignores magnitudes, the interval
    alone trusts a few large pairs: both must agree.

    `rounds` (one label per difference): pairs measured in one round can share a burst of the
    machine's load, so the bootstrap resamples whole rounds (the cluster bootstrap, Davison and
    Hinkley, Bootstrap Methods and their Application, Sec. 3.8), which widens the interval by
    as much as the pairs of a round move together."""
    d = np.asarray([float(x) for x in diffs])
    if d.size == 0:
        raise ValueError("no differences to decide on")
    med = float(np.median(d))
    s = (med > 0) - (med < 0)
    nonzero = int(np.count_nonzero(d))
    agreeing = int(np.sum(np.sign(d) == s)) if s else 0
    p = sign_test_p(agreeing, nonzero) if s else 1.0
    rng = np.random.default_rng(seed)
    if rounds is None:
        meds = np.median(d[rng.integers(0, d.size, size=(resamples, d.size))], axis=1)
    else:
        if len(rounds) != d.size:
            raise ValueError(f"{len(rounds)} round labels for {d.size} differences")
        labels = list(dict.fromkeys(rounds))
        groups = [d[[j for j, r in enumerate(rounds) if r == lab]] for lab in labels]
        picks = rng.integers(0, len(groups), size=(resamples, len(groups)))
        meds = np.array([np.median(np.concatenate([groups[g] for g in row])) for row in picks])
    lo, hi = (float(v) for v in np.quantile(meds, [alpha / 2, 1 - alpha / 2]))
    decided = bool(s and p <= alpha and (lo > 0 or hi < 0))
    return PairedDecision(med, (lo, hi), agreeing, nonzero, p, decided, s if decided else 0)

"""Fit a system's physical constants jointly from nccl-tests logs of one system at any scale.

Every log (1 node; 2 nodes x 1 GPU; full nodes; all_reduce, all_gather and reduce_scatter
tables alike) is priced by :mod:`commsim.collectives.nccl_tuner` at its own scale, and the
constants of :attr:`System.FIT_NAMES` (link bandwidths and hop latencies per level, NVLS and
tree efficiencies, launch latency, per-channel protocol ceilings) are chosen to minimise the
squared log ratio predicted/measured time over all rows (least squares on relative error
across sizes), with a Huber weight so that one glitched row (a 4x outlier) cannot steer a
fit. NCCL's choice of algorithm and protocol comes from the *nominal* system, as NCCL's own
tuner does not know the measured rates.

What the logs determine: a constant is *determined* when the logs shrink its uncertainty to
less than half of the prior's (posterior vs prior standard deviation of its logarithm, with
a prior of a factor :data:`PRIOR_FACTOR` around the nominal value); the others stay at their
nominal value and are marked ``nominal`` with the reason (e.g. no multi-node log for the NIC
bandwidth). A determined constant records its standard error (from the Gauss-Newton
covariance of the final fit, scaled by the residual variance) and the logs that determined
it (those carrying at least 10% of its sensitivity). A link bandwidth is bounded by the line
rate its system description gives (:meth:`System.line_rate_GBps`): the fit is constrained
there (projected Levenberg-Marquardt), and a constant that ends on its bound says so
(``at_line_rate``, and a note), since the logs alone would put it above what the wire carries
(a 2-node tree, for one, cannot separate NIC bandwidth from tree efficiency). A level's constants are only ever
fitted from logs that exercise that level, so a 1-node log never prices a network hop.

Which constant takes a misfit that several could explain: constants join the fit one at a time
in FIT_NAMES order (forward selection, below), so with few rows the first determinable one takes
it. Where some logs exercise one level alone (1 node: NVLink only; 1 GPU per node: the network
only) beside logs that cross both, a constant of that level is a candidate only if those
single-level logs determine it (a fit to them alone): a misfit that appears only where the
levels combine is then read by the constants the combined logs add (network, then any-level
ones), not by a constant of a level already measured on its own. Why: the single-level logs are
that level's clean measurement (as :func:`compose` takes them); an NVLink constant that only a
multi-node log moves is the network's misfit in disguise, and it does not transfer. The p4dn
logs (1x8 and 2x8 at 1 GB only) read the 2x8 misfit as an NVLink hop of 87 us (nominal 3.4) and
predicted 3x8/4x8 37/44% too fast; read as the NIC rate (8.4 GB/s per NIC, ~34 GB/s per node,
what both the 2x8 tree and the 3x8/4x8 rings carry) they are 5/13%. Where every log crosses
both levels (Polaris 2x4) or each level has its own logs (H100 1x4, 1x8, 2x1) nothing changes.
Tried and not kept (cross_scale.py): admitting at each step the remaining constant whose
admission lowers the cost most (a score test, any order): p4dn the same 5/13%, H100 10x8
maxima better (AR 131 -> 37%), but launch_us then takes the 2-node logs' per-collective fixed
costs (H100 14.6 us, Polaris sockets 28.9 us) and H100 10x1-10x4 medians go from 0.4-2.3% to
2.8-8.4%, sockets 8x4 64K-1M from 5.8% to 37%. Dropping an admitted constant that a later one
leaves undetermined (a swap): Polaris 2.18 then fits net_rdzv_us (28.8 us; 8x4 all_reduce max
62 -> 27%, but 128x4 all_gather median 2.5 -> 11.6%), 2.21 swaps net_rdzv_us out for net_hop_us,
H100 10x8 all_gather 17.5 -> 21.9% (max 97 -> 120%), sockets as with the score test. Every prior
is the same factor :data:`PRIOR_FACTOR`, so "the least certain prior first" orders nothing.
The constants that joined are finally fitted once more from the hardware description and the
lower of the two minima kept: the network-step floors make the cost piecewise, and on the warm
path a constant that joined early can keep a misfit a later one explains (synthetic 2x4 logs with
a 30 us rendezvous cost read 18.5 us for it and 80 us for a Simple base latency whose truth was 14).

Calibrations compose: :func:`compose` takes the intra-node constants of one fit and the
network constants of another. Predictions (:meth:`PhysicalFit.predict`) carry a 95%
interval from the fit's covariance and residual scatter, and an extrapolation note (how many
times the calibrated node count). At a scale that was measured, the physical prediction is
corrected by the measured residuals, interpolated in log size between the measured sizes
within the model's own (algorithm, protocol) regime (:mod:`commsim.calibration.residuals`);
at a scale that was not, never.

The optimiser is a small Levenberg-Marquardt in numpy (scipy is not a dependency).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from commsim.calibration.errors import CalibrationError
from commsim.calibration.nccl_tables import LogTables, load_tables
from commsim.calibration.residuals import regimes, residual_correction
from commsim.collectives.nccl.scale import KINDS, Scale, bus_factor
from commsim.collectives.nccl_tuner import plan
from commsim.errors import InputError
from commsim.network.system import System, with_fields

PRIOR_FACTOR = 4.0        # prior: a constant is within a factor 4 of nominal (1 sigma in log)
DETERMINED_SHRINK = 0.5   # determined: posterior sd of log(value) < 0.5 x prior sd
HUBER_DELTA = 0.25        # log-ratio beyond which a row's weight falls off (|r| > ~28%)
BOUND_TOL = 1e-9          # log distance from a bound at which it counts as active
DATA_SIGMA = 0.05         # scatter of one nccl-tests row (log), to weigh the data against the prior
# A constant the fit would move more than this many prior sigmas from nominal (a factor 4**3 = 64)
# is not a measurement of that constant but the whole misfit of a model that cannot represent
# the logs (one large-message figure read as an NVLink hop of 868 us): it stays nominal, and the
# note says where the logs would have put it.
IMPLAUSIBLE_SIGMAS = 3.0

# Which level each constant belongs to: a log must exercise the level to determine it.
LEVEL = {
    "intra_bw_GBps": "intra", "intra_hop_us": "intra", "nvls_efficiency": "intra",
    "nic_bw_GBps": "network", "net_hop_us": "network", "tree_efficiency": "any",
    "launch_us": "any", "simple_ch_GBps": "any", "ll128_ch_GBps": "any", "ll_ch_GBps": "any",
    "net_step_us": "network", "net_ll_ch_GBps": "network", "net_rdzv_us": "network",
    "net_simple_base_us": "network",
}
INTRA_NAMES = ("intra_bw_GBps", "intra_hop_us", "nvls_efficiency")
NETWORK_NAMES = ("nic_bw_GBps", "net_hop_us", "net_step_us", "net_ll_ch_GBps", "net_rdzv_us", "net_simple_base_us")


class PhysicalFitError(CalibrationError):
    """The logs cannot be fitted (one-line message naming the logs)."""


@dataclass(frozen=True)
class Measurement:
    """One collective table of one log at one scale: sizes (bytes) and measured times (us)."""

    source: str
    kind: str
    nodes: int
    gpus_per_node: int
    sizes: np.ndarray
    time_us: np.ndarray
    system: str = ""

    @property
    def label(self) -> str:
        return f"{self.source}:{self.kind}"


def measurements_from_log(path: str, nodes: int, gpus_per_node: int, kind_hint: Optional[str] = None,
                          system: str = "", world_size: Optional[int] = None) -> List[Measurement]:
    """The all_reduce / all_gather / reduce_scatter tables of one log as Measurements."""
    lt: LogTables = load_tables(path, world_size=world_size or nodes * gpus_per_node, kind_hint=kind_hint)
    out = []
    for t in lt.tables:
        sizes = np.array([r[0] for r in t.rows], dtype=float)
        times = np.array([r[1] for r in t.rows], dtype=float)
        out.append(Measurement(str(path), t.kind, nodes, gpus_per_node, sizes, times, system or lt.gpu_name or ""))
    return out


@dataclass(frozen=True)
class FittedConstant:
    """One physical constant after a fit: value, standard error (same unit; None when not
    determined), whether the logs determined it, which logs did, and where it came from."""

    name: str
    value: float
    stderr: Optional[float]
    determined: bool
    logs: Tuple[str, ...]
    source: str
    line_rate: Optional[float] = None   # the physical bound on a link bandwidth (GB/s), if any
    at_line_rate: bool = False          # the bound was active: the logs alone would put it higher


@dataclass(frozen=True)
class Prediction:
    sizes: np.ndarray
    time_us: np.ndarray
    low_us: np.ndarray
    high_us: np.ndarray
    busbw_GBps: np.ndarray
    note: str


@dataclass(frozen=True)
class PhysicalFit:
    """A fitted system, the constants' provenance and the fit's quality."""

    system: System
    nominal: System
    constants: Mapping[str, FittedConstant]
    measurements: Tuple[Measurement, ...]
    rms_log_error: float
    covariance: np.ndarray          # of log(value) over `free` names
    free: Tuple[str, ...]
    notes: Tuple[str, ...] = ()
    residuals: Mapping[str, np.ndarray] = field(default_factory=dict)
    # fields a what-if changed (:meth:`what_if`), as "key=value": the logs measured other hardware
    changed: Tuple[str, ...] = ()

    def what_if(self, values: Mapping[str, object], source: str = "--with") -> "PhysicalFit":
        """The fit on hardware that differs from the logs' by `values` (System fields: 4 NICs
        per node instead of 8, another NIC rate, another NCCL release). Both the fitted system and
        NCCL's view of it change. A fitted constant the what-if sets is the user's value, no
        longer uncertain: it leaves the covariance. The measured residuals are not applied (they
        are of the hardware the logs measured), and every prediction says what was changed."""
        system, nominal = with_fields(self.system, values, source), with_fields(self.nominal, values, source)
        keep = [j for j, name in enumerate(self.free) if name not in values]
        constants = dict(self.constants)
        for name in values:
            if name in constants:
                constants[name] = replace(constants[name], value=float(getattr(system, name)), stderr=None,
                                          determined=True, logs=(), source=source, at_line_rate=False)
        return replace(self, system=system, nominal=nominal, constants=constants,
                       free=tuple(self.free[j] for j in keep), covariance=self.covariance[np.ix_(keep, keep)],
                       changed=self.changed + tuple(f"{k}={v if isinstance(v, str) else json.dumps(v)}"
                                                    for k, v in values.items()))

    @property
    def max_nodes(self) -> int:
        return max(m.nodes for m in self.measurements)

    def extrapolation(self, nodes: int, gpus_per_node: Optional[int] = None) -> Optional[str]:
        """The note for a prediction at `nodes` x `gpus_per_node` beyond the logs' scales, or None
        within them: more nodes than any log ran ("extrapolating: N nodes is Kx the largest
        calibrated (M)"), or, across nodes, more GPUs per node than any multi-node log had: a
        fit from 1x8 and 2x1 has priced NVLink and the network apart, never the two together,
        which is where the H100 cluster's 10x8 misses most."""
        notes = []
        if nodes > self.max_nodes:
            notes.append(f"{nodes} nodes is {nodes / self.max_nodes:g}x the largest calibrated ({self.max_nodes})")
        if gpus_per_node is not None and nodes > 1:
            across = [m.gpus_per_node for m in self.measurements if m.nodes > 1]
            widest = max(across, default=0)
            if gpus_per_node > widest:
                notes.append(f"{gpus_per_node} GPUs per node across nodes, where "
                             + (f"the logs crossed nodes with at most {widest}" if across else "no log crossed nodes"))
        return "extrapolating: " + "; ".join(notes) if notes else None

    def plan(self, kind: str, nodes: int, gpus_per_node: int, **kw):
        return plan(kind, self.system, nodes, gpus_per_node, choice_system=self.nominal, **kw)

    def predict(self, kind: str, nodes: int, gpus_per_node: int, sizes: Sequence[float], *,
                use_measured: bool = True, pick: str = "nccl", **kw) -> Prediction:
        """Times with a 95% interval (fit covariance and residual scatter), busbw, and a note.
        At a measured (kind, scale) the physical curve is corrected by the measured residuals
        interpolated in log size inside the measured range, each only within the model's own
        (algorithm, protocol) regime (:func:`~commsim.calibration.residuals.residual_correction`);
        at other scales it is not."""
        S = np.atleast_1d(np.asarray(sizes, dtype=float))
        p = self.plan(kind, nodes, gpus_per_node, pick=pick, **kw)
        t = p.time_us(S)
        # sensitivity of log t to each free log-constant, by central differences
        var = np.full(S.shape, self.rms_log_error ** 2)
        if self.free:
            g = np.zeros((S.size, len(self.free)))
            for j, name in enumerate(self.free):
                h = 1e-3
                up = self.system.with_constants({name: getattr(self.system, name) * math.exp(h)}, "probe")
                dn = self.system.with_constants({name: getattr(self.system, name) * math.exp(-h)}, "probe")
                tu = plan(kind, up, nodes, gpus_per_node, choice_system=self.nominal, pick=pick, **kw).time_us(S)
                td = plan(kind, dn, nodes, gpus_per_node, choice_system=self.nominal, pick=pick, **kw).time_us(S)
                g[:, j] = (np.log(tu) - np.log(td)) / (2 * h)
            var = var + np.einsum("ij,jk,ik->i", g, self.covariance, g)
        notes = []
        corrected = np.zeros(S.shape, dtype=bool)  # sizes a measured table of this scale corrects
        if self.changed:
            notes.append(f"what-if {', '.join(self.changed)}: not the hardware the logs measured (no measured "
                         "residuals; the interval covers the fitted constants that were kept)")
        if use_measured and not kw and not self.changed:
            for m in self.measurements:
                if (m.kind, m.nodes, m.gpus_per_node) == (kind, nodes, gpus_per_node):
                    r = self.residuals.get(m.label)
                    if r is None:
                        continue
                    # only within the model's own (algorithm, protocol) regime: see residuals.py
                    # (algorithm, protocol) and whether a rendezvous floor prices the size: see residuals.py
                    price = lambda name, f, X: plan(kind, self.system.with_constants({name: getattr(self.system, name) * f}, "probe"),
                                                    nodes, gpus_per_node, choice_system=self.nominal, pick=pick).time_us(X)
                    corr, corrected = residual_correction(S, regimes(p.choose(S), S, price), m.sizes, r,
                                                          regimes(p.choose(m.sizes), m.sizes, price))
                    t = np.where(corrected, t * np.exp(corr), t)
                    notes.append(f"measured scale: corrected by the residuals of {m.label}")
                    inside = (S >= m.sizes.min()) & (S <= m.sizes.max())
                    if np.any(inside & ~corrected):
                        notes.append(f"{int(np.sum(inside & ~corrected))} size(s) in a regime no adjacent measured "
                                     "size ran under the model: physical price alone")
                    break
        far = self.extrapolation(nodes, gpus_per_node)
        if far:
            notes.append(far)
        nominal_kept = self._nominal_constants_used(kind, nodes, gpus_per_node, S[~corrected], pick, kw)
        if nominal_kept:
            notes.append("rests on nominal " + ", ".join(nominal_kept) + " (not determined by the logs; "
                         "the interval does not cover them)")
        sd = np.sqrt(var)
        bus = S / (t * 1e3) * bus_factor(kind, p.scale.ranks)
        return Prediction(S, t, t * np.exp(-1.96 * sd), t * np.exp(1.96 * sd), bus, "; ".join(notes))

    # a constant the logs left nominal is named when the prediction's log time moves by at least
    # this much per unit of its log (a 10% change moves the time by 0.5% or more)
    NOMINAL_SENSITIVITY = 0.05

    def _nominal_constants_used(self, kind, nodes, gpus_per_node, S, pick, kw) -> Tuple[str, ...]:
        """The undetermined constants (kept at their nominal value) that the prediction at sizes
        `S` hinges on: those whose log-sensitivity reaches :attr:`NOMINAL_SENSITIVITY` at some
        size (e.g. NVLS priced with the nominal ``nvls_efficiency`` on a system calibrated from
        ring-only logs)."""
        used = []
        if not S.size:
            return ()
        h = 1e-3
        for name, c in self.constants.items():
            if c.determined or name in self.free:
                continue
            up = self.system.with_constants({name: getattr(self.system, name) * math.exp(h)}, "probe")
            dn = self.system.with_constants({name: getattr(self.system, name) * math.exp(-h)}, "probe")
            tu = plan(kind, up, nodes, gpus_per_node, choice_system=self.nominal, pick=pick, **kw).time_us(S)
            td = plan(kind, dn, nodes, gpus_per_node, choice_system=self.nominal, pick=pick, **kw).time_us(S)
            if np.max(np.abs(np.log(tu) - np.log(td))) / (2 * h) >= self.NOMINAL_SENSITIVITY:
                used.append(f"{name} {c.value:g}")
        return tuple(used)

    def describe(self) -> Dict[str, object]:
        """Plain mapping for a calibration file: every constant with unit-bearing name, value,
        standard error, determined flag, logs and source."""
        return {
            "system": self.nominal.name,
            "rms_log_error": round(self.rms_log_error, 6),
            "logs": sorted({m.source for m in self.measurements}),
            "constants": {
                c.name: {"value": c.value, "stderr": c.stderr, "determined": c.determined,
                         "logs": list(c.logs), "source": c.source,
                         **({"line_rate_GBps": c.line_rate, "at_line_rate": c.at_line_rate} if c.line_rate else {})}
                for c in self.constants.values()
            },
            "notes": list(self.notes),
        }


# --- the fit ---------------------------------------------------------------------------------


def _model_log_times(system: System, nominal: System, ms: Sequence[Measurement]) -> np.ndarray:
    out = []
    for m in ms:
        p = plan(m.kind, system, m.nodes, m.gpus_per_node, choice_system=nominal)
        out.append(np.log(p.time_us(m.sizes)))
    return np.concatenate(out)


def _exercises(m: Measurement, nominal: System, level: str) -> bool:
    sc = Scale.of(nominal, m.nodes, m.gpus_per_node)
    if level == "intra":
        return sc.local > 1
    if level == "network":
        return sc.domains > 1
    return True


def check_same_system(ms: Sequence[Measurement], declared_same: bool) -> None:
    """Refuse logs of different systems (their GPU names differ) unless declared the same."""
    names = sorted({m.system for m in ms if m.system})
    if len(names) > 1 and not declared_same:
        raise InputError(ms[0].source, None,
                         f"logs of different systems ({' / '.join(names)}): refusing to fit them jointly; "
                         "declare them the same system to fit anyway")


def fit_physical(
    measurements: Sequence[Measurement],
    nominal: System,
    *,
    names: Sequence[str] = System.FIT_NAMES,
    declared_same: bool = False,
    max_iter: int = 100,
) -> PhysicalFit:
    """Fit `names` of `nominal` to `measurements` (see the module docstring)."""
    ms = tuple(m for m in measurements if m.sizes.size)
    if not ms:
        raise PhysicalFitError("no measurement rows to fit")
    for m in ms:
        if m.kind not in KINDS:
            raise PhysicalFitError(f"{m.source}: collective {m.kind!r} is not fitted (expected {', '.join(KINDS)})")
        if np.any(m.time_us <= 0):
            raise PhysicalFitError(f"{m.source}: non-positive time in the table")
    check_same_system(ms, declared_same)
    notes: List[str] = []
    # constants of a level no log exercises stay nominal
    candidates = []
    for name in names:
        level = LEVEL[name]
        if level != "any" and not any(_exercises(m, nominal, level) for m in ms):
            notes.append(f"{name}: no log exercises the {level} level; nominal value kept")
            continue
        if name == "nvls_efficiency" and not nominal.nvls:
            continue
        if name == "net_rdzv_us" and nominal.net_rdzv_threshold_bytes is None:
            continue  # no rendezvous priced: nothing reads it
        candidates.append(name)
    candidates = _single_level_screen(ms, nominal, candidates, names, declared_same, max_iter, notes)
    y = np.concatenate([np.log(m.time_us) for m in ms])
    row_log = np.concatenate([[i] * m.sizes.size for i, m in enumerate(ms)])
    sigma_prior = math.log(PRIOR_FACTOR)

    def upper(free_names) -> np.ndarray:
        # a link bandwidth never exceeds its line rate, an efficiency (a fraction of a bandwidth)
        # never exceeds 1: the fit is bounded there (log space)
        return np.array([math.log(nominal.line_rate_GBps(n)) if nominal.line_rate_GBps(n)
                         else (0.0 if n.endswith("_efficiency") else math.inf) for n in free_names])

    def make(free_names):
        x0 = np.minimum(np.array([math.log(getattr(nominal, n)) for n in free_names]), upper(free_names))

        def system_at(x) -> System:
            return nominal.with_constants({n: math.exp(v) for n, v in zip(free_names, x)}, "fit")

        def res(x) -> np.ndarray:
            # data residuals, then the prior's pseudo-residuals (MAP with a log-normal prior)
            return np.concatenate([(_model_log_times(system_at(x), nominal, ms) - y) / DATA_SIGMA,
                                   (x - x0) / sigma_prior])

        return x0, system_at, res

    # Forward selection in FIT_NAMES order (bandwidths, then latencies, then efficiencies), over
    # the candidates the single-level screen kept (module docstring): a
    # constant joins the fit when, with the ones already in, the logs determine it. Two
    # constants the logs only see as a product (NVLink bandwidth x NVLS efficiency) would
    # otherwise both look undetermined; this keeps the first and leaves the second nominal.
    if not candidates:
        raise PhysicalFitError(f"{ms[0].source}: nothing to fit (no constant the logs can exercise)")
    free: Tuple[str, ...] = ()
    x0, system_at, res = make(())
    x, r_all, J = x0, res(x0), np.zeros((y.size, 0))
    post = np.zeros((0, 0))
    for name in candidates:
        trial = free + (name,)
        tx0, tsys, tres = make(trial)
        start = np.concatenate([x, tx0[-1:]])  # warm start from the constants already fitted
        tx, tr, tJ = _lm(tres, start, max_iter, y.size, upper(trial))
        tpost, _ = _posterior(tJ, tr, y.size, sigma_prior, tx.size)
        ok = all(tpost[j, j] < (DETERMINED_SHRINK * sigma_prior) ** 2 for j in range(tx.size))
        far = [j for j in range(tx.size) if abs(tx[j] - tx0[j]) > IMPLAUSIBLE_SIGMAS * sigma_prior]
        if ok and not far:
            free, system_at, x, r_all, J, post = trial, tsys, tx, tr, tJ, tpost
        elif ok:
            moved = ", ".join(f"{trial[j]} {math.exp(tx[j]):.4g} (nominal {math.exp(tx0[j]):.4g})" for j in far)
            notes.append(f"{name}: with it the logs would put {moved}, beyond a factor "
                         f"{PRIOR_FACTOR ** IMPLAUSIBLE_SIGMAS:g} of the hardware description: the model cannot "
                         "represent these logs with it; nominal value kept")
        else:
            notes.append(f"{name}: the logs do not determine it; nominal value kept")
    if free:
        # The warm path can end in a local minimum where a constant admitted earlier took a misfit
        # that a later one explains (the step floors make the cost piecewise): the same constants
        # fitted again from the hardware description, and the lower of the two minima kept.
        fx0, _, fres = make(free)
        nx, nr, nJ = _lm(fres, fx0, max_iter, y.size, upper(free))
        if _cost(nr, y.size) < _cost(r_all, y.size):
            x, r_all, J = nx, nr, nJ
            post, _ = _posterior(nJ, nr, y.size, sigma_prior, nx.size)
    final = system_at(x)
    r = r_all[:y.size] * DATA_SIGMA
    Jf = J[:y.size] * DATA_SIGMA
    cov = post

    constants: Dict[str, FittedConstant] = {}
    for n in System.FIT_NAMES:
        v = float(getattr(final, n))
        if n in free:
            j = free.index(n)
            sens = np.zeros(len(ms))
            np.add.at(sens, row_log, Jf[:, j] ** 2)
            total = sens.sum() or 1.0
            logs = tuple(sorted({ms[i].label for i in range(len(ms)) if sens[i] >= 0.1 * total}))
            se = v * math.sqrt(max(cov[j, j], 0.0))  # delta method: sd(log v) x v
            src = "fit: " + ", ".join(logs)
            line = nominal.line_rate_GBps(n)
            at_line = bool(line) and bool(x[j] >= math.log(line) - BOUND_TOL)
            if at_line:
                src += f" (at the line rate {line:g} GB/s: the logs alone would put it higher)"
                notes.append(f"{n}: bounded by the line rate {line:g} GB/s (the bound is active)")
            elif n.endswith("_efficiency") and x[j] >= -BOUND_TOL:
                src += " (at 1, the most an efficiency can be: the logs alone would put it higher)"
                notes.append(f"{n}: bounded at 1, the most an efficiency can be (the bound is active)")
            constants[n] = FittedConstant(n, v, se, True, logs, src, line, at_line)
        else:
            constants[n] = FittedConstant(n, v, None, False, (), nominal.sources.get(n, "nominal"),
                                          nominal.line_rate_GBps(n))
    sources = dict(nominal.sources)
    sources.update({n: c.source for n, c in constants.items()})
    final = replace(final, sources=sources)
    residual_map = {}
    off = 0
    for m in ms:
        k = m.sizes.size
        residual_map[m.label] = -r[off:off + k]  # log(measured / predicted)
        off += k
    rms = float(np.sqrt(np.mean(r ** 2)))
    return PhysicalFit(final, nominal, constants, ms, rms, cov, free, tuple(notes), residual_map)


def _only_level(m: Measurement, nominal: System) -> Optional[str]:
    """The one level a log exercises ("intra": one node; "network": one GPU per node), or None
    for a log that crosses both."""
    sc = Scale.of(nominal, m.nodes, m.gpus_per_node)
    if sc.local > 1 and sc.domains == 1:
        return "intra"
    if sc.domains > 1 and sc.local == 1:
        return "network"
    return None


def _single_level_screen(ms, nominal, candidates, names, declared_same, max_iter, notes) -> List[str]:
    """The candidates, less a level's constants that the logs exercising that level alone leave
    undetermined, when such logs are there beside logs that cross both levels (the module docstring says
    why)."""
    out = list(candidates)
    for level in ("intra", "network"):
        alone = [m for m in ms if _only_level(m, nominal) == level]
        mixed = [m for m in ms if _only_level(m, nominal) is None and _exercises(m, nominal, level)]
        mine = [n for n in out if LEVEL[n] == level]
        if not alone or not mixed or not mine:
            continue
        sub = fit_physical(alone, nominal, names=names, declared_same=declared_same, max_iter=max_iter)
        for n in mine:
            if not sub.constants[n].determined:
                out.remove(n)
                notes.append(f"{n}: the {level}-only logs ({', '.join(sorted({m.source for m in alone}))}) do not "
                             f"determine it, and a misfit of a log that also crosses the other level is not read as "
                             "a constant of this one; nominal value kept")
    return out


def _huber(r: np.ndarray, delta: float = HUBER_DELTA / DATA_SIGMA) -> np.ndarray:
    """Huber loss of residuals in units of DATA_SIGMA."""
    a = np.abs(r)
    return np.where(a <= delta, r ** 2, 2 * delta * a - delta ** 2)


def _weights(r: np.ndarray, n_data: int) -> np.ndarray:
    """IRLS Huber weights for the data rows; prior rows keep weight 1."""
    w = np.ones(r.size)
    d = np.abs(r[:n_data])
    w[:n_data] = np.minimum(1.0, (HUBER_DELTA / DATA_SIGMA) / np.maximum(d, 1e-12))
    return w


def _cost(r: np.ndarray, n_data: int) -> float:
    return float(np.sum(_huber(r[:n_data])) + np.sum(r[n_data:] ** 2))


def _jacobian(res, x, r, h=1e-4, ub=None) -> np.ndarray:
    """Forward differences; backward for a variable at its upper bound (never probe past it)."""
    J = np.zeros((r.size, x.size))
    for j in range(x.size):
        hj = -h if ub is not None and x[j] + h > ub[j] else h
        xp = x.copy()
        xp[j] += hj
        J[:, j] = (res(xp) - r) / hj
    return J


def _lm(res, x, max_iter, n_data, ub=None):
    """Levenberg-Marquardt (IRLS for the Huber loss) on res(x) with optional upper bounds `ub`
    (projected: a variable at its bound whose step points past it is held there, the others
    are solved for without it, and every step is clipped to the bounds); returns x, res(x),
    Jacobian."""
    ub = np.full(x.size, np.inf) if ub is None else np.asarray(ub, dtype=float)
    x = np.minimum(x, ub)
    lam = 1e-2
    r = res(x)
    J = _jacobian(res, x, r, ub=ub)
    for _ in range(max_iter):
        w = _weights(r, n_data)
        A = (J.T * w) @ J
        b = (J.T * w) @ r
        improved = False
        step = np.zeros_like(x)
        for _ in range(12):
            step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-9), -b)
            held = (x >= ub - BOUND_TOL) & (step > 0)
            if held.any():
                keep = ~held
                step = np.zeros_like(x)
                if keep.any():
                    Ak = A[np.ix_(keep, keep)]
                    step[keep] = np.linalg.solve(Ak + lam * np.diag(np.diag(Ak) + 1e-9), -b[keep])
            step = np.minimum(x + step, ub) - x
            rn = res(x + step)
            if _cost(rn, n_data) < _cost(r, n_data):
                x, r, lam = x + step, rn, max(lam / 3, 1e-7)
                improved = True
                break
            lam *= 4
        if not improved:
            break
        J = _jacobian(res, x, r, ub=ub)
        if np.max(np.abs(step)) < 1e-5:
            break
    return x, r, J


def _posterior(J, r, n_data, sigma_prior, k):
    """Covariance of the log-constants: data rows scaled by the residual variance, plus the
    prior; and that variance."""
    w = _weights(r, n_data)[:n_data]
    rd, Jd = r[:n_data], J[:n_data]
    s2 = max(float(np.sum(w * rd ** 2) / max(1, n_data - k)), 1e-8)
    info = (Jd.T * w) @ Jd / s2 + np.eye(k) / sigma_prior ** 2
    return np.linalg.inv(info), s2


def compose(intra: PhysicalFit, network: PhysicalFit, name: Optional[str] = None) -> System:
    """A system whose intra-node constants come from `intra` (e.g. a 1-node calibration) and
    whose network constants come from `network` (e.g. a 2-node x 1 GPU calibration); the
    protocol constants from the fit that determined them (network's when both did). A level's
    constants never price another level's hops."""
    base = intra.nominal
    vals = {}
    srcs = dict(base.sources)
    for n in System.FIT_NAMES:
        ci, cn = intra.constants[n], network.constants[n]
        if n in INTRA_NAMES:
            pick = ci
        elif n in NETWORK_NAMES:
            pick = cn
        else:
            pick = cn if cn.determined else ci
        vals[n] = pick.value
        srcs[n] = pick.source
    s = base.with_constants(vals, "compose")
    return replace(s, sources=srcs, name=name or base.name)

"""The ``physical:`` section of a calibration file: a :class:`PhysicalFit` written and read back.

What a prediction at any scale needs is written, and nothing else:

- ``nominal_system``: the hardware description the fit started from (every field of
  :class:`commsim.network.system.System`, its ``sources`` included): NCCL's own view of the
  hardware, which picks the algorithm and protocol, and the fallback of every constant the
  logs did not determine;
- ``constants``: per physical constant its ``value``, ``stderr`` (same unit; null when not
  determined), ``determined``, the ``logs`` (``file:collective``) that determined it and its
  ``source`` (``fit: ...`` or the nominal origin); for a link bandwidth, its ``line_rate_GBps``
  (the bound the fit respects) and ``at_line_rate`` (whether the bound was active);
- ``free`` and ``covariance``: the determined constants and the covariance of their
  logarithms (the prediction interval);
- ``rms_log_error`` and ``notes`` (which constants stayed nominal and why);
- ``tables``: every fitted table at its scale (``source``, ``kind``, ``nodes``,
  ``gpus_per_node``, rows ``[size_bytes, time_us, log_residual]``): the measured scales a
  prediction may be corrected at, and the largest calibrated node count for the
  extrapolation note.

Reading is strict, like the rest of the file: every error is a one-line CalibrationError
naming the file and the key path.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Dict, List, Mapping, Sequence

import numpy as np

from commsim.calibration.errors import CalibrationError
from commsim.calibration.physical_fit import PRIOR_FACTOR, FittedConstant, Measurement, PhysicalFit
from commsim.collectives.nccl.scale import KINDS
from commsim.errors import InputError
from commsim.network.system import System, system_from_dict
from commsim.units import MAX_TIME, MIN_FRACTION, MIN_RATE

TABLE_COLUMNS = ["size_bytes", "time_us", "log_residual"]
MAX_RMS_LOG_ERROR = 10.0  # a typical misfit of a factor e^10: far past any fit of a real log (<= 0.3 shipped)
KEYS = ["nominal_system", "constants", "free", "covariance", "rms_log_error", "tables"]
OPTIONAL_KEYS = ["notes"]
CONSTANT_KEYS = ["value", "stderr", "determined", "logs", "source"]
CONSTANT_OPTIONAL_KEYS = ["line_rate_GBps", "at_line_rate"]
TABLE_KEYS = ["source", "kind", "nodes", "gpus_per_node", "columns", "rows"]
# constants added after calibration files were first written: a file without one reads it as
# nominal (not determined)
ADDED_CONSTANTS = ("net_step_us", "net_ll_ch_GBps", "net_rdzv_us", "net_simple_base_us")


def physical_to_dict(fit: PhysicalFit, flow=list) -> Dict[str, Any]:
    """The ``physical:`` mapping of `fit`; `flow` wraps each table row and matrix row (the
    file writer passes its flow-style list so that one row is one line)."""
    return {
        "nominal_system": fit.nominal.describe(),
        "constants": {
            c.name: {"value": float(c.value), "stderr": None if c.stderr is None else float(c.stderr),
                     "determined": bool(c.determined), "logs": list(c.logs), "source": c.source,
                     **({"line_rate_GBps": float(c.line_rate), "at_line_rate": bool(c.at_line_rate)} if c.line_rate else {})}
            for c in fit.constants.values()
        },
        "free": list(fit.free),
        "covariance": [flow([float(v) for v in row]) for row in np.asarray(fit.covariance).reshape(len(fit.free), len(fit.free))],
        "rms_log_error": float(fit.rms_log_error),
        "notes": list(fit.notes),
        "tables": [
            {"source": m.source, "kind": m.kind, "nodes": m.nodes, "gpus_per_node": m.gpus_per_node,
             "columns": flow(TABLE_COLUMNS),
             "rows": [flow([int(s), float(t), float(r)]) for s, t, r in sorted(
                 zip(m.sizes, m.time_us, fit.residuals.get(m.label, np.zeros(m.sizes.size))), key=lambda row: row[0])]}
            for m in fit.measurements
        ],
    }


class _R:
    def __init__(self, source: str):
        self.source = source

    def err(self, where: str, message: str) -> CalibrationError:
        return CalibrationError(message, self.source, where)

    def mapping(self, v: Any, where: str, required: Sequence[str], optional: Sequence[str] = ()) -> Mapping:
        if not isinstance(v, Mapping):
            raise self.err(where, f"expected a mapping, got {type(v).__name__}")
        unknown = [k for k in v if k not in required and k not in optional]
        if unknown:
            raise self.err(where, f"unknown key {unknown[0]!r} (allowed: {', '.join(list(required) + list(optional))})")
        missing = [k for k in required if k not in v]
        if missing:
            raise self.err(where, f"missing key {missing[0]!r}")
        return v

    def number(self, v: Any, where: str, positive: bool = False) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.err(where, f"expected a finite number, got {v!r}"[:200])
        try:
            x = float(v)
        except OverflowError:
            raise self.err(where, "expected a finite number, got an integer past any float") from None
        if not math.isfinite(x) or (positive and x <= 0):
            raise self.err(where, f"expected a finite {'positive ' if positive else ''}number, got {v!r}")
        return x

    def integer(self, v: Any, where: str, minimum: int) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum or v > 2 ** 53:
            raise self.err(where, f"expected an integer >= {minimum}, got {v!r}"[:200])
        return int(v)

    def string(self, v: Any, where: str) -> str:
        if not isinstance(v, str):
            raise self.err(where, f"expected a string, got {v!r}"[:200])
        return v

    def strings(self, v: Any, where: str) -> List[str]:
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.err(where, "expected a list of strings")
        return list(v)


# The scenario's plausibility limits (commsim.units: every duration at most MAX_TIME, every
# bandwidth at least MIN_RATE, a fraction at least MIN_FRACTION), in the constants' units: a
# hand-edited intra_bw_GBps of 1e-300 or launch_us of 1e300 priced 300-digit and infinite times,
# with RuntimeWarnings, instead of an error.
MAX_US = MAX_TIME * 1e6
MIN_GBPS = MIN_RATE / 1e9
MIN_EFFICIENCY = MIN_FRACTION


def _implausible(name: str, value: float) -> str:
    """What a constant's value must be when it is past the limits above, else ''."""
    if name.endswith("_us") and value > MAX_US:
        return f"a time of at most {MAX_US:g} us (1e6 s)"
    if name.endswith("_GBps") and value < MIN_GBPS:
        return f"a bandwidth of at least {MIN_GBPS:g} GB/s (1 B/s)"
    if name.endswith("_efficiency") and not MIN_EFFICIENCY <= value <= 1.0:
        return f"an efficiency from {MIN_EFFICIENCY:g} to 1 (a fraction of a bandwidth; the fit is bounded at 1)"
    return ""


def physical_from_dict(doc: Any, source: str, where: str = "physical") -> PhysicalFit:
    """The :class:`PhysicalFit` of a ``physical:`` mapping (CalibrationError on any defect)."""
    r = _R(source)
    top = r.mapping(doc, where, KEYS, OPTIONAL_KEYS)
    try:
        nominal = system_from_dict(top["nominal_system"], source, f"{where}.nominal_system")
    except CalibrationError:
        raise
    except InputError as exc:
        raise CalibrationError(exc.message, source, exc.path) from None
    for name in System.FIT_NAMES:  # the limits of a fitted value hold for the nominal one it started from
        why = _implausible(name, float(getattr(nominal, name)))
        if why:
            raise r.err(f"{where}.nominal_system.{name}", f"expected {why}, got {getattr(nominal, name)!r}")

    required = [n for n in System.FIT_NAMES if n not in ADDED_CONSTANTS]
    cdoc = r.mapping(top["constants"], f"{where}.constants", required, ADDED_CONSTANTS)
    constants: Dict[str, FittedConstant] = {}
    for name in System.FIT_NAMES:
        w = f"{where}.constants.{name}"
        if name not in cdoc:  # a file from before the constant existed: it stayed nominal
            constants[name] = FittedConstant(name, float(getattr(nominal, name)), None, False, (),
                                             nominal.sources.get(name, "nominal"), nominal.line_rate_GBps(name))
            continue
        c = r.mapping(cdoc[name], w, CONSTANT_KEYS, CONSTANT_OPTIONAL_KEYS)
        value = r.number(c["value"], w + ".value", positive=True)
        why = _implausible(name, value)
        if why:
            raise r.err(w + ".value", f"expected {why}, got {value!r}")
        stderr = None if c["stderr"] is None else r.number(c["stderr"], w + ".stderr")
        if stderr is not None and stderr < 0:
            raise r.err(w + ".stderr", f"expected a standard error >= 0, got {stderr!r}")
        if not isinstance(c["determined"], bool):
            raise r.err(w + ".determined", f"expected true or false, got {c['determined']!r}")
        if c["determined"] and stderr is None:
            raise r.err(w + ".stderr", "a determined constant needs its standard error, got null")
        line = None if c.get("line_rate_GBps") is None else r.number(c["line_rate_GBps"], w + ".line_rate_GBps", positive=True)
        at_line = c.get("at_line_rate", False)
        if not isinstance(at_line, bool):
            raise r.err(w + ".at_line_rate", f"expected true or false, got {at_line!r}")
        if line is not None and value > line * (1 + 1e-9):
            raise r.err(w + ".value", f"expected at most the line rate {line:g} GB/s, got {value!r}")
        constants[name] = FittedConstant(name, value, stderr, c["determined"],
                                         tuple(r.strings(c["logs"], w + ".logs")), r.string(c["source"], w + ".source"),
                                         line, at_line)

    free = tuple(r.strings(top["free"], f"{where}.free"))
    for i, name in enumerate(free):
        if name not in System.FIT_NAMES:
            raise r.err(f"{where}.free[{i}]", f"expected a constant name among {', '.join(System.FIT_NAMES)}, got {name!r}")
        if not constants[name].determined:
            raise r.err(f"{where}.free[{i}]", f"{name} is free but its constant says determined: false")
    if len(set(free)) != len(free) or {n for n, c in constants.items() if c.determined} != set(free):
        raise r.err(f"{where}.free", "expected exactly the constants marked determined, once each")
    cov_doc = top["covariance"]
    if not isinstance(cov_doc, list) or len(cov_doc) != len(free):
        raise r.err(f"{where}.covariance", f"expected a {len(free)} x {len(free)} matrix (one row per free constant)")
    cov = np.zeros((len(free), len(free)))
    for i, row in enumerate(cov_doc):
        if not isinstance(row, list) or len(row) != len(free):
            raise r.err(f"{where}.covariance[{i}]", f"expected a row of {len(free)} numbers")
        for j, v in enumerate(row):
            cov[i, j] = r.number(v, f"{where}.covariance[{i}][{j}]")
    if free and (not np.allclose(cov, cov.T, rtol=1e-6, atol=1e-12) or np.any(np.diag(cov) < 0)):
        raise r.err(f"{where}.covariance", "expected a symmetric matrix with a non-negative diagonal")
    # The fit's covariance is (data information + prior precision)^-1: no variance exceeds the
    # prior's (a factor PRIOR_FACTOR, 1 sigma in log). A hand-edited 1e308 overflowed the
    # interval (exp of it: a RuntimeWarning and an infinite high_us).
    prior_var = math.log(PRIOR_FACTOR) ** 2
    for j in range(len(free)):
        if cov[j, j] > prior_var * (1 + 1e-6):
            raise r.err(f"{where}.covariance[{j}][{j}]",
                        f"expected a variance of log({free[j]}) of at most the prior's {prior_var:.4g} "
                        f"(a factor {PRIOR_FACTOR:g}), got {float(cov[j, j])!r}")
    # A covariance is positive semi-definite; one that is not gives some prediction a negative
    # variance, and its interval NaN (sqrt of a negative). The tolerance admits the rounding of
    # a fitted (J^T J)^-1 written with 17 significant digits.
    lowest = np.linalg.eigvalsh(cov).min() if free else 0.0
    if lowest < -1e-9 * max(np.diag(cov).max() if free else 0.0, 1e-300):
        raise r.err(f"{where}.covariance", "expected a positive semi-definite matrix (a covariance), "
                                           f"got one with eigenvalue {lowest:.3g}")
    rms = r.number(top["rms_log_error"], f"{where}.rms_log_error")
    # the residual scatter (log of measured over fitted) widens every interval by exp(1.96 rms): past
    # a factor e^10 (~22,000) typical misfit no fit is a calibration, and 1e308 overflowed rms**2
    if not 0 <= rms <= MAX_RMS_LOG_ERROR:
        raise r.err(f"{where}.rms_log_error", f"expected a number in [0, {MAX_RMS_LOG_ERROR:g}] (the rms of "
                                              f"ln(measured / fitted)), got {rms!r}")
    notes = tuple(r.strings(top.get("notes") or [], f"{where}.notes"))

    tables_doc = top["tables"]
    if not isinstance(tables_doc, list) or not tables_doc:
        raise r.err(f"{where}.tables", "expected a non-empty list of fitted tables")
    measurements, residuals = [], {}
    for i, t in enumerate(tables_doc):
        w = f"{where}.tables[{i}]"
        t = r.mapping(t, w, TABLE_KEYS)
        kind = r.string(t["kind"], w + ".kind")
        if kind not in KINDS:
            raise r.err(w + ".kind", f"expected one of {', '.join(KINDS)}, got {kind!r}")
        nodes = r.integer(t["nodes"], w + ".nodes", 1)
        gpn = r.integer(t["gpus_per_node"], w + ".gpus_per_node", 1)
        if nodes * gpn < 2:
            raise r.err(w + ".nodes", "a collective needs at least 2 ranks")
        if t["columns"] != TABLE_COLUMNS:
            raise r.err(w + ".columns", f"expected {TABLE_COLUMNS}, got {t['columns']!r}"[:200])
        rows = t["rows"]
        if not isinstance(rows, list) or not rows:
            raise r.err(w + ".rows", "expected a non-empty list of rows")
        sizes, times, res = [], [], []
        for k, row in enumerate(rows):
            wr = f"{w}.rows[{k}]"
            if not isinstance(row, list) or len(row) != 3:
                raise r.err(wr, f"expected [size_bytes, time_us, log_residual], got {row!r}"[:200])
            sizes.append(r.integer(row[0], wr + "[0] (size_bytes)", 1))
            times.append(r.number(row[1], wr + "[1] (time_us)", positive=True))
            res.append(r.number(row[2], wr + "[2] (log_residual)"))
        if sizes != sorted(sizes):
            raise r.err(w + ".rows", "rows must be sorted by size_bytes")
        m = Measurement(r.string(t["source"], w + ".source"), kind, nodes, gpn,
                        np.array(sizes, dtype=float), np.array(times), nominal.name)
        try:
            nominal.check_scale(nodes, gpn, source)
        except InputError as exc:
            raise CalibrationError(exc.message, source, f"{w}.{exc.path}") from None
        measurements.append(m)
        residuals[m.label] = np.array(res)
    system = nominal.with_constants({n: c.value for n, c in constants.items()}, "calibration")
    system = replace(system, sources={**system.sources, **{n: c.source for n, c in constants.items()}})
    return PhysicalFit(system, nominal, constants, tuple(measurements), rms, cov, free, notes, residuals)

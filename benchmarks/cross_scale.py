"""Leave-scale-out benchmark: calibrate a system's physical constants at its smallest
scale(s), predict every larger scale; every log also from nominal hardware alone; and
interpolation within a calibrated scale.

    python benchmarks/cross_scale.py [--json OUT.json] [--pick nccl|fastest] [--interp-detail] [--ring-steps [SYSTEM]]

Data: tests/data/nccl-tests-multiscale (one system at several scales) and
tests/data/nccl-tests (single-scale logs, nominal only). Each system is described once by
a nominal preset (commsim/network/system.py) with the NCCL version its logs print; nothing is
tuned per system or per log.

Protocol per system: the calibration scales are the logs with at most 2 nodes (what one can
measure before buying), or the smallest node count when the system has nothing above 2 nodes;
every other log is predicted. Errors are |predicted busbw / measured busbw - 1| per row,
reported per size band (>= 1 MB, 64 KB - 1 MB, < 64 KB) as median and max in %.
Interpolation: for every table, fit on every other size (its own scale only) and predict the
sizes left out (physical model corrected by the measured residuals, interpolated in log size),
against plain log-log interpolation of the measured neighbours.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from commsim.atomic import atomic_write_text  # noqa: E402
from commsim.cli.outputs import check_script_outputs  # noqa: E402
from commsim.calibration.nccl_tables import load_tables  # noqa: E402
from commsim.calibration.physical_fit import Measurement, fit_physical  # noqa: E402
from commsim.collectives.nccl.graph import nccl_channels, nics_driven  # noqa: E402
from commsim.collectives.nccl.nvls import clique_splits, nvls_heads  # noqa: E402
from commsim.collectives.nccl.physical import channels_used, physical_time_us  # noqa: E402
from commsim.collectives.nccl.scale import Scale, bus_factor  # noqa: E402
from commsim.collectives.nccl.simple import simple_ring_loops, simple_ring_slices  # noqa: E402
from commsim.collectives.nccl_tuner import plan  # noqa: E402
from commsim.network.system import PRESETS, System  # noqa: E402

DATA = os.path.join(os.path.dirname(HERE), "tests", "data")
MULTI = os.path.join(DATA, "nccl-tests-multiscale")
SINGLE = os.path.join(DATA, "nccl-tests")
MB, KB = 1 << 20, 1 << 10
BANDS = (("ge1MB", MB, np.inf), ("64K-1M", 64 * KB, MB), ("lt64K", 0, 64 * KB))


@dataclass(frozen=True)
class Log:
    file: str
    nodes: int
    gpus: int
    kind: Optional[str] = None       # collective when the log does not say
    ranks: Optional[int] = None      # world size when the label contradicts the rows


@dataclass(frozen=True)
class Series:
    name: str
    preset: str
    nccl: str
    logs: Tuple[Log, ...]
    folder: str = MULTI


def _p4dn_log() -> Tuple[Log, ...]:
    return tuple(Log(f"A100-p4dn_1-4x8_nccl-issue527-1GB.txt#{k}", k, 8) for k in (1, 2, 3, 4))


SERIES = (
    Series("H100-cluster01", "dgx-h100", "2.29", (
        Log("H100-cluster01_1x4_xxrjun.txt", 1, 4), Log("H100-cluster01_1x8_xxrjun.txt", 1, 8),
        Log("H100-cluster01_2x1_xxrjun-smoke.txt", 2, 1),
        Log("H100-cluster01_10x1_xxrjun.txt", 10, 1), Log("H100-cluster01_10x2_xxrjun.txt", 10, 2),
        Log("H100-cluster01_10x4_xxrjun.txt", 10, 4), Log("H100-cluster01_10x4_xxrjun-run20260128.txt", 10, 4),
        Log("H100-cluster01_10x8_xxrjun.txt", 10, 8), Log("H100-cluster01_10x8_xxrjun-run20260128.txt", 10, 8),
    )),
    Series("Polaris-A100 (NCCL 2.18)", "polaris", "2.18", (
        Log("Polaris-A100_2x4_alcf-nccl2.18-allreduce.txt", 2, 4),
        Log("Polaris-A100_2x4_alcf-nccl2.18-allgather.txt", 2, 4, "all_gather"),
        Log("Polaris-A100_8x4_alcf-nccl2.18-allreduce.txt", 8, 4),
        Log("Polaris-A100_8x4_alcf-nccl2.18-allgather.txt", 8, 4, "all_gather"),
        Log("Polaris-A100_128x4_alcf-nccl2.18-allgather.txt", 128, 4, "all_gather"),
    )),
    Series("Polaris-A100 (NCCL 2.21)", "polaris", "2.21", (
        Log("Polaris-A100_2x4_alcf-nccl2.21-allreduce.txt", 2, 4),
        Log("Polaris-A100_2x4_alcf-nccl2.21-allgather.txt", 2, 4, "all_gather"),
        Log("Polaris-A100_8x4_alcf-nccl2.21-allreduce.txt", 8, 4),
        Log("Polaris-A100_8x4_alcf-nccl2.21-allgather.txt", 8, 4, "all_gather"),
    )),
    Series("Polaris-A100 TCP sockets", "polaris-socket", "2.18", (
        Log("Polaris-A100-defaultenv_2x4_alcf-nccl2.18-allreduce.txt", 2, 4),
        Log("Polaris-A100-defaultenv_8x4_alcf-nccl2.18-allreduce.txt", 8, 4),
        Log("Polaris-A100-defaultenv_128x4_alcf-nccl2.18-allreduce.txt", 128, 4),
    )),
    Series("Snellius-H100", "hgx-h100-4gpu", "2.22", tuple(
        Log(f"Snellius-H100_{s}_odissei-{k}.txt", int(s[0]), 4)
        for s in ("1x4", "2x4") for k in ("allreduce", "allgather", "reducescatter"))),
    # The "2x4" table's busbw/algbw is 2(n-1)/n for n = 64: 16 hosts of one NVL72 rack.
    Series("GB200-NVL72-OCI", "gb200-nvl72", "2.27", (
        Log("GB200-NVL72-OCI_1x4_oci-quickstarts-allreduce.txt", 1, 4),
        Log("GB200-NVL72-OCI_2x4_oci-quickstarts-allreduce.txt", 16, 4, ranks=64),
        Log("GB200-NVL72-OCI_32x4_oci-quickstarts-allreduce.txt", 32, 4),
        Log("GB200-NVL72-OCI_48x4_oci-quickstarts-allreduce.txt", 48, 4),
    )),
    Series("A100-p4dn", "p4d", "2.9", _p4dn_log()),
)

SINGLE_LOGS = (
    ("A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt", "dgx-a100", "2.19", 1, 8),
    ("V100-SXM2-16GB-hybridCubeMesh-1node_8ranks_gh-blog-2019.txt", "dgx1-v100", "2.4", 1, 8),
    ("T4-PCIe-AWS-g4dn-1node_8ranks_aws-hpc-tutorials.txt", "g4dn-t4", "2.19", 1, 8),
    ("RTX2080Ti-PCIe3-noP2P-1node_2ranks_anthony-hoo-autodl.txt", "pcie3-nop2p", "2.21", 1, 2),
    ("H100-AWS-p5-EFA-2nodes_16ranks_awsome-distributed-training.txt", "p5", "2.27", 2, 8),
    ("GH200-Alps-2nodes-x4-NoOFIplugin-socket_8ranks_cscs-docs-nccl.txt", "gh200-alps-socket", "2.21", 2, 4),
)


def read_log(folder: str, log: Log, system_name: str) -> List[Measurement]:
    """The log's tables as Measurements (the p4dn table has its own row layout)."""
    if "#" in log.file:
        name, k = log.file.split("#")
        rows = []
        for line in open(os.path.join(folder, name), encoding="utf-8"):
            t = line.split()
            if len(t) >= 8 and t[0] == k and t[1].isdigit():
                rows.append((float(t[1]), float(t[5])))
        return [Measurement(f"{name}#{k}", "all_reduce", log.nodes, log.gpus,
                            np.array([r[0] for r in rows]), np.array([r[1] for r in rows]), system_name)]
    lt = load_tables(os.path.join(folder, log.file), world_size=log.ranks or log.nodes * log.gpus, kind_hint=log.kind)
    return [Measurement(log.file, t.kind, log.nodes, log.gpus,
                        np.array([r[0] for r in t.rows], dtype=float), np.array([r[1] for r in t.rows], dtype=float),
                        system_name)
            for t in lt.tables]


def band_errors(sizes: np.ndarray, err: np.ndarray) -> Dict[str, Optional[Tuple[float, float, int]]]:
    out = {}
    for name, lo, hi in BANDS:
        sel = (sizes >= lo) & (sizes < hi)
        out[name] = (float(np.median(err[sel])), float(np.max(err[sel])), int(sel.sum())) if sel.any() else None
    return out


def busbw_error(pred_t: np.ndarray, meas_t: np.ndarray) -> np.ndarray:
    """|predicted busbw / measured busbw - 1| in % (busbw is inversely proportional to time)."""
    return 100.0 * np.abs(meas_t / pred_t - 1.0)


def nominal_system(preset: str, nccl: str) -> System:
    return replace(PRESETS[preset], nccl_version=nccl)


def log_nccl_version(folder: str, log: Log) -> Optional[str]:
    """The NCCL release a log says it ran (its banner, nccl-library code or provenance line)."""
    if "#" in log.file:
        return None
    return load_tables(os.path.join(folder, log.file), world_size=log.ranks or log.nodes * log.gpus,
                       kind_hint=log.kind).nccl_version


def series_nccl_version(series: Series) -> str:
    """The release the series' logs print (one release, its patch level kept when they agree),
    else the series' declared one; a log contradicting the declared release line is an error."""
    found = {v for v in (log_nccl_version(series.folder, l) for l in series.logs) if v}
    lines = {".".join(v.split(".")[:2]) for v in found}
    if lines - {series.nccl}:
        raise SystemExit(f"{series.name}: logs print NCCL {', '.join(sorted(found))}, declared {series.nccl}")
    return found.pop() if len(found) == 1 else series.nccl


def clique_placements(system: System, nodes: int, gpus: int) -> Optional[List[dict]]:
    """Multi-host NVLink domains (GB200 NVL72) only: every placement of the job's hosts in the
    fewest racks and the NVLS heads NCCL aligns on for it. A log does not say how its hosts were
    split over racks; the model's NVLS-tree price depends on the split only through the heads,
    so equal heads over every placement mean one prediction for all of them."""
    if system.nvlink_domain_nodes < 2 or nodes <= system.nvlink_domain_nodes:
        return None
    return [{"trays_per_clique": list(p), "nvls_heads": nvls_heads(system, p, gpus)}
            for p in clique_splits(nodes, system.nvlink_domain_nodes)]


def run_series(series: Series, pick: str) -> dict:
    nominal = nominal_system(series.preset, series_nccl_version(series))
    per_log = [(log, read_log(series.folder, log, series.name)) for log in series.logs]
    max_nodes = max(log.nodes for log in series.logs)
    if max_nodes > 2:
        cal_logs = [(l, m) for l, m in per_log if l.nodes <= 2]
    else:
        lo = min(l.nodes for l in series.logs)
        cal_logs = [(l, m) for l, m in per_log if l.nodes == lo]
    cal_nodes = max(l.nodes for l, _ in cal_logs)
    ms = [m for _, mm in cal_logs for m in mm]
    fit = fit_physical(ms, nominal)
    out = {"system": series.name, "preset": series.preset, "nccl": nominal.nccl_version,
           "calibrated_from": sorted({l.file for l, _ in cal_logs}),
           "calibrated_nodes": cal_nodes, "fit_rms_log_error": fit.rms_log_error,
           "constants": {k: {"value": c.value, "stderr": c.stderr, "determined": c.determined,
                             "at_line_rate": c.at_line_rate}
                         for k, c in fit.constants.items()},
           "fit_notes": list(fit.notes), "predicted": [], "nominal": []}
    for log, mm in per_log:
        for m in mm:
            nom_t = plan(m.kind, nominal, m.nodes, m.gpus_per_node, pick=pick).time_us(m.sizes)
            out["nominal"].append({"log": m.source, "kind": m.kind, "scale": f"{m.nodes}x{m.gpus_per_node}",
                                   "bands": band_errors(m.sizes, busbw_error(nom_t, m.time_us))})
            if any(log is l for l, _ in cal_logs):
                continue
            p = fit.predict(m.kind, m.nodes, m.gpus_per_node, m.sizes, use_measured=False, pick=pick)
            err = busbw_error(p.time_us, m.time_us)
            inside = (m.time_us >= p.low_us) & (m.time_us <= p.high_us)
            # what NCCL's own estimate runs at each size: the first thing to check on a bad row
            chosen = ["/".join(c) for c in fit.plan(m.kind, m.nodes, m.gpus_per_node, pick=pick).choose(m.sizes)]
            out["predicted"].append({
                "log": m.source, "kind": m.kind, "scale": f"{m.nodes}x{m.gpus_per_node}",
                "node_ratio": m.nodes / cal_nodes, "bands": band_errors(m.sizes, err),
                "interval_coverage": float(inside.mean()), "note": p.note,
                "clique_placements": clique_placements(nominal, m.nodes, m.gpus_per_node),
                "rows": [{"size_bytes": int(s), "measured_busbw_GBps": float(s / (t * 1e3) * bus_factor(m.kind, m.nodes * m.gpus_per_node)),
                          "predicted_busbw_GBps": float(b), "error_pct": float(e), "chosen": c}
                         for s, t, b, e, c in zip(m.sizes, m.time_us, p.busbw_GBps, err, chosen)],
            })
    return out


def run_single(pick: str) -> List[dict]:
    out = []
    for name, preset, nccl, nodes, gpus in SINGLE_LOGS:
        system = nominal_system(preset, nccl)
        for m in read_log(SINGLE, Log(name, nodes, gpus), preset):
            t = plan(m.kind, system, nodes, gpus, pick=pick).time_us(m.sizes)
            out.append({"log": name, "kind": m.kind, "scale": f"{nodes}x{gpus}", "preset": preset,
                        "bands": band_errors(m.sizes, busbw_error(t, m.time_us))})
    return out


def run_interpolation(series_list: Sequence[Series], pick: str) -> List[dict]:
    out = []
    for series in series_list:
        nominal = nominal_system(series.preset, series_nccl_version(series))
        for log in series.logs:
            for m in read_log(series.folder, log, series.name):
                if m.sizes.size < 6:
                    continue
                order = np.argsort(m.sizes)
                S, T = m.sizes[order], m.time_us[order]
                keep = np.arange(S.size) % 2 == 0
                keep[-1] = True
                test = ~keep
                train = Measurement(m.source, m.kind, m.nodes, m.gpus_per_node, S[keep], T[keep], m.system)
                fit = fit_physical([train], nominal)
                pred = fit.predict(m.kind, m.nodes, m.gpus_per_node, S[test], use_measured=True, pick=pick).time_us
                loglog = np.exp(np.interp(np.log(S[test]), np.log(S[keep]), np.log(T[keep])))
                out.append({"log": m.source, "kind": m.kind, "scale": f"{m.nodes}x{m.gpus_per_node}",
                            "model": busbw_error(pred, T[test]).tolist(),
                            "loglog": busbw_error(loglog, T[test]).tolist(),
                            "rows": _interp_rows(fit, m, S, T, keep, pred, pick)})
    return out


def _interp_rows(fit, m, S, T, keep, pred, pick) -> List[dict]:
    """Per left-out size: measured and predicted time, the model's pick, its uncorrected price,
    and each kept neighbour's size, time, residual and pick (for the --interp-detail listing)."""
    p = fit.plan(m.kind, m.nodes, m.gpus_per_node, pick=pick)
    picks = ["/".join(c) for c in p.choose(S)]
    raw = p.time_us(S)
    need = np.log(T / raw)  # the residual each size would need (known only because it was measured)
    ki = np.flatnonzero(keep)
    rows = []
    for j, i in enumerate(np.flatnonzero(~keep)):
        a = int(np.searchsorted(ki, i)) - 1
        nb = [{"size_bytes": int(S[k]), "time_us": float(T[k]), "residual": float(need[k]), "pick": picks[k]}
              for k in (ki[a], ki[a + 1])]
        rows.append({"size_bytes": int(S[i]), "measured_us": float(T[i]), "predicted_us": float(pred[j]),
                     "uncorrected_us": float(raw[i]), "needed_residual": float(need[i]), "pick": picks[i],
                     "error_pct": float(busbw_error(pred[j:j + 1], T[i:i + 1])[0]), "neighbours": nb,
                     "tags": _interp_tags(T, picks, ki, a, i), "class": _interp_class(need, picks, ki, a, i)})
    return rows


BAND = (math.log(1.15), -math.log(0.85))  # the 15% busbw band in log(measured / predicted): above, below


def _beyond(v, a, b) -> bool:
    """Whether residual `v` lies beyond both `a` and `b` by more than the 15% band, on one side:
    no value between them predicts it within 15%."""
    return v > max(a, b) + BAND[0] or v < min(a, b) - BAND[1]


def _interp_class(need, picks, ki, a, i) -> str:
    """The cause of a left-out size's error, from the residuals every size would need
    (diagnostic; the correction does not read it), first that applies:
    'a' the size is a spike against both kept neighbours (no residual between theirs gets within
    15%: nothing smooth predicts it); 'c' a regime change between the kept neighbours (the
    model's pick here differs from one's); 'b' a kept neighbour's residual is a spike against its
    own kept neighbours of its pick and is spread into this size; 'd' neither: the residual is not linear
    in log size between two kept sizes of one regime (the fit's structure)."""
    lo, hi = ki[a], ki[a + 1]
    if _beyond(need[i], need[lo], need[hi]):
        return "a"
    if picks[lo] != picks[i] or picks[hi] != picks[i]:
        return "c"
    def spike(k, below, above):  # a kept size against its kept neighbours of its own pick
        return picks[below] == picks[k] == picks[above] and _beyond(need[k], need[below], need[above])
    if (a >= 1 and spike(lo, ki[a - 1], hi)) or (a + 2 < ki.size and spike(hi, lo, ki[a + 2])):
        return "b"
    return "d"


def _interp_tags(T, picks, ki, a, i) -> List[str]:
    """Which of three causes a left-out size shows (diagnostic; the correction does not read it).
    A time is out of order when it is not between its neighbours' times (slower than a larger
    size or faster than a smaller one): no model monotone in size within a regime follows it.
    'spike' the left-out size's own time is out of order against its kept neighbours (nothing
    smooth predicts it); 'neighbour-spike' a kept neighbour's time is out of order against its
    own kept neighbours, and its residual is interpolated into this size; 'switch' the model's
    pick here differs from a kept neighbour's (a regime change between kept sizes)."""
    def out_of_order(k, lo, hi):
        return not (T[lo] <= T[k] <= T[hi])
    lo, hi = ki[a], ki[a + 1]
    tags = []
    if out_of_order(i, lo, hi):
        tags.append("spike")
    if (a >= 1 and out_of_order(lo, ki[a - 1], hi)) or (a + 2 < ki.size and out_of_order(hi, lo, ki[a + 2])):
        tags.append("neighbour-spike")
    if picks[lo] != picks[i] or picks[hi] != picks[i]:
        tags.append("switch")
    return tags


def _fmt(b) -> str:
    return "      -      " if b is None else f"{b[0]:5.1f} / {b[1]:5.1f}"


def print_report(results: List[dict], single: List[dict], interp: List[dict], file=sys.stdout) -> None:
    p = lambda *a: print(*a, file=file)
    p("Cross-scale: calibrated at the smallest scale(s), predicting larger ones; |busbw error| median / max (%)")
    p(f"{'system':26} {'calibrated on':14} {'predicted':10} {'x nodes':>7} {'kind':14} {'>= 1 MB':>13} {'64K-1M':>13} {'< 64K':>13}")
    for r in results:
        cal = ",".join(sorted({re.search(r'_(\d+x\d+)', f).group(1) if re.search(r'_(\d+x\d+)', f) else f for f in r["calibrated_from"]}))
        if r["system"] == "A100-p4dn":
            cal = "1x8,2x8"
        for q in r["predicted"]:
            b = q["bands"]
            p(f"{r['system']:26} {cal:14} {q['scale']:10} {q['node_ratio']:7.1f} {q['kind']:14} {_fmt(b['ge1MB']):>13} {_fmt(b['64K-1M']):>13} {_fmt(b['lt64K']):>13}")
    p("")
    p("Nominal hardware only (no calibration): |busbw error| median / max (%)")
    p(f"{'log':58} {'kind':14} {'>= 1 MB':>13} {'64K-1M':>13} {'< 64K':>13}")
    rows = [(q["log"], q["kind"], q["bands"]) for r in results for q in r["nominal"]] + [(q["log"], q["kind"], q["bands"]) for q in single]
    for log, kind, b in rows:
        p(f"{log[:58]:58} {kind:14} {_fmt(b['ge1MB']):>13} {_fmt(b['64K-1M']):>13} {_fmt(b['lt64K']):>13}")
    allmed = [b["ge1MB"][0] for _, _, b in rows if b["ge1MB"]]
    p(f"  median over logs of the >= 1 MB median: {np.median(allmed):.1f}%   (all bands pooled per log, median of medians: "
      f"{np.median([np.median([v[0] for v in b.values() if v]) for _, _, b in rows]):.1f}%)")
    p("")
    model = np.concatenate([np.asarray(q["model"]) for q in interp]) if interp else np.zeros(0)
    loglog = np.concatenate([np.asarray(q["loglog"]) for q in interp]) if interp else np.zeros(0)
    p("Interpolation within a calibrated scale (every other size left out), |busbw error| over all left-out sizes:")
    p(f"  physical fit + measured residuals: median {np.median(model):.1f}%  max {np.max(model):.1f}%  (n={model.size})")
    p(f"  log-log interpolation of neighbours: median {np.median(loglog):.1f}%  max {np.max(loglog):.1f}%")


def _kb(s: int) -> str:
    return f"{s / KB:.0f}K" if s < MB else f"{s / MB:.0f}M"


def _bytes_label(s: int) -> str:
    """:func:`_kb`, or the bytes themselves below 1 KiB ("16B")."""
    return _kb(s) if s >= KB else f"{s}B"


def print_interp_detail(interp: List[dict], above: float = 15.0, file=sys.stdout) -> None:
    """Every left-out size with |busbw error| above `above` %: measured and predicted time, the
    model's pick, the residual it would have needed, and its kept neighbours' residuals."""
    p = lambda *a: print(*a, file=file)
    p("")
    p(f"Interpolation, left-out sizes with |busbw error| > {above:g}% (residual r = log(measured / physical); "
      "need = the left-out size's own)")
    p(f"{'log':46} {'kind':14} {'size':>5} {'meas us':>9} {'pred us':>9} {'err %':>6} {'pick':13} {'need':>6}  "
      "kept neighbours (size r pick)                    class tags")
    for q in interp:
        for r in q["rows"]:
            if r["error_pct"] <= above:
                continue
            nb = "  ".join(f"{_kb(n['size_bytes']):>5} {n['residual']:+.2f} {n['pick']:13}" for n in r["neighbours"])
            p(f"{q['log'][:46]:46} {q['kind']:14} {_kb(r['size_bytes']):>5} {r['measured_us']:9.1f} {r['predicted_us']:9.1f} "
              f"{r['error_pct']:6.1f} {r['pick']:13} {r['needed_residual']:+6.2f}  {nb}  {r['class']:5} {','.join(r['tags']) or '-'}")
    _print_interp_classes(interp, above, p)


def _print_interp_classes(interp: List[dict], above: float, p) -> None:
    """Per cause class: how many left-out sizes, their median and max error, and how many over `above`."""
    names = {"a": "spike at the size", "b": "neighbour's spike spread", "c": "regime change", "d": "fit's structure"}
    rows = [r for q in interp for r in q["rows"]]
    for c, name in names.items():
        e = np.array([r["error_pct"] for r in rows if r["class"] == c])
        if e.size:
            p(f"  class {c} ({name}): n={e.size}  median {np.median(e):.1f}%  max {np.max(e):.1f}%  over {above:g}%: {int(np.sum(e > above))}")


def ring_step_rows(series: Series, pick: str = "nccl") -> List[dict]:
    """Per predicted size >= 1 MB that the model runs as a ring: the ring's structure (channels,
    channels per NIC, a channel's chunk per step, chunk loops, steps = loops x ring steps) and the
    time per step the log implies against the model's, split into its latency and bandwidth
    terms. At a fixed channel count the model is affine in size, so its bandwidth term is
    T(2S) - T(S). ``excess`` is what the log leaves per step above the model's bandwidth term;
    chunk and loops are NCCL's Simple ones (LL/LL128 rows: the channel's share, one loop)."""
    return _ring_step_scan(series, pick)[0]


def _ring_step_scan(series: Series, pick: str) -> Tuple[List[dict], Dict[str, int]]:
    """:func:`ring_step_rows` and, per (algorithm/protocol) the model runs instead of a ring,
    how many predicted sizes >= 1 MB it took (what to say when there are no rows)."""
    nominal = nominal_system(series.preset, series_nccl_version(series))
    per_log = [(log, read_log(series.folder, log, series.name)) for log in series.logs]
    limit = 2 if max(log.nodes for log in series.logs) > 2 else min(log.nodes for log in series.logs)
    fit = fit_physical([m for log, mm in per_log if log.nodes <= limit for m in mm], nominal)
    s = fit.system
    rows: List[dict] = []
    others: Dict[str, int] = {}
    for log, mm in per_log:
        if log.nodes <= limit:
            continue
        for m in mm:
            sc = Scale.of(s, m.nodes, m.gpus_per_node)
            n, C = sc.ranks, nccl_channels(s, sc)
            ring_steps = 2 * (n - 1) if m.kind == "all_reduce" else n - 1
            for S, T, (a, proto) in zip(m.sizes, m.time_us, fit.plan(m.kind, m.nodes, m.gpus_per_node, pick=pick).choose(m.sizes)):
                if S < MB:
                    continue
                if a != "ring":
                    others[f"{a}/{proto}"] = others.get(f"{a}/{proto}", 0) + 1
                    continue
                nc = float(channels_used(a, proto, np.array([S]), C, n)[0])
                if proto == "Simple":
                    chunk = float(np.sum(simple_ring_slices(np.array([S]), n, nc)))
                    loops = int(simple_ring_loops(np.array([S]), n, nc)[0])
                else:
                    chunk, loops = float(np.ceil(S / n / nc)), 1
                t1, t2 = physical_time_us(m.kind, a, proto, np.array([S, 2 * S]), s, sc)
                steps = loops * ring_steps
                rows.append({"log": m.source, "scale": f"{m.nodes}x{m.gpus_per_node}", "kind": m.kind,
                             "size_bytes": int(S), "pick": f"{a}/{proto}", "channels": int(nc),
                             "channels_per_nic": nc / min(nc, nics_driven(s, sc)) if sc.domains > 1 else None,
                             "chunk_bytes": chunk, "loops": loops, "steps": steps,
                             "measured_us_per_step": T / steps, "model_us_per_step": t1 / steps,
                             "model_latency_us_per_step": (2 * t1 - t2) / steps,
                             "excess_us_per_step": (T - (t2 - t1)) / steps})
    return rows, others


def ring_intercepts(rows: Sequence[dict], largest: float = 2 * 1024 * MB) -> List[dict]:
    """Per (log, kind): a least-squares line time = a + size x b through the :func:`ring_step_rows`
    sizes the model runs as ring/Simple, up to `largest` bytes (beyond, the 1-GPU-per-node logs'
    busbw still climbs), with at least 3 sizes. ``intercept_us`` (a, with its standard error) is
    the log's fixed cost per collective; ``model_latency_us`` the model's latency at the smallest
    of those sizes (its hops: a fixed number per collective, whatever the size)."""
    out = []
    for log, kind in dict.fromkeys((r["log"], r["kind"]) for r in rows):
        sel = [r for r in rows if (r["log"], r["kind"]) == (log, kind) and r["pick"] == "ring/Simple"
               and r["size_bytes"] <= largest]
        if len(sel) < 3:
            continue
        S = np.array([r["size_bytes"] for r in sel], dtype=float)
        T = np.array([r["measured_us_per_step"] * r["steps"] for r in sel])
        A = np.vstack([np.ones_like(S), S]).T
        coef = np.linalg.lstsq(A, T, rcond=None)[0]
        resid = T - A @ coef
        se = math.sqrt(np.linalg.inv(A.T @ A)[0, 0] * float(resid @ resid) / (S.size - 2))
        first = sel[0]
        out.append({"log": log, "scale": first["scale"], "kind": kind, "sizes": [int(x) for x in S],
                    "intercept_us": float(coef[0]), "intercept_stderr_us": se,
                    "model_latency_us": first["model_latency_us_per_step"] * first["steps"],
                    "ring_steps": first["steps"] // first["loops"]})
    return out


def ring_steps(series: Series, pick: str = "nccl") -> dict:
    """The ``--ring-steps`` listing of `series` as data (the ``ring_steps`` key of ``--json``):
    its :func:`ring_step_rows` and :func:`ring_intercepts` (plain numbers), and for a table with
    no rows the one line that says why (``rows_note``, ``intercepts_note``; None otherwise)."""
    rows, others = _ring_step_scan(series, pick)
    rows = [{k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in r.items()} for r in rows]
    intercepts = ring_intercepts(rows)
    rows_note = intercepts_note = None
    if not rows:
        where = f"{series.name} (--pick {pick})"
        if others:
            picks = ", ".join(f"{k} at {v}" for k, v in sorted(others.items(), key=lambda kv: (-kv[1], kv[0])))
            rows_note = (f"{where}: no ring rows: the model runs no predicted size >= 1 MB as a ring "
                         f"({picks} of its {sum(others.values())})")
        else:
            rows_note = f"{where}: no ring rows: no predicted log has a size >= 1 MB"
        intercepts_note = rows_note
    elif not intercepts:
        counts = {}
        for r in rows:
            if r["pick"] == "ring/Simple" and r["size_bytes"] <= 2 * 1024 * MB:
                counts[(r["log"], r["kind"])] = counts.get((r["log"], r["kind"]), 0) + 1
        most = max(counts.values(), default=0)
        intercepts_note = (f"{series.name} (--pick {pick}): no fixed cost fitted: it needs 3 or more ring/Simple "
                           f"sizes (1 MB to 2 GiB) in one log, the most in one is {most}")
    return {"system": series.name, "pick": pick, "rows": rows, "intercepts": intercepts,
            "rows_note": rows_note, "intercepts_note": intercepts_note}


def print_ring_steps(block: dict, file=None) -> None:
    """The :func:`ring_steps` listing: the ring-step table, then each log's ring/Simple fixed
    cost; a table with no rows is the one line saying why, not its headers. `file`: default
    the stdout of the moment (not of import)."""
    p = lambda *a: print(*a, file=file or sys.stdout)
    rows = block["rows"]
    p("")
    if not rows:
        p(f"Ring steps: {block['rows_note']}")
        return
    p("Ring steps: per predicted ring size >= 1 MB, time per step (us) measured and modelled; "
      "excess = measured minus the model's bandwidth term")
    p(f"{'log':46} {'kind':14} {'size':>5} {'pick':12} {'ch':>3} {'ch/NIC':>6} {'chunk':>6} {'loops':>5} {'steps':>5} "
      f"{'meas':>8} {'model':>8} {'m.lat':>7} {'excess':>7}")
    for r in rows:
        cpn = "-" if r["channels_per_nic"] is None else f"{r['channels_per_nic']:.0f}"
        p(f"{r['log'][:46]:46} {r['kind']:14} {_kb(r['size_bytes']):>5} {r['pick']:12} {r['channels']:3d} {cpn:>6} "
          f"{r['chunk_bytes'] / KB:5.0f}K {r['loops']:5d} {r['steps']:5d} {r['measured_us_per_step']:8.1f} "
          f"{r['model_us_per_step']:8.1f} {r['model_latency_us_per_step']:7.1f} {r['excess_us_per_step']:7.1f}")
    p("")
    if not block["intercepts"]:
        p(f"Ring/Simple fixed cost per collective: {block['intercepts_note']}")
        return
    p("Ring/Simple fixed cost per collective: least-squares intercept of time over size (sizes <= 2 GiB) "
      "against the model's latency")
    p(f"{'log':46} {'kind':14} {'sizes':>11} {'steps':>5} {'log: a +- se (us)':>18} {'model (us)':>10}")
    for q in block["intercepts"]:
        span = f"{_kb(q['sizes'][0])}-{_kb(q['sizes'][-1])}"
        p(f"{q['log'][:46]:46} {q['kind']:14} {span:>11} {q['ring_steps']:5d} "
          f"{q['intercept_us']:9.0f} +- {q['intercept_stderr_us']:4.0f} {q['model_latency_us']:10.0f}")


def ring_steps_of(kind: str, ranks: int) -> int:
    """Steps of one ring pass: 2 (n - 1) for all_reduce (reduce-scatter then all-gather), n - 1
    for all_gather and reduce_scatter (NCCL's runRing)."""
    return 2 * (ranks - 1) if kind == "all_reduce" else ranks - 1


def fixed_and_step_us(t_lo: float, steps_lo: int, t_hi: float, steps_hi: int) -> Tuple[float, float]:
    """The line time = F + steps x s through two measured times of the same chunk at two ring
    sizes: (F, s) in us. F is what a collective costs whatever its step count; a fit at one ring
    size alone cannot tell it from a per-step cost (it sees F / steps + s)."""
    s = (t_hi - t_lo) / (steps_hi - steps_lo)
    return t_lo - steps_lo * s, s


def scale_pair_rows(series: Series, pick: str = "nccl") -> List[dict]:
    """Per kind and per size of the series' smallest-scale log: the same bytes per rank at each
    larger scale (size x the ranks' ratio, so the same chunk per channel where both run the same
    channels), both measured times, their ring step counts, the nominal system's NCCL pick at
    each scale, and :func:`fixed_and_step_us` through the two (rows where the picks differ
    compare different kernels: read them with care)."""
    nominal = nominal_system(series.preset, series_nccl_version(series))
    tables = [m for log in series.logs for m in read_log(series.folder, log, series.name)]
    rows: List[dict] = []
    for kind in dict.fromkeys(m.kind for m in tables):
        mine = sorted((m for m in tables if m.kind == kind), key=lambda m: m.nodes * m.gpus_per_node)
        lo = mine[0]
        n_lo = lo.nodes * lo.gpus_per_node
        for hi in mine[1:]:
            n_hi = hi.nodes * hi.gpus_per_node
            if n_hi == n_lo:
                continue
            at_hi = dict(zip(hi.sizes.astype(int), hi.time_us))
            pairs = [(int(S), float(T), int(S) * n_hi // n_lo) for S, T in zip(lo.sizes, lo.time_us)
                     if (int(S) * n_hi) % n_lo == 0 and int(S) * n_hi // n_lo in at_hi]
            if not pairs:
                continue
            pick_lo = plan(kind, nominal, lo.nodes, lo.gpus_per_node, pick=pick).choose(np.array([p[0] for p in pairs], float))
            pick_hi = plan(kind, nominal, hi.nodes, hi.gpus_per_node, pick=pick).choose(np.array([p[2] for p in pairs], float))
            k_lo, k_hi = ring_steps_of(kind, n_lo), ring_steps_of(kind, n_hi)
            for (S_lo, T_lo, S_hi), c_lo, c_hi in zip(pairs, pick_lo, pick_hi):
                T_hi = float(at_hi[S_hi])
                F, step = fixed_and_step_us(T_lo, k_lo, T_hi, k_hi)
                rows.append({"kind": kind, "scales": f"{lo.nodes}x{lo.gpus_per_node}->{hi.nodes}x{hi.gpus_per_node}",
                             "bytes_per_rank": S_lo // n_lo, "size_lo": S_lo, "size_hi": S_hi,
                             "time_lo_us": T_lo, "time_hi_us": T_hi, "steps_lo": k_lo, "steps_hi": k_hi,
                             "pick_lo": "/".join(c_lo), "pick_hi": "/".join(c_hi),
                             "fixed_us": F, "step_us": step})
    return rows


def kind_pair_rows(series: Series, pick: str = "nccl") -> List[dict]:
    """Per scale of the series that has both an all_reduce and an all_gather log, per size both
    ran: the two measured times, their ring step counts (2 (n - 1) and n - 1), the nominal
    system's NCCL pick for each, and :func:`fixed_and_step_us` through the two. An all_reduce of
    S bytes and an all_gather of S bytes (the output, as nccl-tests prints it) move the same chunk
    per channel a step in the same number of loops (runRing: loopCount = nranks x chunkCount for
    both), so on a ring/Simple pick the pair separates a per-collective cost F from the per-step
    cost s at one scale, where a one-kind fit sees only F / steps + s. The all_reduce's step also
    reduces: with steps s_AR and s_AG the line gives s = 2 s_AR - s_AG and F less
    2 (n - 1) (s_AR - s_AG), so a slower reducing step reads as a smaller F."""
    nominal = nominal_system(series.preset, series_nccl_version(series))
    tables = [m for log in series.logs for m in read_log(series.folder, log, series.name)]
    rows: List[dict] = []
    for scale in dict.fromkeys((m.nodes, m.gpus_per_node) for m in tables):
        by_kind = {m.kind: m for m in tables if (m.nodes, m.gpus_per_node) == scale}
        if "all_reduce" not in by_kind or "all_gather" not in by_kind:
            continue
        ar, ag = by_kind["all_reduce"], by_kind["all_gather"]
        at_ar = dict(zip(ar.sizes.astype(int), ar.time_us))
        sizes = [int(S) for S in ag.sizes if int(S) in at_ar]
        if not sizes:
            continue
        n = scale[0] * scale[1]
        S_arr = np.array(sizes, float)
        pick_ar = plan("all_reduce", nominal, scale[0], scale[1], pick=pick).choose(S_arr)
        pick_ag = plan("all_gather", nominal, scale[0], scale[1], pick=pick).choose(S_arr)
        k_ar, k_ag = ring_steps_of("all_reduce", n), ring_steps_of("all_gather", n)
        at_ag = dict(zip(ag.sizes.astype(int), ag.time_us))
        for S, c_ar, c_ag in zip(sizes, pick_ar, pick_ag):
            T_ar, T_ag = float(at_ar[S]), float(at_ag[S])
            F, step = fixed_and_step_us(T_ag, k_ag, T_ar, k_ar)
            rows.append({"scale": f"{scale[0]}x{scale[1]}", "size": S, "bytes_per_rank": S // n,
                         "time_all_reduce_us": T_ar, "time_all_gather_us": T_ag,
                         "steps_all_reduce": k_ar, "steps_all_gather": k_ag,
                         "pick_all_reduce": "/".join(c_ar), "pick_all_gather": "/".join(c_ag),
                         "fixed_us": F, "step_us": step})
    return rows


def print_kind_pairs(name: str, rows: Sequence[dict], file=None) -> None:
    """The :func:`kind_pair_rows` table of series `name`."""
    p = lambda *a: print(*a, file=file or sys.stdout)
    p("")
    if not rows:
        p(f"Kind pairs: {name}: no scale with both an all_reduce and an all_gather log")
        return
    p(f"Kind pairs ({name}): all_reduce and all_gather of the same size at one scale; time = F + steps x s "
      f"through both")
    p(f"{'scale':6} {'size':>7} {'B/rank':>7} {'t_AR':>8} {'t_AG':>8} {'steps':>7} {'pick AR':12} {'pick AG':12} "
      f"{'s (us)':>7} {'F (us)':>7}")
    for r in rows:
        p(f"{r['scale']:6} {_bytes_label(r['size']):>7} "
          f"{_bytes_label(r['bytes_per_rank']):>7} {r['time_all_reduce_us']:8.1f} {r['time_all_gather_us']:8.1f} "
          f"{r['steps_all_reduce']:3d}/{r['steps_all_gather']:<3d} {r['pick_all_reduce']:12} "
          f"{r['pick_all_gather']:12} {r['step_us']:7.1f} {r['fixed_us']:7.1f}")


def print_scale_pairs(name: str, rows: Sequence[dict], file=None) -> None:
    """The :func:`scale_pair_rows` table of series `name`."""
    p = lambda *a: print(*a, file=file or sys.stdout)
    p("")
    if not rows:
        p(f"Scale pairs: {name}: no two scales with the same bytes per rank")
        return
    p(f"Scale pairs ({name}): the same bytes per rank at two ring sizes; time = F + steps x s through both")
    p(f"{'kind':14} {'scales':10} {'B/rank':>7} {'t_lo':>8} {'t_hi':>8} {'steps':>7} {'pick lo':12} {'pick hi':12} "
      f"{'s (us)':>7} {'F (us)':>7}")
    for r in rows:
        p(f"{r['kind']:14} {r['scales']:10} {_bytes_label(r['bytes_per_rank']):>7} {r['time_lo_us']:8.1f} {r['time_hi_us']:8.1f} "
          f"{r['steps_lo']:3d}/{r['steps_hi']:<3d} {r['pick_lo']:12} {r['pick_hi']:12} {r['step_us']:7.1f} "
          f"{r['fixed_us']:7.1f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write every figure (and each predicted row; with --ring-steps, its rows under "
                                   "ring_steps) to this file")
    ap.add_argument("--pick", choices=("nccl", "fastest"), default="nccl",
                    help="choose (algorithm, protocol) by NCCL's own estimate (default) or by the physical time")
    ap.add_argument("--interp-detail", action="store_true",
                    help="also list every interpolation left-out size off by more than 15%%, with its neighbours")
    ap.add_argument("--ring-steps", metavar="SYSTEM", nargs="?", const="H100-cluster01",
                    help="also list, per predicted ring size of SYSTEM (default H100-cluster01), the time per "
                         "ring step measured and modelled, with channels, chunk and loops")
    ap.add_argument("--scale-pairs", metavar="SYSTEM", nargs="?", const="Polaris-A100 (NCCL 2.21)",
                    help="also list, for SYSTEM (default Polaris-A100 (NCCL 2.21)), the same bytes per rank "
                         "measured at two ring sizes and the fixed cost per collective and per-step cost "
                         "through both")
    args = ap.parse_args(argv)
    steps_series = [x for x in SERIES if x.name == args.ring_steps]
    if args.ring_steps is not None and not steps_series:  # '' too: it names no series
        ap.error(f"--ring-steps: no series {args.ring_steps!r} (one of: {', '.join(x.name for x in SERIES)})")
    pair_series = [x for x in SERIES if x.name == args.scale_pairs]
    if args.scale_pairs is not None and not pair_series:
        ap.error(f"--scale-pairs: no series {args.scale_pairs!r} (one of: {', '.join(x.name for x in SERIES)})")
    check_script_outputs(ap, {"--json": args.json})  # before the minutes of fitting
    results = [run_series(s, args.pick) for s in SERIES]
    single = run_single(args.pick)
    interp = run_interpolation(SERIES, args.pick)
    print_report(results, single, interp)
    if args.interp_detail:
        print_interp_detail(interp)
    steps = ring_steps(steps_series[0], args.pick) if steps_series else None
    if steps is not None:
        print_ring_steps(steps)
    pairs = scale_pair_rows(pair_series[0], args.pick) if pair_series else None
    if pairs is not None:
        print_scale_pairs(pair_series[0].name, pairs)
    kinds = kind_pair_rows(pair_series[0], args.pick) if pair_series else None
    if kinds is not None:
        print_kind_pairs(pair_series[0].name, kinds)
    if args.json:
        doc = {"series": results, "single_scale_nominal": single, "interpolation": interp}
        if steps is not None:
            doc["ring_steps"] = steps
        if pairs is not None:
            doc["scale_pairs"] = {"system": pair_series[0].name, "rows": pairs, "kind_pairs": kinds}
        # whole or not at all (a write cut short leaves the previous file)
        atomic_write_text(args.json, json.dumps(doc, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

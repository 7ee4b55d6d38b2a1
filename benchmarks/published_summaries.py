"""Published summary figures as cross-scale checks: systems with single numbers, not tables.

    python benchmarks/published_summaries.py [--json OUT.json]

Data: tests/data/published_summaries.yaml (each figure with the source line it comes from; the
sources are quoted in tests/data/nccl-tests-multiscale/summaries.md). Each system is described by
a nominal preset (commsim/network/system.py) with the NCCL release its source states; nothing is
tuned per system or per figure.

- S2 (Azure NDmv4) is the composition case: an intra-node level fitted from the 1x8 figures, a
  network level fitted from the 2x1 figures (commsim.calibration.physical_fit), composed and
  asked for 2x8; also the joint fit of both, and the nominal hardware alone.
- S1 (A100, 8x 100G RoCE, 2..6 nodes) and S5 (p3dn V100, 100G EFA, 2..32 nodes): the nominal
  hardware at every published scale, and a fit at the smallest published scale predicting the
  larger ones; NCCL's pick at each scale against what the source's maintainers say runs.
- S7 (2x8 A100, 2x 200G IB, busbw per NCCL release): what the model says per release.
- S8: hardware in images only: nothing to predict.

Errors are signed busbw errors, predicted / published - 1 in % (busbw is inversely proportional
to time, so a latency figure's error is published time / predicted time - 1); a range ("6-8
GB/s") counts 0 inside it, else the distance to its nearer end. A single number per log can
determine at most one constant per number: which ones the fit determined is printed with the
fit, and every other constant is the nominal value (the honest answer with so few numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from typing import Dict, List, Sequence

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from commsim.atomic import atomic_write_text  # noqa: E402
from commsim.cli.outputs import check_script_outputs  # noqa: E402
from commsim.calibration.physical_fit import Measurement, PhysicalFit, compose, fit_physical  # noqa: E402
from commsim.collectives.nccl.scale import bus_factor  # noqa: E402
from commsim.collectives.nccl_tuner import plan  # noqa: E402
from commsim.network.system import LINE_RATE_OF, PRESETS, System, nominal_system  # noqa: E402
from commsim.yamlio import load_yaml_file  # noqa: E402

DATA_FILE = os.path.join(os.path.dirname(HERE), "tests", "data", "published_summaries.yaml")

# A large-message busbw figure measures bandwidths, not latencies: the "bandwidths only" fit
# frees just the link bandwidths (the constants a line rate bounds). Stated before looking at
# any figure, the same for every system.
BANDWIDTH_NAMES = tuple(LINE_RATE_OF)

# S7's hardware as the issue states it (2 nodes x 8 A100 80GB, 2x 200 Gb/s IB per node). What it
# does not state is assumed as on HGX A100 8-GPU boards: NVSwitch (NVLink3, 300 GB/s each way),
# the GPU-NIC path and CPU left at the description's defaults (PXB, Intel).
S7_SOURCE = "NVIDIA/nccl issue 837 (2x 200 Gb/s IB per node); NVSwitch assumed (HGX A100 8-GPU)"


def load_summaries(path: str = DATA_FILE) -> List[dict]:
    """The systems of the summaries file (a list of mappings, see the file's header)."""
    doc = load_yaml_file(path, "a published-summaries YAML file")
    if not isinstance(doc, dict) or not isinstance(doc.get("systems"), list):
        raise SystemExit(f"{path}: expected a mapping with a 'systems' list")
    return doc["systems"]


def by_id(systems: Sequence[dict], ident: str) -> dict:
    for s in systems:
        if s["id"] == ident:
            return s
    raise KeyError(ident)


def nominal_of(entry: dict) -> System:
    """The entry's preset at the NCCL release its source states (the preset's own when it
    states none)."""
    base = PRESETS[entry["preset"]]
    return replace(base, nccl_version=str(entry["nccl"])) if entry.get("nccl") else base


def published_time_us(fig: dict) -> float:
    """The time (us) a point figure stands for: itself, or the time of its busbw at its size."""
    if fig["metric"] == "time_us":
        return float(fig["value"])
    ranks = fig["nodes"] * fig["gpus"]
    return fig["size_bytes"] / (float(fig["value"]) * 1e3) * bus_factor(fig["kind"], ranks)


def measurements(figs: Sequence[dict], label: str) -> List[Measurement]:
    """Point figures as Measurements, one per (kind, scale), one row per published number."""
    groups: Dict[tuple, List[dict]] = {}
    for f in figs:
        if "value" not in f:
            raise ValueError(f"{label}: a range figure cannot calibrate ({f.get('quote', f)!r})")
        groups.setdefault((f["kind"], f["nodes"], f["gpus"]), []).append(f)
    out = []
    for (kind, nodes, gpus), fs in groups.items():
        fs = sorted(fs, key=lambda f: f["size_bytes"])
        out.append(Measurement(f"{label} {nodes}x{gpus}", kind, nodes, gpus,
                               np.array([float(f["size_bytes"]) for f in fs]),
                               np.array([published_time_us(f) for f in fs])))
    return out


def figure_error_pct(fig: dict, predicted_time_us: float) -> float:
    """Signed busbw error of a prediction against a figure, in % (see the module docstring)."""
    if fig["metric"] == "time_us":
        return 100.0 * (float(fig["value"]) / predicted_time_us - 1.0)
    ranks = fig["nodes"] * fig["gpus"]
    bus = fig["size_bytes"] / (predicted_time_us * 1e3) * bus_factor(fig["kind"], ranks)
    if "value" in fig:
        return 100.0 * (bus / float(fig["value"]) - 1.0)
    lo, hi = float(fig["low"]), float(fig["high"])
    return 0.0 if lo <= bus <= hi else 100.0 * (bus / (lo if bus < lo else hi) - 1.0)


def predict_row(fig: dict, system: System, choice: System, how: str, **kw) -> dict:
    """The model's time, busbw, pick and error at one figure's kind, scale and size."""
    p = plan(fig["kind"], system, fig["nodes"], fig["gpus"], choice_system=choice, **kw)
    S = np.array([float(fig["size_bytes"])])
    t = float(p.time_us(S)[0])
    algo, proto = p.choose(S)[0]
    return {"how": how, "kind": fig["kind"], "scale": f"{fig['nodes']}x{fig['gpus']}", "nodes": fig["nodes"],
            "size_bytes": int(fig["size_bytes"]), "metric": fig["metric"],
            "published": fig.get("value", [fig.get("low"), fig.get("high")]),
            "predicted_time_us": t, "predicted_busbw_GBps": float(p.busbw_GBps(S)[0]),
            "pick": f"{algo}/{proto}", "error_pct": figure_error_pct(fig, t), "quote": fig["quote"]}


def fit_summary(fit: PhysicalFit) -> dict:
    """What a fit determined (value and standard error) and what it left nominal."""
    return {"determined": {k: {"value": c.value, "stderr": c.stderr, "at_line_rate": c.at_line_rate}
                           for k, c in fit.constants.items() if c.determined},
            "nominal": sorted(k for k, c in fit.constants.items() if not c.determined),
            "rms_log_error": fit.rms_log_error}


# --- S2: composition ------------------------------------------------------------------------


def run_composition(entry: dict) -> dict:
    """Nominal alone at every figure; intra-node fit (1x8) + network fit (2x1) composed -> 2x8;
    the joint fit of both -> 2x8."""
    nom = nominal_of(entry)
    figs = entry["figures"]
    intra_figs = [f for f in figs if f["nodes"] == 1]
    net_figs = [f for f in figs if f["nodes"] > 1 and f["gpus"] == 1]
    target = [f for f in figs if f["nodes"] > 1 and f["gpus"] > 1]
    intra = fit_physical(measurements(intra_figs, entry["id"]), nom)
    net = fit_physical(measurements(net_figs, entry["id"]), nom)
    joint = fit_physical(measurements(intra_figs + net_figs, entry["id"]), nom)
    composed = compose(intra, net, name=f"{nom.name} (1x8 + 2x1)")
    rows = [predict_row(f, nom, nom, "nominal") for f in figs]
    rows += [predict_row(f, composed, nom, "composed 1x8 + 2x1") for f in target]
    rows += [predict_row(f, joint.system, nom, "joint fit 1x8 + 2x1") for f in target]
    for r in rows:
        r["system"] = entry["id"]
    return {"id": entry["id"], "title": entry["title"], "source": entry["source"], "preset": nom.name,
            "nccl": nom.nccl_version, "fits": {"intra 1x8": fit_summary(intra), "network 2x1": fit_summary(net),
                                              "joint": fit_summary(joint)},
            "composed_constants": {k: {"value": v, "source": composed.sources.get(k, "")}
                                   for k, v in composed.constants().items()},
            "rows": rows}


# --- S1, S5: scaling --------------------------------------------------------------------------


def run_scaling(entry: dict) -> dict:
    """Nominal at every published scale; fitted at the smallest scale (every constant, and the
    bandwidths only) predicting the larger ones; the pick against the maintainers' notes, and
    Tree forced (NCCL_ALGO=Tree) beside it."""
    nom = nominal_of(entry)
    figs = entry["figures"]
    smallest = min(f["nodes"] for f in figs)
    cal = [f for f in figs if f["nodes"] == smallest]
    fits = {"all constants": fit_physical(measurements(cal, entry["id"]), nom),
            "bandwidths only": fit_physical(measurements(cal, entry["id"]), nom, names=BANDWIDTH_NAMES)}
    rows = []
    for f in figs:
        rows.append(predict_row(f, nom, nom, "nominal"))
        rows.append(predict_row(f, nom, nom, "nominal, tree forced", algorithm="tree"))
        if f["nodes"] > smallest:
            for how, fit in fits.items():
                rows.append(predict_row(f, fit.system, nom, f"fit at {smallest} nodes ({how})"))
    for r in rows:
        r["system"] = entry["id"]
    expected = {int(k): v for k, v in (entry.get("expected_picks") or {}).items()}
    picks = []
    for f in figs:
        if f["nodes"] in expected:
            got = plan(f["kind"], nom, f["nodes"], f["gpus"]).choose([float(f["size_bytes"])])[0][0]
            picks.append({"scale": f"{f['nodes']}x{f['gpus']}", "expected": expected[f["nodes"]], "model": got,
                          "agrees": got == expected[f["nodes"]]})
    return {"id": entry["id"], "title": entry["title"], "source": entry["source"], "preset": nom.name,
            "nccl": nom.nccl_version, "nccl_stated": entry.get("nccl") is not None,
            "calibrated_nodes": smallest, "fits": {k: fit_summary(v) for k, v in fits.items()},
            "rows": rows, "picks": picks}


# --- S7: releases -----------------------------------------------------------------------------


def s7_system(release: str) -> System:
    return nominal_system("s7-a100-2x200g", "ampere", 8, "nvswitch", 300.0, 2, 200.0, source=S7_SOURCE,
                          nccl_version=release)


def run_releases(entry: dict, size_bytes: int = 1 << 30) -> dict:
    """The model's 2x8 all_reduce busbw and pick per published NCCL release, at 1 GiB (the
    issue's largest size; it does not say which size its numbers are)."""
    rows = []
    for release, value in entry["releases"].items():
        s = s7_system(str(release))
        p = plan("all_reduce", s, 2, 8)
        bus = float(p.busbw_GBps([float(size_bytes)])[0])
        rows.append({"release": str(release), "published_busbw_GBps": float(value), "predicted_busbw_GBps": bus,
                     "pick": "/".join(p.choose([float(size_bytes)])[0]), "error_pct": 100.0 * (bus / float(value) - 1.0)})
    expected = {int(k): v for k, v in (entry.get("expected_picks") or {}).items()}
    picks = [{"scale": "2x8", "expected": expected[2], "model": r["pick"].split("/")[0],
              "agrees": r["pick"].split("/")[0] == expected[2], "release": r["release"]}
             for r in rows] if 2 in expected else []
    return {"id": entry["id"], "title": entry["title"], "source": entry["source"], "size_bytes": size_bytes,
            "assumed": S7_SOURCE, "rows": rows, "picks": picks,
            "release_independent": len({round(r["predicted_busbw_GBps"], 6) for r in rows}) == 1}


def run_all(path: str = DATA_FILE) -> dict:
    systems = load_summaries(path)
    s8 = by_id(systems, "S8")
    return {"composition": run_composition(by_id(systems, "S2")),
            "scaling": [run_scaling(by_id(systems, i)) for i in ("S1", "S5")],
            "releases": run_releases(by_id(systems, "S7")),
            "not_predicted": [{"id": s8["id"], "source": s8["source"],
                               "why": "the hardware is in images only (GPU, NICs and their speeds not in the text): "
                                      "no system to describe"}]}


# --- report -----------------------------------------------------------------------------------


def _size(s: int) -> str:
    for unit, k in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if s >= k:
            return f"{s / k:g}{unit}"
    return str(s)


def _pub(r: dict) -> str:
    v = r["published"]
    unit = "us" if r["metric"] == "time_us" else "GB/s"
    return f"{v[0]:g}-{v[1]:g} {unit}" if isinstance(v, list) else f"{v:g} {unit}"


def _pred(r: dict) -> str:
    return f"{r['predicted_time_us']:.2f} us" if r["metric"] == "time_us" else f"{r['predicted_busbw_GBps']:.1f} GB/s"


def _fits(p, fits: dict) -> None:
    for name, f in fits.items():
        det = ", ".join(f"{k} {v['value']:.4g} +- {v['stderr']:.2g}" + (" (at line rate)" if v["at_line_rate"] else "")
                        for k, v in f["determined"].items()) or "nothing"
        p(f"  fit {name}: determined {det}; {len(f['nominal'])} constants nominal")


def _head(p, entry: dict, nccl: str) -> None:
    """An entry's heading after a blank line: its id and title, NCCL release and preset, source, and the fits."""
    p("")
    p(f"{entry['id']} {entry['title']} (NCCL {nccl}, preset {entry['preset']})")
    p(f"  source: {entry['source']}")
    _fits(p, entry["fits"])


def print_report(res: dict, file=sys.stdout) -> None:
    p = lambda *a: print(*a, file=file)
    p("Published summary figures (single numbers, not tables): signed busbw error, predicted / published - 1 (%)")
    c = res["composition"]
    _head(p, c, c["nccl"])
    p(f"  {'how':22} {'kind':11} {'scale':6} {'size':>5} {'published':>12} {'predicted':>12} {'error %':>8}  pick")
    for r in c["rows"]:
        p(f"  {r['how']:22} {r['kind']:11} {r['scale']:6} {_size(r['size_bytes']):>5} {_pub(r):>12} {_pred(r):>12} "
          f"{r['error_pct']:+8.1f}  {r['pick']}")
    for s in res["scaling"]:
        stated = "" if s["nccl_stated"] else " (not stated: the preset's release picks)"
        _head(p, s, f"{s['nccl']}{stated}")
        p(f"  {'how':34} {'scale':6} {'size':>5} {'published':>12} {'predicted':>12} {'error %':>8}  pick")
        for r in s["rows"]:
            p(f"  {r['how']:34} {r['scale']:6} {_size(r['size_bytes']):>5} {_pub(r):>12} {_pred(r):>12} "
              f"{r['error_pct']:+8.1f}  {r['pick']}")
        for k in s["picks"]:
            p(f"  pick at {k['scale']}: maintainers' note {k['expected']}, model {k['model']}: "
              f"{'agrees' if k['agrees'] else 'DISAGREES'}")
    r7 = res["releases"]
    p("")
    p(f"{r7['id']} {r7['title']}, all_reduce 2x8 at {_size(r7['size_bytes'])}")
    p(f"  source: {r7['source']}; assumed: {r7['assumed']}")
    for r in r7["rows"]:
        p(f"  NCCL {r['release']:8} published {r['published_busbw_GBps']:6.2f} GB/s  predicted "
          f"{r['predicted_busbw_GBps']:6.1f} GB/s  {r['error_pct']:+7.1f}%  {r['pick']}")
    for k in r7["picks"]:
        if not k["agrees"]:
            p(f"  pick at {k['scale']} (NCCL {k['release']}): maintainer's note {k['expected']}, model {k['model']}: DISAGREES")
    if r7["release_independent"]:
        p("  the model's price does not depend on the release here: it cannot represent the 8x drop from 2.11 on")
    for n in res["not_predicted"]:
        p("")
        p(f"{n['id']}: not predicted: {n['why']} ({n['source']})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write every figure's prediction to this file")
    args = ap.parse_args(argv)
    check_script_outputs(ap, {"--json": args.json})
    res = run_all()
    print_report(res)
    if args.json:
        atomic_write_text(args.json, json.dumps(res, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

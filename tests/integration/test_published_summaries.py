"""benchmarks/published_summaries.py on tests/data/published_summaries.yaml: the figures are the
published ones (each with its source), the composition takes each level from its own fit, every
prediction is finite, and every pick is what NCCL's tuner (commsim.collectives.nccl_tuner) gives.
No accuracy threshold: the figures' errors are findings, reported by the benchmark."""

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from commsim.calibration.physical_fit import INTRA_NAMES, LEVEL, NETWORK_NAMES
from commsim.collectives.nccl.scale import bus_factor
from commsim.collectives.nccl_tuner import plan
from commsim.network.system import PRESETS
from tests.conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
SUMMARIES_MD = ROOT / "tests" / "data" / "nccl-tests-multiscale" / "summaries.md"


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("published_summaries")


@pytest.fixture(scope="module")
def systems(bench):
    return bench.load_summaries()


@pytest.fixture(scope="module")
def result(bench):
    return bench.run_all()


def _section(text: str, ident: str) -> str:
    m = re.search(rf"^## {ident}\. .*?(?=^## |\Z)", text, re.S | re.M)
    assert m, ident
    return m.group(0)


def test_every_figure_is_a_published_number_with_its_source(systems):
    text = SUMMARIES_MD.read_text(encoding="utf-8")
    assert [s["id"] for s in systems] == ["S1", "S2", "S5", "S7", "S8"]
    for s in systems:
        section = _section(text, s["id"])
        assert s["source"] and s["source"].split(" ")[0].split("@")[0].replace("github ", "") in section
        for f in s["figures"]:
            assert f["quote"] and f["metric"] in ("busbw_GBps", "time_us")
            numbers = [f["value"]] if "value" in f else [f["low"], f["high"]]
            for v in numbers:  # the number as the source prints it, in that system's section
                assert re.search(rf"(?<![\d.]){re.escape(f'{v:g}')}(?![\d])", section), (s["id"], v)
            assert f["kind"] in ("all_reduce", "all_gather") and f["size_bytes"] >= 1024
        for release, value in (s.get("releases") or {}).items():
            assert f"v{release}-1: {value:g}" in section


def test_published_time_is_the_busbw_definition(bench):
    fig = {"kind": "all_reduce", "nodes": 2, "gpus": 8, "metric": "busbw_GBps", "value": 100.0, "size_bytes": 8 << 30}
    # nccl-tests: busbw = size / time x 2(n-1)/n, n = 16
    assert bench.published_time_us(fig) == pytest.approx((8 << 30) / 100e3 * 30 / 16, rel=1e-12)
    lat = dict(fig, metric="time_us", value=35.85, size_bytes=1024)
    assert bench.published_time_us(lat) == 35.85
    assert bench.figure_error_pct(lat, 35.85 / 2) == pytest.approx(100.0)  # twice as fast: busbw +100%


def test_a_range_counts_zero_inside_and_the_distance_to_its_nearer_end(bench):
    fig = {"kind": "all_reduce", "nodes": 8, "gpus": 8, "metric": "busbw_GBps", "low": 6.0, "high": 8.0,
           "size_bytes": 1 << 30}
    t_at = lambda busbw: (1 << 30) / (busbw * 1e3) * bus_factor("all_reduce", 64)
    assert bench.figure_error_pct(fig, t_at(7.0)) == 0.0
    assert bench.figure_error_pct(fig, t_at(10.0)) == pytest.approx(25.0)
    assert bench.figure_error_pct(fig, t_at(3.0)) == pytest.approx(-50.0)
    with pytest.raises(ValueError):
        bench.measurements([fig], "x")  # a range cannot calibrate


def test_new_presets_carry_their_line_rates_and_sources():
    s1, s2, s5 = PRESETS["a100-roce-8x100g"], PRESETS["azure-ndmv4"], PRESETS["p3dn"]
    assert (s1.nics_per_node, s1.nic_line_GBps, s1.intra_kind, s1.intra_line_GBps) == (8, 12.5, "nvswitch", 300.0)
    assert (s2.nics_per_node, s2.nic_line_GBps, s2.cpu_vendor, s2.gpu_arch) == (8, 25.0, "amd", "ampere")
    assert (s5.nics_per_node, s5.nic_line_GBps, s5.intra_kind, s5.gpu_arch) == (1, 12.5, "nvlink", "volta")
    for s, cited in ((s1, "issue 169"), (s2, "NDm A100 v4"), (s5, "p3dn.24xlarge")):
        assert s.sources["nic_bw_GBps"].startswith("nominal: ") and cited in s.sources["nic_bw_GBps"]


def _all_rows(result):
    yield from result["composition"]["rows"]
    for s in result["scaling"]:
        yield from s["rows"]


def test_every_prediction_is_finite(result):
    rows = list(_all_rows(result))
    # S2: 14 nominal + 6 composed + 6 joint; S1: 5 x (nominal, tree forced) + 4 x 2 fits; S5: 4 x 2 + 3 x 2
    assert len(rows) == 26 + 18 + 14
    for r in rows:
        assert math.isfinite(r["predicted_time_us"]) and r["predicted_time_us"] > 0
        assert math.isfinite(r["predicted_busbw_GBps"]) and math.isfinite(r["error_pct"])
    for r in result["releases"]["rows"]:
        assert math.isfinite(r["predicted_busbw_GBps"]) and r["predicted_busbw_GBps"] > 0


def test_nominal_picks_are_nccl_tuners(bench, systems, result):
    """Every nominal row's pick is what the tuner's own plan chooses for that preset, release,
    scale and size (recomputed here, not read from the benchmark)."""
    rows = [r for r in _all_rows(result) if r["how"] == "nominal"]
    ids = {"S2": result["composition"]["preset"], **{s["id"]: s["preset"] for s in result["scaling"]}}
    seen = 0
    for s in systems:
        if s["id"] not in ids:
            continue
        nominal = replace(PRESETS[s["preset"]], nccl_version=str(s["nccl"])) if s.get("nccl") else PRESETS[s["preset"]]
        for f in s["figures"]:
            want = "/".join(plan(f["kind"], nominal, f["nodes"], f["gpus"]).choose([float(f["size_bytes"])])[0])
            got = [r["pick"] for r in rows if (r["system"], r["kind"], r["scale"], r["size_bytes"]) ==
                   (s["id"], f["kind"], f"{f['nodes']}x{f['gpus']}", f["size_bytes"])]
            assert got and all(g == want for g in got), (s["id"], f)
            seen += 1
    assert seen == 14 + 5 + 4
    # a calibration never changes what runs: NCCL picks from the nominal description
    for r in _all_rows(result):
        if r["how"] != "nominal" and "forced" not in r["how"]:
            twin = [q for q in rows if (q["system"], q["kind"], q["scale"], q["size_bytes"]) ==
                    (r["system"], r["kind"], r["scale"], r["size_bytes"])]
            assert twin and twin[0]["pick"] == r["pick"]
    forced = [r for r in _all_rows(result) if "forced" in r["how"]]
    assert forced and all(r["pick"].startswith("tree/") for r in forced)


def test_maintainers_pick_checks_are_the_tuners(result):
    s1 = result["scaling"][0]
    assert s1["id"] == "S1" and [(k["scale"], k["expected"]) for k in s1["picks"]] == \
        [("2x8", "tree"), ("3x8", "ring"), ("4x8", "ring"), ("5x8", "ring"), ("6x8", "ring")]
    nominal = PRESETS["a100-roce-8x100g"]
    for k in s1["picks"]:
        nodes = int(k["scale"].split("x")[0])
        assert k["model"] == plan("all_reduce", nominal, nodes, 8).choose([float(8 << 30)])[0][0]
        assert k["agrees"] == (k["model"] == k["expected"])
    r7 = result["releases"]
    assert len(r7["picks"]) == 8 and all(k["expected"] == "tree" for k in r7["picks"])


def test_composition_takes_each_level_from_its_own_fit(result):
    c = result["composition"]
    intra, net = c["fits"]["intra 1x8"]["determined"], c["fits"]["network 2x1"]["determined"]
    # a 1-node fit never prices a network hop; a 2x1 fit never an NVLink hop
    assert intra and not set(intra) & set(NETWORK_NAMES)
    assert net and not set(net) & set(INTRA_NAMES)
    assert all(LEVEL[k] in ("intra", "any") for k in intra) and all(LEVEL[k] in ("network", "any") for k in net)
    for k, v in intra.items():
        if k in INTRA_NAMES:
            assert c["composed_constants"][k]["value"] == v["value"]
    for k, v in net.items():
        assert c["composed_constants"][k]["value"] == v["value"]
    targets = [(r["kind"], r["size_bytes"]) for r in c["rows"] if r["how"].startswith("composed")]
    assert sorted(targets) == sorted([(k, s) for k in ("all_reduce", "all_gather") for s in (1024, 1 << 30, 4 << 30)])
    assert all(r["scale"] == "2x8" for r in c["rows"] if r["how"] != "nominal")


def test_scaling_calibrates_at_the_smallest_scale_only(result):
    for s in result["scaling"]:
        assert s["calibrated_nodes"] == 2
        fitted = [r for r in s["rows"] if r["how"].startswith("fit at")]
        assert fitted and all(r["nodes"] > 2 for r in fitted)
        bw = s["fits"]["bandwidths only"]["determined"]
        assert set(bw) <= {"intra_bw_GBps", "nic_bw_GBps"}


def test_s8_is_reported_not_predicted(result):
    assert [n["id"] for n in result["not_predicted"]] == ["S8"]


def test_the_report_is_deterministic(bench, result):
    again = bench.run_all()
    assert json.dumps(again, sort_keys=True) == json.dumps(result, sort_keys=True)
    import io
    out = io.StringIO()
    bench.print_report(result, file=out)
    text = out.getvalue()
    assert "S2 Azure NDmv4" in text and "composed 1x8 + 2x1" in text and "S8: not predicted" in text

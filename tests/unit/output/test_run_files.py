"""run --trace: per-rank compute and comm threads, per-bucket spans, blame arrows (Perfetto's JSON)."""

import json

import numpy as np
import pytest

from commsim.analysis.report import late_ranks
from commsim.cli.main import run_cli
from commsim.output.run_files import chrome_trace
from commsim.scenario.spec import SlowRank, Stall
from commsim.sim.engine import simulate
from tests.conftest import make_scenario


def _events(text):
    doc = json.loads(text)
    assert set(doc) >= {"traceEvents", "displayTimeUnit"}
    for e in doc["traceEvents"]:  # what Perfetto's JSON importer needs of each event
        assert e["ph"] in ("X", "M", "s", "f") and isinstance(e["pid"], int)
        if e["ph"] != "M":
            assert isinstance(e["tid"], int) and np.isfinite(e["ts"])
        if e["ph"] == "X":
            assert e["dur"] > 0
    return doc["traceEvents"]


def _within(spans, pid, tid, ts):
    return any(e["pid"] == pid and e["tid"] == tid and e["ts"] <= ts <= e["ts"] + e["dur"] for e in spans)


@pytest.fixture(scope="module")
def stalled():
    sc = make_scenario(nodes=1, gpus_per_node=4, parameters=20_000_000, steps=3,
                       stragglers=[Stall((2,), 0.05, every=1)])
    return simulate(sc, collectives=True), simulate(sc.without_stragglers())


def test_every_rank_has_a_compute_and_a_comm_thread(stalled):
    result, _ = stalled
    ev = _events(chrome_trace(result))
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert names == {(r, t): ("compute", "comm")[t] for r in range(4) for t in (0, 1)}
    assert {e["args"]["name"] for e in ev if e["name"] == "process_name"} == {f"rank {r}" for r in range(4)}


def test_one_span_per_bucket_collective_on_each_ranks_comm_thread(stalled):
    result, _ = stalled
    ev = _events(chrome_trace(result))
    comm = [e for e in ev if e["ph"] == "X" and e["tid"] == 1]
    steps, nc = result.last_rank.shape
    assert len(comm) == steps * nc * 4
    for e in comm:
        s, k, r = e["args"]["step"], e["args"]["collective"], e["pid"]
        assert e["name"] == f"bucket {k} all-reduce" and e["args"]["kind"] == "all_reduce"
        assert e["args"]["bucket"] == k and e["args"]["bytes"] == int(result.bucket_sizes[k])
        assert e["ts"] == pytest.approx(result.coll_start[s, k, r] * 1e6)
        assert e["ts"] + e["dur"] == pytest.approx(result.coll_finish[s, k, r] * 1e6)
        assert e["args"]["issued_us"] == pytest.approx(result.coll_issue[s, k, r] * 1e6)
    for r in range(4):  # one stream: a rank's collectives run one after another
        mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in comm if e["pid"] == r)
        assert all(a[1] <= b[0] + 1e-6 for a, b in zip(mine, mine[1:]))


def test_arrows_run_from_the_late_issue_to_the_collectives_end(stalled):
    result, baseline = stalled
    late = late_ranks(result, baseline)
    assert np.all(late == 2)
    ev = _events(chrome_trace(result, late=late))
    spans = [e for e in ev if e["ph"] == "X"]
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert len(starts) == late.size and starts.keys() == ends.keys()
    for i, s in starts.items():
        f = ends[i]
        assert s["cat"] == f["cat"] == "blame" and s["name"] == f["name"] == "rank 2 late by 50 ms"
        assert s["pid"] == 2 and s["tid"] == 0 and _within(spans, 2, 0, s["ts"])  # on the late rank's compute
        assert f["pid"] != 2 and f["tid"] == 1 and f["bp"] == "e" and _within(spans, f["pid"], 1, f["ts"])
        assert f["ts"] > s["ts"]
    assert not [e for e in _events(chrome_trace(result)) if e["ph"] in "sf"]  # no late ranks given: no arrows


def test_without_recorded_collectives_there_are_no_comm_spans():
    result = simulate(make_scenario(nodes=1, gpus_per_node=2, steps=2))
    ev = _events(chrome_trace(result))
    assert not [e for e in ev if e["ph"] == "X" and e["tid"] == 1]
    assert {e["name"] for e in ev if e["ph"] == "X"} <= {"forward+backward", "wait for all-reduce", "optimizer"}


def test_trace_ranks_limit_the_tracks_and_arrows_need_both_ends_kept():
    sc = make_scenario(nodes=1, gpus_per_node=4, steps=2, stragglers=[SlowRank((3,), 1.5)])
    result = simulate(sc, ranks=np.arange(2), collectives=True)
    ev = _events(chrome_trace(result, late=late_ranks(result, simulate(sc.without_stragglers()))))
    assert {e["pid"] for e in ev} == {0, 1}  # rank 3, the late one, is not in the trace: no arrow


def test_run_cli_trace_has_per_bucket_spans_and_arrows(tmp_path):
    t = tmp_path / "t.json"
    assert run_cli(["run", "scenarios/32gpu_throttle.yaml", "-q", "--steps", "3", "--trace", str(t),
                    "--trace-ranks", "8"]) == 0
    ev = _events(t.read_text())
    comm = [e for e in ev if e.get("cat") == "collective"]
    assert comm and {e["pid"] for e in comm} == set(range(8)) and all(e["tid"] == 1 for e in comm)
    assert "bucket 0 all-reduce" in {e["name"] for e in comm}

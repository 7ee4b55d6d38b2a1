"""validate/trace_job: real torch.profiler traces recorded here with gloo, then blamed and imported."""

import pytest

pytest.importorskip("torch")

from commsim.traces import blame_traces, import_traces  # noqa: E402
from commsim.traces.flight_recorder import read_flight_recorder  # noqa: E402
from commsim.traces.files import read_bytes, sniff  # noqa: E402
from validate.trace_job import make_plan, measured_step_time, record  # noqa: E402


@pytest.fixture(scope="module")
def delayed(tmp_path_factory):
    out = tmp_path_factory.mktemp("delayed")
    return out, record(str(out), nprocs=2, steps=10, delay_s=0.1, delay_rank=1, timeout_s=120)


def test_each_rank_writes_a_trace_and_a_flight_recorder_dump(delayed):
    out, results = delayed
    assert [r["rank"] for r in results] == [0, 1]
    for r in results:
        assert r["trace"].endswith(f"rank{r['rank']}.trace.json.gz")
        assert len(r["step_ends"]) == 10
        # this build's gloo process group has a Flight Recorder: a real dump per rank
        p = r["flight_recorder"]
        t = read_flight_recorder(sniff(read_bytes(p), p)[1], p)
        assert t.rank == r["rank"] and any(c.kind == "all_reduce" for c in t.comms)


def test_blame_names_the_delayed_rank_and_the_delay(delayed):
    out, results = delayed
    report = blame_traces([r["trace"] for r in results]).report
    steps = report["per_step"]
    summary = [(st["step"], st["set_by"], st["rank"], st["lateness_s"]) for st in steps]
    # 2 ranks: significance needs 8 steps named (1/2^8 < 0.01 / 2)
    assert len(steps) >= 8, (report["notes"], summary)
    assert [c["rank"] for c in report["culprits"]] == [1], (report["verdict"], summary)
    named = [st["rank"] for st in steps if st["set_by"] == "rank"]
    assert named.count(1) >= 0.95 * len(steps), summary
    assert report["culprits"][0]["delay_estimate_s"] == pytest.approx(0.1, rel=0.10), summary


def test_import_reproduces_the_measured_step_time(delayed):
    out, results = delayed
    im = import_traces([r["trace"] for r in results])
    # the trace's step time agrees with the job's own clock ...
    assert im.inferred.measured_step_time == pytest.approx(measured_step_time(results), rel=0.03)
    # ... and the scenario, simulated, with the measurement
    assert abs(im.step_time_error) < 0.10
    assert [r for r, _ in im.inferred.slow] == [1]


def test_plan_refuses_what_it_cannot_do(tmp_path):
    with pytest.raises(ValueError, match="unknown trace job option"):
        make_plan(str(tmp_path), delay=1)
    with pytest.raises(ValueError, match="slow_factor must be >= 1"):
        make_plan(str(tmp_path), slow_factor=0.5)

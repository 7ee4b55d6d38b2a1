"""commsim import, end to end: synthetic jobs reproduced exactly, real gloo jobs within 10%."""

import gzip
import json
from pathlib import Path

import pytest
import yaml

from commsim.calibration import model_time
from commsim.scenario.loader import load_scenario
from commsim.scenario.spec import Jitter, SlowRank, Stall
from commsim.traces.errors import TraceError
from commsim.traces.importer import import_traces
from tests.unit.traces import synth

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"
ALPHA, BETA = 30e-6, 1e9


def write_job(tmp_path, n=4, steps=8, **kw):
    plan = synth.plan(n, steps, comm=lambda s: model_time(ALPHA, BETA, s, n), **kw)
    paths = []
    for r in range(n):
        p = tmp_path / f"rank{r}.trace.json.gz"
        p.write_bytes(gzip.compress(json.dumps(synth.kineto(r, n, plan[r])).encode()))
        paths.append(str(p))
    return paths, plan


@pytest.mark.parametrize("kw", [{}, {"slow": {3: 1.8}}, {"late": {1: 0.015}}])
def test_synthetic_job_is_reproduced_by_its_scenario(tmp_path, kw):
    """The synthetic job runs the simulator's own semantics, so the imported scenario,
    simulated, must give its step time back (to the microsecond stamps' rounding)."""
    paths, plan = write_job(tmp_path, sizes=(1_000_000, 500_000, 500_000, 500_000), **kw)  # commsim's layout
    im = import_traces(paths, name="syn", steps=20)
    assert im.step_time_error == pytest.approx(0.0, abs=1e-4)
    kinds = {type(s) for s in im.scenario.stragglers}
    assert (SlowRank in kinds) == ("slow" in kw or "late" in kw)


def test_the_written_scenario_loads_and_says_where_it_came_from(tmp_path):
    paths, _ = write_job(tmp_path, n=2)
    im = import_traces(paths, name="syn")
    out = tmp_path / "s.yaml"
    out.write_text(im.text)
    sc = load_scenario(out)
    assert sc.world_size == 2 and sc.name == "syn"
    header = [line for line in im.text.splitlines() if line.startswith("#")]
    assert any("rank 0: " + paths[0] in line for line in header)
    assert any("this scenario simulated" in line for line in header)
    assert yaml.safe_load(im.text)["compute"]["backward"] in ("20 ms", "19.9999 ms")  # autograd ops end 0.1 us early


def test_a_layout_commsim_cannot_express_costs_little(tmp_path):
    """DDP's buckets follow parameter boundaries; commsim's are first + equal caps + rest:
    the same count and total, so the step time moves little."""
    paths, _ = write_job(tmp_path, sizes=(1_000_000, 600_000, 600_000, 200_000))
    assert abs(import_traces(paths).step_time_error) < 0.02


def test_import_needs_profiler_traces_not_dumps(tmp_path):
    plan = synth.plan(2, 3)
    paths = []
    for r in range(2):
        p = tmp_path / f"fr_rank{r}.json"
        p.write_text(json.dumps(synth.flight_recorder(r, 2, plan[r])))
        paths.append(str(p))
    with pytest.raises(TraceError, match="a Flight Recorder dump has collectives only"):
        import_traces(paths)


def test_calibration_needs_two_sizes(tmp_path):
    paths, _ = write_job(tmp_path, n=2, sizes=(500_000, 500_000))
    with pytest.raises(TraceError, match="all have one size \\(500000 B\\)"):
        import_traces(paths, calibration_out=str(tmp_path / "c.yaml"))
    paths, _ = write_job(tmp_path, n=2, sizes=(800_000, 200_000))
    im = import_traces(paths, calibration_out=str(tmp_path / "c.yaml"), scenario_out=str(tmp_path / "s.yaml"))
    link = im.calibration.levels[0]
    assert link.level == "intra_node"
    assert link.alpha_s == pytest.approx(ALPHA, rel=1e-3) and link.beta_Bps == pytest.approx(BETA, rel=1e-3)
    assert "calibration: c.yaml" in im.text


# The scenario carries the job's own bucket layout (ddp.bucket_sizes, ddp.bucket_ready): DDP
# issues four of the healthy job's five buckets in the last 16% of the backward, which a uniform
# gradient rate put at 34..89% and simulated that job 5.7% short; with the measured ready points
# it comes out +1.4% (gloo's ring still leaves the two ranks up to 3 ms apart before their
# optimizers, where commsim's ranks leave an all-reduce together). The delayed job's step is its
# slow rank's: -1.2% (-1.0% with the uniform rate).
@pytest.mark.parametrize("name,slow,bound", [("healthy", False, 0.03), ("delay", True, 0.03)])
def test_real_gloo_jobs_are_reproduced(name, slow, bound):
    """The committed real traces (tests/data/traces/README.md): the imported scenario,
    simulated, gives the measured mean step time back (see the bounds above); the job's own
    clock agrees with the trace's measurement."""
    d = DATA / name
    im = import_traces(sorted(str(p) for p in d.glob("rank*.trace.json.gz")))
    assert abs(im.step_time_error) < bound
    job = json.loads((d / "job.json").read_text())
    assert im.inferred.measured_step_time == pytest.approx(job["measured_step_time_s"], rel=0.02)
    slow_ranks = [s.ranks for s in im.scenario.stragglers if isinstance(s, SlowRank)]
    assert slow_ranks == ([(1,)] if slow else [])
    assert not any(isinstance(s, Stall) for s in im.scenario.stragglers)
    assert any(isinstance(s, Jitter) for s in im.scenario.stragglers)


def test_an_uneven_bucket_layout_is_written_and_reproduced(tmp_path):
    """A job whose DDP issues its buckets late in the backward (as the real healthy fixture does):
    the scenario carries the sizes and ready points, and reproduces the step time; the uniform
    rate, which the layout replaces, would be far off."""
    sizes, ready = (4_000_000,) * 4, (0.8, 0.9, 0.95, 1.0)  # 4 ms each, issued in the last 20% of a 20 ms backward
    paths, _ = write_job(tmp_path, n=2, steps=10, sizes=sizes, ready=ready, backward=0.02)
    im = import_traces(paths, name="uneven", steps=20)
    assert im.scenario.ddp.bucket_sizes == tuple(float(x) for x in sizes)
    assert im.scenario.ddp.bucket_ready == pytest.approx(ready, abs=2e-4)
    assert im.step_time_error == pytest.approx(0.0, abs=1e-3)
    doc = yaml.safe_load(im.text)
    assert doc["ddp"]["bucket_sizes"] == list(sizes) and "bucket_cap" not in doc["ddp"]
    from dataclasses import replace

    from commsim.sim.engine import simulate

    uniform = replace(im.scenario, ddp=replace(im.scenario.ddp, bucket_ready=None))
    assert simulate(uniform).step_time.mean() / im.inferred.measured_step_time - 1 < -0.05


def test_ready_points_are_clipped_into_the_unit_interval_and_non_decreasing():
    import numpy as np

    from commsim.traces.infer import ready_points

    assert ready_points(np.array([-0.01, 0.3, 0.25, np.nan, 1.02])) == [0.0001, 0.3, 0.3, 1.0, 1.0]
    assert ready_points(np.array([0.123456, 0.5])) == [0.1235, 0.5]


def test_a_collective_cut_off_by_the_trace_end_does_not_make_the_dtypes_mixed(tmp_path):
    # rank 0's real trace cut to its first third of events: its last gloo span (cut inside)
    # records no dtype; import once refused the traces as "of mixed dtypes"
    data = Path(__file__).resolve().parents[2] / "data" / "traces" / "delay"
    doc = json.loads(gzip.open(data / "rank0.trace.json.gz").read())
    doc["traceEvents"] = doc["traceEvents"][: len(doc["traceEvents"]) // 3]
    cut = tmp_path / "rank0.json"
    cut.write_text(json.dumps(doc))
    im = import_traces([str(cut), str(data / "rank1.trace.json.gz")], name="cut", steps=5)
    assert im.scenario.model.grad_dtype == "fp32" and im.timeline.grad_dtype == "fp32"


def test_a_worker_span_under_an_unknown_name_is_named_by_file_and_warns_nothing(tmp_path):
    """Rank 0's gloo worker spans renamed (an unknown event name): its buckets keep only DDP's
    c10d op, without a dtype. The error names the traces (it said "(traces)"), and the step
    reconstruction prints no numpy "All-NaN slice" warning on the way."""
    import warnings

    paths = []
    for r in range(2):
        doc = json.loads(gzip.decompress((DATA / "healthy" / f"rank{r}.trace.json.gz").read_bytes()))
        if r == 0:
            for e in doc["traceEvents"]:
                if e.get("name") == "gloo:all_reduce":
                    e["name"] = "gloo:frobnicate"
        p = tmp_path / f"rank{r}.json"
        p.write_text(json.dumps(doc))
        paths.append(str(p))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TraceError, match="expected bucket gradients of one dtype") as err:
            import_traces(paths)
    assert str(err.value).startswith(f"{paths[0]}, {paths[1]}: ")


def test_traces_without_collective_execution_events_say_so_not_record_shapes(tmp_path):
    # a job's traces whose all-reduces are only c10d::allreduce_ ops (no gloo span paired with
    # them): the import said "no dtype recorded (profile with record_shapes=True)"
    paths = []
    for r in (0, 1):
        doc = json.loads(gzip.decompress((DATA / "healthy" / f"rank{r}.trace.json.gz").read_bytes()))
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("gloo:")]
        paths.append(tmp_path / f"rank{r}.trace.json")
        paths[-1].write_text(json.dumps(doc))
    with pytest.raises(TraceError) as exc:
        import_traces([str(p) for p in paths])
    message = exc.value.message
    assert "record_shapes" not in message
    assert message.startswith("expected the buckets' collective events (a record_param_comms op, a gloo:all_reduce "
                              "span or an NCCL kernel")
    assert message.endswith("got none: only their c10d:: ops (c10d::allreduce_), which record no dtype, size or duration")

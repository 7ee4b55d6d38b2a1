"""A validate --mode ddp report's scenario record edited by hand: every bad value is one
CalibrationError naming the file and the record's key path (not a traceback from the fit)."""

import copy
import json
from dataclasses import replace

import pytest

from commsim.analysis.ddp_fit import fit_record, run_from_report
from commsim.calibration import CalibrationError
from commsim.scenario import spec

MB = 2**20


def job(**ddp) -> spec.Scenario:
    return spec.Scenario(cluster=spec.Cluster(1, 2, spec.Link(0.25e9, 100e-6), spec.Link(0.25e9, 100e-6)),
                         model=spec.Model(6_000_000, "fp32"), compute=spec.Compute(0.02, 0.04, 0.005, 4),
                         name="cap25", steps=4, ddp=spec.DDP(bucket_cap=25 * MB, **ddp))


def report(sc=None):
    """The report as `validate --json` writes it (through JSON: tuples become lists)."""
    return json.loads(json.dumps({"mode": "ddp", "ddp_fit_input": fit_record(sc or job(), None, [0.2, 0.21])}))


def edited(path, value):
    r = copy.deepcopy(report())
    *head, last = path.split(".")
    node = r["ddp_fit_input"]["scenario"]
    for k in head:
        node = node[k]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return r


@pytest.mark.parametrize("path, value", [
    ("compute.forward", float("nan")),
    ("compute.forward", "40 ms"),           # a file's unit string, not the number a record holds
    ("cluster.intra_node.bandwidth", -1.0),
    ("cluster.intra_node.bandwidth", "1 GB/s"),
    ("cluster.nodes", 0),
    ("cluster.intra_kind", "bogus"),
    ("model.parameters", "6e6"),
    ("steps", 0),
    ("steps", "4"),
    ("ddp.bucket_cap", float("nan")),
    ("ddp.bucket_cap", "25 MB"),
    ("ddp.overlap", "yes"),
    ("ddp.bucket_sizes", [1e6, "x"]),
    ("ddp.costs.bucket_overhead", KeyError),  # a missing key is not the default
    ("ddp.comm_streams", KeyError),
    ("collective.algorithm", "bogus"),
    ("collective.model", "bogus"),
])
def test_a_bad_record_value_is_refused_at_its_key(path, value):
    with pytest.raises(CalibrationError) as err:
        run_from_report(edited(path, value), "r.json")
    text = str(err.value)
    assert text.startswith(f"r.json: ddp_fit_input.scenario.{path}"), text
    assert "\n" not in text


def test_comm_streams_with_what_it_does_not_model_is_refused_at_its_key():
    for sc in (replace(job(comm_streams=2), collective=spec.Collective(model="nccl-2.19")),
               job(comm_streams=2, sharding="zero2", gradient_accumulation=1)):
        with pytest.raises(CalibrationError) as err:
            run_from_report(report(sc), "r.json")
        assert str(err.value).startswith("r.json: ddp_fit_input.scenario.ddp.comm_streams: ")


@pytest.mark.parametrize("times", [[float("inf")] * 3, [True, True], [0.2, float("inf")]])
def test_step_times_must_be_finite_numbers(times):
    r = report()
    r["ddp_fit_input"]["step_times_s"] = times
    with pytest.raises(CalibrationError) as err:
        run_from_report(r, "r.json")
    assert str(err.value).startswith("r.json: ddp_fit_input.step_times_s: ")


def test_records_as_validate_writes_them_still_read():
    # the job's built layout beside the scenario's cap (validate --mode ddp feeds both), two streams
    for sc in (job(), job(comm_streams=2, comm_shared="all"),
               job(bucket_sizes=(8e6, 8e6, 8e6), bucket_ready=(0.3, 0.6, 1.0))):
        assert run_from_report(report(sc), "r.json").scenario == sc


@pytest.mark.parametrize("value", ["no", "false", "0", "", None, 0.0, 1.0, -1, float("nan"), [], {}])
def test_stragglers_must_be_a_count_or_a_boolean(value):
    # read by truth value, "no" was a run with stragglers and 0.0 one without
    r = report()
    r["ddp_fit_input"]["stragglers"] = value
    with pytest.raises(CalibrationError) as err:
        run_from_report(r, "r.json")
    text = str(err.value)
    assert text.startswith("r.json: ddp_fit_input.stragglers: expected the run's straggler count"), text
    assert "\n" not in text


def test_a_missing_straggler_count_is_refused():
    r = report()
    del r["ddp_fit_input"]["stragglers"]
    with pytest.raises(CalibrationError) as err:
        run_from_report(r, "r.json")
    assert str(err.value).startswith("r.json: ddp_fit_input.stragglers: missing")


@pytest.mark.parametrize("value, had", [(0, False), (False, False), (2, True), (True, True)])
def test_a_straggler_count_or_boolean_reads_as_it_says(value, had):
    r = report()
    r["ddp_fit_input"]["stragglers"] = value
    if had:
        with pytest.raises(CalibrationError, match="the run had stragglers"):
            run_from_report(r, "r.json")
    else:
        assert run_from_report(r, "r.json").step_time_s == pytest.approx(0.205)


@pytest.mark.parametrize("path, value, key, text", [
    ("ddp.costs", None, "ddp.costs", "expected a mapping (as fit_record writes it), got None"),
    ("ddp", [], "ddp", "expected a mapping (as fit_record writes it), got []"),
    ("cluster.intra_node", None, "cluster.intra_node", "expected a mapping"),
    ("ddp.costs.extra", 1, "ddp.costs.extra", "unknown key; expected one of bucket_overhead, "),
    ("cluster.intra_node.extra", 1, "cluster.intra_node.extra", "unknown key; expected one of bandwidth, latency"),
    ("cluster", KeyError, "cluster", "missing (fit_record writes every field of the scenario)"),
    ("cluster.intra_node.latency", KeyError, "cluster.intra_node.latency", "missing"),
])
def test_a_record_of_the_wrong_shape_is_refused_at_its_key(path, value, key, text):
    # these were "not a scenario record (TypeError: DDPCosts.__init__() got an unexpected ...)"
    # at ddp_fit_input.scenario, naming neither the key nor what it should hold
    with pytest.raises(CalibrationError) as err:
        run_from_report(edited(path, value), "r.json")
    assert str(err.value).startswith(f"r.json: ddp_fit_input.scenario.{key}: {text}"), str(err.value)


def test_a_scenario_that_is_not_a_mapping_or_is_missing_is_refused_at_its_key():
    for value, text in (("x", "expected a mapping (as fit_record writes it), got 'x'"), (KeyError, "missing")):
        r = report()
        if value is KeyError:
            del r["ddp_fit_input"]["scenario"]
        else:
            r["ddp_fit_input"]["scenario"] = value
        with pytest.raises(CalibrationError) as err:
            run_from_report(r, "r.json")
        assert str(err.value).startswith(f"r.json: ddp_fit_input.scenario: {text}"), str(err.value)


@pytest.mark.parametrize("value, text", [
    ("x", "expected a mapping, got 'x'"),
    ([], "expected a mapping, got []"),
    ({"a": 1}, "unknown key 'a'"),
])
def test_a_bad_calibration_record_is_refused_under_its_key(value, text):
    # the calibration reader names its own key paths: under the record's, not the bare file's
    r = report()
    r["ddp_fit_input"]["calibration"] = value
    with pytest.raises(CalibrationError) as err:
        run_from_report(r, "r.json")
    assert str(err.value).startswith(f"r.json: ddp_fit_input.calibration: {text}"), str(err.value)


@pytest.mark.parametrize("times", [[1e308, 1.7e308], [1e-300, 2e-300], [float("nan")], [0.2, 1e5]])
def test_step_times_outside_a_microsecond_to_a_day_are_refused(times):
    # 1e308 s overflowed the fit's grid (a ValueError traceback from DDPCosts), 1e-300 s its
    # weights (a TypeError traceback from the start search)
    r = report()
    r["ddp_fit_input"]["step_times_s"] = times
    with pytest.raises(CalibrationError) as err:
        run_from_report(r, "r.json")
    assert str(err.value).startswith("r.json: ddp_fit_input.step_times_s: expected a list of step times in seconds, "
                                     "each from 1e-06 to 86400")


def test_a_ddp_cost_out_of_range_is_refused_at_its_record_key():
    # the schema reads the costs as a file's ddp: keys; the record keeps them under ddp.costs
    # (this was the spec's ValueError, "not a scenario record", at ddp_fit_input.scenario)
    with pytest.raises(CalibrationError) as err:
        run_from_report(edited("ddp.costs.overlap_slowdown", 1e300), "r.json")
    assert str(err.value).startswith("r.json: ddp_fit_input.scenario.ddp.costs.overlap_slowdown: expected a fraction")


def test_a_record_the_engine_cannot_price_is_one_error_naming_the_run(recwarn):
    # 1e-300 B/s of memory bandwidth made every simulated step NaN (the fit's start search found
    # no finite cost and failed with a TypeError): the record's reader now refuses it at its key,
    # as a scenario file's, and a run built in memory still gets the fit's own one-line refusal
    from commsim.analysis.ddp_fit import DDPRun, fit_ddp_costs

    with pytest.raises(CalibrationError) as err:
        run_from_report(edited("ddp.costs.memory_bandwidth", 1e-300), "r25.json")
    assert str(err.value) == ("r25.json: ddp_fit_input.scenario.ddp.costs.memory_bandwidth: expected a rate of at "
                              "least 1 B/s, got 1e-300")
    good = report(replace(job(), ddp=replace(job().ddp, bucket_cap=1 * MB)))
    bad = replace(job(), ddp=replace(job().ddp, costs=replace(job().ddp.costs, memory_bandwidth=1e-300)))
    runs = [run_from_report(good, "r1.json"), DDPRun(bad, 0.2, 0.005, "r25.json")]
    with pytest.raises(CalibrationError) as err:
        fit_ddp_costs(runs)
    assert str(err.value).startswith("r25.json: ddp_fit_input.scenario: the simulated step time of this run's record "
                                     "is nan s")
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("value", [[{"kind": "slow_rank", "ranks": [0], "factor": 1.5}], [{"kind": "jitter", "cv": 0.05}],
                                   None, "x"])
def test_a_straggler_list_in_the_scenario_record_is_refused(value):
    # a slow rank here was accepted and dropped unread: the fit simulated the run without it
    r = edited("stragglers", value)
    with pytest.raises(CalibrationError) as err:
        run_from_report(r, "r.json")
    assert str(err.value).startswith("r.json: ddp_fit_input.scenario.stragglers: expected [] (fit_record keeps"), str(err.value)

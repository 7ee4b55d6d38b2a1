"""Tests for commsim.scenario.schema: the top level and the checks that span sections."""

from __future__ import annotations

import copy

import pytest

from commsim.errors import ScenarioError
from commsim.scenario import schema, spec
from commsim.scenario.schema import MAX_BUCKETS, MAX_RANK_STEPS, parse_scenario

DOC = {
    "cluster": {"nodes": 2, "gpus_per_node": 4, "intra_node": {"bandwidth": "300 GB/s"},
                "inter_node": {"bandwidth": "100 Gbps"}},
    "model": {"parameters": 1000},
    "compute": {"forward": "10 ms", "backward": "20 ms"},
}


def doc(**top):
    d = copy.deepcopy(DOC)
    d.update(top)
    return d


def error(d, source="s.yaml") -> ScenarioError:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(d, source)
    assert "\n" not in str(err.value)
    return err.value


def test_top_level_defaults_and_name():
    sc = parse_scenario(doc(), "runs/big_job.yaml")
    assert (sc.name, sc.steps, sc.seed, sc.description, sc.stragglers) == ("big_job", 100, 0, "", ())
    assert parse_scenario(doc(), "--set").name == spec.Scenario.name
    assert parse_scenario(doc(name="x", steps="1e3", seed=0), "s.yaml").steps == 1000


def test_required_sections():
    d = doc()
    del d["compute"]
    assert str(error(d)) == (
        "s.yaml: compute: required key is missing, expected a mapping with forward and backward (times per micro-batch)"
    )


def test_bucket_limit():
    ok = doc(model={"parameters": MAX_BUCKETS}, ddp={"bucket_cap": 4})
    assert parse_scenario(ok, "s.yaml").ddp.bucket_cap == 4
    err = error(doc(model={"parameters": MAX_BUCKETS}, ddp={"bucket_cap": 3}))
    assert err.path == "ddp.bucket_cap" and "got 4e+06 B / 3 B = 1.33e+06 buckets" in str(err)


def test_rank_steps_limit():
    assert parse_scenario(doc(steps=MAX_RANK_STEPS // 8), "s.yaml").steps == MAX_RANK_STEPS // 8
    err = error(doc(steps=MAX_RANK_STEPS // 8 + 1))
    assert str(err) == (
        f"s.yaml: steps: expected steps x world size up to {MAX_RANK_STEPS} (the engine keeps per-rank, per-step "
        f"records), got {MAX_RANK_STEPS // 8 + 1} x 8"
    )


def test_public_names_are_re_exported():
    for name in schema.__all__:
        assert hasattr(schema, name), name


def test_ddp_costs_default_on_and_the_preset_names_the_memory_bandwidth():
    assert parse_scenario(doc(), "s.yaml").ddp.costs == spec.DDPCosts() and spec.DDPCosts().on
    h100 = parse_scenario(doc(cluster={"preset": "dgx-h100", "nodes": 2}), "s.yaml")
    assert h100.ddp.costs.memory_bandwidth == 3.35e12
    keyed = parse_scenario(doc(cluster={"preset": "dgx-h100", "nodes": 2}, ddp={"memory_bandwidth": "2 TB/s"}), "s.yaml")
    assert keyed.ddp.costs.memory_bandwidth == 2e12
    off = parse_scenario(doc(ddp={"bucket_overhead": 0, "overlap_slowdown": 0, "gradient_as_bucket_view": True}), "s.yaml")
    assert not off.ddp.costs.on
    assert str(error(doc(ddp={"bucket_overhead": "1 GB"}))).startswith("s.yaml: ddp.bucket_overhead: ")


def test_comm_streams_reaches_the_scenario():
    assert parse_scenario(doc(), "s.yaml").ddp.comm_streams == 1
    assert parse_scenario(doc(ddp={"comm_streams": 2}), "s.yaml").ddp.comm_streams == 2


@pytest.mark.parametrize("extra, says", [
    ({"collective": {"model": "nccl-2.19"}}, "under collective.model nccl-2.19"),
    ({"stragglers": [{"kind": "jitter", "cv": 0.1},
                     {"kind": "throttle", "ranks": [1], "heat_up": "1 s", "throttled_time": "1 s", "clock_fraction": 0.5}]},
     "with a throttle straggler (stragglers[1]"),
    ({"mitigation": {}}, "with a mitigation section"),
    ({"cluster": {"nodes": schema.MAX_STREAMS_WORLD_SIZE // 4 + 1, "gpus_per_node": 4, "intra_node": {"bandwidth": "300 GB/s"},
                  "inter_node": {"bandwidth": "100 Gbps"}}}, f"above {schema.MAX_STREAMS_WORLD_SIZE} ranks"),
])
def test_comm_streams_refuses_what_it_does_not_model(extra, says):
    err = error(doc(ddp={"comm_streams": 2}, **extra))
    assert err.path == "ddp.comm_streams" and str(err).startswith("s.yaml: ddp.comm_streams: expected comm_streams 1")
    assert says in str(err) and "got comm_streams 2" in str(err)
    parse_scenario(doc(ddp={"comm_streams": 1}, **extra), "s.yaml")  # one stream: all of it as before

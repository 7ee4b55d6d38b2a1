"""The explicit bucket layout keys ddp.bucket_sizes and ddp.bucket_ready: parsing and one-line errors."""

from __future__ import annotations

import copy

import pytest

from commsim.errors import ScenarioError
from commsim.scenario.schema import parse_scenario

# 1000 fp32 parameters: 4000 gradient bytes
DOC = {
    "cluster": {"nodes": 1, "gpus_per_node": 2, "intra_node": {"bandwidth": "300 GB/s"},
                "inter_node": {"bandwidth": "100 Gbps"}},
    "model": {"parameters": 1000},
    "compute": {"forward": "10 ms", "backward": "20 ms"},
}


def doc(**ddp):
    d = copy.deepcopy(DOC)
    d["ddp"] = ddp
    return d


def error(d) -> str:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(d, "s.yaml")
    text = str(err.value)
    assert "\n" not in text and text.startswith("s.yaml: ")
    return text


def test_layout_is_read_in_all_reduce_order():
    sc = parse_scenario(doc(bucket_sizes=[1000, "2 kB", 1000], bucket_ready=[0.1, 0.9, 1]), "s.yaml")
    assert sc.ddp.bucket_sizes == (1000.0, 2000.0, 1000.0)
    assert sc.ddp.bucket_ready == (0.1, 0.9, 1.0)
    plain = parse_scenario(doc(), "s.yaml")
    assert plain.ddp.bucket_sizes is None and plain.ddp.bucket_ready is None
    equal = parse_scenario(doc(bucket_sizes=[2000, 2000], bucket_ready=[1, 1]), "s.yaml")  # ready together
    assert equal.ddp.bucket_ready == (1.0, 1.0)


def test_sizes_may_miss_the_gradient_bytes_by_rounding_only():
    assert parse_scenario(doc(bucket_sizes=[1000, 3002]), "s.yaml").ddp.bucket_sizes == (1000.0, 3002.0)
    msg = error(doc(bucket_sizes=[1000, 2000]))
    assert msg == ("s.yaml: ddp.bucket_sizes: expected bucket sizes summing to the model's gradient bytes, 4000 B "
                   "(model.parameters x fp32, within 0.1%), got 3000 B")


@pytest.mark.parametrize("ddp, where, says", [
    (dict(bucket_sizes=[]), "ddp.bucket_sizes", "expected a non-empty list"),
    (dict(bucket_sizes="4 kB"), "ddp.bucket_sizes", "expected a non-empty list"),
    (dict(bucket_sizes=[4000, "x"]), "ddp.bucket_sizes[1]", "expected"),
    (dict(bucket_sizes=[4000], bucket_cap="25 MiB"), "ddp.bucket_cap", "expected either ddp.bucket_sizes or"),
    (dict(bucket_sizes=[4000], first_bucket="1 MiB"), "ddp.first_bucket", "got both"),
    (dict(bucket_ready=[1.0]), "ddp.bucket_ready", "expected ddp.bucket_sizes too"),
    (dict(bucket_sizes=[2000, 2000], bucket_ready=[1.0]), "ddp.bucket_ready", "expected a list of 2 fractions"),
    (dict(bucket_sizes=[2000, 2000], bucket_ready=[0, 1]), "ddp.bucket_ready[0]", "in (0, 1]"),
    (dict(bucket_sizes=[2000, 2000], bucket_ready=[0.5, 1.5]), "ddp.bucket_ready[1]", "in (0, 1]"),
    (dict(bucket_sizes=[2000, 2000], bucket_ready=[0.8, 0.5]), "ddp.bucket_ready[1]",
     "expected ready points non-decreasing (bucket 1 cannot be ready before bucket 0), got 0.5 after 0.8"),
])
def test_bad_layouts_are_one_line_errors_at_the_key(ddp, where, says):
    msg = error(doc(**ddp))
    assert msg.startswith(f"s.yaml: {where}: ") and says in msg


def test_every_stage_reads_the_buckets_of_the_explicit_layout():
    from commsim.output.progress import step_progress  # noqa: F401 - reads gradient_buckets too
    from commsim.scenario.budget import estimate

    explicit = parse_scenario(doc(bucket_sizes=[1000, 1000, 1000, 1000]), "s.yaml")
    plain = parse_scenario(doc(), "s.yaml")
    assert explicit.gradient_buckets() == (1000.0,) * 4
    assert plain.gradient_buckets() == (4000.0,)  # 4000 B fit in DDP's first 1 MiB bucket
    # the budget counts the explicit layout's four collectives per step, not DDP's one
    assert estimate(explicit).collectives == 4 * estimate(plain).collectives


def test_tuning_the_bucket_cap_replaces_an_explicit_layout():
    from commsim.mitigations.buckets import with_bucket_cap

    explicit = parse_scenario(doc(bucket_sizes=[1000, 3000], bucket_ready=[0.5, 1]), "s.yaml")
    tuned = with_bucket_cap(explicit, 2000)
    assert tuned.ddp.bucket_sizes is None and tuned.ddp.bucket_ready is None
    assert tuned.gradient_buckets() == parse_scenario(doc(bucket_cap=2000), "s.yaml").gradient_buckets() != (1000.0, 3000.0)

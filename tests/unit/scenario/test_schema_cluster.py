"""Tests for commsim.scenario.schema_cluster: the cluster section."""

from __future__ import annotations

import pytest

from commsim.errors import ScenarioError
from commsim.scenario import spec
from commsim.scenario.schema_cluster import (
    DEFAULT_INTER_NODE_LATENCY,
    DEFAULT_INTRA_NODE_LATENCY,
    MAX_WORLD_SIZE,
    read_cluster,
)

SRC = "c.yaml"
CLUSTER = {"nodes": 2, "gpus_per_node": 4, "intra_node": {"bandwidth": "300 GB/s"}, "inter_node": {"bandwidth": "100 Gbps"}}


def error(value) -> str:
    with pytest.raises(ScenarioError) as err:
        read_cluster(SRC, value)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_defaults():
    c = read_cluster(SRC, CLUSTER)
    assert c == spec.Cluster(2, 4, spec.Link(300e9, DEFAULT_INTRA_NODE_LATENCY), spec.Link(12.5e9, DEFAULT_INTER_NODE_LATENCY))
    assert (c.intra_kind, c.nics_per_node) == ("nvswitch", None)


def test_explicit_latency_and_kind():
    c = read_cluster(SRC, dict(CLUSTER, intra_node={"bandwidth": 1e9, "latency": 0}, intra_kind="pcie", nics_per_node=2))
    assert c.intra_node.latency == 0.0 and c.intra_kind == "pcie" and c.nics_per_node == 2


def test_world_size_limit():
    assert read_cluster(SRC, dict(CLUSTER, nodes=MAX_WORLD_SIZE // 4)).world_size == MAX_WORLD_SIZE
    assert error(dict(CLUSTER, nodes=MAX_WORLD_SIZE // 4 + 1)) == (
        f"c.yaml: cluster: expected a world size (nodes x gpus_per_node) up to {MAX_WORLD_SIZE}, "
        f"got {MAX_WORLD_SIZE // 4 + 1} x 4 = {MAX_WORLD_SIZE + 4}"
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"nodes": 0}, "c.yaml: cluster.nodes: expected a positive count (> 0), got 0"),
        ({"gpus_per_node": "\uff18"}, "c.yaml: cluster.gpus_per_node: expected a whole number like 1000 or '1e9', got "
                                      "'\uff18' (digits must be ASCII 0-9)"),
        ({"intra_node": "fast"}, "c.yaml: cluster.intra_node: expected a mapping with bandwidth (a rate like '100 Gbps' "
                                 "or '12.5 GB/s') and latency, got 'fast'"),
        ({"inter_node": {}}, "c.yaml: cluster.inter_node.bandwidth: required key is missing, expected a rate like"),
        ({"inter_node": {"bandwidth": "1 Gbps", "latency": -1}}, "c.yaml: cluster.inter_node.latency: expected a "
                                                                 "non-negative time (>= 0), got -1"),
        ({"oversubscription": 0.5}, "c.yaml: cluster.oversubscription: expected a factor >= 1"),
        ({"nic_bandwidth": "fast"}, "c.yaml: cluster.nic_bandwidth: expected a rate like"),
        ({"intra_kind": "nvlnk"}, "c.yaml: cluster.intra_kind: expected one of nvswitch, nvlink, pcie, pcie-nop2p, "
                                  "got 'nvlnk' (did you mean 'nvlink'?)"),
    ],
)
def test_bad_values(change, message):
    assert error(dict(CLUSTER, **change)).startswith(message)


def test_missing_keys_and_wrong_type():
    assert error({"nodes": 1}).startswith("c.yaml: cluster.gpus_per_node: required key is missing, expected a whole number like 8")
    assert error([1]).startswith("c.yaml: cluster: expected a mapping with keys nodes, gpus_per_node,")


def test_a_preset_fills_in_links():
    c = read_cluster(SRC, {"preset": "dgx-h100", "nodes": 2})
    assert c.world_size == 16 and c.intra_node.bandwidth > c.inter_node.bandwidth


NICS = {"nodes": 2, "gpus_per_node": 4, "intra_node": {"bandwidth": "300 GB/s"}, "inter_node": {"latency": "5 us"},
        "nics_per_node": 2, "nic_bandwidth": "100 Gbps"}


def test_the_oversubscription_is_bounded():
    assert read_cluster(SRC, {**NICS, "oversubscription": 1000}).inter_node.bandwidth == 25e9 / 1000
    assert error({**NICS, "oversubscription": 1e300}) == (
        "c.yaml: cluster.oversubscription: expected a factor in [1, 1000] (1 = non-blocking, 2 = 2:1), got 1e+300")


def test_a_derived_network_out_of_range_is_refused_at_the_nic_keys():
    # refused before at cluster.inter_node.bandwidth, a key the file does not write
    assert error({**NICS, "nic_bandwidth": 1, "oversubscription": 4}) == (
        "c.yaml: cluster.nic_bandwidth: expected nics_per_node x nic_bandwidth / oversubscription (the "
        "inter_node.bandwidth it derives) of at least 1 B/s and finite, got 2 x 1 / 4 = 0.5 B/s")
    assert "= inf B/s" in error({**NICS, "nics_per_node": 2**62, "nic_bandwidth": 1e300})
    # a bandwidth written beside the NIC keys is the link's, read (and checked) as written
    written = {**NICS, "inter_node": {"bandwidth": "10 GB/s"}, "nic_bandwidth": 1, "oversubscription": 4}
    assert read_cluster(SRC, written).inter_node.bandwidth == 10e9


def test_nics_per_node_is_bounded_by_nccls_channels():
    """More NICs than NCCL has channels split the node's bandwidth over NICs no channel reaches:
    the physical model priced a 4 MB all-reduce at 2e15 s with 2**63 - 1 of them."""
    assert read_cluster(SRC, {**NICS, "nics_per_node": 64}).nics_per_node == 64
    assert error({**NICS, "nics_per_node": 65}) == (
        "c.yaml: cluster.nics_per_node: expected at most 64 NICs per node (NCCL's most channels, one NIC "
        "each), got 65")

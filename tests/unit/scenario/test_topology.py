"""Topology presets and the merge of a scenario's cluster mapping over a preset."""

from pathlib import Path

import pytest

import numpy as np

from commsim.collectives import uniform_time
from commsim.errors import InputError
from commsim.scenario import topology
from commsim.network.fabric import GPU_ARCHS
from commsim.scenario.spec import Cluster, Link
from commsim.scenario.topology import (PRESETS, TopologyError, cluster_fabric, expand_cluster, resolve_preset,
                                       ring_crossings, ring_hop_links)


def test_every_preset_has_cluster_keys_and_a_source():
    for name, t in PRESETS.items():
        keys = resolve_preset(name)
        assert set(keys) == {"gpus_per_node", "intra_node", "inter_node", "intra_kind", "nics_per_node",
                             "nic_bandwidth", "oversubscription", "gpu_arch"}
        assert t.source and t.intra_kind in topology.INTRA_KINDS and t.gpu_arch in GPU_ARCHS
        assert keys["inter_node"]["bandwidth"] == t.nics_per_node * t.nic_bandwidth / t.oversubscription


def test_dgx_h100_numbers():
    k = resolve_preset("dgx-h100")
    assert k["gpus_per_node"] == 8
    assert k["intra_node"] == {"bandwidth": 450e9, "latency": 3.4e-6}
    assert k["inter_node"] == {"bandwidth": 8 * 50e9, "latency": 14e-6}  # 8 x 400 Gb/s
    assert resolve_preset("dgx-a100")["inter_node"]["bandwidth"] == 8 * 25e9  # 8 x 200 Gb/s HDR


def test_unknown_preset_names_the_choices():
    with pytest.raises(TopologyError, match=r"cluster.preset: expected one of dgx-a100, .* got 'dgx-h200'"):
        resolve_preset("dgx-h200")
    with pytest.raises(TopologyError, match=r"^scen.yaml: cluster.preset: expected one of"):
        expand_cluster({"preset": "nope", "nodes": 2}, source="scen.yaml")


def test_expand_cluster_user_keys_win():
    c = expand_cluster({"preset": "dgx-h100", "nodes": 32, "inter_node": {"latency": 5e-6}})
    assert c["nodes"] == 32 and c["gpus_per_node"] == 8
    assert c["inter_node"] == {"bandwidth": 400e9, "latency": 5e-6}
    assert "preset" not in c


def test_expand_cluster_rederives_node_bandwidth():
    c = expand_cluster({"preset": "dgx-h100", "nodes": 4, "nics_per_node": 4, "oversubscription": 2})
    assert c["inter_node"]["bandwidth"] == 4 * 50e9 / 2
    c = expand_cluster({"preset": "dgx-h100", "nodes": 4, "nic_bandwidth": "200 Gbps"})
    assert c["inter_node"]["bandwidth"] == 8 * 25e9
    with pytest.raises(TopologyError, match=r"cluster.oversubscription: expected a factor >= 1"):
        expand_cluster({"preset": "dgx-h100", "nodes": 4, "oversubscription": 0.5})
    with pytest.raises(TopologyError, match=r"cluster.nic_bandwidth"):
        expand_cluster({"preset": "dgx-h100", "nodes": 4, "nic_bandwidth": "fast"})


def test_expand_without_preset_is_unchanged():
    raw = {"nodes": 2, "gpus_per_node": 4, "intra_node": {"bandwidth": "100 GB/s", "latency": "2 us"}}
    assert expand_cluster(raw) == raw and expand_cluster(raw) is not raw


def test_design_example_eight_workers_on_ethernet():
    # docs/collectives.md: 1e9 fp32 parameters (4 GB), 8 workers: ring moves 7 GB per worker -> 2.24 s at 25 Gb/s,
    # 0.56 s at 100 Gb/s (plus 14 network latencies of 14 us).
    S = 4e9
    for preset, seconds in (("ethernet-25g", 2.24), ("ethernet-100g", 0.56)):
        f = topology.fabric(preset, nodes=8)
        assert uniform_time("ring", f, S) == pytest.approx(seconds + 14 * 14e-6, rel=1e-9)


def test_errors_are_scenario_errors():
    from commsim.errors import ScenarioError

    with pytest.raises(ScenarioError):
        expand_cluster([1, 2])


def test_scenario_file_matches_the_dgx_h100_preset():
    from commsim.scenario.loader import load_scenario

    sc = load_scenario(Path(__file__).resolve().parents[3] / "scenarios" / "dgx_h100_scaling.yaml")
    k = resolve_preset("dgx-h100")
    assert sc.cluster.gpus_per_node == k["gpus_per_node"]
    assert (sc.cluster.intra_node.bandwidth, sc.cluster.intra_node.latency) == (k["intra_node"]["bandwidth"], k["intra_node"]["latency"])
    assert (sc.cluster.inter_node.bandwidth, sc.cluster.inter_node.latency) == (k["inter_node"]["bandwidth"], k["inter_node"]["latency"])


def test_oversubscription_slows_the_network_level():
    fast = topology.fabric("dgx-h100", 16)
    slow = expand_cluster({"preset": "dgx-h100", "nodes": 16, "oversubscription": 2})
    assert slow["inter_node"]["bandwidth"] == fast.inter_bandwidth / 2


def test_nic_keys_derive_the_network_without_a_preset_and_bad_inter_node_is_one_line():
    from commsim.errors import ScenarioError
    from commsim.scenario.loader import parse_scenario

    doc = {"cluster": {"nodes": 2, "gpus_per_node": 8, "intra_node": {"bandwidth": "450 GB/s"},
                       "nics_per_node": 8, "nic_bandwidth": "400 Gbps", "oversubscription": 2},
           "model": {"parameters": 1000}, "compute": {"forward": 0.1, "backward": 0.2}}
    assert parse_scenario(doc, "t.yaml").cluster.inter_node.bandwidth == pytest.approx(8 * 50e9 / 2)
    bad = {**doc, "cluster": {"preset": "dgx-h100", "nodes": 2, "inter_node": 5, "nics_per_node": 4}}
    with pytest.raises(ScenarioError, match="cluster.inter_node"):
        parse_scenario(bad, "t.yaml")


def test_ring_hop_links_two_levels():
    c = Cluster(3, 4, Link(300e9, 1e-6), Link(12.5e9, 5e-6))
    alpha, bw = ring_hop_links(c)
    crossing = [0, 4, 8]  # hops into each node's first rank (rank 0 receives from rank 11)
    assert [i for i in range(12) if bw[i] == 12.5e9] == crossing
    assert [i for i in range(12) if alpha[i] == 5e-6] == crossing
    assert np.flatnonzero(ring_crossings(c)).tolist() == crossing
    one_node = Cluster(1, 4, Link(300e9, 1e-6), Link(12.5e9, 5e-6))
    assert np.all(ring_hop_links(one_node)[1] == 300e9) and not ring_crossings(one_node).any()


def test_cluster_fabric_carries_every_cluster_key():
    c = Cluster(3, 4, Link(300e9, 1e-6), Link(12.5e9, 5e-6), intra_kind="pcie", nics_per_node=2)
    f = cluster_fabric(c)
    assert (f.nodes, f.gpus_per_node, f.intra_bandwidth, f.intra_latency, f.inter_bandwidth, f.inter_latency,
            f.intra_kind, f.nics_per_node, f.pricing) == (3, 4, 300e9, 1e-6, 12.5e9, 5e-6, "pcie", 2, None)
    assert topology.fabric("dgx-h100", 2) == cluster_fabric(Cluster(2, 8, Link(450e9, 3.4e-6), Link(400e9, 14e-6),
                                                                    nics_per_node=8))


def test_topology_errors_are_input_errors_built_through_their_init():
    with pytest.raises(TopologyError) as err:
        resolve_preset("nope", "f.yaml")
    assert isinstance(err.value, InputError) and not isinstance(err.value, ValueError)
    assert (err.value.source, err.value.path) == ("f.yaml", "cluster.preset")


def test_dgx1_preset_gives_a_job_only_the_nvlinks_among_its_gpus():
    keys = {g: expand_cluster({"preset": "dgx1-v100", "nodes": 1, "gpus_per_node": g}) for g in (2, 4, 8)}
    assert {g: k["intra_node"]["bandwidth"] for g, k in keys.items()} == pytest.approx(
        {2: 25e9, 4: 100e9, 8: 150e9})  # 1, 4, 6 NVLink2 links x 25 GB/s
    assert keys[8] == {**resolve_preset("dgx1-v100"), "nodes": 1, "gpus_per_node": 8}
    # a written bandwidth wins; a written latency alone keeps the mesh's bandwidth
    mine = expand_cluster({"preset": "dgx1-v100", "nodes": 1, "gpus_per_node": 2, "intra_node": {"bandwidth": "9 GB/s"}})
    assert mine["intra_node"]["bandwidth"] == "9 GB/s"
    lat = expand_cluster({"preset": "dgx1-v100", "nodes": 1, "gpus_per_node": 2, "intra_node": {"latency": "2 us"}})
    assert lat["intra_node"] == {"bandwidth": pytest.approx(25e9), "latency": "2 us"}
    # NVSwitch presets are the same at any GPU count
    a100 = {g: expand_cluster({"preset": "dgx-a100", "nodes": 1, "gpus_per_node": g})["intra_node"]["bandwidth"]
            for g in (2, 8)}
    assert a100[2] == a100[8]


def test_dgx1_preset_refuses_a_gpu_count_without_an_nvlink_ring():
    with pytest.raises(TopologyError, match=r"f\.yaml: cluster\.gpus_per_node: .*got 5"):
        expand_cluster({"preset": "dgx1-v100", "nodes": 1, "gpus_per_node": 5}, source="f.yaml")

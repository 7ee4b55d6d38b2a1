"""The fabric: levels, hop costs, which ports a slow link degrades, per-size pricing."""

import numpy as np
import pytest

from commsim.network.fabric import INTER, INTRA, Fabric, PortScales, flat

G = 1e9


def fabric(nodes=2, g=4):
    return Fabric(nodes=nodes, gpus_per_node=g, intra_latency=1e-6, intra_bandwidth=300 * G,
                  inter_latency=5e-6, inter_bandwidth=50 * G)


def test_a_hop_is_on_the_network_exactly_when_it_leaves_the_node():
    f = fabric()
    a, b = np.array([0, 3, 4, 7, 0]), np.array([1, 4, 5, 0, 7])
    assert f.level_of(a, b).tolist() == [INTRA, INTER, INTRA, INTER, INTER]
    assert f.pair_latency(a, b).tolist() == [1e-6, 5e-6, 1e-6, 5e-6, 5e-6]
    assert f.pair_bandwidth(a, b).tolist() == [300 * G, 50 * G, 300 * G, 50 * G, 50 * G]


def test_node_major_ring_links():
    f = fabric()
    assert f.ring_predecessors().tolist() == [7, 0, 1, 2, 3, 4, 5, 6]
    assert f.ring_crossings().tolist() == [True, False, False, False, True, False, False, False]
    alpha, bw = f.ring_links()
    assert alpha.tolist() == [5e-6, 1e-6, 1e-6, 1e-6, 5e-6, 1e-6, 1e-6, 1e-6]
    assert bw.tolist() == [50 * G, 300 * G, 300 * G, 300 * G, 50 * G, 300 * G, 300 * G, 300 * G]
    assert not fabric(nodes=1).ring_crossings().any()


def test_slow_sender_inside_a_node_degrades_its_outgoing_port_only():
    # the case: 1 node x 4 GPUs, slow_link rank 1: the ring hop 1 -> 2, not 0 -> 1
    f = fabric(nodes=1).with_slow_sender(1, 0.5)
    _, bw = f.ring_links()
    assert bw.tolist() == [300 * G, 300 * G, 150 * G, 300 * G]  # hops into ranks 0..3
    assert f.pair_bandwidth(np.array([1, 1, 0, 2]), np.array([0, 3, 1, 1])).tolist() == [150 * G, 150 * G, 300 * G, 300 * G]
    assert f.intra_scale == PortScales((1.0, 0.5, 1.0, 1.0), (1.0,) * 4) and f.inter_scale is None


def test_slow_sender_at_a_node_boundary_degrades_its_nodes_network_send_side():
    f = fabric().with_slow_sender(3, 0.25)  # 3 -> 4 crosses from node 0 to node 1
    assert f.inter_scale == PortScales((0.25, 1.0), (1.0, 1.0)) and f.intra_scale is None
    _, bw = f.ring_links()
    assert bw[4] == 12.5 * G and bw[0] == 50 * G  # out of node 0 slow, into node 0 nominal
    assert f.pair_bandwidth(np.array([1, 5]), np.array([6, 2])).tolist() == [12.5 * G, 50 * G]
    wrap = fabric().with_slow_sender(7, 0.5)  # the last rank's hop goes round to rank 0, node 0
    assert wrap.inter_scale.send == (1.0, 0.5)


def test_slow_node_degrades_its_network_both_ways_and_factors_compose():
    f = fabric(nodes=3).with_slow_node(1, 0.25)
    _, bw = f.ring_links()
    assert bw.tolist() == [50 * G, 300 * G, 300 * G, 300 * G, 12.5 * G] + [300 * G] * 3 + [12.5 * G] + [300 * G] * 3
    # the same port twice multiplies; two ends of one transfer: the slower one paces it
    twice = fabric(nodes=3).with_slow_node(1, 0.5).with_slow_node(1, 0.5)
    assert twice.inter_scale.send[1] == 0.25
    both = fabric(nodes=3).with_slow_node(1, 0.25).with_slow_node(2, 0.5)
    assert both.pair_bandwidth(np.array([4]), np.array([8])).tolist() == [12.5 * G]  # min(0.25, 0.5)


def test_degraded_counts_only_links_a_hop_can_use():
    assert not fabric().degraded
    assert fabric().with_slow_sender(1, 0.5).degraded
    assert not fabric(nodes=1).with_slow_node(0, 0.5).degraded  # one node: no network hop
    assert fabric(nodes=1).with_slow_node(0, 0.5).min_scales() == (1.0, 0.5)
    assert fabric().with_slow_sender(1, 0.5).min_scales() == (0.5, 1.0)


def test_at_size_replaces_each_levels_constants_and_keeps_degradations():
    calls = []

    def pricing(level, size, n):
        calls.append((level, size, n))
        return (2e-6, 100 * G) if level == "intra_node" else (9e-6, 20 * G)

    f = Fabric(**{**vars(fabric().with_slow_node(1, 0.5)), "pricing": pricing})
    priced = f.at_size(1e6)
    assert calls == [("intra_node", 1e6, 8), ("inter_node", 1e6, 8)]
    assert (priced.intra_latency, priced.intra_bandwidth, priced.inter_latency, priced.inter_bandwidth) == (
        2e-6, 100 * G, 9e-6, 20 * G)
    assert priced.pricing is None and priced.inter_scale == f.inter_scale
    assert priced.ring_links()[1][4] == 10 * G
    assert fabric().at_size(1e6) == fabric()


def test_bad_fabrics_are_refused():
    with pytest.raises(ValueError, match="nodes"):
        Fabric(nodes=0, gpus_per_node=1, intra_latency=0, intra_bandwidth=1, inter_latency=0, inter_bandwidth=1)
    with pytest.raises(ValueError, match="intra_bandwidth must be > 0"):
        flat(2, 0.0, 0.0)
    with pytest.raises(ValueError, match="intra_scale must hold 8 positive factors"):
        Fabric(**{**vars(fabric()), "intra_scale": PortScales((1.0,) * 7, (1.0,) * 7)})
    with pytest.raises(ValueError, match="rank must be in 0..7"):
        fabric().with_slow_sender(8, 0.5)
    with pytest.raises(ValueError, match="node must be in 0..1"):
        fabric().with_slow_node(2, 0.5)

"""LL across nodes through host memory (src/transport/net.cc: LL buffers never in GPU memory, the
send proxy checks every line's flags): a per-channel rate of the network level,
``System.net_ll_ch_GBps``, applied to LL's network hops only."""

from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.nccl.estimate import tree_correction
from commsim.collectives.nccl.graph import nccl_channels
from commsim.collectives.nccl.physical import channels_used, net_ll_GBps, _physical_table, physical_time_us, priced_by
from commsim.collectives.nccl.scale import Scale, bus_factor
from commsim.network.system import PRESETS, System, system_from_dict

BIG = np.array([float(1 << 34)])


def _busbw(kind, a, p, system, nodes, gpus, sizes=BIG):
    sc = Scale.of(system, nodes, gpus)
    t = physical_time_us(kind, a, p, sizes, system, sc)
    return sizes / (t * 1e3) * bus_factor(kind, sc.ranks)


def _polaris(rate):
    return PRESETS["polaris"].with_constants({"net_ll_ch_GBps": rate}, "test")


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather"])
def test_ring_ll_across_nodes_runs_at_the_per_channel_rate_times_the_channels(kind):
    s = _polaris(0.5)
    sc = Scale.of(s, 8, 4)
    channels = nccl_channels(s, sc)
    # far below the NICs' and the total llMaxBw: the host-memory rate per channel binds
    assert _busbw(kind, "ring", "LL", s, 8, 4)[0] == pytest.approx(0.5 * channels, rel=1e-3)


def test_the_rate_is_per_launched_channel():
    s = _polaris(0.5)
    sc = Scale.of(s, 8, 4)
    launched = channels_used("ring", "LL", np.array([65536.0]), nccl_channels(s, sc), sc.ranks)
    assert 1 <= launched[0] < nccl_channels(s, sc)
    assert net_ll_GBps(s, launched)[0] == pytest.approx(0.5 * launched[0])
    # halving the rate doubles the bandwidth term of a mid size where LL is launched on few channels
    S = np.array([1 << 20, 1 << 21], dtype=float)
    # one step floor whatever the channels launched, so that the size-0 latency is every size's
    one = lambda r: replace(_polaris(r), net_step_per_channel=False)  # noqa: E731
    t1 = physical_time_us("all_reduce", "ring", "LL", S, one(0.5), sc)
    t2 = physical_time_us("all_reduce", "ring", "LL", S, one(0.25), sc)
    lat = physical_time_us("all_reduce", "ring", "LL", np.array([0.0]), one(0.5), sc)[0]
    assert (t2 - lat) == pytest.approx(2 * (t1 - lat), rel=1e-6)


@pytest.mark.parametrize("nodes,share", [(2, 1.0), (8, 2.0)])
def test_tree_ll_across_nodes_moves_a_node_s_data_at_the_channel_rate(nodes, share):
    # a node sends S across the network at D = 2 and 2S beyond; algbw = rate x channels / share
    s = _polaris(0.5)
    sc = Scale.of(s, nodes, 4)
    channels = nccl_channels(s, sc)
    t = physical_time_us("all_reduce", "tree", "LL", BIG, s, sc)
    corr = tree_correction(_physical_table(s.nccl_version), "LL", BIG)[0]
    assert BIG[0] / (t[0] * 1e3) == pytest.approx(0.5 * channels / share * corr, rel=1e-3)


@pytest.mark.parametrize("kind,a,p,nodes", [
    ("all_reduce", "ring", "LL", 1),       # inside a node LL runs GPU to GPU
    ("all_reduce", "ring", "Simple", 8),   # Simple and LL128 use GPU buffers with GDR
    ("all_reduce", "tree", "Simple", 8),
    ("all_gather", "ring", "Simple", 8),
])
def test_only_ll_network_hops_see_it(kind, a, p, nodes):
    sizes = np.array([2.0 ** k for k in range(10, 31)])
    slow, fast = _polaris(0.1), _polaris(100.0)
    sc = Scale.of(slow, nodes, 4)
    assert np.array_equal(physical_time_us(kind, a, p, sizes, slow, sc),
                          physical_time_us(kind, a, p, sizes, fast, sc))


def test_ll128_across_nodes_does_not_see_it():
    s = replace(PRESETS["dgx-h100"], nccl_version="2.29")
    sizes = np.array([2.0 ** k for k in range(10, 31)])
    sc = Scale.of(s, 4, 8)
    a = physical_time_us("all_reduce", "ring", "LL128", sizes, s.with_constants({"net_ll_ch_GBps": 0.1}, "t"), sc)
    b = physical_time_us("all_reduce", "ring", "LL128", sizes, s, sc)
    assert np.array_equal(a, b)


def test_priced_by_names_it_for_ll_across_nodes_only():
    s = PRESETS["polaris"]
    assert "net_ll_ch_GBps" in priced_by("ring", "LL", Scale.of(s, 2, 4))
    assert "net_ll_ch_GBps" in priced_by("tree", "LL", Scale.of(s, 8, 4))
    assert "net_ll_ch_GBps" not in priced_by("ring", "LL", Scale.of(s, 1, 4))
    assert "net_ll_ch_GBps" not in priced_by("ring", "Simple", Scale.of(s, 2, 4))


def test_the_prior_is_llmaxbw_n1_per_16_channels_marked_a_guess_and_fillable():
    assert "net_ll_ch_GBps" in System.FIT_NAMES
    assert PRESETS["polaris"].net_ll_ch_GBps == pytest.approx(87.7 / 16)
    assert PRESETS["dgx-h100"].net_ll_ch_GBps == pytest.approx(141.0 / 16)
    assert "[guess" in PRESETS["polaris"].sources["net_ll_ch_GBps"]
    assert "net.cc" in PRESETS["polaris"].sources["net_ll_ch_GBps"]
    # a description written before the constant existed reads it as the architecture's prior
    doc = PRESETS["dgx-a100"].describe()
    del doc["net_ll_ch_GBps"]
    assert system_from_dict(doc, "old.yaml").net_ll_ch_GBps == pytest.approx(87.7 / 16)

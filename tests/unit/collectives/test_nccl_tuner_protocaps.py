"""Protocol ceilings as ncclTopoTuneModel applies them (src/graph/tuning.cc, v2.18.5-1 .. v2.29.2-1):
LL's llMaxBw is a total, LL128's and Tree's perChMax*Bws are per graph channel."""

from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.nccl.graph import nccl_channels, ring_graph
from commsim.collectives.nccl.physical import physical_time_us, protocol_ceiling_GBps
from commsim.collectives.nccl.scale import Scale, bus_factor
from commsim.network.system import PRESETS

BIG = np.array([float(1 << 34)])


def _busbw(kind, a, p, system, nodes, gpus, sizes=BIG):
    sc = Scale.of(system, nodes, gpus)
    t = physical_time_us(kind, a, p, sizes, system, sc)
    return sizes / (t * 1e3) * bus_factor(kind, sc.ranks)


def test_ll_prior_is_llmaxbw_itself():
    assert PRESETS["dgx-a100"].ll_ch_GBps == 87.7
    assert PRESETS["dgx-h100"].ll_ch_GBps == 141.0


@pytest.mark.parametrize("channels_seen", [16, 24])
def test_ring_ll_ceiling_is_a_total_not_per_channel(channels_seen):
    # DGX A100 1x8: 24 channels; LL's total ceiling 87.7 binds below the links' half rate
    s = PRESETS["dgx-a100"]
    sc = Scale.of(s, 1, 8)
    assert nccl_channels(s, sc) == 24
    ceil = protocol_ceiling_GBps("ring", "LL", s, sc, np.array([channels_seen]), channels_seen)
    assert ceil[0] == pytest.approx(87.7)
    assert _busbw("all_reduce", "ring", "LL", s, 1, 8)[0] == pytest.approx(87.7, rel=1e-3)


def test_ll_ceiling_scales_with_the_channels_launched():
    s = PRESETS["dgx-a100"]
    sc = Scale.of(s, 1, 8)
    ceil = protocol_ceiling_GBps("ring", "LL", s, sc, np.array([6.0, 24.0]), 24)
    np.testing.assert_allclose(ceil, [87.7 / 4, 87.7])


def test_ll128_ceiling_is_per_graph_channel():
    # H100 10x8: the ring graph has 8 channels (one per NIC), comm->nChannels 16
    s = PRESETS["dgx-h100"]
    sc = Scale.of(s, 10, 8)
    g, c = ring_graph(s, sc).channels, nccl_channels(s, sc)
    assert (g, c) == (8, 16)
    assert _busbw("all_reduce", "ring", "LL128", s, 10, 8)[0] == pytest.approx(36.7 * 8, rel=5e-3)


def test_tree_simple_ceiling_is_not_scaled_by_the_tree_efficiency():
    s = replace(PRESETS["dgx-h100"], simple_ch_GBps=1.0)
    sc = Scale.of(s, 2, 8)
    g = ring_graph(s, sc).channels
    # tuning.cc busBw = min(busBw*.92, nChannels*perChMaxTreeBw): bus at the ceiling, algbw half of it
    alg = _busbw("all_reduce", "tree", "Simple", s, 2, 8)[0] / bus_factor("all_reduce", 16)
    assert alg == pytest.approx(g * 1.0 / 2.0, rel=1e-3)


def test_ring_simple_keeps_its_per_launched_channel_ceiling():
    s = replace(PRESETS["dgx-h100"], simple_ch_GBps=1.0)
    sc = Scale.of(s, 1, 8)
    c = nccl_channels(s, sc)
    assert _busbw("all_reduce", "ring", "Simple", s, 1, 8)[0] == pytest.approx(c * 1.0, rel=1e-3)

"""Channel counts as NCCL's topology search gives them (src/graph/search.cc ncclTopoCompute and
ncclTopoDupChannels, src/graph/connect.cc ncclTopoPostset), and where they enter the pick and
the pricing."""

from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.nccl.estimate import nccl_estimate_us
from commsim.collectives.nccl.graph import (
    max_channels, nccl_channels, nics_driven, ring_graph, search_speeds_intra, search_top_speed,
)
from commsim.collectives.nccl.physical import physical_time_us
from commsim.collectives.nccl.scale import Scale, bus_factor
from commsim.collectives.nccl.simple import ring_loop_bubble_us
from commsim.network.system import PRESETS, System


def _preset(name, version):
    return replace(PRESETS[name], nccl_version=version)


def _scale(s, nodes, gpus):
    return Scale.of(s, nodes, gpus)


def test_snellius_channel_counts_match_the_logs():
    # Snellius-H100 logs (NCCL 2.22): "24 coll channels" on 1x4, "8 coll channels" on 2x4.
    # 1x4: 6 rings of 60 GB/s (2 per 123.6 GB/s GPU pair), duplicated (60 >= 50) to 12 of 30,
    # doubled by the postset to 24. 2x4: one 24 GB/s ring per NDR200 NIC, not duplicated
    # (bwIntra 24 < 25), doubled to 8.
    s = _preset("hgx-h100-4gpu", "2.22")
    g1 = ring_graph(s, _scale(s, 1, 4))
    assert (g1.searched, g1.channels, g1.bw_intra, g1.duplicated) == (6, 12, 30.0, True)
    assert nccl_channels(s, _scale(s, 1, 4)) == 24
    g2 = ring_graph(s, _scale(s, 2, 4))
    assert (g2.searched, g2.channels, g2.bw_inter, g2.duplicated) == (4, 4, 24.0, False)
    assert nccl_channels(s, _scale(s, 2, 4)) == 8


def test_h100_eight_nics_at_48_are_not_duplicated():
    # ccMin > 80 && bwIntra < 50 && nChannels > 4: 8 ring channels of 48 GB/s stay 8 in the graph
    # (what tuning.cc multiplies), 16 after the postset doubling (what runs)
    s = _preset("dgx-h100", "2.29")
    g = ring_graph(s, _scale(s, 10, 8))
    assert (g.channels, g.bw_inter, g.duplicated) == (8, 48.0, False)
    assert nccl_channels(s, _scale(s, 10, 8)) == 16


def test_four_channels_are_duplicated_and_run_on_sixteen():
    # 10x4 of a DGX H100: 4 NICs, 4 channels of 48; nChannels > 4 fails, so DupChannels makes 8 of
    # 24, and the postset 16 (channels = 2 x NICs would give 8)
    s = _preset("dgx-h100", "2.29")
    g = ring_graph(s, _scale(s, 10, 4))
    assert (g.searched, g.channels, g.bw_inter, g.duplicated) == (4, 8, 24.0, True)
    assert nccl_channels(s, _scale(s, 10, 4)) == 16
    assert nccl_channels(s, _scale(s, 10, 1)) == 4


def test_slow_channels_are_not_duplicated_before_hopper():
    # DGX A100 across nodes: 8 HDR NICs -> 8 channels of 24 GB/s; bwIntra < 25: no duplication
    s = _preset("dgx-a100", "2.18")
    g = ring_graph(s, _scale(s, 2, 8))
    assert (g.channels, g.bw_inter, g.duplicated) == (8, 24.0, False)
    # one node: 6 of 40 (= the GPU's 240 GB/s, "PERFECT"), Ampere duplicates (ccMin 80 is not > 80)
    g1 = ring_graph(s, _scale(s, 1, 8))
    assert (g1.searched, g1.channels, g1.bw_intra) == (6, 12, 20.0)


def test_hopper_doubles_few_fast_channels_across_nodes():
    # connect.cc: minCompCap >= 90 (== 90 before 2.25), nNodes > 1, ring bwIntra > 45, nChannels < 16
    # (2*nChannels <= MAXCHANNELS before 2.20): 6 NICs -> 6 channels of 48, 12 after the postset, 24
    s = _preset("dgx-h100", "2.29")
    assert ring_graph(s, _scale(s, 10, 6)).channels == 6
    assert nccl_channels(s, _scale(s, 10, 6)) == 24
    assert nccl_channels(_preset("dgx-h100", "2.18"), _scale(s, 10, 6)) == 24
    # not on one node, not before Hopper
    assert nccl_channels(s, _scale(s, 1, 8)) == 24
    a = _preset("dgx-a100", "2.29")
    assert nccl_channels(a, _scale(a, 2, 8)) == 16


def test_search_channel_cap_follows_maxchannels():
    # the ring search stops at MAXCHANNELS/2: 16 before 2.25, 32 from 2.25
    assert max_channels("2.24") == 32 and max_channels("2.25") == 64
    s = System(name="t", gpu_arch="hopper", gpus_per_node=8, intra_kind="nvswitch", intra_bw_GBps=2000.0,
               intra_hop_us=3.0, nics_per_node=8, nic_bw_GBps=50.0, net_hop_us=10.0, nccl_version="2.24")
    assert ring_graph(s, _scale(s, 1, 8)).searched == 16
    assert ring_graph(replace(s, nccl_version="2.29"), _scale(s, 1, 8)).searched == 32


def test_estimate_multiplies_the_graph_channels_not_the_running_ones():
    # one DGX H100 node: tuning's busBw = graphs[RING]->nChannels x bwIntra = 12 x 30 = 360 GB/s
    # (not the GPU's 370.8); ring AllReduce algbw = busBw x nRanks / nsteps
    s = _preset("dgx-h100", "2.29")
    sc = _scale(s, 1, 8)
    S = np.array([1e10])
    t = nccl_estimate_us("all_reduce", "ring", "Simple", S, s, sc)
    lat = nccl_estimate_us("all_reduce", "ring", "Simple", np.array([0.0]), s, sc)
    bw = S[0] / (1000.0 * (t[0] - lat[0]))
    assert bw == pytest.approx(12 * 30.0 * 8 / 14)


def test_plateau_reads_the_running_channels():
    # enqueue.cc: nBytes / (comm->nChannels * nRanks) >= 64 switches the ring Simple latency up;
    # at 10x4 comm->nChannels is 16 (graph 8), so the jump is at 16 * 40 * 64 bytes, not at 8 * 40 * 64
    s = _preset("dgx-h100", "2.29")
    sc = _scale(s, 10, 4)
    edge = 16 * 40 * 64.0
    f = lambda x: nccl_estimate_us("all_reduce", "ring", "Simple", np.array([x]), s, sc)[0]
    assert f(edge) - f(edge - 1) > 1.0
    assert f(edge / 2) - f(edge / 2 - 1) < 1e-3


def test_duplicated_channels_drive_no_extra_nic():
    # a node whose NVLink holds only 2 channels of 48: 2 searched channels on 2 NICs, duplicated and
    # doubled to 8 running ones, which still cross the network through those 2 NICs
    s = System(name="t", gpu_arch="hopper", gpus_per_node=8, intra_kind="nvswitch", intra_bw_GBps=100.0,
               intra_hop_us=3.0, nics_per_node=8, nic_bw_GBps=50.0, net_hop_us=10.0,
               simple_ch_GBps=1000.0, nccl_version="2.29")
    sc = _scale(s, 10, 8)
    g = ring_graph(s, sc)
    assert (g.searched, g.channels, nccl_channels(s, sc), nics_driven(s, sc)) == (2, 4, 8, 2)
    S = np.array([1e11])
    t = physical_time_us("all_gather", "ring", "Simple", S, s, sc)[0]
    t -= ring_loop_bubble_us(s, S, 80, 8)[0]  # the loop boundaries' idle time, not a NIC rate
    lat = physical_time_us("all_gather", "ring", "Simple", np.array([0.0]), s, sc)[0]
    bus = S[0] / (1000.0 * (t - lat)) * bus_factor("all_gather", 80)
    assert bus == pytest.approx(min(100.0, 2 * 50.0))


def test_intra_speed_arrays_by_release():
    assert search_speeds_intra(1, "2.29")[0] == 40.0
    assert 50.0 not in search_speeds_intra(2, "2.18") and 50.0 in search_speeds_intra(2, "2.19")
    assert 11.0 in search_speeds_intra(2, "2.21") and 11.0 not in search_speeds_intra(2, "2.20")
    assert search_speeds_intra(3, "2.24")[0] == 60.0     # Blackwell on the SM90 array before 2.25
    assert search_speeds_intra(3, "2.25")[0] == 90.0
    assert 45.0 in search_speeds_intra(3, "2.29") and 45.0 not in search_speeds_intra(3, "2.28")


def test_blackwell_one_node_top_speed_from_2_25():
    # sm100SpeedArrayIntra is selected from v2.25.1-1 (``ccMin >= 100 ? sm100SpeedArrayIntra``)
    assert search_top_speed(3, "2.25", inter=False) == 90.0
    assert search_top_speed(3, "2.24", inter=False) == 60.0
    assert search_top_speed(2, "2.30", inter=False) == 60.0

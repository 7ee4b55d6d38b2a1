"""NCCL's a-priori pick with the NVLS graph's own channels and bandwidths (src/graph/search.cc
ncclTopoCompute for the NVLS pattern, src/graph/tuning.cc ncclTopoTuneModel's NVLS rows)."""

import math

import numpy as np
import pytest

from commsim.collectives.nccl.estimate import nccl_estimate_us
from commsim.collectives.nccl.graph import nccl_channels, search_top_speed
from commsim.collectives.nccl.nvls import NVLS_MAX_ARITY, nvls_graph
from commsim.collectives.nccl.scale import Scale
from commsim.collectives.nccl_tuner import plan
from commsim.network.system import System, preset


def _sys(**kw) -> System:
    base = dict(name="t", gpu_arch="hopper", gpus_per_node=8, intra_kind="nvswitch", intra_bw_GBps=450.0,
                intra_hop_us=3.0, nics_per_node=8, nic_bw_GBps=50.0, net_hop_us=10.0, launch_us=5.0,
                intra_channels=16, cpu_vendor="intel", nvls=True, rails=True, nccl_version="2.29")
    base.update(kw)
    return System(**base)


def _graph(s, nodes, gpus):
    return nvls_graph(s, Scale.of(s, nodes, gpus))


def test_one_node_one_head_per_gpu_and_heads_count_twice_on_nvlink():
    # one node: minChannels = maxChannels = min(32, GPUs); a head GPU's NVLink carries
    # (channels + 1) x bwIntra (ncclTopoSearchTryNvls: d0 == g ? 2 : 1)
    g = _graph(_sys(), 1, 8)
    assert g.channels == 8
    assert g.bw_intra == pytest.approx(450.0 / 9)
    # pass 2 raises bwInter unchecked (no NIC) to min(fastest speed 60, 2 bwIntra)
    assert g.bw_inter == 60.0
    assert _graph(_sys(intra_bw_GBps=200.0), 1, 8).bw_inter == pytest.approx(2 * 200.0 / 9)
    assert _graph(_sys(), 1, 4).channels == 4


def test_heads_are_capped_by_the_nvls_arity():
    s = _sys(gpus_per_node=64, nics_per_node=64)
    assert _graph(s, 1, 64).channels == NVLS_MAX_ARITY == 32


def test_across_nodes_one_head_per_nic_stopped_by_the_nic():
    s = _sys(nic_bw_GBps=40.0)
    g = _graph(s, 10, 2)                   # 2 GPUs, 2 NICs near them: 2 heads (not the ring's 8 channels:
    assert (g.channels, g.bw_intra, g.bw_inter) == (2, 40.0, 40.0)   # 2 searched, duplicated, doubled)
    assert nccl_channels(s, Scale.of(s, 10, 2)) == 8
    g8 = _graph(s, 10, 8)
    assert g8.channels == 8 and g8.bw_intra == pytest.approx(40.0)
    # fewer NICs than GPUs: heads = NICs; NVLink-bound bwIntra, pass 2 raises bwInter to <= 2 bwIntra
    s2 = _sys(nics_per_node=2, rails=False, nic_bw_GBps=40.0, intra_bw_GBps=60.0)
    g2 = _graph(s2, 4, 8)
    assert g2.channels == 2
    assert g2.bw_intra == pytest.approx(20.0)
    assert g2.bw_inter == pytest.approx(40.0)


def test_no_graph_channel_faster_than_the_search_speed_array():
    # sm90SpeedArrayIntra starts at 60, sm90SpeedArrayInter at 48 (search.cc)
    g = _graph(_sys(), 1, 4)               # 450 / 5 = 90 > 60
    assert g.bw_intra == 60.0
    g = _graph(_sys(nic_bw_GBps=50.0), 10, 2)
    assert (g.bw_intra, g.bw_inter) == (48.0, 48.0)
    assert search_top_speed(3, "2.27", inter=True) == 96.0
    assert search_top_speed(3, "2.26", inter=False) == 90.0   # sm100SpeedArrayIntra from v2.25.1-1 (line 1002 in 2.26.2-1)


def test_h100_one_node_four_gpus_large_all_reduce_runs_ring():
    # 4 heads x 60 GB/s x .85 x 3/4 x 2 = 306 < the ring's 450
    p = plan("all_reduce", preset("dgx-h100"), 1, 4)
    assert p.choose([1 << 30])[0] == ("ring", "Simple")


def test_nvls_tree_estimate_is_the_tuning_cc_formula_on_the_nvls_graph():
    s = _sys()
    sc = Scale.of(s, 10, 8)
    S = float(1 << 30)
    n, nsteps = 80, 2 * 79
    # tuning.cc: intraBw = bwIntra * nvlsEff * (nCh-1)/nCh * 2; bw = min(intraBw, bwInter, perChMaxNVLSTreeBw)
    intra = 50.0 * 0.85 * 7 / 8 * 2
    bw = min(intra, 50.0, 45.5)            # perChMaxNVLSTreeBws[Hopper][>2 nodes]
    bus = 8 * bw * n / nsteps
    lat = 0.0 + 25.0 + 2 * math.floor(math.log2(10)) * 20.9   # baseLat + hwLat[NVLINK] + 2 log2(D) hwLat[NET]
    got = nccl_estimate_us("all_reduce", "nvls_tree", "Simple", [S], s, sc)[0]
    assert got == pytest.approx(lat + S / (1000 * bus))


def test_h100_ten_nodes_two_and_four_gpus_large_all_reduce_runs_ring():
    # measured busbw there is the ring's NIC rate; NVLS-tree with 2 (4) heads cannot reach it
    # (10x4: the ring's 40-rank latency holds NVLS-tree up to 1 GB, ring from 2 GB)
    s = preset("dgx-h100")
    for gpus, size in ((2, 1 << 30), (4, 4 << 30)):
        p = plan("all_reduce", s, 10, gpus)
        assert p.choose([size])[0] == ("ring", "Simple")


def test_one_tray_of_four_gpus_runs_ring_with_four_nvls_heads():
    # 4 heads x NVLink/5 each: NVLS's estimate stays below the ring's 16 channels
    p = plan("all_reduce", preset("gb200-nvl72"), 1, 4)
    assert p.choose([1 << 30])[0] == ("ring", "Simple")


def test_nvls_needs_two_heads():
    # one NIC per node: one NVLS head across nodes, "NVLS/NVLStree needs at least 2 channels"
    s = _sys(nics_per_node=1, rails=False)
    sc = Scale.of(s, 4, 8)
    assert _graph(s, 4, 8).channels == 1
    assert np.isinf(nccl_estimate_us("all_reduce", "nvls_tree", "Simple", [1 << 20, 1 << 30], s, sc)).all()
    p = plan("all_reduce", s, 4, 8)
    assert all(c[0] != "nvls_tree" for c in p.choose([1 << 10, 1 << 20, 1 << 30]))


def test_single_node_nvls_still_wins_at_large_sizes_on_eight_gpus():
    # 8 heads x 450/9 x .85 x 7/8 x 2 > the ring's 450: NVLS runs a large one-node all-reduce
    p = plan("all_reduce", preset("dgx-h100"), 1, 8)
    assert p.choose([1 << 30])[0] == ("nvls", "Simple")


def test_before_2_28_the_nvls_rows_are_min_of_graph_speeds_times_five_sixths():
    # v2.20.3-1 .. v2.27.7-1 tuning.cc: NVLS bw = min(bwIntra, bwInter); NVLS-tree
    # min(bwIntra, bwInter / 2) beyond 2 nodes; busBw x 5/6 (no nvlsEfficiency, no perChMax cap)
    s = _sys(nccl_version="2.27", nic_bw_GBps=40.0)
    S = float(1 << 30)
    sc = Scale.of(s, 10, 8)
    got = nccl_estimate_us("all_reduce", "nvls_tree", "Simple", [S], s, sc)[0]
    lat = 25.0 + 2 * 3 * 20.9
    assert got == pytest.approx(lat + S / (1000 * 8 * min(40.0, 40.0 / 2) * 5 / 6))
    one = Scale.of(s, 1, 8)
    got = nccl_estimate_us("all_reduce", "nvls", "Simple", [S], s, one)[0]
    assert got == pytest.approx(25.0 + S / (1000 * 8 * (450.0 / 9) * 5 / 6))
    # 2.28+: one node, bw = min(bwIntra .85 7/8 2 = 74.4, bwInter = 60): the graph's bwInter binds
    s29 = _sys(nccl_version="2.29")
    got = nccl_estimate_us("all_reduce", "nvls", "Simple", [S], s29, one)[0]
    assert got == pytest.approx(25.0 + S / (1000 * 8 * 60.0 * 8 / 14))
    # 2.27 AllGather: min(bwIntra (ppn-1)/ppn, 0.9 bwInter), no ratio (2.23+ guard)
    got = nccl_estimate_us("all_gather", "nvls", "Simple", [S], s, one)[0]
    assert got == pytest.approx(25.0 + S / (1000 * 8 * (450.0 / 9) * 7 / 8))
    # before 2.23 the 5/6 applies to AllGather too
    s22 = _sys(nccl_version="2.22")
    got = nccl_estimate_us("all_gather", "nvls", "Simple", [S], s22, one)[0]
    assert got == pytest.approx(25.0 + S / (1000 * 8 * (450.0 / 9) * 5 / 6))


def test_before_2_28_one_nvls_head_is_still_a_candidate():
    s = _sys(nccl_version="2.27", nics_per_node=1, rails=False, nic_bw_GBps=40.0)
    sc = Scale.of(s, 4, 8)
    assert np.isfinite(nccl_estimate_us("all_reduce", "nvls_tree", "Simple", [1 << 30], s, sc)).all()

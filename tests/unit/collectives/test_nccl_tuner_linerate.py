"""NCCL's a-priori pick on the link speeds NCCL's topology code gives (src/graph/topo.h, topo.cc,
search.cc), while the physical pricing stays on achievable rates."""

from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.nccl.estimate import nccl_estimate_us
from commsim.collectives.nccl.graph import search_speed, search_top_speed, topo_speeds
from commsim.collectives.nccl.nvls import nvls_graph
from commsim.collectives.nccl.physical import physical_time_us, priced_by
from commsim.collectives.nccl.scale import ALGORITHMS, PROTOCOLS, Scale
from commsim.collectives.nccl_tuner import plan
from commsim.network.system import SwitchTier, System, preset


def _h100(version="2.29") -> System:
    return replace(preset("dgx-h100"), nccl_version=version)


def test_topology_speeds_are_link_counts_times_nccl_link_speeds_and_nic_line_rates():
    s = _h100()
    sp = topo_speeds(s)
    # 18 NVLinks x SM90_NVLINK_BW 20.6; the NIC's mbps / 8000 = 400000 / 8000
    assert (sp.intra_GBps, sp.nic_GBps, sp.line_rates) == (pytest.approx(18 * 20.6), 50.0, True)
    assert s.nic_bw_GBps == pytest.approx(47.5)          # the physical model's figure is unchanged
    assert topo_speeds(_h100("2.19")).intra_GBps == pytest.approx(18 * 20.0)   # 20.6 from 2.20
    assert topo_speeds(replace(preset("dgx-a100"), nccl_version="2.19")).intra_GBps == pytest.approx(12 * 20.0)
    gb = preset("gb200-nvl72")
    assert topo_speeds(replace(gb, nccl_version="2.27.3")).intra_GBps == pytest.approx(18 * 40.0)
    assert topo_speeds(replace(gb, nccl_version="2.27.7")).intra_GBps == pytest.approx(18 * 40.1)
    assert topo_speeds(replace(gb, nccl_version="2.24")).intra_GBps == pytest.approx(18 * 20.6)  # SM90's before 2.25
    assert topo_speeds(preset("dgx1-v100")).intra_GBps == pytest.approx(6 * 20.0)
    # PCIe Gen3 x16: width * speed / 80 = 16 * 60 / 80 = PCI_BW
    assert topo_speeds(preset("g4dn-t4")).intra_GBps == 12.0
    assert topo_speeds(preset("g4dn-t4")).nic_GBps == 12.5


def test_a_description_without_line_rates_keeps_its_achievable_figures():
    s = System(name="t", gpu_arch="hopper", gpus_per_node=8, intra_kind="nvswitch", intra_bw_GBps=300.0,
               intra_hop_us=3.0, nics_per_node=8, nic_bw_GBps=40.0, net_hop_us=10.0)
    sp = topo_speeds(s)
    assert (sp.intra_GBps, sp.nic_GBps, sp.line_rates) == (300.0, 40.0, False)


def test_the_search_rounds_a_nic_down_to_its_speed_array():
    assert search_speed(2, "2.29", 50.0) == 48.0      # sm90SpeedArrayInter[0]
    assert search_speed(2, "2.29", 47.5) == 45.0      # what the achievable rate would have given
    assert search_speed(1, "2.18", 25.0) == 24.0      # speedArrayInter: 200 Gb/s
    assert search_speed(2, "2.29", 23.0) == 22.0
    assert search_speed(2, "2.18", 23.0) == 20.0      # 2.18's sm90 array had no 22
    assert search_speed(1, "2.19", 12.5) == 12.0
    assert search_speed(1, "2.19", 0.01) == 0.12      # below every entry: the last one
    assert search_speed(3, "2.27.3", 50.0) == 47.9    # sm100SpeedArrayInter by release
    assert search_speed(3, "2.27.5", 50.0) == 48.0
    assert search_speed(3, "2.28", 100.0) == 96.0
    assert search_top_speed(3, "2.27.3", inter=True) == 47.9


def test_ring_estimate_across_nodes_runs_at_48_per_nic_not_the_achievable_rate():
    s = _h100()
    sc = Scale.of(s, 10, 4)
    n = 40
    S = float(1 << 32)
    t = nccl_estimate_us("all_reduce", "ring", "Simple", np.array([S, 2 * S]), s, sc)
    # the latency cancels: S / (1000 bus), bus = 4 NICs x 48 GB/s x n / nsteps (tuning.cc ring)
    bus = 4 * 48.0 * n / (2 * (n - 1))
    assert t[1] - t[0] == pytest.approx(S / (1000 * bus))


def test_h100_ten_by_four_switches_to_ring_at_one_gigabyte_as_measured():
    # with the achievable 47.5 GB/s NVLS-tree held on to 1 GB; NCCL (48 GB/s) runs ring there
    p = plan("all_reduce", _h100(), 10, 4)
    assert p.choose([1 << 30])[0] == ("ring", "Simple")
    assert p.choose([256 << 20])[0][0] == "nvls_tree"


def test_nccl_does_not_see_switch_oversubscription():
    s = _h100()
    over = replace(s, tiers=(SwitchTier(nodes_below=4, oversubscription=2.0),))
    sizes = np.array([1 << 20, 1 << 26, 1 << 30], dtype=float)
    for a in ("ring", "tree", "nvls_tree"):
        sc = Scale.of(s, 10, 8)
        np.testing.assert_array_equal(nccl_estimate_us("all_reduce", a, "Simple", sizes, over, sc),
                                      nccl_estimate_us("all_reduce", a, "Simple", sizes, s, sc))
    # ... while the physical time does
    sc = Scale.of(s, 10, 8)
    assert (physical_time_us("all_reduce", "ring", "Simple", sizes, over, sc)
            > physical_time_us("all_reduce", "ring", "Simple", sizes, s, sc)).all()


def test_nvls_graph_uses_the_nccl_nvlink_and_nic_speeds():
    s = _h100()
    g = nvls_graph(s, Scale.of(s, 1, 8))
    assert g.bw_intra == pytest.approx(18 * 20.6 / 9)
    g = nvls_graph(s, Scale.of(s, 10, 2))
    assert (g.bw_intra, g.bw_inter) == (48.0, 48.0)
    p5ish = replace(s, nic_line_GBps=12.5)             # 100 Gb/s NICs: the search's 12, not 11.9
    g = nvls_graph(p5ish, Scale.of(p5ish, 10, 2))
    assert g.bw_inter == 12.0


def test_physical_pricing_stays_on_achievable_rates():
    s = _h100()
    faster_line = replace(s, nic_line_GBps=100.0, intra_line_GBps=900.0)
    sc = Scale.of(s, 10, 8)
    sizes = np.array([1 << 20, 1 << 30], dtype=float)
    # tree is left out: its Simple ceiling is per graph channel (tuning.cc nChannels*perChMaxTreeBw),
    # and the graph's channels are what NCCL's search finds on the line rates
    for a in ("ring", "nvls_tree"):
        np.testing.assert_array_equal(physical_time_us("all_reduce", a, "Simple", sizes, faster_line, sc),
                                      physical_time_us("all_reduce", a, "Simple", sizes, s, sc))


def test_p5_is_eight_400g_devices_as_aws_ofi_nccl_presents_them():
    s = preset("p5")
    assert (s.nics_per_node, s.nic_line_GBps) == (8, 50.0)
    assert topo_speeds(s).nic_GBps == 50.0
    # 8 devices: 8 NVLS heads across 2 nodes, and NVLS-tree wins the large sizes (with 32 x 100G
    # NCCL would see 12 GB/s NICs and run ring)
    p = plan("all_reduce", replace(s, nccl_version="2.27"), 2, 8)
    assert p.choose([1 << 30])[0] == ("nvls_tree", "Simple")


def test_the_nic_reported_latency_enters_every_network_hop_of_the_estimate_twice_for_simple():
    s = _h100()
    slow = replace(s, nic_reported_latency_us=75.0)
    sc = Scale.of(s, 10, 8)
    S = np.array([4096.0])   # below the ring plateau (S / (C n) < 64)
    n_inter = 2 * (10 - 1)
    d = nccl_estimate_us("all_reduce", "ring", "LL", S, slow, sc) - nccl_estimate_us("all_reduce", "ring", "LL", S, s, sc)
    assert d[0] == pytest.approx(n_inter * 75.0)
    d = nccl_estimate_us("all_reduce", "tree", "Simple", S, slow, sc) - nccl_estimate_us("all_reduce", "tree", "Simple", S, s, sc)
    assert d[0] == pytest.approx(2 * 3 * 2 * 75.0)      # 2 log2(10) network hops, x2 for Simple
    # what picks, not what it costs
    np.testing.assert_array_equal(physical_time_us("all_reduce", "ring", "LL", S, slow, sc),
                                  physical_time_us("all_reduce", "ring", "LL", S, s, sc))


def test_priced_by_names_exactly_the_constants_the_physical_time_reads():
    # every constant left out must not move the time; nvls_efficiency prices NVLS only
    s = replace(preset("gb200-nvl72"), nccl_version="2.27.3")
    sizes = np.array([1 << 12, 1 << 20, 1 << 30], dtype=float)
    for nodes, gpus in ((1, 4), (16, 4), (32, 4), (2, 1)):
        sc = Scale.of(s, nodes, gpus)
        for a in ALGORITHMS:
            for p in PROTOCOLS:
                names = priced_by(a, p, sc)
                base = physical_time_us("all_reduce", a, p, sizes, s, sc)
                for k in set(System.FIT_NAMES) - set(names):
                    moved = s.with_constants({k: getattr(s, k) * 1.7}, "test")
                    np.testing.assert_array_equal(physical_time_us("all_reduce", a, p, sizes, moved, sc), base,
                                                  err_msg=f"{a}/{p} at {nodes}x{gpus} reads {k}")
    sc = Scale.of(s, 16, 4)
    assert "nvls_efficiency" in priced_by("nvls", "Simple", sc)
    assert "nvls_efficiency" not in priced_by("ring", "Simple", sc)


def test_the_nominal_nvls_efficiency_is_marked_as_unsourced():
    src = preset("gb200-nvl72").sources["nvls_efficiency"]
    assert src.startswith("nominal:") and "guess" in src

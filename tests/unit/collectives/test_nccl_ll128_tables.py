"""LL128's a-priori constants against NCCL's tuning.cc, release by release: the Hopper terms the
H100 cluster's logs (NCCL 2.29.2) are priced and picked with, and the Blackwell rows, which
changed from release to release where Hopper's did not."""

from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.nccl.estimate import nccl_estimate_us
from commsim.collectives.nccl.graph import ring_graph
from commsim.collectives.nccl.scale import Scale, nccl_table
from commsim.collectives.nccl_tuner import plan
from commsim.network.system import PRESETS

MB = 2 ** 20
HOPPER, BLACKWELL = 2, 3


@pytest.mark.parametrize("version", ["2.23.4", "2.25.1", "2.27.3", "2.28.3", "2.28.9", "2.29.2", "2.29.7", "2.30.7"])
def test_hopper_ll128_terms_are_v2_29_2_tuning_cc(version):
    # v2.29.2-1 src/graph/tuning.cc ncclTunerConstantsDefaults (and every release from 2.23 on):
    # baseLatencies Ring LL128 14.0; hwLatencies NVLINK Ring LL128 1.9, NET Ring LL128 4.0,
    # NET Tree LL128 8.5 (the ppn == 1 latency); perChMaxRingLL128Bws Hopper {36.7, 36.7, 36.7};
    # perChMaxTreeLL128Bws Hopper {36.7, 36.7, 29.0}
    t = nccl_table(version)
    assert t["base"]["ring"][1] == 14.0
    assert t["hw"]["NVLINK"]["ring"][1] == 1.9
    assert t["hw"]["NET"]["ring"][1] == 4.0 and t["hw"]["NET"]["tree"][1] == 8.5
    assert t["ring_ll128"][HOPPER] == (36.7, 36.7, 36.7)
    assert t["tree_ll128"][HOPPER] == (36.7, 36.7, 29.0)


@pytest.mark.parametrize("version, ring, tree_ll128, tree", [
    # no Blackwell row before 2.25: compCapIndex stops at HOPPER_COMPCAP_IDX
    ("2.23.4", (36.7, 36.7, 36.7), (36.7, 36.7, 29.0), (38.7, 41.4, 36.0)),
    ("2.24.3", (36.7, 36.7, 36.7), (36.7, 36.7, 29.0), (38.7, 41.4, 36.0)),
    # v2.25.1-1 .. v2.27.7-1: {2*36.7, ...}, {2*36.7, 2*36.7, 2*29.0}, {2*38.7, 2*41.4, 2*36.0}
    ("2.25.1", (73.4, 73.4, 73.4), (73.4, 73.4, 58.0), (77.4, 82.8, 72.0)),
    ("2.27.3", (73.4, 73.4, 73.4), (73.4, 73.4, 58.0), (77.4, 82.8, 72.0)),
    ("2.28.3", (73.4, 73.4, 73.4), (55.6, 31.67, 20.0), (70.0, 42.8, 24.0)),
    ("2.28.7", (73.4, 34.6, 73.4), (55.6, 31.67, 20.0), (70.0, 42.8, 24.0)),
    ("2.28.9", (73.4, 34.6, 73.4), (55.6, 31.67, 20.0), (70.0, 42.8, 24.0)),
    ("2.29.2", (34.5, 34.6, 34.5), (55.6, 31.67, 20.0), (70.0, 42.8, 24.0)),
    ("2.29.3", (34.5, 34.6, 34.5), (55.6, 31.67, 20.0), (70.0, 42.8, 24.0)),
    ("2.29.7", (40.0, 40.0, 40.0), (55.6, 31.67, 20.0), (70.0, 42.8, 24.0)),
    ("2.30", (40.0, 40.0, 40.0), (55.6, 31.67, 20.0), (70.0, 42.8, 24.0)),
    ("2.30.7", (40.0, 40.0, 40.0), (55.6, 31.67, 20.0), (70.0, 42.8, 24.0)),
])
def test_blackwell_rows_are_each_release_s_own(version, ring, tree_ll128, tree):
    t = nccl_table(version)
    assert t["ring_ll128"][BLACKWELL] == pytest.approx(ring)
    assert t["tree_ll128"][BLACKWELL] == pytest.approx(tree_ll128)
    assert t["tree"][BLACKWELL] == pytest.approx(tree)
    # the other rows are the release line's common ones
    later = nccl_table("2.30")
    for key in ("ring_ll128", "tree_ll128", "tree", "ll_max"):
        assert t[key][:BLACKWELL] == later[key][:BLACKWELL]
    assert t["hw"] == later["hw"] and t["base"] == later["base"]


@pytest.mark.parametrize("version, n4", [("2.28.3", 43.1), ("2.28.9", 43.8), ("2.29.2", 43.8), ("2.29.7", 43.8),
                                         ("2.30.7", 80.0)])
def test_blackwell_nvls_tree_ceiling_per_release(version, n4):
    # perChMaxNVLSTreeBws Blackwell {0.0, 96.0, N4}: 43.1 (v2.28.3-1, v2.28.7-1), 43.8 (v2.28.9-1 ..
    # v2.29.7-1), 80.0 (v2.30.3-1 on); Hopper {0.0, 57.7, 45.5} throughout
    t = nccl_table(version)
    assert t["nvls_tree"][BLACKWELL] == (0.0, 96.0, n4)
    assert t["nvls_tree"][HOPPER] == (0.0, 57.7, 45.5)


def test_gb200_one_tray_all_reduce_at_16_mb_picks_ll128_under_2_27_but_simple_under_2_30():
    # the GB200 logs ran NCCL 2.27.3, whose Blackwell ring LL128 ceiling is 2 x 36.7 per graph
    # channel; 2.30's 40 per channel makes NCCL's estimate prefer Simple at 16 MB
    S = np.array([16.0 * MB])
    old = replace(PRESETS["gb200-nvl72"], nccl_version="2.27.3")
    new = replace(PRESETS["gb200-nvl72"], nccl_version="2.30")
    assert plan("all_reduce", old, 1, 4).choose(S)[0] == ("ring", "LL128")
    assert plan("all_reduce", new, 1, 4).choose(S)[0] == ("ring", "Simple")


def test_h100_ring_ll128_estimate_is_tuning_cc_s_formula():
    # ncclTopoTuneModel (v2.29.2-1) for Ring/LL128 across nodes, all_gather on 10 x 8 H100:
    # busBw = min(nChannels * bwInter * 0.92, nChannels * perChMaxRingLL128Bw), x nRanks/nsteps;
    # lat = baseLat + (nsteps - nInterSteps) * max(hwLat NVLink, netOverhead) + nInterSteps * (hwLat NET
    # + latencyInter); time = lat + nBytes / (1000 * bw)
    s = replace(PRESETS["dgx-h100"], nccl_version="2.29.2")
    sc = Scale.of(s, 10, 8)
    g = ring_graph(s, sc)
    n, nsteps, n_inter = 80, 79, 9
    bus = min(g.channels * g.bw_inter * 0.92, g.channels * 36.7)
    lat = 14.0 + (nsteps - n_inter) * max(1.9, 1.0) + n_inter * (4.0 + s.nic_reported_latency_us)
    S = np.array([32.0 * MB, 128.0 * MB])
    want = lat + S / (1000.0 * bus * n / nsteps)
    assert nccl_estimate_us("all_gather", "ring", "LL128", S, s, sc) == pytest.approx(want)

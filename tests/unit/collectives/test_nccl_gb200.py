"""GB200 NVL72 across racks: MNNVL cliques (one NCCL node per NVLink domain, uneven tray
counts included), the NVLS heads an NVLS tree crosses the network through, and its price."""

from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.nccl.graph import nics_driven
from commsim.collectives.nccl.nvls import clique_splits, nvls_graph, nvls_heads, nvls_tree_nics
from commsim.collectives.nccl.physical import physical_time_us
from commsim.collectives.nccl.scale import Scale
from commsim.collectives.nccl_tuner import plan
from commsim.network.system import PRESETS

GB = 2 ** 30


def _gb200(version="2.27.3"):
    return replace(PRESETS["gb200-nvl72"], nccl_version=version)


def test_clique_splits_are_every_placement_in_the_fewest_racks():
    # 32 trays need 2 racks of 18: 18+14, 17+15 or 16+16 (largest first, no repeats)
    assert clique_splits(32, 18) == [(18, 14), (17, 15), (16, 16)]
    splits = clique_splits(48, 18)
    assert (18, 18, 12) in splits and (16, 16, 16) in splits
    assert all(len(p) == 3 and sum(p) == 48 and max(p) <= 18 and list(p) == sorted(p, reverse=True) for p in splits)
    assert len(splits) == len(set(splits)) == 7
    assert clique_splits(16, 18) == [(16,)]
    assert clique_splits(19, 18)[0] == (18, 1)
    # brute force: every non-increasing pair summing to 32 within a rack
    assert clique_splits(32, 18) == [(a, 32 - a) for a in range(18, 15, -1)]


def test_nvls_heads_are_the_smallest_cliques_and_capped_at_the_arity():
    s = _gb200()
    # 16 trays x 4 GPUs, one NIC each: 64 candidates, NCCL_MAX_NVLS_ARITY 32
    assert nvls_heads(s, (16, 16), 4) == 32
    # every plausible placement of the logs' 32 and 48 trays keeps 32 heads
    assert {nvls_heads(s, p, 4) for p in clique_splits(32, 18) + clique_splits(48, 18)} == {32}
    # a clique of 7 trays has 28 GPU:NIC pairs; init.cc aligns every rank on the smallest graph
    assert nvls_heads(s, (18, 7), 4) == 28
    # agrees with the even-split NVLS graph the scale builds
    assert nvls_heads(s, (16, 16), 4) == nvls_graph(s, Scale.of(s, 32, 4)).channels


def test_nvls_tree_crosses_the_network_through_one_nic_per_head():
    s = _gb200()
    sc = Scale.of(s, 48, 4)
    assert (sc.domains, sc.local, sc.nics) == (3, 64, 64)
    # 32 heads, not the ring search's 16 channels
    assert nics_driven(s, sc) == 16
    assert nvls_tree_nics(s, sc) == 32
    # beyond 2 nodes the tree's network term is heads x NIC x tree efficiency / 2 = 699 GB/s,
    # above the NVLS term 720 x 0.74 = 533: the NVLS tree is priced by NVLink SHARP, as at 2 cliques
    S = np.array([4 * GB, 8 * GB], float)
    t3 = physical_time_us("all_reduce", "nvls_tree", "Simple", S, s, sc)
    t2 = physical_time_us("all_reduce", "nvls_tree", "Simple", S, s, Scale.of(s, 32, 4))
    algbw = (S[1] - S[0]) / (t3[1] - t3[0]) / 1e3
    assert algbw == pytest.approx(s.intra_bw_GBps * s.nvls_efficiency)
    # 3 cliques connect a tree 2 hops deep (2 cliques: 1): a size-independent cost at one chunk size
    assert np.all(t3 > t2) and t3[1] - t2[1] == pytest.approx(t3[0] - t2[0])
    # with a slow enough NIC the network binds again, at 32 heads' worth
    slow = replace(s, nic_bw_GBps=10.0)
    t = physical_time_us("all_reduce", "nvls_tree", "Simple", S, slow, sc)
    assert (S[1] - S[0]) / (t[1] - t[0]) / 1e3 == pytest.approx(32 * 10.0 * s.tree_efficiency / 2)


def test_nccl_picks_nvls_tree_across_racks_without_collnet():
    # NCCL_COLLNET_ENABLE is off by default, so NVLS proper cannot cross cliques; NVLS tree wins
    s = _gb200()
    for nodes in (32, 48):
        p = plan("all_reduce", s, nodes, 4)
        assert ("nvls", "Simple") not in p.candidates
        assert p.choose([4 * GB, 8 * GB]) == [("nvls_tree", "Simple")] * 2
    assert plan("all_reduce", s, 16, 4).choose([4 * GB]) == [("nvls", "Simple")]

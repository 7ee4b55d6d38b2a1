"""NVLS tree as NCCL runs it across nodes: its chunk (enqueue.cc calcCollChunking), the CTAs it
launches (nvls.cc), the depth of the tree connect.cc gives it (trees.cc), and the price of filling
and draining its chunk pipeline."""

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.nccl.estimate import nccl_estimate_us
from commsim.collectives.nccl.nvls import (
    nvls_channels, nvls_graph, nvls_tree_chunk_bytes, nvls_tree_height, nvls_tree_nics, nvls_tree_pipeline_us,
)
from commsim.collectives.nccl.physical import _physical_table, physical_time_us
from commsim.collectives.nccl.runnable import runnable
from commsim.collectives.nccl.scale import Scale, log2i
from commsim.collectives.nccl_tuner import plan
from commsim.network.system import PRESETS

KB, MB, GB = 1 << 10, 1 << 20, 1 << 30


def _chunk_reference(n_bytes: int, version: tuple, nodes: int, concurrent_ops: int) -> int:
    """calcCollChunking's NVLS_TREE branch, line by line (v2.21.5-1 .. v2.29.2-1; v2.19.3-1 for the
    older start), with NCCL_NVLS_CHUNKSIZE and NCCL_NVLSTREE_MAX_CHUNKSIZE at their defaults."""
    if version >= (2, 21):
        chunk = 128 * 1024
        max_chunk = 65536 if nodes >= 4 else chunk
        chunk = min(chunk, max_chunk)
    else:
        chunk = (4 << 20) // 8
        if nodes >= 4:
            chunk = 65536
    if n_bytes < 32 * concurrent_ops * chunk and chunk > 262144:
        chunk = 262144
    if n_bytes < 16 * concurrent_ops * chunk and chunk > 131072:
        chunk = 131072
    if n_bytes < 4 * concurrent_ops * chunk and chunk > 65536:
        chunk = 65536
    if n_bytes < 1 * concurrent_ops * chunk and chunk > 32768:
        chunk = 32768
    return chunk


def _btree_children(n: int, rank: int):
    """ncclGetBtree's down links (trees.cc), for a depth computed from the root down."""
    bit = 1
    while bit < n:
        if bit & rank:
            break
        bit <<= 1
    if rank == 0:
        return [bit >> 1] if n > 1 else []
    low = bit >> 1
    down = [rank - low] if low else []
    d1 = rank + low if low else -1
    while d1 >= n:
        d1 = rank + low if low else -1
        low >>= 1
    if d1 != -1:
        down.append(d1)
    return down


def _depth_from_root(n: int) -> int:
    level, frontier, seen = 0, [0], {0}
    while True:
        nxt = [c for r in frontier for c in _btree_children(n, r)]
        assert not seen.intersection(nxt)
        seen.update(nxt)
        if not nxt:
            assert seen == set(range(n))  # the tree spans every node exactly once
            return level
        frontier, level = nxt, level + 1


def test_chunk_is_64k_from_four_nodes_and_shrinks_with_size():
    # H100 10x4: 16 NVLS CTAs x 4 heads = 64 concurrent ops
    S = np.array([2 * MB, 4 * MB, 8 * MB, 32 * MB, 512 * MB], float)
    assert list(nvls_tree_chunk_bytes(S, "2.29", 10, 64)) == [32 * KB, 64 * KB, 64 * KB, 64 * KB, 64 * KB]
    # below 4 nodes the 128 KiB NVLS chunk, halved under 4 x ops x chunk (512 MiB at 1024 ops)
    S = np.array([32 * MB, 256 * MB, 4 * GB, 8 * GB], float)
    assert list(nvls_tree_chunk_bytes(S, "2.27.3", 2, 1024)) == [32 * KB, 64 * KB, 128 * KB, 128 * KB]
    # v2.19/2.20 start from the 512 KiB Simple step
    assert list(nvls_tree_chunk_bytes([512 * MB, 4 * GB], "2.19", 2, 64)) == [256 * KB, 512 * KB]
    assert nvls_tree_chunk_bytes([4 * GB], "2.19", 4, 64)[0] == 64 * KB


def test_chunk_equals_the_line_by_line_port_on_random_cases():
    rng = random.Random(7)
    for _ in range(400):
        n_bytes = rng.randrange(1, 1 << 35)
        version = rng.choice([(2, 19), (2, 21), (2, 27), (2, 29)])
        nodes = rng.randrange(2, 130)
        ops = rng.choice([16, 32, 64, 128, 256, 512, 768, 1024])
        got = nvls_tree_chunk_bytes([n_bytes], "%d.%d" % version, nodes, ops)[0]
        assert got == _chunk_reference(n_bytes, version, nodes, ops)


def test_nvls_channels_per_architecture_and_release():
    h100 = PRESETS["dgx-h100"]
    gb = PRESETS["gb200-nvl72"]
    assert nvls_channels(h100, Scale.of(h100, 10, 4)) == 16
    assert nvls_channels(replace(gb, nccl_version="2.27.3"), Scale.of(gb, 32, 4)) == 32
    # one MNNVL clique: NVLS_NCHANNELS_SM100_NVL from 2.27, 32 before
    assert nvls_channels(replace(gb, nccl_version="2.27.3"), Scale.of(gb, 16, 4)) == 24
    assert nvls_channels(replace(gb, nccl_version="2.25"), Scale.of(gb, 16, 4)) == 32


def test_tree_height_is_ncclGetBtree_s_not_log2():
    assert [nvls_tree_height(n) for n in (1, 2, 3, 4, 8, 10, 16, 17)] == [0, 1, 2, 2, 3, 4, 4, 5]
    # 10 nodes: 0 - 8 - 4 - 2 - 1, one hop deeper than tuning.cc's log2i(10) = 3
    assert nvls_tree_height(10) == log2i(10) + 1
    for n in range(1, 200):
        assert nvls_tree_height(n) == _depth_from_root(n)


def test_pipeline_fill_at_h100_10x4_by_hand():
    s = replace(PRESETS["dgx-h100"], nccl_version="2.29")
    sc = Scale.of(s, 10, 4)
    assert nvls_graph(s, sc).channels == 4
    intra = s.intra_bw_GBps * s.nvls_efficiency
    net = 4 * s.nic_bw_GBps * s.tree_efficiency / 2
    S = np.array([32 * MB, 512 * MB], float)
    got = nvls_tree_pipeline_us(s, sc, S, intra, min(intra, net))
    loop = 16 * 4 * 64 * KB                                  # 16 CTAs x 4 heads x 64 KiB
    hop = 8 * 64 * KB / (1000 * s.nic_bw_GBps * s.tree_efficiency)  # one tree's 8 channels on a head's NIC
    # scatter and gather a loop each, and 2h + 1 = 9 chunk stages of a quarter loop at the heads
    want = 2 * 4 * hop + (2 + 9 / 4) * loop / (1000 * intra) - loop / (1000 * min(intra, net))
    assert want > 0
    assert got == pytest.approx([want, want])


def test_pipeline_is_a_partial_loop_below_one_loop_and_zero_on_one_node():
    s = replace(PRESETS["dgx-h100"], nccl_version="2.29")
    sc = Scale.of(s, 10, 4)
    intra, alg = 200.0, 90.0
    small = nvls_tree_pipeline_us(s, sc, [1 * MB], intra, alg)[0]
    full = nvls_tree_pipeline_us(s, sc, [64 * MB], intra, alg)[0]
    # 1 MiB is below one loop of 32 KiB chunks (64 x 32 KiB = 2 MiB): its cost scales with the bytes
    nic = s.nic_bw_GBps * s.tree_efficiency
    assert small == pytest.approx(8 * (1 * MB) / 8 / (1000 * nic) + (2 + 9 / 4) * MB / (1000 * intra) - MB / (1000 * alg))
    assert small < full
    assert nvls_tree_pipeline_us(s, Scale.of(s, 1, 8), [64 * MB], intra, alg)[0] == 0.0
    # never negative, whatever the bottleneck
    assert np.all(nvls_tree_pipeline_us(s, sc, np.geomspace(1e3, 1e10, 40), 1e4, 1.0) >= 0.0)


def test_nvls_tree_price_carries_the_deeper_tree_and_the_fill():
    s = replace(PRESETS["dgx-h100"], nccl_version="2.29")
    sc = Scale.of(s, 10, 4)
    S = np.array([32 * MB, 64 * MB], float)
    t = physical_time_us("all_reduce", "nvls_tree", "Simple", S, s, sc)
    table = _physical_table(s.nccl_version)
    h_net = s.net_hop_latency_us(10) * table["hw"]["NET"]["nvls_tree"][2] / table["hw"]["NET"]["ring"][2]
    h_nvls = s.intra_hop_us * table["hw"]["NVLINK"]["nvls_tree"][2] / table["hw"]["NVLINK"]["ring"][2]
    intra = s.intra_bw_GBps * s.nvls_efficiency
    alg = min(intra, nvls_tree_nics(s, sc) * s.nic_bw_GBps * s.fabric_factor(10) * s.tree_efficiency / 2)
    lat = table["base"]["nvls_tree"][2] + s.launch_us + h_nvls + 2 * 4 * h_net + s.net_simple_base_us
    fill = nvls_tree_pipeline_us(s, sc, S, intra, alg)
    assert fill[0] > 10.0
    assert t == pytest.approx(lat + fill + S / (1000 * alg))
    # NCCL's own estimate keeps tuning.cc's log2i hops and no fill: the pick is NCCL's, unchanged
    est = nccl_estimate_us("all_reduce", "nvls_tree", "Simple", S, s, sc)
    assert np.all(est < t)


def test_two_nodes_network_bound_adds_only_the_nvls_stage():
    # 2 nodes: one hop up, one down, each node's NIC sends one tree's half up and the other's down,
    # so a loop's path through the network is the period itself
    s = replace(PRESETS["dgx-h100"], nccl_version="2.29")
    sc = Scale.of(s, 2, 8)
    heads = nvls_graph(s, sc).channels
    net = heads * s.nic_bw_GBps * s.tree_efficiency
    intra = 10 * net
    S = np.array([8 * GB], float)
    loop = 16 * heads * 128 * KB
    # scatter, gather, and the 3 chunk stages at the heads (leaf reduce, root reduce-broadcast, leaf broadcast)
    assert nvls_tree_pipeline_us(s, sc, S, intra, net)[0] == pytest.approx((2 + 3 / heads) * loop / (1000 * intra))
    assert math.isclose(nvls_tree_height(2), 1)


def test_two_gpus_per_node_run_nvls_only_from_2_28_9():
    # nvls.cc ncclNvlsInit: gpuCount <= 2 disables NVLS up to 2.28.7, gpuCount < 2 from 2.28.9
    for version, ok in (("2.27.3", False), ("2.28", False), ("2.28.7", False), ("2.28.9", True), ("2.29", True)):
        s = replace(PRESETS["dgx-h100"], nccl_version=version)
        why = runnable("all_reduce", "nvls_tree", "Simple", s, Scale.of(s, 10, 2))
        assert (why is None) == ok, (version, why)
        assert runnable("all_reduce", "nvls_tree", "Simple", s, Scale.of(s, 10, 4)) is None
        assert ("nvls", "Simple") in plan("all_reduce", s, 1, 3).candidates

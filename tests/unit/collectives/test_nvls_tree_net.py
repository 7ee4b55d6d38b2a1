"""NVLS tree across nodes: the pipeline fill of the kernel's per-loop stages (src/device/all_reduce.h,
RunWorkColl NVLS_TREE/Simple): scatter a whole loop, a head's chunk reduced at every tree level on
the way up and broadcast at every level on the way down, gather a whole loop; each stage a Simple
step stored and forwarded whole, NCCL_STEPS slots deep."""

from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.nccl.nvls import (
    nvls_channels, nvls_graph, nvls_tree_chunk_bytes, nvls_tree_height, nvls_tree_pipeline_us,
)
from commsim.collectives.nccl.scale import Scale
from commsim.network.system import PRESETS
from tests.unit.collectives.flow_shop import flow_shop_us

KB = 1024.0
MB = 1024.0 * KB


def _stages_us(system, scale, loop, intra):
    """The deepest path's stages, in order, for one loop of `loop` bytes per rank, built from the
    kernel's warp roles: scatter, (h + 1) head reduces with h network hops between them, the
    root's reduce-and-broadcast counted among them, h hops and h head broadcasts down, gather."""
    heads = nvls_graph(system, scale).channels
    h = nvls_tree_height(scale.domains)
    nic = system.nic_bw_GBps * system.fabric_factor(scale.domains) * system.tree_efficiency
    whole = loop / (1000.0 * intra)                 # a whole loop through the node
    chunk = loop / heads / (1000.0 * intra)         # a head's chunk over all channels
    hop = loop / (2.0 * heads) / (1000.0 * nic)     # one tree's half of a head's channels on its NIC
    up = [chunk]
    for _ in range(h):
        up += [hop, chunk]                           # the last chunk is the root's reduce-and-broadcast
    down = []
    for _ in range(h):
        down += [hop, chunk]
    return [whole] + up + down + [whole]


CASES = [
    ("gb200-nvl72", "2.27.3", 32, 4),
    ("gb200-nvl72", "2.27.3", 48, 4),
    ("dgx-h100", "2.29", 10, 4),
    ("dgx-h100", "2.29", 10, 8),
    ("dgx-h100", "2.29", 5, 8),
    ("dgx-h100", "2.29", 17, 8),
]


@pytest.mark.parametrize("preset,version,nodes,gpus", CASES)
def test_fill_equals_a_step_by_step_walk_of_the_kernel_s_stages(preset, version, nodes, gpus):
    s = replace(PRESETS[preset], nccl_version=version)
    sc = Scale.of(s, nodes, gpus)
    rng = np.random.default_rng(nodes * 100 + gpus)
    heads = nvls_graph(s, sc).channels
    ops = nvls_channels(s, sc) * heads
    nic = s.nic_bw_GBps * s.fabric_factor(sc.domains) * s.tree_efficiency
    walked = 0
    for _ in range(4):
        # the node binds (no hop slower than a whole loop in the node): the period is that stage's
        intra = float(rng.uniform(100.0, min(900.0, 2 * heads * nic)))
        k = int(rng.integers(2, 40))
        big = float(1 << 34)
        loop = ops * float(nvls_tree_chunk_bytes([big], s.nccl_version, sc.domains, ops)[0])
        S = k * loop
        if nvls_tree_chunk_bytes([S], s.nccl_version, sc.domains, ops)[0] * ops != loop:
            continue  # a smaller chunk at this size: not the loop the walk assumes
        period = loop / (1000.0 * intra)
        stages = _stages_us(s, sc, loop, intra)
        assert max(stages) == pytest.approx(period)
        walk = flow_shop_us(stages, k)
        got = nvls_tree_pipeline_us(s, sc, [S], intra, intra)[0]
        assert walk - k * period == pytest.approx(got, rel=1e-9)
        walked += 1
    assert walked > 0


def test_gb200_two_racks_by_hand():
    # 2.27.3 across 2 NVL72 cliques: 32 NVLS channels x 32 heads x 128 KiB (fewer than 4 nodes: no
    # 64 KiB cap) = 128 MiB a loop; a 1-hop tree: scatter, leaf reduce, hop, root reduce-broadcast,
    # hop, leaf broadcast, gather
    s = replace(PRESETS["gb200-nvl72"], nccl_version="2.27.3")
    sc = Scale.of(s, 32, 4)
    assert (sc.domains, nvls_graph(s, sc).channels, nvls_channels(s, sc)) == (2, 32, 32)
    intra = 490.0
    loop = 32 * 32 * 128 * KB
    nic = s.nic_bw_GBps * s.fabric_factor(2) * s.tree_efficiency
    hop = loop / 64 / (1000 * nic)
    want = 2 * hop + (2 + 3 / 32) * loop / (1000 * intra) - loop / (1000 * intra)
    got = nvls_tree_pipeline_us(s, sc, [32 * loop], intra, intra)[0]
    assert got == pytest.approx(want)
    # about one whole loop beyond the old single in-node stage: 128 MiB at 490 GB/s
    assert got - (2 * hop) == pytest.approx(loop / (1000 * intra) * (1 + 3 / 32))


def test_one_node_has_no_fill_here():
    s = replace(PRESETS["gb200-nvl72"], nccl_version="2.27.3")
    assert nvls_tree_pipeline_us(s, Scale.of(s, 16, 4), [4 * MB * 1024], 490.0, 490.0)[0] == 0.0

"""The double binary tree's network hops in the physical price are the height of the tree NCCL
connects (ncclGetDtree's btree), not tuning.cc's log2i(nNodes) estimate."""

import numpy as np
import pytest

from commsim.collectives.nccl.nvls import nvls_tree_height
from commsim.collectives.nccl.physical import physical_time_us
from commsim.collectives.nccl.scale import Scale, log2i
from commsim.network.system import preset


@pytest.mark.parametrize("nodes, hops", [(2, 1), (4, 2), (8, 3), (10, 4), (16, 4), (17, 5)])
def test_btree_height(nodes, hops):
    assert nvls_tree_height(nodes) == hops


def test_tree_latency_counts_the_real_depth_at_ten_nodes():
    """1 GPU per node: 8 and 10 nodes are both log2i = 3 levels to NCCL's estimate, but the tree
    over 10 nodes is 4 hops deep (0-8-4-2-1). At a tiny size the price is its latency, so 10 nodes
    cost two more network hops (one up, one down) than 8, not the same."""
    s = preset("dgx-h100")
    S = np.array([8.0])
    t = {d: physical_time_us("all_reduce", "tree", "Simple", S, s, Scale.of(s, d, 1))[0] for d in (8, 10, 16)}
    assert log2i(8) == log2i(10) == 3
    # Tree/Simple's network hop is the level's Simple hop (14 us nominal on this preset)
    assert t[10] - t[8] == pytest.approx(2 * s.net_hop_us, rel=1e-9)
    assert t[16] == pytest.approx(t[10], rel=1e-12)  # 16 nodes: 4 hops too

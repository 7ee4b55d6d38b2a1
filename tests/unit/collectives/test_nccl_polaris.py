"""NCCL's tree depth and Tree/Simple chunking (enqueue.cc), at the Polaris scales 2x4 and 8x4."""

import numpy as np
from hypothesis import given, strategies as st

from commsim.collectives.nccl_tuner import SIMPLE_STEP_BYTES, Scale, tree_depth, tree_simple_chunks
from commsim.network.system import preset

KB, MB = 1 << 10, 1 << 20


def test_tree_depth_is_the_chain_plus_the_network_levels():
    s = preset("polaris")
    assert tree_depth(Scale.of(s, 2, 4)) == 3 + 1
    assert tree_depth(Scale.of(s, 8, 4)) == 3 + 3
    assert tree_depth(Scale.of(s, 128, 4)) == 3 + 7
    assert tree_depth(Scale.of(s, 8, 1)) == 0 + 3


def test_chunks_follow_enqueue_cc_by_hand():
    # 8 MB on 4 channels = 2 MB per channel. Depth 4 (2x4): 512K -> 256K -> 128K (16 chunks,
    # the first loop stops at 128K; 16 is not < 4*4) -> 16 chunks. Depth 6 (8x4): 128K gives 16
    # < 24, so 64K: 32 chunks.
    assert tree_simple_chunks([8 * MB], 4, 4).tolist() == [16.0]
    assert tree_simple_chunks([8 * MB], 4, 6).tolist() == [32.0]
    # 1 MB on 4 channels = 256K per channel: depth 4 -> 64K (4 chunks, not < 4); depth 6 -> 64K
    # gives 4 < 6, so 32K: 8 chunks.
    assert tree_simple_chunks([1 * MB], 4, 4).tolist() == [4.0]
    assert tree_simple_chunks([1 * MB], 4, 6).tolist() == [8.0]
    # a huge message keeps the full 512 KiB step
    assert tree_simple_chunks([1024 * MB], 4, 6).tolist() == [1024 * MB / 4 / SIMPLE_STEP_BYTES]
    # a tiny one is one chunk
    assert tree_simple_chunks([4 * KB], 1, 6).tolist() == [1.0]


@given(st.integers(10, 30), st.sampled_from([1, 2, 4, 8]), st.integers(1, 12))
def test_a_deeper_tree_never_has_fewer_or_larger_chunks(log_size, channels, depth):
    S = [float(2 ** log_size)]
    a = tree_simple_chunks(S, channels, depth)[0]
    b = tree_simple_chunks(S, channels, depth + 1)[0]
    assert b >= a
    # chunks never go below NCCL's 32 KiB floor: at most bytes / (channels x 32 KiB), at least 1
    assert 1.0 <= b <= max(1.0, np.ceil(S[0] / (channels * 32 * KB)))

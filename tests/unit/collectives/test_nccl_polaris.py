"""NCCL's tree depth and Tree/Simple chunking (enqueue.cc), at the Polaris scales 2x4 and 8x4."""

import numpy as np
from hypothesis import given, strategies as st

from commsim.collectives.nccl.scale import Scale
from commsim.collectives.nccl.simple import SIMPLE_STEP_BYTES, tree_depth, tree_simple_chunks
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


# --- the per-message step cost of the libfabric plugin, paid once per launched channel ----------

import os  # noqa: E402
from dataclasses import replace  # noqa: E402

import pytest  # noqa: E402

from commsim.calibration.nccl_tables import load_tables  # noqa: E402
from commsim.collectives.nccl.physical import channels_used, net_step_floor_us, physical_time_us  # noqa: E402
from commsim.collectives.nccl.scale import LL, SIMPLE  # noqa: E402
from commsim.errors import InputError  # noqa: E402
from commsim.network.system import System, system_from_dict  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "nccl-tests-multiscale")


def _polaris(flag: bool) -> System:
    return replace(preset("polaris"), nccl_version="2.18", net_step_per_channel=flag)


def test_the_polaris_presets_pay_the_step_cost_per_channel_and_ib_systems_do_not():
    assert preset("polaris").net_step_per_channel and preset("polaris-socket").net_step_per_channel
    assert not preset("dgx-h100").net_step_per_channel


def test_floor_is_per_channel_for_ll_only():
    on, off = _polaris(True), _polaris(False)
    nc = np.array([1.0, 2.0, 4.0])
    assert net_step_floor_us(on, LL, nc).tolist() == [on.net_step_us * k for k in (1, 2, 4)]
    assert net_step_floor_us(off, LL, nc).tolist() == [off.net_step_us] * 3
    # Simple keeps NCCL's x3, once per step, on both
    assert net_step_floor_us(on, SIMPLE, nc).tolist() == [3 * on.net_step_us] * 3


def test_ring_ll_at_8x4_slows_with_the_channels_launched_as_measured():
    # 128K, 256K, 512K all-gather at 8x4 launch 1, 2, 4 LL channels with 4 KB per channel each.
    S = np.array([128, 256, 512], dtype=float) * KB
    sc = Scale.of(_polaris(True), 8, 4)
    assert channels_used("ring", LL, S, 4, sc.ranks).tolist() == [1.0, 2.0, 4.0]
    lt = load_tables(os.path.join(DATA, "Polaris-A100_8x4_alcf-nccl2.18-allgather.txt"), world_size=32,
                     kind_hint="all_gather")
    meas = {int(r[0]): r[1] for r in lt.tables[0].rows}
    ratio_meas = meas[512 * KB] / meas[128 * KB]
    assert ratio_meas > 3.0  # 896.5 / 278.4 us: the step time grows with the channels, not the bytes
    t_on = physical_time_us("all_gather", "ring", LL, S, _polaris(True), sc)
    t_off = physical_time_us("all_gather", "ring", LL, S, _polaris(False), sc)
    assert t_on[2] / t_on[0] > 2.0
    assert t_off[2] / t_off[0] == pytest.approx(1.0)  # the per-channel-parallel model sees no change
    assert t_on[0] == pytest.approx(t_off[0])         # one channel: the same floor


def test_the_flag_reads_back_and_is_checked():
    s = preset("polaris")
    assert system_from_dict(s.describe(), "cal.yaml").net_step_per_channel is True
    doc = s.describe()
    doc["net_step_per_channel"] = "yes"
    with pytest.raises(InputError) as e:
        system_from_dict(doc, "cal.yaml")
    assert "net_step_per_channel" in str(e.value)

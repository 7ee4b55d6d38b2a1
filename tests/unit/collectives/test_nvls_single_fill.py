"""Single-node NVLS all-reduce: the pipeline fill of the kernel's per-loop stages (src/device/
all_reduce.h, RunWorkColl NVLS/Simple, oneNode): scatter a whole loop, each head reduces and
multicasts its chunk, gather a whole loop; each stage a Simple step stored and forwarded whole,
NCCL_STEPS slots deep, every channel a pipeline of its own; and enqueue.cc's NVLS chunk."""

from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.nccl.nvls import nvls_channels, nvls_chunk_bytes, nvls_graph, nvls_pipeline_us
from commsim.collectives.nccl.physical import _physical_table, physical_time_us
from commsim.collectives.nccl.scale import Scale
from commsim.network.system import PRESETS
from tests.unit.collectives.flow_shop import flow_shop_us

KB = 1024.0
MB = 1024.0 * KB


def _chunk_per_channel(channel_bytes, heads):
    """enqueue.cc calcCollChunking, NCCL_ALGO_NVLS, as 2.22+ calls it: nChannels = 1 on one
    channel's share (scheduleCollTasksToPlan), one node (no 32 KiB CollNet cap)."""
    chunk = 128 * 1024  # min(stepSize = 4 MiB / NCCL_STEPS, comm->nvlsChunkSize = 128 KiB)
    ops = 1 * heads
    if channel_bytes < 64 * ops * chunk and chunk > 65536:
        chunk = 65536
    if channel_bytes < 8 * ops * chunk and chunk > 32768:
        chunk = 32768
    if channel_bytes < 2 * ops * chunk and chunk > 16384:
        chunk = 16384
    return chunk


CASES = [("dgx-h100", "2.29", 8), ("dgx-h100", "2.29", 4), ("gb200-nvl72", "2.27.3", 4)]


@pytest.mark.parametrize("preset,version,gpus", CASES)
def test_chunk_equals_the_per_channel_rule(preset, version, gpus):
    s = replace(PRESETS[preset], nccl_version=version)
    sc = Scale.of(s, 1, gpus)
    heads = nvls_graph(s, sc).channels
    C = nvls_channels(s, sc)
    rng = np.random.default_rng(gpus)
    sizes = np.concatenate([2.0 ** rng.uniform(14, 33, 200), 2.0 ** np.arange(14, 34)])
    sizes = np.floor(sizes / C) * C  # even channel shares
    got = nvls_chunk_bytes(sizes, C * heads)
    want = [_chunk_per_channel(S / C, heads) for S in sizes]
    assert list(got) == want


def test_h100_chunks_by_hand():
    # 16 channels x 8 heads: 128 KiB from 1 GiB, 64 KiB from 64 MiB, 32 KiB from 8 MiB, else 16 KiB
    got = nvls_chunk_bytes([4 * MB, 8 * MB, 63 * MB, 64 * MB, 1023 * MB, 1024 * MB], 128)
    assert list(got) == [16384, 32768, 32768, 65536, 65536, 131072]


@pytest.mark.parametrize("preset,version,gpus", CASES)
def test_fill_equals_a_step_by_step_walk_of_the_kernel_s_stages(preset, version, gpus):
    s = replace(PRESETS[preset], nccl_version=version)
    sc = Scale.of(s, 1, gpus)
    heads = nvls_graph(s, sc).channels
    C = nvls_channels(s, sc)
    rng = np.random.default_rng(10 + gpus)
    walked = 0
    for _ in range(6):
        intra = float(rng.uniform(100.0, 900.0))
        k = int(rng.integers(2, 40))
        chunk = float(rng.choice([16384, 32768, 65536, 131072]))
        S = k * C * heads * chunk
        if nvls_chunk_bytes([S], C * heads)[0] != chunk:
            continue  # not the chunk NCCL takes at this size
        # one channel: its share at 1/C of the in-node rate, loop = heads chunks
        rate = intra / C
        loop = heads * chunk
        stages = [loop / (1000 * rate), chunk / (1000 * rate), loop / (1000 * rate)]
        period = loop / (1000 * rate)
        walk = flow_shop_us(stages, k)
        got = nvls_pipeline_us(s, sc, [S], intra, intra)[0]
        assert walk - k * period == pytest.approx(got, rel=1e-9)
        walked += 1
    assert walked > 0


def test_h100_one_node_by_hand():
    # 256 MiB on 8 H100s: 16 MiB a channel, 64 KiB chunks, 512 KiB loops (8 MiB over 16 channels);
    # fill (1 + 1/8) loops at the in-node rate
    s = replace(PRESETS["dgx-h100"], nccl_version="2.29")
    sc = Scale.of(s, 1, 8)
    got = nvls_pipeline_us(s, sc, [256 * MB], 300.0, 300.0)[0]
    assert got == pytest.approx(1.125 * 8 * MB / (1000 * 300.0))
    # below one loop the loop is the size
    got = nvls_pipeline_us(s, sc, [1 * MB], 300.0, 300.0)[0]
    assert got == pytest.approx(1.125 * MB / (1000 * 300.0))


def test_priced_into_one_node_all_reduce_only():
    s = replace(PRESETS["dgx-h100"], nccl_version="2.29")
    sc = Scale.of(s, 1, 8)
    S = np.array([16 * MB])
    intra = s.intra_bw_GBps * s.nvls_efficiency
    fill = nvls_pipeline_us(s, sc, S, intra, intra)[0]
    assert fill > 0
    t = _physical_nvls(s, sc, S)
    assert t == pytest.approx(s.launch_us + _h_nvls(s) + fill + 16 * MB / (1000 * intra))
    # across nodes NVLS tree has its own fill
    assert nvls_pipeline_us(s, Scale.of(s, 2, 8), S, intra, intra)[0] == 0.0


def _h_nvls(s):
    t = _physical_table(s.nccl_version)
    return s.intra_hop_us * t["hw"]["NVLINK"]["nvls"][2] / t["hw"]["NVLINK"]["ring"][2]


def _physical_nvls(s, sc, S):
    return physical_time_us("all_reduce", "nvls", "Simple", S, s, sc)[0]

"""A Simple ring step's messages and the network plugin's rendezvous cost: the slices NCCL's
primitives post per step (exact cases and a port of the device loop on random cases), the count
above the plugin's eager limit, the per-step floor it sets in a ring's price and the per-chunk
cost in a tree's (only where the system has a rendezvous threshold, only across nodes, only for
Simple)."""

from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.nccl.graph import nccl_channels
from commsim.collectives.nccl.physical import channels_used, physical_time_us, priced_by
from commsim.collectives.nccl.scale import ALGORITHMS, PROTOCOLS, Scale
from commsim.collectives.nccl.simple import rendezvous_work_us, simple_ring_slices, tree_depth, tree_simple_chunks
from commsim.errors import InputError
from commsim.network.system import PRESETS, System, preset

KB, MB = 1 << 10, 1 << 20


def _polaris(**kw):
    return replace(preset("polaris"), nccl_version="2.18", **kw)


@pytest.mark.parametrize("ranks,size,slices", [
    (8, 1 * MB, (32 * KB, 0)),        # 2x4 all_gather 1M: one 32 KiB message (and an empty one)
    (8, 2 * MB, (32 * KB, 32 * KB)),  # 2M: two
    (8, 4 * MB, (64 * KB, 64 * KB)),
    (32, 4 * MB, (32 * KB, 0)),       # 8x4 crosses at 4M -> 8M
    (32, 8 * MB, (32 * KB, 32 * KB)),
    (512, 64 * MB, (32 * KB, 0)),     # 128x4 at 64M -> 128M
    (512, 128 * MB, (32 * KB, 32 * KB)),
    (8, 1 << 30, (MB, MB)),           # a chunk is at most stepSize x 4 = 2 MiB
    (8, 256 * KB, (8 * KB, 0)),       # below 64 KiB a chunk is one slice
    (8, 8 * 4 * 1000, (4000, 0)),     # rounded up to the 4 KiB grain, capped at the rank's bytes
])
def test_slices_per_step_exact_cases(ranks, size, slices):
    got = simple_ring_slices(np.array([float(size)]), ranks, 4)
    assert tuple(got[0]) == slices


def _device_loop_slices(size_bytes: int, ranks: int, channels: int):
    """NCCL 2.18's runRing (all_gather.h) and ProtoSimple::genericOp (prims_simple.h) for the
    first channel, in float elements: the reference the vectorised form must equal."""
    elt = 4
    count = size_bytes // elt // ranks                 # a rank's elements
    step = (4 << 20) // 8 // elt                       # stepSize
    chunk = step * 4                                   # x ALLGATHER_CHUNKSTEPS
    real = min(chunk, -(-count // channels))
    grain = (544 - 32) * 8 // elt                      # (nthreads - WARP_SIZE) * 8 / sizeof(T)
    real = -(-real // grain) * grain
    nelem = min(real, count)                           # channel 0's chunk
    slice_ = max(-(-nelem // 32) * 16, step * 2 // 32)  # divUp(nelem, 16*SlicePerChunk)*16, sliceSize/32
    out, offset = [], 0
    for _ in range(2):                                 # SlicePerChunk = 2
        s = min(slice_, nelem - offset) if offset < nelem else 0
        out.append(s * elt)
        offset += s
    return tuple(out)


def test_slices_equal_the_device_loop_on_random_cases():
    rng = np.random.default_rng(7)
    for _ in range(300):
        ranks = int(rng.choice([2, 4, 8, 16, 32, 64, 512]))
        channels = int(rng.integers(1, 9))
        size = int(rng.integers(1, 1 << 28)) // (4 * ranks) * (4 * ranks) or 4 * ranks
        got = simple_ring_slices(np.array([float(size)]), ranks, channels)[0]
        assert tuple(int(v) for v in got) == _device_loop_slices(size, ranks, channels), (size, ranks, channels)


def test_rendezvous_count_follows_the_threshold():
    S = np.array([256 * KB, 1 * MB, 2 * MB, 4 * MB], dtype=float)
    s = _polaris(net_rdzv_us=10.0)
    assert s.net_rdzv_threshold_bytes == 4097
    slices = simple_ring_slices(S, 8, 4)
    step = lambda system: rendezvous_work_us(system, slices).sum(axis=-1)  # the step's rendezvous work
    np.testing.assert_array_equal(step(s), [10.0, 10.0, 20.0, 20.0])
    # libfabric >= 2.3's 16384 + 2049 (18433): the 8 KiB slice goes eagerly, the others do not
    np.testing.assert_array_equal(step(replace(s, net_rdzv_threshold_bytes=18433)), [0.0, 10.0, 20.0, 20.0])
    np.testing.assert_array_equal(step(replace(s, net_rdzv_threshold_bytes=40000)), [0.0, 0.0, 0.0, 20.0])
    np.testing.assert_array_equal(step(replace(s, net_rdzv_threshold_bytes=None)), 0.0)


def _t(kind, system, nodes, size, protocol="Simple", algorithm="ring"):
    sc = Scale.of(system, nodes, 4)
    return float(physical_time_us(kind, algorithm, protocol, np.array([float(size)]), system, sc)[0])


@pytest.mark.parametrize("kind,nodes,size,steps,messages", [
    ("all_gather", 2, 1 * MB, 7, 1),
    ("all_gather", 2, 2 * MB, 7, 2),
    ("all_gather", 8, 8 * MB, 31, 2),
    ("all_reduce", 2, 4 * MB, 14, 2),   # 4M / 8 ranks / 4 channels = 128 KiB a step: two 64 KiB slices
    ("all_reduce", 8, 4 * MB, 62, 1),
])
def test_every_ring_step_lasts_at_least_its_rendezvous_messages(kind, nodes, size, steps, messages):
    # a cost far above every other per-step term is the floor of every step: raising it by 1000
    # raises the time by steps x messages x 1000, exactly
    a, b = _polaris(net_rdzv_us=1000.0), _polaris(net_rdzv_us=2000.0)
    assert _t(kind, b, nodes, size) - _t(kind, a, nodes, size) == pytest.approx(steps * messages * 1000.0)


def test_the_jump_at_64k_per_channel_is_one_rendezvous_per_step():
    # all_gather 2x4, 1M -> 2M (a channel's chunk 32 KiB -> 64 KiB): with the cost above the proxy's
    # per-step floor, the second message adds one cost to each of the 7 steps, and the step's
    # transfer (t at 2M; 1M more bytes: jump_off = 7 t / 2) now hides behind the two costs:
    # jump_on = 7 (2c - c) - 7 t + jump_off = 7 c - jump_off
    s = _polaris(net_rdzv_us=40.0)
    off = _polaris(net_rdzv_threshold_bytes=None)
    jump_on = _t("all_gather", s, 2, 2 * MB) - _t("all_gather", s, 2, 1 * MB)
    jump_off = _t("all_gather", off, 2, 2 * MB) - _t("all_gather", off, 2, 1 * MB)
    assert jump_on + jump_off == pytest.approx(7 * 40.0)


@pytest.mark.parametrize("kind,nodes,protocol,algorithm", [
    ("all_gather", 1, "Simple", "ring"),    # inside a node nothing crosses the network
    ("all_gather", 2, "LL", "ring"),        # LL's lines are small eager messages
    ("all_reduce", 2, "LL", "tree"),
])
def test_no_rendezvous_outside_simple_steps_across_nodes(kind, nodes, protocol, algorithm):
    a, b = _polaris(net_rdzv_us=1000.0), _polaris(net_rdzv_us=2000.0)
    assert _t(kind, a, nodes, 8 * MB, protocol, algorithm) == _t(kind, b, nodes, 8 * MB, protocol, algorithm)


def test_only_polaris_has_a_threshold_so_no_other_preset_moves():
    for name, s in PRESETS.items():
        if name == "polaris":
            assert s.net_rdzv_threshold_bytes == 2048 + 2049
            assert "rdzv_get_min" in s.sources["net_rdzv_threshold_bytes"]
            continue
        assert s.net_rdzv_threshold_bytes is None, name
        sc = Scale.of(s, 4, min(4, s.gpus_per_node))
        S = np.array([4.0 * MB, 64.0 * MB])
        moved = s.with_constants({"net_rdzv_us": 500.0}, "test")
        np.testing.assert_array_equal(physical_time_us("all_gather", "ring", "Simple", S, moved, sc),
                                      physical_time_us("all_gather", "ring", "Simple", S, s, sc))


def test_priced_by_names_it_for_a_system_with_a_threshold():
    s = _polaris()
    sc = Scale.of(s, 2, 4)
    assert "net_rdzv_us" in priced_by("ring", "Simple", sc, s)
    assert "net_rdzv_us" not in priced_by("ring", "Simple", sc)
    assert "net_rdzv_us" in priced_by("tree", "Simple", sc, s)
    assert "net_rdzv_us" not in priced_by("ring", "LL", sc, s)
    assert "net_rdzv_us" not in priced_by("ring", "Simple", Scale.of(s, 1, 4), s)
    assert "net_rdzv_us" not in priced_by("ring", "Simple", sc, preset("dgx-h100"))
    S = np.array([1.0 * MB, 16.0 * MB])
    for a in ALGORITHMS:
        for p in PROTOCOLS:
            if "net_rdzv_us" in priced_by(a, p, sc, s):
                continue
            moved = s.with_constants({"net_rdzv_us": 900.0}, "test")
            np.testing.assert_array_equal(physical_time_us("all_reduce", a, p, S, moved, sc),
                                          physical_time_us("all_reduce", a, p, S, s, sc), err_msg=f"{a}/{p}")


@pytest.mark.parametrize("bad", [-1, 4097.0, True, "4097"])
def test_a_bad_threshold_is_an_input_error_naming_the_field(bad):
    with pytest.raises(InputError) as e:
        replace(preset("polaris"), net_rdzv_threshold_bytes=bad)
    assert e.value.path == "net_rdzv_threshold_bytes"


def test_the_cost_is_a_fitted_physical_constant():
    assert "net_rdzv_us" in System.FIT_NAMES
    with pytest.raises(InputError):
        replace(preset("polaris"), net_rdzv_us=0.0)


@pytest.mark.parametrize("nodes,size", [(2, 256 * KB), (2, 2 * MB), (8, 8 * MB)])
def test_a_simple_tree_pays_one_rendezvous_per_chunk(nodes, size):
    a, b = _polaris(net_rdzv_us=1000.0), _polaris(net_rdzv_us=2000.0)
    sc = Scale.of(a, nodes, 4)
    nc = channels_used("tree", "Simple", np.array([float(size)]), nccl_channels(a, sc), sc.ranks)
    chunks = float(tree_simple_chunks(np.array([float(size)]), nc, tree_depth(sc))[0])
    assert chunks >= 2
    diff = _t("all_reduce", b, nodes, size, algorithm="tree") - _t("all_reduce", a, nodes, size, algorithm="tree")
    assert diff == pytest.approx(chunks * 1000.0)

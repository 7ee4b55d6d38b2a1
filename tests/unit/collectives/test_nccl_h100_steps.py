"""A Simple ring channel's chunk loops (NCCL's nLoops), and the per-step table that compares the
H100 cluster's logs with the model step by step (``benchmarks/cross_scale.py --ring-steps``)."""

import os
from pathlib import Path

import numpy as np
import pytest

from commsim.calibration.nccl_tables import load_tables
from commsim.collectives.nccl.simple import SIMPLE_RING_CHUNK_BYTES, simple_ring_loops, simple_ring_slices
from tests.conftest import load_benchmark

MB = 1 << 20
ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "nccl-tests-multiscale"


@pytest.mark.parametrize("size, ranks, channels, chunk, loops", [
    # 10x4 all_gather 512 MiB: a channel's share 838,861 B, one loop of a 4096-B-grained chunk
    (512 * MB, 40, 16, 839680, 1),
    # 10x1 all_gather 128 MiB: share 3.2 MiB over 2 MiB chunks (stepSize 512 KiB x CHUNKSTEPS 4)
    (128 * MB, 10, 4, 2 * MB, 2),
    # 2x1 all_reduce 32 MiB: share 4 MiB, exactly two full chunks
    (32 * MB, 2, 4, 2 * MB, 2),
    # 10x8 16 GiB: share 12.8 MiB -> 7 loops, the last one partial
    (16384 * MB, 80, 16, 2 * MB, 7),
    # a size far below one loop on one channel: one loop of what there is (ceil(1024 / 80) B)
    (1024, 80, 1, 13, 1),
])
def test_simple_ring_loops_exact(size, ranks, channels, chunk, loops):
    S = np.array([float(size)])
    assert float(np.sum(simple_ring_slices(S, ranks, channels))) == chunk
    assert simple_ring_loops(S, ranks, channels)[0] == loops


def test_loops_of_chunks_cover_a_channels_share_and_no_more():
    rng = np.random.default_rng(7)
    S = np.floor(np.exp(rng.uniform(np.log(1e3), np.log(6e10), 400)))
    for ranks, channels in ((2, 4), (10, 4), (20, 8), (40, 16), (80, 16), (80, 1)):
        share = np.ceil(S / ranks / channels)
        chunk = np.sum(simple_ring_slices(S, ranks, channels), axis=-1)
        loops = simple_ring_loops(S, ranks, channels)
        assert np.all(loops * chunk >= share)
        assert np.all((loops - 1) * chunk < share)
        assert np.all(chunk <= SIMPLE_RING_CHUNK_BYTES)


@pytest.fixture(scope="module")
def cross_scale():
    return load_benchmark("cross_scale")


def test_ring_step_table_for_the_h100_cluster_is_the_logs_and_the_model_per_step(cross_scale):
    series = next(s for s in cross_scale.SERIES if s.name == "H100-cluster01")
    rows = cross_scale.ring_step_rows(series)
    assert rows and all(r["pick"].startswith("ring/") for r in rows)
    assert not any(r["scale"] in ("1x4", "1x8", "2x1") for r in rows)  # calibration logs are not predicted
    r = next(r for r in rows if r["log"] == "H100-cluster01_10x4_xxrjun.txt" and r["kind"] == "all_gather"
             and r["size_bytes"] == 536870400)
    assert (r["pick"], r["channels"], r["channels_per_nic"], r["chunk_bytes"], r["loops"], r["steps"]) == \
        ("ring/Simple", 16, 4.0, 839680.0, 1, 39)
    table = next(t for t in load_tables(os.fspath(DATA / r["log"]), world_size=40).tables if t.kind == "all_gather")
    measured = {int(row[0]): row[1] for row in table.rows}[r["size_bytes"]]
    assert r["measured_us_per_step"] == pytest.approx(measured / 39, rel=1e-12)
    # the model's latency and bandwidth terms add up to its time; the excess is the log above the latter
    model_us = r["model_us_per_step"] * 39
    bw_us = model_us - r["model_latency_us_per_step"] * 39
    assert r["excess_us_per_step"] * 39 == pytest.approx(measured - bw_us, rel=1e-9)
    # the model's latency here is 9 network hops (the nominal 14 us: the 2x1 log no longer reads its
    # loop-boundary idle time as a hop) and 30 NVLink hops, ~280 us; the log leaves 3.5 us per step
    # (~140 us per collective) above the model's bandwidth term: less than the model's latency
    assert 200.0 < r["model_latency_us_per_step"] * 39 < 400.0
    assert 0.0 < r["excess_us_per_step"] < r["model_latency_us_per_step"]


def test_ring_intercepts_recover_a_line_exactly(cross_scale):
    sizes = [256 * MB, 512 * MB, 1024 * MB, 2048 * MB, 4096 * MB]
    rows = [{"log": "L", "scale": "10x4", "kind": "all_gather", "size_bytes": S, "pick": "ring/Simple",
             "steps": 39, "loops": 1, "measured_us_per_step": (90.0 + S * 5e-6) / 39,
             "model_latency_us_per_step": 540.0 / 39} for S in sizes]
    rows.insert(0, dict(rows[0], size_bytes=128 * MB, pick="ring/LL128", measured_us_per_step=1e6))
    (q,) = cross_scale.ring_intercepts(rows)
    assert q["sizes"] == sizes[:4]  # LL128 and > 2 GiB rows left out
    assert q["intercept_us"] == pytest.approx(90.0, abs=1e-6)
    assert q["intercept_stderr_us"] == pytest.approx(0.0, abs=1e-6)
    assert (q["model_latency_us"], q["ring_steps"]) == (pytest.approx(540.0), 39)


def test_h100_simple_ring_fixed_cost_per_collective_from_the_logs(cross_scale):
    series = next(s for s in cross_scale.SERIES if s.name == "H100-cluster01")
    by = {(q["log"], q["kind"]): q for q in cross_scale.ring_intercepts(cross_scale.ring_step_rows(series))}
    q = by[("H100-cluster01_10x4_xxrjun.txt", "all_gather")]
    assert [s // MB for s in q["sizes"]] == [511, 1023, 2047]
    assert q["intercept_us"] == pytest.approx(91.0, abs=1.0)
    assert q["ring_steps"] == 39

"""The H100 cluster (xxrjun cluster01, 10 nodes x 1/2/4/8 H100, NCCL 2.29.2): the structure the
model gives its rings at 10x4 and 10x8, each checked against what the logs in tests/data show.

- 10x4 drives the 4 NICs of its 4 GPUs and no more: its large-size busbw is 4 x the per-NIC
  rate 10x1 measures (PXN onto the other 4 NICs would allow up to 8 x).
- 10x8 and 10x4 both run 16 channels, on 8 and 4 NICs: 2 and 4 channels (QPs) per NIC.
- PAT is off with more than one GPU per node (tuning.cc ncclPatEnable: ``nNodes != nRanks``),
  so 10x8 all_gather/reduce_scatter run ring; the pick goes LL128 -> Simple between 128 and
  256 MB, where both 10x8 runs show the busbw dip of a protocol switch.
"""

import os
from dataclasses import replace

import numpy as np
import pytest

from commsim.calibration.nccl_tables import load_tables
from commsim.collectives.nccl.graph import nccl_channels, nics_driven, ring_graph
from commsim.collectives.nccl.runnable import runnable
from commsim.collectives.nccl.scale import Scale, bus_factor
from commsim.collectives.nccl_tuner import plan
from commsim.network.system import PRESETS

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "nccl-tests-multiscale")
MB = 1 << 20


def _system():
    return replace(PRESETS["dgx-h100"], nccl_version="2.29.2")


def _busbw(name, nodes, gpus, kind):
    """(sizes, busbw GB/s) of one table of a log in tests/data (out-of-place time)."""
    lt = load_tables(os.path.join(DATA, name), world_size=nodes * gpus)
    t = next(t for t in lt.tables if t.kind == kind)
    S = np.array([r[0] for r in t.rows], dtype=float)
    us = np.array([r[1] for r in t.rows], dtype=float)
    return S, S / (us * 1e3) * bus_factor(kind, nodes * gpus)


def test_the_logs_say_nccl_2_29_2():
    for name in ("H100-cluster01_10x8_xxrjun.txt", "H100-cluster01_10x4_xxrjun.txt"):
        assert load_tables(os.path.join(DATA, name)).nccl_version == "2.29.2"


def test_10x4_drives_its_own_four_nics_as_the_logs_show():
    s = _system()
    sc = Scale.of(s, 10, 4)
    assert nics_driven(s, sc) == 4
    S1, b1 = _busbw("H100-cluster01_10x1_xxrjun.txt", 10, 1, "all_gather")
    S4, b4 = _busbw("H100-cluster01_10x4_xxrjun.txt", 10, 4, "all_gather")
    per_nic = np.median(b1[S1 >= 4 * 1024 * MB])       # one NIC, 48 GB/s
    nics_seen = np.median(b4[S4 >= 4 * 1024 * MB]) / per_nic
    assert nics_seen == pytest.approx(nics_driven(s, sc), abs=0.25)


def test_10x8_and_10x4_run_16_channels_on_8_and_4_nics():
    s = _system()
    s8, s4 = Scale.of(s, 10, 8), Scale.of(s, 10, 4)
    g8, g4 = ring_graph(s, s8), ring_graph(s, s4)
    # 10x8: one 48 GB/s ring per NIC, kept (bwIntra < 50, > 4 channels); 10x4: 4 of 48 duplicated to 8 of 24
    assert (g8.searched, g8.channels, g8.bw_inter, g8.duplicated) == (8, 8, 48.0, False)
    assert (g4.searched, g4.channels, g4.bw_inter, g4.duplicated) == (4, 8, 24.0, True)
    assert nccl_channels(s, s8) == nccl_channels(s, s4) == 16
    assert nccl_channels(s, s8) // nics_driven(s, s8) == 2
    assert nccl_channels(s, s4) // nics_driven(s, s4) == 4


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter"])
def test_pat_needs_one_gpu_per_node(kind):
    s = _system()
    assert "one GPU per node" in runnable(kind, "pat", "Simple", s, Scale.of(s, 10, 8))
    assert "one GPU per node" in runnable(kind, "pat", "Simple", s, Scale.of(s, 10, 4))
    assert runnable(kind, "pat", "Simple", s, Scale.of(s, 10, 1)) is None


@pytest.mark.parametrize("log", ["H100-cluster01_10x8_xxrjun.txt", "H100-cluster01_10x8_xxrjun-run20260128.txt"])
def test_10x8_all_gather_switches_ll128_to_simple_where_the_log_dips(log):
    s = _system()
    p = plan("all_gather", s, 10, 8)
    picks = ["/".join(c) for c in p.choose(np.array([32, 64, 128, 256, 512]) * MB)]
    assert picks == ["ring/LL128"] * 3 + ["ring/Simple"] * 2
    S, b = _busbw(log, 10, 8, "all_gather")
    at = {int(round(x / MB)): y for x, y in zip(S, b)}
    assert at[256] < at[128] < at[512]  # the only size where busbw falls: the protocol switch

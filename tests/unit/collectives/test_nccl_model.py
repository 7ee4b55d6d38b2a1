"""NCCL's tuning model against values computed by hand from NCCL src/graph/tuning.cc v2.19.3."""

import math

import pytest

import numpy as np

from commsim.collectives.kernels import collective_time
from commsim.collectives.nccl_model import NcclKernel, NcclModel, log2i
from commsim.scenario import topology

MiB = 1 << 20


def test_log2i_is_nccls():
    assert [log2i(x) for x in (0, 1, 2, 3, 4, 1023, 1024)] == [0, 0, 1, 1, 2, 9, 10]


def test_ring_simple_one_node_h100_2_19():
    f = topology.fabric("dgx-h100", 1)
    # lat = base 8.4 + 14 steps x NVLink 3.4 = 56.0 us; algbw = 450 GB/s x 8/14
    expected = 56.0 + 256 * MiB / (1000 * 450 * 8 / 14)
    assert NcclModel("2.19").estimate(f, "Ring", "Simple", 256 * MiB) == pytest.approx(expected * 1e-6, rel=1e-12)


def test_ring_ll_one_node_is_capped_by_llmaxbw():
    f = topology.fabric("dgx-h100", 1)
    # lat = 6.6 + 14 x 0.6 = 15.0 us; busBw = min(llMaxBw Hopper-N1 87.7, 450/4)
    expected = 15.0 + 1024 / (1000 * 87.7 * 8 / 14)
    assert NcclModel("2.19").estimate(f, "Ring", "LL", 1024) == pytest.approx(expected * 1e-6, rel=1e-12)
    # 2.30 raises the Hopper cap to 141.0 and LL's factor to 1/2
    expected = 15.0 + 1024 / (1000 * 141.0 * 8 / 14)
    assert NcclModel("2.30").estimate(f, "Ring", "LL", 1024) == pytest.approx(expected * 1e-6, rel=1e-12)


def test_ring_simple_four_nodes_with_plateau():
    f = topology.fabric("dgx-h100", 4)  # n = 32, 16 channels (2 per NIC)
    # intraLat = max(3.4, 1.0 us x 3) = 3.4; 62 steps of which 6 inter (14 us); plateau x1.4 (Hopper)
    lat = (8.4 + 56 * 3.4 + 6 * 14.0) * 1.4
    expected = lat + 64 * MiB / (1000 * 400 * 32 / 62)
    assert NcclModel("2.19").estimate(f, "Ring", "Simple", 64 * MiB) == pytest.approx(expected * 1e-6, rel=1e-12)


def test_tree_simple_four_nodes_2_19():
    f = topology.fabric("dgx-h100", 4)
    lat = 0.0 + 2 * (7 * 28.0 + 2 * 28.0)  # log2(4) = 2 network levels
    bw = min(400 * 0.92, 16 * 36.0) * 0.5 * 0.8  # Hopper N4 tree cap; correction[Simple][log2(64 MiB/64) = 20]
    expected = lat + 64 * MiB / (1000 * bw)
    assert NcclModel("2.19").estimate(f, "Tree", "Simple", 64 * MiB) == pytest.approx(expected * 1e-6, rel=1e-12)


def test_tree_ll_one_node_a100_2_7():
    f = topology.fabric("dgx-a100", 1)
    # busBw = min(300, 235 sm80 cap) -> tree min(x0.9, 110) = 110 -> LL /3.8 -> alg x0.5 -> correction[LL][4] 0.9
    bw = 110 / 3.8 * 0.5 * 0.9
    lat = 4.4 + 2 * (7 * 0.52)
    expected = lat + 1024 / (1000 * bw)
    got = NcclModel("2.7", arch="Ampere").estimate(f, "Tree", "LL", 1024)
    assert got == pytest.approx(expected * 1e-6, rel=1e-12)


def test_ll128_off_on_pcie_and_tree_only_for_all_reduce():
    f = topology.fabric("pcie-8gpu", 1)
    m = NcclModel("2.19", arch="Volta")
    assert math.isinf(m.estimate(f, "Ring", "LL128", MiB))
    assert math.isinf(m.estimate(f, "Tree", "Simple", MiB, collective="all_gather"))


def test_protocol_choice_follows_size():
    f = topology.fabric("dgx-h100", 16)
    m = NcclModel("2.19")
    assert m.choose(f, 4096)[1] == "LL"  # small: LL's low latency
    assert m.choose(f, 1 << 30)[1] == "LL128"  # 16 nodes, 1 GiB: Simple's x1.4 plateau latency loses to LL128
    assert m.choose(topology.fabric("dgx-h100", 1), 1 << 30)[1] == "Simple"  # one node: full NVLink bandwidth
    times = [m.choose(f, 2 ** k)[2] for k in range(3, 33)]
    assert all(b >= a for a, b in zip(times, times[1:]))  # monotone in size


def test_reduce_scatter_is_a_half_ring():
    f = topology.fabric("dgx-h100", 1)
    lat = 8.4 + 7 * 3.4
    expected = lat + 256 * MiB / (1000 * 450 * 8 / 7)
    got = NcclModel("2.19").estimate(f, "Ring", "Simple", 256 * MiB, collective="reduce_scatter")
    assert got == pytest.approx(expected * 1e-6, rel=1e-12)


def test_named_models_and_errors():
    f = topology.fabric("dgx-h100", 2)
    assert collective_time("auto", f, MiB, "nccl-2.30") <= collective_time("ring", f, MiB, "nccl-2.30")
    with pytest.raises(ValueError, match="alpha-beta or one of nccl-2.7"):
        NcclModel.named("nccl-9")
    with pytest.raises(ValueError, match="use model alpha-beta"):
        collective_time("hierarchical", f, MiB, "nccl-2.19")
    with pytest.raises(ValueError, match="Tree implements all_reduce only"):
        NcclKernel("nccl-2.19", "tree", "all_gather", f, MiB)
    k = NcclKernel("nccl-2.19", "ring", "reduce_scatter", f, MiB)
    expected = NcclModel("2.19").choose(f, MiB, "reduce_scatter", "Ring")
    assert (k.chosen, k.uniform_time()) == (f"{expected[0]}/{expected[1]}", expected[2])
    assert list(k.finish_times(np.array([0.0, 1.0, 3.0] + [0.0] * 13))) == [3.0 + expected[2]] * 16


def test_channels_default_without_nic_count_matches_the_preset():
    from dataclasses import replace

    f = topology.fabric("dgx-h100", 32)
    bare = replace(f, nics_per_node=None)  # as built from a scenario cluster without topology keys
    m = NcclModel("2.19")
    assert m.n_channels(f) == m.n_channels(bare) == 16
    assert m.n_channels(topology.fabric("pcie-8gpu", 1)) == 2
    assert NcclModel("2.19", channels=4).n_channels(f) == 4


def test_one_copy_of_the_constants_nccl_model_reads_the_tuner_tables():
    from commsim.collectives import nccl_constants as K

    for version in ("2.19", "2.30"):
        full, view = K.NCCL_TABLES[version], K.VERSIONS[version]
        assert view["hw_lat"]["NET"]["Ring"] == full["hw"]["NET"]["ring"]
        assert view["per_ch_max_tree"] == full["tree"][:3]
        assert view["ll_max_bws"] == full["ll_max"][:3]
    # spot values from NCCL tuning.cc (NCCL src/graph/tuning.cc v2.19.3)
    assert K.VERSIONS["2.19"]["hw_lat"]["NVLINK"]["Tree"] == (0.6, 1.25, 28.0)
    assert K.VERSIONS["2.30"]["ll_max_bws"][2] == (141.0, 45.0, 35.0)
    assert K.NCCL_TABLES["2.30"]["ll_max"][3] == (282.0, 90.0, 70.0)

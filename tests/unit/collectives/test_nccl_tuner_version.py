"""NCCL rules that depend on the GPU-NIC PCIe path and on the NCCL release (tuning.cc)."""

from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.nccl.estimate import nccl_estimate_us
from commsim.collectives.nccl.physical import physical_time_us
from commsim.collectives.nccl.runnable import runnable
from commsim.collectives.nccl.scale import LL, LL128, SIMPLE, Scale, nccl_table, ring_ll_factor
from commsim.collectives.nccl_tuner import plan
from commsim.errors import InputError
from commsim.network.system import preset, system_from_dict


def _ll128_allowed(system, nodes, gpus, kind="all_reduce", algorithm="ring"):
    scale = Scale.of(system, nodes, gpus)
    return runnable(kind, algorithm, LL128, system, scale) is None


@pytest.mark.parametrize("path", ["pix", "pxb", "pxn", "phb", "sys"])
def test_ll128_across_nodes_follows_the_gpu_nic_path_on_ampere(path):
    # tuning.cc: typeInter <= PATH_PXB (Hopper+: <= PATH_PXN) or LL128 is off
    a100 = replace(preset("polaris"), nic_path=path)
    allowed = path in ("pix", "pxb")
    assert _ll128_allowed(a100, 2, 4) is allowed
    assert _ll128_allowed(a100, 8, 4, algorithm="tree") is allowed
    assert _ll128_allowed(a100, 8, 4, kind="all_gather") is allowed


def test_ll128_on_one_node_ignores_the_nic_path():
    # a 1-node graph has no NET: typeInter keeps its PATH_PIX start
    assert _ll128_allowed(replace(preset("polaris"), nic_path="sys"), 1, 4)


def test_hopper_allows_ll128_through_pxn_but_not_phb():
    h100 = preset("dgx-h100")
    assert _ll128_allowed(replace(h100, nic_path="pxn"), 2, 8)
    assert not _ll128_allowed(replace(h100, nic_path="phb"), 2, 8)


def test_plan_across_polaris_nodes_offers_no_ll128_and_says_why():
    p = plan("all_reduce", preset("polaris"), 8, 4)
    assert all(proto != LL128 for _, proto in p.candidates)
    assert any(proto == LL128 for _, proto in plan("all_reduce", preset("polaris"), 1, 4).candidates)
    with pytest.raises(InputError, match="PHB"):
        plan("all_reduce", preset("polaris"), 8, 4, algorithm="ring", protocol="LL128")


def test_polaris_preset_records_the_phb_path_and_it_survives_a_round_trip():
    s = preset("polaris")
    assert s.nic_path == "phb" and preset("polaris-socket").nic_path == "phb"
    assert preset("dgx-a100").nic_path == "pxb"
    assert system_from_dict(s.describe(), "cal.yaml").nic_path == "phb"


def test_unknown_nic_path_is_an_input_error_naming_the_key():
    with pytest.raises(InputError, match="nic_path"):
        replace(preset("polaris"), nic_path="nvlink")
    doc = dict(preset("polaris").describe(), nic_path=3)
    with pytest.raises(InputError, match="nic_path"):
        system_from_dict(doc, "cal.yaml")


@pytest.mark.parametrize("version,kind,nodes,factor", [
    ("2.18", "all_reduce", 1, 0.25), ("2.18", "all_gather", 1, 1.0 / 3.0), ("2.18", "all_gather", 2, 0.25),
    ("2.20", "all_reduce", 2, 0.25), ("2.20", "all_gather", 1, 1.0 / 3.0),
    ("2.21", "all_reduce", 2, 0.5), ("2.21", "all_gather", 1, 0.5), ("2.29", "all_reduce", 8, 0.5),
])
def test_ring_ll_factor_changed_in_2_21(version, kind, nodes, factor):
    assert ring_ll_factor(version, kind, nodes) == pytest.approx(factor)


def test_nccl_estimate_of_ring_ll_uses_the_version_s_factor():
    # NCCL 2.20 still quarters Ring/LL busBw (its other tables are the 2.30 ones), 2.21 halves
    # it: on 2 Polaris nodes (below llMaxBw) the 2.20 transfer term is ~2x 2.21's, not equal.
    base = preset("polaris")
    scale = Scale.of(base, 2, 4)

    def transfer(version):
        s = replace(base, nccl_version=version)
        f = lambda x: nccl_estimate_us("all_reduce", "ring", LL, np.array([x]), s, scale)[0]
        return f(64.0 * 2 ** 20) - f(8.0)

    assert transfer("2.20") / transfer("2.21") > 1.8
    assert transfer("2.20") / transfer("2.21") <= 2.0 + 1e-9


# --- the tuning tables of each release line ------------------------------------------------------

@pytest.mark.parametrize("version,tree_simple,base_tree_simple", [
    ("2.18", (4.0, 6.0, 14.0), 0.0), ("2.18.5", (4.0, 6.0, 14.0), 0.0),
    ("2.18.1", (28.0, 28.0, 28.0), 0.0), ("2.19.3", (28.0, 28.0, 28.0), 0.0),
    ("2.20", (28.0, 28.0, 28.0), 0.0), ("2.21.5", (28.0, 28.0, 28.0), 0.0), ("2.22.3", (28.0, 28.0, 28.0), 0.0),
    ("2.23", (4.0, 4.0, 14.0), 8.4), ("2.29.2", (4.0, 4.0, 14.0), 8.4),
])
def test_tree_simple_latencies_per_release(version, tree_simple, base_tree_simple):
    # hwLat[NVLINK|PCI|NET][Tree][Simple] and baseLat[Tree][Simple] in each tag's tuning.cc
    t = nccl_table(version)
    assert tuple(t["hw"][hw]["tree"][2] for hw in ("NVLINK", "PCI", "NET")) == tree_simple
    assert t["base"]["tree"][2] == base_tree_simple
    assert t["ring_ll_factor"] in (0.25, 0.5)


def test_2_20_to_2_22_tables_keep_the_later_bandwidth_rows_and_have_no_pat():
    t, later = nccl_table("2.21"), nccl_table("2.30")
    assert t["ll_max"] == later["ll_max"] and t["tree"] == later["tree"]
    assert t["hw"]["NET"]["nvls_tree"][2] == 14.0 and later["hw"]["NET"]["nvls_tree"][2] == 20.9
    assert not t["pat"] and len(t["tree_corr"]["Simple"]) == 23


def test_polaris_8x4_all_reduce_pick_differs_between_2_18_and_2_21():
    # 2.18: Tree/Simple is cheap (4/14 us per hop) -> tree Simple at 1 MB; 2.21: Tree/Simple
    # costs 28 per hop and Ring/LL is estimated at busBw/2 -> ring LL to 4 MB, Simple from 8 MB.
    # The 2.21 log's times fall from 1.88 ms at 4 MB to 1.41 ms at 8 MB, where this pick leaves LL.
    def pick(version, size):
        return plan("all_reduce", replace(preset("polaris"), nccl_version=version), 8, 4).choose([size])[0]

    assert pick("2.18", 1 << 20) == ("tree", "Simple")
    assert pick("2.21.5", 1 << 20) == ("ring", "LL")
    assert pick("2.21.5", 4 << 20) == ("ring", "LL")
    assert pick("2.21.5", 8 << 20)[1] == "Simple"


def test_polaris_128x4_all_gather_runs_ll_until_32_mb_without_ll128():
    # with LL128 off (PHB) NCCL 2.18 stays on LL to 32 MB; the 128-node log's time drops from
    # 15.6 ms at 32 MB to 12.6 ms at 64 MB, where the pick moves to Simple
    p = plan("all_gather", replace(preset("polaris"), nccl_version="2.18"), 128, 4)
    assert p.choose([32 << 20, 64 << 20]) == [("ring", "LL"), ("ring", "Simple")]


@pytest.mark.parametrize("version,before", [("2.18", "2.19"), ("2.21.5", "2.23")])
def test_release_tables_change_the_pick_not_the_physical_price(version, before):
    s = replace(preset("polaris"), nccl_version=version)
    b = replace(s, nccl_version=before)
    scale = Scale.of(s, 8, 4)
    sizes = np.array([1e3, 1e5, 1e7])
    for a, p in (("tree", SIMPLE), ("tree", LL), ("ring", SIMPLE)):
        np.testing.assert_array_equal(physical_time_us("all_reduce", a, p, sizes, s, scale),
                                      physical_time_us("all_reduce", a, p, sizes, b, scale))
    assert not np.array_equal(nccl_estimate_us("all_reduce", "tree", SIMPLE, sizes, s, scale),
                              nccl_estimate_us("all_reduce", "tree", SIMPLE, sizes, b, scale))


# --- the per-step floor of a ring across nodes (getNetOverhead), now a physical constant -------

def test_net_step_defaults_to_nccl_s_cpu_figure():
    assert preset("polaris").net_step_us == 2.0      # AMD EPYC
    assert preset("dgx-h100").net_step_us == 1.0     # Intel
    assert preset("gb200-nvl72").net_step_us == 1.0  # Grace (ARM)
    assert system_from_dict(preset("polaris").describe(), "cal.yaml").net_step_us == 2.0
    doc = {k: v for k, v in preset("polaris").describe().items() if k != "net_step_us"}
    assert system_from_dict(doc, "cal.yaml").net_step_us == 2.0


def test_net_step_floors_every_ring_step_and_every_tree_network_hop_across_nodes():
    base = replace(preset("polaris"), nccl_version="2.18")
    slow = replace(base, net_step_us=10.0)
    s8 = Scale.of(base, 8, 4)
    tiny = np.array([8.0])
    # ring LL: 2(n-1) = 62 steps, 14 of them network; the 48 NVLink steps are floored at 10 us
    # (their LL latency is 3.4 x 0.6/3.4 = 0.6 us, under NCCL's 2 us AMD floor before)
    d_ring = physical_time_us("all_reduce", "ring", LL, tiny, slow, s8) - \
        physical_time_us("all_reduce", "ring", LL, tiny, base, s8)
    assert d_ring[0] == pytest.approx(48 * (10.0 - 2.0))
    # tree LL: 2 log2(8) = 6 network hops, each max(14 x 5/14 = 5 us, floor)
    d_tree = physical_time_us("all_reduce", "tree", LL, tiny, slow, s8) - \
        physical_time_us("all_reduce", "tree", LL, tiny, base, s8)
    assert d_tree[0] == pytest.approx(6 * (10.0 - 5.0))
    # one node: no network step, no floor
    s1 = Scale.of(base, 1, 4)
    np.testing.assert_array_equal(physical_time_us("all_reduce", "ring", LL, tiny, slow, s1),
                                  physical_time_us("all_reduce", "ring", LL, tiny, base, s1))

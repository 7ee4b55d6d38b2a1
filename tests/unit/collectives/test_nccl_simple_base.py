"""The base latency of a Simple collective that crosses the network (System.net_simple_base_us):
paid once per collective, by every algorithm whose Simple traffic crosses nodes, never within one
node and never by LL / LL128."""

from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.nccl.physical import physical_time_us, priced_by
from commsim.collectives.nccl.scale import Scale
from commsim.network.system import PRESETS

SIZES = np.geomspace(1e3, 1e10, 15)
D_US = 37.0


def _delta(system, kind, algorithm, protocol, nodes, gpus):
    sc = Scale.of(system, nodes, gpus)
    more = replace(system, net_simple_base_us=system.net_simple_base_us + D_US)
    return (physical_time_us(kind, algorithm, protocol, SIZES, more, sc)
            - physical_time_us(kind, algorithm, protocol, SIZES, system, sc))


@pytest.mark.parametrize("algorithm,kind", [("ring", "all_reduce"), ("ring", "all_gather"),
                                            ("ring", "reduce_scatter"), ("tree", "all_reduce"),
                                            ("nvls_tree", "all_reduce"), ("collnet_direct", "all_reduce"),
                                            ("collnet_chain", "all_reduce")])
@pytest.mark.parametrize("nodes", [2, 3, 16])
def test_simple_across_nodes_pays_it_once_whatever_the_size_and_the_steps(algorithm, kind, nodes):
    s = replace(PRESETS["dgx-h100"], nccl_version="2.29")
    assert _delta(s, kind, algorithm, "Simple", nodes, 8) == pytest.approx(np.full(SIZES.shape, D_US))


@pytest.mark.parametrize("protocol", ["LL", "LL128"])
def test_ll_and_ll128_across_nodes_do_not(protocol):
    s = PRESETS["dgx-h100"]
    assert np.all(_delta(s, "all_reduce", "ring", protocol, 4, 8) == 0.0)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "nvls"])
def test_one_node_never_does(algorithm):
    s = PRESETS["dgx-h100"]
    assert np.all(_delta(s, "all_reduce", algorithm, "Simple", 1, 8) == 0.0)


def test_a_prediction_across_nodes_with_simple_names_it_as_a_constant_it_rests_on():
    s = PRESETS["dgx-h100"]
    assert "net_simple_base_us" in priced_by("ring", "Simple", Scale.of(s, 2, 8), s)
    assert "net_simple_base_us" not in priced_by("ring", "LL", Scale.of(s, 2, 8), s)
    assert "net_simple_base_us" not in priced_by("ring", "Simple", Scale.of(s, 1, 8), s)

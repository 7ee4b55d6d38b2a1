"""The scenario's one fabric: its cluster, its calibration, its slow links."""

import numpy as np

from commsim.calibration import (Calibration, Measurement, Provenance, fit_link, hop_time,
                                       measured_level_constants)
from commsim.network.fabric import PortScales
from commsim.scenario.spec import SlowLink
from commsim.scenario.topology import cluster_fabric
from commsim.sim.links import fitted_fabric, scenario_fabric, with_slow_links
from tests.conftest import make_scenario, replace


def test_slow_links_degrade_the_ports_the_fabric_documents():
    sc = make_scenario(nodes=3, gpus_per_node=2, stragglers=[SlowLink(0.5, rank=5), SlowLink(0.25, node=1),
                                                              SlowLink(0.5, rank=0)])
    f = scenario_fabric(sc)
    # rank 5 -> 0 leaves node 2 (its network's send side); node 1 both ways; rank 0 -> 1 stays on node 0
    assert f.inter_scale == PortScales((1.0, 0.25, 0.5), (1.0, 0.25, 1.0))
    assert f.intra_scale == PortScales((0.5, 1, 1, 1, 1, 1), (1.0,) * 6)
    _, bw = f.ring_links()
    nominal = cluster_fabric(sc.cluster).ring_links()[1]
    np.testing.assert_array_equal(bw / nominal, [0.5, 0.5, 0.25, 1, 0.25, 1])  # hops into ranks 0..5


def test_no_slow_link_no_degradation_and_other_kinds_do_not_touch_links():
    from commsim.scenario.spec import SlowRank

    sc = make_scenario(stragglers=[SlowRank((1,), 2.0)])
    assert scenario_fabric(sc) == cluster_fabric(sc.cluster)
    assert with_slow_links(cluster_fabric(sc.cluster), []) == cluster_fabric(sc.cluster)


def _calibration():
    rows = [Measurement(s, 10e-6 + 14 / 8 * s / 100e9 + (s % 3) * 1e-9, 8) for s in 2 ** np.arange(10, 28)]
    return Calibration((fit_link("intra_node", rows),), Provenance(backend="nccl", world_size=8))


def test_a_calibrated_scenario_prices_every_level_from_the_measured_curve():
    cal = _calibration()
    sc = replace(make_scenario(nodes=1, gpus_per_node=8), calibration=cal)
    f = scenario_fabric(sc)
    for size in (1024.0, 3e6, 2.0 ** 27):
        priced = f.at_size(size)
        assert (priced.intra_latency, priced.intra_bandwidth) == measured_level_constants(cal, "intra_node", size, 8)
        # one level: a uniform ring then takes one calibrated step per hop
        alpha, bw = priced.ring_links()
        np.testing.assert_allclose(np.mean(alpha) + size / 8 / bw, hop_time(cal, size, 8), rtol=1e-12)


def test_fitted_fabric_prices_with_the_size_ranges_line():
    cal = _calibration()
    f = fitted_fabric(cluster_fabric(make_scenario(nodes=2, gpus_per_node=4).cluster), cal)
    r = cal.level().range_for(5e6)
    priced = f.at_size(5e6)
    assert (priced.intra_latency, priced.intra_bandwidth, priced.inter_latency, priced.inter_bandwidth) == (
        r.alpha_s, r.beta_Bps, r.alpha_s, r.beta_Bps)  # one level prices both

"""Running whole scenarios with other algorithms and node counts."""

import pytest

from commsim.analysis.algorithm_comparison import compare, simulate_algorithm, summarize_algorithm, with_nodes
from commsim.collectives import uniform_time
from commsim.scenario.spec import SlowLink, SlowRank
from commsim.scenario.topology import cluster_fabric
from tests.conftest import make_scenario, replace


def test_tree_scenario_comm_time_is_the_closed_form():
    sc = make_scenario(nodes=4, gpus_per_node=2, overlap=False, bucket_cap=25e6, first_bucket=25e6, parameters=1_000_000)
    r = simulate_algorithm(sc, "tree")
    assert len(r.bucket_sizes) == 1
    assert r.comm_time[0] == pytest.approx(uniform_time("tree", cluster_fabric(sc.cluster), r.bucket_sizes[0]), rel=1e-9)


def test_summary_names_algorithm_and_with_nodes_drops_out_of_range_stragglers():
    sc = make_scenario(nodes=4, gpus_per_node=2, stragglers=[SlowRank(ranks=(1, 7), factor=1.5), SlowLink(0.5, node=3),
                                                              SlowLink(0.5, rank=6)])
    small = with_nodes(sc, 2)
    assert small.world_size == 4 and small.stragglers == (SlowRank(ranks=(1,), factor=1.5),)
    s = summarize_algorithm(small, "hierarchical")
    assert s["algorithm"] == "hierarchical" and s["slowdown"] > 1.0


def test_slow_link_straggler_reaches_other_algorithms():
    sc = make_scenario(nodes=4, gpus_per_node=2, parameters=50_000_000, overlap=False)
    slow = replace(sc, stragglers=(SlowLink(factor=0.2, node=1),))
    for name in ("tree", "hierarchical", "halving_doubling", "reduce_broadcast"):
        a = simulate_algorithm(sc, name).step_time.mean()
        b = simulate_algorithm(slow, name).step_time.mean()
        assert b > a, name


def test_compare_marks_the_fastest_and_skips_what_a_model_does_not_cover():
    sc = make_scenario(nodes=2, gpus_per_node=2, parameters=5_000_000, steps=3)
    rows = compare(sc, [1, 2], ["ring", "hierarchical"], ["alpha-beta", "nccl-2.19"])
    assert [(r["nodes"], r["algorithm"], r["model"]) for r in rows] == [
        (1, "ring", "alpha-beta"), (1, "hierarchical", "alpha-beta"), (1, "ring", "nccl-2.19"),
        (2, "ring", "alpha-beta"), (2, "hierarchical", "alpha-beta"), (2, "ring", "nccl-2.19")]
    for n in (1, 2):
        group = [r for r in rows if r["nodes"] == n]
        assert sum(r["fastest"] for r in group) >= 1
        assert all(r["fastest"] == (r["step_time_s"] == min(g["step_time_s"] for g in group)) for r in group)


def test_a_calibration_prices_the_ring_only():
    from commsim.calibration import Calibration, Measurement, Provenance, fit_link

    rows = [Measurement(2 ** k, 1e-5 + 2 ** k / 1e10, 4) for k in range(10, 24)]
    cal = Calibration((fit_link("intra_node", rows),), Provenance(backend="gloo", world_size=4))
    sc = replace(make_scenario(nodes=1, gpus_per_node=4), calibration=cal)
    with pytest.raises(ValueError, match="prices the measured ring only"):
        simulate_algorithm(sc, "tree")

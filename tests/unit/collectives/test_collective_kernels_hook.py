"""make_kernel (the engine's hook) and running whole scenarios with other algorithms."""

import numpy as np
import pytest

from commsim.analysis.algorithm_comparison import simulate_algorithm, summarize_algorithm, with_nodes
from commsim.collectives import Fabric, finish_times, uniform_time
from commsim.collectives.kernels import collective_time, make_kernel, resolve
from commsim.collectives.ring_closed_form import RingAllReduce
from tests.conftest import make_scenario, replace

F = Fabric(nodes=3, gpus_per_node=4, intra_latency=1e-6, intra_bandwidth=300e9,
           inter_latency=5e-6, inter_bandwidth=12.5e9)


def test_ring_kernel_is_the_leads_and_agrees_with_the_recurrence():
    k = make_kernel("ring", F, 4e6)
    assert isinstance(k, RingAllReduce)
    L = np.random.default_rng(1).uniform(0, 1e-3, F.world_size)
    np.testing.assert_allclose(k.finish_times(L), finish_times("ring", F, L, 4e6), rtol=1e-12)


@pytest.mark.parametrize("name", ["tree", "hierarchical", "halving_doubling", "reduce_broadcast", "auto"])
def test_kernels_agree_with_package_functions(name):
    L = np.random.default_rng(2).uniform(0, 1e-3, F.world_size)
    k = make_kernel(name, F, 4e6)
    np.testing.assert_allclose(k.finish_times(L), finish_times(name, F, L, 4e6), rtol=1e-12)


def test_auto_resolves_per_size():
    big = Fabric(nodes=64, gpus_per_node=8, intra_latency=3.4e-6, intra_bandwidth=450e9,
                 inter_latency=14e-6, inter_bandwidth=400e9)
    assert resolve("auto", big, 1024) != "ring"
    assert resolve("tree", big, 1024) == "tree"


def test_nccl_model_kernel_waits_for_the_last_launch():
    k = make_kernel("tree", F, 4e6, model="nccl-2.19")
    t = collective_time("tree", F, 4e6, model="nccl-2.19")
    np.testing.assert_allclose(k.finish_times(np.array([0.0] * 11 + [1.0])), 1.0 + t)
    with pytest.raises(ValueError, match="collective model must be one of alpha-beta"):
        make_kernel("ring", F, 1e6, model="logp")


def test_collectives_ring_kernel_equals_the_engines_ring():
    """Two routes to the ring's hop times: the engine's (costs.ring_hop_links + slow-link
    factors) and the collectives package's (Fabric pair links + with_slow_links)."""
    from commsim.sim.links import scenario_fabric
    from commsim.sim.engine import Engine
    from commsim.scenario.spec import SlowLink

    rng = np.random.default_rng(3)
    for stragglers in ([], [SlowLink(0.25, node=1)]):
        sc = make_scenario(nodes=3, gpus_per_node=4, parameters=2_000_000, stragglers=stragglers)
        engine_kernel = Engine(sc).kernels[0]
        package_kernel = make_kernel("ring", scenario_fabric(sc), Engine(sc).buckets[0])
        launches = [np.zeros(12)] + ([rng.uniform(0, 1e-3, 12) for _ in range(5)] if not stragglers else [])
        for launch in launches:
            np.testing.assert_allclose(package_kernel.finish_times(launch), engine_kernel.finish_times(launch), rtol=1e-12)


def test_tree_scenario_comm_time_is_the_closed_form():
    sc = make_scenario(nodes=4, gpus_per_node=2, overlap=False, bucket_cap=25e6, first_bucket=25e6, parameters=1_000_000)
    r = simulate_algorithm(sc, "tree")
    f = Fabric.from_cluster(sc.cluster)
    assert len(r.bucket_sizes) == 1
    assert r.comm_time[0] == pytest.approx(uniform_time("tree", f, r.bucket_sizes[0]), rel=1e-9)


def test_summary_names_algorithm_and_with_nodes_drops_out_of_range_stragglers():
    from commsim.scenario.spec import SlowRank

    sc = make_scenario(nodes=4, gpus_per_node=2, stragglers=[SlowRank(ranks=(1, 7), factor=1.5)])
    small = with_nodes(sc, 2)
    assert small.world_size == 4 and small.stragglers[0].ranks == (1,)
    s = summarize_algorithm(small, "hierarchical")
    assert s["algorithm"] == "hierarchical" and s["slowdown"] > 1.0


def test_slow_link_straggler_reaches_other_algorithms():
    from commsim.scenario.spec import SlowLink

    sc = make_scenario(nodes=4, gpus_per_node=2, parameters=50_000_000, overlap=False)
    slow = replace(sc, stragglers=(SlowLink(factor=0.2, node=1),))
    for name in ("tree", "hierarchical", "halving_doubling"):
        a = simulate_algorithm(sc, name).step_time.mean()
        b = simulate_algorithm(slow, name).step_time.mean()
        assert b > a, name

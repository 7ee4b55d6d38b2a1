"""The hooked DDP step model: the plain hook is the engine; hooks' stages priced exactly."""

from dataclasses import replace

import numpy as np
import pytest

from commsim.collectives.kernels import make_kernel
from commsim.mitigations.compression import CompressionHook
from commsim.mitigations.hooked import run_hooked
from commsim.mitigations.localsgd import LocalSGDHook
from commsim.mitigations.spec import Compression, LocalSGD
from commsim.scenario.spec import DDPCosts, Jitter, SlowRank, Stall, Throttle
from commsim.sim.engine import simulate
from commsim.sim.links import scenario_fabric

from tests.unit.mitigations.helpers import tiny


@pytest.mark.parametrize("with_costs", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_plain_hook_equals_the_engine_on_random_small_scenarios(seed, with_costs):
    rng = np.random.default_rng(seed)
    nodes, gpus = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    n = nodes * gpus
    stragglers = [Jitter(cv=float(rng.uniform(0, 0.2)), distribution="gamma")]
    if n > 1:
        stragglers.append(SlowRank(ranks=(int(rng.integers(n)),), factor=float(rng.uniform(1, 2))))
        stragglers.append(Stall(ranks=(0,), duration=0.01, every=3))
        stragglers.append(Throttle(ranks=(n - 1,), heat_up=0.05, throttled_time=0.03, clock_fraction=0.5))
    costs = DDPCosts(bucket_overhead=float(rng.uniform(0, 1e-3)), memory_bandwidth=float(rng.uniform(1e9, 2e12)),
                     gradient_as_bucket_view=bool(rng.integers(2)), overlap_slowdown=float(rng.uniform(0, 1)))
    sc = tiny(nodes=nodes, gpus=gpus, params=int(rng.integers(1e5, 3e6)), stragglers=stragglers, seed=seed,
              overlap=bool(rng.integers(2)), accumulation=int(rng.integers(1, 3)), steps=12,
              **({"costs": costs} if with_costs else {}))
    np.testing.assert_allclose(run_hooked(sc).step_end, simulate(sc).step_end, rtol=1e-12, atol=1e-12)


def test_plain_hook_honours_an_explicit_bucket_layout_with_costs():
    # a real job's layout (the big first bucket ready late in backward), DDP's costs on
    sc = tiny(nodes=2, gpus=2, params=2_000_000, stragglers=[Jitter(cv=0.1)], overlap=True, steps=4,
              costs=DDPCosts(bucket_overhead=5e-4, memory_bandwidth=1e10, overlap_slowdown=0.5))
    uniform = replace(sc, ddp=replace(sc.ddp, bucket_sizes=(6e6, 1e6, 1e6)))
    sc = replace(sc, ddp=replace(sc.ddp, bucket_sizes=(6e6, 1e6, 1e6), bucket_ready=(0.9, 0.95, 1.0)))
    np.testing.assert_allclose(run_hooked(sc).step_end, simulate(sc).step_end, rtol=1e-12, atol=1e-12)
    assert not np.allclose(simulate(sc).step_end, simulate(uniform).step_end)  # the layout matters here


def test_fp16_hook_one_bucket_exact():
    sc = tiny(nodes=2, gpus=1, params=1_000_000, bucket_cap=1e9, first_bucket=1e9, overlap=True, steps=3)
    bw = 1e11
    run = run_hooked(sc, CompressionHook(sc, Compression("fp16", mem_bw=bw)))
    ring = make_kernel("ring", scenario_fabric(sc), 2e6).uniform_time()
    # cast (read 4, write 2, div: read+write 2), all-reduce of 2 bytes per element, copy back (read 2, write 4)
    expect = 0.01 + 0.02 + 1e6 * 10 / bw + ring + 1e6 * 6 / bw + 0.001
    np.testing.assert_allclose(run.step_time, expect, rtol=1e-12)
    assert run.reduced_bytes[0] == 2e6


def test_localsgd_one_gpu_nodes_average_every_H_steps():
    sc = tiny(nodes=4, gpus=1, params=1_000_000, steps=4)
    run = run_hooked(sc, LocalSGDHook(sc, LocalSGD(H=2, mem_bw=1e10)))
    avg = make_kernel("ring", scenario_fabric(sc), 4e6).uniform_time()
    # average_parameters: torch.cat of the parameters (read 4, write 4 B per element), then the
    # buffer divided in place (read 4, write 4), before its all-reduce
    flatten = 1_000_000 * 16 / 1e10
    compute = 0.031
    np.testing.assert_allclose(run.step_time, [compute, compute + flatten + avg] * 2, rtol=1e-12)
    np.testing.assert_allclose(run.reduced_bytes, [0, 4e6] * 2)


@pytest.mark.parametrize("buckets", [1, 2])
def test_localsgd_subgroup_call_costs_every_bucket_of_every_step_on_one_gpu_nodes(buckets):
    # post_localSGD_hook all-reduces each bucket on the rank's one-rank subgroup even on a local
    # step: nothing is sent, but the call through the backend costs subgroup_overhead per bucket
    cap = 1e9 if buckets == 1 else 2e6 + 1
    sc = tiny(nodes=4, gpus=1, params=1_000_000, steps=4, bucket_cap=cap, first_bucket=cap, bwd=1e-6)
    assert len(sc.gradient_buckets()) == buckets
    plain = run_hooked(sc, LocalSGDHook(sc, LocalSGD(H=2, mem_bw=1e10)))
    called = run_hooked(sc, LocalSGDHook(sc, LocalSGD(H=2, mem_bw=1e10, subgroup_overhead=4e-3)))
    # a near-instant backward: every bucket's call sits on the stream after the last gradient
    np.testing.assert_allclose(called.step_time - plain.step_time, buckets * 4e-3, atol=2e-6)
    np.testing.assert_allclose(called.reduced_bytes, plain.reduced_bytes)


def test_subgroup_overhead_parses_as_a_time():
    from commsim.mitigations.spec import parse_mitigations

    assert parse_mitigations("localsgd:H=4:subgroup_overhead=4ms")[0].get(LocalSGD).subgroup_overhead == pytest.approx(4e-3)


def test_localsgd_intra_node_reduce_is_the_node_ring():
    sc = tiny(nodes=1, gpus=4, params=1_000_000, bucket_cap=1e9, first_bucket=1e9, steps=2)
    run = run_hooked(sc, LocalSGDHook(sc, LocalSGD(H=100)))
    node = make_kernel("ring", scenario_fabric(sc), 4e6).uniform_time()  # one node: the job's ring
    np.testing.assert_allclose(run.step_time, 0.031 + node, rtol=1e-9)


def _intra_calibration(alpha, beta):
    from commsim.calibration import Calibration, Measurement, Provenance, fit_link

    rows = [Measurement(float(s), 2 * alpha + s / beta, 2) for s in 2.0 ** np.arange(10, 26)]
    return Calibration((fit_link("intra_node", rows),), Provenance(backend="gloo", world_size=2))


def test_node_scope_reduce_is_priced_by_the_calibration():
    from dataclasses import replace

    # nominal intra-node links 10 GB/s; the calibration says 0.5 GB/s: the node ring must use it
    sc = replace(tiny(nodes=2, gpus=2, params=1_000_000, bucket_cap=1e9, first_bucket=1e9, steps=2),
                 calibration=_intra_calibration(50e-6, 0.5e9))
    run = run_hooked(sc, LocalSGDHook(sc, LocalSGD(H=100)))
    one_node = replace(sc, cluster=replace(sc.cluster, nodes=1))
    node = make_kernel("ring", scenario_fabric(one_node), 4e6).uniform_time()
    nominal = make_kernel("ring", scenario_fabric(replace(one_node, calibration=None)), 4e6).uniform_time()
    assert node > 5 * nominal
    np.testing.assert_allclose(run.step_time, 0.031 + node, rtol=1e-9)


def test_node_scope_reduce_slow_link_slows_only_its_node():
    from dataclasses import replace

    from commsim.scenario.spec import SlowLink

    sc = tiny(nodes=2, gpus=2, params=1_000_000, bucket_cap=1e9, first_bucket=1e9, steps=1,
              stragglers=[SlowLink(0.25, rank=3)])
    run = run_hooked(sc, LocalSGDHook(sc, LocalSGD(H=100)))
    one_node = replace(sc, cluster=replace(sc.cluster, nodes=1), stragglers=())
    fast = make_kernel("ring", scenario_fabric(one_node), 4e6).uniform_time()
    slow = make_kernel("ring", scenario_fabric(replace(one_node, stragglers=(SlowLink(0.25, rank=1),))),
                       4e6).uniform_time()
    assert slow > fast
    np.testing.assert_allclose(run.rank_end[0], 0.031 + np.array([fast, fast, slow, slow]), rtol=1e-9)


class _WorkThenReduce:
    """A hook of one Work stage of `work` seconds before the bucket's all-reduce."""

    def __init__(self, work):
        self.work = work

    def stages(self, step, bucket, size):
        from commsim.mitigations.hooked import Reduce, Work

        return (Work(self.work), Reduce(size))

    def after_step(self, step):
        return ()


def test_work_stages_run_at_the_ranks_compute_factor_and_the_sync_waits_for_the_slower():
    # one bucket, after the whole backward; rank 1 at twice the compute time: its hook work too,
    # and the all-reduce after it starts at rank 1's end of that work
    sc = tiny(nodes=2, gpus=1, params=1_000_000, bucket_cap=1e9, first_bucket=1e9, overlap=True, steps=3,
              stragglers=[SlowRank(ranks=(1,), factor=2.0)])
    work = 4e-3
    run = run_hooked(sc, _WorkThenReduce(work))
    ring = make_kernel("ring", scenario_fabric(sc), 4e6).uniform_time()
    # rank 1: forward + backward at 2x, then its work at 2x, the ring, the optimizer at 2x
    expect = 2 * (0.01 + 0.02) + 2 * work + ring + 2 * 0.001
    np.testing.assert_allclose(run.step_time, expect, rtol=1e-12)


def test_jittered_work_stages_cost_the_expected_max_over_ranks():
    # the same Work with every rank's compute jittered: the sync after it waits for the slower
    # rank's work, so more work costs more than its mean (E[max of 2] > the mean)
    sc = tiny(nodes=2, gpus=1, params=1_000_000, bucket_cap=1e9, first_bucket=1e9, overlap=True, steps=400,
              fwd=1e-6, bwd=1e-6, opt=1e-6, stragglers=[Jitter(cv=0.3, distribution="gamma")])
    small = run_hooked(sc, _WorkThenReduce(1e-6)).step_time.mean()
    big = run_hooked(sc, _WorkThenReduce(0.1)).step_time.mean()
    extra = big - small
    # E[max of two gamma(cv 0.3)] ~ 1 + 0.3 / sqrt(pi) ~ 1.17 for a normal; the gamma is close
    assert 0.1 * 1.10 < extra < 0.1 * 1.25

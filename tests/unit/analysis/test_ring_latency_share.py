"""The share of the ring's all-reduce time that is its per-hop latencies, against the closed
form of a ring on one node (every hop alike): T(S) = 2(n-1) (alpha + S / (n beta))."""

import pytest

from commsim.analysis.report import ring_latency_share
from commsim.scenario.loader import load_scenario
from commsim.sim.engine import simulate
from tests.conftest import write_ring_scenario


def scenario(tmp_path, extra="", gpus=8, cap="64 KiB"):
    return write_ring_scenario(tmp_path, gpus=gpus, cap=cap, extra=extra)


@pytest.mark.parametrize("gpus, cap", [(8, "64 KiB"), (4, "1 MiB"), (2, "4 MB")])
def test_the_share_is_the_closed_forms(tmp_path, gpus, cap):
    sc = load_scenario(scenario(tmp_path, gpus=gpus, cap=cap))
    sizes = simulate(sc).bucket_sizes
    n, alpha, beta = gpus, 5e-6, 100e9
    latency = len(sizes) * 2 * (n - 1) * alpha
    full = sum(2 * (n - 1) * (alpha + s / (n * beta)) for s in sizes)
    assert ring_latency_share(sc, sizes) == pytest.approx(latency / full, rel=1e-9)


@pytest.mark.parametrize("extra", ["collective: {algorithm: tree}\n", "collective: {algorithm: nccl}\n",
                                   "ddp: {bucket_cap: 64 KiB, sharding: zero2}\n"])
def test_no_share_for_what_is_not_the_alpha_beta_ring(tmp_path, extra):
    path = scenario(tmp_path)
    if extra.startswith("ddp"):
        path.write_text(path.read_text().replace("ddp: {bucket_cap: 64 KiB, first_bucket: 64 KiB}\n", extra))
    else:
        path.write_text(path.read_text() + extra)
    sc = load_scenario(path)
    assert ring_latency_share(sc, simulate(sc).bucket_sizes) is None


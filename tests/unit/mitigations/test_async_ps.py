"""Asynchronous parameter servers against link capacity and Little's law."""

import numpy as np
import pytest

from commsim.mitigations.async_ps import run_async, staleness_summary
from commsim.mitigations.spec import AsyncPS
from commsim.scenario.spec import Jitter

from tests.unit.mitigations.helpers import tiny


@pytest.mark.parametrize("servers", [1, 2, 4])
def test_communication_bound_throughput_is_the_servers_link_capacity(servers):
    # 8 workers, 40 MB gradients over 1 GB/s links: 40 ms per full gradient per link, 1 ms compute
    sc = tiny(nodes=8, gpus=1, params=10_000_000, fwd=0.0003, bwd=0.0007, steps=60, stragglers=[Jitter(cv=0.1)])
    run = run_async(sc, AsyncPS(servers=servers, latency=0.0))
    capacity = servers * 1e9 / 40e6
    assert run.link_capacity == pytest.approx(capacity)
    assert run.gradients_per_s <= capacity * (1 + 1e-9)
    assert run.gradients_per_s == pytest.approx(capacity, rel=0.03)


@pytest.mark.parametrize("seed", range(4))
def test_mean_staleness_follows_littles_law(seed):
    sc = tiny(nodes=6, gpus=1, params=2_000_000, steps=150, seed=seed, stragglers=[Jitter(cv=0.3, distribution="gamma")])
    run = run_async(sc, AsyncPS(servers=2))
    lam, w = run.gradients_per_s, run.sojourn.mean()
    st = staleness_summary(run)
    assert st["mean"] == pytest.approx(lam * w - 1, rel=0.03)


def test_identical_workers_one_server_staleness_is_n_minus_one():
    sc = tiny(nodes=5, gpus=1, params=1_000_000, steps=40)
    run = run_async(sc, AsyncPS(servers=1))
    steady = run.staleness[5 * 5:]  # after the start-up, where the first snapshots are version 0
    assert np.all(steady == 4)


def test_compute_bound_throughput_is_workers_over_iteration():
    sc = tiny(nodes=4, gpus=1, params=1000, fwd=0.1, bwd=0.2, steps=300)
    run = run_async(sc, AsyncPS(servers=2, latency=0.0))
    assert run.gradients_per_s == pytest.approx(4 / run.iteration_s.mean(), rel=0.02)

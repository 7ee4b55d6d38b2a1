"""commsim.lab.diagnose: naming the straggler from timestamps and the ring probe (synthetic runs)."""

import numpy as np
import pytest

from commsim.lab import diagnose

STEPS, BUCKETS, N = 8, 3, 4
COMPUTE = 0.3


def run(late):
    """Step starts and bucket-ready times of a run where late[s][r] seconds delay rank r in step s."""
    late = np.asarray(late, dtype=float)
    start = np.arange(STEPS) * 1.0
    frac = np.array([0.2, 0.6, 1.0])
    ready = start[:, None, None] + COMPUTE * frac[None, :, None] + late[:, None, :] * frac[None, :, None]
    return start, ready


def test_no_straggler():
    assert diagnose.compute_findings(*run(np.zeros((STEPS, N)))) == []
    assert diagnose.describe([]) == "no straggler seen"


def test_a_steady_slow_rank():
    late = np.zeros((STEPS, N))
    late[:, 2] = 0.15
    (f,) = diagnose.compute_findings(*run(late))
    assert (f["kind"], f["rank"], f["late_steps"]) == ("slow_rank", 2, 1.0)
    assert f["margin_s"] == pytest.approx(0.15)


def test_an_intermittent_rank_is_throttled():
    late = np.zeros((STEPS, N))
    late[[1, 2, 5, 6], 1] = 0.15  # hot, then cool, then hot again
    (f,) = diagnose.compute_findings(*run(late))
    assert (f["kind"], f["rank"], f["late_steps"]) == ("throttle", 1, 0.5)


def test_late_every_step_by_a_swinging_margin_is_throttled_too():
    late = np.zeros((STEPS, N))
    late[:, 3] = [0.05, 0.3, 0.05, 0.3, 0.05, 0.3, 0.05, 0.3]
    (f,) = diagnose.compute_findings(*run(late))
    assert (f["kind"], f["rank"]) == ("throttle", 3)


def test_small_noise_is_no_straggler():
    rng = np.random.default_rng(0)
    assert diagnose.compute_findings(*run(rng.normal(0, 0.004, (STEPS, N)))) == []


def test_a_slow_node_slows_the_links_in_and_out():
    # rank 2's node at half rate: the link into 2 (from 1) and into 3 (from 2) take twice as long
    (f,) = diagnose.link_findings([0.084, 0.086, 0.170, 0.168])
    assert (f["kind"], f["rank"], f["node"]) == ("slow_link", 2, 2)
    assert f["ratio"] == pytest.approx(0.168 / 0.085, rel=1e-6)
    assert "scenario node 2 (rank 2 (node n2))" in diagnose.describe([f], node_of=lambda r: f"n{r}")
    (g,) = diagnose.link_findings([0.170, 0.086, 0.084, 0.168])  # the wrap-around: node of rank 3
    assert g["rank"] == 3


def test_one_slow_link_is_named_as_a_link():
    (f,) = diagnose.link_findings([0.08, 0.08, 0.20, 0.08])
    assert f["link"] == [1, 2]
    assert diagnose.link_findings([0.08, 0.082, 0.079, 0.081]) == []
    assert diagnose.link_findings([None, None]) == []


def test_a_slow_node_with_two_ranks():
    # 3 nodes x 2 ranks, node 1 (ranks 2, 3) slow: the links into rank 2 and into rank 4 are slow,
    # the loopback hop into rank 3 is not
    (f,) = diagnose.link_findings([0.08, 0.01, 0.17, 0.01, 0.16, 0.01], node_of=[0, 0, 1, 1, 2, 2])
    assert (f["rank"], f["node"]) == (2, 1)

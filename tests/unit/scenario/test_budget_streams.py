"""The run-time estimate and the world-size cap of ddp.comm_streams > 1: the concurrent-streams
schedule steps every step of both runs event by event, O(collectives x ranks x log ranks), so
the estimate grows with the ranks (not their square, as the scan it replaced did) and an 8,192-rank
run of the scale scenario's 100 steps fits the budget, 200 of them do not."""

import pytest

from commsim.scenario import budget, schema
from commsim.scenario.loader import load_scenario
from commsim.scenario.schema import ScenarioError

SCALE = "scenarios/scaling_1024.yaml"


def _streams(nodes, steps, streams=2):
    # without its jitter: a deterministic run, which one stream stops early on and several do not;
    # read past the budget (force), which the tests below call themselves
    return load_scenario(SCALE, [f"cluster.nodes={nodes}", f"ddp.comm_streams={streams}", f"steps={steps}",
                                 "stragglers=[]"], force=True)


def test_an_8192_rank_streams_run_of_100_steps_fits_and_200_steps_are_refused():
    budget.check(_streams(1024, 100), "s.yaml", available=lambda: None)  # about 7 min measured
    with pytest.raises(budget.BudgetError) as err:
        budget.check(_streams(1024, 200), "s.yaml", available=lambda: None)
    assert "more than the 10 min limit" in str(err.value)


def test_the_cap_is_8192_ranks_and_refused_above_at_the_key():
    assert schema.MAX_STREAMS_WORLD_SIZE == 8192
    assert _streams(1024, 1).world_size == 8192
    with pytest.raises(ScenarioError) as err:
        _streams(1025, 1)
    assert err.value.path == "ddp.comm_streams"
    assert "expected comm_streams 1 above 8192 ranks" in str(err.value) and "got comm_streams 2 at 8200 ranks" in str(err.value)


def test_the_streams_estimate_counts_every_step_and_grows_with_the_ranks():
    assert budget.estimate(_streams(8, 40, streams=1)).simulated_steps == budget.STEADY_STEPS
    two = budget.estimate(_streams(64, 40))
    assert two.simulated_steps == 40  # no steady-state stop on the concurrent-streams path
    assert budget.estimate(_streams(64, 80)).seconds == pytest.approx(2 * two.seconds, rel=0.02)
    # the per-rank events dominate at 512 ranks and more: twice the ranks, about twice the time
    ratio = budget.estimate(_streams(128, 40)).seconds / two.seconds
    assert 1.9 < ratio < 2.2
    # the streams term itself, collectives x ranks x STREAMS_RANK a step for each of the two
    # runs, is most of it at 512 ranks
    streams_term = 2 * 40 * two.collectives * two.ranks * budget.STREAMS_RANK
    assert two.collectives == 78 and two.ranks == 512
    assert 0.8 * two.seconds < streams_term < two.seconds


def _with(sc, **ddp_or_algorithm):
    import dataclasses

    algorithm = ddp_or_algorithm.pop("algorithm", None)
    sc = dataclasses.replace(sc, ddp=dataclasses.replace(sc.ddp, **ddp_or_algorithm))
    if algorithm:
        sc = dataclasses.replace(sc, collective=dataclasses.replace(sc.collective, algorithm=algorithm))
    return sc


def test_comm_shared_all_costs_more_and_its_100_steps_at_8192_ranks_are_refused():
    # every collective sits in the shared pool for its whole time, and every event advances the
    # pool: 1.4-1.7 times the loop's seconds measured; at the default's ~7 min, over the 10 min
    sc = _streams(1024, 100)
    shared = _with(sc, comm_shared="all")
    term = lambda s: 2 * 100 * 78 * 8192 * budget.STREAMS_RANK * s  # noqa: E731
    assert budget.estimate(shared).seconds - budget.estimate(sc).seconds == pytest.approx(
        term(budget.STREAMS_SHARED_ALL) - term(1.0), rel=1e-9)
    budget.check(sc, "s.yaml", available=lambda: None)
    with pytest.raises(budget.BudgetError) as err:
        budget.check(shared, "s.yaml", available=lambda: None)
    assert "more than the 10 min limit" in str(err.value)


def test_the_streams_kernels_are_charged_once_a_run_not_every_step():
    # the concurrent-streams loop asks each planned kernel its time alone once: a tree's
    # 20 ms a call at 8,192 ranks is not paid 78 times a step (that refused runs that fit)
    ring, tree = (budget.estimate(_with(_streams(1024, 100), algorithm=a)) for a in ("ring", "tree"))
    assert tree.algorithm == "tree"
    assert tree.seconds < 1.01 * ring.seconds
    assert budget.estimate(_streams(1024, 200)).seconds == pytest.approx(
        2 * budget.estimate(_streams(1024, 100)).seconds, rel=0.01)

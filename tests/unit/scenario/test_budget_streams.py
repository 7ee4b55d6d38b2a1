"""The run-time estimate of ddp.comm_streams > 1: the concurrent-streams schedule steps every
step of both runs event by event, O(collectives x ranks^2), so a 256-rank run of the scale
scenario (about 16 s a step measured) is refused by the budget, not left to run for half an hour."""

import pytest

from commsim.scenario import budget
from commsim.scenario.loader import load_scenario

SCALE = "scenarios/scaling_1024.yaml"


def _streams(nodes, steps, streams=2):
    # without its jitter: a deterministic run, which one stream stops early on and several do not
    return load_scenario(SCALE, [f"cluster.nodes={nodes}", f"ddp.comm_streams={streams}", f"steps={steps}",
                                 "stragglers=[]"])


def test_a_256_rank_streams_run_of_100_steps_is_refused():
    with pytest.raises(budget.BudgetError) as err:
        budget.check(_streams(32, 100), "s.yaml", available=lambda: None)
    assert "more than the 10 min limit" in str(err.value)


def test_the_streams_estimate_counts_every_step_and_the_square_of_the_ranks():
    assert budget.estimate(_streams(8, 40, streams=1)).simulated_steps == budget.STEADY_STEPS
    two = budget.estimate(_streams(8, 40))
    assert two.simulated_steps == 40  # no steady-state stop on the concurrent-streams path
    assert budget.estimate(_streams(8, 80)).seconds == pytest.approx(2 * two.seconds, rel=0.02)
    # the ranks^2 term dominates from 64 ranks on: twice the ranks, four times the time
    assert budget.estimate(_streams(16, 40)).seconds == pytest.approx(4 * two.seconds, rel=0.05)

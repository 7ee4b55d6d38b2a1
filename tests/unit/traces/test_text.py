"""The blame table's counted lines: "1 rank", "1 collective", "1 step" for one, the plural otherwise."""

from commsim.traces.text import MAX_STEPS_SHOWN, format_blame


def _report(world_size, collectives, steps, ranks_listed, steps_listed):
    ranks = [{"rank": r, "last_count": 0, "last_share": 0.0, "late_count": 0, "steps_named": 0,
              "mean_lateness_s": None, "total_lateness_s": None, "waited_on_s": 0.0} for r in range(ranks_listed)]
    per_step = [{"step": s, "step_time_s": 1e-3, "set_by": "compute"} for s in range(steps_listed)]
    return {"world_size": world_size, "collectives": collectives, "steps": steps, "noise_sigma_s": None,
            "verdict": "none", "ranks": ranks, "per_step": per_step}


def test_one_rank_one_collective_one_step_is_singular():
    head = format_blame(_report(1, 1, 1, 1, 1), "t").splitlines()[0]
    assert head.startswith("t: 1 rank, 1 collective, 1 step; "), head


def test_several_are_plural():
    head = format_blame(_report(2, 3, 4, 2, 4), "t").splitlines()[0]
    assert head.startswith("t: 2 ranks, 3 collectives, 4 steps; "), head


def test_the_more_lines_count_one_and_several():
    one = format_blame(_report(9, 1, MAX_STEPS_SHOWN + 1, 9, MAX_STEPS_SHOWN + 1), "t", top=8)
    assert "  ... 1 more rank (all in --json)" in one and "  ... 1 more step (all in --json)" in one
    two = format_blame(_report(10, 1, MAX_STEPS_SHOWN + 2, 10, MAX_STEPS_SHOWN + 2), "t", top=8)
    assert "  ... 2 more ranks (all in --json)" in two and "  ... 2 more steps (all in --json)" in two

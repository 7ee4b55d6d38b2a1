"""check_mitigations: what a scenario cannot take, refused before anything runs."""

import pytest
from click.testing import CliRunner

from commsim.cli.main import main
from commsim.mitigations.async_ps import estimated_seconds
from commsim.mitigations.compare import check_mitigations
from commsim.mitigations.spec import MitigationError, parse_mitigations
from commsim.scenario.budget import MAX_SECONDS
from commsim.scenario.loader import load_scenario

SCENARIO = "scenarios/seed_1b_8gpu_ib100.yaml"  # 8 workers


def test_async_servers_beyond_the_run_time_limit_are_refused_at_async_servers():
    # async:servers=1e9 built two billion SimPy resources and was killed for its memory
    sc = load_scenario(SCENARIO, steps=2)
    (m,) = parse_mitigations("async:servers=1e9")
    with pytest.raises(MitigationError) as err:
        check_mitigations(sc, (m,), "--mitigations")
    message = str(err.value)
    assert message.startswith("--mitigations: async.servers: expected a run within the 600 s limit, got servers=1,000,000,000")
    assert "2 steps x 8 workers x 1,000,000,000 servers" in message and "--force" in message
    check_mitigations(sc, (m,), "--mitigations", force=True)  # --force takes it as given
    # the limit is where the estimate crosses MAX_SECONDS: just under it passes
    (ok,) = parse_mitigations("async:servers=10000")
    assert estimated_seconds(sc, ok.remedies[0]) < MAX_SECONDS
    check_mitigations(sc, (ok,), "--mitigations")


def test_compare_refuses_huge_async_servers_in_one_line_exit_2(tmp_path):
    out = tmp_path / "c.json"
    res = CliRunner().invoke(main, ["compare", SCENARIO, "--steps", "2", "-q", "--json", str(out),
                                    "--mitigations", "async:servers=1e9"])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "async.servers: expected a run within the 600 s limit" in lines[0]
    assert not out.exists()


def test_a_width_too_large_is_named_by_its_parameter_path():
    # once 'powersgd:width=1e9.width': the label, value included, as a key path
    sc = load_scenario(SCENARIO, steps=2)
    (m,) = parse_mitigations("powersgd:width=1e9")
    with pytest.raises(MitigationError) as err:
        check_mitigations(sc, (m,), "--mitigations")
    assert str(err.value).startswith("--mitigations: powersgd.width: expected a width whose square fits")


def test_a_localsgd_period_far_above_the_steps_is_refused_at_localsgd_h():
    # post-local SGD runs whole periods: localsgd:H=1e9 stretched the run to 1e9 steps and
    # ended in numpy's _ArrayMemoryError (30 GiB for the per-rank records), a traceback
    sc = load_scenario(SCENARIO, steps=2)
    (huge,) = parse_mitigations("localsgd:H=1e9")
    for force in (False, True):  # past steps x world size, whatever --force says
        with pytest.raises(MitigationError) as err:
            check_mitigations(sc, (huge,), "--mitigations", force=force)
        assert str(err.value).startswith("--mitigations: localsgd.H: expected a period whose whole periods keep "
                                         "steps x world size up to 1073741824")
    (big,) = parse_mitigations("localsgd:H=1e7")  # within it, but past the run's budget
    with pytest.raises(MitigationError) as err:
        check_mitigations(sc, (big,), "--mitigations")
    message = str(err.value)
    assert "localsgd.H: expected a period whose whole periods fit the run's budget, got H=10,000,000" in message
    assert "use a smaller H, or pass --force" in message and "\n" not in message
    check_mitigations(sc, (big,), "--mitigations", force=True)  # --force takes it as given
    check_mitigations(sc, parse_mitigations("localsgd:H=8"), "--mitigations")


def test_compare_refuses_a_huge_localsgd_period_in_one_line_exit_2(tmp_path):
    out = tmp_path / "c.json"
    res = CliRunner().invoke(main, ["compare", SCENARIO, "--steps", "2", "-q", "--json", str(out),
                                    "--mitigations", "localsgd:H=1e9"])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "localsgd.H: expected a period" in lines[0]
    assert not out.exists()

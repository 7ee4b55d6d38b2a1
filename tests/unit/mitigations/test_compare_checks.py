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

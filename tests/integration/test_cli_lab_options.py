"""`commsim lab calibrate` and `commsim lab validate` check their options and output paths before
they look for a lab, so these run anywhere (no root, no namespaces): a lab named here is never up."""

import pytest

from commsim.cli.main import run_cli

SCENARIO = "scenarios/32gpu_throttle.yaml"
NO_LAB = "cslab-options-test-never-up"


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
@pytest.mark.parametrize("command", [["calibrate", "-o", "{tmp}/c.yaml"],
                                     ["validate", SCENARIO, "--calibration", "{tmp}/c.yaml"]])
def test_a_timeout_that_is_no_positive_number_of_seconds_is_refused(tmp_path, capsys, command, value):
    """--timeout was a plain float: nan, inf, -1 and 0 went through to the launcher."""
    args = ["lab", *[a.format(tmp=tmp_path) for a in command], "--timeout", value, "--name", NO_LAB]
    assert run_cli(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--timeout" in err and "expected a finite number of seconds > 0" in err


@pytest.mark.parametrize("command, option", [
    (["calibrate", "-o", "{tmp}/missing/c.yaml"], "-o"),
    (["validate", SCENARIO, "--calibration", "{tmp}/c.yaml", "--json", "{tmp}/missing/r.json"], "--json"),
])
def test_an_output_in_a_missing_folder_is_refused_before_the_lab_is_looked_for(tmp_path, capsys, command, option):
    """Before, the lab ran first (a calibration's measurements, a replay) and the write failed after it."""
    assert run_cli(["lab", *[a.format(tmp=tmp_path) for a in command], "--name", NO_LAB]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"commsim: error: {option} {tmp_path}/missing/") and "does not exist" in err


def test_lab_validate_json_cannot_replace_its_scenario(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(open(SCENARIO).read())
    before = scenario.read_bytes()
    assert run_cli(["lab", "validate", str(scenario), "--calibration", str(tmp_path / "c.yaml"),
                    "--json", str(scenario), "--name", NO_LAB]) == 2
    assert "got the SCENARIO itself" in capsys.readouterr().err and scenario.read_bytes() == before


def test_every_option_of_every_command_is_explained_in_its_help():
    """Each option of every command (lab's included) has a help text (lab validate --warmup-steps
    had none)."""
    import click

    from commsim.cli.main import SUBCOMMAND_MODULES, main

    for name in (n for names in SUBCOMMAND_MODULES.values() for n in names):
        main.get_command(None, name)  # registers the lazily loaded modules

    def options(cmd, prefix):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from options(sub, [*prefix, name])
        else:
            yield from ((" ".join(prefix), p) for p in cmd.params if isinstance(p, click.Option))

    found = list(options(main, ["commsim"]))
    assert any(where == "commsim lab validate" for where, _ in found) and len(found) > 100
    assert [f"{where} {p.opts[0]}" for where, p in found if not p.help] == []

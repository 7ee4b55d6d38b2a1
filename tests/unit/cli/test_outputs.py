"""commsim/cli/outputs.py: output paths refused before any work."""

import os

import pytest

from commsim.cli.common import CommandFailure
from commsim.cli.main import run_cli
from commsim.cli.outputs import check_outputs


def refused(outputs, inputs=None):
    with pytest.raises(CommandFailure) as info:
        check_outputs(outputs, inputs)
    assert info.value.exit_code == 2
    return info.value.format_message()


def test_an_empty_path_is_refused():
    # the commands test an output by truth value: --json '' ran and wrote nothing, exit 0
    assert refused({"--json": ""}) == "--json: expected a file path or '-', got an empty path"


@pytest.mark.parametrize("option", ["--json", "--csv", "--trace", "--plot"])
def test_run_refuses_an_empty_output_before_the_simulation(option, tmp_path, capsys):
    assert run_cli(["run", "scenarios/validate_gloo_2rank.yaml", "-q", option, ""]) == 2
    err = capsys.readouterr().err
    assert err == f"commsim: error: {option}: expected a file path or '-', got an empty path\n"


def test_a_folder_path_is_refused_not_written_as_a_file(tmp_path):
    # "out/" named a folder that does not exist: the atomic writer wrote the JSON to the file "out"
    target = str(tmp_path / "out") + os.sep
    assert refused({"--json": target}) == (f"--json {target}: cannot write here: it names a folder "
                                           f"(ends in '{os.sep}'; expected a file path)")
    assert not os.path.exists(tmp_path / "out")


def test_a_file_with_a_trailing_slash_is_a_folder_path_too(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("x")
    message = refused({"--json": f"{scenario}/"}, {"SCENARIO": str(scenario)})
    assert "it names a folder" in message
    assert scenario.read_text() == "x"


def test_a_plain_new_file_and_stdout_pass(tmp_path):
    assert check_outputs({"--json": str(tmp_path / "a.json"), "--csv": None}) is False
    assert check_outputs({"--json": "-"}) is True


def _a_scenario_naming_a_calibration(tmp_path, capsys):
    """(cal.yaml, s.yaml naming it as `calibration: cal.yaml`, cal.yaml's bytes)."""
    from commsim.cli.main import run_cli as cli

    cal = tmp_path / "cal.yaml"
    assert cli(["calibrate", "--from-nccl-tests", "tests/data/nccl-tests/A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt",
                "-o", str(cal)]) == 0
    scenario = tmp_path / "s.yaml"
    scenario.write_text(open("scenarios/seed_1b_8gpu_ib100.yaml").read() + "\ncalibration: cal.yaml\n")
    capsys.readouterr()
    return cal, scenario, cal.read_bytes()


def test_run_refuses_an_output_over_the_calibration_the_scenario_names(tmp_path, capsys):
    # `calibration: cal.yaml` in the scenario (relative to it) is an input as --calibration is:
    # run S --json cal.yaml replaced the calibration with the summary, exit 0
    from commsim.cli.main import run_cli as cli

    cal, scenario, kept = _a_scenario_naming_a_calibration(tmp_path, capsys)
    for option in ("--json", "--csv", "--trace"):
        assert cli(["run", str(scenario), "-q", option, str(cal)]) == 2
        assert capsys.readouterr().err == (f"commsim: error: {option} {cal}: expected an output path other than the "
                                           "inputs, got the scenario's calibration file itself (it would be overwritten)\n")
        assert cal.read_bytes() == kept
    # another spelling of it (relative to the current directory, through a symlink) is the same file
    link = tmp_path / "link.yaml"
    link.symlink_to(cal)
    assert cli(["run", str(scenario), "-q", "--json", str(link)]) == 2
    assert "got the scenario's calibration file itself, " in capsys.readouterr().err
    assert cal.read_bytes() == kept
    # a file of the same name elsewhere is no input
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert cli(["run", str(scenario), "-q", "--json", str(other / "cal.yaml")]) == 0


def test_a_dangling_symlink_into_a_missing_folder_is_refused_before_the_run(tmp_path):
    # the atomic writer writes where the link points: the link's own folder exists, the
    # target's does not, and the write failed only after the simulation
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "missing" / "out.json")
    assert refused({"--json": str(link)}) == (f"--json {link}: cannot write here: the folder "
                                              f"{tmp_path / 'missing'} does not exist")


def test_a_symlink_to_a_new_file_in_an_existing_folder_passes(tmp_path):
    (tmp_path / "real").mkdir()
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "real" / "out.json")
    assert check_outputs({"--json": str(link)}) is False


def test_compare_refuses_an_output_over_the_calibration_the_scenario_names(tmp_path, capsys):
    # compare S --json cal.yaml replaced the calibration the scenario names with the rows, exit 0
    from commsim.cli.main import run_cli as cli

    cal, scenario, kept = _a_scenario_naming_a_calibration(tmp_path, capsys)
    assert cli(["compare", str(scenario), "-q", "--steps", "2", "--json", str(cal)]) == 2
    assert capsys.readouterr().err == (f"commsim: error: --json {cal}: expected an output path other than the "
                                       "inputs, got the scenario's calibration file itself (it would be overwritten)\n")
    assert cal.read_bytes() == kept


# Every command that reads a scenario and writes a file keeps the calibration the scenario names
# ({cal}: cal.yaml beside it), as run and compare do; each replaced it with its output, exit 0
# (sweep: a -o folder whose results.json is that file). validate and lab validate replace the
# scenario's calibration by --calibration ({other}), and still keep the file it names.
@pytest.mark.parametrize("argv, option", [
    (["algorithms", "{s}", "-q", "--algorithm", "ring", "--steps", "2", "--json", "{cal}"], "--json"),
    (["collective", "{s}", "-q", "--algorithm", "ring", "--sizes", "8:64", "--json", "{cal}"], "--json"),
    (["validate", "{s}", "--calibration", "{other}", "--backend", "gloo", "--json", "{cal}"], "--json"),
    (["lab", "validate", "{s}", "--calibration", "{other}", "--json", "{cal}"], "--json"),
    (["sweep", "{s}", "-q", "--steps", "2", "-j", "1", "--grid", "seed=1,2", "-o", "{tmp}"], "-o"),
    (["sweep", "{s_grid}", "-q", "--steps", "2", "-j", "1", "--grid", "calibration={tmp}/results.json",
      "-o", "{tmp}"], "-o"),
], ids=["algorithms", "collective", "validate", "lab-validate", "sweep", "sweep-grid"])
def test_every_command_refuses_an_output_over_the_calibration_the_scenario_names(argv, option, tmp_path, capsys):
    from commsim.cli.main import run_cli as cli

    cal, scenario, kept = _a_scenario_naming_a_calibration(tmp_path, capsys)
    if argv[0] == "sweep":  # the -o folder's results.json is the calibration
        os.replace(cal, tmp_path / "results.json")
        cal = tmp_path / "results.json"
        scenario.write_text(scenario.read_text().replace("calibration: cal.yaml", "calibration: results.json"))
    other = tmp_path / "other.yaml"
    other.write_bytes(kept)
    plain = tmp_path / "plain.yaml"  # names no calibration: --grid calibration=... does
    plain.write_text(open("scenarios/seed_1b_8gpu_ib100.yaml").read())
    args = [a.format(s=scenario, s_grid=plain, cal=cal, other=other, tmp=tmp_path) for a in argv]
    assert cli(args) == 2
    err = capsys.readouterr().err
    assert err == (f"commsim: error: {option} {cal}: expected an output path other than the inputs, got the "
                   "scenario's calibration file itself (it would be overwritten)\n")
    assert cal.read_bytes() == kept

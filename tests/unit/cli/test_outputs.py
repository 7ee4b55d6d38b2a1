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

"""An empty item in a comma list of the command line is refused (a stray comma is a typo):
"ring," and "1,,2" were accepted, the empty item dropped without a word."""

import click
import pytest

from commsim.cli.common import split_list
from commsim.cli.main import run_cli

SCENARIO = "scenarios/32gpu_throttle.yaml"


@pytest.mark.parametrize("text", ["ring,", ",ring", "ring,,tree", "ring, ,tree", "^,ll"])
def test_split_list_refuses_an_empty_item(text):
    with pytest.raises(click.BadParameter) as exc:
        split_list(text, "--x", negatable=True)
    assert exc.value.message == f"expected a comma-separated list without empty items, got {text!r} (a stray comma)"


def test_split_list_keeps_the_items():
    assert split_list(" ring , tree ", "--x") == ["ring", "tree"]
    assert split_list("^ll,ll128", "--x", negatable=True) == ["ll", "ll128"]
    assert split_list("", "--x") == []


@pytest.mark.parametrize("argv, option, given", [
    (["collective", SCENARIO, "--algorithm", "ring,", "--sizes", "8:64"], "--algorithm", "ring,"),
    (["algorithms", SCENARIO, "--algorithm", "ring,,tree"], "--algorithm", "ring,,tree"),
    (["algorithms", SCENARIO, "--model", "alpha-beta,"], "--model", "alpha-beta,"),
    (["algorithms", SCENARIO, "--nodes", "1,,2"], "--nodes", "1,,2"),
    (["compare", SCENARIO, "--nodes", "1,,2"], "--nodes", "1,,2"),
    (["collective", "--system", "dgx-h100", "--nodes", "1", "--nccl-algo", "ring,"], "--nccl-algo", "ring,"),
    (["collective", "--system", "dgx-h100", "--nodes", "1", "--nccl-proto", "^,ll"], "--nccl-proto", "^,ll"),
])
def test_every_comma_list_option_refuses_a_stray_comma_in_one_line(capsys, argv, option, given):
    assert run_cli(argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and out == ""
    assert f"{option}: expected a comma-separated list without empty items, got {given!r}" in err

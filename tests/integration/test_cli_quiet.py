"""-q/--quiet on validate, plot, sweep and the lab subcommands that print a report: nothing on
stdout, errors still on stderr, outputs still written. The lab and the torch launch are
replaced by fakes (no root, no ranks): what is tested is the command's own printing."""

import json
import types

import pytest
from click.testing import CliRunner

import commsim.cli.lab as lab_cli
import commsim.cli.validate as validate_cli
from commsim.cli.main import main, run_cli
from commsim.lab import LabSpec

SMALL = "scenarios/32gpu_throttle.yaml"


def _fake_numerics(monkeypatch, passed=True):
    launch = types.SimpleNamespace(launch=lambda fn, n, backend, timeout: ([{"name": "sum", "passed": passed}],))
    numerics = types.SimpleNamespace(rank_numerics=None, format_result=lambda r: f"{r['name']}: ok")
    monkeypatch.setattr(validate_cli, "import_validate", {"launch": launch, "numerics": numerics}.__getitem__)


@pytest.mark.parametrize("passed, code", [(True, 0), (False, 1)])
def test_validate_quiet_prints_nothing_and_still_writes_json_and_exits_1_on_a_failure(monkeypatch, capsys, tmp_path,
                                                                                      passed, code):
    _fake_numerics(monkeypatch, passed)
    out = tmp_path / "n.json"
    assert run_cli(["validate", "--numerics", "--backend", "gloo", "-q", "--json", str(out)]) == code
    assert capsys.readouterr() == ("", "")
    assert json.loads(out.read_text())["checks"][0]["passed"] is passed


def test_validate_without_quiet_prints_its_report(monkeypatch, capsys):
    _fake_numerics(monkeypatch)
    assert run_cli(["validate", "--numerics", "--backend", "gloo"]) == 0
    assert capsys.readouterr().out == "sum: ok\n1 passed, 0 failed\n"


def test_sweep_and_plot_quiet_print_nothing_and_write_their_files(capsys, tmp_path):
    out = tmp_path / "sweep"
    assert run_cli(["sweep", SMALL, "-o", str(out), "--steps", "2", "-j", "1", "-q", "--plot",
                    "--grid", "cluster.nodes=2,4"]) == 0
    assert capsys.readouterr().out == ""  # the summary and the plots' paths were printed
    assert (out / "results.csv").exists() and list(out.glob("*.png"))
    for f in out.glob("*.png"):
        f.unlink()
    assert run_cli(["plot", str(out), "-q"]) == 0
    assert capsys.readouterr() == ("", "") and list(out.glob("*.png"))


class _FakeLab:
    spec = LabSpec(nodes=2, rate_bps=200e6, name="fake")

    def __init__(self, spec=None):
        pass

    @classmethod
    def attach(cls, name):
        return cls()

    def up(self):
        pass

    def cut(self, node):
        pass

    def set_rate(self, node, rate):
        pass


@pytest.mark.parametrize("argv", [
    ["lab", "up", "--nodes", "2", "--name", "fake"],
    ["lab", "link", "--node", "1", "--cut", "--name", "fake"],
    ["lab", "link", "--node", "1", "--bandwidth", "100Mbit", "--name", "fake"],
    ["lab", "down", "--name", "fake"],
    ["lab", "status", "--name", "fake"],
])
def test_lab_subcommands_quiet_print_nothing(monkeypatch, capsys, argv):
    import commsim.lab.state as state

    monkeypatch.setattr(lab_cli, "Lab", _FakeLab)
    monkeypatch.setattr(lab_cli, "teardown", lambda prefix, state_name=None: ["cslab-fake-0"])
    monkeypatch.setattr(lab_cli, "leftovers", lambda prefix="": [])
    monkeypatch.setattr(state, "read_spec", lambda name: _FakeLab.spec)
    assert run_cli(argv) == 0
    assert capsys.readouterr().out != ""  # it prints a report
    assert run_cli([*argv, "-q"]) == 0
    assert capsys.readouterr() == ("", "")


def test_lab_status_quiet_says_not_up_by_its_exit_code_alone(monkeypatch, capsys):
    import commsim.lab.state as state

    monkeypatch.setattr(lab_cli, "leftovers", lambda prefix="": [])
    monkeypatch.setattr(state, "read_spec", lambda name: None)
    r = CliRunner().invoke(main, ["lab", "status", "--name", "fake", "-q"])
    assert r.exit_code == 1 and (r.stdout, r.stderr) == ("", "")


def test_lab_quiet_keeps_errors_on_stderr(capsys):
    assert run_cli(["lab", "up", "--nodes", "2", "--bandwidth=-5Mbit", "-q"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("commsim: error: --bandwidth: ") and err.count("\n") == 1

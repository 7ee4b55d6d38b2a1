"""validate / calibrate --backend: options refused before anything is launched."""

import pytest

from tests.unit.cli.launch_guard import one_line_exit_2, refuse_launches


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    """No rank may start: a refusal that did not happen fails at once instead of running a job."""

    refuse_launches(monkeypatch)


@pytest.mark.parametrize("command", [["validate", "--numerics"], ["calibrate", "--backend", "gloo", "-o", "c.yaml"]])
def test_a_timeout_beyond_11_days_is_refused(command, tmp_path, monkeypatch):
    # --timeout 1e300 failed every rank with an OverflowError (exit 3) after launching them
    monkeypatch.chdir(tmp_path)
    line = one_line_exit_2([*command, "--timeout", "1e300"])
    assert "Invalid value for '--timeout': expected at most 1e+06 seconds (11.6 days), got '1e300'" in line
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("extra, named", [
    (["--calibration", "docs/measurements/gloo2_vm_calibration.yaml"], "--calibration applies"),
    (["--steps", "3"], "--steps applies"),
    (["--mode", "ddp", "--set", "steps=3"], "--mode, --set apply"),
    (["--mode", "replay"], "--mode applies"),  # given, even at its default
    (["--warmup-steps", "0", "--force"], "--warmup-steps, --force apply"),
])
def test_numerics_refuses_the_options_of_a_scenario_run(extra, named):
    # they were accepted and dropped: the four checks ran as if they were not given
    line = one_line_exit_2(["validate", "--numerics", *extra])
    assert f"--numerics runs four fixed checks; {named} to a SCENARIO's run: drop" in line

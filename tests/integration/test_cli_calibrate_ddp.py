"""`commsim calibrate --ddp-fit`: DDP's costs from validate --mode ddp reports (made by the simulator here)."""

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from commsim.analysis.ddp_fit import DDPRun, fit_record, predicted_step_time
from commsim.cli.main import main
from commsim.scenario import spec

MB = 2**20


def _report(path, cap_mb, h=10e-3, s=spec.DDPCosts().overlap_slowdown):
    sc = spec.Scenario(cluster=spec.Cluster(1, 2, spec.Link(0.25e9, 100e-6), spec.Link(0.25e9, 100e-6)),
                       model=spec.Model(6_000_000), compute=spec.Compute(0.02, 0.04, 0.005, 4), steps=4,
                       ddp=spec.DDP(bucket_cap=cap_mb * MB))
    t = predicted_step_time(DDPRun(sc, 1.0, 0.0), h, s)
    path.write_text(json.dumps({"mode": "ddp", "ddp_fit_input": fit_record(sc, None, [t * 0.999, t, t * 1.001])}))
    return str(path)


def test_ddp_fit_writes_a_ddp_fragment(tmp_path):
    reports = [_report(tmp_path / f"r{c}.json", c) for c in (1, 25)]
    out = tmp_path / "ddp.yaml"
    res = CliRunner().invoke(main, ["calibrate", "--ddp-fit", *reports, "-o", str(out)])
    assert res.exit_code == 0, res.output
    ddp = yaml.safe_load(out.read_text())["ddp"]
    assert ddp["bucket_overhead"].endswith(" us")
    assert float(ddp["bucket_overhead"].split()[0]) == pytest.approx(10_000, rel=1e-3)
    assert "ddp.bucket_overhead = " in res.output
    assert "per-step constant = " in res.output
    assert set(ddp) == {"bucket_overhead"}  # the per-step constant is a diagnostic, not a key


def test_ddp_fit_that_cannot_tell_the_overhead_from_a_per_step_constant_says_so(tmp_path):
    # 400 us launches hide behind the collectives at both caps: the fragment keeps the
    # scenario's value, marked, and still loads as a scenario's ddp section
    reports = [_report(tmp_path / f"r{c}.json", c, h=400e-6) for c in (1, 25)]
    out = tmp_path / "ddp.yaml"
    res = CliRunner().invoke(main, ["calibrate", "--ddp-fit", *reports, "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "not determined" in res.output and "kept at 20 us" in res.output
    ddp = yaml.safe_load(out.read_text())["ddp"]
    assert float(ddp["bucket_overhead"].split()[0]) == pytest.approx(20)


def test_ddp_fit_refusals_are_one_line_exit_2_and_write_nothing(tmp_path):
    one = _report(tmp_path / "r1.json", 1)
    out = tmp_path / "ddp.yaml"
    for args, text in (
        (["--ddp-fit", one], "two or more bucket caps"),
        (["--ddp-fit", one, str(tmp_path / "missing.json")], "missing.json: file not found"),
        (["--ddp-fit", one, "/dev/zero"], "/dev/zero: is a character device"),
        (["--ddp-fit", one, "--backend", "gloo"], "give no --from-nccl-tests or --backend"),
        (["--ddp-fit"], "no report given"),
    ):
        res = CliRunner().invoke(main, ["calibrate", *args, "-o", str(out)])
        assert res.exit_code == 2, res.output
        assert text in res.output and "Traceback" not in res.output
        assert len(res.output.strip().splitlines()) == 1
        assert not out.exists()


def test_ddp_fit_refuses_a_straggler_flag_that_is_not_a_count_or_boolean(tmp_path):
    one, other = _report(tmp_path / "r1.json", 1), _report(tmp_path / "r25.json", 25)
    doc = json.loads((tmp_path / "r25.json").read_text())
    doc["ddp_fit_input"]["stragglers"] = "no"
    (tmp_path / "r25.json").write_text(json.dumps(doc))
    out = tmp_path / "ddp.yaml"
    res = CliRunner().invoke(main, ["calibrate", "--ddp-fit", one, other, "-o", str(out)])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (f"commsim: error: {other}: ddp_fit_input.stragglers: expected the run's straggler count (an "
                                  "integer >= 0, as fit_record writes it) or a boolean, got 'no'")
    assert not out.exists()


def test_ddp_fit_refuses_one_run_given_twice(tmp_path):
    # the same file twice, by another name, or copied: its cap would count double in the fit
    one, other = _report(tmp_path / "r1.json", 1), _report(tmp_path / "r25.json", 25)
    (tmp_path / "copy.json").write_text((tmp_path / "r25.json").read_text())
    out = tmp_path / "ddp.yaml"
    for twice in (other, str(tmp_path / "." / "r25.json"), str(tmp_path / "copy.json")):
        res = CliRunner().invoke(main, ["calibrate", "--ddp-fit", one, other, twice, "-o", str(out)])
        assert res.exit_code == 2, res.output
        assert res.output.strip() == (f"commsim: error: {other} and {twice} are the same run (the same scenario and "
                                      "step times): give each run once")
        assert not out.exists()


def test_ddp_fit_does_not_write_over_a_report_it_reads(tmp_path):
    one, other = _report(tmp_path / "r1.json", 1), _report(tmp_path / "r25.json", 25)
    before = (tmp_path / "r1.json").read_bytes()
    res = CliRunner().invoke(main, ["calibrate", "--ddp-fit", one, other, "-o", str(tmp_path / "." / "r1.json")])
    assert res.exit_code == 2, res.output
    assert "got the report itself (it would be overwritten)" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert (tmp_path / "r1.json").read_bytes() == before


def test_ddp_fit_refuses_json_nested_too_deeply_in_one_line(tmp_path):
    one = _report(tmp_path / "r1.json", 1)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    res = CliRunner().invoke(main, ["calibrate", "--ddp-fit", one, str(deep), "-o", str(tmp_path / "ddp.yaml")])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == f"commsim: error: {deep}: not JSON as validate writes it (nested too deeply)"


def _with_backend(path, backend):
    doc = json.loads(path.read_text())
    doc["backend"] = backend
    path.write_text(json.dumps(doc))
    return str(path)


def test_ddp_fit_refuses_runs_on_different_backends(tmp_path):
    # a bucket's host cost is the backend's own: one fit over a NCCL and a gloo run is neither's
    nccl = _with_backend(Path(_report(tmp_path / "nccl_1MB.json", 1)), "nccl")
    gloo = _with_backend(Path(_report(tmp_path / "gloo_25MB.json", 25)), "gloo")
    out = tmp_path / "ddp.yaml"
    res = CliRunner().invoke(main, ["calibrate", "--ddp-fit", nccl, gloo, "-o", str(out)])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (f"commsim: error: {nccl} and {gloo} are runs on different backends (nccl and gloo, "
                                  "their reports' key backend): fit each backend's runs on their own")
    assert not out.exists()
    # the same backend throughout fits
    both = _with_backend(Path(gloo), "nccl")
    res = CliRunner().invoke(main, ["calibrate", "--ddp-fit", nccl, both, "-o", str(out)])
    assert res.exit_code == 0, res.output


def test_ddp_fit_refuses_a_backend_that_is_not_a_name(tmp_path):
    one = _report(tmp_path / "r1.json", 1)
    other = _with_backend(Path(_report(tmp_path / "r25.json", 25)), 3)
    res = CliRunner().invoke(main, ["calibrate", "--ddp-fit", one, other, "-o", str(tmp_path / "ddp.yaml")])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (f"commsim: error: {other}: backend: expected the torch.distributed backend the run "
                                  "used (a name such as gloo or nccl, as validate writes it), got 3")

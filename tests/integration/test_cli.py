"""`commsim run` end to end: outputs, determinism, and bad input (exit 2, one line, no traceback)."""

import csv
import json
import subprocess
import sys

import pytest

from commsim.cli.main import run_cli

SCENARIO = "scenarios/32gpu_throttle.yaml"


def test_run_writes_json_csv_and_trace(tmp_path, capsys):
    j, c, t = tmp_path / "s.json", tmp_path / "s.csv", tmp_path / "t.json"
    assert run_cli(["run", SCENARIO, "--steps", "6", "--json", str(j), "--csv", str(c), "--trace", str(t)]) == 0
    out = capsys.readouterr().out
    # 6 steps (2.4 s) end before rank 13 heats up (6 s): who is late is the jitter's draw
    assert "step time" in out and "scaling efficiency" in out and "late ranks (share of collectives): rank " in out
    s = json.loads(j.read_text())
    for key in ("scenario", "world_size", "steps", "step_time_s", "baseline_step_time_s", "slowdown", "compute_time_s",
                "comm_time_s", "exposed_comm_s", "straggler_cost_s", "scaling_efficiency",
                "throughput_samples_per_s", "stragglers_top"):
        assert key in s
    assert set(s["step_time_s"]) == {"mean", "p50", "p95", "p99", "max"}
    assert s["compute_time_s"] == pytest.approx(0.38)
    assert s["exposed_comm_s"] == pytest.approx(s["baseline_step_time_s"] - s["compute_time_s"])
    assert s["scaling_efficiency"] == pytest.approx(s["compute_time_s"] / s["step_time_s"]["mean"])
    rows = list(csv.DictReader(c.open()))
    assert len(rows) == 6 and list(rows[0]) == ["step", "start_s", "end_s", "duration_s", "last_rank"]
    assert float(rows[1]["start_s"]) == pytest.approx(float(rows[0]["end_s"]))
    durations = [float(r["duration_s"]) for r in rows]
    assert sum(durations) / 6 == pytest.approx(s["step_time_s"]["mean"])
    trace = json.loads(t.read_text())
    names = {e["name"] for e in trace["traceEvents"]}
    assert {"forward+backward", "optimizer", "thread_name"} <= names


def test_same_seed_gives_byte_identical_json(tmp_path):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    for path, seed in ((a, 3), (b, 3), (c, 4)):
        assert run_cli(["run", SCENARIO, "-q", "--steps", "10", "--seed", str(seed), "--json", str(path)]) == 0
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_set_overrides_and_removes_stragglers(tmp_path):
    out = tmp_path / "s.json"
    assert run_cli(["run", SCENARIO, "-q", "--steps", "4", "--set", "stragglers=[]", "--json", str(out)]) == 0
    s = json.loads(out.read_text())
    assert s["slowdown"] == pytest.approx(1.0) and s["stragglers_top"] == []


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "missing.yaml"], "missing.yaml"),
        (["run", SCENARIO, "--set", "ddp.bucket_cap=5 us"], "ddp.bucket_cap"),
        (["run", SCENARIO, "--set", "stragglers[0].ranks=99"], "stragglers[0].ranks"),
        (["run", SCENARIO, "--set", "cluster.nodez=3"], "nodes"),
        (["run", SCENARIO, "--set", "oops"], "oops"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, needle, capsys):
    assert run_cli(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err


def test_existing_output_is_not_clobbered_by_a_failed_run(tmp_path):
    out = tmp_path / "keep.json"
    out.write_text("precious")
    assert run_cli(["run", SCENARIO, "--set", "model.parameters=-1", "--json", str(out)]) == 2
    assert out.read_text() == "precious"


def test_unwritable_output_is_bad_input(tmp_path, capsys):
    assert run_cli(["run", SCENARIO, "-q", "--steps", "2", "--json", str(tmp_path / "no" / "dir" / "s.json")]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_console_script_runs_and_fails_cleanly():
    ok = subprocess.run([sys.executable, "-m", "commsim.cli", "run", SCENARIO, "--steps", "3"], capture_output=True, text=True)
    assert ok.returncode == 0 and "slowdown" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "commsim.cli", "run", "nope.yaml"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_run_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run.png"
    assert run_cli(["run", SCENARIO, "-q", "--steps", "5", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_plot_with_bad_suffix_is_bad_input(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert run_cli(["run", SCENARIO, "-q", "--steps", "2", "--plot", str(tmp_path / "run.txt")]) == 2
    assert ".png" in capsys.readouterr().err


LOG = "tests/data/nccl-tests/V100-SXM2-16GB-hybridCubeMesh-1node_8ranks_gh-blog-2019.txt"
ONE_NODE = ["cluster.nodes=1", "cluster.gpus_per_node=8", "stragglers=[]"]


def _calibrate(tmp_path):
    cal = tmp_path / "cal" / "v100.yaml"
    cal.parent.mkdir()
    assert run_cli(["calibrate", "--from-nccl-tests", LOG, "-o", str(cal)]) == 0
    return cal


def test_run_with_a_calibration_prices_the_ring_from_it(tmp_path):
    from commsim.calibration import load_calibration, predict_allreduce_time
    from commsim.scenario.loader import load_scenario

    cal = _calibrate(tmp_path)
    out = tmp_path / "s.json"
    sets = [a for s in ONE_NODE + ["ddp.overlap=false", "ddp.bucket_cap=64 MiB", "ddp.first_bucket=64 MiB",
                                   "model.parameters=16777216"] for a in ("--set", s)]
    assert run_cli(["run", SCENARIO, "-q", "--steps", "3", "--calibration", str(cal), "--json", str(out)] + sets) == 0
    s = json.loads(out.read_text())
    expected = predict_allreduce_time(load_calibration(cal), 64 * 2**20, 8)  # one 64 MiB bucket, measured curve
    assert s["comm_time_s"] == pytest.approx(expected, rel=1e-9)
    # the same through the scenario key, relative to the scenario file
    doc = (tmp_path / "cal" / "job.yaml")
    doc.write_text(open(SCENARIO).read() + "\ncalibration: v100.yaml\n")
    sc = load_scenario(doc, overrides=ONE_NODE)
    assert sc.calibration == load_calibration(cal)


@pytest.mark.parametrize("extra, needle", [
    (["--calibration", "nope.yaml"], "calibration"),
    (["--set", "collective.algorithm=tree"], "collective.algorithm ring"),
])
def test_bad_calibration_use_is_bad_input(tmp_path, extra, needle, capsys):
    cal = _calibrate(tmp_path)
    args = ["run", SCENARIO, "-q", "--steps", "2"] + [a for s in ONE_NODE for a in ("--set", s)]
    if "--calibration" not in extra:
        args += ["--calibration", str(cal)]
    assert run_cli(args + extra) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_other_algorithms_refuse_a_calibrated_scenario(tmp_path, capsys):
    cal = _calibrate(tmp_path)
    args = ["algorithms", SCENARIO, "--steps", "2", "--algorithm", "ring,tree"]
    sets = [a for s in ONE_NODE + [f"calibration={cal}"] for a in ("--set", s)]
    assert run_cli(args + sets) == 2
    assert "calibration" in capsys.readouterr().err


def test_sweep_into_a_file_and_plot_of_foreign_json_are_one_line_errors(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert run_cli(["sweep", SCENARIO, "--grid", "cluster.nodes=2", "-o", str(blocker / "sub"), "-q"]) == 2
    assert "cannot create the output directory" in capsys.readouterr().err
    pytest.importorskip("matplotlib")
    d = tmp_path / "d"
    d.mkdir()
    (d / "results.json").write_text(json.dumps({"rows": [{"point": 0}], "grid": {"cluster.nodes": [1]}}))
    assert run_cli(["plot", str(d)]) == 2
    err = capsys.readouterr().err
    assert "lacks world_size" in err and "Traceback" not in err


def test_run_summary_counts_one_of_a_thing_in_the_singular(capsys):
    # A 1-GPU, 1-step run of a model that fits one bucket read "1 GPUs (1 nodes x 1), 1 buckets, 1 steps".
    assert run_cli(["run", SCENARIO, "--steps", "1", "--set", "cluster.nodes=1", "--set", "cluster.gpus_per_node=1",
                    "--set", "model.parameters=1000", "--set", "stragglers=[]"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith(": 1 GPU (1 node x 1), 1,000 parameters (fp32), 1 bucket, 1 step, seed 0"), head
    assert run_cli(["run", SCENARIO, "--steps", "2", "--set", "cluster.nodes=2", "--set", "cluster.gpus_per_node=1",
                    "--set", "model.parameters=1", "--set", "stragglers=[]"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith(": 2 GPUs (2 nodes x 1), 1 parameter (fp32), 1 bucket, 2 steps, seed 0"), head

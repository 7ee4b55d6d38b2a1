"""`commsim import` and `commsim blame` end to end, on the committed real gloo traces, and
every bad input: exit 2, one line on stderr naming the file, no traceback, nothing written."""

import gzip
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from commsim.cli.main import run_cli
from tests.unit.traces import synth

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
DELAY = sorted(str(p) for p in (DATA / "delay").glob("rank*.trace.json.gz"))
HEALTHY = sorted(str(p) for p in (DATA / "healthy").glob("rank*.trace.json.gz"))
ROOT = Path(__file__).resolve().parents[2]


def test_blame_names_the_delayed_rank(tmp_path, capsys):
    j, p = tmp_path / "b.json", tmp_path / "p.json"
    assert run_cli(["blame", *DELAY, "--json", str(j), "--perfetto", str(p)]) == 0
    out = capsys.readouterr().out
    assert "verdict: rank 1 makes the others wait in 10 of 10 steps" in out
    rep = json.loads(j.read_text())
    assert [c["rank"] for c in rep["culprits"]] == [1]
    # 200 ms were injected into rank 1's backward (README there)
    assert rep["culprits"][0]["delay_estimate_s"] == pytest.approx(0.2, rel=0.10)
    trace = json.loads(p.read_text())
    names = {e["name"] for e in trace["traceEvents"]}
    assert {"forward", "backward", "optimizer", "bucket 0 all-reduce"} <= names
    flows = [e for e in trace["traceEvents"] if e.get("cat") == "blame"]
    assert flows and {e["ph"] for e in flows} == {"s", "f"}
    assert all(e["pid"] == 1 for e in flows if e["ph"] == "s")  # arrows start at the late rank


def test_blame_of_a_healthy_job_names_nobody(capsys):
    assert run_cli(["blame", *HEALTHY]) == 0
    assert "verdict: no rank is late above noise" in capsys.readouterr().out


def test_blame_from_flight_recorder_dumps(capsys):
    dumps = sorted(str(p) for p in (DATA / "delay").glob("rank*.fr.pkl"))
    assert run_cli(["blame", *dumps]) == 0
    assert "verdict: rank 1 makes the others wait" in capsys.readouterr().out


def test_blame_json_is_deterministic(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for out in (a, b):
        assert run_cli(["blame", *DELAY, "-q", "--json", str(out)]) == 0
    assert a.read_bytes() == b.read_bytes()


def test_blame_a_simulated_run(tmp_path, capsys):
    j, p = tmp_path / "b.json", tmp_path / "p.json"
    assert run_cli(["blame", "--scenario", "scenarios/32gpu_throttle.yaml", "--steps", "20",
                    "--json", str(j), "--perfetto", str(p)]) == 0
    assert "rank 13 makes the others wait" in capsys.readouterr().out
    assert json.loads(j.read_text())["source"] == "simulation"
    assert json.loads(p.read_text())["traceEvents"]


def test_import_then_run_at_scale(tmp_path, capsys):
    out, cal = tmp_path / "job.yaml", tmp_path / "job.cal.yaml"
    assert run_cli(["import", *DELAY, "-o", str(out), "--calibration-out", str(cal)]) == 0
    said = capsys.readouterr().out
    assert "slow_rank 1" in said and "simulated" in said
    doc = yaml.safe_load(out.read_text())
    assert doc["name"] == "job" and doc["calibration"] == "job.cal.yaml"
    assert out.read_text().startswith("# Imported by `commsim import`")
    # the what-if: the same job at 64 GPUs is a `commsim run` away
    j = tmp_path / "s.json"
    for nodes, world in ((8, 64), (128, 1024)):
        assert run_cli(["run", str(out), "-q", "--steps", "5", "--set", f"cluster.nodes={nodes}",
                        "--set", "cluster.gpus_per_node=8", "--json", str(j)]) == 0
        assert json.loads(j.read_text())["world_size"] == world
    plain = tmp_path / "plain.yaml"
    assert run_cli(["import", *DELAY, "-q", "-o", str(plain)]) == 0
    assert "calibration" not in yaml.safe_load(plain.read_text())
    assert run_cli(["run", str(plain), "-q", "--steps", "5", "--set", "cluster.nodes=8",
                    "--set", "cluster.gpus_per_node=8", "--json", str(j)]) == 0


# -- bad input ----------------------------------------------------------------------------------

def _bad_inputs(tmp):
    """(name, files, text the one-line error must contain)."""
    cases = []
    raw = gzip.decompress(Path(DELAY[1]).read_bytes())
    (tmp / "trunc_rank1.json").write_bytes(raw[: len(raw) // 2])
    cases.append(("truncated JSON", [DELAY[0], str(tmp / "trunc_rank1.json")], "trunc_rank1.json: truncated JSON"))
    (tmp / "cat.json").write_bytes(gzip.decompress(Path(DELAY[0]).read_bytes()) + raw)
    cases.append(("concatenated JSON", [str(tmp / "cat.json"), DELAY[1]], "cat.json: more than one JSON document"))
    cases.append(("one rank only", [DELAY[0]], "a trace of one rank only (rank 0 of 2)"))
    cases.append(("ranks from different jobs", [DELAY[0], HEALTHY[1]], "ranks from different jobs"))
    plan = synth.plan(2, 2, sizes=())
    for r in range(2):
        (tmp / f"none_rank{r}.json").write_text(json.dumps(synth.kineto(r, 2, plan[r])))
    cases.append(("no collectives", [str(tmp / f"none_rank{r}.json") for r in range(2)], "no collectives in any trace"))
    plan = synth.plan(2, 2)
    for r in range(2):
        doc = synth.kineto(r, 2, plan[r], gpu=True, kernel_name="ncclDevKernel_Teleport_f32(x)")
        (tmp / f"kern_rank{r}.json").write_text(json.dumps(doc))
    cases.append(("unknown kernel", [str(tmp / f"kern_rank{r}.json") for r in range(2)],
                  "kern_rank0.json: traceEvents["))

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp / 'pwned'}",))

    (tmp / "evil_rank0.pkl").write_bytes(pickle.dumps({"entries": [Evil()]}))
    cases.append(("hostile pickle", [str(tmp / "evil_rank0.pkl"), str(DATA / "delay" / "rank1.fr.pkl")],
                  "evil_rank0.pkl: refusing to load this pickle: it asks for posix.system"))
    # an element count of 1e999 (JSON's inf): an OverflowError traceback from int()
    plan = synth.plan(2, 2)
    for r in range(2):
        doc = synth.kineto(r, 2, plan[r], gpu=True)
        if r == 0:
            next(e for e in doc["traceEvents"] if e["name"] == "record_param_comms")["args"]["In msg nelems"] = 1e999
        (tmp / f"infcount_rank{r}.json").write_text(json.dumps(doc))
    cases.append(("infinite element count", [str(tmp / f"infcount_rank{r}.json") for r in range(2)],
                  "infcount_rank0.json: traceEvents["))
    # a group rank of NaN (a ValueError traceback from int()) or -1 (an IndexError in the matching)
    dump = pickle.loads((DATA / "delay" / "rank0.fr.pkl").read_bytes(), encoding="bytes")
    for bad, value in (("nan", float("nan")), ("negative", -1)):
        dump["pg_config"][""]["ranks"] = [value, 1]
        (tmp / f"pg{bad}_rank0.pkl").write_bytes(pickle.dumps(dump))
        cases.append((f"{bad} group rank", [str(tmp / f"pg{bad}_rank0.pkl"), str(DATA / "delay" / "rank1.fr.pkl")],
                      f"pg{bad}_rank0.pkl: pg_config[''].ranks: expected a list of ranks (integers >= 0)"))
    return cases


@pytest.mark.parametrize("command", ["import", "blame"])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, command):
    for name, files, expected in _bad_inputs(tmp_path):
        out = tmp_path / f"out_{name.replace(' ', '_')}"
        extra = ["-o", str(out), "--calibration-out", str(out) + ".cal"] if command == "import" else \
            ["--json", str(out), "--perfetto", str(out) + ".pf"]
        proc = subprocess.run([sys.executable, "-m", "commsim.cli", command, *files, *extra], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (name, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr, (name, proc.stderr)
        assert lines[0].startswith("commsim: error: ") and expected in lines[0], (name, lines[0])
        assert not any(p.name.startswith(out.name) for p in tmp_path.iterdir()), name
    assert not (tmp_path / "pwned").exists()


def test_an_existing_output_is_kept_when_the_input_is_bad(tmp_path):
    out = tmp_path / "s.yaml"
    out.write_text("keep me\n")
    assert run_cli(["import", DELAY[0], "-o", str(out)]) == 2
    assert out.read_text() == "keep me\n"


def test_blame_needs_traces_or_a_scenario(capsys):
    assert run_cli(["blame"]) == 2
    assert run_cli(["blame", DELAY[0], "--scenario", "scenarios/32gpu_throttle.yaml"]) == 2
    assert run_cli(["blame", *DELAY, "--steps", "3"]) == 2


def test_an_nccl_tests_log_among_the_inputs_joins_the_calibration(tmp_path):
    log = str(DATA.parent / "nccl-tests" / "RTX2080Ti-PCIe3-noP2P-1node_2ranks_anthony-hoo-autodl.txt")
    out, cal = tmp_path / "s.yaml", tmp_path / "c.yaml"
    assert run_cli(["import", *HEALTHY, log, "-q", "-o", str(out), "--calibration-out", str(cal)]) == 0
    doc = yaml.safe_load(cal.read_text())
    assert [s["path"] for s in doc["provenance"]["sources"]] == [*HEALTHY, log]
    sizes = {row[0] for row in doc["levels"]["intra_node"]["table"]["rows"]}
    assert len(sizes) > 20  # the log's sweep and the traces' five bucket sizes
    assert "# nccl-tests log: " + log in out.read_text().replace("#   nccl-tests log", "# nccl-tests log")


def test_an_nccl_tests_json_report_among_the_inputs_joins_the_calibration_too(tmp_path):
    """nccl-tests' -J report (a JSON document) was read as a trace that is none and refused."""
    import json

    from commsim.calibration.nccl_log import load_nccl_log

    text_log = load_nccl_log(str(DATA.parent / "nccl-tests" / "RTX2080Ti-PCIe3-noP2P-1node_2ranks_anthony-hoo-autodl.txt"))
    group = lambda t: None if t is None else {"time": t.time_s * 1e6, "alg_bw": t.algbw_Bps / 1e9,  # noqa: E731
                                              "bus_bw": t.busbw_Bps / 1e9, "nwrong": 0.0}
    report = {"version": 3, "start_time": "2026-11-30 09:15:00", "args": ["./all_reduce_perf", "-J", "r.json"],
              "env": [], "nccl_version": 21803,
              "config": {"nthreads": 1, "ngpus": 1, "devices": [
                  {"rank": d.rank, "group": 0, "pid": 1, "hostname": d.host, "device": d.device,
                   "device_hex": d.bus_id, "device_info": d.name} for d in text_log.devices]},
              "results": [{"size": r.size_bytes, "count": r.count, "type": r.dtype, "redop": r.redop, "root": "    -1",
                           "out_of_place": group(r.out_of_place), "in_place": group(r.in_place)}
                          for r in text_log.rows]}
    log = tmp_path / "r.json"
    log.write_text(json.dumps(report, indent=2))
    out, cal = tmp_path / "s.yaml", tmp_path / "c.yaml"
    assert run_cli(["import", *HEALTHY, str(log), "-q", "-o", str(out), "--calibration-out", str(cal)]) == 0
    doc = yaml.safe_load(cal.read_text())
    assert [s["path"] for s in doc["provenance"]["sources"]] == [*HEALTHY, str(log)]
    sizes = {row[0] for row in doc["levels"]["intra_node"]["table"]["rows"]}
    assert {r.size_bytes for r in text_log.rows} <= sizes


@pytest.mark.parametrize("args, needle", [
    (["--seed", "-5"], "Invalid value for '--seed': -5 is not in the range 0<=x<="),
    (["--name", "   "], "--name: expected a non-empty scenario name, got '   '"),
    (["--name", ""], "--name: expected a non-empty scenario name, got ''"),
])
def test_bad_import_options_are_named_as_options_not_as_the_unwritten_output(tmp_path, capsys, args, needle):
    """They were reported against the output file ("s.yaml: seed: ..."), which does not exist,
    after every trace was read; an empty --name fell back to the default silently."""
    out = tmp_path / "s.yaml"
    assert run_cli(["import", *HEALTHY, "-q", "-o", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err and str(out) not in err and not out.exists()


@pytest.mark.parametrize("command, option", [("import", "--output"), ("blame", "--json"), ("blame", "--perfetto")])
def test_the_help_of_an_output_that_takes_a_dash_says_so(command, option):
    """They all write to stdout for '-' (the report then goes to stderr); their help did not say."""
    import click

    from commsim.cli.trace_commands import blame_command, import_command

    cmd = {"import": import_command, "blame": blame_command}[command]
    opt = next(p for p in cmd.params if isinstance(p, click.Option) and option in p.opts)
    assert "('-': stdout)" in opt.help

"""The multi-host options of `commsim calibrate --backend` and `commsim validate`: one-line input
errors (exit 2) before anything is launched, the job each host's options describe, and a
two-"host" calibration on this machine (two processes meeting at one endpoint)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from commsim.cli.main import main as cli  # noqa: E402
from validate.multinode import HostJob, JobOptionError, parse_endpoint  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "scenarios" / "validate_gloo_2rank.yaml"
CAL = ["calibrate", "--backend", "gloo", "-o"]


def one_line_error(args, *expected):
    r = CliRunner().invoke(cli, [str(a) for a in args])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and all(e in lines[0] for e in expected), r.output
    return lines[0]


@pytest.mark.parametrize("command", ["calibrate", "validate"])
def test_bad_combinations_are_one_line_input_errors(command, tmp_path):
    head = CAL + [tmp_path / "c.yaml"] if command == "calibrate" else \
        ["validate", SCENARIO, "--calibration", tmp_path / "missing.yaml"]
    one_line_error(head + ["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"],
                   "--node-rank", "expected 0..1", "got 2")
    one_line_error(head + ["--nnodes", "2", "--node-rank", "0"], "--rdzv-endpoint", "needs --rdzv-endpoint HOST:PORT")
    one_line_error(head + ["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "nohost"],
                   "--rdzv-endpoint", "expected HOST:PORT", "'nohost'")
    one_line_error(head + ["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "h:70000"], "expected HOST:PORT")
    one_line_error(head + ["--nnodes", "2", "--rdzv-endpoint", "h:1"], "--node-rank", "which node this host is")
    one_line_error(head + ["--node-rank", "1"], "--node-rank", "go with --nnodes N")
    one_line_error(head + ["--ranks-from-env", "--nnodes", "2"], "--ranks-from-env", "drop --nnodes")
    assert not (tmp_path / "c.yaml").exists()


def test_nprocs_is_for_one_host(tmp_path):
    one_line_error(CAL + [tmp_path / "c.yaml", "--nprocs", "2", "--nnodes", "2", "--node-rank", "0",
                          "--rdzv-endpoint", "h:1"], "--nprocs", "--nproc-per-node")


def test_ranks_from_env_reads_srun_and_mpirun(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    job = HostJob.from_environment("n0:29500", env={"SLURM_PROCID": "3", "SLURM_NTASKS": "4",
                                                     "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "2"})
    assert (job.world_size, job.nnodes, job.node_rank, job.local_ranks(), job.has_rank0) == \
        (4, 2, 1, [(3, 1, 4, 2)], False)
    job = HostJob.from_environment(None, env={"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
                                              "MASTER_ADDR": "n0", "MASTER_PORT": "29500"})
    assert job.has_rank0 and (job.master_addr, job.master_port) == ("n0", 29500)
    with pytest.raises(JobOptionError, match="needs --rdzv-endpoint HOST:PORT .* or MASTER_ADDR"):
        HostJob.from_environment(None, env={"PMI_RANK": "1", "PMI_SIZE": "2"})
    with pytest.raises(JobOptionError, match="no rank in the environment"):
        HostJob.from_environment("n0:1", env={})


def test_options_place_this_hosts_ranks_node_major():
    job = HostJob.from_options(3, 2, "10.0.0.1:29500", 4)
    assert [r for r, *_ in job.local_ranks()] == [8, 9, 10, 11] and job.world_size == 12 and not job.has_rank0
    assert parse_endpoint("[fe80::1]:29500") == ("fe80::1", 29500)
    with pytest.raises(JobOptionError, match="expected HOST:PORT"):
        parse_endpoint("fe80::1:29500")  # an IPv6 address needs its brackets


def _outputs(procs, timeout_s=300):
    """Each process's output once all have ended; a process still running at the timeout (a
    host waiting for a peer that failed) is killed, its pid only."""
    try:
        return [p.communicate(timeout=timeout_s)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_calibrate_as_two_nodes_and_only_node_0_writes(tmp_path):
    # both "hosts" are this machine (one host name): the job's one level is intra_node, and
    # the point is the path: two launchers, one rendezvous, one file. Loopback's per-step latency
    # dominates up to several MiB on a loaded machine: the sweep goes to 32 MiB so that the fit
    # determines a bandwidth (at 1 MiB the calibration refused one CI run in two)
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    args = ["--backend", "gloo", "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}", "--max-size", "32M",
            "--iters", "2", "--warmup", "1", "--compute-params", "64K", "--timeout", "120", "-o", "cal.yaml"]
    procs = [subprocess.Popen([sys.executable, "-m", "commsim.cli", "calibrate", *args, "--node-rank", str(k)],
                              cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for k in (1, 0)]
    out = _outputs(procs)
    assert [p.returncode for p in procs] == [0, 0], out
    assert "rank 0's host writes cal.yaml" in out[0] and "wrote cal.yaml" in out[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.tables", "cal.yaml"]
    from commsim.calibration import load_calibration

    cal = load_calibration(str(tmp_path / "cal.yaml"))
    assert cal.provenance.world_size == 2 and cal.provenance.hostnames == (socket.gethostname(),)
    assert cal.provenance.ranks_per_node == (2,)  # the layout by host: both processes on this one
    assert cal.level_names == ("intra_node",)
    assert [c.rank for c in cal.compute.per_rank] == [0, 1]  # every host's compute timing, gathered on rank 0


def test_validate_with_one_rank_per_process_as_mpirun_starts_them(tmp_path):
    # mpirun's variables (OMPI_COMM_WORLD_*) place each process; rank 0's process writes the report
    from commsim import calibration as calib

    cal_file = tmp_path / "cal.yaml"
    ms = [calib.Measurement(s, calib.model_time(200e-6, 0.5e9, s, 2), 2) for s in (1024, 2**20, 2**22)]
    calib.save_calibration(calib.Calibration((calib.fit_link("intra_node", ms),), calib.Provenance("test", 2)), cal_file)
    tmp_path = tmp_path / "run"
    tmp_path.mkdir()
    port = _free_port()
    procs = []
    for rank in (1, 0):
        env = dict(os.environ, PYTHONPATH=str(REPO), OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE="2",
                   OMPI_COMM_WORLD_LOCAL_RANK=str(rank), OMPI_COMM_WORLD_LOCAL_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
            env.pop(var, None)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "commsim.cli", "validate", str(SCENARIO), "--calibration", str(cal_file),
             "--ranks-from-env", "--steps", "3", "--warmup-steps", "1", "--timeout", "120", "--json", "rep.json",
             "--set", "stragglers=[{kind: slow_rank, ranks: [1], factor: 1.5}]"],
            cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    out = _outputs(procs)
    assert [p.returncode for p in procs] == [0, 0], out
    assert "rank 1 of 2" in out[0] and "rank 0's host writes the report" in out[0] and "step time" not in out[0]
    assert "step time mean" in out[1] and "stragglers seen: slow_rank: rank 1" in out[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep.json"]


def test_a_slow_link_across_hosts_outside_the_lab_is_refused_before_launching(tmp_path, monkeypatch):
    from commsim import calibration as calib

    monkeypatch.delenv("COMMSIM_LAB", raising=False)
    cal_file = tmp_path / "cal.yaml"
    ms = [calib.Measurement(s, calib.model_time(200e-6, 0.5e9, s, 2), 2) for s in (1024, 2**20, 2**22)]
    calib.save_calibration(calib.Calibration((calib.fit_link("inter_node", ms),), calib.Provenance("test", 2)), cal_file)
    line = one_line_error(["validate", SCENARIO, "--calibration", cal_file, "--nnodes", "2", "--node-rank", "0",
                           "--rdzv-endpoint", "127.0.0.1:1", "--set", "cluster.nodes=2", "--set",
                           "cluster.gpus_per_node=1", "--set", "stragglers=[{kind: slow_link, node: 1, factor: 0.5}]"],
                          "slow_link on node 1 cannot be applied on this hardware")
    assert "commsim lab" in line


def test_calibrate_to_stdout_keeps_the_sweep_table_off_it(tmp_path):
    """`calibrate --backend gloo -o -` put rank 0's sweep table on stdout ahead of the YAML, so
    `-o - > cal.yaml` wrote a file that did not load; with -q the table was printed anyway."""
    import yaml

    args = [sys.executable, "-m", "commsim.cli", "calibrate", "--backend", "gloo", "--max-size", "32M", "--iters", "5",
            "--compute-params", "0", "--timeout", "120"]
    run = subprocess.run(args + ["-o", "-"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert yaml.safe_load(run.stdout)["format"] == "commsim-calibration/1"
    assert "float     sum" not in run.stdout and "float     sum" in run.stderr  # the table, on the report's stream
    quiet = subprocess.run(args + ["-q", "-o", str(tmp_path / "c.yaml")], cwd=REPO, capture_output=True, text=True,
                           timeout=300)
    assert quiet.returncode == 0 and quiet.stdout == "" and "float" not in quiet.stderr, quiet.stderr

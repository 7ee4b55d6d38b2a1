"""The CLI's error contract: every bad command line is one line `commsim: error: ...` with exit 2
(click's usage errors included), and an unexpected exception is a bug, never exit 2."""

import subprocess
import sys

import pytest

from commsim.cli.main import run_cli

SCENARIO = "scenarios/32gpu_throttle.yaml"
LOG = "tests/data/nccl-tests/A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt"


@pytest.fixture(scope="module")
def cal(tmp_path_factory):
    path = tmp_path_factory.mktemp("cal") / "a100.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", LOG, "-o", str(path)]) == 0
    return str(path)


@pytest.fixture
def blocker(tmp_path):
    """A plain file, for output paths that would need it to be a folder."""
    path = tmp_path / "file"
    path.write_text("x")
    return path


# (argument list, a needle the one line must contain). {tmp}: a fresh folder; {cal}: a calibration;
# {blocker}: a plain file. Each is a command line a user could type by mistake.
CORPUS = [
    (["run"], "Missing argument 'SCENARIO'"),
    (["run", "scenarios"], "is a directory"),
    (["run", "missing.yaml"], "missing.yaml"),
    (["run", SCENARIO, "--steps", "0"], "--steps"),
    (["run", SCENARIO, "--steps", "-5"], "--steps"),
    (["run", SCENARIO, "--steps", "abc"], "--steps"),
    (["run", SCENARIO, "--seed", "x"], "--seed"),
    (["run", SCENARIO, "--trace-ranks", "0"], "--trace-ranks"),
    (["run", SCENARIO, "--json", "{tmp}"], "is a directory"),
    (["run", SCENARIO, "--csv", "{tmp}"], "is a directory"),
    (["run", SCENARIO, "--trace", "{tmp}"], "is a directory"),
    (["run", SCENARIO, "--json", "{tmp}/no/such/dir/s.json"], "does not exist"),
    (["run", SCENARIO, "--json", "{blocker}/s.json"], "is not a directory"),
    (["run", SCENARIO, "--json", "{tmp}/a.json", "--csv", "{tmp}/a.json"], "both name"),
    (["run", SCENARIO, "--json", "-", "--csv", "-"], "both name stdout"),
    (["run", SCENARIO, "--plot", "-"], "stdout"),
    (["run", SCENARIO, "--plot", "{tmp}/no/such/dir/p.png"], "does not exist"),
    (["run", SCENARIO, "--set", "oops"], "oops"),
    (["run", SCENARIO, "--set", "cluster.nodes=0"], "cluster.nodes"),
    (["run", SCENARIO, "--calibration", "missing.yaml"], "missing.yaml"),
    (["run", SCENARIO, "--bogus"], "--bogus"),
    (["bogus-command"], "bogus-command"),
    (["algorithms"], "Missing argument 'SCENARIO'"),
    (["algorithms", SCENARIO, "--nodes", "0"], "--nodes"),
    (["algorithms", SCENARIO, "--steps", "0"], "--steps"),
    (["algorithms", SCENARIO, "--algorithm", "bogus"], "--algorithm"),
    # a value named twice would print (and write) the same row twice
    (["algorithms", SCENARIO, "--algorithm", "ring,tree,ring"], "got ring twice in 'ring,tree,ring'"),
    (["algorithms", SCENARIO, "--model", "alpha-beta,alpha-beta"], "got alpha-beta twice"),
    (["algorithms", SCENARIO, "--nodes", "2,4,02"], "--nodes: expected each value once, got 2 twice"),
    (["compare", SCENARIO, "--nodes", "4,4"], "--nodes: expected each value once"),
    (["collective", SCENARIO, "--algorithm", "tree,tree"], "got tree twice"),
    (["algorithms", SCENARIO, "--model", "logp"], "--model"),
    (["algorithms", SCENARIO, "--json", "{tmp}"], "is a directory"),
    (["algorithms", SCENARIO, "--algorithm", "hierarchical", "--model", "nccl-2.19"], "no (algorithm, model) pair"),
    (["algorithms", SCENARIO, "--set", "calibration={cal}", "--set", "cluster.nodes=1", "--set", "stragglers=[]",
      "--algorithm", "ring,tree"], "prices the measured ring only"),
    (["collective"], "--calibration"),
    (["collective", "--calibration", "missing.yaml", "--ranks", "8"], "missing.yaml"),
    (["collective", "--calibration", "{cal}", "--ranks", "1"], "--ranks"),
    (["collective", "--calibration", "{cal}", "--ranks", "8", "--sizes", "8:"], "--sizes"),
    (["collective", "--calibration", "{cal}", "--ranks", "8", "--sizes", "x:1G"], "--sizes"),
    (["collective", "--calibration", "{cal}", "--ranks", "8", "--level", "bogus"], "--level"),
    (["collective", "--calibration", "{cal}", "--ranks", "8", "--json", "{tmp}"], "is a directory"),
    (["collective", "--algorithm", "tree", "--ranks", "8"], "SCENARIO"),
    (["collective", SCENARIO, "--algorithm", "trees"], "--algorithm"),
    (["collective", SCENARIO, "--sizes", "8:1e300"], "--sizes '8:1e300': expected sizes up to 2**50 bytes (1,125,899,906,842,624), got MAX = 1e+300 bytes"),
    (["collective", "--system", "dgx-h100", "--nodes", "100000000"],
     "--nodes: expected a world size up to 1,048,576, got 800,000,000"),
    (["collective", SCENARIO, "--ranks", "12"], "--ranks"),
    (["collective", SCENARIO, "--model", "logp"], "--model"),
    (["collective", SCENARIO, "--algorithm", "hierarchical", "--model", "nccl-2.19"], "covers algorithms"),
    (["calibrate"], "Missing option '-o'"),
    (["calibrate", "-o", "{tmp}/c.yaml"], "either --from-nccl-tests"),
    (["calibrate", "--from-nccl-tests", "-o", "{tmp}/c.yaml"], "no nccl-tests log given"),
    (["calibrate", "--from-nccl-tests", "missing.txt", "-o", "{tmp}/c.yaml"], "missing.txt"),
    (["calibrate", "--from-nccl-tests", LOG, "-o", "{tmp}/no/such/dir/c.yaml"], "does not exist"),
    (["calibrate", "--from-nccl-tests", LOG, "-o", "{tmp}"], "is a directory"),
    (["calibrate", "--from-nccl-tests", LOG, "--backend", "gloo", "-o", "{tmp}/c.yaml"], "either"),
    (["calibrate", LOG, "--backend", "gloo", "-o", "{tmp}/c.yaml"], "only read with --from-nccl-tests"),
    (["calibrate", "--backend", "gloo", "--max-size", "16Q", "-o", "{tmp}/c.yaml"], "--max-size"),
    (["calibrate", "--backend", "gloo", "--max-size", "4", "-o", "{tmp}/c.yaml"], "--max-size"),
    (["calibrate", "--backend", "gloo", "--compute-params", "x", "-o", "{tmp}/c.yaml"], "--compute-params"),
    (["calibrate", "--backend", "gloo", "--compute-params", "1", "-o", "{tmp}/c.yaml"], "--compute-params"),
    (["calibrate", "--backend", "gloo", "--timeout", "0", "-o", "{tmp}/c.yaml"], "--timeout"),
    (["calibrate", "--backend", "gloo", "--timeout", "nan", "-o", "{tmp}/c.yaml"], "--timeout"),
    (["calibrate", "--backend", "gloo", "--max-size", "99999999999G", "-o", "{tmp}/c.yaml"], "--max-size"),
    (["calibrate", "--backend", "gloo", "--nprocs", "1", "-o", "{tmp}/c.yaml"], "--nprocs"),
    (["calibrate", "--backend", "gloo", "--iters", str(2**64), "-o", "{tmp}/c.yaml"], "1<=x<=1000000"),
    (["calibrate", "--backend", "gloo", "--warmup", str(2**64), "-o", "{tmp}/c.yaml"], "0<=x<=1000000"),
    (["validate", SCENARIO, "--calibration", "{cal}", "--warmup-steps", str(2**64)], "0<=x<=1000000"),
    (["validate", SCENARIO, "--calibration", "{cal}", "--steps", "1000001"], "1<=x<=1000000"),
    (["lab", "calibrate", "-o", "{tmp}/c.yaml", "--iters", str(2**64)], "1<=x<=1000000"),
    (["lab", "validate", SCENARIO, "--calibration", "{cal}", "--warmup-steps", str(2**64)], "0<=x<=1000000"),
    (["validate"], "give SCENARIO and --calibration"),
    (["validate", SCENARIO], "give SCENARIO and --calibration"),
    (["validate", "--numerics", SCENARIO], "--numerics takes no SCENARIO"),
    (["validate", SCENARIO, "--calibration", "missing.yaml"], "missing.yaml"),
    (["validate", "--numerics", "--json", "{tmp}"], "is a directory"),
    (["validate", "--numerics", "--timeout", "-1"], "--timeout"),
    (["validate", "--numerics", "--timeout", "inf"], "--timeout"),
    (["validate", SCENARIO, "--calibration", "{cal}", "--set", "cluster.nodes=1", "--set", "stragglers=[]",
      "--nprocs", "3"], "--nprocs is 3"),
    (["sweep", SCENARIO, "-o", "{tmp}/o"], "Missing option '--grid'"),
    (["sweep", SCENARIO, "-o", "{blocker}", "--grid", "cluster.nodes=1"], "is a file"),
    (["plot", "{tmp}/missing"], "missing"),
    (["plot", "{tmp}", "--threshold", "nan"], "--threshold': expected a number in (0, 1], got 'nan'"),
    (["plot", "{tmp}", "--threshold", "0"], "--threshold"),
]


def _expand(args, tmp_path, cal, blocker):
    return [a.replace("{tmp}", str(tmp_path)).replace("{cal}", cal).replace("{blocker}", str(blocker)) for a in args]


@pytest.mark.parametrize("args, needle", CORPUS, ids=[" ".join(a)[:60] for a, _ in CORPUS])
def test_bad_command_line_is_one_line_exit_2(args, needle, tmp_path, cal, blocker, capsys):
    code = run_cli(_expand(args, tmp_path, cal, blocker))
    out, err = capsys.readouterr()
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commsim: error: "), err
    assert needle in lines[0] and "Traceback" not in err
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["file"])  # nothing written


def test_usage_errors_point_at_the_commands_help(capsys):
    assert run_cli(["run", "--steps", "0", SCENARIO]) == 2
    assert "(see 'commsim run --help')" in capsys.readouterr().err


def test_usage_error_from_the_real_entry_point_is_one_line():
    r = subprocess.run([sys.executable, "-m", "commsim.cli", "run", SCENARIO, "--steps", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("commsim: error: ")


def test_plain_commsim_prints_the_help_with_the_exit_codes(capsys):
    assert run_cli([]) == 0
    out = capsys.readouterr().out
    assert "Exit codes:" in out and "130" in out and "bad input" in out
    assert run_cli(["--help"]) == 0
    assert "the job failed at run time" in capsys.readouterr().out


@pytest.mark.parametrize("exc", [RuntimeError("boom"), ValueError("boom"), OSError(5, "boom")])
def test_an_unexpected_exception_is_a_bug_not_bad_input(exc, monkeypatch):
    import commsim.sim.engine as engine

    def broken(*args, **kwargs):
        raise exc

    monkeypatch.setattr(engine, "simulate", broken)
    with pytest.raises(type(exc), match="boom"):
        run_cli(["run", SCENARIO, "-q", "--steps", "2"])


def test_a_value_error_inside_calibrate_is_not_exit_2(monkeypatch, tmp_path):
    import commsim.calibration.from_logs as from_logs

    def broken(*args, **kwargs):
        raise ValueError("a bug in the fit")

    monkeypatch.setattr(from_logs, "calibration_from_nccl_logs", broken)
    with pytest.raises(ValueError, match="a bug in the fit"):
        run_cli(["calibrate", "--from-nccl-tests", LOG, "-o", str(tmp_path / "c.yaml")])


def test_a_bug_shows_as_a_traceback_and_exit_1():
    code = ("import sys, commsim.sim.engine as e\n"
            "def boom(*a, **k):\n    raise RuntimeError('deliberate bug')\n"
            "e.simulate = boom\n"
            "from commsim.cli.main import main\n"
            "sys.argv = ['commsim', 'run', %r, '-q', '--steps', '2']\nmain()\n" % SCENARIO)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 1
    assert "Traceback" in r.stderr and "RuntimeError: deliberate bug" in r.stderr


def test_outputs_are_checked_before_the_simulation(monkeypatch, tmp_path, capsys):
    import commsim.sim.engine as engine

    def never(*args, **kwargs):
        raise AssertionError("simulated before checking the output path")

    monkeypatch.setattr(engine, "simulate", never)
    for opt in ("--json", "--csv", "--trace", "--plot"):
        assert run_cli(["run", SCENARIO, "-q", opt, str(tmp_path / "missing" / "out.png")]) == 2
        assert f"{opt} " in capsys.readouterr().err


def test_a_bad_plot_suffix_is_reported_before_the_simulation(monkeypatch, tmp_path, capsys):
    import commsim.sim.engine as engine

    def never(*args, **kwargs):
        raise AssertionError("simulated before checking the plot path")

    monkeypatch.setattr(engine, "simulate", never)
    assert run_cli(["run", SCENARIO, "-q", "--plot", str(tmp_path / "run.txt")]) == 2
    assert ".png" in capsys.readouterr().err


def test_a_missing_matplotlib_is_reported_before_the_simulation(monkeypatch, tmp_path, capsys):
    import commsim.sim.engine as engine
    from commsim.output.plots import common as plots_common

    def never(*args, **kwargs):
        raise AssertionError("simulated before checking for matplotlib")

    monkeypatch.setattr(engine, "simulate", never)
    monkeypatch.setattr(plots_common, "matplotlib", None)  # as if the plot extra were not installed
    assert run_cli(["run", SCENARIO, "-q", "--plot", str(tmp_path / "run.png")]) == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and len(err.strip().splitlines()) == 1


def test_a_full_disk_names_the_output_path(monkeypatch, tmp_path, capsys):
    import errno

    import commsim.cli.outputs as outputs

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outputs, "atomic_write_text", full)
    out = tmp_path / "cal.yaml"
    assert run_cli(["calibrate", "--from-nccl-tests", LOG, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "No space left on device" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args, entry", [
    (["run", SCENARIO, "-q", "--steps", "2"], "load_scenario_document"),  # run also reads the document
    (["algorithms", SCENARIO, "--algorithm", "ring", "--steps", "2"], "load_scenario"),
    (["collective", SCENARIO, "--algorithm", "ring", "--sizes", "1M:2M"], "load_scenario"),
])
def test_force_reaches_the_loader_only_when_given(args, entry, monkeypatch):
    import commsim.scenario.loader as loader

    seen = []
    real = getattr(loader, entry)

    def load_scenario(*a, **kwargs):
        seen.append(kwargs.pop("force", None))
        return real(*a, **kwargs)

    monkeypatch.setattr(loader, entry, load_scenario)
    assert run_cli(args) == 0
    assert run_cli(args + ["--force"]) == 0
    # without --force the keyword is not passed at all, so a loader without the limit still works
    assert seen == [None, True]


@pytest.mark.parametrize("args, says", [
    (["algorithms", SCENARIO, "--nodes", "99999999"], "--nodes 99999999: expected a world size up to 1,048,576"),
    (["collective", SCENARIO, "--ranks", "800000000", "--sizes", "1M:2M"], "--ranks: expected a world size up to 1,048,576"),
    (["algorithms", SCENARIO, "--nodes", "4000", "--steps", "100000"], "--nodes 4000: steps: the run needs about"),
])
def test_a_world_resized_after_loading_gets_the_loaders_limits(args, says, capsys):
    # the loader's world-size and budget checks saw the file's world, not the one --nodes/--ranks make
    assert run_cli(args) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1

"""commsim run --trace: the budget counts the trace's run and spans."""

from commsim.cli.main import run_cli
from commsim.scenario import budget

SMALL = "scenarios/seed_1b_8gpu_ib100.yaml"  # 8 ranks, 161 buckets, deterministic


def test_a_trace_past_the_budget_is_refused_before_the_run(tmp_path, capsys):
    # 20,000 steps alone: 2 s; with a trace of its 8 ranks, 26 million spans (over 30 GiB)
    out = tmp_path / "t.json"
    assert run_cli(["run", SMALL, "-q", "--steps", "20000", "--trace", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"commsim: error: {SMALL} (after --steps 20000): steps: the run needs about ")
    assert "a trace of 8 ranks" in err and "lower steps or --trace-ranks, or pass --force" in err
    assert err.count("\n") == 1 and not out.exists()


def test_fewer_trace_ranks_pass_where_more_are_refused(tmp_path, capsys, monkeypatch):
    # A 512 MiB limit instead of 4 GiB: 500 steps' trace of 8 ranks (644,000 spans, about 1 GiB)
    # is refused, of 1 rank (80,500 spans, 0.2 GiB) passes; the real limit needed 3,000 steps and
    # a 5 s trace of 483,000 spans for the same split (and available memory under 6 GiB refuses it)
    monkeypatch.setattr(budget, "MAX_MEMORY_BYTES", 512 * 1024**2)
    out = tmp_path / "t.json"
    assert run_cli(["run", SMALL, "-q", "--steps", "500", "--trace", str(out)]) == 2
    assert "a trace of 8 ranks" in capsys.readouterr().err
    assert run_cli(["run", SMALL, "-q", "--steps", "500", "--trace", str(out), "--trace-ranks", "1"]) == 0
    assert out.stat().st_size > 0

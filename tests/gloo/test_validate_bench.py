"""Tests for validate.collective_bench, validate.compute_timing and validate.calibrate (gloo, 2 CPU ranks)."""

import json
import subprocess
import sys

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from commsim import calibration as calib  # noqa: E402
from validate import collective_bench, compute_timing  # noqa: E402
from validate.calibrate import measure_calibration  # noqa: E402
from validate.launch import launch  # noqa: E402

ROOT = str(Path(__file__).resolve().parents[2])


def test_sweep_sizes():
    assert collective_bench.sweep_sizes(8, 100) == [8, 16, 32, 64]
    with pytest.raises(ValueError):
        collective_bench.sweep_sizes(2, 100)


def check_rows(rows, n, sizes):
    assert [r["size_bytes"] for r in rows] == sizes
    for r in rows:
        for g in ("out_of_place", "in_place"):
            t = r[g]
            assert t["time_s"] > 0 and t["time_median_s"] > 0
            assert t["algbw_Bps"] == pytest.approx(r["size_bytes"] / t["time_s"])
            assert t["busbw_Bps"] == pytest.approx(t["algbw_Bps"] * 2 * (n - 1) / n)


def test_sweep_on_two_gloo_ranks(tmp_path, capfd):
    sizes = [8, 64, 512, 4096]
    out = launch(collective_bench.rank_sweep, 2, "gloo", timeout_s=60, args=(sizes, 1, 3, True),
                 result_dir=str(tmp_path))
    rows = out[0]
    assert out[1] is None  # only rank 0 returns the table
    check_rows(rows, 2, sizes)
    assert all(r[g]["wrong"] == 0 for r in rows for g in ("out_of_place", "in_place"))
    printed = capfd.readouterr().out
    assert "#       size         count      type   redop    root     time   algbw   busbw #wrong" in printed
    assert "# Avg bus bandwidth" in printed


def test_torchrun_entry_point(tmp_path):
    js = tmp_path / "rows.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "validate.collective_bench",
           "--backend", "gloo", "--max-size", "1K", "--iters", "2", "--warmup", "1", "--check", "--json", str(js)]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    check_rows(json.loads(js.read_text()), 2, [8, 16, 32, 64, 128, 256, 512, 1024])


def test_synthetic_model_size():
    for p in (1000, 10**5, 4 * 10**6):
        model = compute_timing.synthetic_model(p)
        got = sum(q.numel() for q in model.parameters())
        assert abs(got - p) / p < 0.35
    assert compute_timing.layer_shape(4 * 1024 * 1024) == (1024, 4)


def test_forward_backward_timing_scales_with_batch():
    model = compute_timing.synthetic_model(1 << 20)
    small = compute_timing.time_forward_backward(model, 8, torch.device("cpu"), warmup=1, iters=3)
    big = compute_timing.time_forward_backward(model, 512, torch.device("cpu"), warmup=1, iters=3)
    assert 0 < small["forward_s"] < big["forward_s"] and 0 < small["backward_s"] < big["backward_s"]


def test_measured_calibration_end_to_end(tmp_path):
    cal = measure_calibration("gloo", 2, max_size=1 << 23, iters=3, warmup=1, compute_params=1 << 16,
                              timeout_s=60, command="test", echo=lambda s: None, result_dir=str(tmp_path))
    p = cal.provenance
    assert (p.backend, p.world_size, p.command) == ("gloo", 2, "test")
    assert p.torch_version == str(torch.__version__) and "bundled" in p.gloo_version
    link = cal.level("intra_node")
    assert [m.size_bytes for m in link.table] == collective_bench.sweep_sizes(8, 1 << 23)
    assert link.alpha_s >= 0 and link.beta_Bps > 0
    assert cal.compute.forward_s > 0 and len(cal.compute.per_rank) == 2
    path = tmp_path / "cal.yaml"
    calib.save_calibration(cal, path)
    assert calib.load_calibration(path) == cal


def test_check_tolerates_float32_rounding_of_repeated_sums(tmp_path):
    # 3 ranks, one buffer reduced 25 times in place: 6 * 3^24 is far past 2^24, so the float32
    # sums round; a correct run must still report no wrong elements
    from tests.gloo import workers_launch as w

    out = launch(w.repeated_inplace_sums, 3, "gloo", timeout_s=60, args=(64, 25), result_dir=str(tmp_path))
    row = out[0]
    assert row["buffers"] == 1
    assert row["in_place"]["wrong"] == 0 and row["out_of_place"]["wrong"] == 0


def test_table_format_and_bandwidths_are_the_shared_ones():
    # one home for nccl-tests' conventions: the bench prints and computes with commsim's
    import importlib

    from commsim.output import nccl_table as cli_validate

    busbw_mod = importlib.import_module("commsim.collectives.busbw")

    assert collective_bench.time_cell is cli_validate.time_cell
    assert collective_bench.busbw is busbw_mod.busbw and collective_bench.algbw is busbw_mod.algbw
    head = collective_bench.format_header().splitlines()
    assert [line[:len(p)] for line, p in zip(head, cli_validate.nccl_table_header().splitlines())] == \
        cli_validate.nccl_table_header().splitlines()
    assert head[1].endswith("#wrong     time   algbw   busbw #wrong")
    row = {"size_bytes": 1024, "count": 256, "type": "float", "redop": "sum", "root": -1,
           "out_of_place": {"time_s": 123.456e-6, "algbw_Bps": 8.3e6, "busbw_Bps": 8.3e6, "wrong": 0},
           "in_place": {"time_s": 12345.6e-6, "algbw_Bps": 8.3e4, "busbw_Bps": 8.3e4, "wrong": None}}
    assert collective_bench.format_row(row).split()[5:] == ["123.5", "0.01", "0.01", "0", "12346", "0.00", "0.00", "N/A"]


def test_a_size_of_many_iterations_keeps_marking_progress(group):
    """The hang timer counts progress marks: a size with one mark per column read as hung when
    its --iters ran longer than --timeout, so the loops mark every BEAT_EVERY iterations."""
    marks = []
    every = collective_bench.BEAT_EVERY
    collective_bench.bench_size(64, every, 2 * every, False, torch.device("cpu"), progress=lambda: marks.append(1))
    # per column: one mark after its warm-up, one per BEAT_EVERY warm-up and timed iterations
    assert len(marks) == 2 * (1 + 1 + 2)

"""benchmarks/cross_scale.py --scale-pairs: the same bytes per rank at two ring sizes give a
fixed cost per collective F and a per-step cost s through time = F + steps x s."""

from __future__ import annotations

import io

import pytest

from tests.conftest import load_benchmark

cross_scale = load_benchmark("cross_scale")


def test_fixed_and_step_exact():
    # 130 us + 48 us a step: 7 steps (8 ranks all_gather) and 31 steps (32 ranks)
    F, s = cross_scale.fixed_and_step_us(130 + 7 * 48, 7, 130 + 31 * 48, 31)
    assert F == pytest.approx(130.0)
    assert s == pytest.approx(48.0)


def test_ring_steps_of():
    assert cross_scale.ring_steps_of("all_reduce", 8) == 14
    assert cross_scale.ring_steps_of("all_gather", 32) == 31
    assert cross_scale.ring_steps_of("reduce_scatter", 512) == 511


def test_polaris_pairs_pair_equal_bytes_per_rank():
    series = next(s for s in cross_scale.SERIES if s.name == "Polaris-A100 (NCCL 2.21)")
    rows = cross_scale.scale_pair_rows(series)
    assert {r["kind"] for r in rows} == {"all_reduce", "all_gather"}
    for r in rows:
        assert r["scales"] == "2x4->8x4"
        assert r["size_hi"] == 4 * r["size_lo"]
        assert r["bytes_per_rank"] == r["size_lo"] // 8
        # the line goes through both measured times
        assert r["fixed_us"] + r["steps_lo"] * r["step_us"] == pytest.approx(r["time_lo_us"])
        assert r["fixed_us"] + r["steps_hi"] * r["step_us"] == pytest.approx(r["time_hi_us"])
    ag = {r["size_lo"]: r for r in rows if r["kind"] == "all_gather"}
    # the log's own figures (Polaris 2.21 all_gather 2 MB at 2x4 and 8 MB at 8x4)
    assert ag[2 * 2**20]["time_lo_us"] == pytest.approx(466.7)
    assert ag[2 * 2**20]["time_hi_us"] == pytest.approx(1623.5)
    out = io.StringIO()
    cross_scale.print_scale_pairs(series.name, rows, file=out)
    assert "F (us)" in out.getvalue().splitlines()[2]
    assert "2x4->8x4" in out.getvalue()


def test_unknown_series_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        cross_scale.main(["--scale-pairs", "no-such"])
    assert exc.value.code == 2
    assert "--scale-pairs: no series 'no-such'" in capsys.readouterr().err

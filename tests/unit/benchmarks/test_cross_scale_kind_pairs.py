"""benchmarks/cross_scale.py --scale-pairs, second table: an all_reduce and an all_gather of the
same size at one scale move the same chunk a step over 2 (n - 1) and n - 1 steps, so the pair
gives a fixed cost per collective F and a per-step cost s at that scale alone."""

from __future__ import annotations

import io

import pytest

from tests.conftest import load_benchmark

cross_scale = load_benchmark("cross_scale")


def _polaris_221():
    return next(s for s in cross_scale.SERIES if s.name == "Polaris-A100 (NCCL 2.21)")


def test_pairs_every_scale_with_both_kinds():
    rows = cross_scale.kind_pair_rows(_polaris_221())
    assert {r["scale"] for r in rows} == {"2x4", "8x4"}
    for r in rows:
        n = 8 if r["scale"] == "2x4" else 32
        assert (r["steps_all_reduce"], r["steps_all_gather"]) == (2 * (n - 1), n - 1)
        assert r["bytes_per_rank"] == r["size"] // n
        # the line goes through both measured times
        assert r["fixed_us"] + r["steps_all_gather"] * r["step_us"] == pytest.approx(r["time_all_gather_us"])
        assert r["fixed_us"] + r["steps_all_reduce"] * r["step_us"] == pytest.approx(r["time_all_reduce_us"])


def test_log_figures_at_2x4():
    # the logs' own times at 2x4, 8 MB (1 MiB a rank, ring/Simple in both kinds): 943.1 and 519.1 us,
    # 14 and 7 steps: s = (943.1 - 519.1) / 7, F = 2 x 519.1 - 943.1
    rows = {(r["scale"], r["size"]): r for r in cross_scale.kind_pair_rows(_polaris_221())}
    r = rows[("2x4", 8 * 2**20)]
    assert (r["time_all_reduce_us"], r["time_all_gather_us"]) == pytest.approx((943.1, 519.1))
    assert r["step_us"] == pytest.approx(424.0 / 7)
    assert r["fixed_us"] == pytest.approx(95.1)
    assert (r["pick_all_reduce"], r["pick_all_gather"]) == ("ring/Simple", "ring/Simple")


def test_table():
    out = io.StringIO()
    cross_scale.print_kind_pairs("X", [], file=out)
    assert "no scale with both an all_reduce and an all_gather log" in out.getvalue()
    out = io.StringIO()
    rows = cross_scale.kind_pair_rows(_polaris_221())
    cross_scale.print_kind_pairs("X", rows, file=out)
    lines = out.getvalue().splitlines()
    assert lines[1].startswith("Kind pairs (X)")
    assert "F (us)" in lines[2]
    assert any(line.startswith("2x4") and " 8M " in line and "95.1" in line for line in lines)

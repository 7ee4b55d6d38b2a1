"""Steps, and the scenario inferred from them, on synthetic jobs whose every number is known."""

import math

import numpy as np
import pytest

from commsim.calibration import model_time
from commsim.sim.stragglers import RankStreams, jitter_draws
from commsim.traces.errors import TraceError
from commsim.traces.infer import cv_for_expected_max, expected_max_lognormal, infer, service_times
from commsim.traces.kineto import read_kineto
from commsim.traces.matching import assemble
from commsim.traces.steps import timeline
from tests.unit.traces import synth

ALPHA, BETA = 20e-6, 2e9


def ring(n):
    return lambda size: model_time(ALPHA, BETA, size, n)


def job(n=2, steps=6, gpu=False, **kw):
    plan = synth.plan(n, steps, comm=kw.pop("comm", ring(n)), **kw)
    return assemble([read_kineto(synth.kineto(r, n, plan[r], gpu=gpu, seq=gpu), f"rank{r}.json") for r in range(n)]), plan


@pytest.mark.parametrize("gpu", [False, True])
def test_timeline_phases_are_the_planned_ones(gpu):
    j, plan = job(2, 5, gpu=gpu, sizes=(600_000, 300_000, 100_000))
    tl = timeline(j)
    assert tl.steps == 5 and list(tl.bucket_bytes) == [600_000, 300_000, 100_000]
    for k in range(5):
        for r in range(2):
            st = plan[r][k]
            assert tl.backward_start[k, r] == pytest.approx(st.backward_start, abs=1e-6)
            assert tl.backward_end[k, r] == pytest.approx(st.backward_end, abs=1e-6)
            assert tl.step_end[k, r] == pytest.approx(st.end, abs=1e-6)
            assert tl.comm_end[k, r] == pytest.approx(st.buckets[-1][3], abs=1e-6)
    assert tl.forward[1:] == pytest.approx(0.010, abs=2e-6)
    assert tl.backward == pytest.approx(0.020, abs=2e-6)
    assert tl.optimizer == pytest.approx(0.002, abs=2e-6)
    # the bucket's all-reduce times as the simulator counts them are the planned ring times
    want = [model_time(ALPHA, BETA, s, 2) for s in (600_000, 300_000, 100_000)]
    assert service_times(tl) == pytest.approx(np.tile(want, (5, 1)), abs=1e-6)


def test_infer_recovers_compute_buckets_and_link():
    j, _ = job(4, 6, sizes=(1_000_000, 500_000, 500_000, 250_000))
    inf = infer(timeline(j), [t.host for t in j.traces])
    assert inf.forward == pytest.approx(0.010, abs=2e-6)
    assert inf.backward == pytest.approx(0.020, abs=2e-6)
    assert inf.optimizer == pytest.approx(0.002, abs=2e-6)
    assert (inf.first_bucket, inf.parameters) == (1_000_000, 2_250_000 // 4)
    assert inf.bucket_cap == math.ceil(1_250_000 / 3)
    assert inf.alpha == pytest.approx(ALPHA, rel=1e-3)
    assert inf.bandwidth == pytest.approx(BETA, rel=1e-3)
    assert inf.slow == [] and inf.stalls == [] and inf.jitter_cv == 0.0


def test_infer_finds_a_slow_rank_and_its_factor():
    j, _ = job(4, 6, slow={2: 1.5})
    inf = infer(timeline(j), [None] * 4)
    assert [r for r, _ in inf.slow] == [2]
    assert inf.slow[0][1] == pytest.approx(1.5, rel=0.02)
    assert inf.backward == pytest.approx(0.020, abs=2e-6)  # from the healthy ranks


def test_infer_finds_a_periodic_stall():
    j, _ = job(2, 13, stall={0: (4, 0.05)})
    inf = infer(timeline(j), [None] * 2)
    assert len(inf.stalls) == 1
    st = inf.stalls[0]
    assert st["ranks"] == [0] and st["every"] == 4
    assert st["duration"] == pytest.approx(0.05, abs=1e-5)
    assert inf.forward == pytest.approx(0.010, abs=2e-6)  # the stall is not in the forward


def test_the_first_and_layout_changing_steps_are_left_out():
    plan = synth.plan(2, 5, comm=ring(2))
    odd = synth.plan(2, 1, sizes=(900_000,), comm=ring(2))
    docs = []
    for r in range(2):
        steps = [odd[r][0]] + plan[r]  # a first step with DDP's pre-rebuild layout
        shift = steps[0].end
        for st in steps[1:]:
            st.start += shift; st.backward_start += shift; st.backward_end += shift
            st.optimizer_start += shift; st.end += shift
            st.buckets = [(b[0], b[1] + shift, b[2] + shift, b[3] + shift) for b in st.buckets]
        docs.append(synth.kineto(r, 2, steps))
    tl = timeline(assemble([read_kineto(d, f"rank{r}.json") for r, d in enumerate(docs)]))
    assert tl.steps == 5 and list(tl.step_numbers) == [2, 3, 4, 5, 6]
    assert any("different bucket layout" in n for n in tl.notes)


def test_no_backward_means_no_steps():
    plan = synth.plan(2, 2)
    docs = [synth.kineto(r, 2, plan[r]) for r in range(2)]
    for d in docs:
        d["traceEvents"] = [e for e in d["traceEvents"] if not e["name"].startswith("autograd::")]
    with pytest.raises(TraceError, match="no step with a backward pass on every rank"):
        timeline(assemble([read_kineto(d, f"rank{r}.json") for r, d in enumerate(docs)]))


@pytest.mark.parametrize("cv,n", [(0.05, 2), (0.3, 8), (0.6, 2), (0.2, 256)])
def test_expected_max_of_lognormal_jitter_matches_commsims_draws(cv, n):
    streams = RankStreams(1, 0, list(range(n)))  # n ranks of one straggler entry, 4000 steps
    x = np.stack([jitter_draws(streams, "lognormal", cv, step) for step in range(4000)])
    mc = x.max(axis=1)
    assert expected_max_lognormal(cv, n) == pytest.approx(mc.mean(), abs=4 * mc.std() / math.sqrt(len(mc)))


def test_cv_for_expected_max_inverts_it():
    for cv, n in ((0.1, 2), (0.4, 16), (1.0, 4)):
        assert cv_for_expected_max(expected_max_lognormal(cv, n), n) == pytest.approx(cv, rel=1e-6)
    assert cv_for_expected_max(0.99, 8) == 0.0


def test_gpu_buckets_are_timed_on_the_device_when_the_host_runs_ahead():
    """The host issues every op 4 ms before the GPU runs it: phases and bucket readiness come
    from the kernels (device), so the steps are those of the device timeline."""
    n = 2
    plan = synth.plan(n, 4, comm=ring(n), sizes=(600_000, 300_000, 100_000))
    docs = []
    for r in range(n):
        d = synth.kineto(r, n, plan[r], gpu=True, seq=True)
        for e in d["traceEvents"]:
            if e["cat"] != "kernel":
                e["ts"] -= 4000.0  # microseconds
        docs.append(d)
    tl = timeline(assemble([read_kineto(d, f"rank{r}.json") for r, d in enumerate(docs)]))
    assert tl.steps == 4 and len(tl.bucket_bytes) == 3
    lead = 0.004  # the trace's clock starts at its first (host) event, 4 ms before the plan's zero
    for k in range(4):
        for r in range(n):
            st = plan[r][k]
            assert tl.backward_end[k, r] == pytest.approx(st.backward_end + lead, abs=1e-6)
            assert tl.bucket_issue[k, 0, r] == pytest.approx(st.buckets[0][2] + lead, abs=1e-6)  # the kernel's start


def test_the_fitted_link_keeps_the_measured_total_over_commsims_layout():
    """Bucket times that are no line (gloo runs two at once; one even counts <= 0): the fitted
    ring model, summed over commsim's layout of the same count and bytes, is the measured sum."""
    from commsim.network.costs import ddp_buckets, ring_allreduce_time
    from commsim.traces.infer import _fit_link

    sizes = np.array([919_552, 689_920, 493_056, 328_960, 296_704], dtype=float)
    times = np.array([10.96e-3, 6.8e-3, 5.69e-3, -0.1e-3, 8.07e-3])
    n = 4
    alpha, bw, _ = _fit_link(sizes, times, n)
    first = sizes[0]
    cap = math.ceil((sizes.sum() - first) / 4)
    layout = ddp_buckets(sizes.sum(), first, cap)
    assert len(layout) == 5
    model = sum(ring_allreduce_time(s, n, alpha, bw) for s in layout)
    assert model == pytest.approx(times.sum(), rel=1e-9)

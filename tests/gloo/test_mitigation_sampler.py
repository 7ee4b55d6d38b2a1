"""validate.mitigation_sampler.HardwareSampler on a one-rank gloo group: a slow case's compute is
sampled after the rank's stall, as its step runs it (the ranks' computes overlap as in the steps)."""

import pytest

torch = pytest.importorskip("torch")

from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import validate.mitigation_powersgd_probes as powersgd_probes  # noqa: E402
import validate.mitigation_sampler as sampling  # noqa: E402
from validate.compute_timing import synthetic_model  # noqa: E402


def test_sample_sleeps_the_steps_stall_between_the_barrier_and_the_compute(group, monkeypatch):
    module = synthetic_model(64 * 64 + 64)
    model = DDP(module)
    x = y = torch.randn(4, 64)
    sampler = sampling.HardwareSampler(model, x, y, 64, 4 * (64 * 64 + 64), iters=1)
    events = []
    real_step = sampling.compute_step
    monkeypatch.setattr(sampling.dist, "barrier", lambda *a, **k: events.append("barrier"))
    monkeypatch.setattr(sampling.time, "sleep", lambda s: events.append(("sleep", s)))
    monkeypatch.setattr(sampling, "compute_step", lambda *a: (events.append("compute"), real_step(*a))[1])
    sampler.sample(0.03)
    assert events == ["barrier", ("sleep", 0.03), "compute"]
    del events[:]
    sampler.sample()  # no stall: nothing slept, the ranks side by side after the barrier
    assert events == ["barrier", "compute"]
    assert len(sampler.samples["forward_s"]) == 2


def test_transposed_and_decompress_products_run_inside_an_all_reduce_callback(group, monkeypatch):
    # powerSGD_hook runs M^T P and P Q^T in callbacks chained on an all-reduce's future (on the
    # backend's thread), P = M Q in its body: the sampler times each where the hook runs it
    module = synthetic_model(64 * 64 + 64)
    model = DDP(module)
    x = y = torch.randn(4, 64)
    sampler = sampling.HardwareSampler(model, x, y, 64, 4 * (64 * 64 + 64), iters=1, r=2)
    events = []
    real_reduce, real_bmm = sampling.dist.all_reduce, sampling.torch.bmm
    monkeypatch.setattr(sampling.dist, "all_reduce",
                        lambda *a, **k: (events.append("all_reduce"), real_reduce(*a, **k))[1])
    monkeypatch.setattr(sampling.torch, "bmm", lambda *a, **k: (events.append("bmm"), real_bmm(*a, **k))[1])
    sampler.sample()
    # one matrix: M Q, then an all-reduce and M^T P in its callback, then another and P Q^T
    assert events == ["bmm", "all_reduce", "bmm", "all_reduce", "bmm"]
    assert len(sampler.off_main) == 2 and len(sampler.samples["mtp_s"]) == 1
    assert sampler.result()["products_off_main"] in (0.0, 0.5, 1.0)
    sampler.reset()
    assert sampler.off_main == []


def test_fresh_write_probe_runs_the_hooks_passes_into_new_memory(group):
    module = synthetic_model(64 * 64 + 64)
    x = y = torch.randn(4, 64)
    probe = powersgd_probes.FreshWriteProbe(module, x, y, 1000)
    probe.error.fill_(1.0)
    before = probe.buf.clone()
    first = probe.error
    probe.round()
    # M += error, then the new error M_in - M: a new tensor (zero here: M unchanged in between)
    torch.testing.assert_close(probe.buf, before + 1.0, rtol=0, atol=0)
    assert probe.error is not first and float(probe.error.abs().sum()) == 0.0
    probe.round()
    out = probe.result()
    for mode in ("aligned", "alone"):
        m = out[mode]
        assert m["samples"] == 2
        assert m["bytes_per_s"] == pytest.approx(5 * 4 * 1000 / (m["clone_s"] + m["error_s"]), rel=1e-12)
    per_rank = [{"aligned": {"bytes_per_s": 1.0}, "alone": {"bytes_per_s": 4.0}},
                {"aligned": {"bytes_per_s": 3.0}, "alone": {"bytes_per_s": 6.0}}]
    assert (powersgd_probes.fresh_bw_from_ranks(per_rank, "aligned") == 2.0
            and powersgd_probes.fresh_bw_from_ranks(per_rank, "alone") == 5.0)

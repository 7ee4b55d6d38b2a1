"""One job from per-rank traces: refusals of files that do not belong together, and matching."""

import numpy as np
import pytest

from commsim.traces.errors import TraceError
from commsim.traces.flight_recorder import read_flight_recorder
from commsim.traces.kineto import read_kineto
from commsim.traces.matching import assemble
from tests.unit.traces import synth


def traces(n=2, steps=3, **kw):
    opts = {k: kw.pop(k) for k in list(kw) if k in ("gpu", "seq", "host", "step_spans", "first_step")}
    plan = synth.plan(n, steps, **kw)
    return [read_kineto(synth.kineto(r, n, plan[r], **opts), f"rank{r}.json") for r in range(n)], plan


def test_matched_collectives_carry_every_rank_time():
    ts, plan = traces(3, 2, late={2: 0.05})
    job = assemble(ts)
    assert job.world_size == 3 and len(job.collectives) == 4
    assert job.matched_by == "profiler step and order"
    c = job.collectives[1]  # step 1, bucket 1: issued after rank 2's delay
    for r in range(3):
        assert c.issue[r] == pytest.approx(plan[r][0].buckets[1][1], abs=1e-9)
    assert np.argmax(c.issue) == 2


def test_matching_by_sequence_number():
    ts, _ = traces(2, 2, gpu=True, seq=True)
    assert assemble(ts).matched_by == "sequence number"


def test_matching_by_order_with_shifted_windows():
    """No step spans: the ranks' traces start at different collectives."""
    plan = synth.plan(2, 4, sizes=(300_000, 200_000, 100_000))
    t0 = read_kineto(synth.kineto(0, 2, plan[0], step_spans=False), "rank0.json")
    t1 = read_kineto(synth.kineto(1, 2, plan[1][1:], step_spans=False), "rank1.json")  # one step later
    job = assemble([t0, t1])
    assert job.matched_by == "order"
    assert len(job.collectives) == 9
    for c in job.collectives:
        assert c.issue[0] == pytest.approx(c.issue[1], abs=1e-9)  # the same bucket on both ranks
    assert any("starts 3 collectives" in n for n in job.notes)


def test_one_rank_only():
    ts, _ = traces(2)
    with pytest.raises(TraceError, match=r"^rank0\.json: a trace of one rank only \(rank 0 of 2\)"):
        assemble(ts[:1])


def test_missing_ranks():
    ts, _ = traces(4)
    with pytest.raises(TraceError, match="ranks 2 of world size 4 are missing"):
        assemble([ts[0], ts[1], ts[3]])


def test_two_traces_of_one_rank():
    ts, _ = traces(2)
    with pytest.raises(TraceError, match=r"rank0\.json: is rank 0, and so is rank0\.json"):
        assemble([ts[0], ts[0]])


def test_world_sizes_differ():
    a, _ = traces(2)
    b, _ = traces(4)
    with pytest.raises(TraceError, match="ranks from different jobs: their world sizes differ"):
        assemble([a[0], b[1]])


def test_no_collectives():
    ts, _ = traces(2, sizes=())
    with pytest.raises(TraceError, match="no collectives in any trace"):
        assemble(ts)


def test_mismatched_collectives_are_different_jobs():
    a, _ = traces(2, sizes=(400_000, 200_000))
    b, _ = traces(2, sizes=(400_000, 100_000))
    with pytest.raises(TraceError, match=r"rank1\.json: .*is all_reduce of 100000 B on rank 1 but all_reduce of "
                                         r"200000 B on rank 0 .*ranks from different jobs"):
        assemble([a[0], b[1]])


def test_traces_that_do_not_overlap_in_time_are_different_runs():
    plan = synth.plan(2, 2)
    t0 = read_kineto(synth.kineto(0, 2, plan[0]), "rank0.json")
    t1 = read_kineto(synth.kineto(1, 2, plan[1], offset_s=3600.0), "rank1.json")
    with pytest.raises(TraceError, match=r"rank1\.json: ranks from different jobs or runs: it begins 3\.6e\+03 s"):
        assemble([t0, t1])


def test_hosts_clocks_are_aligned_on_collective_ends():
    plan = synth.plan(2, 3, late={1: 0.01})
    t0 = read_kineto(synth.kineto(0, 2, plan[0], host="a"), "rank0.json")
    t1 = read_kineto(synth.kineto(1, 2, plan[1], host="b", offset_s=0.25), "rank1.json")  # its clock is 250 ms ahead
    job = assemble([t0, t1])
    for c in job.collectives:
        assert c.end[1] == pytest.approx(c.end[0], abs=1e-9)
    late = job.collectives[1]  # rank 1's delay survives the alignment
    assert late.issue[1] - late.issue[0] == pytest.approx(0.01, abs=1e-9)
    assert any("clocks aligned" in n for n in job.notes)


def test_flight_recorder_dumps_match_by_sequence_number():
    plan = synth.plan(2, 3, late={0: 0.02})
    ts = [read_flight_recorder(synth.flight_recorder(r, 2, plan[r]), f"fr_rank{r}") for r in range(2)]
    job = assemble(ts)
    assert job.matched_by == "sequence number" and len(job.collectives) == 6
